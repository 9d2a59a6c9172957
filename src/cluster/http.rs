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
use super::resources::{self as res, RESOURCES, ResId};
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

fn obj_response(code: StatusCode, o: &Obj) -> Response {
    json_response(code, o.bytes.clone())
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
    match dispatch(&st, &parts.method, &path, &query, &parts.headers, bytes).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

fn parse_query(q: &str) -> HResult<HashMap<String, String>> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(q).map_err(|e| Error::BadRequest(format!("invalid query: {e}")))?;
    Ok(pairs.into_iter().collect())
}

fn truthy(v: Option<&String>) -> bool {
    matches!(v.map(String::as_str), Some("true") | Some("1") | Some("True"))
}

/// The resolved target of a resource request.
enum Target {
    Collection { r: ResId, ns: Option<String> },
    Item { r: ResId, ns: String, name: String, sub: Option<String> },
}

fn resolve(group: &str, version: &str, segs: &[&str]) -> Option<Target> {
    let find = |p: &str| res::lookup(group, version, p);
    match segs {
        [p] => find(p).map(|r| Target::Collection { r, ns: None }),
        ["namespaces", ns, p] if find(p).is_some_and(|r| RESOURCES[r].namespaced) => {
            find(p).map(|r| Target::Collection { r, ns: Some((*ns).to_string()) })
        }
        ["namespaces", ns, p, name] => find(p)
            .filter(|r| RESOURCES[*r].namespaced)
            .map(|r| Target::Item { r, ns: (*ns).to_string(), name: (*name).to_string(), sub: None }),
        ["namespaces", ns, p, name, sub] => find(p)
            .filter(|r| RESOURCES[*r].namespaced)
            .map(|r| Target::Item { r, ns: (*ns).to_string(), name: (*name).to_string(), sub: Some((*sub).to_string()) }),
        [p, name] => find(p)
            .filter(|r| !RESOURCES[*r].namespaced)
            .map(|r| Target::Item { r, ns: String::new(), name: (*name).to_string(), sub: None }),
        [p, name, sub] => find(p)
            .filter(|r| !RESOURCES[*r].namespaced)
            .map(|r| Target::Item { r, ns: String::new(), name: (*name).to_string(), sub: Some((*sub).to_string()) }),
        _ => None,
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
        ["apis"] => get_only(ok_json(&api_group_list())),
        ["api", "v1"] => get_only(ok_json(&resource_list("", "v1"))),
        ["apis", g] => match api_group(g) {
            Some(v) => get_only(ok_json(&v)),
            None => Err(Error::NotFound),
        },
        ["apis", g, v] => {
            if RESOURCES.iter().any(|r| r.group == *g && r.version == *v) {
                get_only(ok_json(&resource_list(g, v)))
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
                ("authentication.k8s.io", "tokenreviews") => st.auth.token_review(&req),
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

fn groups() -> Vec<&'static str> {
    let mut gs: Vec<&str> = Vec::new();
    for r in RESOURCES {
        if !r.group.is_empty() && !gs.contains(&r.group) {
            gs.push(r.group);
        }
    }
    gs
}

fn api_group(g: &str) -> Option<Value> {
    let r = RESOURCES.iter().find(|r| r.group == g && !g.is_empty())?;
    let gv = json!({"groupVersion": format!("{}/{}", r.group, r.version), "version": r.version});
    Some(json!({"kind": "APIGroup", "apiVersion": "v1", "name": g, "versions": [gv.clone()], "preferredVersion": gv}))
}

fn api_group_list() -> Value {
    let gs: Vec<Value> = groups()
        .into_iter()
        .filter_map(|g| {
            let mut v = api_group(g)?;
            if let Some(m) = v.as_object_mut() {
                m.remove("kind");
                m.remove("apiVersion");
            }
            Some(v)
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": gs})
}

fn resource_list(g: &str, v: &str) -> Value {
    let mut out = Vec::new();
    for r in RESOURCES.iter().filter(|r| r.group == g && r.version == v) {
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
        if matches!(r.plural, "pods" | "services" | "replicationcontrollers" | "replicasets" | "statefulsets" | "deployments" | "daemonsets") {
            e["categories"] = json!(["all"]);
        }
        out.push(e);
        for (sub, kind, verbs) in r.subresources {
            let mut s = json!({"name": format!("{}/{}", r.plural, sub), "singularName": "", "namespaced": r.namespaced, "kind": kind, "verbs": verbs});
            if *sub == "eviction" {
                s["group"] = json!("policy");
                s["version"] = json!("v1");
            }
            out.push(s);
        }
    }
    let gv = if g.is_empty() { v.to_string() } else { format!("{g}/{v}") };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out})
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

fn build_filter(r: ResId, ns: Option<String>, q: &HashMap<String, String>) -> HResult<Filter> {
    let labels = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| Error::BadRequest(e.to_string()))?;
    let fields = FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""), RESOURCES[r].fields)
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
    let target = resolve(group, version, segs).ok_or(Error::NotFound)?;
    let q = parse_query(query)?;
    let store = &st.store;
    match target {
        Target::Collection { r, ns } => {
            let info = &RESOURCES[r];
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
                    let filter = build_filter(r, ns, &q)?;
                    Ok(watch_response(st, r, filter, &q, wants_table(headers)))
                }
                "list" => {
                    let filter = build_filter(r, ns, &q)?;
                    let limit = match q.get("limit") {
                        Some(l) => Some(l.parse::<usize>().map_err(|_| Error::BadRequest(format!("invalid limit {l:?}")))?),
                        None => None,
                    };
                    let lr = store.list(r, &filter, limit, q.get("continue").map(String::as_str))?;
                    if wants_table(headers) {
                        return Ok(ok_json(&super::table::table(r, &lr)));
                    }
                    Ok(list_response(r, &lr))
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
                    let o = if yaml || body.is_empty() {
                        let v = parse_json(&body, headers)?;
                        store.create(r, &ns, v)?
                    } else {
                        store.create_from_slice(r, &ns, &body)?
                    };
                    Ok(obj_response(StatusCode::CREATED, &o))
                }
                _ => {
                    let filter = build_filter(r, ns, &q)?;
                    let opts = delete_opts(&q, &body)?;
                    let lr = store.list(r, &filter, None, None)?;
                    for o in &lr.items {
                        match store.delete(r, o.namespace(), o.name(), &opts) {
                            Ok(_) | Err(store::Error::NotFound { .. }) => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                    Ok(list_response(r, &lr))
                }
            }
        }
        Target::Item { r, ns, name, sub } => {
            let info = &RESOURCES[r];
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
                (Method::POST, Some("binding" | "eviction")) => "create",
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
                    let mut filter = build_filter(r, info.namespaced.then(|| ns.clone()), &q)?;
                    filter.fields.reqs.push(super::selector::FieldReq { pointer: "/metadata/name".into(), value: name.clone(), eq: true });
                    Ok(watch_response(st, r, filter, &q, wants_table(headers)))
                }
                "get" => {
                    let o = store.get(r, &ns, &name)?;
                    if wants_table(headers) {
                        let lr = store::ListResult { items: vec![o], rv: store.current_rv(), cont: None };
                        return Ok(ok_json(&super::table::table(r, &lr)));
                    }
                    Ok(obj_response(StatusCode::OK, &o))
                }
                "update" => {
                    let v = parse_json(&body, headers)?;
                    let o = store.update(r, &ns, &name, v, status_only)?;
                    Ok(obj_response(StatusCode::OK, &o))
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
                    let o = store.patch(r, &ns, &name, pt, &body, status_only)?;
                    Ok(obj_response(StatusCode::OK, &o))
                }
                "delete" => {
                    let opts = delete_opts(&q, &body)?;
                    let o = store.delete(r, &ns, &name, &opts)?;
                    Ok(obj_response(StatusCode::OK, &o))
                }
                _ => {
                    let v = parse_json(&body, headers)?;
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

fn list_response(r: ResId, lr: &store::ListResult) -> Response {
    let info = &RESOURCES[r];
    let mut meta = json!({"resourceVersion": lr.rv.to_string()});
    if let Some(c) = &lr.cont {
        meta["continue"] = json!(c);
    }
    let head = format!("{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[", info.kind, info.api_version(), meta);
    let total: usize = lr.items.iter().map(|o| o.bytes.len() + 1).sum::<usize>() + head.len() + 2;
    let mut buf = Vec::with_capacity(total);
    buf.extend_from_slice(head.as_bytes());
    for (i, o) in lr.items.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        buf.extend_from_slice(&o.bytes);
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
    table: Option<ResId>,
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
        match self.table {
            Some(r) => {
                let lr = store::ListResult { items: vec![obj.clone()], rv: obj.rv, cont: None };
                push_event(buf, ty, super::table::table(r, &lr).to_string().as_bytes());
            }
            None => push_event(buf, ty, &obj.bytes),
        }
    }
}

const CHUNK: usize = 256 * 1024;

fn watch_response(st: &AppState, r: ResId, filter: Filter, q: &HashMap<String, String>, table: bool) -> Response {
    let info = &RESOURCES[r];
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
        table: table.then_some(r),
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
