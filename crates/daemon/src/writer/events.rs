//! Events (events.k8s.io/v1): a bounded queue drained by one task with its
//! own rate limiter; isomorphic events folded into series as upstream's
//! recorder does; failed writes retried with backoff.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::events::v1 as events;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;
use tokio::sync::{mpsc, Semaphore};

use berth_model::PodInfo;

use super::{api_code, namespaced_path, RateLimiter, Writer};


/// An event to record.
#[derive(Debug)]
pub(super) struct EventItem {
    pub(super) pod: Arc<PodInfo>,
    pub(super) kind: &'static str,
    pub(super) reason: &'static str,
    pub(super) action: &'static str,
    pub(super) note: String,
}

/// Events waiting to be written; a full queue drops (and counts) the newest.
pub(super) const EVENT_QUEUE: usize = 8192;
/// Upstream's `maxTriesPerEvent`.
const EVENT_TRIES: u32 = 12;
/// How long an isomorphic event keeps its series (upstream finishes a series after six minutes).
pub(super) const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);
/// At most this many event series are remembered (upstream's
/// `maxLruCacheEntries`).
pub(super) const SERIES_CAP: usize = 4096;
/// Bounds the event series: at [`SERIES_CAP`], the series past their window
/// go, and if half the cap is still left the older half goes too (upstream's
/// correlator keeps its series in an LRU cache of 4,096). The pass then runs
/// once per thousands of new series rather than on every event.
pub(super) fn trim_series<K: Eq + std::hash::Hash, V>(series: &mut HashMap<K, V>, at: impl Fn(&V) -> Instant, now: Instant) {
    if series.len() < SERIES_CAP {
        return;
    }
    series.retain(|_, v| now.duration_since(at(v)) < SERIES_WINDOW);
    if series.len() >= SERIES_CAP / 2 {
        let mut seen: Vec<Instant> = series.values().map(&at).collect();
        let mid = seen.len() / 2;
        let cut = *seen.select_nth_unstable(mid).1;
        series.retain(|_, v| at(v) > cut);
    }
}

/// Concurrent event writes.
const EVENT_CONCURRENCY: usize = 8;

impl Writer {
    /// Drains the event queue: aggregates isomorphic events into series and
    /// writes the rest, each with retries, at most `EVENT_CONCURRENCY` at once.
    pub(super) async fn event_loop(self, mut rx: mpsc::Receiver<EventItem>, limiter: Arc<RateLimiter>) {
        // Isomorphic key → (created event's name once known, series count, last seen).
        type Series = HashMap<(String, &'static str, &'static str, &'static str, String), (Arc<std::sync::Mutex<Option<String>>>, u32, Instant)>;
        let mut series: Series = HashMap::new();
        let slots = Arc::new(Semaphore::new(EVENT_CONCURRENCY));
        let mut running = tokio::task::JoinSet::new();
        while let Some(item) = rx.recv().await {
            while running.try_join_next().is_some() {}
            let now = Instant::now();
            trim_series(&mut series, |v| v.2, now);
            let key = (item.pod.uid.clone(), item.kind, item.reason, item.action, item.note.clone());
            let (name, count) = match series.get_mut(&key) {
                Some((name, count, at)) if now.duration_since(*at) < SERIES_WINDOW => {
                    *count += 1;
                    *at = now;
                    (name.clone(), *count)
                }
                _ => {
                    let name = Arc::new(std::sync::Mutex::new(None));
                    series.insert(key, (name.clone(), 1, now));
                    (name, 1)
                }
            };
            if count > 2 {
                // Upstream writes a series once (count 2) and then only on its heartbeat.
                self.count(|c| c.events_suppressed += 1);
                self.events_pending.fetch_sub(1, Ordering::AcqRel);
                continue;
            }
            let Ok(slot) = slots.clone().acquire_owned().await else { break };
            let w = self.clone();
            let limiter = limiter.clone();
            // Boxed, as in `Writer::spawn`.
            running.spawn(Box::pin(async move {
                w.write_event(&item, &limiter, &name, count).await;
                drop(slot);
                w.events_pending.fetch_sub(1, Ordering::AcqRel);
            }));
        }
    }

    async fn write_event(&self, item: &EventItem, limiter: &RateLimiter, name: &std::sync::Mutex<Option<String>>, count: u32) {
        let pod = &item.pod;
        let path = namespaced_path("/apis/events.k8s.io/v1/namespaces/", &pod.namespace, "/events");
        let now = k8s_openapi::jiff::Timestamp::now();
        let mut pause = Duration::from_millis(100);
        for attempt in 1..=EVENT_TRIES {
            limiter.acquire().await;
            let r = {
                let Some(_permit) = self.lease.write_permit().await else {
                    self.count(|c| {
                        c.refused_not_leader += 1;
                        c.events_lost += 1;
                    });
                    return;
                };
                let existing = name.lock().ok().and_then(|n| n.clone());
                match (count, existing) {
                    (1, _) | (_, None) => {
                        let ev = self.event_object(item, now);
                        let ours = ev.metadata.name.clone();
                        match create_reading_name(&self.client, &path, &ev).await {
                            Ok(created) => {
                                if let (Ok(mut n), Some(created)) = (name.lock(), created) {
                                    *n = Some(created);
                                }
                                Ok(())
                            }
                            // The name is this event's own: an earlier attempt
                            // whose reply was lost created it.
                            Err(e) if api_code(&e) == Some(409) => {
                                if let Ok(mut n) = name.lock() {
                                    *n = ours;
                                }
                                Ok(())
                            }
                            Err(e) => Err(e),
                        }
                    }
                    (_, Some(existing)) => {
                        let patch = json!({"series": {"count": count, "lastObservedTime": meta::MicroTime(now)}});
                        let api: Api<events::Event> = Api::namespaced(self.client.clone(), &pod.namespace);
                        api.patch(&existing, &PatchParams::default(), &Patch::Merge(patch)).await.map(|_| ())
                    }
                }
            };
            match r {
                Ok(()) => {
                    self.count(|c| c.events_written += 1);
                    return;
                }
                Err(e) if api_code(&e).is_some_and(|c| (400..500).contains(&c) && c != 429) => {
                    // Refused for good (namespace gone, invalid): retrying cannot help.
                    // Refused access is the operator's to fix (the account's
                    // RBAC): said at warning level, with the server's message.
                    if matches!(api_code(&e), Some(401 | 403)) {
                        tracing::warn!(pod = %pod.key(), reason = item.reason, error = %e, "event refused");
                    } else {
                        tracing::debug!(pod = %pod.key(), error = %e, "event refused");
                    }
                    self.count(|c| c.events_lost += 1);
                    return;
                }
                Err(e) => {
                    tracing::debug!(pod = %pod.key(), error = %e, attempt, "event write failed; retrying");
                    self.count(|c| c.event_retries += 1);
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(5));
        }
        tracing::warn!(pod = %pod.key(), reason = item.reason, "event not recorded after {EVENT_TRIES} tries");
        self.count(|c| c.events_lost += 1);
    }

    fn event_object(&self, item: &EventItem, now: k8s_openapi::jiff::Timestamp) -> events::Event {
        let pod = &item.pod;
        events::Event {
            // Named as upstream's recorder names it (`<regarding>.<unix nanos in hex>`):
            // a generateName of "<pod>." is refused by kube-apiserver, which
            // validates the prefix as a DNS subdomain (it may not end in a dot).
            metadata: meta::ObjectMeta { name: Some(format!("{}.{:x}", pod.name, now.as_nanosecond())), namespace: Some(pod.namespace.clone()), ..Default::default() },
            event_time: Some(meta::MicroTime(now)),
            action: Some(item.action.into()),
            reason: Some(item.reason.into()),
            note: Some(item.note.chars().take(1024).collect()),
            type_: Some(item.kind.into()),
            reporting_controller: Some(self.component.clone()),
            reporting_instance: Some(self.instance.clone()),
            regarding: Some(core::ObjectReference {
                kind: Some("Pod".into()),
                api_version: Some("v1".into()),
                namespace: Some(pod.namespace.clone()),
                name: Some(pod.name.clone()),
                uid: Some(pod.uid.clone()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

/// Of a created object's reply, only its name.
#[derive(serde::Deserialize)]
struct CreatedName {
    metadata: NameOnly,
}

#[derive(serde::Deserialize)]
struct NameOnly {
    name: Option<String>,
}

/// Creates the event `obj` through `api` as `Api::create` does, but reads only
/// `metadata.name` of the reply instead of decoding the whole object (the
/// event writer needs the generated name, nothing else).
async fn create_reading_name(client: &kube::Client, path: &str, obj: &events::Event) -> Result<Option<String>, kube::Error> {
    let bytes = serde_json::to_vec(obj).map_err(kube::Error::SerdeError)?;
    let mut req = kube::core::Request::new(path).create(&PostParams::default(), bytes).map_err(kube::Error::BuildRequest)?;
    req.extensions_mut().insert("create");
    let created: CreatedName = client.request(req).await?;
    Ok(created.metadata.name)
}
