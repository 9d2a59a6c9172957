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
