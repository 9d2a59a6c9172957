//! KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1): parsing,
//! upstream defaults and validation by the file's own rules.
//!
//! This module knows no plugin. Checking plugin names and args against the
//! registry, and building frameworks, is [`crate::profile`]'s job (upstream's
//! `pkg/scheduler/profile`); the constructors of [`Config`] (`Config::load`,
//! `Config::parse`, `Config::from_raw`, ...) live there, so that a
//! configuration naming an unknown plugin is still refused when it is read.
//!
//! A bad file is refused with one message naming the field (and, for syntax
//! and type errors, the line).

use std::collections::HashSet;
use std::time::Duration;

use serde::Deserialize;
use thiserror::Error;

/// Why a configuration was refused.
#[derive(Debug, Error)]
pub enum Error {
    /// The file could not be read.
    #[error("reading {path}")]
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

/// An [`Error::Invalid`] at `field`.
pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Error {
    Error::Invalid { field: field.into(), message: message.into() }
}

impl Error {
    /// The error as reported for the file at `path` (its name before the line or field).
    pub(crate) fn in_file(self, path: &str) -> Error {
        match self {
            // The parser calls the text `<input>`: call it by its file's name.
            Error::Parse(m) => Error::Parse(format!("{path}: {}", m.replace("<input>", path))),
            Error::Invalid { field, message } => Error::Invalid { field: format!("{path}: {field}"), message },
            other => other,
        }
    }
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

/// A configuration validated by the file's own rules and by the plugin
/// registry: built only by the constructors in [`crate::profile`]
/// (`Config::load`, `Config::parse`, `Config::load_for_scheduler`,
/// `Config::parse_for_scheduler`, `Config::from_raw`, `Config::default_config`).
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
    /// The profiles as validated, each with its schedulerName (defaulted).
    profiles: Vec<(String, Profile)>,
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

/// Reads a configuration file's text.
pub(crate) fn read(path: &str) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.into(), source })
}

/// Parses configuration text (YAML or JSON), without validating it.
pub(crate) fn parse_raw(text: &str) -> Result<KubeSchedulerConfiguration> {
    serde_saphyr::from_str(text).map_err(|e| {
        let m = e.to_string();
        // The YAML parser names the line, not always the field ("invalid
        // i32"): find the field by reading the text again through a path tracker.
        match field_path(text) {
            Some(path) if !m.starts_with(&path) => Error::Parse(format!("{path}: {m}")),
            _ => Error::Parse(m),
        }
    })
}

/// The path (`profiles[0].percentageOfNodesToScore`) of the field that does
/// not fit the configuration's types, when the text is YAML at all.
fn field_path(text: &str) -> Option<String> {
    let v: serde_json::Value = serde_saphyr::from_str(text).ok()?;
    let e = serde_path_to_error::deserialize::<_, KubeSchedulerConfiguration>(v).err()?;
    let path = e.path().to_string();
    (path != ".").then_some(path)
}

impl Config {
    /// Validates a parsed configuration by the file's own rules, handing each
    /// profile (with its schedulerName and field path) to `resolve` in file
    /// order, so that the first fault in the file is the one reported
    /// whichever of the two finds it. The constructors in [`crate::profile`]
    /// resolve plugins against the registry here.
    pub(crate) fn validate<R>(mut raw: KubeSchedulerConfiguration, mut resolve: impl FnMut(&Profile, &str, &str) -> Result<R>) -> Result<(Config, Vec<R>)> {
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
        let mut resolved = Vec::new();
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
            resolved.push(resolve(p, &name, &path)?);
            profiles.push((name, p.clone()));
        }
        let config = Config {
            raw,
            pod_initial_backoff: Duration::from_secs(initial as u64),
            pod_max_backoff: Duration::from_secs(max as u64),
            lease_duration,
            renew_deadline,
            retry_period,
            profiles,
        };
        Ok((config, resolved))
    }

    /// Upstream's defaults with no profile: what `Config::default_config`
    /// falls back to should the defaults not resolve (they always do).
    pub(crate) fn without_profiles() -> Config {
        Config {
            raw: KubeSchedulerConfiguration::default(),
            pod_initial_backoff: Duration::from_secs(1),
            pod_max_backoff: Duration::from_secs(10),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            profiles: vec![],
        }
    }

    /// Profile names in order.
    pub fn profile_names(&self) -> Vec<String> {
        self.profiles.iter().map(|p| p.0.clone()).collect()
    }

    /// The profiles as validated, in order: schedulerName and profile.
    pub fn profiles(&self) -> &[(String, Profile)] {
        &self.profiles
    }

}

/// What `berth run` tells an operator whose file names no profile.
const NAME_A_PROFILE: &str = "name at least one profile, e.g. `profiles: [{schedulerName: berth}]` (give it schedulerName: default-scheduler only to replace the cluster's scheduler): without one berth would schedule every default-scheduler pod and race the cluster's own scheduler";

/// Parses configuration text for `berth run`, refusing what would make berth
/// silently take every `default-scheduler` pod (see `Config::load_for_scheduler`
/// in [`crate::profile`]), without validating it further.
pub(crate) fn parse_raw_for_scheduler(text: &str) -> Result<KubeSchedulerConfiguration> {
    let blank = text.lines().map(str::trim).all(|l| l.is_empty() || l.starts_with('#') || l == "---" || l == "...");
    if blank {
        return Err(invalid("(file)", format!("the configuration is empty; write a KubeSchedulerConfiguration with apiVersion: {API_VERSION}, kind: {KIND} and profiles ({NAME_A_PROFILE})")));
    }
    let raw = parse_raw(text)?;
    if raw.api_version.is_none() {
        return Err(invalid("apiVersion", format!("missing; a KubeSchedulerConfiguration file starts with apiVersion: {API_VERSION} and kind: {KIND}")));
    }
    if raw.kind.is_none() {
        return Err(invalid("kind", format!("missing; a KubeSchedulerConfiguration file starts with apiVersion: {API_VERSION} and kind: {KIND}")));
    }
    if raw.profiles.is_empty() {
        return Err(invalid("profiles", format!("empty; {NAME_A_PROFILE}")));
    }
    Ok(raw)
}

#[cfg(test)]
mod tests;
