//! The Kubernetes-compatible HTTP API (axum): discovery, CRUD, list,
//! watch, subresources, Table output for kubectl, and fault injection.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use super::faults::{FaultKind, Faults};
use super::resources::{self as res, ResId, ResourceInfo};
use super::selector::{FieldSelector, Filter, LabelSelector};
use super::store::{self, DeleteOpts, EventType, Obj, PatchType, Store, WatchEvent, WatchStart};

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
    /// The body exceeds the size limit.
    #[error("the request body is too large")]
    TooLarge,
    /// An injected fault.
    #[error("injected fault: {0:?}")]
    Injected(FaultKind),
}

impl Error {
    fn parts(&self) -> (u16, &'static str, String, Option<Value>) {
        match self {
            Error::Store(e) => (e.code(), e.reason(), e.to_string(), e.details()),
            Error::NotFound => (404, "NotFound", self.to_string(), Some(json!({}))),
            Error::MethodNotAllowed => (405, "MethodNotAllowed", self.to_string(), None),
            Error::BadRequest(m) => (400, "BadRequest", m.clone(), None),
            Error::TooLarge => (413, "RequestEntityTooLarge", self.to_string(), None),
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

const BODY_LIMIT: usize = 3 * 1024 * 1024;

async fn handle(State(st): State<AppState>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, BODY_LIMIT).await {
        Ok(b) => b,
        Err(_) => return Error::TooLarge.into_response(),
    };
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or("").to_string();
    if let Some(refused) = unsupported_body(&parts.headers, &bytes) {
        return refused.into_response();
    }
    match dispatch(&st, &parts.method, &path, &query, &parts.headers, bytes).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// Request bodies are JSON or YAML (and the patch types): a protobuf or
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

/// How objects of a store are shown through another version of the same
/// custom resource: their `apiVersion` is rewritten (the `None`
/// conversion strategy), both ways.
#[derive(Clone)]
struct Alias {
    /// The stored apiVersion.
    stored: String,
    /// The requested one.
    shown: String,
}

impl Alias {
    fn new(store: &Store, r: ResId, view: &ResourceInfo) -> Option<Alias> {
        let stored = store.info(r).api_version();
        let shown = view.api_version();
        (stored != shown).then_some(Alias { stored, shown })
    }

    fn set(v: &mut Value, api_version: &str) {
        if let Some(m) = v.as_object_mut()
            && m.get("apiVersion").is_some_and(|a| a.is_string())
        {
            m.insert("apiVersion".into(), json!(api_version));
        }
    }

    /// A request body, into the stored version.
    fn incoming(&self, body: &Bytes) -> Bytes {
        match serde_json::from_slice::<Value>(body) {
            Ok(mut v) if v.get("apiVersion").and_then(Value::as_str) == Some(self.shown.as_str()) => {
                Self::set(&mut v, &self.stored);
                Bytes::from(v.to_string())
            }
            _ => body.clone(),
        }
    }

    /// A stored object, into the requested version.
    fn outgoing(&self, bytes: &[u8]) -> Bytes {
        match serde_json::from_slice::<Value>(bytes) {
            Ok(mut v) => {
                Self::set(&mut v, &self.shown);
                Bytes::from(v.to_string())
            }
            Err(_) => Bytes::copy_from_slice(bytes),
        }
    }
}

fn show_obj(alias: Option<&Alias>, o: &Obj) -> Bytes {
    match alias {
        Some(a) => a.outgoing(&o.bytes),
        None => o.bytes.clone(),
    }
}

async fn dispatch(st: &AppState, method: &Method, path: &str, query: &str, headers: &HeaderMap, body: Bytes) -> HResult<Response> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    let get_only = |r: Response| -> HResult<Response> { if method == Method::GET { Ok(r) } else { Err(Error::MethodNotAllowed) } };
    match segs.as_slice() {
        ["version"] => get_only(ok_json(&version_json())),
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
            if st.store.registry().served().iter().any(|(_, r)| r.group == *g && r.version == *v) {
                get_only(ok_json(&resource_list(&st.store, g, v)))
            } else {
                Err(Error::NotFound)
            }
        }
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

fn version_json() -> Value {
    json!({
        "major": "1",
        "minor": "37",
        "emulationMajor": "1",
        "emulationMinor": "37",
        "gitVersion": "v1.37.0-berth",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.25",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// The served groups (built-in order first) with their versions,
/// preferred first.
fn groups(store: &Store) -> Vec<(&'static str, Vec<&'static str>)> {
    let mut gs: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for (_, r) in store.registry().served() {
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
    for (_, r) in store.registry().served().into_iter().filter(|(_, r)| r.group == g && r.version == v) {
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
            out.push(s);
        }
    }
    let gv = if g.is_empty() { v.to_string() } else { format!("{g}/{v}") };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out})
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
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
        o.uid = v.pointer("/preconditions/uid").and_then(Value::as_str).map(str::to_string);
        o.rv = v.pointer("/preconditions/resourceVersion").and_then(Value::as_str).map(str::to_string);
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
            let body = match &alias {
                Some(a) if !body.is_empty() => a.incoming(&body),
                _ => body,
            };
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
                    let filter = build_filter(&info, ns, &q)?;
                    Ok(watch_response(st, r, &info, alias, filter, &q, wants_table(headers)))
                }
                "list" => {
                    let filter = build_filter(&info, ns, &q)?;
                    let limit = match q.get("limit") {
                        Some(l) => Some(l.parse::<usize>().map_err(|_| Error::BadRequest(format!("invalid limit {l:?}")))?),
                        None => None,
                    };
                    let lr = store.list(r, &filter, limit, q.get("continue").map(String::as_str))?;
                    if wants_table(headers) {
                        return Ok(ok_json(&super::table::table(r, &info, &lr)));
                    }
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
                    let yaml = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|ct| ct.contains("yaml"));
                    let ctx = write_ctx(&q, headers, &info, None)?;
                    let o = if yaml || body.is_empty() {
                        let v = parse_json(&body, headers)?;
                        store.create_with(r, &ns, v, &ctx)?
                    } else {
                        store.create_from_slice_with(r, &ns, &body, &ctx)?
                    };
                    Ok(obj_response(StatusCode::CREATED, alias.as_ref(), &o))
                }
                _ => {
                    let filter = build_filter(&info, ns, &q)?;
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
            let body = match &alias {
                Some(a) if !body.is_empty() => a.incoming(&body),
                _ => body,
            };
            let sub = sub.as_deref();
            if let Some(s) = sub
                && !info.subresources.iter().any(|(n, _, _)| *n == s) {
                    return Err(Error::NotFound);
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
                    let mut filter = build_filter(&info, info.namespaced.then(|| ns.clone()), &q)?;
                    filter.fields.reqs.push(super::selector::FieldReq { pointer: "/metadata/name".into(), value: name.clone(), eq: true });
                    Ok(watch_response(st, r, &info, alias, filter, &q, wants_table(headers)))
                }
                "get" => {
                    let o = store.get(r, &ns, &name)?;
                    if wants_table(headers) {
                        let lr = store::ListResult { items: vec![o], rv: store.current_rv(), cont: None };
                        return Ok(ok_json(&super::table::table(r, &info, &lr)));
                    }
                    Ok(obj_response(StatusCode::OK, alias.as_ref(), &o))
                }
                "update" => {
                    let v = parse_json(&body, headers)?;
                    let ctx = write_ctx(&q, headers, &info, None)?;
                    let o = store.update_with(r, &ns, &name, v, status_only, &ctx)?;
                    Ok(obj_response(StatusCode::OK, alias.as_ref(), &o))
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
                    let ctx = write_ctx(&q, headers, &info, Some(pt == PatchType::Apply))?;
                    let (o, created) = store.patch_with(r, &ns, &name, pt, &body, status_only, &ctx)?;
                    let code = if created { StatusCode::CREATED } else { StatusCode::OK };
                    Ok(obj_response(code, alias.as_ref(), &o))
                }
                "delete" => {
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

fn push_event(buf: &mut Vec<u8>, ty: &str, obj: &[u8]) {
    buf.extend_from_slice(b"{\"type\":\"");
    buf.extend_from_slice(ty.as_bytes());
    buf.extend_from_slice(b"\",\"object\":");
    buf.extend_from_slice(obj);
    buf.extend_from_slice(b"}\n");
}

struct WatchState {
    /// kubectl asked for Tables: send each object as a one-row Table.
    table: Option<(ResId, Arc<ResourceInfo>)>,
    /// Objects shown through another version.
    alias: Option<Alias>,
    pending: VecDeque<Bytes>,
    rx: broadcast::Receiver<Arc<WatchEvent>>,
    filter: Filter,
    bookmarks: bool,
    deadline: tokio::time::Instant,
    stop: watch::Receiver<u64>,
    done: bool,
}

impl WatchState {
    /// Encode one live event into `buf` after selector transitions.
    fn encode(&self, ev: &WatchEvent, buf: &mut Vec<u8>) {
        let ty = match ev.ty {
            EventType::Bookmark => {
                if self.bookmarks {
                    push_event(buf, "BOOKMARK", &ev.obj.bytes);
                }
                return;
            }
            EventType::Added | EventType::Deleted => {
                if !self.filter.matches(&ev.obj.value) {
                    return;
                }
                ev.ty.as_str()
            }
            EventType::Modified => {
                let n = self.filter.matches(&ev.obj.value);
                let o = ev.old.as_ref().map(|o| self.filter.matches(&o.value)).unwrap_or(n);
                match (o, n) {
                    (true, true) => "MODIFIED",
                    (false, true) => "ADDED",
                    (true, false) => "DELETED",
                    (false, false) => return,
                }
            }
        };
        self.push_obj(buf, ty, &ev.obj);
    }

    fn push_obj(&self, buf: &mut Vec<u8>, ty: &str, obj: &Arc<Obj>) {
        match (&self.table, &self.alias) {
            (Some((r, info)), _) => {
                let lr = store::ListResult { items: vec![obj.clone()], rv: obj.rv, cont: None };
                push_event(buf, ty, super::table::table(*r, info, &lr).to_string().as_bytes());
            }
            (None, Some(a)) if ty != "BOOKMARK" => push_event(buf, ty, &a.outgoing(&obj.bytes)),
            (None, _) => push_event(buf, ty, &obj.bytes),
        }
    }
}

const CHUNK: usize = 256 * 1024;

#[allow(clippy::too_many_arguments)]
fn watch_response(st: &AppState, r: ResId, info: &Arc<ResourceInfo>, alias: Option<Alias>, filter: Filter, q: &HashMap<String, String>, table: bool) -> Response {
    let send_initial = truthy(q.get("sendInitialEvents"));
    let rv_param = q.get("resourceVersion").map(String::as_str).unwrap_or("");
    let start = if send_initial || rv_param.is_empty() || rv_param == "0" {
        WatchStart::Now
    } else {
        match rv_param.parse::<u64>() {
            Ok(n) => WatchStart::After(n),
            Err(_) => return Error::BadRequest(format!("invalid resourceVersion {rv_param:?}")).into_response(),
        }
    };
    let mut timeout = q.get("timeoutSeconds").and_then(|t| t.parse::<u64>().ok()).filter(|t| *t > 0).map(Duration::from_secs).unwrap_or(Duration::from_secs(1800));
    if let Some(cut) = st.faults.watch_cut_interval() {
        timeout = timeout.min(cut);
    }
    let stop = st.watch_gen.subscribe();
    let mut pending = VecDeque::new();
    let sub = match st.store.watch(r, start) {
        Ok(s) => s,
        Err(e) => {
            let mut buf = Vec::new();
            let status = Error::Store(e).status();
            push_event(&mut buf, "ERROR", status.to_string().as_bytes());
            let mut resp = Response::new(Body::from(buf));
            resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            return resp;
        }
    };
    let mut state = WatchState {
        pending: VecDeque::new(),
        rx: sub.rx,
        filter,
        bookmarks: truthy(q.get("allowWatchBookmarks")),
        table: table.then(|| (r, info.clone())),
        alias,
        deadline: tokio::time::Instant::now() + timeout,
        stop,
        done: false,
    };
    let mut buf = Vec::new();
    for o in &sub.initial {
        if state.filter.matches(&o.value) {
            state.push_obj(&mut buf, "ADDED", o);
            if buf.len() >= CHUNK {
                pending.push_back(Bytes::from(std::mem::take(&mut buf)));
            }
        }
    }
    if send_initial {
        let bm = json!({"kind": info.kind, "apiVersion": info.api_version(),
            "metadata": {"resourceVersion": sub.rv.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}});
        push_event(&mut buf, "BOOKMARK", bm.to_string().as_bytes());
    }
    for ev in &sub.backlog {
        state.encode(ev, &mut buf);
        if buf.len() >= CHUNK {
            pending.push_back(Bytes::from(std::mem::take(&mut buf)));
        }
    }
    if !buf.is_empty() {
        pending.push_back(Bytes::from(buf));
    }
    state.pending = pending;
    let stream = futures::stream::unfold(state, |mut s| async move {
        if let Some(chunk) = s.pending.pop_front() {
            return Some((Ok::<Bytes, std::convert::Infallible>(chunk), s));
        }
        if s.done {
            return None;
        }
        loop {
            tokio::select! {
                biased;
                _ = s.stop.changed() => return None,
                _ = tokio::time::sleep_until(s.deadline) => return None,
                r = s.rx.recv() => match r {
                    Ok(ev) => {
                        let mut buf = Vec::new();
                        s.encode(&ev, &mut buf);
                        while buf.len() < CHUNK {
                            match s.rx.try_recv() {
                                Ok(ev) => s.encode(&ev, &mut buf),
                                Err(broadcast::error::TryRecvError::Empty) => break,
                                Err(_) => { s.done = true; break; }
                            }
                        }
                        if !buf.is_empty() {
                            return Some((Ok(Bytes::from(buf)), s));
                        }
                        if s.done {
                            return None;
                        }
                    }
                    // Too far behind (or closed): end the watch so the client relists.
                    Err(_) => return None,
                }
            }
        }
    });
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}
