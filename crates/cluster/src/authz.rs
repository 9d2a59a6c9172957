//! The request-authorization layer and the RBAC objects' upkeep.
//!
//! [`AuthorizationMode::AlwaysAllow`] serves every request, even
//! anonymous, with full access; [`AuthorizationMode::Rbac`] (the default) does what kube-apiserver
//! does with `--authorization-mode=RBAC`: each request is authenticated
//! ([`crate::authn`]: 401 for an unknown bearer token), turned into
//! attributes ([`RequestInfo::parse`]) and authorized by the RBAC
//! [`Authorizer`] (403 in upstream's words, [`rbac::message::forbidden_status`]);
//! role and binding writes pass the escalation checks
//! ([`rbac::escalation`], on the object the write would store, found by
//! a dry run of the same request); SubjectAccessReview and
//! LocalSubjectAccessReview are answered from the authorizer.
//!
//! In both modes: the bootstrap ClusterRoles and ClusterRoleBindings are
//! written into the store, the [`Authorizer`] follows every commit of an
//! RBAC object (the store's commit observer), aggregated ClusterRoles'
//! rules are written back (the clusterrole-aggregation controller), every
//! namespace gets its `default` ServiceAccount (kube-controller-manager's
//! serviceaccount controller), and SelfSubjectAccessReview,
//! SelfSubjectRulesReview and SelfSubjectReview are answered for the
//! requesting user (`kubectl auth can-i`, `kubectl auth whoami`).

use std::sync::{Arc, RwLock, RwLockReadGuard};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::Response;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::auth::AuthConfig;
use crate::authn::Authenticator;
use crate::rbac::escalation::{self, Write};
use crate::rbac::{self, Authorizer, Decision, RequestInfo, UserInfo};
use crate::resources::{self as res, ResId};
use crate::selector::Filter;
use crate::store::{self, EventType, Obj, Store};

/// Why the authorization layer could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The embedded bootstrap policy does not decode.
    #[error(transparent)]
    Bootstrap(#[from] rbac::bootstrap::Error),
    /// Writing the bootstrap policy into the store failed.
    #[error("bootstrap policy: {0}")]
    Store(#[from] store::Error),
    /// The store already has a commit observer.
    #[error("the store already has a commit observer")]
    Observed,
    /// A bootstrap object does not encode (a build defect).
    #[error("bootstrap policy: {0}")]
    Encode(#[from] serde_json::Error),
}

/// How requests are authorized (kube-apiserver's `--authorization-mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthorizationMode {
    /// Every request, even anonymous, has full access.
    #[value(name = "AlwaysAllow")]
    AlwaysAllow,
    /// Requests are authenticated and authorized by RBAC (the default).
    #[default]
    #[value(name = "RBAC")]
    Rbac,
}

/// The plurals of the RBAC resources, as the authorizer names them.
const RBAC_RESOURCES: [&str; 4] = ["clusterroles", "roles", "clusterrolebindings", "rolebindings"];

/// What the layer shares: the mode, the authenticator and the authorizer.
#[derive(Debug)]
pub struct Access {
    mode: AuthorizationMode,
    authn: Authenticator,
    authz: Arc<RwLock<Authorizer>>,
    store: Arc<Store>,
    rbac_ids: [Option<ResId>; 4],
}

/// The background work the layer needs (started by [`Access::spawn`]).
#[derive(Debug)]
pub struct Upkeep {
    aggregate: mpsc::UnboundedReceiver<()>,
    namespaces: mpsc::UnboundedReceiver<String>,
    root_ca: String,
}

impl Upkeep {
    /// The CA bundle (PEM) every namespace's `kube-root-ca.crt` ConfigMap
    /// carries as `ca.crt`: the cluster's CA. Without one (TLS off) the
    /// ConfigMap is still published, with an empty `ca.crt`: there is no
    /// CA to trust, and clients that mount the ConfigMap find their key.
    pub fn root_ca(mut self, pem: &str) -> Upkeep {
        self.root_ca = pem.to_string();
        self
    }
}

/// The ConfigMap kube-controller-manager's root-ca-cert-publisher keeps
/// in every namespace.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

/// Its annotation, as upstream writes it.
const ROOT_CA_DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

/// A stored object's value as the authorizer decodes it: without
/// `metadata.managedFields`, which the store holds as its JSON text.
fn plain(o: &Obj) -> Value {
    let mut v = o.value.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    v
}

fn read(lock: &RwLock<Authorizer>) -> RwLockReadGuard<'_, Authorizer> {
    match lock.read() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Access {
    /// Sets the layer up over `store`: observes its commits (the store
    /// must have no commit observer yet), applies the RBAC objects it
    /// holds, and writes the bootstrap policy into it. Call before
    /// anything else writes to the store; start [`Access::spawn`] next.
    pub fn install(store: &Arc<Store>, mode: AuthorizationMode, auth: &AuthConfig) -> Result<(Arc<Access>, Upkeep), Error> {
        let rbac_ids = RBAC_RESOURCES.map(|p| store.lookup(rbac::GROUP, "v1", p));
        let authz = Arc::new(RwLock::new(Authorizer::new()));
        let (agg_tx, aggregate) = mpsc::unbounded_channel();
        let (ns_tx, namespaces) = mpsc::unbounded_channel();
        let configmaps = store.lookup("", "v1", "configmaps");
        let observed = {
            let authz = authz.clone();
            store.observe_commits(Box::new(move |r, ty, obj: &Obj| {
                if let Some(i) = rbac_ids.iter().position(|id| *id == Some(r)) {
                    let resource = RBAC_RESOURCES[i];
                    let value = (ty != EventType::Deleted).then(|| plain(obj));
                    let mut a = match authz.write() {
                        Ok(g) => g,
                        Err(p) => p.into_inner(),
                    };
                    if let Err(e) = a.apply_json(resource, obj.namespace(), obj.name(), value.as_ref()) {
                        tracing::warn!(error = %e, "RBAC object not applied to the authorizer");
                    }
                    if resource == "clusterroles" && !a.aggregation_updates().is_empty() {
                        let _ = agg_tx.send(());
                    }
                } else if (r == res::NAMESPACES && ty == EventType::Added)
                    || (r == res::SERVICE_ACCOUNTS && ty == EventType::Deleted && obj.name() == "default")
                    || (Some(r) == configmaps && ty != EventType::Added && obj.name() == ROOT_CA_CONFIGMAP)
                {
                    // A namespace's upkeep: its default ServiceAccount and
                    // its root CA ConfigMap, (re)created or put back.
                    let ns = if r == res::NAMESPACES { obj.name() } else { obj.namespace() };
                    let _ = ns_tx.send(ns.to_string());
                }
            }))
        };
        if !observed {
            return Err(Error::Observed);
        }
        // What the store holds already (a store read back from disk).
        for (i, id) in rbac_ids.iter().enumerate() {
            let Some(id) = *id else { continue };
            let list = store.list(id, &Filter::default(), None, None)?;
            let mut a = match authz.write() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            for o in &list.items {
                if let Err(e) = a.apply_json(RBAC_RESOURCES[i], o.namespace(), o.name(), Some(&plain(o))) {
                    tracing::warn!(error = %e, "stored RBAC object not applied to the authorizer");
                }
            }
        }
        let access = Arc::new(Access { mode, authn: Authenticator::new(auth, store.clone()), authz, store: store.clone(), rbac_ids });
        access.write_bootstrap_policy()?;
        Ok((access, Upkeep { aggregate, namespaces, root_ca: String::new() }))
    }

    fn write_bootstrap_policy(&self) -> Result<(), Error> {
        let (Some(crs), Some(crbs)) = (self.rbac_ids[0], self.rbac_ids[2]) else { return Ok(()) };
        let objects = rbac::bootstrap::cluster_roles_aggregated()?.into_iter().map(serde_json::to_value).map(|v| v.map(|v| (crs, v)));
        let bindings = rbac::bootstrap::cluster_role_bindings()?.into_iter().map(serde_json::to_value).map(|v| v.map(|v| (crbs, v)));
        for o in objects.chain(bindings) {
            let (id, v) = o?;
            match self.store.create(id, "", v) {
                Ok(_) | Err(store::Error::AlreadyExists { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Starts the upkeep until `stop` turns true: aggregated ClusterRoles'
    /// rules written back; in every namespace, a `default` ServiceAccount
    /// (the serviceaccounts controller) and the `kube-root-ca.crt`
    /// ConfigMap (the root-ca-cert-publisher), created, and recreated or
    /// put back when deleted or changed.
    pub fn spawn(self: &Arc<Self>, upkeep: Upkeep, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
        let access = self.clone();
        let Upkeep { mut aggregate, mut namespaces, root_ca } = upkeep;
        // Namespaces created before the observer was set.
        if let Ok(list) = self.store.list(res::NAMESPACES, &Filter::default(), None, None) {
            for ns in &list.items {
                access.namespace_upkeep(ns.name(), &root_ca);
            }
        }
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.changed() => break,
                    Some(()) = aggregate.recv() => access.write_aggregation(),
                    Some(ns) = namespaces.recv() => access.namespace_upkeep(&ns, &root_ca),
                    else => break,
                }
            }
        })
    }

    fn namespace_upkeep(&self, ns: &str, root_ca: &str) {
        let exists = self.store.get(res::NAMESPACES, "", ns).is_ok_and(|n| !store::is_deleting(&n.value));
        if !exists {
            return;
        }
        self.default_service_account(ns);
        self.root_ca_configmap(ns, root_ca);
    }

    /// Upstream's root-ca-cert-publisher: `kube-root-ca.crt` holds
    /// `ca.crt` (and its description annotation); created when missing,
    /// its data put back when it differs.
    fn root_ca_configmap(&self, ns: &str, root_ca: &str) {
        let Some(cms) = self.store.lookup("", "v1", "configmaps") else { return };
        let data = json!({"ca.crt": root_ca});
        match self.store.get(cms, ns, ROOT_CA_CONFIGMAP) {
            Ok(cm) if cm.value.get("data") == Some(&data) => {}
            Ok(_) => {
                let written = self.store.modify(cms, ns, ROOT_CA_CONFIGMAP, None, |v| {
                    let mut v = v.clone();
                    v["data"] = data.clone();
                    Some(v)
                });
                if let Err(e) = written {
                    tracing::debug!(error = %e, namespace = %ns, "kube-root-ca.crt not put back");
                }
            }
            Err(_) => {
                let cm = json!({"metadata": {"name": ROOT_CA_CONFIGMAP, "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION}}, "data": data});
                // AlreadyExists (a race with another write) or the namespace going away: nothing to do.
                let _ = self.store.create(cms, ns, cm);
            }
        }
    }

    fn write_aggregation(&self) {
        let Some(crs) = self.rbac_ids[0] else { return };
        let updates = read(&self.authz).aggregation_updates();
        for (name, rules) in updates {
            let Ok(rules) = serde_json::to_value(rules) else { continue };
            let written = self.store.modify(crs, "", &name, None, |v| {
                let mut v = v.clone();
                v["rules"] = rules;
                Some(v)
            });
            if let Err(e) = written {
                tracing::debug!(error = %e, clusterrole = %name, "aggregated rules not written back");
            }
        }
    }

    fn default_service_account(&self, ns: &str) {
        // AlreadyExists, or the namespace going away meanwhile: nothing to do.
        let _ = self.store.create(res::SERVICE_ACCOUNTS, ns, json!({"metadata": {"name": "default"}}));
    }

    /// The mode.
    pub fn mode(&self) -> AuthorizationMode {
        self.mode
    }

    /// Authorizes `info` for `user` with the current RBAC policy.
    pub fn authorize(&self, user: &UserInfo, info: &RequestInfo) -> Decision {
        read(&self.authz).authorize(&info.attributes(user))
    }

    /// A snapshot of the current RBAC policy.
    pub fn authorizer(&self) -> Authorizer {
        read(&self.authz).clone()
    }
}

const BODY_LIMIT: usize = 3 * 1024 * 1024;

fn json_response(code: StatusCode, v: &Value) -> Response {
    let mut r = Response::new(Body::from(v.to_string()));
    *r.status_mut() = code;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn status_response(code: u16, reason: &str, message: &str, details: Option<Value>) -> Response {
    let s = crate::http::status_json(code, reason, message, details);
    json_response(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), &s)
}

/// The review endpoints this layer answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Review<'a> {
    Subject,
    Local(&'a str),
    SelfAccess,
    SelfRules,
    SelfSubject,
}

fn review_of(path: &str) -> Option<Review<'_>> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segs.as_slice() {
        ["apis", "authorization.k8s.io", "v1", "subjectaccessreviews"] => Some(Review::Subject),
        ["apis", "authorization.k8s.io", "v1", "namespaces", ns, "localsubjectaccessreviews"] => Some(Review::Local(ns)),
        ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"] => Some(Review::SelfAccess),
        ["apis", "authorization.k8s.io", "v1", "selfsubjectrulesreviews"] => Some(Review::SelfRules),
        ["apis", "authentication.k8s.io", "v1", "selfsubjectreviews"] => Some(Review::SelfSubject),
        _ => None,
    }
}

/// The axum middleware: authentication, authorization, escalation checks
/// and the reviews (see the module docs).
pub async fn middleware(State(access): State<Arc<Access>>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    let review = review_of(&path).filter(|_| req.method() == Method::POST);
    let rbac = access.mode == AuthorizationMode::Rbac;
    if !rbac && review.is_none() {
        // Open: nothing to know about the user.
        return next.run(req).await;
    }
    let user = match access.authn.authenticate(req.headers()) {
        Ok(u) => u,
        Err(e) if rbac => return json_response(StatusCode::UNAUTHORIZED, &e.status()),
        // Open: an unknown token is no credential at all.
        Err(_) => UserInfo::anonymous(),
    };
    if rbac {
        let info = match RequestInfo::parse(req.method().as_str(), &path, req.uri().query()) {
            Ok(i) => i,
            Err(e) => return status_response(500, "InternalError", &format!("Internal error occurred: failed to create RequestInfo: {e}"), None),
        };
        let decision = access.authorize(&user, &info);
        if !decision.is_allowed() {
            return json_response(StatusCode::FORBIDDEN, &rbac::message::forbidden_status(&info.attributes(&user), &decision.reason()));
        }
        if info.resource_request && info.api_group == rbac::GROUP && info.subresource.is_empty() && RBAC_RESOURCES.contains(&info.resource.as_str()) && matches!(info.verb.as_str(), "create" | "update" | "patch") {
            return escalation_checked(&access, &user, &info, req, next).await;
        }
    }
    match review {
        Some(Review::Subject | Review::Local(_)) if !rbac => next.run(req).await,
        Some(r) => answer_review(&access, &user, r, req).await,
        None => next.run(req).await,
    }
}

/// A request rebuilt from its parts with `uri` and `body`.
fn rebuild(parts: &axum::http::request::Parts, uri: Uri, body: Bytes) -> Request {
    let mut r = Request::new(Body::from(body));
    *r.method_mut() = parts.method.clone();
    *r.uri_mut() = uri;
    *r.version_mut() = parts.version;
    *r.headers_mut() = parts.headers.clone();
    r
}

async fn body_bytes(body: Body) -> Result<Bytes, Response> {
    axum::body::to_bytes(body, BODY_LIMIT).await.map_err(|_| status_response(413, "RequestEntityTooLarge", &format!("Request entity too large: limit is {BODY_LIMIT}"), None))
}

/// Runs an RBAC write as a dry run first, checks the object it would
/// store against the user's permissions, then runs it.
async fn escalation_checked(access: &Access, user: &UserInfo, info: &RequestInfo, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = match body_bytes(body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let query = match parts.uri.query() {
        Some(q) if !q.is_empty() => format!("{q}&dryRun=All"),
        _ => "dryRun=All".to_string(),
    };
    let Ok(dry_uri) = format!("{}?{query}", parts.uri.path()).parse::<Uri>() else {
        return status_response(400, "BadRequest", "malformed request URI", None);
    };
    let mut dry = rebuild(&parts, dry_uri, bytes.clone());
    dry.headers_mut().insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    let answer = next.clone().run(dry).await;
    if !answer.status().is_success() {
        // The write itself fails (not found, invalid, conflict...): say so.
        return answer;
    }
    let new: Value = match body_bytes(answer.into_body()).await.map(|b| serde_json::from_slice(&b)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => return status_response(500, "InternalError", &format!("Internal error occurred: {e}"), None),
        Err(r) => return r,
    };
    if let Err(e) = check_write(access, user, info, &new) {
        return json_response(StatusCode::from_u16(e.code()).unwrap_or(StatusCode::FORBIDDEN), &e.status());
    }
    next.run(rebuild(&parts, parts.uri.clone(), bytes)).await
}

fn decode<T: DeserializeOwned>(resource: &'static str, v: &Value) -> Result<T, escalation::Error> {
    let name = v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
    serde_json::from_value(v.clone()).map_err(|e| escalation::Error::Forbidden { resource, name, message: format!("cannot decode the object: {e}") })
}

/// The escalation check of a write whose result would be `new`.
fn check_write(access: &Access, user: &UserInfo, info: &RequestInfo, new: &Value) -> Result<(), escalation::Error> {
    let i = RBAC_RESOURCES.iter().position(|r| *r == info.resource).unwrap_or_default();
    let ns = new.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
    let name = new.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let old: Option<Value> = match access.rbac_ids[i] {
        Some(id) if info.verb != "create" => access.store.get(id, ns, name).ok().map(|o| plain(&o)),
        _ => None,
    };
    let authz = read(&access.authz);
    fn write<'a, T>(old: &'a Option<T>) -> Write<'a, T> {
        old.as_ref().map_or(Write::Create, Write::Update)
    }
    let resource = RBAC_RESOURCES[i];
    match resource {
        "clusterroles" => {
            let old: Option<ClusterRole> = old.as_ref().map(|v| decode(resource, v)).transpose()?;
            escalation::check_cluster_role_write(&authz, user, &decode(resource, new)?, write(&old))
        }
        "roles" => {
            let old: Option<Role> = old.as_ref().map(|v| decode(resource, v)).transpose()?;
            escalation::check_role_write(&authz, user, &decode(resource, new)?, write(&old))
        }
        "clusterrolebindings" => {
            let old: Option<ClusterRoleBinding> = old.as_ref().map(|v| decode(resource, v)).transpose()?;
            escalation::check_cluster_role_binding_write(&authz, user, &decode(resource, new)?, write(&old))
        }
        _ => {
            let old: Option<RoleBinding> = old.as_ref().map(|v| decode(resource, v)).transpose()?;
            escalation::check_role_binding_write(&authz, user, &decode(resource, new)?, write(&old))
        }
    }
}

/// A review request's body as JSON (protobuf decoded).
fn review_body(headers: &axum::http::HeaderMap, bytes: &[u8]) -> Result<Value, Box<Response>> {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if crate::proto::is_protobuf(ct) {
        return crate::proto::decode(bytes).map_err(|e| {
            Box::new(if e.unsupported_media_type() {
                status_response(415, "UnsupportedMediaType", &format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml ({e})"), None)
            } else {
                status_response(400, "BadRequest", &e.to_string(), None)
            })
        });
    }
    serde_json::from_slice(bytes).map_err(|e| Box::new(status_response(400, "BadRequest", &format!("the body of the request could not be decoded: {e}"), None)))
}

fn invalid(kind: &str, group: &str, field: &str, message: &str) -> Response {
    status_response(422, "Invalid", &format!("{kind}.{group} \"\" is invalid: {field}: Invalid value: \"null\": {message}"), Some(json!({"group": group, "kind": kind, "causes": [{"reason": "FieldValueInvalid", "message": format!("Invalid value: \"null\": {message}"), "field": field}]})))
}

/// A SubjectAccessReview's `status` from a decision.
fn access_status(d: &Decision) -> Value {
    let reason = d.reason();
    let mut s = json!({"allowed": d.is_allowed()});
    if matches!(d, Decision::Deny(_)) {
        s["denied"] = json!(true);
    }
    if !reason.is_empty() {
        s["reason"] = json!(reason);
    }
    s
}

async fn answer_review(access: &Access, user: &UserInfo, review: Review<'_>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = match body_bytes(body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let body = match review_body(&parts.headers, &bytes) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let metadata = body.get("metadata").cloned().filter(Value::is_object).unwrap_or_else(|| json!({"creationTimestamp": null}));
    let authz_group = "authorization.k8s.io";
    let open = access.mode == AuthorizationMode::AlwaysAllow;
    let (kind, group, status) = match review {
        Review::Subject | Review::Local(_) => {
            let kind = if matches!(review, Review::Subject) { "SubjectAccessReview" } else { "LocalSubjectAccessReview" };
            let subject = UserInfo::from_review_spec(&spec);
            if subject.name.is_empty() && subject.groups.is_empty() {
                return invalid(kind, authz_group, "spec.user", "at least one of user or group must be specified");
            }
            let Some(mut info) = RequestInfo::from_review_spec(&spec) else {
                return invalid(kind, authz_group, "spec.resourceAttributes", "exactly one of nonResourceAttributes or resourceAttributes must be specified");
            };
            if let Review::Local(ns) = review {
                if !info.resource_request {
                    return invalid(kind, authz_group, "spec.nonResourceAttributes", "disallowed on this kind of request");
                }
                if info.namespace != ns {
                    return invalid(kind, authz_group, "spec.resourceAttributes.namespace", "must match metadata.namespace");
                }
                info.namespace = ns.to_string();
            }
            (kind, authz_group, access_status(&access.authorize(&subject, &info)))
        }
        Review::SelfAccess => {
            let Some(info) = RequestInfo::from_review_spec(&spec) else {
                return invalid("SelfSubjectAccessReview", authz_group, "spec.resourceAttributes", "exactly one of nonResourceAttributes or resourceAttributes must be specified");
            };
            let status = if open { json!({"allowed": true}) } else { access_status(&access.authorize(user, &info)) };
            ("SelfSubjectAccessReview", authz_group, status)
        }
        Review::SelfRules => {
            let ns = spec.get("namespace").and_then(Value::as_str).unwrap_or_default();
            let status = if open {
                json!({"resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}], "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}], "incomplete": false})
            } else {
                let rules = read(&access.authz).rules_for(user, ns);
                let mut s = serde_json::to_value(rules.status()).unwrap_or_else(|_| json!({}));
                if s.get("incomplete").is_none() {
                    s["incomplete"] = json!(false);
                }
                s
            };
            ("SelfSubjectRulesReview", authz_group, status)
        }
        Review::SelfSubject => {
            let mut info = json!({"username": user.name, "groups": user.groups});
            if !user.uid.is_empty() {
                info["uid"] = json!(user.uid);
            }
            if !user.extra.is_empty() {
                info["extra"] = json!(user.extra);
            }
            return json_response(StatusCode::CREATED, &json!({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1", "metadata": metadata, "status": {"userInfo": info}}));
        }
    };
    json_response(StatusCode::CREATED, &json!({"kind": kind, "apiVersion": format!("{group}/v1"), "metadata": metadata, "spec": spec, "status": status}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn review_paths() {
        assert_eq!(review_of("/apis/authorization.k8s.io/v1/subjectaccessreviews"), Some(Review::Subject));
        assert_eq!(review_of("/apis/authorization.k8s.io/v1/namespaces/ns/localsubjectaccessreviews"), Some(Review::Local("ns")));
        assert_eq!(review_of("/apis/authentication.k8s.io/v1/selfsubjectreviews"), Some(Review::SelfSubject));
        assert_eq!(review_of("/apis/authentication.k8s.io/v1/tokenreviews"), None);
    }

    #[test]
    fn modes_parse_as_kube_apiserver_spells_them() {
        use clap::ValueEnum as _;
        assert_eq!(AuthorizationMode::from_str("RBAC", false), Ok(AuthorizationMode::Rbac));
        assert_eq!(AuthorizationMode::from_str("AlwaysAllow", false), Ok(AuthorizationMode::AlwaysAllow));
        assert_eq!(AuthorizationMode::default(), AuthorizationMode::Rbac);
    }
}
