//! Escalation prevention on RBAC writes, as upstream's `policybased`
//! storages (`pkg/registry/rbac/{role,clusterrole,rolebinding,clusterrolebinding}/policybased`
//! with `pkg/registry/rbac/escalation_check.go`):
//!
//! - a Role or ClusterRole may be written by a member of `system:masters`,
//!   by a user allowed to `escalate` it, or by a user who already holds
//!   every rule it grants (in its namespace; cluster-wide for a
//!   ClusterRole); setting or changing an aggregationRule needs `*` on
//!   everything (cluster-admin);
//! - a RoleBinding or ClusterRoleBinding may be written by a member of
//!   `system:masters`, by a user allowed to `bind` the role it refers to
//!   (in the binding's namespace), or by a user who holds every rule of
//!   that role;
//! - an update that only changes what the garbage collector changes
//!   (ownerReferences, finalizers) is always allowed.
//!
//! Refusals are upstream's: 403 `roles.rbac.authorization.k8s.io "r" is forbidden:
//! user "u" (groups=["g"]) is attempting to grant RBAC permissions not currently held:\n{...}`,
//! and 404 when a binding names a role that does not exist.

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use super::attributes::{Attributes, UserInfo};
use super::authorizer::{Authorizer, ResolutionError, aggregate_messages};
use super::message::{forbidden_details, forbidden_with, go_quote, go_quote_list};
use super::rules::{RuleBuilder, compact_rules, compact_string, covers, rule};
use super::GROUP;

/// A refused RBAC write.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// 403 Forbidden: the user may not grant what the object grants.
    #[error("{}", forbidden_with(GROUP, resource, name, message))]
    Forbidden {
        /// `roles`, `clusterroles`, `rolebindings` or `clusterrolebindings`.
        resource: &'static str,
        /// The object's name.
        name: String,
        /// Why (upstream's error text after `is forbidden: `).
        message: String,
    },
    /// 404 NotFound: the binding's role does not exist (as the storage says it).
    #[error("{}", .0.registry_message())]
    RoleNotFound(ResolutionError),
}

impl Error {
    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            Error::Forbidden { .. } => 403,
            Error::RoleNotFound(ResolutionError::NotFound { .. }) => 404,
            Error::RoleNotFound(ResolutionError::UnsupportedKind(_)) => 500,
        }
    }

    /// The `metav1.Status` body.
    pub fn status(&self) -> Value {
        let (reason, details) = match self {
            Error::Forbidden { resource, name, .. } => ("Forbidden", forbidden_details(GROUP, resource, name)),
            Error::RoleNotFound(ResolutionError::NotFound { kind, name }) => ("NotFound", forbidden_details(GROUP, &format!("{}s", kind.to_ascii_lowercase()), name)),
            Error::RoleNotFound(ResolutionError::UnsupportedKind(_)) => ("InternalError", json!({})),
        };
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": reason,
            "details": details,
            "code": self.code(),
        })
    }
}

/// A write: a create, or an update of `old`.
#[derive(Clone, Copy, Debug)]
pub enum Write<'a, T> {
    /// A create (the request path names no object).
    Create,
    /// An update (a PUT or PATCH of the named object) of what is stored.
    Update(&'a T),
}

/// Upstream's `ConfirmNoEscalation`: does `user` hold every rule of
/// `rules` in `namespace` ("" for cluster-wide rules only)? The error is
/// the text after `is forbidden: `: the missing rules compacted, one per
/// line, sorted.
pub fn confirm_no_escalation(authz: &Authorizer, user: &UserInfo, namespace: &str, rules: &[PolicyRule]) -> Result<(), String> {
    let owner = authz.rules_for(user, namespace);
    let (ok, missing) = covers(&owner.rules, rules);
    if ok {
        return Ok(());
    }
    let mut lines: Vec<String> = compact_rules(&missing).iter().map(compact_string).collect();
    lines.sort();
    lines.dedup();
    let mut msg = format!(
        "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        go_quote(&user.name),
        go_quote_list(&user.groups),
        lines.join("\n")
    );
    if !owner.errors.is_empty() {
        msg.push_str(&format!("; resolution errors: [{}]", aggregate_messages(owner.errors.iter().map(ResolutionError::registry_message))));
    }
    Err(msg)
}

/// Is `new` `old` with only ownerReferences, finalizers, selfLink or
/// managedFields changed (upstream's `IsOnlyMutatingGCFields`)?
fn only_gc_fields<T: Clone + PartialEq>(new: &T, old: &T, meta: impl Fn(&mut T) -> &mut ObjectMeta) -> bool {
    let mut copied = new.clone();
    let mut old_copy = old.clone();
    let old_meta = meta(&mut old_copy).clone();
    let m = meta(&mut copied);
    m.owner_references = old_meta.owner_references;
    m.finalizers = old_meta.finalizers;
    m.self_link = old_meta.self_link;
    m.managed_fields = old_meta.managed_fields;
    copied == *old
}

/// Upstream's `RoleEscalationAuthorized`: may `user` `escalate` the
/// role resource (`name` is the request's: "" on a create)?
fn escalate_authorized(authz: &Authorizer, user: &UserInfo, resource: &str, namespace: &str, name: &str) -> bool {
    authz.allows(&Attributes::resource(user, "escalate", GROUP, resource).ns(namespace).named(name))
}

/// Upstream's `BindingAuthorized`: may `user` `bind` the role `role_ref`
/// in `namespace` ("" for a ClusterRoleBinding)?
fn bind_authorized(authz: &Authorizer, user: &UserInfo, role_ref: &RoleRef, namespace: &str) -> bool {
    let resource = match role_ref.kind.as_str() {
        "ClusterRole" => "clusterroles",
        "Role" => "roles",
        _ => return false,
    };
    let group = role_ref.api_group.as_deref().unwrap_or_default();
    authz.allows(&Attributes::resource(user, "bind", group, resource).ns(namespace).named(&role_ref.name))
}

/// May `user` create or update the Role `new`?
pub fn check_role_write(authz: &Authorizer, user: &UserInfo, new: &Role, write: Write<'_, Role>) -> Result<(), Error> {
    let name = new.metadata.name.clone().unwrap_or_default();
    let ns = new.metadata.namespace.as_deref().unwrap_or_default();
    let request_name = if matches!(write, Write::Create) { "" } else { name.as_str() };
    if user.is_privileged() || escalate_authorized(authz, user, "roles", ns, request_name) {
        return Ok(());
    }
    if let Write::Update(old) = write
        && only_gc_fields(new, old, |r| &mut r.metadata)
    {
        return Ok(());
    }
    confirm_no_escalation(authz, user, ns, new.rules.as_deref().unwrap_or_default()).map_err(|message| Error::Forbidden { resource: "roles", name, message })
}

/// `*` on everything: what an aggregationRule needs.
fn full_authority() -> Vec<PolicyRule> {
    vec![rule(&["*"]).groups(&["*"]).resources(&["*"]), rule(&["*"]).urls(&["*"])]
}

fn has_aggregation_rule(cr: &ClusterRole) -> bool {
    cr.aggregation_rule.as_ref().and_then(|a| a.cluster_role_selectors.as_ref()).is_some_and(|s| !s.is_empty())
}

/// May `user` create or update the ClusterRole `new`?
pub fn check_cluster_role_write(authz: &Authorizer, user: &UserInfo, new: &ClusterRole, write: Write<'_, ClusterRole>) -> Result<(), Error> {
    let name = new.metadata.name.clone().unwrap_or_default();
    let request_name = if matches!(write, Write::Create) { "" } else { name.as_str() };
    if user.is_privileged() || escalate_authorized(authz, user, "clusterroles", "", request_name) {
        return Ok(());
    }
    let old = match write {
        Write::Update(old) if only_gc_fields(new, old, |r| &mut r.metadata) => return Ok(()),
        Write::Update(old) => Some(old),
        Write::Create => None,
    };
    let forbidden = |message| Error::Forbidden { resource: "clusterroles", name: name.clone(), message };
    confirm_no_escalation(authz, user, "", new.rules.as_deref().unwrap_or_default()).map_err(forbidden)?;
    if has_aggregation_rule(new) || old.is_some_and(has_aggregation_rule) {
        confirm_no_escalation(authz, user, "", &full_authority()).map_err(|_| forbidden("must have cluster-admin privileges to use the aggregationRule".into()))?;
    }
    Ok(())
}

/// A binding write that needs no check: by a privileged user, or an update
/// that changes only what the garbage collector writes.
fn binding_write_exempt<T: Clone + PartialEq + k8s_openapi::Metadata<Ty = ObjectMeta>>(user: &UserInfo, new: &T, write: Write<'_, T>) -> bool {
    user.is_privileged() || matches!(write, Write::Update(old) if only_gc_fields(new, old, |r| r.metadata_mut()))
}

/// The binding checks common to both kinds.
fn check_binding(authz: &Authorizer, user: &UserInfo, resource: &'static str, name: &str, namespace: &str, role_ref: &RoleRef) -> Result<(), Error> {
    if bind_authorized(authz, user, role_ref, namespace) {
        return Ok(());
    }
    let rules = authz.role_ref_rules(namespace, &role_ref.kind, &role_ref.name).map_err(Error::RoleNotFound)?;
    confirm_no_escalation(authz, user, namespace, rules).map_err(|message| Error::Forbidden { resource, name: name.to_string(), message })
}

/// May `user` create or update the RoleBinding `new`?
pub fn check_role_binding_write(authz: &Authorizer, user: &UserInfo, new: &RoleBinding, write: Write<'_, RoleBinding>) -> Result<(), Error> {
    if binding_write_exempt(user, new, write) {
        return Ok(());
    }
    let name = new.metadata.name.as_deref().unwrap_or_default();
    let ns = new.metadata.namespace.as_deref().unwrap_or_default();
    check_binding(authz, user, "rolebindings", name, ns, &new.role_ref)
}

/// May `user` create or update the ClusterRoleBinding `new`?
pub fn check_cluster_role_binding_write(authz: &Authorizer, user: &UserInfo, new: &ClusterRoleBinding, write: Write<'_, ClusterRoleBinding>) -> Result<(), Error> {
    if binding_write_exempt(user, new, write) {
        return Ok(());
    }
    let name = new.metadata.name.as_deref().unwrap_or_default();
    check_binding(authz, user, "clusterrolebindings", name, "", &new.role_ref)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rbac::authorizer::tests::{cluster_role, crb, rb, role, subject};
    use crate::rbac::bootstrap;
    use k8s_openapi::api::rbac::v1::AggregationRule;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};

    fn rbac_writer_policy() -> Authorizer {
        // "writer" may write roles and bindings in ns and holds get/list pods there;
        // "escalator" may also escalate roles; "binder" may bind the ClusterRole "view".
        let write_rbac = rule(&["create", "update", "patch"]).groups(&[GROUP]).resources(&["roles", "rolebindings", "clusterroles", "clusterrolebindings"]);
        let mut crs = bootstrap::cluster_roles().unwrap_or_default();
        crs.extend([
            cluster_role("rbac-writer", vec![write_rbac]),
            cluster_role("pod-reader", vec![rule(&["get", "list"]).groups(&[""]).resources(&["pods"])]),
            cluster_role("escalate", vec![rule(&["escalate"]).groups(&[GROUP]).resources(&["roles"])]),
            cluster_role("bind-view", vec![rule(&["bind"]).groups(&[GROUP]).resources(&["clusterroles"]).names(&["view"])]),
        ]);
        let mut crbs = bootstrap::cluster_role_bindings().unwrap_or_default();
        crbs.push(crb("writers", "rbac-writer", vec![subject("Group", "writers", "")]));
        Authorizer::from_objects(
            &crs,
            &[],
            &crbs,
            &[
                rb("ns", "readers", "ClusterRole", "pod-reader", vec![subject("Group", "writers", "")]),
                rb("ns", "escalators", "ClusterRole", "escalate", vec![subject("User", "escalator", "")]),
                rb("ns", "binders", "ClusterRole", "bind-view", vec![subject("User", "binder", "")]),
            ],
        )
    }

    fn user(name: &str) -> UserInfo {
        UserInfo::new(name, &["writers", "system:authenticated"])
    }

    /// Upstream's escalation cases (rule_test.go `TestConfirmNoEscalation`,
    /// the policybased storage tests, test/integration/auth/rbac_test.go's
    /// "create role with more rights than held").
    #[test]
    fn role_writes() {
        let a = rbac_writer_policy();
        let get_pods = rule(&["get"]).groups(&[""]).resources(&["pods"]);
        let get_secrets = rule(&["get"]).groups(&[""]).resources(&["secrets"]);
        let held = role("ns", "held", vec![get_pods.clone()]);
        assert_eq!(check_role_write(&a, &user("w"), &held, Write::Create), Ok(()));
        let more = role("ns", "more", vec![get_pods.clone(), get_secrets.clone(), rule(&["list", "watch"]).groups(&[""]).resources(&["secrets"])]);
        let err = check_role_write(&a, &user("w"), &more, Write::Create).unwrap_err();
        assert_eq!(err.code(), 403);
        assert_eq!(
            err.to_string(),
            "roles.rbac.authorization.k8s.io \"more\" is forbidden: user \"w\" (groups=[\"writers\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\" \"watch\"]}"
        );
        // The same role elsewhere: the pod rules are not held there either.
        let elsewhere = role("other", "held", vec![get_pods.clone()]);
        assert!(check_role_write(&a, &user("w"), &elsewhere, Write::Create).is_err());
        // escalate on roles in ns, system:masters.
        assert_eq!(check_role_write(&a, &UserInfo::new("escalator", &[]), &more, Write::Create), Ok(()));
        assert_eq!(check_role_write(&a, &UserInfo::new("root", &["system:masters"]), &more, Write::Create), Ok(()));
        // Only the GC's fields change: allowed even though the rules are not held.
        let mut owned = more.clone();
        owned.metadata.finalizers = Some(vec!["f".into()]);
        owned.metadata.owner_references = Some(vec![OwnerReference { api_version: "v1".into(), kind: "ConfigMap".into(), name: "c".into(), uid: "u".into(), ..OwnerReference::default() }]);
        assert_eq!(check_role_write(&a, &user("w"), &owned, Write::Update(&more)), Ok(()));
        let mut changed = owned.clone();
        changed.rules = Some(vec![get_secrets]);
        assert!(check_role_write(&a, &user("w"), &changed, Write::Update(&more)).is_err());
    }

    #[test]
    fn cluster_role_writes_and_aggregation() {
        let a = rbac_writer_policy();
        let w = user("w");
        // Held only in ns: not cluster-wide.
        let cr = cluster_role("pods", vec![rule(&["get"]).groups(&[""]).resources(&["pods"])]);
        let err = check_cluster_role_write(&a, &w, &cr, Write::Create).unwrap_err();
        assert!(err.to_string().starts_with("clusterroles.rbac.authorization.k8s.io \"pods\" is forbidden: user \"w\""), "{err}");
        // What system:authenticated holds through the bootstrap policy is held.
        let basic = cluster_role("basic", vec![rule(&["create"]).groups(&["authorization.k8s.io"]).resources(&["selfsubjectaccessreviews"]), rule(&["get"]).urls(&["/healthz"])]);
        assert_eq!(check_cluster_role_write(&a, &w, &basic, Write::Create), Ok(()));
        let mut agg = basic.clone();
        agg.aggregation_rule = Some(AggregationRule { cluster_role_selectors: Some(vec![LabelSelector::default()]) });
        let err = check_cluster_role_write(&a, &w, &agg, Write::Create).unwrap_err();
        assert_eq!(err.to_string(), "clusterroles.rbac.authorization.k8s.io \"basic\" is forbidden: must have cluster-admin privileges to use the aggregationRule");
        // Removing an aggregationRule needs it too.
        assert!(check_cluster_role_write(&a, &w, &basic, Write::Update(&agg)).is_err());
        assert_eq!(check_cluster_role_write(&a, &UserInfo::new("root", &["system:masters"]), &agg, Write::Create), Ok(()));
    }

    #[test]
    fn binding_writes() {
        let a = rbac_writer_policy();
        let w = user("w");
        // Binding system:anonymous to cluster-admin without bind: refused with the missing rules.
        let anon_admin = crb("anon", "cluster-admin", vec![subject("User", "system:anonymous", "")]);
        let err = check_cluster_role_binding_write(&a, &w, &anon_admin, Write::Create).unwrap_err();
        assert_eq!(
            err.to_string(),
            "clusterrolebindings.rbac.authorization.k8s.io \"anon\" is forbidden: user \"w\" (groups=[\"writers\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}\n{NonResourceURLs:[\"*\"], Verbs:[\"*\"]}"
        );
        assert_eq!(err.status()["reason"], "Forbidden");
        assert_eq!(err.status()["details"], json!({"name": "anon", "group": GROUP, "kind": "clusterrolebindings"}));
        // A RoleBinding of rules held in ns.
        let readers = rb("ns", "r2", "ClusterRole", "pod-reader", vec![subject("User", "x", "")]);
        assert_eq!(check_role_binding_write(&a, &w, &readers, Write::Create), Ok(()));
        // bind on clusterroles/view in ns: may bind view there (more than held), not admin.
        let binder = UserInfo::new("binder", &[]);
        let view = rb("ns", "v", "ClusterRole", "view", vec![subject("User", "x", "")]);
        assert_eq!(check_role_binding_write(&a, &binder, &view, Write::Create), Ok(()));
        assert!(check_role_binding_write(&a, &w, &view, Write::Create).is_err());
        let admin = rb("ns", "a", "ClusterRole", "admin", vec![subject("User", "x", "")]);
        assert!(check_role_binding_write(&a, &binder, &admin, Write::Create).is_err());
        let view_elsewhere = rb("other", "v", "ClusterRole", "view", vec![subject("User", "x", "")]);
        assert!(check_role_binding_write(&a, &binder, &view_elsewhere, Write::Create).is_err());
        // A role that does not exist: 404 from the storage.
        let missing = rb("ns", "m", "Role", "nope", vec![]);
        let err = check_role_binding_write(&a, &w, &missing, Write::Create).unwrap_err();
        assert_eq!((err.code(), err.to_string()), (404, "roles.rbac.authorization.k8s.io \"nope\" not found".to_string()));
        // GC-only update of a binding the user could not create.
        let mut owned = anon_admin.clone();
        owned.metadata.finalizers = Some(vec!["f".into()]);
        assert_eq!(check_cluster_role_binding_write(&a, &w, &owned, Write::Update(&anon_admin)), Ok(()));
        assert_eq!(check_cluster_role_binding_write(&a, &UserInfo::new("r", &["system:masters"]), &anon_admin, Write::Create), Ok(()));
    }

    #[test]
    fn resolution_errors_are_reported_with_the_missing_rules() {
        let a = Authorizer::from_objects(&[], &[], &[crb("b", "gone", vec![subject("User", "u", "")])], &[]);
        let err = confirm_no_escalation(&a, &UserInfo::new("u", &[]), "", &[rule(&["get"]).urls(&["/x"])]).unwrap_err();
        assert_eq!(
            err,
            "user \"u\" (groups=[]) is attempting to grant RBAC permissions not currently held:\n{NonResourceURLs:[\"/x\"], Verbs:[\"get\"]}; resolution errors: [clusterroles.rbac.authorization.k8s.io \"gone\" not found]"
        );
    }
}
