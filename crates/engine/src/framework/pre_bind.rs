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
            ApiWrite::SelectNode { .. } => None,
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
