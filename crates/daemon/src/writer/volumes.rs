//! VolumeBinding's PreBind work: PV claimRefs, claims' selected node, then
//! the wait until the PV controller and the provisioner have bound them.

use std::time::Duration;

use futures::TryFutureExt;
use k8s_openapi::api::core::v1 as core;
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;

use berth_engine::cache::storage::{self as vol, StaticBinding};
use berth_engine::framework::{PreBindWork, WaitFor};
use berth_model::PodInfo;

use super::guarded::{Patience, Subject, WriteKind, Written};
use super::{api_code, stop, PreBindStop, Writer};


/// How one PreBind write ended.
enum VolumeWrite {
    /// Written (or found written when read back).
    Done,
    /// The object changed under us (409): read it again and retry.
    Conflict(String),
    /// Known not written, for this reason.
    Refused(String),
    /// Not leader any more: not attempted.
    NotLeader,
}

/// What one poll of the PreBind wait found.
enum Bound {
    /// Every claim is fully bound.
    All,
    /// Not yet.
    NotYet,
    /// Binding cannot succeed (upstream `checkBindings` errors).
    Failed(String),
    /// The pod is gone.
    PodGone,
}

/// Attempts at one PV or claim write when it conflicts (409) with another writer.
const VOLUME_WRITE_TRIES: u32 = 3;

/// Fully bound, as the binder reads it: a volume name and the bind-completed annotation.
pub(super) fn claim_fully_bound(c: &core::PersistentVolumeClaim) -> bool {
    c.spec.as_ref().and_then(|s| s.volume_name.as_deref()).is_some_and(|v| !v.is_empty()) && c.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(vol::ANN_BIND_COMPLETED))
}

pub(super) fn selected_node_of(c: &core::PersistentVolumeClaim) -> Option<&str> {
    c.metadata.annotations.as_ref().and_then(|a| a.get(vol::ANN_SELECTED_NODE)).map(String::as_str)
}

impl Writer {
    /// One PreBind write, guarded ([`Writer::guarded`]); `landed` reads the
    /// object back when the outcome is unknown.
    async fn volume_write<W, WFut, L, LFut>(&self, deadline: tokio::time::Instant, subject: &str, write: W, landed: L) -> Result<VolumeWrite, PreBindStop>
    where
        W: FnOnce() -> WFut,
        WFut: std::future::Future<Output = Result<(), kube::Error>>,
        L: Fn() -> LFut,
        LFut: std::future::Future<Output = Result<bool, kube::Error>>,
    {
        Ok(match self.guarded(WriteKind::Volume, deadline, Patience::Until(deadline), Subject::Object(subject), write, landed).await? {
            Written::Done(()) | Written::ReadBack { found: true, .. } => VolumeWrite::Done,
            Written::Refused(e) if api_code(&e) == Some(409) => VolumeWrite::Conflict(e.to_string()),
            Written::Refused(e) => VolumeWrite::Refused(e.to_string()),
            Written::ReadBack { why, .. } => VolumeWrite::Refused(why),
            Written::NotLeader => VolumeWrite::NotLeader,
        })
    }

    /// VolumeBinding's wait (upstream `waitForBindings`): polls, at most
    /// until `deadline`, until the PV controller and the provisioner have
    /// bound every claim of `work.wait_for`.
    pub(super) async fn wait_bound(&self, pod: &PodInfo, node: &str, work: &PreBindWork, deadline: tokio::time::Instant) -> Result<(), PreBindStop> {
        if work.wait_for.is_empty() {
            return Ok(());
        }
        let nodes: Api<core::Node> = Api::all(self.client.clone());
        let labels = match self.read(deadline, || nodes.get_opt(node)).await? {
            Some(n) => n.metadata.labels.unwrap_or_default(),
            None => return Err(stop(format!("binding volumes: failed to get node {node:?}: nodes {node:?} not found"))),
        };
        let mut pause = Duration::from_millis(100);
        loop {
            match self.check_bindings(pod, node, &labels, work).await {
                Bound::All => return Ok(()),
                Bound::PodGone => return Err(PreBindStop::Gone),
                Bound::Failed(m) => return Err(stop(format!("binding volumes: {m}"))),
                Bound::NotYet => {}
            }
            if tokio::time::Instant::now() + pause > deadline {
                return Err(stop("binding volumes: context deadline exceeded"));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// Sets a PV's claimRef to the claim (upstream `GetBindVolumeToClaim`,
    /// then the update of `bindAPIUpdate`).
    pub(super) async fn bind_pv(&self, b: &StaticBinding, deadline: tokio::time::Instant) -> Result<(), PreBindStop> {
        let pvs: Api<core::PersistentVolume> = Api::all(self.client.clone());
        let claims: Api<core::PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &b.claim.namespace);
        let uid = if b.claim.uid.is_empty() {
            match self.read(deadline, || claims.get_opt(&b.claim.name)).await? {
                Some(c) => c.metadata.uid.unwrap_or_default(),
                None => return Err(stop(format!("persistentvolumeclaims {:?} not found", b.claim.name))),
            }
        } else {
            b.claim.uid.clone()
        };
        let mut last = String::new();
        for _ in 0..VOLUME_WRITE_TRIES {
            let Some(pv) = self.read(deadline, || pvs.get_opt(&b.pv)).await? else {
                return Err(stop(format!("persistentvolumes {:?} not found", b.pv)));
            };
            let current = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
            let to_claim = current.is_some_and(|r| r.name.as_deref() == Some(&b.claim.name) && r.namespace.as_deref() == Some(&b.claim.namespace));
            if current.is_some() && !to_claim {
                return Err(stop(format!("persistentvolume {:?} is bound to another claim", b.pv)));
            }
            let current_uid = current.and_then(|r| r.uid.as_deref()).unwrap_or_default();
            if to_claim && current_uid == uid {
                return Ok(());
            }
            if to_claim && !current_uid.is_empty() {
                return Err(stop(format!("persistentvolume {:?} is bound to another claim of the same name", b.pv)));
            }
            let mut patch = json!({
                "metadata": {"resourceVersion": pv.metadata.resource_version},
                "spec": {"claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": b.claim.namespace, "name": b.claim.name, "uid": uid}},
            });
            if !to_claim {
                patch["metadata"]["annotations"] = json!({ vol::ANN_BOUND_BY_CONTROLLER: "yes" });
            }
            let (pvs_r, uid_r) = (&pvs, &uid);
            let landed = move || async move {
                let pv = pvs_r.get_opt(&b.pv).await?;
                Ok::<bool, kube::Error>(pv.and_then(|p| p.spec?.claim_ref).is_some_and(|r| r.name.as_deref() == Some(&b.claim.name) && r.namespace.as_deref() == Some(&b.claim.namespace) && r.uid.as_deref() == Some(uid_r)))
            };
            let (pp, mp) = (PatchParams::default(), Patch::Merge(&patch));
            match self.volume_write(deadline, &b.pv, || pvs.patch(&b.pv, &pp, &mp).map_ok(|_| ()), landed).await? {
                VolumeWrite::Done => return Ok(()),
                VolumeWrite::Conflict(m) => last = m,
                VolumeWrite::Refused(m) => return Err(stop(m)),
                VolumeWrite::NotLeader => return Err(PreBindStop::NotLeader),
            }
        }
        Err(stop(last))
    }

    /// Asks for a claim to be provisioned on `node` (the selected-node annotation).
    pub(super) async fn select_node(&self, ns: &str, name: &str, node: &str, deadline: tokio::time::Instant) -> Result<(), PreBindStop> {
        let claims: Api<core::PersistentVolumeClaim> = Api::namespaced(self.client.clone(), ns);
        let mut last = String::new();
        for _ in 0..VOLUME_WRITE_TRIES {
            let Some(c) = self.read(deadline, || claims.get_opt(name)).await? else {
                return Err(stop(format!("persistentvolumeclaims {name:?} not found")));
            };
            if c.metadata.deletion_timestamp.is_some() {
                return Err(stop(format!("persistentvolumeclaim {name:?} is being deleted")));
            }
            if selected_node_of(&c) == Some(node) {
                return Ok(());
            }
            let patch = json!({"metadata": {"resourceVersion": c.metadata.resource_version, "annotations": { vol::ANN_SELECTED_NODE: node }}});
            let claims_r = &claims;
            let landed = move || async move { Ok::<bool, kube::Error>(claims_r.get_opt(name).await?.is_some_and(|c| selected_node_of(&c) == Some(node))) };
            let (pp, mp) = (PatchParams::default(), Patch::Merge(&patch));
            match self.volume_write(deadline, name, || claims.patch(name, &pp, &mp).map_ok(|_| ()), landed).await? {
                VolumeWrite::Done => return Ok(()),
                VolumeWrite::Conflict(m) => last = m,
                VolumeWrite::Refused(m) => return Err(stop(m)),
                VolumeWrite::NotLeader => return Err(PreBindStop::NotLeader),
            }
        }
        Err(stop(last))
    }

    /// One poll of the wait (upstream `checkBindings`), on the API's objects.
    async fn check_bindings(&self, pod: &PodInfo, node: &str, labels: &berth_model::selector::Labels, work: &PreBindWork) -> Bound {
        let pods: Api<core::Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        match pods.get_opt(&pod.name).await {
            Ok(None) => return Bound::PodGone,
            Ok(Some(p)) if p.metadata.uid.as_deref().is_some_and(|u| u != pod.uid) => return Bound::PodGone,
            Ok(Some(_)) => {}
            Err(e) if api_code(&e) == Some(404) => return Bound::PodGone,
            Err(_) => return Bound::NotYet,
        }
        let pvs: Api<core::PersistentVolume> = Api::all(self.client.clone());
        let affinity = |pv: &core::PersistentVolume| -> Option<String> {
            let v = vol::Volume::from_api(pv);
            if let Some(e) = &v.error {
                return Some(e.to_string());
            }
            (!v.admits(node, labels)).then(|| format!("pv {:?} node affinity doesn't match node {node:?}: no matching NodeSelectorTerms", v.name))
        };
        for b in work.volume_bindings() {
            let pv = match pvs.get_opt(&b.pv).await {
                Ok(Some(pv)) => pv,
                Ok(None) => return Bound::Failed(format!("failed to check binding: persistentvolumes {:?} not found", b.pv)),
                Err(_) => return Bound::NotYet,
            };
            if let Some(m) = affinity(&pv) {
                return Bound::Failed(m);
            }
            match pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
                Some(r) if r.uid.as_deref().is_some_and(|u| !u.is_empty()) => {
                    if r.name.as_deref() != Some(&b.claim.name) || r.namespace.as_deref() != Some(&b.claim.namespace) {
                        return Bound::Failed(format!("pv {:?} was bound to another claim", b.pv));
                    }
                }
                _ => return Bound::Failed(format!("ClaimRef got reset for pv {:?}", b.pv)),
            }
        }
        for w in &work.wait_for {
            let WaitFor::ClaimBound { namespace: ns, name } = w;
            let claims: Api<core::PersistentVolumeClaim> = Api::namespaced(self.client.clone(), ns);
            let c = match claims.get_opt(name).await {
                Ok(Some(c)) => c,
                Ok(None) => return Bound::Failed(format!("failed to check binding: persistentvolumeclaims {name:?} not found")),
                Err(_) => return Bound::NotYet,
            };
            let provisioning = work.provisions(ns, name);
            if provisioning {
                if selected_node_of(&c) != Some(node) {
                    return Bound::Failed(format!("provisioning failed for PVC {name:?}"));
                }
                if let Some(v) = c.spec.as_ref().and_then(|s| s.volume_name.as_deref()).filter(|v| !v.is_empty()) {
                    match pvs.get_opt(v).await {
                        Ok(Some(pv)) => {
                            if let Some(m) = affinity(&pv) {
                                return Bound::Failed(m);
                            }
                        }
                        // Not seen yet (or being replaced): look again next time.
                        Ok(None) | Err(_) => return Bound::NotYet,
                    }
                }
            }
            if !claim_fully_bound(&c) {
                return Bound::NotYet;
            }
        }
        Bound::All
    }
}
