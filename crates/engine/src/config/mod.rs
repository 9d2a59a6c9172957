//! KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1): parsing,
//! upstream defaults, validation, and building one framework per profile.
//!
//! A bad file is refused with one message naming the field (and, for syntax
//! and type errors, the line).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use thiserror::Error;

use crate::framework::{Framework, Plugin, PluginEntry, Points};
use crate::plugins;

/// Why a configuration was refused.
#[derive(Debug, Error)]
pub enum Error {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Not valid YAML/JSON, an unknown field or a wrong type (the message names the line and field).
    #[error("{0}")]
    Parse(String),
    /// A value is not allowed.
    #[error("{field}: {message}")]
    Invalid {
        /// The field, as a path (`profiles[0].plugins.score.enabled[1].weight`).
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

fn invalid(field: impl Into<String>, message: impl Into<String>) -> Error {
    Error::Invalid { field: field.into(), message: message.into() }
}

/// One plugin reference in a plugin set.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PluginRef {
    /// Plugin name ("*" in a disabled list: all).
    pub name: String,
    /// Score weight (score and multiPoint only).
    #[serde(default)]
    pub weight: Option<i64>,
}

/// Enabled and disabled plugins of one extension point.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PluginSet {
    /// Enabled plugins, in order.
    #[serde(default)]
    pub enabled: Vec<PluginRef>,
    /// Disabled plugins.
    #[serde(default)]
    pub disabled: Vec<PluginRef>,
}

/// Plugins per extension point.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Plugins {
    /// preEnqueue.
    #[serde(default)]
    pub pre_enqueue: PluginSet,
    /// queueSort.
    #[serde(default)]
    pub queue_sort: PluginSet,
    /// preFilter.
    #[serde(default)]
    pub pre_filter: PluginSet,
    /// filter.
    #[serde(default)]
    pub filter: PluginSet,
    /// postFilter.
    #[serde(default)]
    pub post_filter: PluginSet,
    /// preScore.
    #[serde(default)]
    pub pre_score: PluginSet,
    /// score.
    #[serde(default)]
    pub score: PluginSet,
    /// reserve.
    #[serde(default)]
    pub reserve: PluginSet,
    /// permit.
    #[serde(default)]
    pub permit: PluginSet,
    /// preBind.
    #[serde(default)]
    pub pre_bind: PluginSet,
    /// bind.
    #[serde(default)]
    pub bind: PluginSet,
    /// postBind.
    #[serde(default)]
    pub post_bind: PluginSet,
    /// multiPoint: every point the plugin implements.
    #[serde(default)]
    pub multi_point: PluginSet,
}

impl Plugins {
    fn point(&self, p: Points) -> &PluginSet {
        match p {
            Points::PRE_ENQUEUE => &self.pre_enqueue,
            Points::QUEUE_SORT => &self.queue_sort,
            Points::PRE_FILTER => &self.pre_filter,
            Points::FILTER => &self.filter,
            Points::POST_FILTER => &self.post_filter,
            Points::PRE_SCORE => &self.pre_score,
            Points::SCORE => &self.score,
            Points::RESERVE => &self.reserve,
            Points::PERMIT => &self.permit,
            Points::PRE_BIND => &self.pre_bind,
            Points::BIND => &self.bind,
            _ => &self.post_bind,
        }
    }
}

/// Args for one plugin.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// Plugin name.
    pub name: String,
    /// Its args (validated by the plugin).
    #[serde(default)]
    pub args: Option<serde_json::Value>,
}

/// A scheduling profile.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Profile {
    /// The schedulerName pods select (default "default-scheduler").
    #[serde(default)]
    pub scheduler_name: Option<String>,
    /// Overrides the global percentageOfNodesToScore.
    #[serde(default)]
    pub percentage_of_nodes_to_score: Option<i32>,
    /// Plugins, merged over upstream's defaults.
    #[serde(default)]
    pub plugins: Option<Plugins>,
    /// Plugin args.
    #[serde(default)]
    pub plugin_config: Vec<PluginConfig>,
}

/// Leader election settings (upstream defaults: 15 s lease, 10 s renew deadline, 2 s retry).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaderElection {
    /// Whether to elect a leader (default true).
    #[serde(default = "yes")]
    pub leader_elect: bool,
    /// Lease duration ("15s").
    #[serde(default = "d15")]
    pub lease_duration: String,
    /// Renew deadline ("10s").
    #[serde(default = "d10")]
    pub renew_deadline: String,
    /// Retry period ("2s").
    #[serde(default = "d2")]
    pub retry_period: String,
    /// Lock kind (only "leases").
    #[serde(default = "leases")]
    pub resource_lock: String,
    /// Lease name (default "berth").
    #[serde(default = "lease_name")]
    pub resource_name: String,
    /// Lease namespace (default "kube-system").
    #[serde(default = "kube_system")]
    pub resource_namespace: String,
}

fn yes() -> bool {
    true
}
fn d15() -> String {
    "15s".into()
}
fn d10() -> String {
    "10s".into()
}
fn d2() -> String {
    "2s".into()
}
fn leases() -> String {
    "leases".into()
}
fn lease_name() -> String {
    "berth".into()
}
fn kube_system() -> String {
    "kube-system".into()
}

impl Default for LeaderElection {
    fn default() -> Self {
        LeaderElection {
            leader_elect: true,
            lease_duration: d15(),
            renew_deadline: d10(),
            retry_period: d2(),
            resource_lock: leases(),
            resource_name: lease_name(),
            resource_namespace: kube_system(),
        }
    }
}

/// API client settings (upstream defaults: qps 50, burst 100).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientConnection {
    /// Path to a kubeconfig.
    #[serde(default)]
    pub kubeconfig: Option<String>,
    /// Accept header (accepted, unused).
    #[serde(default)]
    pub accept_content_types: Option<String>,
    /// Content type (accepted, unused).
    #[serde(default)]
    pub content_type: Option<String>,
    /// Queries per second.
    #[serde(default = "qps")]
    pub qps: f64,
    /// Burst.
    #[serde(default = "burst")]
    pub burst: i64,
}

fn qps() -> f64 {
    50.0
}
fn burst() -> i64 {
    100
}

impl Default for ClientConnection {
    fn default() -> Self {
        ClientConnection { kubeconfig: None, accept_content_types: None, content_type: None, qps: qps(), burst: burst() }
    }
}

/// The configuration file.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeSchedulerConfiguration {
    /// Must be kubescheduler.config.k8s.io/v1.
    #[serde(default)]
    pub api_version: Option<String>,
    /// Must be KubeSchedulerConfiguration.
    #[serde(default)]
    pub kind: Option<String>,
    /// Accepted for compatibility; berth's filter loop is sequential.
    #[serde(default)]
    pub parallelism: Option<i64>,
    /// percentageOfNodesToScore (0 or unset: adaptive).
    #[serde(default)]
    pub percentage_of_nodes_to_score: Option<i32>,
    /// Initial backoff (default 1).
    #[serde(default)]
    pub pod_initial_backoff_seconds: Option<i64>,
    /// Maximum backoff (default 10).
    #[serde(default)]
    pub pod_max_backoff_seconds: Option<i64>,
    /// Leader election.
    #[serde(default)]
    pub leader_election: LeaderElection,
    /// API client.
    #[serde(default)]
    pub client_connection: ClientConnection,
    /// Profiles (one "default-scheduler" profile when empty).
    #[serde(default)]
    pub profiles: Vec<Profile>,
    /// Extenders are not supported; must be empty.
    #[serde(default)]
    pub extenders: Vec<serde_json::Value>,
    /// Accepted, unused.
    #[serde(default)]
    pub delay_cache_until_active: Option<bool>,
    /// Accepted, unused.
    #[serde(default)]
    pub enable_profiling: Option<bool>,
    /// Accepted, unused.
    #[serde(default)]
    pub enable_contention_profiling: Option<bool>,
    /// Accepted, unused.
    #[serde(default)]
    pub healthz_bind_address: Option<String>,
    /// Accepted, unused.
    #[serde(default)]
    pub metrics_bind_address: Option<String>,
}

impl Default for KubeSchedulerConfiguration {
    fn default() -> Self {
        KubeSchedulerConfiguration {
            api_version: Some(API_VERSION.into()),
            kind: Some(KIND.into()),
            parallelism: None,
            percentage_of_nodes_to_score: None,
            pod_initial_backoff_seconds: None,
            pod_max_backoff_seconds: None,
            leader_election: LeaderElection::default(),
            client_connection: ClientConnection::default(),
            profiles: vec![],
            extenders: vec![],
            delay_cache_until_active: None,
            enable_profiling: None,
            enable_contention_profiling: None,
            healthz_bind_address: None,
            metrics_bind_address: None,
        }
    }
}

/// The only apiVersion accepted.
pub const API_VERSION: &str = "kubescheduler.config.k8s.io/v1";
/// The only kind accepted.
pub const KIND: &str = "KubeSchedulerConfiguration";
/// Upstream's default scheduler name.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// A validated configuration, ready to build frameworks from.
#[derive(Clone, Debug)]
pub struct Config {
    /// The file as read, with defaults applied.
    pub raw: KubeSchedulerConfiguration,
    /// Initial backoff.
    pub pod_initial_backoff: Duration,
    /// Maximum backoff.
    pub pod_max_backoff: Duration,
    /// Lease duration.
    pub lease_duration: Duration,
    /// Renew deadline.
    pub renew_deadline: Duration,
    /// Retry period.
    pub retry_period: Duration,
    profiles: Vec<ResolvedProfile>,
}

#[derive(Clone)]
struct ResolvedProfile {
    name: String,
    percentage: Option<i32>,
    /// (plugin, point, weight) registrations, in each point's order.
    plugins: Vec<(Arc<dyn Plugin>, Points, i64)>,
}

impl std::fmt::Debug for ResolvedProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedProfile").field("name", &self.name).field("plugins", &self.plugins.iter().map(|p| p.0.name()).collect::<Vec<_>>()).finish()
    }
}

/// Parses a Go-style duration ("15s", "1m30s", "500ms").
pub fn parse_duration(s: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    while !rest.is_empty() {
        let n_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let n: f64 = rest[..n_end].parse().ok()?;
        rest = &rest[n_end..];
        let u_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let mult = match &rest[..u_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += n * mult;
        rest = &rest[u_end..];
    }
    Duration::try_from_secs_f64(total).ok()
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: &str) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.into(), source })?;
        Self::parse(&text).map_err(|e| match e {
            Error::Parse(m) => Error::Parse(format!("{path}: {m}")),
            Error::Invalid { field, message } => Error::Invalid { field: format!("{path}: {field}"), message },
            other => other,
        })
    }

    /// Parses and validates configuration text (YAML or JSON).
    pub fn parse(text: &str) -> Result<Config> {
        let raw: KubeSchedulerConfiguration = serde_saphyr::from_str(text).map_err(|e| Error::Parse(e.to_string()))?;
        Self::from_raw(raw)
    }

    /// Upstream defaults, one profile "default-scheduler".
    pub fn default_config() -> Config {
        match Self::from_raw(KubeSchedulerConfiguration::default()) {
            Ok(c) => c,
            // The defaults are valid by construction; this arm is never taken.
            Err(_) => Config {
                raw: KubeSchedulerConfiguration::default(),
                pod_initial_backoff: Duration::from_secs(1),
                pod_max_backoff: Duration::from_secs(10),
                lease_duration: Duration::from_secs(15),
                renew_deadline: Duration::from_secs(10),
                retry_period: Duration::from_secs(2),
                profiles: vec![],
            },
        }
    }

    /// Validates a parsed configuration and resolves its profiles.
    pub fn from_raw(mut raw: KubeSchedulerConfiguration) -> Result<Config> {
        match raw.api_version.as_deref() {
            None | Some(API_VERSION) => {}
            Some(v) => return Err(invalid("apiVersion", format!("unsupported {v:?}, want {API_VERSION:?}"))),
        }
        match raw.kind.as_deref() {
            None | Some(KIND) => {}
            Some(k) => return Err(invalid("kind", format!("unsupported {k:?}, want {KIND:?}"))),
        }
        if let Some(p) = raw.percentage_of_nodes_to_score
            && !(0..=100).contains(&p) {
                return Err(invalid("percentageOfNodesToScore", format!("must be in the range 0-100, got {p}")));
            }
        if let Some(p) = raw.parallelism
            && p <= 0 {
                return Err(invalid("parallelism", format!("must be greater than 0, got {p}")));
            }
        if !raw.extenders.is_empty() {
            return Err(invalid("extenders", "scheduler extenders are not supported by berth"));
        }
        let initial = raw.pod_initial_backoff_seconds.unwrap_or(1);
        let max = raw.pod_max_backoff_seconds.unwrap_or(10);
        if initial <= 0 {
            return Err(invalid("podInitialBackoffSeconds", format!("must be greater than 0, got {initial}")));
        }
        if max < initial {
            return Err(invalid("podMaxBackoffSeconds", format!("must be greater than or equal to podInitialBackoffSeconds ({initial}), got {max}")));
        }
        let le = &raw.leader_election;
        let dur = |v: &str, f: &str| parse_duration(v).ok_or_else(|| invalid(format!("leaderElection.{f}"), format!("{v:?} is not a duration like \"15s\"")));
        let lease_duration = dur(&le.lease_duration, "leaseDuration")?;
        let renew_deadline = dur(&le.renew_deadline, "renewDeadline")?;
        let retry_period = dur(&le.retry_period, "retryPeriod")?;
        if le.leader_elect {
            if renew_deadline >= lease_duration {
                return Err(invalid("leaderElection.renewDeadline", "must be less than leaseDuration"));
            }
            if retry_period.is_zero() || retry_period >= renew_deadline {
                return Err(invalid("leaderElection.retryPeriod", "must be greater than zero and less than renewDeadline"));
            }
        }
        if le.resource_lock != "leases" {
            return Err(invalid("leaderElection.resourceLock", format!("unsupported {:?}, only \"leases\"", le.resource_lock)));
        }
        if raw.client_connection.qps < 0.0 {
            return Err(invalid("clientConnection.qps", "must not be negative"));
        }
        if raw.client_connection.burst < 0 {
            return Err(invalid("clientConnection.burst", "must not be negative"));
        }
        if raw.profiles.is_empty() {
            raw.profiles.push(Profile::default());
        }
        let mut names = HashSet::new();
        let mut profiles = Vec::new();
        for (i, p) in raw.profiles.iter().enumerate() {
            let path = format!("profiles[{i}]");
            let name = p.scheduler_name.clone().unwrap_or_else(|| DEFAULT_SCHEDULER_NAME.into());
            if name.is_empty() {
                return Err(invalid(format!("{path}.schedulerName"), "must be non-empty"));
            }
            if !names.insert(name.clone()) {
                return Err(invalid(format!("{path}.schedulerName"), format!("duplicate profile {name:?}")));
            }
            if let Some(pc) = p.percentage_of_nodes_to_score
                && !(0..=100).contains(&pc) {
                    return Err(invalid(format!("{path}.percentageOfNodesToScore"), format!("must be in the range 0-100, got {pc}")));
                }
            profiles.push(resolve_profile(p, name, &path)?);
        }
        // Every profile must sort the queue the same way (one queue).
        let qs = |p: &ResolvedProfile| p.plugins.iter().find(|x| x.1.has(Points::QUEUE_SORT)).map(|x| x.0.name());
        if let Some(first) = profiles.first() {
            let q0 = qs(first);
            for (i, p) in profiles.iter().enumerate().skip(1) {
                if qs(p) != q0 {
                    return Err(invalid(format!("profiles[{i}].plugins.queueSort"), "queueSort must be the same for all profiles"));
                }
            }
        }
        Ok(Config {
            raw,
            pod_initial_backoff: Duration::from_secs(initial as u64),
            pod_max_backoff: Duration::from_secs(max as u64),
            lease_duration,
            renew_deadline,
            retry_period,
            profiles,
        })
    }

    /// Profile names in order.
    pub fn profile_names(&self) -> Vec<String> {
        self.profiles.iter().map(|p| p.name.clone()).collect()
    }

    /// Builds one framework per profile.
    pub fn frameworks(&self, seed: u64) -> Vec<Framework> {
        self.profiles
            .iter()
            .map(|p| {
                let pct = p.percentage.or(self.raw.percentage_of_nodes_to_score).filter(|x| *x > 0);
                let entries = p.plugins.iter().map(|(pl, pts, w)| (PluginEntry { plugin: pl.clone(), weight: *w }, *pts)).collect();
                Framework::new(p.name.clone(), entries, pct, seed)
            })
            .collect()
    }
}

/// upstream `mergePluginSet`: the custom set over the default set.
fn merge(default: &[(String, i64)], custom: &PluginSet) -> (Vec<(String, i64)>, HashSet<String>) {
    let disabled: HashSet<String> = custom.disabled.iter().map(|p| p.name.clone()).collect();
    let mut replaced = HashSet::new();
    let mut enabled = Vec::new();
    if !disabled.contains("*") {
        for (name, w) in default {
            if disabled.contains(name) {
                continue;
            }
            match custom.enabled.iter().position(|c| &c.name == name) {
                Some(i) => {
                    replaced.insert(i);
                    enabled.push((name.clone(), custom.enabled[i].weight.unwrap_or(0)));
                }
                None => enabled.push((name.clone(), *w)),
            }
        }
    }
    for (i, c) in custom.enabled.iter().enumerate() {
        if !replaced.contains(&i) {
            enabled.push((c.name.clone(), c.weight.unwrap_or(0)));
        }
    }
    (enabled, disabled)
}

fn resolve_profile(p: &Profile, name: String, path: &str) -> Result<ResolvedProfile> {
    let plugins_cfg = p.plugins.clone().unwrap_or_default();
    // Args by plugin name.
    let mut args: BTreeMap<String, &serde_json::Value> = BTreeMap::new();
    for (i, pc) in p.plugin_config.iter().enumerate() {
        if !plugins::known(&pc.name) {
            return Err(invalid(format!("{path}.pluginConfig[{i}].name"), format!("unknown plugin {:?}", pc.name)));
        }
        if args.contains_key(&pc.name) {
            return Err(invalid(format!("{path}.pluginConfig[{i}].name"), format!("repeated config for plugin {:?}", pc.name)));
        }
        if let Some(a) = &pc.args {
            args.insert(pc.name.clone(), a);
        }
    }
    // Check every referenced name and weight.
    for (pt, ptname) in Points::ALL.iter().copied().chain([(Points(0), "multiPoint")]) {
        let set = if pt.0 == 0 { &plugins_cfg.multi_point } else { plugins_cfg.point(pt) };
        for (kind, list) in [("enabled", &set.enabled), ("disabled", &set.disabled)] {
            for (j, r) in list.iter().enumerate() {
                let field = format!("{path}.plugins.{ptname}.{kind}[{j}]");
                if (kind != "disabled" || r.name != "*") && !plugins::known(&r.name) {
                    return Err(invalid(format!("{field}.name"), format!("unknown plugin {:?}", r.name)));
                }
                if let Some(w) = r.weight {
                    if w < 0 {
                        return Err(invalid(format!("{field}.weight"), format!("must not be negative, got {w}")));
                    }
                    if w > 100 {
                        return Err(invalid(format!("{field}.weight"), format!("must be at most 100, got {w}")));
                    }
                }
            }
        }
    }
    let defaults: Vec<(String, i64)> = plugins::default_plugins().iter().map(|d| (d.name.to_string(), d.weight)).collect();
    let (multi, _) = merge(&defaults, &plugins_cfg.multi_point);
    // Instantiate each plugin once.
    let mut instances: BTreeMap<String, Arc<dyn Plugin>> = BTreeMap::new();
    let mut instance = |n: &str| -> Result<Arc<dyn Plugin>> {
        if let Some(p) = instances.get(n) {
            return Ok(p.clone());
        }
        let pl = plugins::build(n, args.get(n).copied()).map_err(|m| match p.plugin_config.iter().position(|c| c.name == n) {
            Some(i) => invalid(format!("{path}.pluginConfig[{i}].args"), m),
            None => invalid(format!("{path}.plugins"), format!("plugin {n:?}: {m}")),
        })?;
        instances.insert(n.to_string(), pl.clone());
        Ok(pl)
    };
    let mut seen_multi = HashSet::new();
    for (n, _) in &multi {
        if !seen_multi.insert(n.clone()) {
            return Err(invalid(format!("{path}.plugins.multiPoint.enabled"), format!("plugin {n:?} already registered")));
        }
    }
    // Expand each extension point (upstream expandMultiPointPlugins).
    let mut out: Vec<(Arc<dyn Plugin>, Points, i64)> = Vec::new();
    // One registration per (plugin, point), in each point's order: the
    // framework keeps that order per extension point.
    let mut add = |pl: Arc<dyn Plugin>, pt: Points, w: i64| out.push((pl, pt, w));
    for (pt, ptname) in Points::ALL {
        let (specific, disabled) = merge(&[], plugins_cfg.point(pt));
        let mut seen = HashSet::new();
        for (n, _) in &specific {
            if !seen.insert(n.clone()) {
                return Err(invalid(format!("{path}.plugins.{ptname}.enabled"), format!("plugin {n:?} already registered")));
            }
        }
        let mut list: Vec<(String, i64)> = Vec::new();
        if disabled.contains("*") {
            list = specific.clone();
        } else {
            let mut overrides = Vec::new();
            let mut from_multi = Vec::new();
            for (n, w) in &multi {
                let pl = instance(n)?;
                if !pl.points().has(pt) || disabled.contains(n) {
                    continue;
                }
                if specific.iter().any(|(s, _)| s == n) {
                    overrides.push(n.clone());
                    continue;
                }
                from_multi.push((n.clone(), *w));
            }
            for (n, w) in &specific {
                if overrides.contains(n) {
                    let mw = multi.iter().find(|(m, _)| m == n).map(|x| x.1).unwrap_or(0);
                    list.push((n.clone(), if *w > 0 { *w } else { mw }));
                }
            }
            list.extend(from_multi);
            for (n, w) in &specific {
                if !overrides.contains(n) {
                    list.push((n.clone(), *w));
                }
            }
        }
        for (n, w) in list {
            let pl = instance(&n)?;
            if !pl.points().has(pt) {
                return Err(invalid(format!("{path}.plugins.{ptname}.enabled"), format!("plugin {n:?} does not implement {ptname}")));
            }
            let weight = if pt == Points::SCORE {
                let mw = multi.iter().find(|(m, _)| *m == n).map(|x| x.1).unwrap_or(0);
                if w > 0 { w } else if mw > 0 { mw } else { 1 }
            } else {
                0
            };
            add(pl, pt, weight);
        }
    }
    if !out.iter().any(|e| e.1.has(Points::QUEUE_SORT)) {
        return Err(invalid(format!("{path}.plugins.queueSort"), "one queueSort plugin must be enabled"));
    }
    if !out.iter().any(|e| e.1.has(Points::BIND)) {
        return Err(invalid(format!("{path}.plugins.bind"), "at least one bind plugin must be enabled"));
    }
    Ok(ResolvedProfile { name, percentage: p.percentage_of_nodes_to_score, plugins: out })
}

/// What `berth run` tells an operator whose file names no profile.
const NAME_A_PROFILE: &str = "name at least one profile, e.g. `profiles: [{schedulerName: berth}]` (give it schedulerName: default-scheduler only to replace the cluster's scheduler): without one berth would schedule every default-scheduler pod and race the cluster's own scheduler";

impl Config {
    /// Reads a configuration for `berth run`, refusing what would make berth
    /// silently take every `default-scheduler` pod: an empty file (or
    /// `/dev/null`), a file without `apiVersion` and `kind`, and a file that
    /// names no profile (`profiles: []` or none). Then as [`Config::load`].
    pub fn load_for_scheduler(path: &str) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.into(), source })?;
        Self::parse_for_scheduler(&text).map_err(|e| match e {
            Error::Parse(m) => Error::Parse(format!("{path}: {m}")),
            Error::Invalid { field, message } => Error::Invalid { field: format!("{path}: {field}"), message },
            other => other,
        })
    }

    /// [`Config::load_for_scheduler`] on text.
    pub fn parse_for_scheduler(text: &str) -> Result<Config> {
        let blank = text.lines().map(str::trim).all(|l| l.is_empty() || l.starts_with('#') || l == "---" || l == "...");
        if blank {
            return Err(invalid("(file)", format!("the configuration is empty; write a KubeSchedulerConfiguration with apiVersion: {API_VERSION}, kind: {KIND} and profiles ({NAME_A_PROFILE})")));
        }
        let raw: KubeSchedulerConfiguration = serde_saphyr::from_str(text).map_err(|e| Error::Parse(e.to_string()))?;
        if raw.api_version.is_none() {
            return Err(invalid("apiVersion", format!("missing; a KubeSchedulerConfiguration file starts with apiVersion: {API_VERSION} and kind: {KIND}")));
        }
        if raw.kind.is_none() {
            return Err(invalid("kind", format!("missing; a KubeSchedulerConfiguration file starts with apiVersion: {API_VERSION} and kind: {KIND}")));
        }
        if raw.profiles.is_empty() {
            return Err(invalid("profiles", format!("empty; {NAME_A_PROFILE}")));
        }
        Self::from_raw(raw)
    }
}

#[cfg(test)]
mod tests;
