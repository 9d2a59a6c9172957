//! Committing a change: the global resourceVersion, the bounded history
//! per resource for watch resumes, and the fan-out to live watchers
//! (broadcast channels); watch starts, compaction and bookmarks.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, OnceLock};

use axum::body::Bytes;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::resources::ResId;

use super::obj::{Obj, kept_lean, lean_fields};
use super::{Error, Inner, Key, KindStore, Result, Store, StoreConfig, meta_mut};

/// Watch event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// ADDED.
    Added,
    /// MODIFIED.
    Modified,
    /// DELETED.
    Deleted,
    /// BOOKMARK.
    Bookmark,
}

impl EventType {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
            EventType::Bookmark => "BOOKMARK",
        }
    }
}

/// One change, as kept in history and broadcast to watchers.
#[derive(Debug)]
pub struct WatchEvent {
    /// Type.
    pub ty: EventType,
    /// resourceVersion of the change.
    pub rv: u64,
    /// The object after the change (for DELETED: its last state).
    pub obj: Arc<Obj>,
    /// The object before the change (MODIFIED only), for selector transitions.
    pub old: Option<Arc<Obj>>,
    /// The event as a watch stream line, encoded once for all watchers
    /// (see [`WatchEvent::frame`]).
    frame: OnceLock<Bytes>,
}

impl WatchEvent {
    /// A new event.
    pub fn new(ty: EventType, rv: u64, obj: Arc<Obj>, old: Option<Arc<Obj>>) -> WatchEvent {
        WatchEvent { ty, rv, obj, old, frame: OnceLock::new() }
    }

    /// The event as a line of a watch stream (`{"type":...,"object":...}`
    /// and a newline), encoded on first use and then shared by every
    /// watcher that sends it as it is (each holds a reference, not a copy).
    pub fn frame(&self) -> Bytes {
        self.frame
            .get_or_init(|| {
                let ty = self.ty.as_str();
                let mut buf = Vec::with_capacity(self.obj.bytes.len() + ty.len() + 24);
                buf.extend_from_slice(b"{\"type\":\"");
                buf.extend_from_slice(ty.as_bytes());
                buf.extend_from_slice(b"\",\"object\":");
                buf.extend_from_slice(&self.obj.bytes);
                buf.extend_from_slice(b"}\n");
                Bytes::from(buf)
            })
            .clone()
    }
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy)]
pub enum WatchStart {
    /// Synthetic ADDED events for the current state, then changes.
    Now,
    /// Changes after this resourceVersion.
    After(u64),
}

/// A new watch subscription.
#[derive(Debug)]
pub struct WatchSub {
    /// Current objects (for [`WatchStart::Now`]).
    pub initial: Vec<Arc<Obj>>,
    /// resourceVersion of that snapshot.
    pub rv: u64,
    /// Retained events after the requested resourceVersion.
    pub backlog: Vec<Arc<WatchEvent>>,
    /// Live events.
    pub rx: broadcast::Receiver<Arc<WatchEvent>>,
}

impl KindStore {
    pub(super) fn new(cfg: &StoreConfig) -> Self {
        KindStore {
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            compacted_rv: 0,
            tx: None,
            capacity: cfg.channel_capacity.max(16),
        }
    }

    pub(super) fn subscribe(&mut self) -> broadcast::Receiver<Arc<WatchEvent>> {
        let capacity = self.capacity;
        self.tx.get_or_insert_with(|| broadcast::channel(capacity).0).subscribe()
    }

    pub(super) fn send(&self, ev: Arc<WatchEvent>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(ev);
        }
    }

    pub(super) fn range_ns<'a>(&'a self, ns: Option<&'a str>) -> Box<dyn Iterator<Item = (&'a Key, &'a Arc<Obj>)> + 'a> {
        match ns {
            None => Box::new(self.objects.iter()),
            Some(ns) => Box::new(
                self.objects
                    .range::<Key, _>((Bound::Included((ns.to_string(), String::new())), Bound::Unbounded))
                    .take_while(move |(k, _)| k.0 == ns),
            ),
        }
    }
}

impl Store {
    pub(super) fn commit(&self, inner: &mut Inner, r: ResId, ty: EventType, mut value: Value, old: Option<Arc<Obj>>) -> Result<Arc<Obj>> {
        let rv = inner.rv + 1;
        meta_mut(&mut value)?.insert("resourceVersion".into(), json!(rv.to_string()));
        let obj = Obj::new(value, rv)?;
        // Nothing is kept that could not be loaded back (or that etcd
        // would refuse); refused, the write takes no resourceVersion.
        if ty != EventType::Deleted {
            super::limits::storable(&self.info(r), obj.name(), &obj.bytes)?;
        }
        self.reserve_rv(inner, rv)?;
        inner.rv = rv;
        let key = (obj.namespace().to_string(), obj.name().to_string());
        let fields = lean_fields(r, &self.info(r));
        // What the store keeps (and sends to watchers): the object, or for
        // the kinds kept lean its lean copy (the caller gets the whole one).
        let stored = if kept_lean(r) { obj.lean(fields) } else { obj.clone() };
        let ks = &mut inner.kinds[r];
        let prev = if ty == EventType::Deleted { ks.objects.remove(&key) } else { ks.objects.insert(key, stored.clone()) };
        // The version this one replaces is no longer current: its history
        // entry becomes lean, and so does the event's old version (only
        // selectors read it).
        let prev = prev.map(|p| {
            let lean = p.lean(fields);
            if let Ok(i) = ks.history.binary_search_by_key(&p.rv, |e| e.rv)
                && ks.history[i].obj.rv == p.rv
                && !ks.history[i].obj.is_lean()
            {
                let e = &ks.history[i];
                ks.history[i] = Arc::new(WatchEvent::new(e.ty, e.rv, lean.clone(), e.old.clone()));
            }
            lean
        });
        let old = match (ty, old) {
            (EventType::Modified, Some(o)) => Some(match prev {
                Some(p) if p.rv == o.rv => p,
                _ => o.lean(fields),
            }),
            _ => None,
        };
        self.persist_change(r, ty == EventType::Deleted, &obj);
        let ev = Arc::new(WatchEvent::new(ty, rv, stored.clone(), old));
        // A deletion is final: history keeps it lean from the start. Other
        // events get their own entry, so that the frame encoded for the
        // live watchers is not kept for as long as the history keeps the
        // event (a resuming watcher encodes it again).
        let kept = if ty == EventType::Deleted {
            Arc::new(WatchEvent::new(ty, rv, stored.lean(fields), None))
        } else {
            Arc::new(WatchEvent::new(ty, rv, ev.obj.clone(), ev.old.clone()))
        };
        ks.history.push_back(kept);
        while ks.history.len() > self.cfg.history_limit {
            if let Some(e) = ks.history.pop_front() {
                ks.compacted_rv = e.rv;
            }
        }
        ks.send(ev);
        if let Some(observe) = self.observer.get() {
            observe(r, ty, &obj);
        }
        self.after_commit(inner, r, ty, &obj)?;
        Ok(obj)
    }

    /// Live events of one resource, from now on (for in-process controllers).
    pub fn subscribe(&self, r: ResId) -> broadcast::Receiver<Arc<WatchEvent>> {
        self.lock().kinds[r].subscribe()
    }

    /// Start a watch.
    pub fn watch(&self, r: ResId, start: WatchStart) -> Result<WatchSub> {
        let mut inner = self.lock();
        let rx = inner.kinds[r].subscribe();
        let ks = &inner.kinds[r];
        match start {
            WatchStart::Now => Ok(WatchSub { initial: ks.objects.values().cloned().collect(), rv: inner.rv, backlog: Vec::new(), rx }),
            WatchStart::After(n) => {
                if n < ks.compacted_rv {
                    return Err(Error::Gone(format!("too old resource version: {n} ({})", ks.compacted_rv)));
                }
                let from = ks.history.partition_point(|e| e.rv <= n);
                let backlog = ks.history.range(from..).cloned().collect();
                Ok(WatchSub { initial: Vec::new(), rv: inner.rv, backlog, rx })
            }
        }
    }

    /// Drop all retained history so that watch resumes from any older
    /// resourceVersion answer 410 Gone.
    pub fn compact(&self) {
        let mut inner = self.lock();
        let rv = inner.rv;
        for ks in &mut inner.kinds {
            ks.history.clear();
            ks.compacted_rv = rv;
        }
    }

    /// Send a BOOKMARK at the current resourceVersion to every watched resource.
    pub fn bookmark_tick(&self) {
        let inner = self.lock();
        let rv = inner.rv;
        for (r, ks) in inner.kinds.iter().enumerate() {
            if ks.tx.as_ref().is_none_or(|tx| tx.receiver_count() == 0) {
                continue;
            }
            let info = self.info(r);
            let v = json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": {"resourceVersion": rv.to_string()}});
            if let Ok(obj) = Obj::new(v, rv) {
                ks.send(Arc::new(WatchEvent::new(EventType::Bookmark, rv, obj, None)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources as res;
    use crate::selector::{Filter, LabelSelector};
    use crate::store::{DeleteOpts, PatchType, Store, StoreConfig};
    use serde_json::json;

    /// Replaced and deleted versions stay in the history lean: replayed as
    /// their exact bytes, and selectors (labels, fields, the old version of
    /// a MODIFIED) still see each version as it was.
    #[test]
    fn history_keeps_past_versions_lean() {
        let store = Store::new(StoreConfig::default());
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"pool": "a"}}});
        let v1 = store.create(res::NODES, "", node).unwrap_or_else(|e| panic!("{e}"));
        let from = v1.rv - 1;
        let patch = br#"{"metadata": {"labels": {"pool": "b"}}, "spec": {"unschedulable": true}}"#;
        let v2 = store.patch(res::NODES, "", "n1", PatchType::Merge, patch, false).unwrap_or_else(|e| panic!("{e}"));
        store.delete(res::NODES, "", "n1", &DeleteOpts::default()).unwrap_or_else(|e| panic!("{e}"));
        let sub = store.watch(res::NODES, WatchStart::After(from)).unwrap_or_else(|e| panic!("{e}"));
        let evs: Vec<_> = sub.backlog.iter().filter(|e| e.obj.name() == "n1").collect();
        assert_eq!(evs.iter().map(|e| e.ty).collect::<Vec<_>>(), [EventType::Added, EventType::Modified, EventType::Deleted]);
        assert!(evs.iter().all(|e| e.obj.is_lean() && e.obj.value.is_null()));
        assert_eq!(evs[0].obj.bytes, v1.bytes);
        assert_eq!(evs[1].obj.bytes, v2.bytes);
        assert_eq!(evs[1].obj.full().value["spec"]["unschedulable"], true);
        let filter = |labels: &str, fields: &str| Filter {
            namespace: None,
            labels: LabelSelector::parse(labels).unwrap_or_else(|e| panic!("{e}")),
            fields: crate::selector::FieldSelector::parse(fields, &["spec.unschedulable"]).unwrap_or_else(|e| panic!("{e}")),
        };
        let a = filter("pool=a", "");
        assert!(evs[0].obj.matches(&a) && !evs[1].obj.matches(&a));
        assert!(evs[1].old.as_ref().is_some_and(|o| o.is_lean() && o.matches(&a)));
        let cordoned = filter("pool in (b)", "spec.unschedulable=true,metadata.name=n1");
        assert!(!evs[0].obj.matches(&cordoned) && evs[1].obj.matches(&cordoned) && evs[2].obj.matches(&cordoned));
        assert_eq!((evs[2].obj.name(), evs[2].obj.uid()), ("n1", v1.uid()));
    }
}
