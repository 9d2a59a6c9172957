//! The one list/watch plumbing of every watched kind (the kinds themselves,
//! what they are and how their changes reach the cache, are the scheduling
//! loop's: `scheduler::kinds`). Each kind is one task with explicit states
//! ([`WatchState`]: starting, synced, retrying, not served) that lists, sends
//! the list to the scheduling loop as one `Relist` (so the loop drops what
//! disappeared while the watch was down: nothing is lost or counted twice),
//! then watches from the list's resourceVersion: it resumes a dropped watch
//! where it was, relists on 410 Gone, and backs off on errors (kube-runtime's
//! exponential backoff with jitter, capped at 3 s: [`Timing`]).
//!
//! Readiness reads the states ([`WatchHealth`]): every required kind synced,
//! every optional kind answered once. A kind is required when upstream
//! kube-scheduler 1.34 watches it; later APIs and CRDs are optional
//! ([`Need`]): a 404 makes them not served (their objects dropped, one log
//! line saying which feature is off), and they are looked for again every
//! [`RECHECK`]. Each change of state is logged once, never each retry, and
//! the kinds of one feature say it is on or off once between them.
//!
//! Adding a watched kind: one implementation of [`Kind`] (its name, its
//! need, its API, how a change applies) and one line that spawns it; the
//! plumbing carries its changes to the loop as [`WatchEvent`]s, and the loop
//! reports each relist applied (`WatchHealth::set_synced`).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, ObjectList, VersionMatch, WatchParams};
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::watcher::ExponentialBackoff;
use kube::Api;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch as signal};
use tokio::time::Instant;

/// A pod as the daemon's watcher decodes it: boxed, because a `Pod` is
/// kilobytes and moves through the watcher's stream and the channel many
/// times; and without `metadata.managedFields`, which nothing in a scheduler
/// reads and which was the larger part of decoding a pod (its `fieldsV1` is
/// a tree of JSON maps). Everything else is decoded as `core::Pod` decodes it.
#[derive(Clone, Debug, Default)]
pub struct WatchedPod(pub Box<core::Pod>);

impl kube::Resource for WatchedPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
        <core::Pod as kube::Resource>::kind(dt)
    }
    fn group(dt: &()) -> std::borrow::Cow<'_, str> {
        <core::Pod as kube::Resource>::group(dt)
    }
    fn version(dt: &()) -> std::borrow::Cow<'_, str> {
        <core::Pod as kube::Resource>::version(dt)
    }
    fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
        <core::Pod as kube::Resource>::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

impl<'de> serde::Deserialize<'de> for WatchedPod {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
        /// A pod's wire form; apiVersion, kind and unknown fields are skipped.
        #[derive(serde::Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: Option<Meta>,
            spec: Option<core::PodSpec>,
            status: Option<core::PodStatus>,
        }
        /// `ObjectMeta` but for `managedFields`, skipped unread.
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Meta {
            annotations: Option<BTreeMap<String, String>>,
            creation_timestamp: Option<meta::Time>,
            deletion_grace_period_seconds: Option<i64>,
            deletion_timestamp: Option<meta::Time>,
            finalizers: Option<Vec<String>>,
            generate_name: Option<String>,
            generation: Option<i64>,
            labels: Option<BTreeMap<String, String>>,
            name: Option<String>,
            namespace: Option<String>,
            owner_references: Option<Vec<meta::OwnerReference>>,
            resource_version: Option<String>,
            self_link: Option<String>,
            uid: Option<String>,
        }
        let w = Wire::deserialize(d)?;
        let metadata = w.metadata.map_or_else(ObjectMeta::default, |m| ObjectMeta {
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            generate_name: m.generate_name,
            generation: m.generation,
            labels: m.labels,
            managed_fields: None,
            name: m.name,
            namespace: m.namespace,
            owner_references: m.owner_references,
            resource_version: m.resource_version,
            self_link: m.self_link,
            uid: m.uid,
        });
        Ok(WatchedPod(Box::new(core::Pod { metadata, spec: w.spec, status: w.status })))
    }
}

/// A change to one kind of object.
#[derive(Debug)]
pub enum Change<K> {
    /// Added or modified.
    Apply(K),
    /// Deleted.
    Delete(K),
    /// The complete current set after a (re)list.
    Relist(Vec<K>),
}

/// One watched kind: its name, whether readiness waits for it, where it is
/// listed and watched, and how its changes reach `I` (the scheduling loop's
/// cache and queue). The per-kind piece of the one list/watch plumbing, as
/// linkerd's `k8s/index` has one apply/delete implementation per kind: a
/// new kind is one implementation and one line in the list that spawns
/// the daemon's kinds (`scheduler::kinds::watch_all`).
pub trait Kind<I>: Copy + Send + Sync + 'static {
    /// The object as the watch decodes it.
    type Object: kube::Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static;

    /// Its name in the health checks and the logs (its plural, with its
    /// group when it is not one of the core kinds).
    fn name(self) -> &'static str;

    /// Whether readiness waits for it (see [`Need`]).
    fn need(self) -> Need {
        Need::Required
    }

    /// Where it is listed and watched.
    fn api(self, client: kube::Client) -> Api<Self::Object>;

    /// Applies one change: an object added or modified, deleted, or the
    /// whole set after a (re)list (what is not in it is gone).
    fn apply(self, to: &mut I, change: Change<Self::Object>);
}

/// A change of one watched kind on its way to `I` (boxed: each event moved
/// through the watchers' channel is a few words, whatever the kind).
pub struct WatchEvent<I> {
    kind: &'static str,
    relist: bool,
    apply: Box<dyn FnOnce(&mut I) + Send>,
}

impl<I> WatchEvent<I> {
    /// `change` of `kind`.
    pub fn new<K: Kind<I>>(kind: K, change: Change<K::Object>) -> Self {
        WatchEvent { kind: kind.name(), relist: matches!(change, Change::Relist(_)), apply: Box::new(move |to: &mut I| kind.apply(to, change)) }
    }

    /// The kind's name.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// Applies the change to `to`. Returns the kind's name when the change
    /// was a (re)list, which the caller reports to [`WatchHealth::set_synced`]
    /// once applied (readiness means the cache holds the list).
    pub fn apply(self, to: &mut I) -> Option<&'static str> {
        (self.apply)(to);
        self.relist.then_some(self.kind)
    }
}

impl<I> Debug for WatchEvent<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchEvent").field("kind", &self.kind).field("relist", &self.relist).finish_non_exhaustive()
    }
}

/// Registers `kind` in `health` and starts its watch task on `client`,
/// which sends each change to `tx`; it stops when `stop` changes.
pub fn spawn_kind<I: 'static, K: Kind<I>>(client: &kube::Client, kind: K, tx: &mpsc::Sender<WatchEvent<I>>, stop: &signal::Receiver<bool>, health: &WatchHealth, tasks: &mut tokio::task::JoinSet<()>) {
    health.register_as(kind.name(), kind.need());
    let wrap = move |c| WatchEvent::new(kind, c);
    tasks.spawn(run_kind(kind.api(client.clone()), kind.name(), wrap, tx.clone(), stop.clone(), health.clone(), Timing::default()));
}

/// The API resource of one PodGroup API.
pub fn group_api_resource(api: berth_model::pod::GroupApi) -> kube::api::ApiResource {
    use berth_model::pod::GroupApi;
    let (g, v) = match api {
        GroupApi::V1beta1 => ("scheduling.k8s.io", "v1beta1"),
        GroupApi::V1alpha1 => ("scheduling.x-k8s.io", "v1alpha1"),
    };
    kube::api::ApiResource::from_gvk_with_plural(&kube::api::GroupVersionKind::gvk(g, v, "PodGroup"), "podgroups")
}

// ---------------------------------------------------------------- one watch, one state machine

/// Why a list or a watch of one kind failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server answered with an error status, or could not be reached.
    #[error("{}", api_message(.0))]
    Api(#[source] kube::Error),
    /// The watch stream carried an error event.
    #[error("{code}: {message}")]
    Event {
        /// Its HTTP status code (410: the resourceVersion is too old).
        code: u16,
        /// Its message.
        message: String,
    },
    /// A list came back without a resourceVersion to watch from.
    #[error("the list carried no resourceVersion")]
    NoResourceVersion,
}

fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} {}: {}", s.code, s.reason, s.message),
        e => e.to_string(),
    }
}

impl Error {
    /// The server's state is behind the resourceVersion asked for ("Too
    /// large resource version", cause ResourceVersionTooLarge): it went
    /// backwards, as after an etcd restore or a new cluster on the same
    /// address. The only way on is a fresh list, as client-go's reflector
    /// does; resuming from the version would be refused forever.
    pub fn too_large_resource_version(&self) -> bool {
        const TOO_LARGE: &str = "Too large resource version";
        match self {
            Error::Api(kube::Error::Api(s)) => s.code == 504 && (s.message.contains(TOO_LARGE) || s.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.reason == "ResourceVersionTooLarge"))),
            Error::Event { code, message } => *code == 504 && message.contains(TOO_LARGE),
            _ => false,
        }
    }

    /// The HTTP status the API server answered with, when it answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            Error::Api(kube::Error::Api(s)) => Some(s.code),
            Error::Event { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// Whether readiness waits for a watched kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Upstream kube-scheduler 1.34 watches it, so every cluster berth
    /// supports serves it: readiness waits until it is synced.
    Required,
    /// Some clusters do not serve it (an API added after 1.34, a version
    /// served only by some, a CRD). When the server answers 404 the kind is
    /// [`WatchState::NotServed`], `feature` is off and the kind is looked for
    /// again every [`Timing::recheck`]. It holds readiness back only until its
    /// first answer, so that the first cycles see its objects when it is served.
    Optional {
        /// What berth does with it, for the logs and `/readyz?verbose`.
        feature: &'static str,
    },
}

/// One watched kind's state, as readiness, `/readyz?verbose` and
/// `berth_watch_state` read it.
///
/// ```text
///            list ok, applied by the loop          watch or list fails
///  Starting ───────────────────────────▶ Synced ─────────────────────▶ Retrying
///     │  ▲                                  ▲ ◀──── watch resumes ───────┘ │
///     │  └──── list ok after an outage ─────┼──────────────────────────────┘
///     │ 404 (optional kinds)                │ list ok (rechecked every 10 s)
///     └──────────────────────────▶ NotServed ◀── 404 while synced (CRD deleted)
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchState {
    /// A list is on its way to the cache (the first one, or the relist
    /// after an outage); the loop has not applied it yet.
    Starting,
    /// Listed, the list applied by the scheduling loop, and watching.
    Synced,
    /// The last list or watch failed; retried with backoff.
    Retrying {
        /// When the failures began.
        since: Instant,
        /// Failed attempts since then.
        attempts: u32,
        /// The last error.
        error: String,
    },
    /// The server does not serve this optional API (404); the cache holds
    /// none of its objects and the API is looked for again periodically.
    NotServed {
        /// Since when.
        since: Instant,
    },
}

/// The names of [`WatchState`]'s variants, as the `state` label of `berth_watch_state`.
pub const STATE_NAMES: [&str; 4] = ["starting", "synced", "retrying", "not_served"];

impl WatchState {
    /// The state's name (one of [`STATE_NAMES`]).
    pub fn name(&self) -> &'static str {
        match self {
            WatchState::Starting => STATE_NAMES[0],
            WatchState::Synced => STATE_NAMES[1],
            WatchState::Retrying { .. } => STATE_NAMES[2],
            WatchState::NotServed { .. } => STATE_NAMES[3],
        }
    }
}

/// One kind as the health checks report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindStatus {
    /// The kind's name (its plural, with the group when it is not a core kind of berth).
    pub kind: &'static str,
    /// Required or optional.
    pub need: Need,
    /// Its state now.
    pub state: WatchState,
    /// It holds readiness back now.
    pub blocking: bool,
    /// Its changes of state so far (each logged once; a count that keeps
    /// growing is a watch that flaps).
    pub changes: u64,
    /// How often it is looked for again while not served.
    pub recheck: Duration,
}

/// How watch tasks wait. The defaults are berth's (upstream's reflector
/// backs off from 800 ms to 30 s, which kept caches stale for half a minute
/// after a short outage).
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// The first delay after an error; it doubles with each failure, and
    /// each delay gets a random jitter of up to as much again.
    pub backoff_min: Duration,
    /// The delay's cap (before jitter): a watch is retried within twice
    /// this of the API's return.
    pub backoff_max: Duration,
    /// The backoff starts over after this long without a failure.
    pub backoff_reset: Duration,
    /// How often an optional API that is not served is looked for again.
    pub recheck: Duration,
    /// A watch silent for this long is started again (the server ends
    /// watches after their timeoutSeconds, 290 s by default).
    pub idle: Duration,
    /// A resumed watch counts as connected once it carried an event or has
    /// stayed open this long (a server that accepts a watch and drops it at
    /// once is still failing).
    pub confirm: Duration,
    /// Objects per page of a list.
    pub page_size: u32,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(3),
            backoff_reset: Duration::from_secs(60),
            recheck: RECHECK,
            idle: Duration::from_secs(295),
            confirm: Duration::from_secs(1),
            // client-go's pager's page size, as kube-rs's watcher.
            page_size: 500,
        }
    }
}

/// How often an optional API that is not served (404: the CRD or the API
/// version is not installed) is looked for again.
pub const RECHECK: Duration = Duration::from_secs(10);

impl Timing {
    /// kube-runtime's exponential backoff (backon's, with jitter), started
    /// over after [`Timing::backoff_reset`] without a failure.
    pub fn backoff(&self) -> ResetTimerBackoff<ExponentialBackoff> {
        let b = backon::ExponentialBuilder::default()
            .with_min_delay(self.backoff_min)
            .with_max_delay(self.backoff_max)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        ResetTimerBackoff::new(b.into(), self.backoff_reset)
    }
}

/// What the watch task last saw of the server.
#[derive(Clone, Debug)]
enum Link {
    /// Nothing yet.
    New,
    /// Listed, or watching.
    Up,
    /// Failing.
    Down { since: Instant, attempts: u32, error: String, retry_in: Duration },
    /// 404 for an optional kind.
    NotServed { since: Instant },
}

/// One kind's bookkeeping. The watch task owns `link`; the scheduling loop
/// counts the relists it applied. A list that ends an outage is not
/// "synced" until the loop has applied it (`applied >= wanted`), so
/// readiness means the cache is current, not merely that the API answered.
#[derive(Debug)]
struct Entry {
    need: Need,
    link: Link,
    /// Relists the task sent to the loop.
    sent: u64,
    /// Relists the loop applied (the channel keeps their order).
    applied: u64,
    /// The relist whose application makes the kind synced again.
    wanted: u64,
    /// The relist whose application makes the kind fresh enough to
    /// schedule on after [`WatchHealth::relist_every_kind`].
    fresh_wanted: u64,
    /// The generation of [`WatchHealth::relist_every_kind`] a relist must
    /// have been started in (or after) to count: a list already under way
    /// when a fresh view was asked for may predate what it must show.
    fresh_from: u64,
    /// The kind has had a first answer (an optional kind blocks readiness until then).
    settled: bool,
    /// What the logs last said of an optional kind's feature.
    feature_on: Option<bool>,
    /// Changes of state so far (each logged once).
    changes: u64,
    /// How often a not-served kind is looked for again.
    recheck: Duration,
}

impl Entry {
    fn new(need: Need) -> Self {
        Entry { need, link: Link::New, sent: 0, applied: 0, wanted: 0, fresh_wanted: 0, fresh_from: 0, settled: false, feature_on: None, changes: 0, recheck: RECHECK }
    }

    fn state(&self) -> WatchState {
        match &self.link {
            Link::New => WatchState::Starting,
            Link::Up if self.applied >= self.wanted => WatchState::Synced,
            Link::Up => WatchState::Starting,
            Link::Down { since, attempts, error, .. } => WatchState::Retrying { since: *since, attempts: *attempts, error: error.clone() },
            Link::NotServed { since } => WatchState::NotServed { since: *since },
        }
    }

    fn blocking(&self, state: &WatchState) -> bool {
        match self.need {
            Need::Required => *state != WatchState::Synced,
            Need::Optional { .. } => !self.settled,
        }
    }
}

/// The state of every watched kind, shared by the watch tasks (which move
/// it), the scheduling loop (which reports relists applied) and the admin
/// port (readiness, `/readyz?verbose`, `berth_watch_state`).
#[derive(Debug, Clone, Default)]
pub struct WatchHealth {
    kinds: Arc<Mutex<BTreeMap<&'static str, Entry>>>,
    /// How often a watch found the server's state older than berth's
    /// cache: every kind relists when it moves (see [`WatchHealth::went_backwards`]).
    backwards: Arc<tokio::sync::watch::Sender<u64>>,
}

impl WatchHealth {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, Entry>> {
        self.kinds.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a required kind (not synced yet).
    pub fn register(&self, kind: &'static str) {
        self.register_as(kind, Need::Required);
    }

    /// Registers a kind.
    pub fn register_as(&self, kind: &'static str, need: Need) {
        self.lock().entry(kind).or_insert_with(|| Entry::new(need));
    }

    /// The scheduling loop applied one relist of `kind`. True when nothing
    /// holds readiness back now.
    pub fn set_synced(&self, kind: &'static str) -> bool {
        self.update(kind, |e| e.applied += 1);
        self.ready()
    }

    /// The API server's state went backwards (a watch was answered "Too
    /// large resource version"): every kind's cache is suspect, not only the
    /// one that noticed. Every kind that is up counts as starting until its
    /// next relist is applied, and every watch task relists now, so the
    /// scheduling loop (which schedules only while [`WatchHealth::ready`])
    /// never decides on objects that no longer exist.
    pub fn went_backwards(&self) {
        for e in self.lock().values_mut() {
            if matches!(e.link, Link::Up) {
                e.wanted = e.sent + 1;
            }
        }
        self.backwards.send_modify(|g| *g += 1);
    }

    /// Every kind relists now, and [`WatchHealth::fresh`] (hence
    /// scheduling, not readiness: the caches are synced, only refreshed)
    /// waits until each relist started after this call is applied. A
    /// replica that has just taken the Lease calls it before it schedules
    /// anything: its watches may lag behind what the previous leader bound
    /// (a lagging follower, a watch held up by a slow link), and a decision
    /// on that view could give a node room it no longer has. The lists are
    /// fresh reads; the previous leader finished its writes before it
    /// released the Lease, or they failed with it.
    pub fn relist_every_kind(&self) {
        let mut kinds = self.lock();
        self.backwards.send_modify(|g| *g += 1);
        let generation = *self.backwards.borrow();
        for e in kinds.values_mut() {
            if !matches!(e.link, Link::NotServed { .. }) {
                e.fresh_wanted = e.sent + 1;
                e.fresh_from = generation;
            }
        }
    }

    /// Ready, and every kind that is up has applied the relist asked for by
    /// the last [`WatchHealth::relist_every_kind`]: the view may be
    /// scheduled on.
    pub fn fresh(&self) -> bool {
        let kinds = self.lock();
        kinds.values().all(|e| !e.blocking(&e.state())) && kinds.values().all(|e| !matches!(e.link, Link::Up) || e.applied >= e.fresh_wanted)
    }

    /// Every required kind is synced and every optional kind has had its
    /// first answer.
    pub fn ready(&self) -> bool {
        self.lock().values().all(|e| !e.blocking(&e.state()))
    }

    /// Every kind, by name.
    pub fn states(&self) -> Vec<KindStatus> {
        self.lock()
            .iter()
            .map(|(kind, e)| {
                let state = e.state();
                KindStatus { kind, need: e.need, blocking: e.blocking(&state), state, changes: e.changes, recheck: e.recheck }
            })
            .collect()
    }

    /// The state of one kind.
    pub fn state(&self, kind: &str) -> Option<WatchState> {
        self.lock().get(kind).map(Entry::state)
    }

    /// What holds readiness back, one line per kind (`watch nodes: not
    /// synced`, `watch pods: disconnected for 3.2s (5 attempts): ...`).
    /// Empty when nothing does.
    pub fn problems(&self) -> Vec<String> {
        let now = Instant::now();
        self.states()
            .into_iter()
            .filter(|s| s.blocking)
            .map(|s| match &s.state {
                WatchState::Retrying { since, attempts, error } => {
                    format!("watch {}: disconnected for {:.1}s ({attempts} attempts): {error}", s.kind, now.saturating_duration_since(*since).as_secs_f64())
                }
                _ => format!("watch {}: not synced", s.kind),
            })
            .collect()
    }

    /// One line per kind in the form of upstream's `/readyz?verbose`:
    /// `[+]watch pods synced`, `[-]watch nodes retrying for 2.0s (4 attempts): ...`,
    /// `[+]watch podgroups.scheduling.x-k8s.io not served (rechecked every 10s; ... off)`.
    pub fn verbose(&self) -> Vec<String> {
        let now = Instant::now();
        self.states()
            .into_iter()
            .map(|s| {
                let mark = if s.blocking { '-' } else { '+' };
                let what = match &s.state {
                    WatchState::Starting => "starting: list not in the cache yet".to_string(),
                    WatchState::Synced => "synced".to_string(),
                    WatchState::Retrying { since, attempts, error } => format!("retrying for {:.1}s ({attempts} attempts): {error}", now.saturating_duration_since(*since).as_secs_f64()),
                    WatchState::NotServed { .. } => format!("not served (rechecked every {}s)", s.recheck.as_secs()),
                };
                let feature = match (s.need, &s.state) {
                    (Need::Required, _) => String::new(),
                    (Need::Optional { feature }, WatchState::Synced) => format!("; optional: {feature} on"),
                    (Need::Optional { feature }, WatchState::NotServed { .. }) => format!("; optional: {feature} off"),
                    (Need::Optional { feature }, _) => format!("; optional: {feature}"),
                };
                format!("[{mark}]watch {} {what}{feature}", s.kind)
            })
            .collect()
    }

    /// Sets `gauge{kind, state}` to 1 for each kind's state and 0 for its
    /// other states (`berth_watch_state`, computed at scrape time).
    pub fn export(&self, gauge: &prometheus::IntGaugeVec) {
        for s in self.states() {
            for name in STATE_NAMES {
                gauge.with_label_values(&[s.kind, name]).set(i64::from(s.state.name() == name));
            }
        }
    }

    fn need(&self, kind: &str) -> Need {
        self.lock().get(kind).map(|e| e.need).unwrap_or(Need::Required)
    }

    fn is_not_served(&self, kind: &str) -> bool {
        self.lock().get(kind).is_some_and(|e| matches!(e.link, Link::NotServed { .. }))
    }

    /// The task is sending a relist: a list it made (`listed`), or an empty
    /// stand-in (the API is not served, or an optional kind's first answer
    /// was an error: nothing of it is known).
    /// A relist of `kind` went to the loop; `generation` is the value of
    /// the relist signal when its list was started.
    fn relist_sent(&self, kind: &'static str, listed: bool, generation: u64) {
        self.update(kind, |e| {
            e.sent += 1;
            if listed && !matches!(e.link, Link::Up) {
                e.link = Link::Up;
                e.wanted = e.sent;
            }
            if listed && generation < e.fresh_from {
                // Started before a fresh view was asked for: the task lists
                // again (it sees the signal), and that list is the one that counts.
                e.fresh_wanted = e.fresh_wanted.max(e.sent + 1);
            }
        });
    }

    /// An optional kind's first answer was an error: true once, and the
    /// caller sends an empty relist so that readiness need not wait for it.
    fn needs_stand_in(&self, kind: &str) -> bool {
        self.lock().get(kind).is_some_and(|e| matches!(e.need, Need::Optional { .. }) && e.sent == 0)
    }

    /// The watch is established again (it resumes where it was).
    fn connected(&self, kind: &'static str) {
        self.update(kind, |e| {
            if matches!(e.link, Link::Down { .. }) {
                e.link = Link::Up;
            }
        });
    }

    /// The list or watch failed; the next attempt is in `retry_in`.
    fn failed(&self, kind: &'static str, error: &Error, retry_in: Duration) {
        let error = error.to_string();
        self.update(kind, |e| match &mut e.link {
            Link::Down { attempts, error: last, retry_in: next, .. } => {
                *attempts += 1;
                *last = error;
                *next = retry_in;
            }
            _ => e.link = Link::Down { since: Instant::now(), attempts: 1, error, retry_in },
        });
    }

    /// True when the kind was not already not served.
    fn not_served(&self, kind: &'static str, recheck: Duration) -> bool {
        let mut changed = false;
        self.update(kind, |e| {
            e.recheck = recheck;
            if !matches!(e.link, Link::NotServed { .. }) {
                e.link = Link::NotServed { since: Instant::now() };
                changed = true;
            }
        });
        changed
    }

    /// Applies `f` to the kind's entry and logs the change of state, if any:
    /// one line per change, never one per retry.
    fn update(&self, kind: &'static str, f: impl FnOnce(&mut Entry)) {
        let (before, after, need, feature_was, recheck, retry_in) = {
            let mut kinds = self.lock();
            let e = kinds.entry(kind).or_insert_with(|| Entry::new(Need::Required));
            let before = e.state();
            f(e);
            let after = e.state();
            let retry_in = match &e.link {
                Link::Down { retry_in, .. } => *retry_in,
                _ => Duration::ZERO,
            };
            if after != WatchState::Starting {
                e.settled = true;
            }
            if before.name() != after.name() {
                e.changes += 1;
            }
            let mut feature_was = e.feature_on;
            match after {
                WatchState::Synced => e.feature_on = Some(true),
                WatchState::NotServed { .. } => e.feature_on = Some(false),
                _ => {}
            }
            let (need, recheck) = (e.need, e.recheck.as_secs());
            // Kinds of one feature (one API group) report it once: the
            // first to say on or off says it for all.
            if feature_was.is_none() && matches!(need, Need::Optional { .. }) {
                let said = kinds.iter().filter(|(k, o)| **k != kind && o.need == need).find_map(|(_, o)| o.feature_on);
                if said.is_some() && said == kinds.get(kind).and_then(|e| e.feature_on) {
                    feature_was = said;
                }
            }
            (before, after, need, feature_was, recheck, retry_in)
        };
        if before.name() == after.name() {
            return;
        }
        match (&before, &after, need) {
            (_, WatchState::Retrying { error, .. }, _) => {
                tracing::warn!(kind, %error, retry_in = %format!("{:.1}s", retry_in.as_secs_f64()), "watch failing; retrying with backoff (no further line until it recovers)")
            }
            (WatchState::Retrying { since, attempts, .. }, WatchState::Synced, _) => {
                tracing::info!(kind, down_for_s = %format!("{:.1}", since.elapsed().as_secs_f64()), attempts, "watch recovered");
            }
            (WatchState::Retrying { .. }, WatchState::Starting, _) => tracing::info!(kind, "watch reconnected; relisting"),
            (_, WatchState::NotServed { .. }, Need::Optional { feature }) => {
                if feature_was == Some(true) {
                    tracing::warn!(kind, feature, recheck_s = recheck, "optional API no longer served; its objects are dropped and the feature is off");
                } else if feature_was.is_none() {
                    tracing::info!(kind, feature, recheck_s = recheck, "optional API not served; feature off");
                }
            }
            (_, WatchState::Synced, Need::Optional { feature }) if feature_was != Some(true) => tracing::info!(kind, feature, "optional API served; feature on"),
            (_, WatchState::Synced, _) => tracing::debug!(kind, "watch synced"),
            _ => tracing::debug!(kind, from = before.name(), to = after.name(), "watch state"),
        }
    }
}

/// What a watch task lists and watches: the API server in the daemon, a
/// scripted server in the tests.
pub trait Source<K: Clone>: Send + Sync + 'static {
    /// One page of a list.
    fn list(&self, lp: &ListParams) -> impl Future<Output = kube::Result<ObjectList<K>>> + Send;
    /// A watch from `version`; Ok once the server has accepted it.
    fn watch(&self, wp: &WatchParams, version: &str) -> impl Future<Output = kube::Result<BoxStream<'static, kube::Result<kube::core::WatchEvent<K>>>>> + Send;
}

impl<K> Source<K> for Api<K>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    fn list(&self, lp: &ListParams) -> impl Future<Output = kube::Result<ObjectList<K>>> + Send {
        Api::list(self, lp)
    }

    async fn watch(&self, wp: &WatchParams, version: &str) -> kube::Result<BoxStream<'static, kube::Result<kube::core::WatchEvent<K>>>> {
        Ok(Api::watch(self, wp, version).await?.boxed())
    }
}

/// Lists every page: the objects and the resourceVersion to watch from.
async fn list_all<K: Clone, S: Source<K>>(src: &S, page_size: u32) -> Result<(Vec<K>, String), Error> {
    // resourceVersion "0": any version (served from the API server's cache),
    // as kube-rs's `any_semantic` watcher lists.
    let mut lp = ListParams { resource_version: Some("0".into()), version_match: Some(VersionMatch::NotOlderThan), limit: Some(page_size), ..ListParams::default() };
    let mut items = Vec::new();
    loop {
        let page = src.list(&lp).await.map_err(Error::Api)?;
        items.extend(page.items);
        let version = page.metadata.resource_version.filter(|v| !v.is_empty());
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp.continue_token = Some(c),
            None => return version.map(|v| (items, v)).ok_or(Error::NoResourceVersion),
        }
    }
}

/// What a watch task does next.
enum Phase {
    /// List everything and send it as one relist.
    List,
    /// Watch from this resourceVersion.
    Watch(String),
    /// An error happened; then retry with this phase.
    Failed(Error, Box<Phase>),
    /// The optional API is not served: drop its objects, look again later.
    NotServed,
}

/// Sleeps `d`; false when `stop` changed first.
async fn pause(stop: &mut signal::Receiver<bool>, d: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = stop.changed() => false,
    }
}

/// One watched kind: list, send the relist, watch from its resourceVersion
/// (resuming after a dropped watch, relisting on 410 Gone), and on errors
/// retry with backoff, reporting each change of state to `health`. An
/// optional kind the server does not serve is dropped from the cache and
/// looked for again every `timing.recheck`; an error while looking (an
/// outage) leaves it not served and it is looked for again at the next
/// recheck. Returns when `stop` changes or the loop is gone.
pub async fn run_kind<K, S, F, E>(src: S, kind: &'static str, wrap: F, tx: mpsc::Sender<E>, mut stop: signal::Receiver<bool>, health: WatchHealth, timing: Timing)
where
    K: kube::Resource + Clone + Send + 'static,
    S: Source<K>,
    F: Fn(Change<K>) -> E + Send,
    E: Send,
{
    let optional = matches!(health.need(kind), Need::Optional { .. });
    let mut backoff = timing.backoff();
    let wp = WatchParams::default();
    let mut phase = Phase::List;
    let mut backwards = health.backwards.subscribe();
    loop {
        phase = match phase {
            Phase::List => {
                // A relist asked for from now on is answered by this list or a later one.
                let generation = *backwards.borrow_and_update();
                let r = tokio::select! {
                    r = list_all(&src, timing.page_size) => r,
                    _ = stop.changed() => return,
                };
                match r {
                    Ok((items, version)) => {
                        health.relist_sent(kind, true, generation);
                        if tx.send(wrap(Change::Relist(items))).await.is_err() {
                            return;
                        }
                        Phase::Watch(version)
                    }
                    Err(e) => Phase::Failed(e, Box::new(Phase::List)),
                }
            }
            Phase::Watch(version) => {
                let started = tokio::select! {
                    r = src.watch(&wp, &version) => r,
                    _ = stop.changed() => return,
                };
                match started {
                    Err(e) => Phase::Failed(Error::Api(e), Box::new(Phase::Watch(version))),
                    Ok(mut stream) => {
                        let mut version = version;
                        let confirm = tokio::time::sleep(timing.confirm);
                        tokio::pin!(confirm);
                        let mut confirmed = false;
                        loop {
                            let next = tokio::select! {
                                n = tokio::time::timeout(timing.idle, stream.next()) => n,
                                _ = &mut confirm, if !confirmed => {
                                    confirmed = true;
                                    health.connected(kind);
                                    continue;
                                }
                                _ = stop.changed() => return,
                                // Another kind found the server's state older than berth's.
                                Ok(()) = backwards.changed() => break Phase::List,
                            };
                            if !confirmed && matches!(&next, Ok(Some(Ok(ev))) if !matches!(ev, kube::core::WatchEvent::Error(_))) {
                                confirmed = true;
                                health.connected(kind);
                            }
                            let change = match next {
                                // Ended by the server (timeoutSeconds) or silent too
                                // long: watch again from where it was.
                                Err(_) | Ok(None) => break Phase::Watch(version),
                                Ok(Some(Err(e))) => break Phase::Failed(Error::Api(e), Box::new(Phase::Watch(version))),
                                Ok(Some(Ok(ev))) => match ev {
                                    kube::core::WatchEvent::Added(o) | kube::core::WatchEvent::Modified(o) => {
                                        if let Some(v) = o.meta().resource_version.clone().filter(|v| !v.is_empty()) {
                                            version = v;
                                        }
                                        Change::Apply(o)
                                    }
                                    kube::core::WatchEvent::Deleted(o) => {
                                        if let Some(v) = o.meta().resource_version.clone().filter(|v| !v.is_empty()) {
                                            version = v;
                                        }
                                        Change::Delete(o)
                                    }
                                    kube::core::WatchEvent::Bookmark(b) => {
                                        version = b.metadata.resource_version;
                                        continue;
                                    }
                                    kube::core::WatchEvent::Error(s) => break Phase::Failed(Error::Event { code: s.code, message: s.message }, Box::new(Phase::Watch(version))),
                                },
                            };
                            if tx.send(wrap(change)).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            }
            Phase::Failed(e, retry) => {
                let code = e.code();
                if code == Some(410) && matches!(*retry, Phase::Watch(_)) {
                    // The resourceVersion is too old: relist (not an outage).
                    tracing::debug!(kind, error = %e, "watch expired; relisting");
                    Phase::List
                } else if e.too_large_resource_version() {
                    // The server's state went backwards: relist from scratch;
                    // the relist drops what no longer exists.
                    tracing::warn!(kind, error = %e, "the API server's state is older than berth's cache; relisting every kind");
                    health.went_backwards();
                    backwards.borrow_and_update();
                    Phase::List
                } else if optional && code == Some(404) {
                    Phase::NotServed
                } else if health.is_not_served(kind) {
                    // Looking for a not-served API failed (an outage, a 5xx):
                    // it stays not served until an answer says otherwise.
                    tracing::debug!(kind, error = %e, "recheck of a not-served API failed");
                    if !pause(&mut stop, timing.recheck).await {
                        return;
                    }
                    Phase::List
                } else {
                    let delay = backoff.next().unwrap_or(timing.backoff_max);
                    health.failed(kind, &e, delay);
                    if health.needs_stand_in(kind) {
                        health.relist_sent(kind, false, *backwards.borrow());
                        if tx.send(wrap(Change::Relist(Vec::new()))).await.is_err() {
                            return;
                        }
                    }
                    tracing::debug!(kind, error = %e, delay_ms = delay.as_millis() as u64, "watch retry");
                    if !pause(&mut stop, delay).await {
                        return;
                    }
                    *retry
                }
            }
            Phase::NotServed => {
                if health.not_served(kind, timing.recheck) {
                    // Its objects (if it was served) are gone with it.
                    health.relist_sent(kind, false, *backwards.borrow());
                    if tx.send(wrap(Change::Relist(Vec::new()))).await.is_err() {
                        return;
                    }
                }
                if !pause(&mut stop, timing.recheck).await {
                    return;
                }
                Phase::List
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kind names, as the health checks would report them.
    const PODS: &str = "pods";
    const NODES: &str = "nodes";
    const NAMESPACES: &str = "namespaces";
    const PODGROUPS_V1ALPHA1: &str = "podgroups.scheduling.x-k8s.io";

    #[test]
    fn a_watched_pod_is_the_pod_without_its_managed_fields() {
        let text = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7", "generation": 2,
                "labels": {"app": "a"}, "annotations": {"x": "y"}, "finalizers": ["f"],
                "creationTimestamp": "2026-01-01T00:00:00Z", "deletionTimestamp": "2026-01-01T00:01:00Z", "deletionGracePeriodSeconds": 30,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "o", "controller": true}],
                "managedFields": [{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:nodeName": {}}}}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "100m"}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]},
        })
        .to_string();
        let mut want: core::Pod = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        assert!(want.metadata.managed_fields.is_some());
        want.metadata.managed_fields = None;
        let got: WatchedPod = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(*got.0, want);
        // Without metadata at all, as `core::Pod` reads it: empty metadata.
        let bare: WatchedPod = serde_json::from_str(r#"{"spec": null}"#).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(bare.0.metadata, ObjectMeta::default());
        // Wrong types are errors, not panics.
        assert!(serde_json::from_str::<WatchedPod>(r#"{"metadata": {"name": 5}}"#).is_err());
    }

    #[test]
    fn backoff_is_exponential_capped_and_jittered() {
        let t = Timing::default();
        let mut b = t.backoff();
        let d: Vec<Duration> = b.by_ref().take(12).collect();
        // 200 ms doubling to 3 s, each with a jitter of up to as much again.
        assert!(d[0] >= Duration::from_millis(200) && d[0] < Duration::from_millis(400), "{d:?}");
        assert!(d[1] >= Duration::from_millis(400) && d[1] < Duration::from_millis(800), "{d:?}");
        assert!(d[6..].iter().all(|d| *d >= Duration::from_secs(3) && *d <= Duration::from_secs(6)), "{d:?}");
        kube::runtime::utils::Backoff::reset(&mut b);
        assert!(b.next().is_some_and(|d| d < Duration::from_millis(400)));
    }

    #[test]
    fn a_fresh_view_waits_for_lists_started_after_it_was_asked_for() {
        let h = WatchHealth::default();
        h.register(PODS);
        h.register(NODES);
        for k in [PODS, NODES] {
            h.relist_sent(k, true, 0);
            h.set_synced(k);
        }
        assert!(h.ready());
        assert!(h.fresh());
        // The replica takes the Lease: still ready (the caches are synced),
        // not fresh until both kinds relisted.
        h.relist_every_kind();
        let generation = *h.backwards.borrow();
        assert!(h.ready() && !h.fresh());
        // A pods list started before the request arrives and is applied: it does not count.
        h.relist_sent(PODS, true, generation - 1);
        h.set_synced(PODS);
        assert!(!h.fresh());
        // The lists started after it do.
        h.relist_sent(PODS, true, generation);
        h.set_synced(PODS);
        assert!(!h.fresh(), "nodes not relisted yet");
        h.relist_sent(NODES, true, generation);
        h.set_synced(NODES);
        assert!(h.ready() && h.fresh());
    }

    #[test]
    fn health_reports_each_kind_and_readiness_waits_for_required_kinds_only() {
        let h = WatchHealth::default();
        h.register(PODS);
        h.register(NODES);
        h.register_as(PODGROUPS_V1ALPHA1, Need::Optional { feature: "gangs" });
        assert!(!h.ready());
        assert_eq!(h.problems(), vec!["watch nodes: not synced", "watch podgroups.scheduling.x-k8s.io: not synced", "watch pods: not synced"]);
        // The loop applies the first lists.
        h.relist_sent(PODS, true, 0);
        h.relist_sent(NODES, true, 0);
        assert!(!h.set_synced(PODS));
        assert!(!h.set_synced(NODES), "the optional kind has not answered yet");
        // The optional API is not served: it no longer holds readiness back.
        assert!(h.not_served(PODGROUPS_V1ALPHA1, RECHECK));
        assert!(!h.not_served(PODGROUPS_V1ALPHA1, RECHECK), "reported once");
        h.relist_sent(PODGROUPS_V1ALPHA1, false, 0);
        assert!(h.set_synced(PODGROUPS_V1ALPHA1));
        assert!(h.ready() && h.problems().is_empty());
        assert_eq!(h.verbose(), vec![
            "[+]watch nodes synced",
            "[+]watch podgroups.scheduling.x-k8s.io not served (rechecked every 10s); optional: gangs off",
            "[+]watch pods synced",
        ]);
        // An outage: the failing watch holds readiness back, with its error.
        let refused = Error::Api(kube::Error::Service("connection refused".into()));
        h.failed(NODES, &refused, Duration::from_millis(200));
        h.failed(NODES, &refused, Duration::from_millis(200));
        assert!(!h.ready());
        let p = h.problems();
        assert_eq!(p.len(), 1);
        assert!(p[0].starts_with("watch nodes: disconnected for ") && p[0].ends_with("(2 attempts): ServiceError: connection refused"), "{p:?}");
        assert!(h.verbose()[0].starts_with("[-]watch nodes retrying for "), "{:?}", h.verbose());
        // The watch resumes where it was: synced again without a relist.
        h.connected(NODES);
        assert!(h.ready());
        // A relist after an outage counts only once the loop applied it.
        h.failed(PODS, &refused, Duration::from_millis(200));
        h.relist_sent(PODS, true, 0);
        assert_eq!(h.state(PODS), Some(WatchState::Starting));
        assert!(!h.ready());
        assert!(h.set_synced(PODS));
        // A relist on 410 while synced (no outage) does not flip readiness.
        h.relist_sent(PODS, true, 0);
        assert_eq!(h.state(PODS), Some(WatchState::Synced));
        let nodes = h.states().into_iter().find(|s| s.kind == NODES).map(|s| s.changes);
        assert_eq!(nodes, Some(3), "starting -> synced -> retrying -> synced");
        // The gauge: one series per kind and state, 1 for the current state.
        let g = prometheus::IntGaugeVec::new(prometheus::Opts::new("berth_watch_state", "h"), &["kind", "state"]).expect("gauge");
        h.export(&g);
        assert_eq!(g.with_label_values(&[PODS, "synced"]).get(), 1);
        assert_eq!(g.with_label_values(&[PODS, "retrying"]).get(), 0);
        assert_eq!(g.with_label_values(&[PODGROUPS_V1ALPHA1, "not_served"]).get(), 1);
    }

    /// A scripted API server for Namespaces: up, down (connection refused),
    /// not serving the API (404), or answering 500.
    #[derive(Clone, Default)]
    struct Fake {
        inner: Arc<Mutex<FakeState>>,
    }

    #[derive(Default)]
    struct FakeState {
        mode: Mode,
        objects: Vec<String>,
        version: u64,
        lists: usize,
        watchers: Vec<futures::channel::mpsc::UnboundedSender<kube::Result<kube::core::WatchEvent<core::Namespace>>>>,
    }

    #[derive(Clone, Copy, Debug, Default, PartialEq)]
    enum Mode {
        #[default]
        Up,
        Down,
        NotFound,
        Status(u16),
        /// Lists fail; watches are accepted, then reset at once (a blackout
        /// behind a proxy that answers the headers).
        Reset,
    }

    fn ns(name: &str, version: u64) -> core::Namespace {
        let mut n = core::Namespace::default();
        n.metadata.name = Some(name.into());
        n.metadata.resource_version = Some(version.to_string());
        n
    }

    impl Fake {
        fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
            self.inner.lock().unwrap_or_else(|p| p.into_inner())
        }

        /// Changes the mode; open watches die (down) or end (404, as when a CRD is deleted).
        fn set(&self, mode: Mode) {
            let mut s = self.state();
            s.mode = mode;
            if mode != Mode::Up {
                for w in s.watchers.drain(..) {
                    if mode == Mode::Down {
                        let _ = w.unbounded_send(Err(kube::Error::Service("connection reset".into())));
                    }
                }
            }
        }

        fn add(&self, name: &str) {
            let mut s = self.state();
            s.version += 1;
            let v = s.version;
            s.objects.push(name.into());
            s.watchers.retain(|w| w.unbounded_send(Ok(kube::core::WatchEvent::Added(ns(name, v)))).is_ok());
        }

        fn lists(&self) -> usize {
            self.state().lists
        }

        fn check(mode: Mode) -> kube::Result<()> {
            match mode {
                Mode::Up => Ok(()),
                Mode::Down | Mode::Reset => Err(kube::Error::Service("connection refused".into())),
                Mode::NotFound => Err(kube::Error::Api(Box::new(kube::core::Status::failure("the server could not find the requested resource", "NotFound").with_code(404)))),
                Mode::Status(c) => Err(kube::Error::Api(Box::new(kube::core::Status::failure("injected", "InternalError").with_code(c)))),
            }
        }
    }

    impl Source<core::Namespace> for Fake {
        async fn list(&self, _: &ListParams) -> kube::Result<ObjectList<core::Namespace>> {
            let mut s = self.state();
            Fake::check(s.mode)?;
            s.lists += 1;
            let v = s.version;
            let items = s.objects.iter().map(|n| ns(n, v)).collect();
            Ok(ObjectList { types: Default::default(), metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta { resource_version: Some(v.to_string()), ..Default::default() }, items })
        }

        async fn watch(&self, _: &WatchParams, _: &str) -> kube::Result<BoxStream<'static, kube::Result<kube::core::WatchEvent<core::Namespace>>>> {
            let mut s = self.state();
            if s.mode == Mode::Reset {
                return Ok(futures::stream::once(async { Err(kube::Error::Service("connection reset".into())) }).boxed());
            }
            Fake::check(s.mode)?;
            let (tx, rx) = futures::channel::mpsc::unbounded();
            s.watchers.push(tx);
            Ok(rx.boxed())
        }
    }

    /// The scheduling loop's part: applies relists (reporting them to
    /// `health`) and records what each relist held.
    fn fake_loop(mut rx: mpsc::Receiver<Change<core::Namespace>>, health: WatchHealth) -> Arc<Mutex<Vec<usize>>> {
        let relists: Arc<Mutex<Vec<usize>>> = Arc::default();
        let r = relists.clone();
        tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                if let Change::Relist(all) = ev {
                    r.lock().unwrap_or_else(|p| p.into_inner()).push(all.len());
                    health.set_synced(NAMESPACES);
                }
            }
        });
        relists
    }

    fn start(fake: &Fake, need: Need) -> (WatchHealth, Arc<Mutex<Vec<usize>>>, signal::Sender<bool>) {
        let health = WatchHealth::default();
        health.register_as(NAMESPACES, need);
        let (tx, rx) = mpsc::channel(64);
        let (stop_tx, stop) = signal::channel(false);
        let relists = fake_loop(rx, health.clone());
        tokio::spawn(run_kind(fake.clone(), NAMESPACES, |c| c, tx, stop, health.clone(), Timing::default()));
        (health, relists, stop_tx)
    }

    async fn settle(d: Duration) {
        tokio::time::sleep(d).await;
    }

    fn changes(h: &WatchHealth) -> u64 {
        h.states().first().map(|s| s.changes).unwrap_or_default()
    }

    #[tokio::test(start_paused = true)]
    async fn a_required_watch_recovers_from_any_outage_and_resumes_without_relisting() {
        let fake = Fake::default();
        fake.add("a");
        let (h, relists, _stop) = start(&fake, Need::Required);
        settle(Duration::from_millis(50)).await;
        assert_eq!(h.state(NAMESPACES), Some(WatchState::Synced));
        assert!(h.ready());
        for outage in [Duration::from_secs(2), Duration::from_secs(20), Duration::from_secs(300)] {
            let before = changes(&h);
            fake.set(Mode::Down);
            settle(Duration::from_millis(10)).await;
            assert!(matches!(h.state(NAMESPACES), Some(WatchState::Retrying { .. })), "{:?}", h.state(NAMESPACES));
            assert!(!h.ready());
            settle(outage).await;
            let Some(WatchState::Retrying { attempts, .. }) = h.state(NAMESPACES) else { panic!("{:?}", h.state(NAMESPACES)) };
            assert!(attempts >= 2, "{attempts}");
            // Capped backoff: at most 3 s plus jitter between attempts.
            assert!(u64::from(attempts) <= 2 + outage.as_secs() * 5, "{attempts} attempts in {outage:?}");
            fake.set(Mode::Up);
            settle(Duration::from_secs(8)).await;
            assert_eq!(h.state(NAMESPACES), Some(WatchState::Synced), "after {outage:?}");
            assert!(h.ready());
            // One change to retrying, one back: whatever the retries.
            assert_eq!(changes(&h), before + 2);
        }
        // It resumed each time where it was: one list in all.
        assert_eq!(fake.lists(), 1);
        assert_eq!(*relists.lock().unwrap_or_else(|p| p.into_inner()), vec![1]);
        // A 500 from the server is an error like any other.
        fake.set(Mode::Status(500));
        settle(Duration::from_secs(5)).await;
        assert!(matches!(h.state(NAMESPACES), Some(WatchState::Retrying { error, .. }) if error.starts_with("500")));
        fake.set(Mode::Up);
        settle(Duration::from_secs(8)).await;
        assert_eq!(h.state(NAMESPACES), Some(WatchState::Synced));
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_accepted_then_reset_at_once_is_still_failing() {
        let fake = Fake::default();
        let (h, _relists, _stop) = start(&fake, Need::Required);
        settle(Duration::from_millis(50)).await;
        fake.set(Mode::Reset);
        settle(Duration::from_secs(30)).await;
        assert!(matches!(h.state(NAMESPACES), Some(WatchState::Retrying { attempts, .. }) if attempts > 5), "{:?}", h.state(NAMESPACES));
        assert_eq!(changes(&h), 2, "starting -> synced -> retrying, no flapping");
        fake.set(Mode::Up);
        settle(Duration::from_secs(8)).await;
        assert_eq!(h.state(NAMESPACES), Some(WatchState::Synced));
        assert_eq!(changes(&h), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_required_watch_that_never_listed_recovers_once_the_api_answers() {
        let fake = Fake::default();
        fake.set(Mode::Down);
        let (h, relists, _stop) = start(&fake, Need::Required);
        settle(Duration::from_secs(30)).await;
        assert!(matches!(h.state(NAMESPACES), Some(WatchState::Retrying { .. })));
        assert!(!h.ready());
        assert!(relists.lock().unwrap_or_else(|p| p.into_inner()).is_empty(), "nothing is sent before a list");
        fake.add("a");
        fake.set(Mode::Up);
        settle(Duration::from_secs(8)).await;
        assert_eq!(h.state(NAMESPACES), Some(WatchState::Synced));
        assert_eq!(*relists.lock().unwrap_or_else(|p| p.into_inner()), vec![1]);
        assert_eq!(changes(&h), 3, "starting -> retrying -> starting (the list on its way) -> synced");
    }

    #[tokio::test(start_paused = true)]
    async fn an_optional_api_not_served_survives_an_outage_during_its_recheck_and_comes_and_goes() {
        let fake = Fake::default();
        fake.set(Mode::NotFound);
        let (h, relists, _stop) = start(&fake, Need::Optional { feature: "gangs" });
        settle(Duration::from_millis(50)).await;
        assert!(matches!(h.state(NAMESPACES), Some(WatchState::NotServed { .. })));
        assert!(h.ready(), "not served does not hold readiness back");
        assert_eq!(*relists.lock().unwrap_or_else(|p| p.into_inner()), vec![0], "an empty relist: nothing of it in the cache");
        // An outage spanning several rechecks: still not served, nothing
        // logged, readiness kept.
        fake.set(Mode::Down);
        for _ in 0..30 {
            settle(Duration::from_secs(1)).await;
            assert!(matches!(h.state(NAMESPACES), Some(WatchState::NotServed { .. })));
            assert!(h.ready());
        }
        fake.set(Mode::Status(503));
        settle(Duration::from_secs(25)).await;
        fake.set(Mode::NotFound);
        settle(Duration::from_secs(25)).await;
        assert!(matches!(h.state(NAMESPACES), Some(WatchState::NotServed { .. })));
        assert_eq!(changes(&h), 1, "starting -> not served, and nothing since");
        // The CRD is installed: found at the next recheck, its objects listed.
        fake.add("g1");
        fake.set(Mode::Up);
        settle(RECHECK + Duration::from_millis(50)).await;
        assert_eq!(h.state(NAMESPACES), Some(WatchState::Synced));
        assert_eq!(*relists.lock().unwrap_or_else(|p| p.into_inner()), vec![0, 1]);
        // ... and an outage while served is an outage like any other, but
        // does not hold readiness back.
        fake.set(Mode::Down);
        settle(Duration::from_secs(10)).await;
        assert!(matches!(h.state(NAMESPACES), Some(WatchState::Retrying { .. })));
        assert!(h.ready());
        fake.set(Mode::Up);
        settle(Duration::from_secs(8)).await;
        assert_eq!(h.state(NAMESPACES), Some(WatchState::Synced));
        // The CRD is deleted: its watch ends, the next gets 404. Not served,
        // and the cache drops its objects (an empty relist).
        fake.set(Mode::NotFound);
        settle(Duration::from_millis(50)).await;
        assert!(matches!(h.state(NAMESPACES), Some(WatchState::NotServed { .. })));
        assert_eq!(*relists.lock().unwrap_or_else(|p| p.into_inner()), vec![0, 1, 0]);
        assert!(h.ready());
    }

    #[tokio::test(start_paused = true)]
    async fn an_optional_kind_whose_first_answer_is_an_error_does_not_hold_readiness() {
        let fake = Fake::default();
        fake.set(Mode::Status(503));
        let (h, relists, _stop) = start(&fake, Need::Optional { feature: "gangs" });
        settle(Duration::from_millis(50)).await;
        assert!(matches!(h.state(NAMESPACES), Some(WatchState::Retrying { .. })));
        assert!(h.ready());
        assert_eq!(*relists.lock().unwrap_or_else(|p| p.into_inner()), vec![0], "a stand-in relist lets the loop see readiness");
        settle(Duration::from_secs(20)).await;
        assert_eq!(*relists.lock().unwrap_or_else(|p| p.into_inner()), vec![0], "once");
        fake.set(Mode::NotFound);
        settle(Duration::from_secs(8)).await;
        assert!(matches!(h.state(NAMESPACES), Some(WatchState::NotServed { .. })));
        fake.add("g");
        fake.set(Mode::Up);
        settle(RECHECK + Duration::from_millis(50)).await;
        assert_eq!(h.state(NAMESPACES), Some(WatchState::Synced));
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_stops_when_told() {
        let fake = Fake::default();
        let (h, _relists, stop) = start(&fake, Need::Required);
        settle(Duration::from_millis(50)).await;
        assert_eq!(h.state(NAMESPACES), Some(WatchState::Synced));
        let _ = stop.send(true);
        settle(Duration::from_millis(50)).await;
        // The watch's stream was dropped with the task.
        fake.add("late");
        assert!(fake.state().watchers.is_empty());
    }
}

