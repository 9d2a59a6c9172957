//! Role-based access control with kube-apiserver's semantics, as a pure
//! module: no HTTP, no store, no locks. The HTTP layer turns a request into
//! [`Attributes`] ([`RequestInfo::parse`]), asks the [`Authorizer`], and
//! answers a refusal with [`message::forbidden`]; the store keeps the
//! [`Authorizer`] current as RBAC objects change and runs the
//! [`escalation`] checks on role and binding writes.
//!
//! What each part follows upstream (kubernetes/kubernetes):
//!
//! - [`rules`]: `RuleAllows` (`plugin/pkg/auth/authorizer/rbac/rbac.go`
//!   with `pkg/apis/rbac/v1/evaluation_helpers.go`), `Covers`
//!   (`component-helpers/auth/rbac/validation/policy_comparator.go`),
//!   `CompactRules` and `CompactString` for escalation messages.
//! - [`authorizer`]: the `DefaultRuleResolver` (`pkg/registry/rbac/validation/rule.go`)
//!   and `RBACAuthorizer`, behind the privileged-group authorizer
//!   (`system:masters` may do everything), with bindings indexed by
//!   subject so that a check touches only the bindings that name the
//!   user, its groups or its service account.
//! - [`aggregation`]: the clusterrole-aggregation controller's rule union.
//! - [`escalation`]: the `policybased` storages of roles, cluster roles and
//!   their bindings (`escalate`, `bind`, `ConfirmNoEscalation`).
//! - [`message`]: `responsewriters.ForbiddenStatusError` and
//!   `apierrors.NewForbidden` message forms, and Go's `%q` quoting.
//! - [`bootstrap`]: upstream's bootstrap ClusterRoles and
//!   ClusterRoleBindings (the subset a scheduler and its users meet).

pub mod aggregation;
pub mod attributes;
pub mod authorizer;
pub mod bootstrap;
pub mod escalation;
pub mod message;
pub mod rules;

pub use attributes::{Attributes, RequestInfo, UserInfo};
pub use authorizer::{AllowedBy, Authorizer, Decision, ResolutionError, RulesReview};

/// The API group of RBAC objects.
pub const GROUP: &str = "rbac.authorization.k8s.io";
/// The group kube-apiserver allows everything (its privileged-group authorizer).
pub const SYSTEM_MASTERS: &str = "system:masters";
/// The group of every authenticated user.
pub const ALL_AUTHENTICATED: &str = "system:authenticated";
/// The group of every unauthenticated request.
pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
/// The user name of an unauthenticated request.
pub const ANONYMOUS: &str = "system:anonymous";
/// The prefix of a service account's user name (`system:serviceaccount:NS:NAME`).
pub const SERVICE_ACCOUNT_USER_PREFIX: &str = "system:serviceaccount:";
/// The group of every service account.
pub const ALL_SERVICE_ACCOUNTS: &str = "system:serviceaccounts";

#[cfg(test)]
mod tests {
    use super::authorizer::tests::{crb, rb, role, subject};
    use super::escalation::{Write, check_cluster_role_binding_write};
    use super::rules::{RuleBuilder, rule};
    use super::*;

    /// A request as the HTTP layer will see it: path to attributes,
    /// authorize, a refusal in upstream's words.
    fn refusal(a: &Authorizer, user: &UserInfo, method: &str, path: &str, query: Option<&str>) -> Option<String> {
        let info = RequestInfo::parse(method, path, query).unwrap_or_else(|e| panic!("{e}"));
        let attrs = info.attributes(user);
        match a.authorize(&attrs) {
            Decision::Allow(_) => None,
            d => Some(message::forbidden(&attrs, &d.reason())),
        }
    }

    fn policy() -> Authorizer {
        let mut a = bootstrap::authorizer().unwrap_or_else(|e| panic!("{e}"));
        a.upsert_role(&role("ns", "pod-getter", vec![rule(&["get"]).groups(&[""]).resources(&["pods"])]));
        a.upsert_role_binding(&rb("ns", "sa-gets-pods", "Role", "pod-getter", vec![subject("ServiceAccount", "sa", "")]));
        a
    }

    #[test]
    fn a_service_account_that_may_get_pods_may_not_delete_them() {
        let a = policy();
        let sa = UserInfo::service_account("ns", "sa");
        assert_eq!(refusal(&a, &sa, "GET", "/api/v1/namespaces/ns/pods/p", None), None);
        assert_eq!(
            refusal(&a, &sa, "DELETE", "/api/v1/namespaces/ns/pods/p", None).as_deref(),
            Some(r#"pods "p" is forbidden: User "system:serviceaccount:ns:sa" cannot delete resource "pods" in API group "" in the namespace "ns""#)
        );
        assert_eq!(
            refusal(&a, &sa, "GET", "/api/v1/namespaces/ns/pods", None).as_deref(),
            Some(r#"pods is forbidden: User "system:serviceaccount:ns:sa" cannot list resource "pods" in API group "" in the namespace "ns""#)
        );
        assert_eq!(
            refusal(&a, &sa, "POST", "/api/v1/namespaces/ns/pods/p/binding", None).as_deref(),
            Some(r#"pods "p" is forbidden: User "system:serviceaccount:ns:sa" cannot create resource "pods/binding" in API group "" in the namespace "ns""#)
        );
        assert_eq!(
            refusal(&a, &sa, "GET", "/api/v1/namespaces/other/pods/p", None).as_deref(),
            Some(r#"pods "p" is forbidden: User "system:serviceaccount:ns:sa" cannot get resource "pods" in API group "" in the namespace "other""#)
        );
        let berth = UserInfo::service_account("berth", "berth");
        assert_eq!(
            refusal(&a, &berth, "GET", "/api/v1/pods", Some("watch=true")).as_deref(),
            Some(r#"pods is forbidden: User "system:serviceaccount:berth:berth" cannot watch resource "pods" in API group "" at the cluster scope"#)
        );
        // Discovery is open to every authenticated user, /metrics is not.
        assert_eq!(refusal(&a, &berth, "GET", "/apis", None), None);
        assert_eq!(refusal(&a, &berth, "GET", "/metrics", None).as_deref(), Some(r#"forbidden: User "system:serviceaccount:berth:berth" cannot get path "/metrics""#));
    }

    #[test]
    fn anonymous_reads_health_and_version_and_nothing_else() {
        let a = policy();
        let anon = UserInfo::anonymous();
        for p in ["/healthz", "/livez", "/readyz", "/version"] {
            assert_eq!(refusal(&a, &anon, "GET", p, None), None, "{p}");
        }
        assert_eq!(refusal(&a, &anon, "GET", "/", None).as_deref(), Some(r#"forbidden: User "system:anonymous" cannot get path "/""#));
        assert_eq!(
            refusal(&a, &anon, "GET", "/api/v1/namespaces/default/pods", None).as_deref(),
            Some(r#"pods is forbidden: User "system:anonymous" cannot list resource "pods" in API group "" in the namespace "default""#)
        );
    }

    #[test]
    fn binding_anonymous_to_cluster_admin_needs_bind_or_masters() {
        let mut a = policy();
        a.upsert_cluster_role(&authorizer::tests::cluster_role("rbac-editor", vec![rule(&["*"]).groups(&[GROUP]).resources(&["clusterrolebindings"])]));
        a.upsert_cluster_role_binding(&crb("editors", "rbac-editor", vec![subject("User", "eve", "")]));
        let eve = UserInfo::new("eve", &["system:authenticated"]);
        let grant = crb("open", "cluster-admin", vec![subject("User", ANONYMOUS, "")]);
        // eve may create the binding object (the request is authorized) ...
        assert_eq!(refusal(&a, &eve, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", None), None);
        // ... but the storage refuses to grant what eve does not hold.
        let err = check_cluster_role_binding_write(&a, &eve, &grant, Write::Create).err().map(|e| e.to_string());
        assert!(err.as_deref().is_some_and(|e| e.starts_with(r#"clusterrolebindings.rbac.authorization.k8s.io "open" is forbidden: user "eve" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:"#)), "{err:?}");
        // With bind on clusterroles/cluster-admin it may.
        a.upsert_cluster_role(&authorizer::tests::cluster_role("bind-admin", vec![rule(&["bind"]).groups(&[GROUP]).resources(&["clusterroles"]).names(&["cluster-admin"])]));
        a.upsert_cluster_role_binding(&crb("eve-binds", "bind-admin", vec![subject("User", "eve", "")]));
        assert!(check_cluster_role_binding_write(&a, &eve, &grant, Write::Create).is_ok());
        assert!(check_cluster_role_binding_write(&a, &UserInfo::new("root", &[SYSTEM_MASTERS]), &grant, Write::Create).is_ok());
    }

    /// The cost of a check among many bindings (prints; asserts nothing
    /// about time): `cargo test -p berth-cluster --lib rbac -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, not a test"]
    fn authorize_cost_among_many_bindings() {
        let mut a = policy();
        for n in 0..1000 {
            let ns = format!("ns{n}");
            a.upsert_role(&role(&ns, "pod-getter", vec![rule(&["get", "list"]).groups(&[""]).resources(&["pods"])]));
            for b in 0..10 {
                a.upsert_role_binding(&rb(&ns, &format!("b{b}"), "Role", "pod-getter", vec![subject("ServiceAccount", &format!("sa{b}"), "")]));
            }
        }
        for n in 0..1000 {
            a.upsert_cluster_role_binding(&crb(&format!("crb{n}"), "view", vec![subject("User", &format!("user{n}"), "")]));
        }
        let sa = UserInfo::service_account("ns500", "sa9");
        let info = RequestInfo::parse("GET", "/api/v1/namespaces/ns500/pods/p", None).unwrap_or_default();
        let denied_info = RequestInfo::parse("DELETE", "/api/v1/namespaces/ns500/pods/p", None).unwrap_or_default();
        let (allowed, denied) = (info.attributes(&sa), denied_info.attributes(&sa));
        let n = 200_000;
        let t = std::time::Instant::now();
        let mut ok = 0;
        for _ in 0..n {
            ok += usize::from(a.authorize(&allowed).is_allowed());
            ok += usize::from(a.authorize(&denied).is_allowed());
        }
        let per = t.elapsed() / (2 * n);
        let time = |f: &dyn Fn() -> bool| {
            let t = std::time::Instant::now();
            for _ in 0..n {
                std::hint::black_box(f());
            }
            t.elapsed() / n
        };
        let anon = UserInfo::anonymous();
        let healthz = Attributes::non_resource(&anon, "get", "/healthz");
        println!(
            "allowed: authorize {:?}, allows {:?}; denied: authorize {:?}, allows {:?}; anonymous /healthz {:?}",
            time(&|| a.authorize(&allowed).is_allowed()),
            time(&|| a.allows(&allowed)),
            time(&|| a.authorize(&denied).is_allowed()),
            time(&|| a.allows(&denied)),
            time(&|| a.allows(&healthz)),
        );
        let t = std::time::Instant::now();
        for _ in 0..n {
            let _ = RequestInfo::parse("GET", "/api/v1/namespaces/ns500/pods/p", None);
        }
        let parse = t.elapsed() / n;
        println!("10k RoleBindings, 1k ClusterRoleBindings: authorize {per:?} per check ({ok} allowed), RequestInfo::parse {parse:?}");
        assert_eq!(ok, n as usize);
    }
}
