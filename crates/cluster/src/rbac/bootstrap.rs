//! Upstream's bootstrap RBAC policy, the part a scheduler and the users of
//! a local cluster meet: `cluster-admin` (bound to `system:masters`),
//! `admin`/`edit`/`view` aggregated from the `system:aggregate-to-*` roles,
//! `system:kube-scheduler` and `system:volume-scheduler` (bound to the user
//! `system:kube-scheduler`), `system:discovery` and `system:basic-user`
//! (bound to `system:authenticated`), `system:public-info-viewer` (bound to
//! `system:authenticated` and `system:unauthenticated`),
//! `system:monitoring` (bound to the group `system:monitoring`) and
//! `system:auth-delegator` (unbound). The objects are upstream's testdata
//! YAML (`bootstrap-cluster-roles.yaml`, `bootstrap-cluster-role-bindings.yaml`
//! beside this file), labels and annotations included
//! (`kubernetes.io/bootstrapping: rbac-defaults`,
//! `rbac.authorization.kubernetes.io/autoupdate: "true"`). The aggregated
//! roles come with `rules: null`, as upstream creates them; the
//! aggregation fills them ([`cluster_roles_aggregated`] or the
//! [`Authorizer`]).

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use serde::de::DeserializeOwned;

use super::aggregation;
use super::authorizer::Authorizer;

/// The bootstrap ClusterRoles, as upstream's testdata lists them.
pub const CLUSTER_ROLES_YAML: &str = include_str!("bootstrap-cluster-roles.yaml");
/// The bootstrap ClusterRoleBindings, as upstream's testdata lists them.
pub const CLUSTER_ROLE_BINDINGS_YAML: &str = include_str!("bootstrap-cluster-role-bindings.yaml");

/// The embedded policy does not parse (a build defect, caught by the tests).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The YAML list does not decode.
    #[error("bootstrap {what}: {message}")]
    Parse {
        /// Which list.
        what: &'static str,
        /// The decoder's message.
        message: String,
    },
}

#[derive(serde::Deserialize)]
struct List<T> {
    items: Vec<T>,
}

fn parse<T: DeserializeOwned>(what: &'static str, yaml: &str) -> Result<Vec<T>, Error> {
    // Through JSON values: k8s-openapi's decoders expect JSON's shapes.
    let v: serde_json::Value = serde_saphyr::from_str(yaml).map_err(|e| Error::Parse { what, message: e.to_string() })?;
    let list: List<T> = serde_json::from_value(v).map_err(|e| Error::Parse { what, message: e.to_string() })?;
    Ok(list.items)
}

/// The bootstrap ClusterRoles as upstream creates them (aggregated roles without rules).
pub fn cluster_roles() -> Result<Vec<ClusterRole>, Error> {
    parse("cluster roles", CLUSTER_ROLES_YAML)
}

/// The bootstrap ClusterRoles with the aggregated roles' rules filled in,
/// as they stand once the aggregation controller has run: what to seed a
/// store with.
pub fn cluster_roles_aggregated() -> Result<Vec<ClusterRole>, Error> {
    let mut roles = cluster_roles()?;
    for (name, rules) in aggregation::updates(&roles) {
        if let Some(r) = roles.iter_mut().find(|r| r.metadata.name.as_deref() == Some(name.as_str())) {
            r.rules = Some(rules);
        }
    }
    Ok(roles)
}

/// The bootstrap ClusterRoleBindings.
pub fn cluster_role_bindings() -> Result<Vec<ClusterRoleBinding>, Error> {
    parse("cluster role bindings", CLUSTER_ROLE_BINDINGS_YAML)
}

/// An authorizer over the bootstrap policy alone.
pub fn authorizer() -> Result<Authorizer, Error> {
    Ok(Authorizer::from_objects(&cluster_roles()?, &[], &cluster_role_bindings()?, &[]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rbac::rules::rules_allow;
    use crate::rbac::{Attributes, UserInfo};

    fn policy() -> Authorizer {
        authorizer().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_embedded_policy_parses_with_its_labels_and_annotations() {
        let roles = cluster_roles().unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<&str> = roles.iter().filter_map(|r| r.metadata.name.as_deref()).collect();
        for want in ["cluster-admin", "admin", "edit", "view", "system:aggregate-to-admin", "system:aggregate-to-edit", "system:aggregate-to-view", "system:kube-scheduler", "system:volume-scheduler", "system:public-info-viewer", "system:discovery", "system:basic-user"] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        let bindings = cluster_role_bindings().unwrap_or_else(|e| panic!("{e}"));
        for o in roles.iter().map(|r| &r.metadata).chain(bindings.iter().map(|b| &b.metadata)) {
            assert_eq!(o.labels.as_ref().and_then(|l| l.get("kubernetes.io/bootstrapping")).map(String::as_str), Some("rbac-defaults"), "{:?}", o.name);
            assert_eq!(o.annotations.as_ref().and_then(|l| l.get("rbac.authorization.kubernetes.io/autoupdate")).map(String::as_str), Some("true"), "{:?}", o.name);
        }
        let subjects = |name: &str| -> Vec<String> {
            bindings
                .iter()
                .find(|b| b.metadata.name.as_deref() == Some(name))
                .map(|b| b.subjects.iter().flatten().map(|s| format!("{}:{}", s.kind, s.name)).collect())
                .unwrap_or_default()
        };
        assert_eq!(subjects("cluster-admin"), ["Group:system:masters"]);
        assert_eq!(subjects("system:public-info-viewer"), ["Group:system:authenticated", "Group:system:unauthenticated"]);
        assert_eq!(subjects("system:discovery"), ["Group:system:authenticated"]);
        assert_eq!(subjects("system:basic-user"), ["Group:system:authenticated"]);
        assert_eq!(subjects("system:kube-scheduler"), ["User:system:kube-scheduler"]);
        assert_eq!(subjects("system:volume-scheduler"), ["User:system:kube-scheduler"]);
        // Every binding's role is there.
        for b in &bindings {
            assert!(names.contains(&b.role_ref.name.as_str()), "{}", b.role_ref.name);
        }
    }

    #[test]
    fn aggregation_builds_view_into_edit_into_admin() {
        let roles = cluster_roles_aggregated().unwrap_or_else(|e| panic!("{e}"));
        let rules = |n: &str| roles.iter().find(|r| r.metadata.name.as_deref() == Some(n)).and_then(|r| r.rules.clone()).unwrap_or_default();
        let (view, edit, admin) = (rules("view"), rules("edit"), rules("admin"));
        let u = UserInfo::new("u", &[]);
        let get_pods = Attributes::resource(&u, "get", "", "pods").ns("ns");
        let create_pods = Attributes::resource(&u, "create", "", "pods").ns("ns");
        let get_secrets = Attributes::resource(&u, "get", "", "secrets").ns("ns");
        let create_roles = Attributes::resource(&u, "create", "rbac.authorization.k8s.io", "roles").ns("ns");
        assert!(rules_allow(&get_pods, &view) && !rules_allow(&create_pods, &view) && !rules_allow(&get_secrets, &view));
        assert!(rules_allow(&get_pods, &edit) && rules_allow(&create_pods, &edit) && rules_allow(&get_secrets, &edit) && !rules_allow(&create_roles, &edit));
        assert!(rules_allow(&get_pods, &admin) && rules_allow(&create_roles, &admin));
        assert_eq!(admin.len(), rules("system:aggregate-to-admin").len() + edit.len());
        // The seeded objects are settled: nothing more to write back.
        assert!(aggregation::updates(&roles).is_empty());
        assert!(policy().aggregation_updates().len() == 3);
    }

    /// Anonymous may read health and version, nothing else (upstream's
    /// `TestBootstrapClusterRoles` intent and the e2e "anonymous" checks).
    #[test]
    fn anonymous_gets_health_and_version_only() {
        let a = policy();
        let anon = UserInfo::anonymous();
        for path in ["/healthz", "/livez", "/readyz", "/version", "/version/"] {
            assert!(a.authorize(&Attributes::non_resource(&anon, "get", path)).is_allowed(), "{path}");
        }
        for path in ["/", "/api", "/apis", "/metrics", "/openapi/v2", "/healthz/etcd", "/livez/ping", "/debug/pprof"] {
            assert!(!a.allows(&Attributes::non_resource(&anon, "get", path)), "{path}");
        }
        assert!(!a.allows(&Attributes::non_resource(&anon, "post", "/healthz")));
        for (verb, group, resource, ns) in [("list", "", "pods", ""), ("get", "", "namespaces", ""), ("create", "authorization.k8s.io", "selfsubjectaccessreviews", ""), ("get", "", "pods", "default")] {
            assert!(!a.allows(&Attributes::resource(&anon, verb, group, resource).ns(ns)), "{verb} {resource}");
        }
        // An authenticated user also discovers the API and reviews itself.
        let bob = UserInfo::new("bob", &["system:authenticated"]);
        assert!(a.allows(&Attributes::non_resource(&bob, "get", "/apis/apps/v1")));
        assert!(a.allows(&Attributes::resource(&bob, "create", "authorization.k8s.io", "selfsubjectrulesreviews")));
        assert!(!a.allows(&Attributes::resource(&bob, "list", "", "pods")));
    }

    #[test]
    fn the_scheduler_may_schedule_and_no_more() {
        let a = policy();
        let s = UserInfo::new("system:kube-scheduler", &["system:authenticated"]);
        let allowed = [
            Attributes::resource(&s, "create", "", "pods").ns("default").named("p").subresource("binding"),
            Attributes::resource(&s, "watch", "", "pods"),
            Attributes::resource(&s, "patch", "", "pods").ns("default").named("p").subresource("status"),
            Attributes::resource(&s, "update", "coordination.k8s.io", "leases").ns("kube-system").named("kube-scheduler"),
            Attributes::resource(&s, "patch", "", "persistentvolumes").named("pv"),
            Attributes::resource(&s, "update", "resource.k8s.io", "resourceclaims").ns("default").named("c").subresource("status"),
        ];
        for attrs in &allowed {
            assert!(a.allows(attrs), "{attrs:?}");
        }
        let denied = [
            Attributes::resource(&s, "create", "", "pods").ns("default"),
            Attributes::resource(&s, "update", "coordination.k8s.io", "leases").ns("kube-system").named("other"),
            Attributes::resource(&s, "get", "", "secrets").ns("default").named("s"),
            Attributes::resource(&s, "update", "", "nodes").named("n"),
        ];
        for attrs in &denied {
            assert!(!a.allows(attrs), "{attrs:?}");
        }
        let d = a.authorize(&allowed[0]);
        assert_eq!(d.reason(), r#"RBAC: allowed by ClusterRoleBinding "system:kube-scheduler" of ClusterRole "system:kube-scheduler" to User "system:kube-scheduler""#);
    }
}
