//! Table tests following upstream's shared allocator table
//! (`structured/internal/allocatortesting/allocator_testing.go`); each row
//! names the upstream test it follows. Plus a property test.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1 as res;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQ;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::claims::ClassView;

const DRIVER: &str = "driver.example.com";

// ---- fluent builders ----

#[derive(Clone)]
struct Dev(res::Device);
fn dev(name: &str) -> Dev {
    Dev(res::Device { name: name.into(), ..Default::default() })
}
impl Dev {
    fn attr_str(mut self, k: &str, v: &str) -> Self {
        self.0.attributes.get_or_insert_with(BTreeMap::new).insert(k.into(), res::DeviceAttribute { string: Some(v.into()), ..Default::default() });
        self
    }
    fn attr_int(mut self, k: &str, v: i64) -> Self {
        self.0.attributes.get_or_insert_with(BTreeMap::new).insert(k.into(), res::DeviceAttribute { int: Some(v), ..Default::default() });
        self
    }
    fn capacity(mut self, k: &str, v: &str) -> Self {
        self.0.capacity.get_or_insert_with(BTreeMap::new).insert(k.into(), res::DeviceCapacity { value: KQ(v.into()), request_policy: None });
        self
    }
    fn multi(mut self) -> Self {
        self.0.allow_multiple_allocations = Some(true);
        self
    }
    fn taint(mut self, key: &str, effect: &str) -> Self {
        self.0.taints.get_or_insert_with(Vec::new).push(res::DeviceTaint { key: key.into(), effect: effect.into(), ..Default::default() });
        self
    }
    fn consumes(mut self, set: &str, counter: &str, v: &str) -> Self {
        self.0.consumes_counters.get_or_insert_with(Vec::new).push(res::DeviceCounterConsumption {
            counter_set: set.into(),
            counters: [(counter.to_string(), res::Counter { value: KQ(v.into()) })].into(),
            ..Default::default()
        });
        self
    }
}

struct SliceB(res::ResourceSlice);
fn slice(name: &str, node: Option<&str>, pool: &str, generation: i64, count: i64, devs: Vec<Dev>) -> SliceB {
    SliceB(res::ResourceSlice {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        spec: res::ResourceSliceSpec {
            driver: DRIVER.into(),
            node_name: node.map(Into::into),
            all_nodes: node.is_none().then_some(true),
            pool: res::ResourcePool { name: pool.into(), generation, resource_slice_count: count },
            devices: Some(devs.into_iter().map(|d| d.0).collect()),
            ..Default::default()
        },
    })
}
impl SliceB {
    fn counters(mut self, set: &str, counter: &str, v: &str) -> Self {
        self.0.spec.shared_counters.get_or_insert_with(Vec::new).push(res::CounterSet {
            name: set.into(),
            counters: [(counter.to_string(), res::Counter { value: KQ(v.into()) })].into(),
        });
        self
    }
}

fn class(name: &str, exprs: &[&str]) -> ClassView {
    ClassView { name: name.into(), selectors: exprs.iter().map(|e| Some(e.to_string())).collect(), ..Default::default() }
}

fn sub(name: &str, class: &str) -> crate::claims::SubRequest {
    crate::claims::SubRequest {
        name: name.into(),
        class: class.into(),
        mode: AllocationMode::ExactCount(1),
        selectors: Vec::new(),
        admin_access: None,
        tolerations: Vec::new(),
        capacity: Vec::new(),
    }
}

struct ClaimB(ClaimView);
fn claim(name: &str) -> ClaimB {
    ClaimB(ClaimView {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        requests: Vec::new(),
        constraints: Vec::new(),
        config: Vec::new(),
        allocation: None,
        spec_hash: 0,
    })
}
impl ClaimB {
    fn req(mut self, name: &str, class: &str, count: i64) -> Self {
        let mut s = sub(name, class);
        s.mode = AllocationMode::ExactCount(count);
        self.0.requests.push(crate::claims::Request { name: name.into(), alternatives: vec![s], first_available: false });
        self
    }
    fn req_all(mut self, name: &str, class: &str) -> Self {
        let mut s = sub(name, class);
        s.mode = AllocationMode::All;
        self.0.requests.push(crate::claims::Request { name: name.into(), alternatives: vec![s], first_available: false });
        self
    }
    fn first_available(mut self, name: &str, subs: Vec<crate::claims::SubRequest>) -> Self {
        self.0.requests.push(crate::claims::Request { name: name.into(), alternatives: subs, first_available: true });
        self
    }
    fn selector(mut self, e: &str) -> Self {
        if let Some(r) = self.0.requests.last_mut() {
            for a in &mut r.alternatives {
                a.selectors.push(Some(e.into()));
            }
        }
        self
    }
    fn admin(mut self) -> Self {
        if let Some(r) = self.0.requests.last_mut() {
            r.alternatives[0].admin_access = Some(true);
        }
        self
    }
    fn tolerate(mut self, key: &str) -> Self {
        if let Some(r) = self.0.requests.last_mut() {
            for a in &mut r.alternatives {
                a.tolerations.push(crate::claims::Toleration { key: key.into(), exists: true, ..Default::default() });
            }
        }
        self
    }
    fn cap_req(mut self, k: &str, v: &str) -> Self {
        if let Some(r) = self.0.requests.last_mut() {
            r.alternatives[0].capacity.push((k.into(), Quantity::parse(v).unwrap_or_default()));
        }
        self
    }
    fn match_attr(mut self, attr: &str) -> Self {
        self.0.constraints.push(Constraint::Match { requests: Vec::new(), attribute: attr.into() });
        self
    }
    fn distinct_attr(mut self, attr: &str) -> Self {
        self.0.constraints.push(Constraint::Distinct { requests: Vec::new(), attribute: attr.into() });
        self
    }
}

/// What a row expects.
#[derive(Debug, PartialEq)]
enum Want {
    /// Allocated: per claim, the `request=device` results.
    Alloc(Vec<Vec<&'static str>>),
    /// Nothing fits.
    None,
    /// An error whose message contains this.
    Err(&'static str),
}

struct Row {
    name: &'static str,
    slices: Vec<SliceB>,
    classes: Vec<ClassView>,
    claims: Vec<ClaimB>,
    allocated: Vec<(&'static str, &'static str)>,
    node: &'static str,
    admin_ok: bool,
    want: Want,
}

fn row(name: &'static str) -> Row {
    Row {
        name,
        slices: Vec::new(),
        classes: vec![class("class-a", &[&format!("device.driver == \"{DRIVER}\"")])],
        claims: Vec::new(),
        allocated: Vec::new(),
        node: "node-1",
        admin_ok: true,
        want: Want::None,
    }
}

fn run(r: &Row) -> std::result::Result<NodeVerdict, AllocError> {
    let mut inv = Inventory::new();
    for s in &r.slices {
        if let Err(e) = inv.upsert_slice(&s.0) {
            panic!("{}: {e}", r.name);
        }
    }
    let mut in_use = InUse::new();
    for (pool, d) in &r.allocated {
        let id = inv.device_id(DRIVER, pool, d);
        in_use.apply(id, false, &[], true);
    }
    let mut classes = Classes::new();
    for c in &r.classes {
        classes.upsert(c.clone());
    }
    let cel = CelCache::new();
    let claims: Vec<&ClaimView> = r.claims.iter().map(|c| &c.0).collect();
    let p = prepare(&claims, &classes, &cel, r.admin_ok)?;
    let labels = BTreeMap::new();
    p.allocate(AllocateInput { node: NodeRef { name: r.node, labels: &labels }, inventory: &inv, in_use: &in_use, max_steps: DEFAULT_MAX_STEPS })
}

fn check(r: Row) {
    let got = run(&r);
    match (&r.want, got) {
        (Want::Alloc(want), Ok(NodeVerdict::Allocated(allocs))) => {
            let got: Vec<Vec<String>> =
                allocs.iter().map(|a| a.results.iter().map(|d| format!("{}={}", d.request, d.device)).collect()).collect();
            let want: Vec<Vec<String>> = want.iter().map(|c| c.iter().map(|s| s.to_string()).collect()).collect();
            assert_eq!(got, want, "{}", r.name);
        }
        (Want::None, Ok(NodeVerdict::CannotAllocate | NodeVerdict::InvalidPools)) => {}
        (Want::Err(m), Err(e)) => assert!(e.to_string().contains(m), "{}: {e}", r.name),
        (want, got) => panic!("{}: want {want:?}, got {got:?}", r.name),
    }
}

/// Counters live in their own slice (API validation keeps devices and
/// sharedCounters apart), as upstream's table builds them.
fn counter_slice() -> SliceB {
    slice("slice-0-counters", Some("node-1"), "pool-1", 1, 2, Vec::new()).counters("cs", "mem", "10Gi")
}

fn node1(devs: Vec<Dev>) -> SliceB {
    slice("slice-1", Some("node-1"), "pool-1", 1, 1, devs)
}

#[test]
fn upstream_table() {
    let rows = vec![
        // "simple"
        Row { slices: vec![node1(vec![dev("d1")])], claims: vec![claim("c").req("r", "class-a", 1)], want: Want::Alloc(vec![vec!["r=d1"]]), ..row("simple") },
        // "other-node"
        Row {
            slices: vec![slice("s2", Some("node-2"), "pool-2", 1, 1, vec![dev("d1")])],
            claims: vec![claim("c").req("r", "class-a", 1)],
            want: Want::None,
            ..row("other-node")
        },
        // "small-and-large" / "small-and-large-backtrack-requests"
        Row {
            slices: vec![node1(vec![dev("large").attr_int("mem", 8), dev("small").attr_int("mem", 2)])],
            claims: vec![claim("c")
                .req("small", "class-a", 1)
                .selector(&format!("device.attributes[\"{DRIVER}\"].mem >= 1"))
                .req("large", "class-a", 1)
                .selector(&format!("device.attributes[\"{DRIVER}\"].mem >= 4"))],
            want: Want::Alloc(vec![vec!["small=small", "large=large"]]),
            ..row("small-and-large-backtrack-requests")
        },
        // "small-and-large-backtrack-claims"
        Row {
            slices: vec![node1(vec![dev("large").attr_int("mem", 8), dev("small").attr_int("mem", 2)])],
            claims: vec![
                claim("c1").req("r", "class-a", 1).selector(&format!("device.attributes[\"{DRIVER}\"].mem >= 1")),
                claim("c2").req("r", "class-a", 1).selector(&format!("device.attributes[\"{DRIVER}\"].mem >= 4")),
            ],
            want: Want::Alloc(vec![vec!["r=small"], vec!["r=large"]]),
            ..row("small-and-large-backtrack-claims")
        },
        // "obsolete-slice": only the newest generation counts
        Row {
            slices: vec![
                slice("old", Some("node-1"), "pool-1", 1, 1, vec![dev("d-old")]),
                slice("new", Some("node-1"), "pool-1", 2, 1, vec![dev("d-new")]),
            ],
            claims: vec![claim("c").req("r", "class-a", 1)],
            want: Want::Alloc(vec![vec!["r=d-new"]]),
            ..row("obsolete-slice")
        },
        // "duplicate-slice": duplicate device names make the pool invalid
        Row {
            slices: vec![
                slice("a", Some("node-1"), "pool-1", 1, 2, vec![dev("d1")]),
                slice("b", Some("node-1"), "pool-1", 1, 2, vec![dev("d1")]),
            ],
            claims: vec![claim("c").req("r", "class-a", 1)],
            want: Want::None,
            ..row("duplicate-slice")
        },
        // "not-enough-suitable-devices"
        Row { slices: vec![node1(vec![dev("d1")])], claims: vec![claim("c").req("r", "class-a", 2)], want: Want::None, ..row("not-enough-suitable-devices") },
        // "unknown-class"
        Row {
            slices: vec![node1(vec![dev("d1")])],
            claims: vec![claim("c").req("r", "nope", 1)],
            want: Want::Err("could not retrieve device class nope"),
            ..row("unknown-class")
        },
        // "all-devices-many"
        Row {
            slices: vec![node1(vec![dev("d1"), dev("d2")])],
            claims: vec![claim("c").req_all("r", "class-a")],
            want: Want::Alloc(vec![vec!["r=d1", "r=d2"]]),
            ..row("all-devices-many")
        },
        // "all-devices-of-the-incomplete-pool"
        Row {
            slices: vec![slice("s1", Some("node-1"), "pool-1", 1, 2, vec![dev("d1")])],
            claims: vec![claim("c").req_all("r", "class-a")],
            want: Want::Err("asks for all devices, but resource pool driver.example.com/pool-1 is currently being updated"),
            ..row("all-devices-of-the-incomplete-pool")
        },
        // "no-allocation-from-incomplete-pools"
        Row {
            slices: vec![slice("s1", Some("node-1"), "pool-1", 1, 2, vec![dev("d1")])],
            claims: vec![claim("c").req("r", "class-a", 1)],
            want: Want::None,
            ..row("no-allocation-from-incomplete-pools")
        },
        // "all-devices-some-allocated"
        Row {
            slices: vec![node1(vec![dev("d1"), dev("d2")])],
            allocated: vec![("pool-1", "d1")],
            claims: vec![claim("c").req_all("r", "class-a")],
            want: Want::None,
            ..row("all-devices-some-allocated")
        },
        // "all-devices-some-allocated-admin-access"
        Row {
            slices: vec![node1(vec![dev("d1"), dev("d2")])],
            allocated: vec![("pool-1", "d1")],
            claims: vec![claim("c").req_all("r", "class-a").admin()],
            want: Want::Alloc(vec![vec!["r=d1", "r=d2"]]),
            ..row("all-devices-some-allocated-admin-access")
        },
        // "already-allocated-devices"
        Row {
            slices: vec![node1(vec![dev("d1")])],
            allocated: vec![("pool-1", "d1")],
            claims: vec![claim("c").req("r", "class-a", 1)],
            want: Want::None,
            ..row("already-allocated-devices")
        },
        // "admin-access-enabled" (namespace label present) / admin access refused without it
        Row {
            slices: vec![node1(vec![dev("d1")])],
            allocated: vec![("pool-1", "d1")],
            claims: vec![claim("c").req("r", "class-a", 1).admin()],
            want: Want::Alloc(vec![vec!["r=d1"]]),
            ..row("admin-access-enabled")
        },
        Row {
            slices: vec![node1(vec![dev("d1")])],
            claims: vec![claim("c").req("r", "class-a", 1).admin()],
            admin_ok: false,
            want: Want::Err("admin access"),
            ..row("admin-access-namespace-label-missing")
        },
        // "with-constraint"
        Row {
            slices: vec![node1(vec![
                dev("d1").attr_str("model", "a"),
                dev("d2").attr_str("model", "b"),
                dev("d3").attr_str("model", "b"),
            ])],
            claims: vec![claim("c").req("r1", "class-a", 1).req("r2", "class-a", 1).match_attr(&format!("{DRIVER}/model"))],
            want: Want::Alloc(vec![vec!["r1=d2", "r2=d3"]]),
            ..row("with-constraint")
        },
        // "with-constraint-non-existent-attribute"
        Row {
            slices: vec![node1(vec![dev("d1"), dev("d2")])],
            claims: vec![claim("c").req("r", "class-a", 2).match_attr(&format!("{DRIVER}/nope"))],
            want: Want::None,
            ..row("with-constraint-non-existent-attribute")
        },
        // "with-distinct-constraints"
        Row {
            slices: vec![node1(vec![dev("d1").attr_int("numa", 0), dev("d2").attr_int("numa", 0), dev("d3").attr_int("numa", 1)])],
            claims: vec![claim("c").req("r1", "class-a", 1).req("r2", "class-a", 1).distinct_attr(&format!("{DRIVER}/numa"))],
            want: Want::Alloc(vec![vec!["r1=d1", "r2=d3"]]),
            ..row("with-distinct-constraints")
        },
        // "too-many-devices-single-request"
        Row {
            slices: vec![node1(vec![dev("d1")])],
            claims: vec![claim("c").req("r", "class-a", 33)],
            want: Want::Err("exceeds the claim limit of 32"),
            ..row("too-many-devices-single-request")
        },
        // "prioritized-list-first-unavailable"
        Row {
            slices: vec![node1(vec![dev("d1").attr_str("model", "t4")])],
            claims: vec![claim("c").first_available(
                "r",
                vec![
                    {
                        let mut s = sub("large", "class-a");
                        s.selectors.push(Some(format!("device.attributes[\"{DRIVER}\"].model == \"a100\"")));
                        s
                    },
                    sub("small", "class-a"),
                ],
            )],
            want: Want::Alloc(vec![vec!["r/small=d1"]]),
            ..row("prioritized-list-first-unavailable")
        },
        // "prioritized-list-too-many-in-first-subrequest"
        Row {
            slices: vec![node1(vec![dev("d1")])],
            claims: vec![claim("c").first_available(
                "r",
                vec![
                    {
                        let mut s = sub("many", "class-a");
                        s.mode = AllocationMode::ExactCount(40);
                        s
                    },
                    sub("one", "class-a"),
                ],
            )],
            want: Want::Alloc(vec![vec!["r/one=d1"]]),
            ..row("prioritized-list-too-many-in-first-subrequest")
        },
        // "tainted-two-devices" / "tainted-two-devices-tolerated" / "tainted-no-effect"
        Row {
            slices: vec![node1(vec![dev("d1").taint("k", "NoSchedule"), dev("d2").taint("k", "NoExecute")])],
            claims: vec![claim("c").req("r", "class-a", 1)],
            want: Want::None,
            ..row("tainted-two-devices")
        },
        Row {
            slices: vec![node1(vec![dev("d1").taint("k", "NoSchedule")])],
            claims: vec![claim("c").req("r", "class-a", 1).tolerate("k")],
            want: Want::Alloc(vec![vec!["r=d1"]]),
            ..row("tainted-two-devices-tolerated")
        },
        Row {
            slices: vec![node1(vec![dev("d1").taint("k", "None")])],
            claims: vec![claim("c").req("r", "class-a", 1)],
            want: Want::Alloc(vec![vec!["r=d1"]]),
            ..row("tainted-no-effect")
        },
        // "partitionable-devices-multiple-devices" / "partitionable-devices-no-capacity-available"
        Row {
            slices: vec![
                slice("slice-1", Some("node-1"), "pool-1", 1, 2, vec![dev("p1").consumes("cs", "mem", "6Gi"), dev("p2").consumes("cs", "mem", "6Gi"), dev("p3").consumes("cs", "mem", "4Gi")]),
                counter_slice(),
            ],
            claims: vec![claim("c").req("r", "class-a", 2)],
            want: Want::Alloc(vec![vec!["r=p1", "r=p3"]]),
            ..row("partitionable-devices-multiple-devices")
        },
        Row {
            slices: vec![slice("slice-1", Some("node-1"), "pool-1", 1, 2, vec![dev("p1").consumes("cs", "mem", "6Gi"), dev("p2").consumes("cs", "mem", "6Gi")]), counter_slice()],
            claims: vec![claim("c").req("r", "class-a", 2)],
            want: Want::None,
            ..row("partitionable-devices-no-capacity-available")
        },
        // "partitionable-devices-device-counter-consumption-references-unknown-counter-set"
        Row {
            slices: vec![slice("slice-1", Some("node-1"), "pool-1", 1, 2, vec![dev("p1").consumes("other", "mem", "6Gi")]), counter_slice()],
            claims: vec![claim("c").req("r", "class-a", 1)],
            want: Want::None,
            ..row("partitionable-devices-device-counter-consumption-references-unknown-counter-set")
        },
        // "consumable-capacity-multi-allocatable-device-without-policy-with-capacity-request"
        Row {
            slices: vec![node1(vec![dev("m").multi().capacity("bw", "10")])],
            claims: vec![claim("c1").req("r", "class-a", 1).cap_req("bw", "4"), claim("c2").req("r", "class-a", 1).cap_req("bw", "6")],
            want: Want::Alloc(vec![vec!["r=m"], vec!["r=m"]]),
            ..row("consumable-capacity-multi-allocatable-device-without-policy-with-capacity-request")
        },
        // "consumable-capacity-multi-allocatable-device-with-exceeded-consumable-capacity-request"
        Row {
            slices: vec![node1(vec![dev("m").multi().capacity("bw", "10")])],
            claims: vec![claim("c1").req("r", "class-a", 1).cap_req("bw", "11")],
            want: Want::None,
            ..row("consumable-capacity-multi-allocatable-device-with-exceeded-consumable-capacity-request")
        },
        // "check-combinations-within-single-request-single-pool-single-slice"
        Row {
            slices: vec![node1(vec![dev("d1").attr_int("n", 1), dev("d2").attr_int("n", 2), dev("d3").attr_int("n", 2)])],
            claims: vec![claim("c").req("r", "class-a", 2).match_attr(&format!("{DRIVER}/n"))],
            want: Want::Alloc(vec![vec!["r=d2", "r=d3"]]),
            ..row("check-combinations-within-single-request-single-pool-single-slice")
        },
        // e2e "keeps pod pending because of CEL runtime errors"
        Row {
            slices: vec![node1(vec![dev("d1")])],
            claims: vec![claim("c").req("r", "class-a", 1).selector(&format!("device.attributes[\"{DRIVER}\"].model == \"x\""))],
            want: Want::Err("claim default/c: selector #0 on device driver.example.com/pool-1/d1: CEL runtime error: no such key: model"),
            ..row("cel-runtime-error")
        },
    ];
    for r in rows {
        check(r);
    }
}

#[test]
fn device_taint_rule_applies() {
    let mut inv = Inventory::new();
    let s = node1(vec![dev("d1"), dev("d2")]);
    assert_eq!(inv.upsert_slice(&s.0), Ok(()));
    let rule = res::DeviceTaintRule {
        metadata: ObjectMeta { name: Some("rule".into()), ..Default::default() },
        spec: res::DeviceTaintRuleSpec {
            device_selector: Some(res::DeviceTaintSelector { device: Some("d1".into()), ..Default::default() }),
            taint: res::DeviceTaint { key: "broken".into(), effect: "NoSchedule".into(), ..Default::default() },
        },
        status: None,
    };
    assert_eq!(inv.upsert_taint_rule(&rule), Ok(()));
    let mut classes = Classes::new();
    classes.upsert(class("class-a", &[]));
    let cel = CelCache::new();
    let c = claim("c").req("r", "class-a", 1).0;
    let labels = BTreeMap::new();
    let in_use = InUse::new();
    let p = prepare(&[&c], &classes, &cel, false);
    let v = p.and_then(|p| p.allocate(AllocateInput { node: NodeRef { name: "node-1", labels: &labels }, inventory: &inv, in_use: &in_use, max_steps: 1000 }));
    match v {
        Ok(NodeVerdict::Allocated(a)) => {
            assert_eq!(a[0].results[0].device, "d2");
            assert!(a[0].node_selector.is_some());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn device_memory_is_small() {
    let mut inv = Inventory::new();
    let d = dev("gpu-0")
        .attr_str("model", "a100")
        .attr_int("cores", 108)
        .attr_str("uuid", "GPU-0d1e2f3a-4b5c-6d7e-8f90-a1b2c3d4e5f6")
        .attr_int("index", 0)
        .capacity("memory", "80Gi")
        .capacity("sm", "108")
        .taint("k", "NoSchedule");
    assert_eq!(inv.upsert_slice(&node1(vec![d]).0), Ok(()));
    let size = inv.slice("slice-1").map_or(0, |s| s.devices[0].size_bytes());
    eprintln!("device state: {size} bytes (Device struct {} bytes)", std::mem::size_of::<crate::inventory::Device>());
    assert!(size > 0 && size <= 1024, "{size}");
}

mod props {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        /// No device is allocated twice (without admin access or multiple
        /// allocations), and every claim gets exactly its count of devices
        /// that its class selects.
        #[test]
        fn allocations_are_disjoint_and_complete(
            models in proptest::collection::vec(0u8..3, 0..8),
            counts in proptest::collection::vec((1i64..3, 0u8..3), 1..4),
        ) {
            let devs: Vec<Dev> = models.iter().enumerate().map(|(i, m)| dev(&format!("d{i}")).attr_int("model", i64::from(*m))).collect();
            let mut inv = Inventory::new();
            prop_assert_eq!(inv.upsert_slice(&node1(devs).0), Ok(()));
            let mut classes = Classes::new();
            for m in 0..3 {
                classes.upsert(class(&format!("m{m}"), &[&format!("device.attributes[\"{DRIVER}\"].model == {m}")]));
            }
            let cel = CelCache::new();
            let claims: Vec<ClaimView> = counts.iter().enumerate().map(|(i, (n, m))| claim(&format!("c{i}")).req("r", &format!("m{m}"), *n).0).collect();
            let refs: Vec<&ClaimView> = claims.iter().collect();
            let labels = BTreeMap::new();
            let in_use = InUse::new();
            let p = prepare(&refs, &classes, &cel, false);
            prop_assert!(p.is_ok());
            let Ok(p) = p else { return Ok(()) };
            let v = p.allocate(AllocateInput { node: NodeRef { name: "node-1", labels: &labels }, inventory: &inv, in_use: &in_use, max_steps: DEFAULT_MAX_STEPS });
            // feasibility: per model, the sum of counts fits the devices of that model
            let feasible = (0..3u8).all(|m| {
                let need: i64 = counts.iter().filter(|(_, cm)| *cm == m).map(|(n, _)| *n).sum();
                let have = models.iter().filter(|x| **x == m).count();
                usize::try_from(need).unwrap_or(usize::MAX) <= have
            });
            match v {
                Ok(NodeVerdict::Allocated(allocs)) => {
                    prop_assert!(feasible);
                    let mut seen = std::collections::HashSet::new();
                    for (a, (n, m)) in allocs.iter().zip(&counts) {
                        prop_assert_eq!(a.results.len(), usize::try_from(*n).unwrap_or(0));
                        for r in &a.results {
                            prop_assert!(seen.insert(r.device.clone()), "device {} twice", r.device);
                            let idx: usize = r.device.trim_start_matches('d').parse().unwrap_or(usize::MAX);
                            prop_assert_eq!(models.get(idx).copied(), Some(*m));
                        }
                    }
                }
                Ok(NodeVerdict::CannotAllocate) => prop_assert!(!feasible),
                other => prop_assert!(false, "unexpected {:?}", other),
            }
        }
    }
}

/// The per-node cache ([`Inventory::node_pools`]) gives what gathering
/// afresh gives after every kind of change it must notice: a node's own
/// slice, a slice of the same pool published for another node, an
/// allNodes slice, a nodeSelector slice and a label change; and the kept
/// selector results follow a device whose attributes changed.
#[test]
fn cached_pools_follow_every_change() {
    let mut classes = Classes::new();
    classes.upsert(class("a100", &[&format!("device.attributes[\"{DRIVER}\"].model == \"a100\"")]));
    let cel = CelCache::new();
    let c = claim("c").req("r", "a100", 1).0;
    let p = prepare(&[&c], &classes, &cel, false).unwrap();
    let in_use = InUse::new();
    let mut labels = BTreeMap::new();
    let got = |inv: &Inventory, labels: &BTreeMap<String, String>| -> Option<String> {
        let node = NodeRef { name: "node-1", labels };
        let fresh: Vec<String> = inv.pools_for_node(node).unwrap().iter().map(|p| format!("{:?} {}", p.state, p.slices.len())).collect();
        let cached: Vec<String> = inv.node_pools(node).unwrap().pools.iter().map(|p| format!("{:?} {}", p.state, p.slices.len())).collect();
        assert_eq!(cached, fresh, "cached pools differ from fresh ones");
        match p.allocate(AllocateInput { node, inventory: inv, in_use: &in_use, max_steps: DEFAULT_MAX_STEPS }) {
            Ok(NodeVerdict::Allocated(a)) => Some(format!("{}/{}", a[0].results[0].pool, a[0].results[0].device)),
            Ok(_) => None,
            Err(e) => panic!("{e}"),
        }
    };
    let mut inv = Inventory::new();
    // The node's own slice, then the same device with another model.
    inv.upsert_slice(&slice("s1", Some("node-1"), "pool-1", 1, 1, vec![dev("d1").attr_str("model", "t4")]).0).unwrap();
    assert_eq!(got(&inv, &labels), None);
    assert_eq!(inv.cached_nodes(), 1);
    inv.upsert_slice(&slice("s1", Some("node-1"), "pool-1", 1, 1, vec![dev("d1").attr_str("model", "a100")]).0).unwrap();
    assert_eq!(got(&inv, &labels).as_deref(), Some("pool-1/d1"));
    // A pool of two slices, one published for node-2: a newer generation
    // there makes node-1's slice obsolete.
    inv.upsert_slice(&slice("s1", Some("node-1"), "pool-1", 1, 2, vec![dev("d1").attr_str("model", "a100")]).0).unwrap();
    inv.upsert_slice(&slice("s2", Some("node-2"), "pool-1", 1, 2, vec![dev("d2").attr_str("model", "a100")]).0).unwrap();
    assert_eq!(got(&inv, &labels).as_deref(), Some("pool-1/d1"));
    inv.upsert_slice(&slice("s2", Some("node-2"), "pool-1", 2, 2, vec![dev("d2").attr_str("model", "a100")]).0).unwrap();
    assert_eq!(got(&inv, &labels), None);
    // An allNodes slice.
    inv.upsert_slice(&slice("net", None, "net", 1, 1, vec![dev("n1").attr_str("model", "a100")]).0).unwrap();
    assert_eq!(got(&inv, &labels).as_deref(), Some("net/n1"));
    inv.remove_slice("net");
    assert_eq!(got(&inv, &labels), None);
    // A nodeSelector slice: the node's labels decide.
    let mut sel = slice("rack", None, "rack", 1, 1, vec![dev("r1").attr_str("model", "a100")]);
    sel.0.spec.all_nodes = None;
    sel.0.spec.node_selector = Some(k8s_openapi::api::core::v1::NodeSelector {
        node_selector_terms: vec![k8s_openapi::api::core::v1::NodeSelectorTerm {
            match_expressions: Some(vec![k8s_openapi::api::core::v1::NodeSelectorRequirement {
                key: "rack".into(),
                operator: "In".into(),
                values: Some(vec!["r1".into()]),
            }]),
            match_fields: None,
        }],
    });
    inv.upsert_slice(&sel.0).unwrap();
    assert_eq!(got(&inv, &labels), None);
    labels.insert("rack".to_string(), "r1".to_string());
    assert_eq!(got(&inv, &labels).as_deref(), Some("rack/r1"));
    labels.clear();
    assert_eq!(got(&inv, &labels), None);
    // A copy of the inventory (copy on write) keeps answering for itself.
    let before = inv.clone();
    inv.upsert_slice(&slice("s1", Some("node-1"), "pool-9", 1, 1, vec![dev("d9").attr_str("model", "a100")]).0).unwrap();
    assert_eq!(got(&inv, &labels).as_deref(), Some("pool-9/d9"));
    assert_eq!(got(&before, &labels), None);
}

/// Allocator state per device, with the per-node cache filled: the compiled
/// devices, their share of the slice records, the node's cached pools and
/// candidates, a selector memo, and the in-use entry of an allocated device
/// (the issue's bound: 1 KiB per device). Printed with `--nocapture`.
#[test]
fn allocator_state_per_device_is_small() {
    let (nodes, per_node) = (200usize, 8usize);
    let mut inv = Inventory::new();
    for n in 0..nodes {
        let devs = (0..per_node).map(|d| dev(&format!("gpu-{d}")).attr_str("model", "a100").attr_int("index", i64::try_from(d).unwrap_or(0)).capacity("memory", "80Gi")).collect();
        inv.upsert_slice(&slice(&format!("node-{n}-gpus"), Some(&format!("node-{n}")), &format!("node-{n}"), 1, 1, devs).0).unwrap();
    }
    let mut classes = Classes::new();
    classes.upsert(class("a100", &[&format!("device.attributes[\"{DRIVER}\"].model == \"a100\"")]));
    let cel = CelCache::new();
    let c = claim("c").req("r", "a100", 1).0;
    let p = prepare(&[&c], &classes, &cel, false).unwrap();
    let mut in_use = InUse::new();
    for n in 0..nodes {
        for d in 0..per_node / 2 {
            let id = inv.device_id(DRIVER, &format!("node-{n}"), &format!("gpu-{d}"));
            in_use.apply(id, false, &[], true);
        }
    }
    let labels = BTreeMap::new();
    for n in 0..nodes {
        let name = format!("node-{n}");
        let v = p.allocate(AllocateInput { node: NodeRef { name: &name, labels: &labels }, inventory: &inv, in_use: &in_use, max_steps: DEFAULT_MAX_STEPS });
        assert!(matches!(v, Ok(NodeVerdict::Allocated(_))), "{v:?}");
    }
    assert_eq!(inv.cached_nodes(), nodes);
    let devices = nodes * per_node;
    let slices: usize = (0..nodes)
        .filter_map(|n| inv.slice(&format!("node-{n}-gpus")))
        .map(|s| std::mem::size_of::<crate::inventory::Slice>() + s.devices.iter().map(|d| d.size_bytes()).sum::<usize>())
        .sum();
    let cache = inv.cache_bytes();
    let strings = inv.strings().heap_bytes();
    let in_use_bytes = in_use.dedicated.capacity() * (std::mem::size_of::<(DeviceId, u32)>() + 1);
    let per_device = (slices + cache + strings + in_use_bytes) / devices;
    eprintln!(
        "allocator state: {per_device} B per device ({devices} devices: slices {} B, node cache {} B, strings {} B, in use {} B per device)",
        slices / devices,
        cache / devices,
        strings / devices,
        in_use_bytes / devices
    );
    assert!(per_device <= 1024, "{per_device} B per device");
}
