//! The volumes of a pod that the storage plugins read, compiled once per pod
//! version. Volumes no scheduling plugin looks at (emptyDir, configMap,
//! secret, ...) are not kept, so a pod without storage has an empty list.

use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;

/// Where a volume of the pod comes from, as far as scheduling cares.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum VolumeSource {
    /// `persistentVolumeClaim`: a claim in the pod's namespace.
    Claim {
        /// claimName.
        claim: String,
    },
    /// `ephemeral`: a generic ephemeral volume, whose claim is `<pod>-<volume>`
    /// and must be owned by the pod.
    Ephemeral {
        /// The claim's name.
        claim: String,
    },
    /// In-tree `gcePersistentDisk`.
    GcePd {
        /// pdName.
        pd_name: String,
        /// readOnly.
        read_only: bool,
    },
    /// In-tree `awsElasticBlockStore`.
    AwsEbs {
        /// volumeID.
        volume_id: String,
    },
    /// In-tree `rbd`.
    Rbd {
        /// monitors.
        monitors: Vec<String>,
        /// pool ("rbd" when unset).
        pool: String,
        /// image.
        image: String,
        /// readOnly.
        read_only: bool,
    },
    /// In-tree `iscsi`.
    Iscsi {
        /// iqn.
        iqn: String,
        /// readOnly.
        read_only: bool,
    },
}

/// One volume of a pod.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodVolume {
    /// The volume's name in the pod.
    pub name: String,
    /// Its source.
    pub source: VolumeSource,
}

impl PodVolume {
    /// The claim this volume uses (persistentVolumeClaim or generic ephemeral).
    pub fn claim(&self) -> Option<&str> {
        match &self.source {
            VolumeSource::Claim { claim } | VolumeSource::Ephemeral { claim } => Some(claim),
            _ => None,
        }
    }

    /// Is this a generic ephemeral volume?
    pub fn is_ephemeral(&self) -> bool {
        matches!(self.source, VolumeSource::Ephemeral { .. })
    }

    /// Is this one of the in-tree sources VolumeRestrictions checks for disk conflicts?
    pub fn is_disk(&self) -> bool {
        matches!(self.source, VolumeSource::GcePd { .. } | VolumeSource::AwsEbs { .. } | VolumeSource::Rbd { .. } | VolumeSource::Iscsi { .. })
    }

    /// Do two volumes (of two pods on one node) conflict, as upstream's
    /// VolumeRestrictions judges in-tree disks: the same GCE PD unless both are
    /// read-only, the same EBS volume, the same iSCSI IQN unless both are
    /// read-only, the same RBD image in the same pool behind a shared monitor
    /// unless both are read-only.
    pub fn conflicts_with(&self, other: &PodVolume) -> bool {
        use VolumeSource::*;
        match (&self.source, &other.source) {
            (GcePd { pd_name: a, read_only: ra }, GcePd { pd_name: b, read_only: rb }) => a == b && !(*ra && *rb),
            (AwsEbs { volume_id: a }, AwsEbs { volume_id: b }) => a == b,
            (Iscsi { iqn: a, read_only: ra }, Iscsi { iqn: b, read_only: rb }) => a == b && !(*ra && *rb),
            (Rbd { monitors: ma, pool: pa, image: ia, read_only: ra }, Rbd { monitors: mb, pool: pb, image: ib, read_only: rb }) => {
                ma.iter().any(|m| mb.contains(m)) && pa == pb && ia == ib && !(*ra && *rb)
            }
            _ => false,
        }
    }
}

/// The scheduling-relevant volumes of a pod spec (empty, and not allocated,
/// for pods that have none).
pub fn from_spec(pod_name: &str, spec: &core::PodSpec) -> Arc<[PodVolume]> {
    let Some(vols) = spec.volumes.as_ref() else { return no_volumes() };
    let out: Vec<PodVolume> = vols
        .iter()
        .filter_map(|v| {
            let source = if let Some(c) = &v.persistent_volume_claim {
                VolumeSource::Claim { claim: c.claim_name.clone() }
            } else if v.ephemeral.is_some() {
                VolumeSource::Ephemeral { claim: format!("{pod_name}-{}", v.name) }
            } else if let Some(g) = &v.gce_persistent_disk {
                VolumeSource::GcePd { pd_name: g.pd_name.clone(), read_only: g.read_only.unwrap_or(false) }
            } else if let Some(a) = &v.aws_elastic_block_store {
                VolumeSource::AwsEbs { volume_id: a.volume_id.clone() }
            } else if let Some(r) = &v.rbd {
                VolumeSource::Rbd {
                    monitors: r.monitors.clone(),
                    pool: r.pool.clone().filter(|p| !p.is_empty()).unwrap_or_else(|| "rbd".into()),
                    image: r.image.clone(),
                    read_only: r.read_only.unwrap_or(false),
                }
            } else if let Some(i) = &v.iscsi {
                VolumeSource::Iscsi { iqn: i.iqn.clone(), read_only: i.read_only.unwrap_or(false) }
            } else {
                return None;
            };
            Some(PodVolume { name: v.name.clone(), source })
        })
        .collect();
    if out.is_empty() { no_volumes() } else { Arc::from(out) }
}

/// The one empty volume list every pod without such volumes shares (an
/// `Arc<[T]>` allocates its counts even when empty).
fn no_volumes() -> Arc<[PodVolume]> {
    static NONE: std::sync::LazyLock<Arc<[PodVolume]>> = std::sync::LazyLock::new(|| Arc::from(Vec::new()));
    NONE.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vol(name: &str) -> core::Volume {
        core::Volume { name: name.into(), ..Default::default() }
    }

    #[test]
    fn compiles_the_sources_that_matter() {
        let spec = core::PodSpec {
            volumes: Some(vec![
                core::Volume { persistent_volume_claim: Some(core::PersistentVolumeClaimVolumeSource { claim_name: "data".into(), read_only: None }), ..vol("a") },
                core::Volume { ephemeral: Some(core::EphemeralVolumeSource::default()), ..vol("scratch") },
                core::Volume { empty_dir: Some(core::EmptyDirVolumeSource::default()), ..vol("tmp") },
                core::Volume { rbd: Some(core::RBDVolumeSource { monitors: vec!["m".into()], image: "i".into(), ..Default::default() }), ..vol("r") },
            ]),
            ..Default::default()
        };
        let v = from_spec("web-0", &spec);
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].claim(), Some("data"));
        assert_eq!(v[1].claim(), Some("web-0-scratch"));
        assert!(v[1].is_ephemeral());
        assert_eq!(v[2].source, VolumeSource::Rbd { monitors: vec!["m".into()], pool: "rbd".into(), image: "i".into(), read_only: false });
        assert!(from_spec("p", &core::PodSpec::default()).is_empty());
    }

    #[test]
    fn disk_conflicts() {
        let gce = |n: &str, ro: bool| PodVolume { name: "v".into(), source: VolumeSource::GcePd { pd_name: n.into(), read_only: ro } };
        let rbd = |mons: &[&str], ro: bool| PodVolume {
            name: "v".into(),
            source: VolumeSource::Rbd { monitors: mons.iter().map(|s| s.to_string()).collect(), pool: "p".into(), image: "i".into(), read_only: ro },
        };
        let rows = [
            (gce("a", false), gce("a", false), true),
            (gce("a", true), gce("a", true), false),
            (gce("a", true), gce("a", false), true),
            (gce("a", false), gce("b", false), false),
            (rbd(&["m1", "m2"], false), rbd(&["m2"], false), true),
            (rbd(&["m1"], false), rbd(&["m2"], false), false),
            (rbd(&["m1"], true), rbd(&["m1"], true), false),
        ];
        for (i, (a, b, want)) in rows.iter().enumerate() {
            assert_eq!(a.conflicts_with(b), *want, "row {i}");
        }
    }
}
