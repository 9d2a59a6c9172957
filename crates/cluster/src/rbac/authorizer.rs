//! The authorizer: kube-apiserver's privileged-group authorizer
//! (`system:masters` may do everything) followed by RBAC, over an index of
//! the cluster's ClusterRoles, Roles, ClusterRoleBindings and RoleBindings.
//!
//! # The index
//!
//! Bindings are indexed by subject: a User subject under its name, a
//! ServiceAccount subject under its user name
//! (`system:serviceaccount:NS:NAME`, NS defaulting to a RoleBinding's own
//! namespace, as upstream's `appliesToUser`), a Group subject under the
//! group. ClusterRoleBindings have one index; RoleBindings one per
//! namespace, beside that namespace's Roles. A check looks up the user's
//! name and each of its groups, so it touches only the bindings that can
//! apply, never the whole list as upstream's resolver does. Roles are kept
//! with their rules precompiled ([`CompiledRule`]) and resolved by name at
//! check time, so a role change is one map update.
//!
//! # Keeping it current
//!
//! Incrementally: each `upsert_*`/`remove_*` (or [`Authorizer::apply_json`]
//! with a stored object) costs the size of that object, except ClusterRole
//! changes, which also redo aggregation over all ClusterRoles (tens of
//! them). The authorizer is a plain value: the owner keeps it behind a
//! lock (or swaps an `Arc` of a clone) and calls the methods on each RBAC
//! write. Aggregated ClusterRoles are authorized with their aggregated
//! rules at once (as if the aggregation controller had already run);
//! [`Authorizer::aggregation_updates`] says what to write back into the
//! stored objects.
//!
//! # Decisions
//!
//! [`Authorizer::authorize`] answers as upstream's authorizer chain does
//! for RBAC: Allow with the binding that allowed (the reason text
//! `RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to Group "g"`),
//! or NoOpinion (the request is then forbidden) with the reasons roles
//! could not be found, if any. RBAC never denies outright.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use k8s_openapi::api::authorization::v1::{NonResourceRule, ResourceRule, SubjectRulesReviewStatus};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject};
use serde::Deserialize as _;
use serde_json::Value;

use super::aggregation::{self, RoleView};
use super::attributes::{Attributes, UserInfo, service_account_user};
use super::message::go_quote;
use super::rules::{CompiledRule, same_rules};

/// An RBAC object the authorizer cannot read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The stored JSON does not decode as the kind it is stored as.
    #[error("{resource} {name:?}: {source}")]
    Decode {
        /// `clusterroles`, `roles`, `clusterrolebindings` or `rolebindings`.
        resource: String,
        /// The object's name.
        name: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// A role a binding refers to that cannot be resolved. Upstream's
/// authorizer reads roles through informer listers and so names the
/// resource in the singular (`clusterrole.rbac.authorization.k8s.io "x" not found`);
/// its escalation checks read them from storage, in the plural.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResolutionError {
    /// The role does not exist.
    NotFound {
        /// `ClusterRole` or `Role`.
        kind: String,
        /// The role's name.
        name: String,
    },
    /// The roleRef's kind is neither `ClusterRole` nor `Role`.
    UnsupportedKind(String),
}

impl ResolutionError {
    /// The message in the authorizer's form (lister, singular resource).
    pub fn authorizer_message(&self) -> String {
        match self {
            ResolutionError::NotFound { kind, name } => format!("{}.{} {} not found", kind.to_ascii_lowercase(), super::GROUP, go_quote(name)),
            ResolutionError::UnsupportedKind(k) => format!("unsupported role reference kind: {}", go_quote(k)),
        }
    }

    /// The message in the storage's form (plural resource), as escalation
    /// checks report it.
    pub fn registry_message(&self) -> String {
        match self {
            ResolutionError::NotFound { kind, name } => format!("{}s.{} {} not found", kind.to_ascii_lowercase(), super::GROUP, go_quote(name)),
            ResolutionError::UnsupportedKind(k) => format!("unsupported role reference kind: {}", go_quote(k)),
        }
    }
}

impl std::fmt::Display for ResolutionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.authorizer_message())
    }
}

/// `utilerrors.NewAggregate(errs).Error()`: one message as it is, several
/// distinct ones as `[a, b]` (duplicates dropped), none as "".
pub(crate) fn aggregate_messages(messages: impl IntoIterator<Item = String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for m in messages {
        if !seen.contains(&m) {
            seen.push(m);
        }
    }
    match seen.len() {
        0 => String::new(),
        1 => seen.remove(0),
        _ => format!("[{}]", seen.join(", ")),
    }
}

/// The index's hasher: FxHash (as rustc's), a multiply and rotate per
/// eight bytes. The keys are user, group and role names on a local test
/// server, so SipHash's flooding resistance buys nothing, and it is most
/// of a check's cost (a check looks up the user and each of its groups).
#[derive(Clone, Copy, Debug, Default)]
struct FxHasher(u64);

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A map with [`FxHasher`].
type Map<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// A binding as the authorizer indexes it.
#[derive(Debug, PartialEq)]
pub struct Binding {
    /// The binding's namespace ("" for a ClusterRoleBinding).
    pub namespace: String,
    /// The binding's name.
    pub name: String,
    /// `roleRef.kind` (`ClusterRole` or `Role`).
    pub role_kind: String,
    /// `roleRef.name`.
    pub role_name: String,
    /// The subjects, in order.
    pub subjects: Vec<Subject>,
}

/// Where an index entry for a subject goes.
enum SubjectKey {
    User(String),
    Group(String),
}

impl Binding {
    fn cluster(crb: &ClusterRoleBinding) -> Binding {
        Binding {
            namespace: String::new(),
            name: crb.metadata.name.clone().unwrap_or_default(),
            role_kind: crb.role_ref.kind.clone(),
            role_name: crb.role_ref.name.clone(),
            subjects: crb.subjects.clone().unwrap_or_default(),
        }
    }

    fn namespaced(rb: &RoleBinding) -> Binding {
        Binding {
            namespace: rb.metadata.namespace.clone().unwrap_or_default(),
            name: rb.metadata.name.clone().unwrap_or_default(),
            role_kind: rb.role_ref.kind.clone(),
            role_name: rb.role_ref.name.clone(),
            subjects: rb.subjects.clone().unwrap_or_default(),
        }
    }

    /// Upstream's `appliesToUser` for one subject.
    fn subject_applies(&self, s: &Subject, user: &UserInfo) -> bool {
        match s.kind.as_str() {
            "User" => user.name == s.name,
            "Group" => user.in_group(&s.name),
            "ServiceAccount" => {
                let ns = s.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(&self.namespace);
                !ns.is_empty() && user.name.strip_prefix(super::SERVICE_ACCOUNT_USER_PREFIX).and_then(|r| r.strip_prefix(ns)).and_then(|r| r.strip_prefix(':')) == Some(s.name.as_str())
            }
            _ => false,
        }
    }

    /// The first subject that applies to `user` (upstream's `appliesTo`).
    fn applies_to(&self, user: &UserInfo) -> Option<usize> {
        self.subjects.iter().position(|s| self.subject_applies(s, user))
    }

    fn keys(&self) -> impl Iterator<Item = SubjectKey> + '_ {
        self.subjects.iter().filter_map(|s| match s.kind.as_str() {
            "User" => Some(SubjectKey::User(s.name.clone())),
            "Group" => Some(SubjectKey::Group(s.name.clone())),
            "ServiceAccount" => {
                let ns = s.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(&self.namespace);
                (!ns.is_empty()).then(|| SubjectKey::User(service_account_user(ns, &s.name)))
            }
            _ => None,
        })
    }

    /// Upstream's `describeSubject`.
    fn describe_subject(&self, i: usize) -> String {
        let Some(s) = self.subjects.get(i) else { return String::new() };
        match s.kind.as_str() {
            "ServiceAccount" => {
                let ns = s.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(&self.namespace);
                format!("{} {}", s.kind, go_quote(&format!("{}/{ns}", s.name)))
            }
            _ => format!("{} {}", s.kind, go_quote(&s.name)),
        }
    }
}

/// Why a request was allowed.
#[derive(Clone, Debug, PartialEq)]
pub enum AllowedBy {
    /// The user is in `system:masters`.
    PrivilegedGroup,
    /// A binding's role allows it; `subject` is the index of the binding's
    /// first subject that applies to the user.
    Binding {
        /// The binding.
        binding: Arc<Binding>,
        /// The subject it applied through.
        subject: usize,
    },
}

impl AllowedBy {
    /// The reason upstream gives: "" for the privileged group,
    /// `RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to Group "g"`
    /// or `RBAC: allowed by RoleBinding "b/ns" of Role "r" to ServiceAccount "sa/ns"`.
    pub fn reason(&self) -> String {
        match self {
            AllowedBy::PrivilegedGroup => String::new(),
            AllowedBy::Binding { binding, subject } => {
                let (kind, name) = if binding.namespace.is_empty() {
                    ("ClusterRoleBinding", go_quote(&binding.name))
                } else {
                    ("RoleBinding", go_quote(&format!("{}/{}", binding.name, binding.namespace)))
                };
                format!("RBAC: allowed by {kind} {name} of {} {} to {}", binding.role_kind, go_quote(&binding.role_name), binding.describe_subject(*subject))
            }
        }
    }
}

/// An authorizer's answer (upstream's `authorizer.Decision` with its reason).
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Allowed.
    Allow(AllowedBy),
    /// Denied outright (RBAC never does this; kept for other authorizers).
    Deny(String),
    /// No rule allows it: the request is forbidden. The reason is "" or
    /// `RBAC: ...` with the roles that could not be resolved.
    NoOpinion(String),
}

impl Decision {
    /// Allowed?
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allow(_))
    }

    /// The reason text (a SubjectAccessReview's `status.reason`, and what
    /// a 403's message ends with when not empty).
    pub fn reason(&self) -> String {
        match self {
            Decision::Allow(by) => by.reason(),
            Decision::Deny(r) | Decision::NoOpinion(r) => r.clone(),
        }
    }
}

/// A role's rules, as stored (or aggregated) and compiled.
#[derive(Debug, Default, PartialEq)]
struct CompiledRole {
    rules: Vec<PolicyRule>,
    compiled: Vec<CompiledRule>,
}

impl CompiledRole {
    fn new(rules: Vec<PolicyRule>) -> Arc<CompiledRole> {
        let compiled = rules.iter().map(CompiledRule::new).collect();
        Arc::new(CompiledRole { rules, compiled })
    }

    fn allows(&self, attrs: &Attributes<'_>) -> bool {
        self.compiled.iter().any(|r| r.allows(attrs))
    }
}

/// Bindings by subject.
#[derive(Clone, Debug, Default)]
struct SubjectIndex {
    by_user: Map<String, Vec<Arc<Binding>>>,
    by_group: Map<String, Vec<Arc<Binding>>>,
}

impl SubjectIndex {
    fn insert(&mut self, b: &Arc<Binding>) {
        for key in b.keys() {
            let (map, k) = match key {
                SubjectKey::User(k) => (&mut self.by_user, k),
                SubjectKey::Group(k) => (&mut self.by_group, k),
            };
            let list = map.entry(k).or_default();
            if !list.iter().any(|x| Arc::ptr_eq(x, b)) {
                list.push(b.clone());
            }
        }
    }

    fn remove(&mut self, b: &Arc<Binding>) {
        for key in b.keys() {
            let (map, k) = match key {
                SubjectKey::User(k) => (&mut self.by_user, k),
                SubjectKey::Group(k) => (&mut self.by_group, k),
            };
            if let Some(list) = map.get_mut(&k) {
                list.retain(|x| !Arc::ptr_eq(x, b));
                if list.is_empty() {
                    map.remove(&k);
                }
            }
        }
    }

    /// The bindings that may apply to `user` (a binding naming the user
    /// and one of its groups comes twice).
    fn candidates<'a>(&'a self, user: &'a UserInfo) -> impl Iterator<Item = &'a Arc<Binding>> + 'a {
        let by_name = self.by_user.get(user.name.as_str()).into_iter().flatten();
        let by_group = user.groups.iter().filter_map(|g| self.by_group.get(g.as_str())).flatten();
        by_name.chain(by_group)
    }

    fn is_empty(&self) -> bool {
        self.by_user.is_empty() && self.by_group.is_empty()
    }
}

/// One namespace's Roles and RoleBindings.
#[derive(Clone, Debug, Default)]
struct Namespace {
    roles: Map<String, Arc<CompiledRole>>,
    bindings: SubjectIndex,
    by_name: Map<String, Arc<Binding>>,
}

/// The rules that apply to a user in a namespace, and the roles that could
/// not be resolved on the way (upstream's `RulesFor`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RulesReview {
    /// ClusterRoleBindings' rules, then the namespace's RoleBindings'
    /// (each binding's once, bindings in name order).
    pub rules: Vec<PolicyRule>,
    /// Roles the user's bindings name that do not exist.
    pub errors: Vec<ResolutionError>,
}

impl RulesReview {
    /// A SelfSubjectRulesReview's status: one resource rule per rule with
    /// resources, one non-resource rule per rule with URLs, the
    /// resolution errors as `evaluationError`, never incomplete.
    pub fn status(&self) -> SubjectRulesReviewStatus {
        let mut status = SubjectRulesReviewStatus::default();
        for r in &self.rules {
            if r.resources.as_ref().is_some_and(|v| !v.is_empty()) {
                status.resource_rules.push(ResourceRule {
                    verbs: r.verbs.clone(),
                    api_groups: r.api_groups.clone(),
                    resources: r.resources.clone(),
                    resource_names: r.resource_names.clone(),
                });
            }
            if r.non_resource_urls.as_ref().is_some_and(|v| !v.is_empty()) {
                status.non_resource_rules.push(NonResourceRule { verbs: r.verbs.clone(), non_resource_urls: r.non_resource_urls.clone() });
            }
        }
        let err = aggregate_messages(self.errors.iter().map(ResolutionError::authorizer_message));
        status.evaluation_error = (!err.is_empty()).then_some(err);
        status
    }
}

/// The RBAC authorizer over an index of RBAC objects (see the module docs).
/// Cloning shares the compiled roles and bindings (`Arc`s) and copies the
/// maps, for owners that swap a new snapshot in on each RBAC write.
#[derive(Clone, Debug, Default)]
pub struct Authorizer {
    /// ClusterRoles as stored (for aggregation).
    views: Map<String, RoleView>,
    /// ClusterRoles' effective rules (aggregated where they aggregate).
    cluster_roles: Map<String, Arc<CompiledRole>>,
    aggregation_errors: Vec<aggregation::Error>,
    cluster_bindings: SubjectIndex,
    cluster_bindings_by_name: Map<String, Arc<Binding>>,
    namespaces: Map<String, Namespace>,
}

impl Authorizer {
    /// An authorizer with no RBAC objects: only `system:masters` is allowed anything.
    pub fn new() -> Self {
        Authorizer::default()
    }

    /// An authorizer over these objects (aggregation computed once).
    pub fn from_objects(cluster_roles: &[ClusterRole], roles: &[Role], cluster_role_bindings: &[ClusterRoleBinding], role_bindings: &[RoleBinding]) -> Self {
        let mut a = Authorizer::new();
        for cr in cluster_roles {
            let v = RoleView::of(cr);
            a.views.insert(v.name.clone(), v);
        }
        a.reaggregate();
        for r in roles {
            a.upsert_role(r);
        }
        for b in cluster_role_bindings {
            a.upsert_cluster_role_binding(b);
        }
        for b in role_bindings {
            a.upsert_role_binding(b);
        }
        a
    }

    /// Recomputes aggregation and the effective rules of every ClusterRole
    /// whose rules changed.
    fn reaggregate(&mut self) {
        let agg = aggregation::aggregate_views(self.views.values());
        self.aggregation_errors = agg.errors;
        self.cluster_roles.retain(|name, _| self.views.contains_key(name));
        for (name, view) in &self.views {
            let effective = agg.rules.get(name).unwrap_or(&view.rules);
            let current = self.cluster_roles.get(name);
            if current.is_none_or(|c| !same_rules(&c.rules, effective)) {
                self.cluster_roles.insert(name.clone(), CompiledRole::new(effective.clone()));
            }
        }
    }

    /// Adds or replaces a ClusterRole.
    pub fn upsert_cluster_role(&mut self, cr: &ClusterRole) {
        let v = RoleView::of(cr);
        if self.views.get(&v.name) == Some(&v) {
            return;
        }
        self.views.insert(v.name.clone(), v);
        self.reaggregate();
    }

    /// Removes a ClusterRole.
    pub fn remove_cluster_role(&mut self, name: &str) {
        if self.views.remove(name).is_some() {
            self.reaggregate();
        }
    }

    /// Adds or replaces a Role.
    pub fn upsert_role(&mut self, role: &Role) {
        let ns = role.metadata.namespace.clone().unwrap_or_default();
        let name = role.metadata.name.clone().unwrap_or_default();
        let rules = role.rules.clone().unwrap_or_default();
        self.namespaces.entry(ns).or_default().roles.insert(name, CompiledRole::new(rules));
    }

    /// Removes a Role.
    pub fn remove_role(&mut self, namespace: &str, name: &str) {
        if let Some(n) = self.namespaces.get_mut(namespace) {
            n.roles.remove(name);
        }
        self.prune(namespace);
    }

    /// Adds or replaces a ClusterRoleBinding.
    pub fn upsert_cluster_role_binding(&mut self, crb: &ClusterRoleBinding) {
        let b = Arc::new(Binding::cluster(crb));
        if let Some(old) = self.cluster_bindings_by_name.insert(b.name.clone(), b.clone()) {
            self.cluster_bindings.remove(&old);
        }
        self.cluster_bindings.insert(&b);
    }

    /// Removes a ClusterRoleBinding.
    pub fn remove_cluster_role_binding(&mut self, name: &str) {
        if let Some(old) = self.cluster_bindings_by_name.remove(name) {
            self.cluster_bindings.remove(&old);
        }
    }

    /// Adds or replaces a RoleBinding.
    pub fn upsert_role_binding(&mut self, rb: &RoleBinding) {
        let b = Arc::new(Binding::namespaced(rb));
        let n = self.namespaces.entry(b.namespace.clone()).or_default();
        if let Some(old) = n.by_name.insert(b.name.clone(), b.clone()) {
            n.bindings.remove(&old);
        }
        n.bindings.insert(&b);
    }

    /// Removes a RoleBinding.
    pub fn remove_role_binding(&mut self, namespace: &str, name: &str) {
        if let Some(n) = self.namespaces.get_mut(namespace)
            && let Some(old) = n.by_name.remove(name)
        {
            n.bindings.remove(&old);
        }
        self.prune(namespace);
    }

    fn prune(&mut self, namespace: &str) {
        if self.namespaces.get(namespace).is_some_and(|n| n.roles.is_empty() && n.by_name.is_empty() && n.bindings.is_empty()) {
            self.namespaces.remove(namespace);
        }
    }

    /// Applies a stored object's change: `obj` is the object as stored
    /// (JSON) after a create or update, `None` after a delete. `resource`
    /// is the plural resource; anything other than `clusterroles`, `roles`,
    /// `clusterrolebindings` and `rolebindings` is ignored (`Ok(false)`).
    pub fn apply_json(&mut self, resource: &str, namespace: &str, name: &str, obj: Option<&Value>) -> Result<bool, Error> {
        let decode = |e: serde_json::Error| Error::Decode { resource: resource.to_string(), name: name.to_string(), source: e };
        match (resource, obj) {
            ("clusterroles", Some(v)) => self.upsert_cluster_role(&ClusterRole::deserialize(v).map_err(decode)?),
            ("clusterroles", None) => self.remove_cluster_role(name),
            ("roles", Some(v)) => self.upsert_role(&Role::deserialize(v).map_err(decode)?),
            ("roles", None) => self.remove_role(namespace, name),
            ("clusterrolebindings", Some(v)) => self.upsert_cluster_role_binding(&ClusterRoleBinding::deserialize(v).map_err(decode)?),
            ("clusterrolebindings", None) => self.remove_cluster_role_binding(name),
            ("rolebindings", Some(v)) => self.upsert_role_binding(&RoleBinding::deserialize(v).map_err(decode)?),
            ("rolebindings", None) => self.remove_role_binding(namespace, name),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The ClusterRoles whose stored rules differ from their aggregation,
    /// with the rules to write back (what the aggregation controller would
    /// update). Writing them back and applying the new objects leaves
    /// nothing to update.
    pub fn aggregation_updates(&self) -> Vec<(String, Vec<PolicyRule>)> {
        let mut out: Vec<(String, Vec<PolicyRule>)> = self
            .views
            .values()
            .filter(|v| v.selectors.is_some())
            .filter_map(|v| {
                let effective = self.cluster_roles.get(&v.name)?;
                (!same_rules(&effective.rules, &v.rules)).then(|| (v.name.clone(), effective.rules.clone()))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Aggregating ClusterRoles left as stored because a selector is invalid.
    pub fn aggregation_errors(&self) -> &[aggregation::Error] {
        &self.aggregation_errors
    }

    /// A ClusterRole's effective rules (aggregated if it aggregates).
    pub fn cluster_role_rules(&self, name: &str) -> Option<&[PolicyRule]> {
        self.cluster_roles.get(name).map(|r| r.rules.as_slice())
    }

    /// The role a binding in `namespace` ("" for a ClusterRoleBinding) refers to.
    fn resolve(&self, namespace: &str, kind: &str, name: &str) -> Result<&Arc<CompiledRole>, ResolutionError> {
        let not_found = || ResolutionError::NotFound { kind: kind.to_string(), name: name.to_string() };
        match kind {
            "ClusterRole" => self.cluster_roles.get(name).ok_or_else(not_found),
            "Role" => self.namespaces.get(namespace).and_then(|n| n.roles.get(name)).ok_or_else(not_found),
            other => Err(ResolutionError::UnsupportedKind(other.to_string())),
        }
    }

    /// The rules of the role `role_ref_kind`/`role_ref_name` as a binding in
    /// `namespace` would grant them (upstream's `GetRoleReferenceRules`).
    pub fn role_ref_rules(&self, namespace: &str, role_ref_kind: &str, role_ref_name: &str) -> Result<&[PolicyRule], ResolutionError> {
        self.resolve(namespace, role_ref_kind, role_ref_name).map(|r| r.rules.as_slice())
    }

    /// The bindings that may apply to `user` in `namespace`: the
    /// ClusterRoleBindings', then the namespace's RoleBindings' candidates.
    fn candidates<'a>(&'a self, user: &'a UserInfo, namespace: &str) -> impl Iterator<Item = &'a Arc<Binding>> + 'a {
        let local = if namespace.is_empty() { None } else { self.namespaces.get(namespace) };
        self.cluster_bindings.candidates(user).chain(local.into_iter().flat_map(move |n| n.bindings.candidates(user)))
    }

    /// Is the request allowed? The fast form of [`Self::authorize`]: no
    /// reason is built.
    pub fn allows(&self, attrs: &Attributes<'_>) -> bool {
        attrs.user.is_privileged() || self.candidates(attrs.user, attrs.namespace).any(|b| self.resolve(&b.namespace, &b.role_kind, &b.role_name).is_ok_and(|r| r.allows(attrs)))
    }

    /// Authorizes a request: the privileged group, then RBAC (see the
    /// module docs). Costs a hash lookup for the user and each of its
    /// groups plus the rules of the bindings found; allocates nothing when
    /// the request is allowed.
    pub fn authorize(&self, attrs: &Attributes<'_>) -> Decision {
        if attrs.user.is_privileged() {
            return Decision::Allow(AllowedBy::PrivilegedGroup);
        }
        let mut errors: Vec<ResolutionError> = Vec::new();
        for b in self.candidates(attrs.user, attrs.namespace) {
            match self.resolve(&b.namespace, &b.role_kind, &b.role_name) {
                Ok(role) if role.allows(attrs) => {
                    let subject = b.applies_to(attrs.user).unwrap_or_default();
                    return Decision::Allow(AllowedBy::Binding { binding: b.clone(), subject });
                }
                Ok(_) => {}
                Err(e) => errors.push(e),
            }
        }
        let reason = aggregate_messages(errors.iter().map(ResolutionError::authorizer_message));
        Decision::NoOpinion(if reason.is_empty() { reason } else { format!("RBAC: {reason}") })
    }

    /// The rules that apply to `user` in `namespace` ("" for cluster-wide
    /// rules only), as upstream's `RulesFor`: every rule of every binding
    /// that applies, each binding once. `system:masters` is not special
    /// here (it holds cluster-admin through its binding).
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> RulesReview {
        let mut cluster: Vec<&Arc<Binding>> = self.cluster_bindings.candidates(user).collect();
        let mut local: Vec<&Arc<Binding>> = if namespace.is_empty() { Vec::new() } else { self.namespaces.get(namespace).map(|n| n.bindings.candidates(user).collect()).unwrap_or_default() };
        let mut out = RulesReview::default();
        for list in [&mut cluster, &mut local] {
            list.sort_by(|a, b| a.name.cmp(&b.name));
            list.dedup_by(|a, b| Arc::ptr_eq(a, b));
            for b in list.iter() {
                match self.resolve(&b.namespace, &b.role_kind, &b.role_name) {
                    Ok(r) => out.rules.extend(r.rules.iter().cloned()),
                    Err(e) => out.errors.push(e),
                }
            }
        }
        out
    }

    /// The subjects that may do what `attrs` asks (upstream's
    /// `SubjectAccessEvaluator.AllowedSubjects`): `system:masters`, then
    /// the subjects of every binding whose role allows it, without
    /// repeats. Scans every binding: for reviews, not for requests.
    pub fn allowed_subjects(&self, attrs: &Attributes<'_>) -> (Vec<Subject>, Vec<ResolutionError>) {
        let mut subjects = vec![Subject { api_group: Some(super::GROUP.into()), kind: "Group".into(), name: super::SYSTEM_MASTERS.into(), namespace: None }];
        let mut errors = Vec::new();
        let mut bindings: Vec<&Arc<Binding>> = self.cluster_bindings_by_name.values().collect();
        bindings.sort_by(|a, b| a.name.cmp(&b.name));
        let mut local: Vec<&Arc<Binding>> = if attrs.namespace.is_empty() { Vec::new() } else { self.namespaces.get(attrs.namespace).map(|n| n.by_name.values().collect()).unwrap_or_default() };
        local.sort_by(|a, b| a.name.cmp(&b.name));
        bindings.extend(local);
        for b in bindings {
            match self.resolve(&b.namespace, &b.role_kind, &b.role_name) {
                Ok(r) if r.allows(attrs) => {
                    for s in &b.subjects {
                        if !subjects.contains(s) {
                            subjects.push(s.clone());
                        }
                    }
                }
                Ok(_) => {}
                Err(e) => errors.push(e),
            }
        }
        (subjects, errors)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::rbac::rules::{RuleBuilder, rule};
    use k8s_openapi::api::rbac::v1::RoleRef;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    pub(crate) fn meta(ns: &str, name: &str) -> ObjectMeta {
        ObjectMeta { name: Some(name.into()), namespace: (!ns.is_empty()).then(|| ns.into()), ..ObjectMeta::default() }
    }

    pub(crate) fn subject(kind: &str, name: &str, ns: &str) -> Subject {
        Subject {
            api_group: (kind != "ServiceAccount").then(|| super::super::GROUP.into()),
            kind: kind.into(),
            name: name.into(),
            namespace: (!ns.is_empty()).then(|| ns.into()),
        }
    }

    fn role_ref(kind: &str, name: &str) -> RoleRef {
        RoleRef { api_group: Some(super::super::GROUP.into()), kind: kind.into(), name: name.into() }
    }

    pub(crate) fn cluster_role(name: &str, rules: Vec<PolicyRule>) -> ClusterRole {
        ClusterRole { metadata: meta("", name), rules: Some(rules), aggregation_rule: None }
    }

    pub(crate) fn role(ns: &str, name: &str, rules: Vec<PolicyRule>) -> Role {
        Role { metadata: meta(ns, name), rules: Some(rules) }
    }

    pub(crate) fn crb(name: &str, role: &str, subjects: Vec<Subject>) -> ClusterRoleBinding {
        ClusterRoleBinding { metadata: meta("", name), role_ref: role_ref("ClusterRole", role), subjects: Some(subjects) }
    }

    pub(crate) fn rb(ns: &str, name: &str, kind: &str, role: &str, subjects: Vec<Subject>) -> RoleBinding {
        RoleBinding { metadata: meta(ns, name), role_ref: role_ref(kind, role), subjects: Some(subjects) }
    }

    /// Upstream's `TestAuthorizer` (rbac_test.go), its cases rendered here.
    #[test]
    fn authorizer_table() {
        let admin = cluster_role("admin", vec![rule(&["*"]).groups(&["*"]).resources(&["*"])]);
        let nonresource = cluster_role("nonresource", vec![rule(&["get"]).urls(&["/foo", "/bar/*"])]);
        let pods_get = role("ns1", "pods-get", vec![rule(&["get"]).groups(&[""]).resources(&["pods"])]);
        let a = Authorizer::from_objects(
            &[admin, nonresource, cluster_role("subresources", vec![rule(&["get"]).groups(&[""]).resources(&["pods/log", "*/status"])])],
            &[pods_get],
            &[
                crb("admins", "admin", vec![subject("User", "admin", ""), subject("Group", "admins", "")]),
                crb("nr", "nonresource", vec![subject("Group", "system:authenticated", "")]),
                crb("sub", "subresources", vec![subject("ServiceAccount", "sa", "ns2")]),
                crb("sa-without-ns", "admin", vec![subject("ServiceAccount", "nobody", "")]),
            ],
            &[
                rb("ns1", "pods", "Role", "pods-get", vec![subject("User", "alice", ""), subject("ServiceAccount", "sa", "")]),
                rb("ns1", "local-admin", "ClusterRole", "admin", vec![subject("Group", "ns1-admins", "")]),
            ],
        );
        let admin_u = UserInfo::new("admin", &[]);
        let by_group = UserInfo::new("bob", &["admins"]);
        let alice = UserInfo::new("alice", &["system:authenticated"]);
        let sa1 = UserInfo::service_account("ns1", "sa");
        let sa2 = UserInfo::service_account("ns2", "sa");
        let ns1_admin = UserInfo::new("carol", &["ns1-admins"]);
        let nobody = UserInfo::service_account("", "nobody");
        let masters = UserInfo::new("root", &["system:masters"]);
        let named_like_group = UserInfo::new("admins", &[]);
        let r = |u, verb, group, res, ns| Attributes::resource(u, verb, group, res).ns(ns);
        let allowed: Vec<Attributes<'_>> = vec![
            r(&admin_u, "delete", "apps", "deployments", "any"),
            r(&by_group, "create", "", "pods", ""),
            r(&alice, "get", "", "pods", "ns1"),
            r(&sa1, "get", "", "pods", "ns1").named("p"),
            Attributes::non_resource(&alice, "get", "/foo"),
            Attributes::non_resource(&alice, "get", "/bar/baz"),
            r(&sa2, "get", "", "pods", "x").subresource("log"),
            r(&sa2, "get", "", "nodes", "").named("n").subresource("status"),
            r(&ns1_admin, "delete", "", "secrets", "ns1"),
            r(&masters, "escalate", "rbac.authorization.k8s.io", "clusterroles", ""),
            Attributes::non_resource(&masters, "post", "/anything"),
        ];
        let denied: Vec<Attributes<'_>> = vec![
            r(&alice, "get", "", "pods", "ns2"),
            r(&alice, "get", "", "pods", ""),
            r(&alice, "list", "", "secrets", "ns1"),
            r(&sa1, "delete", "", "pods", "ns1").named("p"),
            r(&sa1, "get", "", "pods", "ns2"),
            Attributes::non_resource(&alice, "get", "/bar"),
            Attributes::non_resource(&alice, "post", "/foo"),
            r(&sa2, "get", "", "pods", "x").subresource("exec"),
            r(&sa2, "get", "", "pods", "x"),
            r(&ns1_admin, "delete", "", "secrets", "ns2"),
            r(&ns1_admin, "list", "", "nodes", ""),
            r(&nobody, "get", "", "pods", "ns1"),
            r(&named_like_group, "get", "", "pods", ""),
        ];
        for attrs in &allowed {
            assert!(a.authorize(attrs).is_allowed(), "should allow {attrs:?}");
            assert!(a.allows(attrs), "should allow {attrs:?}");
        }
        for attrs in &denied {
            assert_eq!(a.authorize(attrs), Decision::NoOpinion(String::new()), "should deny {attrs:?}");
            assert!(!a.allows(attrs), "should deny {attrs:?}");
        }
    }

    #[test]
    fn reasons_name_the_binding_and_the_first_subject_that_applies() {
        let a = Authorizer::from_objects(
            &[cluster_role("view", vec![rule(&["get"]).groups(&[""]).resources(&["pods"])])],
            &[role("ns", "r", vec![rule(&["list"]).groups(&[""]).resources(&["pods"])])],
            &[crb("viewers", "view", vec![subject("User", "other", ""), subject("Group", "g", ""), subject("User", "u", "")])],
            &[rb("ns", "sa-list", "Role", "r", vec![subject("ServiceAccount", "sa", "")]), rb("ns", "missing", "ClusterRole", "gone", vec![subject("User", "u", "")])],
        );
        let u = UserInfo::new("u", &["g"]);
        let d = a.authorize(&Attributes::resource(&u, "get", "", "pods"));
        assert_eq!(d.reason(), r#"RBAC: allowed by ClusterRoleBinding "viewers" of ClusterRole "view" to Group "g""#);
        let sa = UserInfo::service_account("ns", "sa");
        let d = a.authorize(&Attributes::resource(&sa, "list", "", "pods").ns("ns"));
        assert_eq!(d.reason(), r#"RBAC: allowed by RoleBinding "sa-list/ns" of Role "r" to ServiceAccount "sa/ns""#);
        let d = a.authorize(&Attributes::resource(&u, "delete", "", "pods").ns("ns"));
        assert_eq!(d, Decision::NoOpinion(r#"RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found"#.into()));
        assert_eq!(a.authorize(&Attributes::resource(&UserInfo::new("x", &["system:masters"]), "get", "", "x")).reason(), "");
    }

    #[test]
    fn incremental_changes_match_a_rebuild() {
        let get_pods = rule(&["get"]).groups(&[""]).resources(&["pods"]);
        let mut a = Authorizer::new();
        let u = UserInfo::new("u", &["g"]);
        let get = Attributes::resource(&u, "get", "", "pods").ns("ns");
        assert!(!a.allows(&get));
        a.upsert_role_binding(&rb("ns", "b", "Role", "r", vec![subject("Group", "g", "")]));
        assert_eq!(a.authorize(&get), Decision::NoOpinion(r#"RBAC: role.rbac.authorization.k8s.io "r" not found"#.into()));
        a.upsert_role(&role("ns", "r", vec![get_pods.clone()]));
        assert!(a.allows(&get));
        // The binding now names someone else.
        a.upsert_role_binding(&rb("ns", "b", "Role", "r", vec![subject("User", "v", "")]));
        assert!(!a.allows(&get));
        a.upsert_cluster_role(&cluster_role("c", vec![get_pods.clone()]));
        a.upsert_cluster_role_binding(&crb("cb", "c", vec![subject("User", "u", "")]));
        assert!(a.allows(&get));
        assert!(a.allows(&Attributes::resource(&u, "get", "", "pods")));
        a.upsert_cluster_role(&cluster_role("c", vec![]));
        assert!(!a.allows(&get));
        a.upsert_cluster_role(&cluster_role("c", vec![get_pods.clone()]));
        a.remove_cluster_role_binding("cb");
        assert!(!a.allows(&get));
        a.remove_role_binding("ns", "b");
        a.remove_role("ns", "r");
        assert!(a.namespaces.is_empty());
        assert!(a.cluster_bindings.is_empty());
        a.remove_cluster_role("c");
        assert!(a.cluster_roles.is_empty());
    }

    #[test]
    fn json_objects_are_applied() {
        let mut a = Authorizer::new();
        let cr = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "c"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]});
        let b = serde_json::json!({"metadata": {"name": "b", "namespace": "ns"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "c"}, "subjects": [{"kind": "ServiceAccount", "name": "sa"}]});
        assert!(a.apply_json("clusterroles", "", "c", Some(&cr)).unwrap_or_default());
        assert!(a.apply_json("rolebindings", "ns", "b", Some(&b)).unwrap_or_default());
        assert!(!a.apply_json("pods", "ns", "p", Some(&b)).unwrap_or(true));
        let sa = UserInfo::service_account("ns", "sa");
        assert!(a.allows(&Attributes::resource(&sa, "get", "", "pods").ns("ns")));
        assert!(!a.allows(&Attributes::resource(&sa, "get", "", "pods").ns("other")));
        assert!(a.apply_json("rolebindings", "ns", "b", None).unwrap_or_default());
        assert!(!a.allows(&Attributes::resource(&sa, "get", "", "pods").ns("ns")));
        let bad = serde_json::json!({"kind": "Role", "metadata": {"name": "c"}});
        assert!(matches!(a.apply_json("clusterroles", "", "c", Some(&bad)), Err(Error::Decode { .. })));
    }

    /// Upstream's `TestDefaultRuleResolver` shape: cluster rules, then the
    /// namespace's, each binding once.
    #[test]
    fn rules_for_and_review_status() {
        let get_pods = rule(&["get"]).groups(&[""]).resources(&["pods"]);
        let healthz = rule(&["get"]).urls(&["/healthz"]);
        let list_cm = rule(&["list"]).groups(&[""]).resources(&["configmaps"]);
        let a = Authorizer::from_objects(
            &[cluster_role("c", vec![get_pods.clone(), healthz.clone()])],
            &[role("ns", "r", vec![list_cm.clone()])],
            // Names the user and its group: counted once.
            &[crb("cb", "c", vec![subject("User", "u", ""), subject("Group", "g", "")])],
            &[rb("ns", "b1", "Role", "r", vec![subject("User", "u", "")]), rb("ns", "b2", "Role", "gone", vec![subject("Group", "g", "")])],
        );
        let u = UserInfo::new("u", &["g"]);
        let review = a.rules_for(&u, "ns");
        assert!(same_rules(&review.rules, &[get_pods.clone(), healthz.clone(), list_cm.clone()]));
        assert_eq!(review.errors, [ResolutionError::NotFound { kind: "Role".into(), name: "gone".into() }]);
        let status = review.status();
        assert_eq!(status.resource_rules.len(), 2);
        assert_eq!(status.non_resource_rules.len(), 1);
        assert_eq!(status.evaluation_error.as_deref(), Some(r#"role.rbac.authorization.k8s.io "gone" not found"#));
        let cluster_only = a.rules_for(&u, "");
        assert!(same_rules(&cluster_only.rules, &[get_pods, healthz]));
        let (subjects, _) = a.allowed_subjects(&Attributes::resource(&u, "list", "", "configmaps").ns("ns"));
        assert_eq!(subjects.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["system:masters", "u"]);
    }

    #[test]
    fn aggregated_cluster_roles_authorize_with_their_aggregated_rules() {
        let mut agg = cluster_role("agg", vec![]);
        agg.aggregation_rule = Some(k8s_openapi::api::rbac::v1::AggregationRule {
            cluster_role_selectors: Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_labels: Some([("x".to_string(), "true".to_string())].into()),
                match_expressions: None,
            }]),
        });
        let mut part = cluster_role("part", vec![rule(&["get"]).groups(&[""]).resources(&["pods"])]);
        part.metadata.labels = Some([("x".to_string(), "true".to_string())].into());
        let mut a = Authorizer::from_objects(&[agg.clone()], &[], &[crb("b", "agg", vec![subject("User", "u", "")])], &[]);
        let u = UserInfo::new("u", &[]);
        let get = Attributes::resource(&u, "get", "", "pods");
        assert!(!a.allows(&get));
        a.upsert_cluster_role(&part);
        assert!(a.allows(&get));
        let ups = a.aggregation_updates();
        assert_eq!(ups.len(), 1);
        agg.rules = Some(ups[0].1.clone());
        a.upsert_cluster_role(&agg);
        assert!(a.aggregation_updates().is_empty());
        a.remove_cluster_role("part");
        assert!(!a.allows(&get));
    }
}
