//! PolicyRule semantics: does a rule allow a request ([`rule_allows`],
//! precompiled as [`CompiledRule`]), do some rules cover others
//! ([`covers`], for escalation checks), and the compact forms upstream
//! prints missing rules in ([`compact_rules`], [`compact_string`]).

use k8s_openapi::api::rbac::v1::PolicyRule;

use super::attributes::Attributes;
use super::message::go_quote_list;

/// `*`: every verb, group, resource or path.
pub const ALL: &str = "*";

fn list(v: &Option<Vec<String>>) -> &[String] {
    v.as_deref().unwrap_or_default()
}

fn has(set: &[String], v: &str) -> bool {
    set.iter().any(|s| s == v)
}

fn verb_matches(rule: &PolicyRule, verb: &str) -> bool {
    rule.verbs.iter().any(|v| v == ALL || v == verb)
}

fn group_matches(rule: &PolicyRule, group: &str) -> bool {
    list(&rule.api_groups).iter().any(|g| g == ALL || g == group)
}

/// `resource` or `resource/subresource` against the rule's resources;
/// `*/subresource` matches that subresource of any resource.
fn resource_matches(rule: &PolicyRule, resource: &str, subresource: &str) -> bool {
    list(&rule.resources).iter().any(|r| {
        if r == ALL {
            return true;
        }
        if subresource.is_empty() {
            return r == resource;
        }
        // resource/subresource, exactly, or */subresource
        r.strip_suffix(subresource).and_then(|head| head.strip_suffix('/')).is_some_and(|head| head == resource || head == ALL)
    })
}

fn name_matches(rule: &PolicyRule, name: &str) -> bool {
    let names = list(&rule.resource_names);
    names.is_empty() || has(names, name)
}

/// `*`, the path exactly, or a prefix ending in `*` (all trailing `*`s
/// trimmed, as upstream's `strings.TrimRight`).
fn url_matches(rule: &PolicyRule, path: &str) -> bool {
    list(&rule.non_resource_urls).iter().any(|u| u == ALL || u == path || (u.ends_with('*') && path.starts_with(u.trim_end_matches('*'))))
}

/// Does `rule` allow the request? Upstream's `RuleAllows`: for a resource
/// request verb, group, `resource[/subresource]` and name (a rule with
/// resourceNames allows only requests on those names, so never a list,
/// watch, create or deletecollection of the collection); for a
/// non-resource request verb and path.
pub fn rule_allows(attrs: &Attributes<'_>, rule: &PolicyRule) -> bool {
    if attrs.resource_request {
        verb_matches(rule, attrs.verb) && group_matches(rule, attrs.api_group) && resource_matches(rule, attrs.resource, attrs.subresource) && name_matches(rule, attrs.name)
    } else {
        verb_matches(rule, attrs.verb) && url_matches(rule, attrs.path)
    }
}

/// Does any of `rules` allow the request?
pub fn rules_allow(attrs: &Attributes<'_>, rules: &[PolicyRule]) -> bool {
    rules.iter().any(|r| rule_allows(attrs, r))
}

/// A list of values with `*` recognised once, at compile time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Set {
    all: bool,
    items: Box<[String]>,
}

impl Set {
    fn new(v: &[String]) -> Self {
        Set { all: has(v, ALL), items: v.iter().filter(|s| *s != ALL).cloned().collect() }
    }

    fn contains(&self, v: &str) -> bool {
        self.all || self.items.iter().any(|s| s == v)
    }
}

/// A non-resource URL pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
enum UrlPattern {
    Exact(String),
    Prefix(String),
}

/// A [`PolicyRule`] prepared for matching: `*` found once, resources split
/// into whole resources, `resource/subresource` pairs and `*/subresource`,
/// URL prefixes trimmed. [`CompiledRule::allows`] agrees with
/// [`rule_allows`] on every request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledRule {
    verbs: Set,
    groups: Set,
    all_resources: bool,
    /// Resources without a subresource.
    resources: Box<[String]>,
    /// `resource/subresource` pairs.
    subresources: Box<[(String, String)]>,
    /// Subresources of any resource (`*/sub`).
    any_subresources: Box<[String]>,
    names: Box<[String]>,
    all_urls: bool,
    urls: Box<[UrlPattern]>,
}

impl CompiledRule {
    /// Prepares `rule`.
    pub fn new(rule: &PolicyRule) -> Self {
        let rs = list(&rule.resources);
        let mut resources = Vec::new();
        let mut subresources = Vec::new();
        let mut any_subresources = Vec::new();
        for r in rs {
            match r.split_once('/') {
                _ if r == ALL => {}
                Some(("*", sub)) => any_subresources.push(sub.to_string()),
                Some((res, sub)) => subresources.push((res.to_string(), sub.to_string())),
                None => resources.push(r.clone()),
            }
        }
        let mut all_urls = false;
        let mut urls = Vec::new();
        for u in list(&rule.non_resource_urls) {
            if u == ALL {
                all_urls = true;
            } else if u.ends_with('*') {
                let prefix = u.trim_end_matches('*');
                if prefix.is_empty() {
                    all_urls = true;
                } else {
                    urls.push(UrlPattern::Prefix(prefix.to_string()));
                }
            } else {
                urls.push(UrlPattern::Exact(u.clone()));
            }
        }
        CompiledRule {
            verbs: Set::new(&rule.verbs),
            groups: Set::new(list(&rule.api_groups)),
            all_resources: has(rs, ALL),
            resources: resources.into(),
            subresources: subresources.into(),
            any_subresources: any_subresources.into(),
            names: list(&rule.resource_names).into(),
            all_urls,
            urls: urls.into(),
        }
    }

    /// Does the rule allow the request? (As [`rule_allows`].)
    #[inline]
    pub fn allows(&self, attrs: &Attributes<'_>) -> bool {
        if !self.verbs.contains(attrs.verb) {
            return false;
        }
        if !attrs.resource_request {
            return self.all_urls
                || self.urls.iter().any(|u| match u {
                    UrlPattern::Exact(p) => p == attrs.path,
                    UrlPattern::Prefix(p) => attrs.path.starts_with(p.as_str()),
                });
        }
        if !self.groups.contains(attrs.api_group) {
            return false;
        }
        let resource_ok = self.all_resources
            || if attrs.subresource.is_empty() {
                self.resources.iter().any(|r| r == attrs.resource)
            } else {
                self.subresources.iter().any(|(r, s)| r == attrs.resource && s == attrs.subresource) || self.any_subresources.iter().any(|s| s == attrs.subresource)
            };
        resource_ok && (self.names.is_empty() || self.names.iter().any(|n| n == attrs.name))
    }
}

/// One atomic piece of a rule: one group, resource, verb and at most one
/// name, or one URL and verb (upstream's `BreakdownRule` output).
#[derive(Clone, Copy, Debug)]
enum Piece<'a> {
    Resource { group: &'a str, resource: &'a str, verb: &'a str, name: Option<&'a str> },
    Url { url: &'a str, verb: &'a str },
}

impl Piece<'_> {
    fn rule(&self) -> PolicyRule {
        let one = |s: &str| Some(vec![s.to_string()]);
        match *self {
            Piece::Resource { group, resource, verb, name } => {
                PolicyRule { api_groups: one(group), resources: one(resource), verbs: vec![verb.to_string()], resource_names: name.and_then(one), non_resource_urls: None }
            }
            Piece::Url { url, verb } => PolicyRule { non_resource_urls: one(url), verbs: vec![verb.to_string()], ..PolicyRule::default() },
        }
    }
}

/// Upstream's `ruleCovers` for an atomic piece.
fn owner_covers(owner: &PolicyRule, piece: &Piece<'_>) -> bool {
    let owner_names = list(&owner.resource_names);
    match *piece {
        Piece::Resource { group, resource, verb, name } => {
            let verb_ok = has(&owner.verbs, ALL) || has(&owner.verbs, verb);
            let groups = list(&owner.api_groups);
            let group_ok = has(groups, ALL) || has(groups, group);
            let resources = list(&owner.resources);
            let resource_ok = has(resources, ALL)
                || has(resources, resource)
                || resource.split_once('/').is_some_and(|(_, sub)| resources.iter().any(|r| r.strip_prefix("*/") == Some(sub)));
            let name_ok = match name {
                None => owner_names.is_empty(),
                Some(n) => owner_names.is_empty() || has(owner_names, n),
            };
            verb_ok && group_ok && resource_ok && name_ok
        }
        Piece::Url { url, verb } => {
            let verb_ok = has(&owner.verbs, ALL) || has(&owner.verbs, verb);
            // An atomic URL piece has no resource names: the owner must have none either.
            let url_ok = list(&owner.non_resource_urls).iter().any(|o| o == url || (o.ends_with('*') && url.starts_with(o.trim_end_matches('*'))));
            verb_ok && url_ok && owner_names.is_empty()
        }
    }
}

/// Calls `f` with every atomic piece of `rule`, in upstream's
/// `BreakdownRule` order (groups, resources, verbs, names; then URLs and
/// verbs), without building them all at once.
fn for_each_piece<'a>(rule: &'a PolicyRule, mut f: impl FnMut(Piece<'a>)) {
    let names = list(&rule.resource_names);
    for group in list(&rule.api_groups) {
        for resource in list(&rule.resources) {
            for verb in &rule.verbs {
                if names.is_empty() {
                    f(Piece::Resource { group, resource, verb, name: None });
                } else {
                    for name in names {
                        f(Piece::Resource { group, resource, verb, name: Some(name) });
                    }
                }
            }
        }
    }
    for url in list(&rule.non_resource_urls) {
        for verb in &rule.verbs {
            f(Piece::Url { url, verb });
        }
    }
}

/// Upstream's `Covers`: do `owner` rules allow everything `servant` rules
/// allow? Returns the atomic rules (one group, resource, verb and at most
/// one name, or one URL and verb) that no owner rule covers.
pub fn covers(owner: &[PolicyRule], servant: &[PolicyRule]) -> (bool, Vec<PolicyRule>) {
    let mut missing = Vec::new();
    for rule in servant {
        for_each_piece(rule, |piece| {
            if !owner.iter().any(|o| owner_covers(o, &piece)) {
                missing.push(piece.rule());
            }
        });
    }
    (missing.is_empty(), missing)
}

/// Upstream's `CompactRules`: rules with exactly one group and one
/// resource and nothing but verbs are merged per (group, resource), their
/// verbs appended in order; other rules are kept as they are, first.
pub fn compact_rules(rules: &[PolicyRule]) -> Vec<PolicyRule> {
    let mut out = Vec::new();
    let mut simple: Vec<PolicyRule> = Vec::new();
    for rule in rules {
        let groups = list(&rule.api_groups);
        let resources = list(&rule.resources);
        let is_simple = list(&rule.resource_names).is_empty() && list(&rule.non_resource_urls).is_empty() && groups.len() == 1 && resources.len() == 1;
        if !is_simple {
            out.push(rule.clone());
            continue;
        }
        match simple.iter_mut().find(|s| list(&s.api_groups) == groups && list(&s.resources) == resources) {
            Some(existing) => existing.verbs.extend(rule.verbs.iter().cloned()),
            None => simple.push(PolicyRule { api_groups: Some(groups.to_vec()), resources: Some(resources.to_vec()), verbs: rule.verbs.clone(), ..PolicyRule::default() }),
        }
    }
    out.extend(simple);
    out
}

/// Upstream's `CompactString`: `{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}`,
/// each list in Go's `%q` form, empty fields left out.
pub fn compact_string(rule: &PolicyRule) -> String {
    let mut parts = Vec::new();
    for (label, values) in [
        ("APIGroups", list(&rule.api_groups)),
        ("Resources", list(&rule.resources)),
        ("NonResourceURLs", list(&rule.non_resource_urls)),
        ("ResourceNames", list(&rule.resource_names)),
        ("Verbs", rule.verbs.as_slice()),
    ] {
        if !values.is_empty() {
            parts.push(format!("{label}:{}", go_quote_list(values)));
        }
    }
    format!("{{{}}}", parts.join(", "))
}

/// Do two rules grant the same, field by field, with a missing list equal
/// to an empty one (apimachinery's `Semantic.DeepEqual`)?
pub fn same_rule(a: &PolicyRule, b: &PolicyRule) -> bool {
    a.verbs == b.verbs
        && list(&a.api_groups) == list(&b.api_groups)
        && list(&a.resources) == list(&b.resources)
        && list(&a.resource_names) == list(&b.resource_names)
        && list(&a.non_resource_urls) == list(&b.non_resource_urls)
}

/// [`same_rule`] over two lists, in order.
pub fn same_rules(a: &[PolicyRule], b: &[PolicyRule]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_rule(x, y))
}

/// A rule builder for tests and the bootstrap policy: `rule(&["get"]).groups(&[""]).resources(&["pods"])`.
pub fn rule(verbs: &[&str]) -> PolicyRule {
    PolicyRule { verbs: strings(verbs), ..PolicyRule::default() }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_string()).collect()
}

/// Fluent setters on [`PolicyRule`] (upstream's `rbacv1helpers.NewRule(...)`).
pub trait RuleBuilder {
    /// API groups.
    fn groups(self, g: &[&str]) -> Self;
    /// Resources.
    fn resources(self, r: &[&str]) -> Self;
    /// Resource names.
    fn names(self, n: &[&str]) -> Self;
    /// Non-resource URLs.
    fn urls(self, u: &[&str]) -> Self;
}

impl RuleBuilder for PolicyRule {
    fn groups(mut self, g: &[&str]) -> Self {
        self.api_groups = Some(strings(g));
        self
    }
    fn resources(mut self, r: &[&str]) -> Self {
        self.resources = Some(strings(r));
        self
    }
    fn names(mut self, n: &[&str]) -> Self {
        self.resource_names = Some(strings(n));
        self
    }
    fn urls(mut self, u: &[&str]) -> Self {
        self.non_resource_urls = Some(strings(u));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rbac::UserInfo;

    /// Cases from upstream's `TestRuleMatches` (rbac_test.go), plus
    /// `*/subresource`, trailing `*` URLs and resource names, each checked
    /// through both [`rule_allows`] and [`CompiledRule::allows`].
    #[test]
    fn rule_matching_table() {
        let u = UserInfo::new("u", &[]);
        let res = |verb: &'static str, group: &'static str, resource: &'static str, sub: &'static str, name: &'static str| Attributes::resource(&u, verb, group, resource).subresource(sub).named(name);
        let url = |verb: &'static str, path: &'static str| Attributes::non_resource(&u, verb, path);
        let cases: Vec<(&str, PolicyRule, Vec<Attributes<'_>>, Vec<Attributes<'_>>)> = vec![
            (
                "star verb, exact match other",
                rule(&["*"]).groups(&["group1"]).resources(&["resource1"]),
                vec![res("get", "group1", "resource1", "", ""), res("watch", "group1", "resource1", "", ""), res("update", "group1", "resource1", "", "")],
                vec![res("get", "group2", "resource1", "", ""), res("get", "group1", "resource2", "", ""), res("get", "group1", "resource1", "sub", "")],
            ),
            (
                "star group, exact match other",
                rule(&["get"]).groups(&["*"]).resources(&["resource1"]),
                vec![res("get", "group1", "resource1", "", ""), res("get", "", "resource1", "", "")],
                vec![res("get", "group1", "resource2", "", ""), res("list", "group1", "resource1", "", "")],
            ),
            (
                "star resource, exact match other",
                rule(&["get"]).groups(&["group1"]).resources(&["*"]),
                vec![res("get", "group1", "resource1", "", ""), res("get", "group1", "resource1", "sub", "")],
                vec![res("get", "group2", "resource1", "", ""), res("put", "group1", "resource1", "", "")],
            ),
            (
                "tuple expansion",
                rule(&["get", "put"]).groups(&["group1", "group2"]).resources(&["resource1", "resource2"]),
                vec![res("get", "group1", "resource1", "", ""), res("put", "group2", "resource2", "", ""), res("get", "group2", "resource1", "", "")],
                vec![res("get", "group3", "resource1", "", ""), res("delete", "group1", "resource1", "", "")],
            ),
            (
                "subresource expansion",
                rule(&["*"]).groups(&["*"]).resources(&["resource1/subresource1"]),
                vec![res("get", "group1", "resource1", "subresource1", "")],
                vec![res("get", "group1", "resource1", "", ""), res("get", "group1", "resource1", "subresource2", ""), res("get", "group1", "resource2", "subresource1", "")],
            ),
            (
                "star subresource",
                rule(&["get"]).groups(&[""]).resources(&["*/status"]),
                vec![res("get", "", "pods", "status", ""), res("get", "", "nodes", "status", "n")],
                vec![res("get", "", "pods", "", ""), res("get", "", "pods", "binding", ""), res("get", "", "pods", "xstatus", "")],
            ),
            (
                "star nonresource, exact match other",
                rule(&["get"]).urls(&["*"]),
                vec![url("get", "/foo"), url("get", "/foo/bar"), url("get", "/")],
                vec![url("put", "/foo")],
            ),
            (
                "star nonresource subpath",
                rule(&["get"]).urls(&["/foo/*"]),
                vec![url("get", "/foo/"), url("get", "/foo/bar"), url("get", "/foo/bar/baz")],
                vec![url("get", "/foo"), url("get", "/food"), url("get", "/bar")],
            ),
            (
                "star verb, exact nonresource",
                rule(&["*"]).urls(&["/foo", "/foo/bar/one"]),
                vec![url("get", "/foo"), url("put", "/foo/bar/one")],
                vec![url("get", "/foo/bar"), url("get", "/foo/bar/one/two"), url("get", "/foo2")],
            ),
            (
                "resource names",
                rule(&["get", "list", "update"]).groups(&[""]).resources(&["configmaps"]).names(&["cm"]),
                vec![res("get", "", "configmaps", "", "cm"), res("update", "", "configmaps", "", "cm")],
                vec![res("get", "", "configmaps", "", "other"), res("list", "", "configmaps", "", ""), res("get", "", "configmaps", "", "")],
            ),
            (
                "a resource rule never allows a path",
                rule(&["*"]).groups(&["*"]).resources(&["*"]),
                vec![res("delete", "apps", "deployments", "scale", "d")],
                vec![url("get", "/healthz")],
            ),
            ("a path rule never allows a resource", rule(&["*"]).urls(&["*"]), vec![url("post", "/x")], vec![res("get", "", "pods", "", "")]),
        ];
        for (name, r, allowed, denied) in cases {
            let c = CompiledRule::new(&r);
            for a in &allowed {
                assert!(rule_allows(a, &r), "{name}: should allow {a:?}");
                assert!(c.allows(a), "{name}: compiled should allow {a:?}");
            }
            for a in &denied {
                assert!(!rule_allows(a, &r), "{name}: should deny {a:?}");
                assert!(!c.allows(a), "{name}: compiled should deny {a:?}");
            }
        }
    }

    /// Cases from upstream's `TestCoversExactMatch` and friends
    /// (policy_comparator_test.go).
    #[test]
    fn covers_table() {
        /// (name, owner rules, servant rules, the atomic rules not covered)
        type Case = (&'static str, Vec<PolicyRule>, Vec<PolicyRule>, Vec<PolicyRule>);
        let cases: Vec<Case> = vec![
            ("exact match", vec![rule(&["get"]).groups(&["v1"]).resources(&["builds"])], vec![rule(&["get"]).groups(&["v1"]).resources(&["builds"])], vec![]),
            (
                "sub-resources need explicit covering",
                vec![rule(&["get"]).groups(&["v1"]).resources(&["builds"])],
                vec![rule(&["get"]).groups(&["v1"]).resources(&["builds/status"])],
                vec![rule(&["get"]).groups(&["v1"]).resources(&["builds/status"])],
            ),
            ("star sub-resource covers", vec![rule(&["get"]).groups(&["v1"]).resources(&["*/status"])], vec![rule(&["get"]).groups(&["v1"]).resources(&["builds/status"])], vec![]),
            (
                "multiple rules",
                vec![rule(&["get"]).groups(&["v1"]).resources(&["builds"]), rule(&["list"]).groups(&["v1"]).resources(&["builds"])],
                vec![rule(&["get", "list"]).groups(&["v1"]).resources(&["builds"])],
                vec![],
            ),
            (
                "verb star",
                vec![rule(&["*"]).groups(&["v1"]).resources(&["builds"])],
                vec![rule(&["get", "delete"]).groups(&["v1"]).resources(&["builds"]), rule(&["create"]).groups(&["v1"]).resources(&["pods"])],
                vec![rule(&["create"]).groups(&["v1"]).resources(&["pods"])],
            ),
            ("resource star", vec![rule(&["get"]).groups(&["v1"]).resources(&["*"])], vec![rule(&["get"]).groups(&["v1"]).resources(&["builds", "pods/status"])], vec![]),
            (
                "resource names: owner with names does not cover the whole resource",
                vec![rule(&["get"]).groups(&["v1"]).resources(&["builds"]).names(&["foo"])],
                vec![rule(&["get"]).groups(&["v1"]).resources(&["builds"])],
                vec![rule(&["get"]).groups(&["v1"]).resources(&["builds"])],
            ),
            (
                "resource names: owner without names covers named",
                vec![rule(&["get"]).groups(&["v1"]).resources(&["builds"])],
                vec![rule(&["get"]).groups(&["v1"]).resources(&["builds"]).names(&["foo", "bar"])],
                vec![],
            ),
            (
                "resource names: partial",
                vec![rule(&["get"]).groups(&["v1"]).resources(&["builds"]).names(&["foo"])],
                vec![rule(&["get"]).groups(&["v1"]).resources(&["builds"]).names(&["foo", "bar"])],
                vec![rule(&["get"]).groups(&["v1"]).resources(&["builds"]).names(&["bar"])],
            ),
            ("urls: star covers", vec![rule(&["get"]).urls(&["*"])], vec![rule(&["get"]).urls(&["/api", "/apis/x"])], vec![]),
            ("urls: prefix covers", vec![rule(&["get"]).urls(&["/api/*"])], vec![rule(&["get"]).urls(&["/api/v1", "/api"])], vec![rule(&["get"]).urls(&["/api"])]),
            (
                "urls: resources do not cover urls",
                vec![rule(&["*"]).groups(&["*"]).resources(&["*"])],
                vec![rule(&["get"]).urls(&["/healthz"])],
                vec![rule(&["get"]).urls(&["/healthz"])],
            ),
            ("no api groups means nothing to cover", vec![], vec![rule(&["get"]).resources(&["pods"])], vec![]),
        ];
        for (name, owner, servant, want) in cases {
            let (ok, missing) = covers(&owner, &servant);
            assert_eq!(ok, want.is_empty(), "{name}");
            assert!(same_rules(&missing, &want), "{name}: missing {missing:?}, want {want:?}");
        }
    }

    #[test]
    fn compact_forms() {
        let missing = vec![
            rule(&["get"]).groups(&[""]).resources(&["pods"]),
            rule(&["get"]).urls(&["/x"]),
            rule(&["list"]).groups(&[""]).resources(&["pods"]),
            rule(&["get"]).groups(&["apps"]).resources(&["deployments"]).names(&["d"]),
        ];
        let compact: Vec<String> = compact_rules(&missing).iter().map(compact_string).collect();
        assert_eq!(
            compact,
            [
                r#"{NonResourceURLs:["/x"], Verbs:["get"]}"#,
                r#"{APIGroups:["apps"], Resources:["deployments"], ResourceNames:["d"], Verbs:["get"]}"#,
                r#"{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}"#,
            ]
        );
    }
}
