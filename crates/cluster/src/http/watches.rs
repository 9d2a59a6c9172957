//! Watches: the snapshot or backlog, then the live events, written as the
//! client reads (a bounded buffer per watcher), with bookmarks, Tables for
//! kubectl, and upstream's answers for an expired or future
//! resourceVersion.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::sync::{broadcast, watch};

use super::{show_obj, table_of, truthy, Alias, AppState, Error, HResult};
use crate::resources::{ResId, ResourceInfo};
use crate::selector::Filter;
use crate::store::{self, EventType, Obj, Store, WatchEvent, WatchStart};

fn push_event(buf: &mut Vec<u8>, ty: &str, obj: &[u8]) {
    buf.extend_from_slice(b"{\"type\":\"");
    buf.extend_from_slice(ty.as_bytes());
    buf.extend_from_slice(b"\",\"object\":");
    buf.extend_from_slice(obj);
    buf.extend_from_slice(b"}\n");
}

/// `{"type":"<ty>","object":`, the head of a watch event (see
/// [`push_event`]), static for the event types.
fn event_head(ty: &str) -> Bytes {
    match ty {
        "ADDED" => Bytes::from_static(b"{\"type\":\"ADDED\",\"object\":"),
        "MODIFIED" => Bytes::from_static(b"{\"type\":\"MODIFIED\",\"object\":"),
        "DELETED" => Bytes::from_static(b"{\"type\":\"DELETED\",\"object\":"),
        "BOOKMARK" => Bytes::from_static(b"{\"type\":\"BOOKMARK\",\"object\":"),
        other => Bytes::from(format!("{{\"type\":\"{other}\",\"object\":")),
    }
}

struct WatchState {
    /// kubectl asked for Tables: send each object as a one-row Table (of
    /// this store and resource).
    table: Option<(Arc<ResourceInfo>, crate::table::Include)>,
    /// Objects shown through another version.
    alias: Option<Alias>,
    /// What is ready to write. Hyper asks for more only while its own
    /// queue has room (16 pieces), so a client that reads slowly holds
    /// at most that much here and there: the watcher's buffer is bounded.
    pending: VecDeque<Bytes>,
    /// The snapshot a watch from "now" starts with, sent a few objects at
    /// a time as the client reads (never encoded all at once).
    initial: Vec<Arc<Obj>>,
    next_initial: usize,
    /// Retained events after the requested resourceVersion, the same way.
    backlog: Vec<Arc<WatchEvent>>,
    next_backlog: usize,
    /// The initial-events-end bookmark (`sendInitialEvents`), after the snapshot.
    initial_end: Option<Bytes>,
    rx: broadcast::Receiver<Arc<WatchEvent>>,
    filter: Filter,
    bookmarks: bool,
    deadline: tokio::time::Instant,
    stop: watch::Receiver<u64>,
    done: bool,
}

/// Events of the snapshot or backlog encoded per poll of the stream.
const BATCH: usize = 16;

impl WatchState {
    /// Objects served as stored, in their own version: each event's
    /// encoding is then shared by every such watcher ([`WatchEvent::frame`]).
    fn plain(&self) -> bool {
        self.table.is_none() && self.alias.is_none()
    }

    /// One live or retained event, after selector transitions, into `out`.
    fn encode(&self, ev: &WatchEvent, out: &mut VecDeque<Bytes>) {
        let ty = match ev.ty {
            EventType::Bookmark => {
                if self.bookmarks {
                    // In the watched resource's apiVersion, as an API
                    // server sends it (clients decode it as that kind).
                    if self.alias.is_none() {
                        out.push_back(ev.frame());
                    } else {
                        let mut buf = Vec::new();
                        push_event(&mut buf, "BOOKMARK", &show_obj(self.alias.as_ref(), &ev.obj));
                        out.push_back(buf.into());
                    }
                }
                return;
            }
            EventType::Added | EventType::Deleted => {
                if !ev.obj.matches(&self.filter) {
                    return;
                }
                ev.ty.as_str()
            }
            EventType::Modified => {
                let n = ev.obj.matches(&self.filter);
                let o = ev.old.as_ref().map(|o| o.matches(&self.filter)).unwrap_or(n);
                match (o, n) {
                    (true, true) => "MODIFIED",
                    (false, true) => "ADDED",
                    (true, false) => "DELETED",
                    (false, false) => return,
                }
            }
        };
        if self.plain() && ty == ev.ty.as_str() {
            out.push_back(ev.frame());
        } else {
            self.push_obj(out, ty, &ev.obj);
        }
    }

    fn push_obj(&self, out: &mut VecDeque<Bytes>, ty: &str, obj: &Arc<Obj>) {
        if self.table.is_none() && (self.alias.is_none() || ty == "BOOKMARK") {
            // The object as stored, between a static head and tail: three
            // pieces, none copied. (A slow watcher's snapshot held a copy
            // of each object it had not sent yet; those copies, freed when
            // it closed, left the store's objects allocated meanwhile
            // scattered over half-empty pages.)
            out.push_back(event_head(ty));
            out.push_back(obj.bytes.clone());
            out.push_back(Bytes::from_static(b"}\n"));
            return;
        }
        let mut buf = Vec::with_capacity(obj.bytes.len() + 32);
        match (&self.table, &self.alias) {
            (Some((info, include)), alias) => {
                let lr = store::ListResult { items: vec![obj.full()], rv: obj.rv, cont: None };
                push_event(&mut buf, ty, table_of(info, alias.as_ref(), &lr, *include).to_string().as_bytes());
            }
            // (Without an alias, and for bookmarks, the object went out above.)
            (None, alias) => push_event(&mut buf, ty, &alias.as_ref().map_or_else(|| obj.bytes.clone(), |a| a.outgoing(&obj.bytes))),
        }
        out.push_back(buf.into());
    }

    /// The next few events of the snapshot, then of the backlog, into
    /// `pending`; false once both are sent.
    fn fill_start(&mut self) -> bool {
        let mut out = std::mem::take(&mut self.pending);
        let more = if self.next_initial < self.initial.len() {
            let end = (self.next_initial + BATCH).min(self.initial.len());
            for o in &self.initial[self.next_initial..end] {
                if o.matches(&self.filter) {
                    self.push_obj(&mut out, "ADDED", o);
                }
            }
            self.next_initial = end;
            if end == self.initial.len() {
                // The snapshot is no longer needed: free it now.
                self.initial = Vec::new();
                self.next_initial = 0;
                out.extend(self.initial_end.take());
            }
            true
        } else if self.next_backlog < self.backlog.len() {
            let end = (self.next_backlog + BATCH).min(self.backlog.len());
            for ev in &self.backlog[self.next_backlog..end] {
                self.encode(ev, &mut out);
            }
            self.next_backlog = end;
            true
        } else {
            out.extend(self.initial_end.take());
            false
        };
        self.pending = out;
        more
    }
}


/// A watch that fails once started: one ERROR event with the Status (as
/// upstream, whose watch errors after the resourceVersion is parsed are
/// events of a 200 stream), then the end.
pub(super) fn watch_error(e: store::Error) -> Response {
    let mut buf = Vec::new();
    push_event(&mut buf, "ERROR", Error::Store(e).status().to_string().as_bytes());
    let mut resp = Response::new(Body::from(buf));
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// A get, list or watch from a resourceVersion ahead of the store's
/// waits for the store to reach it (see [`Store::reached`]), else is
/// refused "Too large resource version" (504; a watch's ERROR event):
/// the server's state went backwards (a new cluster on the same address,
/// a restored backup), so the client must relist. resourceVersion "0" or
/// none asks for no particular version; a watch's must parse (400), a
/// read's is not checked further. Upstream's watch cache waits the same
/// way for a list or get with a resourceVersion and for a watch with
/// `sendInitialEvents`, but lets a plain watch from a later version wait
/// for events silently (its cache may lag etcd); here no cache lags the
/// store, so a later version can only come from another incarnation of
/// the server, and every watch is refused too.
pub(super) async fn reached(store: &Store, q: &HashMap<String, String>, watch: bool) -> HResult<Result<(), store::Error>> {
    let rv = q.get("resourceVersion").map(String::as_str).unwrap_or("");
    if rv.is_empty() || rv == "0" {
        return Ok(Ok(()));
    }
    match rv.parse::<u64>() {
        Ok(n) => Ok(store.reached(n).await),
        Err(_) if watch => Err(Error::BadRequest(format!("invalid resourceVersion {rv:?}"))),
        Err(_) => Ok(Ok(())),
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn watch_response(st: &AppState, r: ResId, info: &Arc<ResourceInfo>, alias: Option<Alias>, filter: Filter, q: &HashMap<String, String>, table: Option<crate::table::Include>) -> Response {
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
    let sub = match st.store.watch(r, start) {
        Ok(s) => s,
        Err(e) => return watch_error(e),
    };
    let initial_end = send_initial.then(|| {
        let bm = json!({"kind": info.kind, "apiVersion": info.api_version(),
            "metadata": {"resourceVersion": sub.rv.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}});
        let mut buf = Vec::new();
        push_event(&mut buf, "BOOKMARK", bm.to_string().as_bytes());
        Bytes::from(buf)
    });
    let state = WatchState {
        pending: VecDeque::new(),
        initial: sub.initial,
        next_initial: 0,
        backlog: sub.backlog,
        next_backlog: 0,
        initial_end,
        rx: sub.rx,
        filter,
        bookmarks: truthy(q.get("allowWatchBookmarks")),
        table: table.map(|include| (info.clone(), include)),
        alias,
        deadline: tokio::time::Instant::now() + timeout,
        stop,
        done: false,
    };
    let stream = futures::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(chunk) = s.pending.pop_front() {
                return Some((Ok::<Bytes, std::convert::Infallible>(chunk), s));
            }
            if s.done {
                return None;
            }
            if s.fill_start() {
                continue;
            }
            tokio::select! {
                biased;
                _ = s.stop.changed() => return None,
                _ = tokio::time::sleep_until(s.deadline) => return None,
                r = s.rx.recv() => match r {
                    Ok(ev) => {
                        let mut out = std::mem::take(&mut s.pending);
                        s.encode(&ev, &mut out);
                        // Take what else is ready (up to a batch); once
                        // nothing is, let the other tasks run once (writers
                        // in flight commit more) before writing.
                        // Counted in events: an event may be several chunks (see `push_obj`).
                        let mut yielded = false;
                        let mut events = 1;
                        while events < BATCH {
                            match s.rx.try_recv() {
                                Ok(ev) => {
                                    s.encode(&ev, &mut out);
                                    events += 1;
                                }
                                Err(broadcast::error::TryRecvError::Empty) if !yielded => {
                                    yielded = true;
                                    tokio::task::yield_now().await;
                                }
                                Err(broadcast::error::TryRecvError::Empty) => break,
                                // Too far behind (or closed): end after what is ready.
                                Err(_) => { s.done = true; break; }
                            }
                        }
                        s.pending = out;
                    }
                    // Too far behind the store (more than the channel holds:
                    // the watcher's bound) or closed: end the watch so the
                    // client relists, as upstream's cacher ends a watcher
                    // that does not keep up.
                    Err(_) => return None,
                }
            }
        }
    });
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

// ---------------------------------------------------------------------
// OpenAPI documents and strict field validation (see `openapi`).
