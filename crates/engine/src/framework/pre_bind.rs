//! PreBind's API work. The engine makes no API call: a PreBind plugin
//! describes the writes it needs (and what to wait for after them) as a
//! [`PreBindWork`] in the cycle state ([`CycleState::add_pre_bind_work`]);
//! the daemon's writer carries each one out off the scheduling loop, before
//! the bind, as upstream's binding goroutine runs PreBind. The work names its
//! plugin, so the writer reports a failure as
//! `running PreBind plugin "<plugin>": ...` without knowing the plugin.
//!
//! A new kind of write is a new [`ApiWrite`] (or [`WaitFor`]) variant and its
//! execution in the writer; the loop that carries the work does not change.

use std::time::Duration;

use super::CycleState;
use crate::cache::storage::StaticBinding;

/// One API write a PreBind plugin asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiWrite {
    /// Set the PV's spec.claimRef to the claim (kind PersistentVolumeClaim,
    /// apiVersion v1, namespace, name, uid; the claim's uid is read when
    /// empty) and, unless it was pre-bound to it, the annotation
    /// `pv.kubernetes.io/bound-by-controller: "yes"` (upstream `bindAPIUpdate`).
    /// While the work waits, the claimRef must stay and the PV's node
    /// affinity must admit the node.
    BindVolume(StaticBinding),
    /// Set the claim's annotation `volume.kubernetes.io/selected-node: <node>`
    /// so that it is provisioned for the node. While the work waits, the
    /// annotation must stay (its removal means provisioning failed).
    SelectNode {
        /// The claim's namespace.
        namespace: String,
        /// The claim's name.
        name: String,
    },
    /// DynamicResources (upstream `bindClaim`): on the ResourceClaim
    /// `namespace/name` whose metadata.uid is `uid` (a claim re-created under
    /// the same name is not touched), add the finalizer
    /// `resource.kubernetes.io/delete-protection` when missing, then in one
    /// status update set status.allocation to `allocation` (when Some; None
    /// for a claim that was allocated already) and add
    /// `{resource: "pods", name: pod_name, uid: pod_uid}` to
    /// status.reservedFor (unless already there). A claim allocated
    /// meanwhile to something else, or being deleted, fails the work.
    AllocateClaim {
        /// The claim's namespace (the pod's).
        namespace: String,
        /// The claim's name.
        name: String,
        /// The claim's metadata.uid.
        uid: String,
        /// status.allocation to write, as the JSON of a resource.k8s.io/v1
        /// AllocationResult; None when the claim is allocated already.
        allocation: Option<serde_json::Value>,
        /// The pod's name (the reservedFor entry).
        pod_name: String,
        /// The pod's uid (the reservedFor entry).
        pod_uid: String,
    },
    /// DynamicResources with DRAExtendedResource: create the pod's special
    /// ResourceClaim for the extended resources a DeviceClass backs
    /// (`claim`, the JSON of a resource.k8s.io/v1 ResourceClaim with
    /// metadata.generateName `<pod>-extended-resources-`, the annotation
    /// `resource.kubernetes.io/extended-resource-claim: "true"`, the pod as
    /// controlling owner, its spec, and status.allocation and reservedFor to
    /// write once created), then record it in the pod's
    /// status.extendedResourceClaimStatus (`request_mappings`: container
    /// name, extended resource name, request name).
    CreateExtendedResourceClaim {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        pod_name: String,
        /// The pod's uid.
        pod_uid: String,
        /// The claim to create (with its status to write).
        claim: serde_json::Value,
        /// (container name, resource name, request name) per request.
        request_mappings: Vec<(String, String, String)>,
    },
}

/// A claim deallocation a PostFilter plugin asks for when no node fits
/// (upstream's DynamicResources PostFilter, which makes the update itself):
/// on the ResourceClaim `namespace/name` whose metadata.uid is `uid`, in one
/// status update conditional on the resourceVersion read, clear
/// status.allocation, status.reservedFor and status.devices, provided that
/// reservedFor is still empty or holds only the pod `pod_uid` (otherwise the
/// write is dropped: the claim is in use by someone else). Nothing waits on
/// it: the claim's update event requeues the pod, which then allocates anew.
///
/// Kept apart from [`ApiWrite`]: it is no PreBind step but a write the
/// caller makes after an unschedulable cycle (the daemon's writer,
/// `Writer::deallocate_claim`; the offline run applies it to its snapshot).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeallocateClaim {
    /// The claim's namespace (the pod's).
    pub namespace: String,
    /// The claim's name.
    pub name: String,
    /// The claim's metadata.uid.
    pub uid: String,
    /// The pod that could not be scheduled (the only consumer allowed).
    pub pod_uid: String,
}

/// What the work waits for once its writes are made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitFor {
    /// The claim is fully bound: spec.volumeName set and
    /// `pv.kubernetes.io/bind-completed` present (and, for a claim of a
    /// [`ApiWrite::SelectNode`], its provisioned PV admits the node). The
    /// wait fails when the pod is deleted.
    ClaimBound {
        /// The claim's namespace.
        namespace: String,
        /// The claim's name.
        name: String,
    },
}

/// The API work of one PreBind plugin for one pod: its writes in order, then
/// a wait until every condition holds, all within `timeout`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreBindWork {
    /// The plugin whose work this is (named when it fails).
    pub plugin: &'static str,
    /// The writes, made in this order.
    pub writes: Vec<ApiWrite>,
    /// Then wait until each of these holds (nothing to wait for when empty).
    pub wait_for: Vec<WaitFor>,
    /// Upper bound of the writes and the wait.
    pub timeout: Duration,
}

impl PreBindWork {
    /// The PVs the work binds, in order.
    pub fn volume_bindings(&self) -> impl Iterator<Item = &StaticBinding> {
        self.writes.iter().filter_map(|w| match w {
            ApiWrite::BindVolume(b) => Some(b),
            _ => None,
        })
    }

    /// Is the claim one the work asks to provision (a [`ApiWrite::SelectNode`])?
    pub fn provisions(&self, namespace: &str, name: &str) -> bool {
        self.writes.iter().any(|w| matches!(w, ApiWrite::SelectNode { namespace: n, name: m } if n == namespace && m == name))
    }
}

impl CycleState {
    /// Records a PreBind plugin's API work, replacing what the same plugin
    /// recorded before.
    pub fn add_pre_bind_work(&mut self, work: PreBindWork) {
        self.pre_bind.retain(|w| w.plugin != work.plugin);
        self.pre_bind.push(work);
    }

    /// The API work PreBind plugins recorded, in the order they ran.
    pub fn pre_bind_work(&self) -> &[PreBindWork] {
        &self.pre_bind
    }

    /// Takes the recorded API work, for the binding cycle.
    pub fn take_pre_bind_work(&mut self) -> Vec<PreBindWork> {
        std::mem::take(&mut self.pre_bind)
    }
}
