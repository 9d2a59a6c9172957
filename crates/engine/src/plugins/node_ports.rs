//! NodePorts: a pod's host ports must be free on the node.

use crate::cache::Snapshot;
use crate::framework::{CycleState, Events, FilterPlugin, Plugin, PreFilterNodes, PreFilterPlugin, Status};
use berth_model::pod::HostPort;
use berth_model::{NodeInfo, PodInfo};

/// Plugin name.
pub const NAME: &str = "NodePorts";
/// Reason for a port conflict.
pub const REASON: &str = "node(s) didn't have free ports for the requested pod ports";

/// Host port conflicts.
#[derive(Debug, Default)]
pub struct NodePorts;

/// Does `want` conflict with a port in `used`? A wildcard IP (0.0.0.0)
/// conflicts with every IP of the same protocol and port.
pub fn conflicts(used: &[HostPort], want: &HostPort) -> bool {
    if want.port <= 0 {
        return false;
    }
    used.iter().any(|u| {
        u.port == want.port
            && u.protocol == want.protocol
            && (u.ip == want.ip || u.ip == "0.0.0.0" || want.ip == "0.0.0.0")
    })
}

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        NAME
    }

    fn reusable(&self) -> bool {
        // Node-local: see Plugin::reusable.
        true
    }

    fn events(&self) -> Events {
        Events::NODE_ADD.or(Events::POD_DELETE)
    }
}

impl PreFilterPlugin for NodePorts {
    fn pre_filter(&self, _: &mut CycleState, pod: &PodInfo, _: &Snapshot) -> (Status, PreFilterNodes) {
        if pod.host_ports.is_empty() {
            return (Status::skip(), None);
        }
        (Status::success(), None)
    }
}

impl FilterPlugin for NodePorts {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if pod.host_ports.iter().any(|p| conflicts(&node.used_ports, p)) {
            return Status::unschedulable(REASON);
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod, snapshot};

    #[test]
    fn table() {
        let cases = [
            ("other port", pod("e").node("n").host_port(8080, "TCP", ""), pod("p").host_port(8081, "TCP", ""), true),
            ("same port", pod("e").node("n").host_port(8080, "TCP", ""), pod("p").host_port(8080, "TCP", ""), false),
            ("other protocol", pod("e").node("n").host_port(8080, "UDP", ""), pod("p").host_port(8080, "TCP", ""), true),
            ("different host IP", pod("e").node("n").host_port(8080, "TCP", "127.0.0.1"), pod("p").host_port(8080, "TCP", "127.0.0.2"), true),
            ("wildcard vs specific", pod("e").node("n").host_port(8080, "UDP", "127.0.0.1"), pod("p").host_port(8080, "UDP", "0.0.0.0"), false),
        ];
        for (name, existing, p, ok) in cases {
            let snap = snapshot(&[node("n")], &[existing]);
            let s = NodePorts.filter(&CycleState::new(), &p.info(), &snap.nodes[0]);
            assert_eq!(s.is_success(), ok, "{name}: {s}");
        }
    }
}
