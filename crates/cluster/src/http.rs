//! The Kubernetes-compatible HTTP API (axum): discovery, CRUD, list,
//! watch, subresources, Table output for kubectl, and fault injection.

mod streams;
mod watches;

use watches::{reached, watch_error, watch_response};

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use super::jsonptr::Pointer as _;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::faults::{FaultKind, Faults};
use super::resources::{self as res, ResId, ResourceInfo};
use super::selector::{FieldSelector, Filter, LabelSelector};
use super::store::{self, DeleteOpts, Obj, PatchType, Store};

/// Errors raised by the HTTP layer itself (routing, decoding, faults);
/// store errors are wrapped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A store operation failed.
    #[error(transparent)]
    Store(#[from] store::Error),
    /// No such path or resource.
    #[error("the server could not find the requested resource")]
    NotFound,
    /// The method is not supported on this path.
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    /// The request body or query is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// The body exceeds kube-apiserver's limit (`MaxRequestBodyBytes`, 3 MiB).
    #[error("Request entity too large: limit is {BODY_LIMIT}")]
    TooLarge,
    /// An injected fault.
    #[error("injected fault: {0:?}")]
    Injected(FaultKind),
    /// 422 Invalid with its details (a strict-decoding error of a patch).
    #[error("{message}")]
    Invalid {
        /// The message.
        message: String,
        /// The Status details.
        details: Value,
    },
    /// 406: no representation the client accepts.
    #[error("only the following media types are accepted: application/json")]
    NotAcceptable,
}

impl Error {
    fn parts(&self) -> (u16, &'static str, String, Option<Value>) {
        match self {
            Error::Store(e) => (e.code(), e.reason(), e.to_string(), e.details()),
            Error::NotFound => (404, "NotFound", self.to_string(), Some(json!({}))),
            Error::MethodNotAllowed => (405, "MethodNotAllowed", self.to_string(), None),
            Error::BadRequest(m) => (400, "BadRequest", m.clone(), None),
            Error::TooLarge => (413, "RequestEntityTooLarge", self.to_string(), None),
            Error::Invalid { message, details } => (422, "Invalid", message.clone(), Some(details.clone())),
            Error::NotAcceptable => (406, "NotAcceptable", self.to_string(), None),
            Error::Injected(FaultKind::TooManyRequests { retry_after_seconds }) => (
                429,
                "TooManyRequests",
                "the server has received too many requests and has asked us to try again later".into(),
                Some(json!({"retryAfterSeconds": retry_after_seconds})),
            ),
            Error::Injected(FaultKind::InternalError) => {
                (500, "InternalError", "Internal error occurred: injected fault".into(), None)
            }
            Error::Injected(FaultKind::Conflict) => (
                409,
                "Conflict",
                "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again (injected)".into(),
                None,
            ),
        }
    }

    /// The metav1.Status body for this error.
    pub fn status(&self) -> Value {
        let (code, reason, message, details) = self.parts();
        status_json(code, reason, &message, details)
    }
}

/// Build a failure metav1.Status.
pub fn status_json(code: u16, reason: &str, message: &str, details: Option<Value>) -> Value {
    let mut s = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    // An error that is not a Status (etcd's, passed on) has no reason.
    if reason.is_empty()
        && let Some(m) = s.as_object_mut()
    {
        m.remove("reason");
    }
    if let Some(d) = details {
        s["details"] = d;
    }
    s
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let (code, _, _, _) = self.parts();
        let body = self.status();
        let mut resp = json_response(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), body.to_string().into());
        if let Error::Injected(FaultKind::TooManyRequests { retry_after_seconds }) = &self
            && let Ok(v) = HeaderValue::from_str(&retry_after_seconds.to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        resp
    }
}

type HResult<T> = Result<T, Error>;

/// Shared state of the HTTP handlers.
#[derive(Clone)]
pub struct AppState {
    /// The store.
    pub store: Arc<Store>,
    /// Fault injection.
    pub faults: Faults,
    /// Bumped to end every open watch (shutdown, restart, cut).
    pub watch_gen: Arc<watch::Sender<u64>>,
    /// The advertised address (`host:port`).
    pub addr: String,
    /// TokenReview and SubjectAccessReview answers.
    pub auth: Arc<super::auth::AuthConfig>,
    /// The OpenAPI documents (built on first request).
    pub openapi: Arc<super::openapi::Documents>,
}

/// Build the router.
pub fn router(state: AppState) -> Router {
    Router::new().fallback(handle).with_state(state)
}

fn json_response(code: StatusCode, body: Bytes) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = code;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn ok_json(v: &Value) -> Response {
    json_response(StatusCode::OK, v.to_string().into())
}

fn obj_response(code: StatusCode, alias: Option<&Alias>, o: &Obj) -> Response {
    json_response(code, show_obj(alias, o))
}

/// kube-apiserver's limit on a request body (`MaxRequestBodyBytes`: 3 MiB,
/// twice etcd's default request limit, as JSON is larger than the
/// protobuf it stores); beyond it, 413.
pub(crate) const BODY_LIMIT: usize = 3 * 1024 * 1024;

async fn handle(State(st): State<AppState>, req: Request) -> Response {
    let (mut parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, BODY_LIMIT).await {
        Ok(b) => b,
        Err(_) => return Error::TooLarge.into_response(),
    };
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or("").to_string();
    let bytes = match protobuf_body(&mut parts.headers, bytes) {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    if let Some(refused) = unsupported_body(&parts.headers, &bytes) {
        return refused.into_response();
    }
    match dispatch(&st, &parts.method, &path, &query, &parts.headers, bytes).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// A protobuf body of a built-in kind becomes its JSON ([`super::proto`]),
/// Content-Type included; a malformed one is 400. A kind with no protobuf
/// schema (a custom resource) is left for [`unsupported_body`]'s 415.
fn protobuf_body(headers: &mut HeaderMap, body: Bytes) -> HResult<Bytes> {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if body.is_empty() || !super::proto::is_protobuf(ct) {
        return Ok(body);
    }
    match super::proto::decode(&body) {
        Ok(v) => {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            Ok(v.to_string().into())
        }
        Err(e) if e.unsupported_media_type() => Ok(body),
        Err(e) => Err(Error::BadRequest(e.to_string())),
    }
}

/// Request bodies are JSON or YAML (and the patch types), or protobuf for
/// the built-in kinds (decoded by [`protobuf_body`] first): a protobuf body
/// of another kind, or a
/// CBOR body is answered 415 Unsupported Media Type, which current
/// clients (client-go, so kubectl) take as the cue to send JSON instead.
fn unsupported_body(headers: &HeaderMap, body: &Bytes) -> Option<Error> {
    if body.is_empty() {
        return None;
    }
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let media = ct.split(';').next().unwrap_or("").trim();
    matches!(media, "application/vnd.kubernetes.protobuf" | "application/cbor" | "application/apply-patch+cbor").then(|| {
        Error::Store(store::Error::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {media:?})"
        )))
    })
}

fn parse_query(q: &str) -> HResult<HashMap<String, String>> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(q).map_err(|e| Error::BadRequest(format!("invalid query: {e}")))?;
    Ok(pairs.into_iter().collect())
}

/// The field manager and options of a write: `fieldManager`, else the
/// User-Agent up to its first `/` (not for apply, which must name its
/// manager); `force` (apply only); `dryRun=All`.
fn write_ctx(q: &HashMap<String, String>, headers: &HeaderMap, view: &ResourceInfo, apply: Option<bool>) -> HResult<store::WriteCtx> {
    if let Some(d) = q.get("dryRun").filter(|d| !d.is_empty() && d.as_str() != "All") {
        return Err(store::Error::BadRequest(format!("dryRun: Unsupported value: {d:?}: supported values: \"All\"")).into());
    }
    let param = q.get("fieldManager").filter(|m| !m.is_empty()).cloned();
    if let Some(m) = &param
        && m.len() > 128 {
            return Err(store::patch_options_invalid("fieldManager: Too long: may not be more than 128 bytes").into());
        }
    let manager = match apply {
        Some(true) => {
            if param.is_none() {
                return Err(store::patch_options_invalid("fieldManager: Required value: is required for apply patch").into());
            }
            param
        }
        _ => {
            if apply == Some(false) && q.contains_key("force") {
                return Err(store::patch_options_invalid("force: Forbidden: may not be specified for non-apply patch").into());
            }
            let ua = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("");
            Some(param.unwrap_or_else(|| super::managed::manager_from_user_agent(ua)))
        }
    };
    let mut ctx = store::WriteCtx::default();
    ctx.manager = manager;
    ctx.api_version = view.api_version();
    ctx.force = apply == Some(true) && truthy(q.get("force"));
    ctx.dry_run = q.get("dryRun").is_some_and(|d| d == "All");
    Ok(ctx)
}

fn truthy(v: Option<&String>) -> bool {
    matches!(v.map(String::as_str), Some("true") | Some("1") | Some("True"))
}

/// The resolved target of a resource request: `r` is the store holding
/// the objects, `view` the resource as requested (another version of a
/// custom resource is served from its storage version's store).
enum Target {
    Collection { r: ResId, view: Arc<ResourceInfo>, ns: Option<String> },
    Item { r: ResId, view: Arc<ResourceInfo>, ns: String, name: String, sub: Option<String> },
}

fn resolve(store: &Store, group: &str, version: &str, segs: &[&str]) -> Option<Target> {
    let find = |p: &str| {
        let id = store.lookup(group, version, p)?;
        Some((store.registry().storage(id), store.info(id)))
    };
    match segs {
        [p] => find(p).map(|(r, view)| Target::Collection { r, view, ns: None }),
        ["namespaces", ns, p] if find(p).is_some_and(|(_, v)| v.namespaced) => {
            find(p).map(|(r, view)| Target::Collection { r, view, ns: Some((*ns).to_string()) })
        }
        ["namespaces", ns, p, name] => find(p)
            .filter(|(_, v)| v.namespaced)
            .map(|(r, view)| Target::Item { r, view, ns: (*ns).to_string(), name: (*name).to_string(), sub: None }),
        ["namespaces", ns, p, name, sub] => find(p)
            .filter(|(_, v)| v.namespaced)
            .map(|(r, view)| Target::Item { r, view, ns: (*ns).to_string(), name: (*name).to_string(), sub: Some((*sub).to_string()) }),
        [p, name] => find(p)
            .filter(|(_, v)| !v.namespaced)
            .map(|(r, view)| Target::Item { r, view, ns: String::new(), name: (*name).to_string(), sub: None }),
        [p, name, sub] => find(p)
            .filter(|(_, v)| !v.namespaced)
            .map(|(r, view)| Target::Item { r, view, ns: String::new(), name: (*name).to_string(), sub: Some((*sub).to_string()) }),
        _ => None,
    }
}

/// How objects of a store are shown through another resource: another
/// version of the same custom resource (their `apiVersion` rewritten, the
/// `None` conversion strategy), or core/v1 Events, a view of the
/// events.k8s.io/v1 store (fields renamed too; see `eventview`). Both ways.
#[derive(Clone)]
struct Alias {
    /// The stored apiVersion.
    stored: String,
    /// The requested one.
    shown: String,
    /// core/v1 Events.
    event: bool,
}

impl Alias {
    fn new(store: &Store, r: ResId, view: &Arc<ResourceInfo>) -> Option<Alias> {
        let stored = store.info(r);
        // The common case, a resource served from its own store.
        if Arc::ptr_eq(&stored, view) {
            return None;
        }
        let stored = stored.api_version();
        let shown = view.api_version();
        let shown_id = store.lookup(view.group, view.version, view.plural).unwrap_or(r);
        let event = shown_id == res::EVENTS;
        (stored != shown).then_some(Alias { stored, shown, event })
    }

    fn set(v: &mut Value, api_version: &str) {
        if let Some(m) = v.as_object_mut()
            && m.get("apiVersion").is_some_and(|a| a.is_string())
        {
            m.insert("apiVersion".into(), json!(api_version));
        }
    }

    /// A request body (an object, or for `json_patch` an RFC 6902 patch),
    /// into the stored version. A body that does not parse is passed on
    /// for the store to refuse.
    fn incoming(&self, body: &Bytes, headers: &HeaderMap, json_patch: bool) -> Bytes {
        let parsed = if json_patch { serde_json::from_slice::<Value>(body).ok() } else { parse_json(body, headers).ok() };
        match parsed {
            Some(mut v) if self.event => {
                if json_patch {
                    super::eventview::json_patch_to_stored(&mut v);
                } else {
                    super::eventview::to_stored(&mut v);
                }
                Bytes::from(v.to_string())
            }
            Some(mut v) if !json_patch && v.get("apiVersion").and_then(Value::as_str) == Some(self.shown.as_str()) => {
                Self::set(&mut v, &self.stored);
                Bytes::from(v.to_string())
            }
            _ => body.clone(),
        }
    }

    /// A stored object's value, in the requested version.
    fn outgoing_value(&self, bytes: &[u8]) -> Option<Value> {
        let mut v = serde_json::from_slice::<Value>(bytes).ok()?;
        if self.event {
            super::eventview::to_core(&mut v);
        } else {
            Self::set(&mut v, &self.shown);
        }
        Some(v)
    }

    /// A stored object, into the requested version.
    fn outgoing(&self, bytes: &[u8]) -> Bytes {
        match self.outgoing_value(bytes) {
            Some(v) => Bytes::from(v.to_string()),
            None => Bytes::copy_from_slice(bytes),
        }
    }

    /// Objects as Table rows read them: in the requested version.
    fn shown_list(&self, lr: &store::ListResult) -> store::ListResult {
        let items = lr.items.iter().map(|o| self.outgoing_value(&o.bytes).map_or_else(|| o.clone(), |v| Obj::from_value(v, o.rv))).collect();
        store::ListResult { items, rv: lr.rv, cont: lr.cont.clone() }
    }

    /// A list or watch filter of the requested resource, on the stored
    /// objects: core/v1 Event fields are selected by their stored names.
    fn stored_filter(&self, mut f: Filter) -> Filter {
        if self.event {
            for req in &mut f.fields.reqs {
                if let std::borrow::Cow::Owned(p) = super::eventview::selector_to_stored(&req.pointer) {
                    req.pointer = p;
                }
            }
        }
        f
    }
}

/// A Table of objects of store `r`, shown as the requested resource.
fn table_of(info: &ResourceInfo, alias: Option<&Alias>, lr: &store::ListResult, include: super::table::Include) -> Value {
    match alias {
        Some(a) => super::table::table(info, &a.shown_list(lr), include),
        None => super::table::table(info, lr, include),
    }
}

/// Build a list or watch filter, on the objects as stored.
fn stored_filter(info: &ResourceInfo, alias: Option<&Alias>, ns: Option<String>, q: &HashMap<String, String>) -> HResult<Filter> {
    let f = build_filter(info, ns, q)?;
    Ok(match alias {
        Some(a) => a.stored_filter(f),
        None => f,
    })
}

fn show_obj(alias: Option<&Alias>, o: &Obj) -> Bytes {
    match alias {
        Some(a) => a.outgoing(&o.bytes),
        None => o.bytes.clone(),
    }
}

/// Is the request body an RFC 6902 JSON patch?
fn is_json_patch(headers: &HeaderMap) -> bool {
    headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|ct| ct.split(';').next().is_some_and(|t| t.trim() == "application/json-patch+json"))
}

/// The body of a write through `alias`, in the stored version; other
/// requests' bodies (delete options) as sent.
fn stored_body(alias: Option<&Alias>, method: &Method, headers: &HeaderMap, raw: &Bytes) -> Bytes {
    match alias {
        Some(a) if !raw.is_empty() && matches!(*method, Method::POST | Method::PUT | Method::PATCH) => a.incoming(raw, headers, is_json_patch(headers)),
        _ => raw.clone(),
    }
}

async fn dispatch(st: &AppState, method: &Method, path: &str, query: &str, headers: &HeaderMap, body: Bytes) -> HResult<Response> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    let get_only = |r: Response| -> HResult<Response> { if method == Method::GET { Ok(r) } else { Err(Error::MethodNotAllowed) } };
    match segs.as_slice() {
        ["version"] => get_only(ok_json(&st.store.kubernetes_version().version_json())),
        ["healthz"] | ["readyz"] | ["livez"] => get_only((StatusCode::OK, "ok").into_response()),
        ["api"] => get_only(ok_json(&json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": st.addr}],
        }))),
        ["apis"] => get_only(ok_json(&api_group_list(&st.store))),
        ["api", "v1"] => get_only(ok_json(&resource_list(&st.store, "", "v1"))),
        ["apis", g] => match api_group(&st.store, g) {
            Some(v) => get_only(ok_json(&v)),
            None => Err(Error::NotFound),
        },
        ["apis", g, v] => {
            if st.store.served().iter().any(|(_, r)| r.group == *g && r.version == *v) {
                get_only(ok_json(&resource_list(&st.store, g, v)))
            } else {
                Err(Error::NotFound)
            }
        }
        ["openapi", "v2"] => get_only(openapi_v2(st, headers)?),
        ["openapi", "v3"] => get_only(openapi_v3_root(st, headers)),
        ["openapi", "v3", rest @ ..] => get_only(openapi_v3(st, &rest.join("/"), query, headers)?),
        ["api", "v1", rest @ ..] => resource_request(st, method, "", "v1", rest, query, headers, body).await,
        ["apis", group @ ("authentication.k8s.io" | "authorization.k8s.io"), "v1", kind @ ("tokenreviews" | "subjectaccessreviews")] => {
            if method != Method::POST {
                return Err(Error::MethodNotAllowed);
            }
            let req = parse_json(&body, headers)?;
            let answer = match (*group, *kind) {
                ("authentication.k8s.io", "tokenreviews") => match str_at(&req, "/spec/token").and_then(|t| st.store.review_token(t)) {
                    Some(user) => Ok(json!({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1", "metadata": {"creationTimestamp": null},
                        "spec": req.get("spec").cloned().unwrap_or(Value::Null),
                        "status": {"authenticated": true, "audiences": user.audiences,
                            "user": {"username": user.username, "uid": user.uid, "groups": user.groups}}})),
                    None => st.auth.token_review(&req),
                },
                ("authorization.k8s.io", "subjectaccessreviews") => st.auth.subject_access_review(&req),
                _ => return Err(Error::NotFound),
            };
            match answer {
                Ok(v) => Ok(json_response(StatusCode::CREATED, v.to_string().into())),
                Err(e @ super::auth::Error::Invalid { .. }) => Ok(json_response(StatusCode::UNPROCESSABLE_ENTITY, status_json(422, "Invalid", &e.to_string(), None).to_string().into())),
                Err(e) => Err(Error::BadRequest(e.to_string())),
            }
        }
        ["apis", g, v, rest @ ..] => resource_request(st, method, g, v, rest, query, headers, body).await,
        _ => Err(Error::NotFound),
    }
}

/// The served groups (built-in order first) with their versions,
/// preferred first.
fn groups(store: &Store) -> Vec<(&'static str, Vec<&'static str>)> {
    let mut gs: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for (_, r) in store.served() {
        if r.group.is_empty() {
            continue;
        }
        match gs.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, vs)) => {
                if !vs.contains(&r.version) {
                    vs.push(r.version);
                }
            }
            None => gs.push((r.group, vec![r.version])),
        }
    }
    for (_, vs) in &mut gs {
        vs.sort_by_key(|v| res::version_priority(v));
    }
    gs
}

fn api_group(store: &Store, g: &str) -> Option<Value> {
    let (_, versions) = groups(store).into_iter().find(|(name, _)| *name == g)?;
    let gvs: Vec<Value> = versions.iter().map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v})).collect();
    let preferred = gvs.first().cloned()?;
    Some(json!({"kind": "APIGroup", "apiVersion": "v1", "name": g, "versions": gvs, "preferredVersion": preferred}))
}

fn api_group_list(store: &Store) -> Value {
    let gs: Vec<Value> = groups(store)
        .into_iter()
        .filter_map(|(g, _)| {
            let mut v = api_group(store, g)?;
            if let Some(m) = v.as_object_mut() {
                m.remove("kind");
                m.remove("apiVersion");
            }
            Some(v)
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": gs})
}

fn resource_list(store: &Store, g: &str, v: &str) -> Value {
    let mut out = Vec::new();
    for (_, r) in store.served().into_iter().filter(|(_, r)| r.group == g && r.version == v) {
        let mut e = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": res::verbs(),
        });
        if !r.short_names.is_empty() {
            e["shortNames"] = json!(r.short_names);
        }
        if matches!(r.plural, "pods" | "services" | "replicationcontrollers" | "replicasets" | "statefulsets" | "deployments" | "daemonsets") && r.custom.is_none() {
            e["categories"] = json!(["all"]);
        }
        if let Some(c) = r.custom.as_ref().filter(|c| !c.categories.is_empty()) {
            e["categories"] = json!(c.categories);
        }
        out.push(e);
        for (sub, kind, verbs) in r.subresources {
            let mut s = json!({"name": format!("{}/{}", r.plural, sub), "singularName": "", "namespaced": r.namespaced, "kind": kind, "verbs": verbs});
            if *sub == "eviction" {
                s["group"] = json!("policy");
                s["version"] = json!("v1");
            }
            if *sub == "token" {
                s["group"] = json!("authentication.k8s.io");
                s["version"] = json!("v1");
            }
            if *sub == "scale" {
                s["group"] = json!("autoscaling");
                s["version"] = json!("v1");
            }
            out.push(s);
        }
    }
    let gv = if g.is_empty() { v.to_string() } else { format!("{g}/{v}") };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out})
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.at(pointer).and_then(Value::as_str)
}

fn parse_json(body: &Bytes, headers: &HeaderMap) -> HResult<Value> {
    if body.is_empty() {
        return Err(Error::BadRequest("the request body is empty".into()));
    }
    let yaml = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|ct| ct.contains("yaml"));
    let v: Value = if yaml {
        serde_saphyr::from_slice(body).map_err(|e| Error::BadRequest(format!("the body of the request was in an unknown format: {e}")))?
    } else {
        serde_json::from_slice(body).map_err(|e| Error::BadRequest(format!("the body of the request was in an unknown format: {e}")))?
    };
    if !v.is_object() {
        return Err(Error::BadRequest("the body of the request must be a JSON object".into()));
    }
    Ok(v)
}

fn build_filter(info: &ResourceInfo, ns: Option<String>, q: &HashMap<String, String>) -> HResult<Filter> {
    let labels = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| Error::BadRequest(e.to_string()))?;
    let fields = FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""), info.fields)
        .map_err(|e| Error::BadRequest(e.to_string()))?;
    Ok(Filter { namespace: ns, labels, fields })
}

fn delete_opts(q: &HashMap<String, String>, body: &Bytes) -> HResult<DeleteOpts> {
    let mut o = DeleteOpts::default();
    if !body.is_empty() {
        let v: Value = serde_json::from_slice(body).map_err(|e| Error::BadRequest(format!("invalid DeleteOptions: {e}")))?;
        o.grace = v.get("gracePeriodSeconds").and_then(Value::as_i64);
        o.uid = v.at("/preconditions/uid").and_then(Value::as_str).map(str::to_string);
        o.rv = v.at("/preconditions/resourceVersion").and_then(Value::as_str).map(str::to_string);
    }
    if let Some(g) = q.get("gracePeriodSeconds") {
        o.grace = Some(g.parse().map_err(|_| Error::BadRequest(format!("invalid gracePeriodSeconds {g:?}")))?);
    }
    Ok(o)
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.split(',').next().is_some_and(|first| first.contains("as=Table")))
}

/// Whether the client asked for Tables, and what their rows carry of each
/// object (`includeObject`, checked only then, as upstream's table options are).
fn table_request(headers: &HeaderMap, q: &HashMap<String, String>) -> HResult<Option<super::table::Include>> {
    if !wants_table(headers) {
        return Ok(None);
    }
    super::table::Include::parse(q.get("includeObject").map(String::as_str)).map(Some).map_err(Error::BadRequest)
}

#[allow(clippy::too_many_arguments)]
async fn resource_request(
    st: &AppState,
    method: &Method,
    group: &str,
    version: &str,
    segs: &[&str],
    query: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> HResult<Response> {
    let target = resolve(&st.store, group, version, segs).ok_or(Error::NotFound)?;
    let q = parse_query(query)?;
    let store = &st.store;
    match target {
        Target::Collection { r, view, ns } => {
            let info = view;
            let alias = Alias::new(store, r, &info);
            let raw = body;
            let body = stored_body(alias.as_ref(), method, headers, &raw);
            let verb = match *method {
                Method::GET if truthy(q.get("watch")) => "watch",
                Method::GET => "list",
                Method::POST => "create",
                Method::DELETE => "deletecollection",
                _ => return Err(Error::MethodNotAllowed),
            };
            st.faults.check(verb, info.plural).map_err(Error::Injected)?;
            match verb {
                "watch" => {
                    let filter = stored_filter(&info, alias.as_ref(), ns, &q)?;
                    let table = table_request(headers, &q)?;
                    if let Err(e) = reached(store, &q, true).await? {
                        return Ok(watch_error(e));
                    }
                    Ok(watch_response(st, r, &info, alias, filter, &q, table))
                }
                "list" => {
                    reached(store, &q, false).await??;
                    let filter = stored_filter(&info, alias.as_ref(), ns, &q)?;
                    let limit = match q.get("limit") {
                        Some(l) => Some(l.parse::<usize>().map_err(|_| Error::BadRequest(format!("invalid limit {l:?}")))?),
                        None => None,
                    };
                    let cont = q.get("continue").map(String::as_str);
                    if let Some(include) = table_request(headers, &q)? {
                        let lr = store.list(r, &filter, limit, cont)?;
                        return Ok(ok_json(&table_of(&info, alias.as_ref(), &lr, include)));
                    }
                    let lr = store.list_bytes(r, &filter, limit, cont)?;
                    Ok(list_response(&info, alias.as_ref(), &lr))
                }
                "create" => {
                    let ns = ns.ok_or({
                        if info.namespaced { Error::MethodNotAllowed } else { Error::NotFound }
                    });
                    let ns = match (info.namespaced, ns) {
                        (true, Ok(ns)) => ns,
                        (true, Err(e)) => return Err(e),
                        (false, _) => String::new(),
                    };
                    let warnings = check_fields(st, &info, &q, headers, &raw)?;
                    let yaml = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|ct| ct.contains("yaml"));
                    let ctx = write_ctx(&q, headers, &info, None)?;
                    let o = if yaml || body.is_empty() {
                        let v = parse_json(&body, headers)?;
                        store.create_with(r, &ns, v, &ctx)?
                    } else {
                        store.create_from_slice_with(r, &ns, &body, &ctx)?
                    };
                    Ok(with_warnings(obj_response(StatusCode::CREATED, alias.as_ref(), &o), &warnings))
                }
                _ => {
                    refuse_dry_run(&q)?;
                    let filter = stored_filter(&info, alias.as_ref(), ns, &q)?;
                    let opts = delete_opts(&q, &body)?;
                    let lr = store.list(r, &filter, None, None)?;
                    for o in &lr.items {
                        match store.delete(r, o.namespace(), o.name(), &opts) {
                            Ok(_) | Err(store::Error::NotFound { .. }) => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                    Ok(list_response(&info, alias.as_ref(), &lr))
                }
            }
        }
        Target::Item { r, view, ns, name, sub } => {
            let info = view;
            let alias = Alias::new(store, r, &info);
            let raw = body;
            let body = stored_body(alias.as_ref(), method, headers, &raw);
            let sub = sub.as_deref();
            if let Some(s) = sub
                && !info.subresources.iter().any(|(n, _, _)| *n == s) {
                    return Err(Error::NotFound);
                }
            if sub == Some("scale") {
                return scale_request(st, method, (r, &info), &ns, &name, &q, headers, &raw);
            }
            if let Some(s) = sub.filter(|s| r == res::PODS && streams::SUBRESOURCES.contains(s)) {
                return streams::answer(store, method, s, &ns, &name, &q);
            }
            let verb = match (method.clone(), sub) {
                (Method::GET, None) if truthy(q.get("watch")) => "watch",
                (Method::GET, _) => "get",
                (Method::PUT, None | Some("status")) => "update",
                (Method::PATCH, None | Some("status")) => "patch",
                (Method::DELETE, None) => "delete",
                (Method::POST, Some("binding" | "eviction" | "token")) => "create",
                _ => return Err(Error::MethodNotAllowed),
            };
            let res_name = match sub {
                Some(s) => format!("{}/{}", info.plural, s),
                None => info.plural.to_string(),
            };
            st.faults.check(verb, &res_name).map_err(Error::Injected)?;
            let status_only = sub == Some("status");
            match verb {
                "watch" => {
                    let mut filter = stored_filter(&info, alias.as_ref(), info.namespaced.then(|| ns.clone()), &q)?;
                    filter.fields.reqs.push(super::selector::FieldReq { pointer: "/metadata/name".into(), value: name.clone(), eq: true });
                    let table = table_request(headers, &q)?;
                    if let Err(e) = reached(store, &q, true).await? {
                        return Ok(watch_error(e));
                    }
                    Ok(watch_response(st, r, &info, alias, filter, &q, table))
                }
                "get" => {
                    reached(store, &q, false).await??;
                    let o = store.get(r, &ns, &name)?;
                    if let Some(include) = table_request(headers, &q)? {
                        let lr = store::ListResult { items: vec![o], rv: store.current_rv(), cont: None };
                        return Ok(ok_json(&table_of(&info, alias.as_ref(), &lr, include)));
                    }
                    Ok(obj_response(StatusCode::OK, alias.as_ref(), &o))
                }
                "update" => {
                    let warnings = check_fields(st, &info, &q, headers, &raw)?;
                    let v = parse_json(&body, headers)?;
                    managed_fields_listed(&info, &v)?;
                    let ctx = write_ctx(&q, headers, &info, None)?;
                    let o = store.update_with(r, &ns, &name, v, status_only, &ctx)?;
                    Ok(with_warnings(obj_response(StatusCode::OK, alias.as_ref(), &o), &warnings))
                }
                "patch" => {
                    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
                    let ct = ct.split(';').next().unwrap_or("").trim();
                    let pt = match ct {
                        "application/merge-patch+json" => PatchType::Merge,
                        "application/strategic-merge-patch+json" => PatchType::Strategic,
                        "application/json-patch+json" => PatchType::Json,
                        "application/apply-patch+yaml" | "application/apply-patch+json" => PatchType::Apply,
                        other => {
                            return Err(store::Error::UnsupportedMediaType(format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {other:?})")).into());
                        }
                    };
                    patched_managed_fields_listed(&info, pt, &raw)?;
                    let warnings = check_patch_fields(st, (r, alias.as_ref()), &info, &ns, &name, &pt, &q, &raw)?;
                    let ctx = write_ctx(&q, headers, &info, Some(pt == PatchType::Apply))?;
                    let (o, created) = store.patch_with(r, &ns, &name, pt, &body, status_only, &ctx)?;
                    let code = if created { StatusCode::CREATED } else { StatusCode::OK };
                    Ok(with_warnings(obj_response(code, alias.as_ref(), &o), &warnings))
                }
                "delete" => {
                    refuse_dry_run(&q)?;
                    let opts = delete_opts(&q, &body)?;
                    let o = store.delete(r, &ns, &name, &opts)?;
                    Ok(obj_response(StatusCode::OK, alias.as_ref(), &o))
                }
                _ => {
                    let v = parse_json(&body, headers)?;
                    if sub == Some("token") {
                        let answer = store.request_token(&ns, &name, v)?;
                        return Ok(json_response(StatusCode::CREATED, answer.to_string().into()));
                    }
                    match sub {
                        Some("binding") => store.bind(&ns, &name, v)?,
                        _ => store.evict(&ns, &name, v)?,
                    }
                    Ok(json_response(
                        StatusCode::CREATED,
                        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}).to_string().into(),
                    ))
                }
            }
        }
    }
}

/// The patch types of a PATCH request (415 for any other).
fn patch_type(headers: &HeaderMap) -> HResult<PatchType> {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    match ct.split(';').next().unwrap_or("").trim() {
        "application/merge-patch+json" => Ok(PatchType::Merge),
        "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
        "application/json-patch+json" => Ok(PatchType::Json),
        "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(PatchType::Apply),
        other => Err(store::Error::UnsupportedMediaType(format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {other:?})")).into()),
    }
}

/// `.../<name>/scale`: GET answers the object's autoscaling/v1 Scale; PUT
/// and PATCH (of the Scale) change only the object's replicas, with the
/// Scale's resourceVersion as a precondition (see [`super::scale`]).
#[allow(clippy::too_many_arguments)]
fn scale_request(st: &AppState, method: &Method, (r, info): (ResId, &ResourceInfo), ns: &str, name: &str, q: &HashMap<String, String>, headers: &HeaderMap, body: &Bytes) -> HResult<Response> {
    use super::scale;
    let verb = match *method {
        Method::GET => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        _ => return Err(Error::MethodNotAllowed),
    };
    st.faults.check(verb, &format!("{}/scale", info.plural)).map_err(Error::Injected)?;
    let store = &st.store;
    let current = store.get(r, ns, name)?;
    let shown = scale::scale_of(info, &current.full().value).ok_or(Error::NotFound)?;
    let wanted = match verb {
        "get" => return Ok(ok_json(&shown)),
        "update" => parse_json(body, headers)?,
        _ => {
            let pt = patch_type(headers)?;
            let mut patched = shown.clone();
            if pt == PatchType::Json {
                let ops: json_patch::Patch = serde_json::from_slice(body).map_err(|e| Error::BadRequest(format!("error decoding patch: {e}")))?;
                json_patch::patch(&mut patched, &ops).map_err(|e| {
                    Error::Store(store::Error::Invalid { kind: "Scale.autoscaling".into(), name: name.to_string(), message: format!("JSON patch failed: {e}") })
                })?;
            } else {
                let mut p = parse_json(body, headers)?;
                strip_directives(&mut p);
                json_patch::merge(&mut patched, &p);
            }
            patched
        }
    };
    let errs = scale::validate(&wanted);
    if !errs.is_empty() {
        let message = if errs.len() == 1 { errs[0].clone() } else { format!("[{}]", errs.join(", ")) };
        return Err(store::Error::Invalid { kind: "Scale.autoscaling".into(), name: name.to_string(), message }.into());
    }
    let patch = scale::replicas_patch(info, &wanted).ok_or(Error::NotFound)?;
    let ctx = write_ctx(q, headers, info, None)?;
    let (updated, _) = store.patch_with(r, ns, name, PatchType::Merge, patch.to_string().as_bytes(), false, &ctx)?;
    let answer = scale::scale_of(info, &updated.full().value).ok_or(Error::NotFound)?;
    Ok(ok_json(&answer))
}

fn list_response(info: &ResourceInfo, alias: Option<&Alias>, lr: &store::ListResult) -> Response {
    let mut meta = json!({"resourceVersion": lr.rv.to_string()});
    if let Some(c) = &lr.cont {
        meta["continue"] = json!(c);
    }
    let list_kind = match &info.custom {
        Some(c) if !c.list_kind.is_empty() => c.list_kind.clone(),
        _ => format!("{}List", info.kind),
    };
    let head = format!("{{\"kind\":\"{list_kind}\",\"apiVersion\":\"{}\",\"metadata\":{meta},\"items\":[", info.api_version());
    if alias.is_none() {
        return streamed_list(head, lr.items.clone());
    }
    let total: usize = lr.items.iter().map(|o| o.bytes.len() + 1).sum::<usize>() + head.len() + 2;
    let mut buf = Vec::with_capacity(total);
    buf.extend_from_slice(head.as_bytes());
    for (i, o) in lr.items.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        match alias {
            Some(a) => buf.extend_from_slice(&a.outgoing(&o.bytes)),
            None => buf.extend_from_slice(&o.bytes),
        }
    }
    buf.extend_from_slice(b"]}");
    json_response(StatusCode::OK, buf.into())
}

/// A list written as it is sent, in pieces of about [`LIST_CHUNK`] bytes
/// copied from the stored objects' bytes: a list of thousands of objects
/// costs a piece at a time, not its whole text, however many are sent at
/// once (the objects are shared with the store).
fn streamed_list(head: String, items: Vec<Arc<Obj>>) -> Response {
    // A list that fits one piece goes out whole, with Content-Length, as
    // kube-apiserver writes any answer shorter than its write buffer.
    let total: usize = items.iter().map(|o| o.bytes.len() + 1).sum::<usize>() + head.len() + 2;
    if total <= LIST_CHUNK {
        let mut buf = Vec::with_capacity(total);
        buf.extend_from_slice(head.as_bytes());
        for (i, o) in items.iter().enumerate() {
            if i > 0 {
                buf.push(b',');
            }
            buf.extend_from_slice(&o.bytes);
        }
        buf.extend_from_slice(b"]}");
        return json_response(StatusCode::OK, buf.into());
    }
    let mut head = Some(head);
    let mut next = 0usize;
    let mut done = false;
    let pieces = std::iter::from_fn(move || {
        if done {
            return None;
        }
        let mut buf = Vec::with_capacity(LIST_CHUNK + 4096);
        if let Some(h) = head.take() {
            buf.extend_from_slice(h.as_bytes());
        }
        while buf.len() < LIST_CHUNK {
            let Some(o) = items.get(next) else {
                buf.extend_from_slice(b"]}");
                done = true;
                break;
            };
            if next > 0 {
                buf.push(b',');
            }
            buf.extend_from_slice(&o.bytes);
            next += 1;
        }
        Some(Ok::<_, std::convert::Infallible>(Bytes::from(buf)))
    });
    let mut r = Response::new(Body::from_stream(futures::stream::iter(pieces)));
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// The size of the pieces a list is written in.
const LIST_CHUNK: usize = 64 * 1024;

fn served_infos(store: &Store) -> Vec<Arc<ResourceInfo>> {
    store.served().into_iter().map(|(_, r)| r).collect()
}

/// Answer a document: ETag, `If-None-Match` (304), content type.
fn doc_response(doc: &super::openapi::Doc, headers: &HeaderMap, content_type: &'static str) -> Response {
    let etag = format!("\"{}\"", doc.etag);
    let matches = headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()).is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut r = if matches {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        let mut r = Response::new(Body::from(doc.bytes.clone()));
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        r
    };
    if let Ok(v) = HeaderValue::from_str(&etag) {
        r.headers_mut().insert(header::ETAG, v);
    }
    r
}

/// The media types of an Accept header, in order (parameters dropped).
fn accepts(headers: &HeaderMap) -> Vec<String> {
    let a = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    let v: Vec<String> = a.split(',').map(|c| c.split(';').next().unwrap_or("").trim().to_ascii_lowercase()).filter(|c| !c.is_empty()).collect();
    if v.is_empty() { vec!["*/*".into()] } else { v }
}

fn accepts_json(headers: &HeaderMap) -> bool {
    accepts(headers).iter().any(|t| matches!(t.as_str(), "application/json" | "application/*" | "*/*"))
}

/// `/openapi/v2`: JSON only. kubectl asks for the gnostic protobuf only;
/// it is answered 406 (as kube-openapi answers an Accept it cannot serve)
/// and kubectl works from the v3 documents.
fn openapi_v2(st: &AppState, headers: &HeaderMap) -> HResult<Response> {
    if !accepts_json(headers) {
        return Err(Error::NotAcceptable);
    }
    let doc = st.openapi.v2(&served_infos(&st.store));
    Ok(doc_response(&doc, headers, "application/json"))
}

fn openapi_v3_root(st: &AppState, headers: &HeaderMap) -> Response {
    let doc = st.openapi.v3_root(&served_infos(&st.store));
    doc_response(&doc, headers, "application/json")
}

/// `/openapi/v3/<gv>[?hash=]`: the current hash is cacheable for ever,
/// an old one is redirected to the current one (kube-openapi's handler3).
fn openapi_v3(st: &AppState, gv: &str, query: &str, headers: &HeaderMap) -> HResult<Response> {
    let doc = st.openapi.v3(&served_infos(&st.store), gv).map_err(|_| Error::NotFound)?;
    if !accepts_json(headers) {
        return Err(Error::NotAcceptable);
    }
    let q = parse_query(query)?;
    let mut r = doc_response(&doc, headers, "application/json");
    r.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept"));
    if let Some(hash) = q.get("hash").filter(|h| !h.is_empty()) {
        if *hash != doc.etag {
            let mut redirect = Response::new(Body::empty());
            *redirect.status_mut() = StatusCode::MOVED_PERMANENTLY;
            if let Ok(v) = HeaderValue::from_str(&format!("/openapi/v3/{gv}?hash={}", doc.etag)) {
                redirect.headers_mut().insert(header::LOCATION, v);
            }
            return Ok(redirect);
        }
        r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("public, immutable"));
        let expires = (chrono::Utc::now() + chrono::Duration::days(365)).format("%a, %d %b %Y %H:%M:%S GMT").to_string();
        if let Ok(v) = HeaderValue::from_str(&expires) {
            r.headers_mut().insert(header::EXPIRES, v);
        }
    }
    Ok(r)
}

/// A write with `dryRun` is refused: the local cluster cannot run one
/// without persisting it, and persisting it would be wrong.
fn refuse_dry_run(q: &HashMap<String, String>) -> HResult<()> {
    match q.get("dryRun").map(String::as_str) {
        None | Some("") => Ok(()),
        Some("All") => Err(Error::BadRequest("dryRun is not supported by the local cluster".into())),
        Some(other) => Err(Error::BadRequest(format!("dryRun: Unsupported value: \"{other}\": supported values: \"All\""))),
    }
}

/// The strict-decoding findings of a body: (directive, messages).
fn strict_findings(st: &AppState, info: &ResourceInfo, q: &HashMap<String, String>, headers: &HeaderMap, body: &Bytes) -> HResult<(super::openapi::Directive, Vec<String>)> {
    use super::openapi::{self as oa, Directive};
    let directive = Directive::parse(q.get("fieldValidation").map(String::as_str)).map_err(Error::BadRequest)?;
    if directive == Directive::Ignore || body.is_empty() {
        return Ok((directive, Vec::new()));
    }
    let yaml = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|ct| ct.contains("yaml"));
    if yaml {
        let obj = parse_json(body, headers)?;
        return Ok((directive, oa::strict_errors(&unknown_of(st, info, &obj), &[])));
    }
    let schema = st.openapi.schema_for(|| served_infos(&st.store), info);
    let schema = schema.as_ref().map(|(doc, def)| (doc.as_ref(), def.as_str()));
    let errs = if info.custom.is_some() { oa::strict_errors_json(body, schema, true) } else { oa::strict_errors_json_shared(body, schema) };
    Ok((directive, errs))
}

fn unknown_of(st: &AppState, info: &ResourceInfo, obj: &Value) -> Vec<String> {
    match st.openapi.schema_for(|| served_infos(&st.store), info) {
        Some((doc, def)) => super::openapi::unknown_fields(&doc, &def, obj, info.custom.is_some()),
        None => Vec::new(),
    }
}

/// Create and update: Strict refuses (400, as the API server's decoder
/// does), Warn returns the `Warning` headers to add.
fn check_fields(st: &AppState, info: &ResourceInfo, q: &HashMap<String, String>, headers: &HeaderMap, body: &Bytes) -> HResult<Vec<String>> {
    let (directive, errs) = strict_findings(st, info, q, headers, body)?;
    if errs.is_empty() {
        return Ok(errs);
    }
    if directive == super::openapi::Directive::Strict {
        return Err(Error::BadRequest(format!(
            "{kind} in version \"{v}\" cannot be handled as a {kind}: strict decoding error: {}",
            errs.join(", "),
            kind = info.kind,
            v = info.version
        )));
    }
    Ok(errs)
}

/// Patches: the patched object is checked (the stored object has no
/// unknown fields, so they come from the patch); Strict refuses with 422
/// `patch: Invalid value`, as the API server's patch handler does.
#[allow(clippy::too_many_arguments)]
fn check_patch_fields(st: &AppState, (r, alias): (ResId, Option<&Alias>), info: &ResourceInfo, ns: &str, name: &str, pt: &PatchType, q: &HashMap<String, String>, body: &Bytes) -> HResult<Vec<String>> {
    use super::openapi::Directive;
    let directive = Directive::parse(q.get("fieldValidation").map(String::as_str)).map_err(Error::BadRequest)?;
    if directive == Directive::Ignore || matches!(pt, PatchType::Apply) || body.is_empty() {
        return Ok(Vec::new());
    }
    let mut patch: Value = match serde_json::from_slice(body) {
        Ok(p) => p,
        Err(_) => return Ok(Vec::new()),
    };
    // A merge patch is a partial object: when neither it nor its body has
    // a field the schema does not know, neither has the patched object, so
    // the common case needs no copy of the stored object.
    if !matches!(pt, PatchType::Json) {
        strip_directives(&mut patch);
        if super::openapi::duplicate_fields(body).is_empty() && unknown_of(st, info, &patch).is_empty() {
            return Ok(Vec::new());
        }
    }
    let Ok(current) = st.store.get(r, ns, name) else {
        // The store answers the missing object.
        return Ok(Vec::new());
    };
    // The wire form (the stored value keeps managedFields as JSON text),
    // as the requested resource shows it.
    let mut patched: Value = serde_json::from_slice(&show_obj(alias, &current)).unwrap_or_else(|_| current.value.clone());
    match pt {
        PatchType::Json => match serde_json::from_value::<json_patch::Patch>(patch) {
            Ok(p) => {
                if json_patch::patch(&mut patched, &p).is_err() {
                    return Ok(Vec::new());
                }
            }
            Err(_) => return Ok(Vec::new()),
        },
        // Its directives are already dropped (above).
        _ => json_patch::merge(&mut patched, &patch),
    }
    let patched_bytes = Bytes::from(patched.to_string());
    let mut errs: Vec<String> = super::openapi::duplicate_fields(body).into_iter().map(|p| format!("duplicate field \"{p}\"")).collect();
    errs.extend(unknown_of(st, info, &patched).into_iter().map(|p| format!("unknown field \"{p}\"")));
    if errs.is_empty() || directive != Directive::Strict {
        return Ok(errs);
    }
    let value = patched_bytes.escape_ascii().to_string();
    let detail = format!("strict decoding error: {}", errs.join(", "));
    Err(Error::Invalid {
        message: format!(" \"\" is invalid: patch: Invalid value: \"{value}\": {detail}"),
        details: json!({"causes": [{"reason": "FieldValueInvalid", "message": format!("Invalid value: \"{value}\": {detail}"), "field": "patch"}]}),
    })
}

/// A request's `metadata.managedFields` must be the list (or null): the
/// store keeps its own as JSON text, which a request must not pass for it.
/// Refused as the API server's decoder refuses a string there.
fn managed_fields_listed(info: &ResourceInfo, obj: &Value) -> HResult<()> {
    match obj.at("/metadata/managedFields") {
        None | Some(Value::Null | Value::Array(_)) => Ok(()),
        Some(other) => {
            let ty = match other {
                Value::String(_) => "string",
                Value::Bool(_) => "bool",
                Value::Number(_) => "number",
                _ => "object",
            };
            Err(Error::BadRequest(format!(
                "{kind} in version \"{v}\" cannot be handled as a {kind}: json: cannot unmarshal {ty} into Go struct field ObjectMeta.metadata.managedFields of type []v1.ManagedFieldsEntry",
                kind = info.kind,
                v = info.version
            )))
        }
    }
}

/// [`managed_fields_listed`] for what a patch sets (apply patches are
/// refused by the store when they set managedFields at all).
fn patched_managed_fields_listed(info: &ResourceInfo, pt: PatchType, body: &[u8]) -> HResult<()> {
    if !body.windows(13).any(|w| w == b"managedFields") {
        return Ok(());
    }
    let Ok(patch) = serde_json::from_slice::<Value>(body) else {
        // The store answers a malformed patch.
        return Ok(());
    };
    match pt {
        PatchType::Merge | PatchType::Strategic => managed_fields_listed(info, &patch),
        PatchType::Json => {
            for op in patch.as_array().into_iter().flatten() {
                let sets = matches!(op.get("op").and_then(Value::as_str), Some("add" | "replace"));
                if sets && op.get("path").and_then(Value::as_str) == Some("/metadata/managedFields") {
                    let value = op.get("value").cloned().unwrap_or(Value::Null);
                    managed_fields_listed(info, &json!({"metadata": {"managedFields": value}}))?;
                }
            }
            Ok(())
        }
        PatchType::Apply => Ok(()),
    }
}

/// Drop a strategic merge patch's `$`-directives (`$patch`,
/// `$setElementOrder/...`, `$retainKeys`, ...) before a plain merge.
fn strip_directives(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.starts_with('$'));
            m.values_mut().for_each(strip_directives);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_directives),
        _ => {}
    }
}

/// Add one `Warning: 299 - "..."` header per strict-decoding finding.
fn with_warnings(mut r: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let text = format!("299 - \"{}\"", w.replace('\\', "\\\\").replace('"', "\\\""));
        if let Ok(v) = HeaderValue::from_str(&text) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
    r
}
