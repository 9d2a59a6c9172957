//! Profiles: a validated configuration's profiles resolved against the plugin
//! registry, and one [`Framework`] built per profile (upstream's
//! `pkg/scheduler/profile`, whose `NewMap` calls `frameworkruntime.NewFramework`
//! with the registry and each profile's config).
//!
//! [`crate::config`] parses the file and checks its own rules; it knows no
//! plugin. The constructors of [`Config`] are here because refusing a file
//! that names an unknown plugin, gives a plugin bad args or enables a plugin
//! at a point it does not implement needs the registry: `Config::load`,
//! `Config::parse`, `Config::load_for_scheduler`, `Config::parse_for_scheduler`,
//! `Config::from_raw` and `Config::default_config` validate the file by its
//! own rules and resolve every profile, in file order, so the first fault is
//! the one reported, with the same message as before. A [`Config`] is thus
//! always resolvable; [`Profiles::new`] resolves it again to build
//! frameworks, and [`frameworks`] is the short way.
//!
//! Errors are [`crate::config::Error`]s: a profile is part of the file, and
//! callers match one type whichever module refused it.

use std::collections::{BTreeMap, HashSet};

use crate::config::{invalid, parse_raw, parse_raw_for_scheduler, read, Config, KubeSchedulerConfiguration, PluginSet, Plugins, Profile, Result};
use crate::framework::{Framework, PluginEntry, Points, Registered};
use crate::plugins;

/// One profile resolved against the registry.
#[derive(Clone)]
struct Resolved {
    name: String,
    percentage: Option<i32>,
    /// (plugin, point, weight) registrations, in each point's order.
    plugins: Vec<(Registered, Points, i64)>,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved").field("name", &self.name).field("plugins", &self.plugins.iter().map(|p| p.0.name()).collect::<Vec<_>>()).finish()
    }
}

/// A configuration's profiles, each with its plugins built from their args
/// and registered at the extension points the profile enables: what
/// frameworks are built from. Frameworks built from one `Profiles` share the
/// plugin instances.
#[derive(Clone, Debug)]
pub struct Profiles {
    profiles: Vec<Resolved>,
    /// The global percentageOfNodesToScore (a profile's own overrides it).
    percentage: Option<i32>,
}

impl Profiles {
    /// Resolves `config`'s profiles against the plugin registry (upstream
    /// `profile.NewMap`).
    pub fn new(config: &Config) -> Profiles {
        let resolved: Result<Vec<Resolved>> = config.profiles().iter().enumerate().map(|(i, (name, p))| resolve_profile(p, name, &format!("profiles[{i}]"))).collect();
        Profiles {
            // A Config is only built once its profiles resolved (see the
            // constructors below), and resolving is deterministic: the
            // empty arm is never taken.
            profiles: resolved.unwrap_or_default(),
            percentage: config.raw.percentage_of_nodes_to_score,
        }
    }

    /// Profile names in order.
    pub fn names(&self) -> Vec<String> {
        self.profiles.iter().map(|p| p.name.clone()).collect()
    }

    /// Builds one framework per profile, in configuration order.
    pub fn frameworks(&self, seed: u64) -> Vec<Framework> {
        self.profiles
            .iter()
            .map(|p| {
                let pct = p.percentage.or(self.percentage).filter(|x| *x > 0);
                let entries = p.plugins.iter().map(|(pl, pts, w)| (PluginEntry { plugin: pl.clone(), weight: *w }, *pts)).collect();
                Framework::new(p.name.clone(), entries, pct, seed)
            })
            .collect()
    }
}

/// One framework per profile of `config`, in configuration order.
pub fn frameworks(config: &Config, seed: u64) -> Vec<Framework> {
    Profiles::new(config).frameworks(seed)
}

/// Validates a parsed configuration by the file's rules and resolves its
/// profiles against the registry.
fn resolve(raw: KubeSchedulerConfiguration) -> Result<(Config, Vec<Resolved>)> {
    let (config, profiles) = Config::validate(raw, resolve_profile)?;
    // Every profile must sort the queue the same way (one queue).
    let qs = |p: &Resolved| p.plugins.iter().find(|x| x.1.has(Points::QUEUE_SORT)).map(|x| x.0.name());
    if let Some(first) = profiles.first() {
        let q0 = qs(first);
        for (i, p) in profiles.iter().enumerate().skip(1) {
            if qs(p) != q0 {
                return Err(invalid(format!("profiles[{i}].plugins.queueSort"), "queueSort must be the same for all profiles"));
            }
        }
    }
    Ok((config, profiles))
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: &str) -> Result<Config> {
        let text = read(path)?;
        Self::parse(&text).map_err(|e| e.in_file(path))
    }

    /// Parses and validates configuration text (YAML or JSON).
    pub fn parse(text: &str) -> Result<Config> {
        Self::from_raw(parse_raw(text)?)
    }

    /// Reads a configuration for `berth run`, refusing what would make berth
    /// silently take every `default-scheduler` pod: an empty file (or
    /// `/dev/null`), a file without `apiVersion` and `kind`, and a file that
    /// names no profile (`profiles: []` or none). Then as [`Config::load`].
    pub fn load_for_scheduler(path: &str) -> Result<Config> {
        let text = read(path)?;
        Self::parse_for_scheduler(&text).map_err(|e| e.in_file(path))
    }

    /// [`Config::load_for_scheduler`] on text.
    pub fn parse_for_scheduler(text: &str) -> Result<Config> {
        Self::from_raw(parse_raw_for_scheduler(text)?)
    }

    /// Upstream defaults, one profile "default-scheduler".
    pub fn default_config() -> Config {
        match Self::from_raw(KubeSchedulerConfiguration::default()) {
            Ok(c) => c,
            // The defaults are valid by construction; this arm is never taken.
            Err(_) => Config::without_profiles(),
        }
    }

    /// Validates a parsed configuration and resolves its profiles against
    /// the plugin registry.
    pub fn from_raw(raw: KubeSchedulerConfiguration) -> Result<Config> {
        resolve(raw).map(|(config, _)| config)
    }
}

/// The extension point's plugin set (post_bind for any other point).
fn set_at(plugins: &Plugins, p: Points) -> &PluginSet {
    match p {
        Points::PRE_ENQUEUE => &plugins.pre_enqueue,
        Points::QUEUE_SORT => &plugins.queue_sort,
        Points::PRE_FILTER => &plugins.pre_filter,
        Points::FILTER => &plugins.filter,
        Points::POST_FILTER => &plugins.post_filter,
        Points::PRE_SCORE => &plugins.pre_score,
        Points::SCORE => &plugins.score,
        Points::RESERVE => &plugins.reserve,
        Points::PERMIT => &plugins.permit,
        Points::PRE_BIND => &plugins.pre_bind,
        Points::BIND => &plugins.bind,
        _ => &plugins.post_bind,
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

fn resolve_profile(p: &Profile, name: &str, path: &str) -> Result<Resolved> {
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
        let set = if pt.0 == 0 { &plugins_cfg.multi_point } else { set_at(&plugins_cfg, pt) };
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
    let mut instances: BTreeMap<String, Registered> = BTreeMap::new();
    let mut instance = |n: &str| -> Result<Registered> {
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
    let mut out: Vec<(Registered, Points, i64)> = Vec::new();
    // One registration per (plugin, point), in each point's order: the
    // framework keeps that order per extension point.
    let mut add = |pl: Registered, pt: Points, w: i64| out.push((pl, pt, w));
    for (pt, ptname) in Points::ALL {
        let (specific, disabled) = merge(&[], set_at(&plugins_cfg, pt));
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
    Ok(Resolved { name: name.to_string(), percentage: p.percentage_of_nodes_to_score, plugins: out })
}

#[cfg(test)]
mod tests;
