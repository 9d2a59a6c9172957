//! Events expire, as kube-apiserver's `--event-ttl` makes them (one hour
//! by default): each write of an Event gives it a new lease of the TTL
//! (upstream attaches an etcd lease on every write), and an Event not
//! written for that long is deleted, so its watchers see it go.

use std::time::{Duration, Instant};

use super::obj::Obj;
use super::{DeleteOpts, Error, Inner, Key, Store};

/// The store key of an object.
pub(super) fn key_of(o: &Obj) -> Key {
    (o.namespace().to_string(), o.name().to_string())
}

impl Inner {
    /// An Event was written (or deleted).
    pub(super) fn written_event(&mut self, key: Key, deleted: bool) {
        if deleted {
            self.event_writes.remove(&key);
        } else {
            self.event_writes.insert(key, Instant::now());
        }
    }
}

impl Store {
    /// Delete the Events not written for `ttl`; the number deleted. An
    /// Event with no recorded write (read back from a data directory) is
    /// taken as written now.
    pub fn expire_events(&self, ttl: Duration) -> usize {
        let r = self.registry.storage(crate::resources::EVENTS);
        let now = Instant::now();
        let expired: Vec<Key> = {
            let mut inner = self.lock();
            let Inner { kinds, event_writes, .. } = &mut *inner;
            let Some(ks) = kinds.get(r) else { return 0 };
            ks.objects
                .keys()
                .filter(|k| now.duration_since(*event_writes.entry((*k).clone()).or_insert(now)) >= ttl)
                .cloned()
                .collect()
        };
        let mut n = 0;
        for (ns, name) in expired {
            match self.delete(r, &ns, &name, &DeleteOpts::default()) {
                Ok(_) => n += 1,
                Err(Error::NotFound { .. }) => {}
                Err(e) => tracing::warn!(namespace = %ns, name = %name, error = %e, "expiring an event failed"),
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources as res;
    use crate::store::StoreConfig;
    use serde_json::json;

    #[test]
    fn events_not_written_for_the_ttl_are_deleted() {
        let store = Store::new(StoreConfig::default());
        store.create(res::NAMESPACES, "", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})).unwrap_or_else(|e| panic!("{e}"));
        let ev = |name: &str| json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": name}, "eventTime": "2026-01-01T00:00:00.000000Z", "reason": "R", "action": "A", "reportingController": "c", "reportingInstance": "i", "type": "Normal"});
        store.create(res::EVENTS_V1, "default", ev("old")).unwrap_or_else(|e| panic!("{e}"));
        std::thread::sleep(Duration::from_millis(300));
        store.create(res::EVENTS_V1, "default", ev("new")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(store.expire_events(Duration::from_millis(200)), 1);
        let r = store.registry().storage(res::EVENTS);
        assert!(store.get(r, "default", "old").is_err());
        assert!(store.get(r, "default", "new").is_ok());
    }
}
