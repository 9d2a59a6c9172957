//! Upstream `TestPlugin` rows that apply to berth (PreEnqueue's checks, run
//! in PreFilter).

use berth_model::pod::{ClaimSource, PodClaim};
use berth_model::PodInfo;
use k8s_openapi::api::resource::v1 as res;

use super::claims::pod_claims;
use crate::cache::devices::Devices;

fn pod(source: ClaimSource) -> PodInfo {
    PodInfo { uid: "uid-my-pod".into(), namespace: "default".into(), name: "my-pod".into(), resource_claims: vec![PodClaim { name: "my-resource".into(), source }], ..Default::default() }
}

fn claim(owner: &str, deleting: bool) -> res::ResourceClaim {
    let mut c = res::ResourceClaim::default();
    c.metadata.name = Some("my-pod-my-resource".into());
    c.metadata.namespace = Some("default".into());
    c.metadata.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference { uid: owner.into(), controller: Some(true), kind: "Pod".into(), name: "my-pod".into(), api_version: "v1".into(), ..Default::default() }]);
    if deleting {
        c.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()));
    }
    c
}

/// A row: name, the pod claim's source, the claim in the cluster, claims found or the message.
type Row = (&'static str, ClaimSource, Option<res::ResourceClaim>, Result<usize, &'static str>);

#[test]
fn test_plugin_pre_enqueue_rows() {
    let generated = ClaimSource::FromTemplate(Some(Some("my-pod-my-resource".into())));
    let rows: Vec<Row> = vec![
        ("claim-template", generated.clone(), Some(claim("uid-my-pod", false)), Ok(1)),
        ("missing-claim", ClaimSource::FromTemplate(None), None, Err(r#"pod "default/my-pod": ResourceClaim not created yet"#)),
        ("deleted-claim", generated.clone(), Some(claim("uid-my-pod", true)), Err(r#"resourceclaim "my-pod-my-resource" is being deleted"#)),
        ("wrong-claim", generated.clone(), Some(claim("uid-my-pod123", false)), Err("ResourceClaim default/my-pod-my-resource was not created for pod default/my-pod (pod is not owner)")),
        ("no claim needed", ClaimSource::FromTemplate(Some(None)), None, Ok(0)),
    ];
    for (name, source, c, want) in rows {
        let mut d = Devices::new();
        if let Some(c) = &c {
            d.upsert_claim(c);
        }
        let got = pod_claims(&pod(source), &d).map(|v| v.len());
        assert_eq!(got.as_ref().map(|n| *n).map_err(String::as_str), want, "{name}");
    }
}

/// DRAExtendedResource: the implicit `deviceclass.resource.kubernetes.io/<class>`
/// is a name DRA backs (upstream `IsDRAExtendedResourceName`), though the
/// API does not count it as an extended resource; other kubernetes.io
/// names are neither.
#[test]
fn implicit_class_names_are_dra_extended_resources() {
    use super::claims::is_dra_extended;
    assert!(is_dra_extended("example.com/gpu"));
    assert!(is_dra_extended("deviceclass.resource.kubernetes.io/gpu"));
    assert!(!berth_model::resources::is_extended("deviceclass.resource.kubernetes.io/gpu"));
    assert!(!is_dra_extended("kubernetes.io/gpu"));
    assert!(!is_dra_extended("other.kubernetes.io/gpu"));
    assert!(!is_dra_extended("cpu"));
    // A class named by the implicit name backs it, with no extendedResourceName.
    let mut d = Devices::new();
    let class: res::DeviceClass = serde_json::from_value(serde_json::json!({"metadata": {"name": "gpu"}, "spec": {}})).expect("class");
    d.upsert_class(&class).expect("class");
    assert_eq!(d.class_for_extended_resource("deviceclass.resource.kubernetes.io/gpu").map(|c| c.name.as_str()), Some("gpu"));
    assert!(d.class_for_extended_resource("deviceclass.resource.kubernetes.io/nic").is_none());
}
