//! GangScheduling: pods of a pod group are placed all together or not at all.
//!
//! The all-or-nothing decision itself is the group cycle's
//! ([`crate::framework::group`]): it runs each pending member through the
//! normal cycle with the members placed so far assumed and binds them only
//! when at least minCount have a place. This plugin is the per-pod part, as
//! upstream's plugin is (PreEnqueue there; PreFilter here, since berth's
//! PreEnqueue does not see the cluster's group objects):
//!
//! - a pod whose group object does not exist (yet) waits, with upstream's
//!   message, and is retried when the group appears;
//! - while the group cycle tries one topology domain of the group's
//!   `schedulingConstraints.topology` key, the member's nodes are narrowed to
//!   that domain.
//!
//! Its events: a PodGroup added or updated (minCount lowered), a pod added.

use serde::Deserialize;

use crate::cache::Snapshot;
use crate::framework::group::GANG_PLUGIN;
use crate::framework::{CycleState, Events, Plugin, PreFilterNodes, PreFilterPlugin, Status};
use berth_model::PodInfo;

pub use crate::framework::group::missing_group_message;

/// Plugin name (the group cycle's vocabulary: its rejections carry it).
pub const NAME: &str = GANG_PLUGIN;

/// GangSchedulingArgs (berth's; upstream's plugin takes none). Every field is
/// optional; unknown fields are refused.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    /// scheduler-plugins' `permitWaitingTimeSeconds` (its default 60), accepted
    /// so that a Coscheduling configuration carries over. It bounds how long
    /// members wait at Permit there; berth's group cycle holds nothing between
    /// attempts, so it (like a group's `scheduleTimeoutSeconds`) changes nothing.
    pub permit_waiting_time_seconds: Option<i64>,
}

/// scheduler-plugins' default `permitWaitingTimeSeconds`.
pub const DEFAULT_PERMIT_WAITING_TIME_SECONDS: i64 = 60;

/// The plugin.
#[derive(Debug, Default)]
pub struct GangScheduling {
    /// Validated args.
    pub args: Args,
}

impl GangScheduling {
    /// Validates the args; the error names the field.
    pub fn new(args: Args) -> Result<Self, String> {
        if let Some(s) = args.permit_waiting_time_seconds
            && s <= 0
        {
            return Err(format!("permitWaitingTimeSeconds: must be greater than 0, got {s}"));
        }
        Ok(GangScheduling { args })
    }
}

impl Plugin for GangScheduling {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> Events {
        Events::POD_GROUP.or(Events::POD_ADD)
    }
}

impl PreFilterPlugin for GangScheduling {
    fn pre_filter(&self, _: &mut CycleState, pod: &PodInfo, snap: &Snapshot) -> (Status, PreFilterNodes) {
        let Some(r) = &pod.group else { return (Status::skip(), None) };
        match snap.groups.get(&pod.namespace, r) {
            None => return (Status::unresolvable(missing_group_message(&r.name)), None),
            Some(Err(e)) => return (Status::unresolvable(e.to_string()), None),
            Some(Ok(_)) => {}
        }
        let Some((key, value)) = &snap.groups.placement else { return (Status::success(), None) };
        let nodes = snap.nodes.iter().filter(|n| n.node.labels.get(key) == Some(value)).map(|n| n.name().to_string()).collect();
        (Status::success(), Some(nodes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::groups::GroupPolicy;
    use crate::framework::Code;
    use berth_model::pod::{GroupApi, POD_GROUP_LABEL};
    use crate::testing::{node, pod};

    #[test]
    fn table() {
        let pl = GangScheduling::default();
        let mut snap = Snapshot::new();
        snap.upsert_node(node("a").label("zone", "z1").spec());
        snap.upsert_node(node("b").label("zone", "z2").spec());
        let member = pod("m").label(POD_GROUP_LABEL, "g").info();
        let run = |snap: &Snapshot, p: &PodInfo| pl.pre_filter(&mut CycleState::new(), p, snap);
        // Not a member: nothing to do.
        assert!(run(&snap, &pod("p").info()).0.is_skip());
        // The group does not exist yet.
        let (s, _) = run(&snap, &member);
        assert_eq!((s.code, s.message()), (Code::UnschedulableAndUnresolvable, "waiting for pod's pod group \"g\" to appear in scheduling queue".to_string()));
        // It exists.
        snap.groups.upsert(GroupApi::V1alpha1, "default", "g", GroupPolicy::from_v1alpha1("default", "g", &serde_json::json!({"spec": {"minMember": 2}})));
        assert_eq!(run(&snap, &member), (Status::success(), None));
        // A domain is being tried.
        snap.groups.placement = Some(("zone".into(), "z2".into()));
        assert_eq!(run(&snap, &member).1, Some(["b".to_string()].into_iter().collect()));
        // A bad group object: its message.
        snap.groups.upsert(GroupApi::V1alpha1, "default", "g", GroupPolicy::from_v1alpha1("default", "g", &serde_json::json!({"spec": {"minMember": -2}})));
        assert!(run(&snap, &member).0.message().contains("spec.minMember"));
    }

    #[test]
    fn args_validated() {
        assert!(GangScheduling::new(Args { permit_waiting_time_seconds: Some(0) }).is_err());
        assert!(GangScheduling::new(Args { permit_waiting_time_seconds: Some(30) }).is_ok());
    }
}
