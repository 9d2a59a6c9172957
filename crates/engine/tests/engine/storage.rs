//! Storage through the offline engine: simulate assumes VolumeBinding's
//! decisions as it places pods, and malformed storage objects only affect the
//! pods that need them.

use berth_engine::config::Config;
use berth_engine::offline::{Cluster, Engine};

fn engine(text: &str) -> Engine {
    let cluster = Cluster::parse(text, "storage.yaml").expect("cluster parses");
    Engine::new(&Config::default_config(), cluster, 7)
}

fn node(name: &str, zone: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Node
metadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}, topology.kubernetes.io/zone: {zone}}}}}
status: {{allocatable: {{cpu: "4", memory: 8Gi, pods: "110"}}}}
---"#
    )
}

fn pod(name: &str, claim: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default, uid: uid-{name}}}
spec:
  containers: [{{name: c, image: pause}}]
  volumes: [{{name: data, persistentVolumeClaim: {{claimName: {claim}}}}}]
---"#
    )
}

fn claim(name: &str, class: &str, size: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {name}, namespace: default, uid: uid-{name}}}
spec: {{accessModes: [ReadWriteOnce], storageClassName: {class}, resources: {{requests: {{storage: {size}}}}}}}
---"#
    )
}

fn local_pv(name: &str, node: &str, size: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: PersistentVolume
metadata: {{name: {name}}}
spec:
  capacity: {{storage: {size}}}
  accessModes: [ReadWriteOnce]
  storageClassName: local
  local: {{path: /mnt/{name}}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [{node}]}}]
status: {{phase: Available}}
---"#
    )
}

const CLASSES: &str = r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: standard}
provisioner: csi.example.com
volumeBindingMode: WaitForFirstConsumer
allowedTopologies:
- matchLabelExpressions: [{key: topology.kubernetes.io/zone, values: [zone-b]}]
---
"#;

#[test]
fn simulate_assumes_static_bindings() {
    // One local PV on each of two nodes; three pods whose claims fit either:
    // the first two take one PV each, the third finds none left.
    let text = [
        CLASSES.to_string(),
        node("n1", "zone-a"),
        node("n2", "zone-a"),
        local_pv("pv-1", "n1", "10Gi"),
        local_pv("pv-2", "n2", "10Gi"),
        claim("c1", "local", "5Gi"),
        claim("c2", "local", "5Gi"),
        claim("c3", "local", "5Gi"),
        pod("p1", "c1"),
        pod("p2", "c2"),
        pod("p3", "c3"),
    ]
    .concat();
    let sim = engine(&text).simulate();
    let by = |p: &str| sim.placements.iter().find(|x| x.pod == format!("default/{p}")).cloned().expect("placed or not");
    let (a, b, c) = (by("p1"), by("p2"), by("p3"));
    let mut nodes = vec![a.node.clone().unwrap_or_default(), b.node.clone().unwrap_or_default()];
    nodes.sort();
    assert_eq!(nodes, vec!["n1".to_string(), "n2".to_string()], "{a:?} {b:?}");
    assert_eq!(c.node, None);
    let msg = c.message.unwrap_or_default();
    assert!(msg.contains("2 node(s) didn't find available persistent volumes to bind"), "{msg}");
}

#[test]
fn provisioning_follows_allowed_topologies() {
    let text = [CLASSES.to_string(), node("n1", "zone-a"), node("n2", "zone-b"), claim("c", "standard", "1Gi"), pod("p", "c")].concat();
    let sim = engine(&text).simulate();
    assert_eq!(sim.placements[0].node.as_deref(), Some("n2"), "{:?}", sim.placements);
}

#[test]
fn malformed_storage_objects_name_the_field_and_stop_nothing_else() {
    let bad_pvc = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: bad-size, namespace: default}
spec: {accessModes: [ReadWriteOnce], storageClassName: local, resources: {requests: {storage: lots}}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: bad-mode, namespace: default}
spec: {accessModes: [ReadWriteSometimes], storageClassName: local}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: bound-bad-pv, namespace: default, annotations: {pv.kubernetes.io/bind-completed: "yes"}}
spec: {accessModes: [ReadWriteOnce], storageClassName: local, volumeName: empty-affinity}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: empty-affinity}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: local
  nodeAffinity: {}
  claimRef: {namespace: default, name: bound-bad-pv}
status: {phase: Bound}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: undecodable, namespace: default}
spec: {accessModes: ReadWriteOnce}
---
"#;
    let text = [
        CLASSES.to_string(),
        node("n1", "zone-a"),
        bad_pvc.to_string(),
        local_pv("pv-1", "n1", "10Gi"),
        claim("good", "local", "1Gi"),
        pod("uses-bad-size", "bad-size"),
        pod("uses-bad-mode", "bad-mode"),
        pod("uses-bad-pv", "bound-bad-pv"),
        pod("uses-undecodable", "undecodable"),
        pod("fine", "good"),
    ]
    .concat();
    let sim = engine(&text).simulate();
    let msg = |p: &str| sim.placements.iter().find(|x| x.pod == format!("default/{p}")).and_then(|x| x.message.clone()).unwrap_or_default();
    for (p, field) in [
        ("uses-bad-size", "spec.resources.requests.storage"),
        ("uses-bad-mode", "spec.accessModes[0]"),
        ("uses-bad-pv", "spec.nodeAffinity.required"),
        ("uses-undecodable", "spec.accessModes"),
    ] {
        let m = msg(p);
        assert!(m.contains(field), "{p}: {m:?} should name {field}");
    }
    let fine = sim.placements.iter().find(|x| x.pod == "default/fine").expect("fine");
    assert_eq!(fine.node.as_deref(), Some("n1"), "{fine:?}");
}
