//! Delegated authentication and authorization for components of the local
//! cluster (a scheduler's secure port): `authentication.k8s.io/v1`
//! TokenReview against static tokens (as kube-apiserver's
//! `--token-auth-file`), and `authorization.k8s.io/v1` SubjectAccessReview
//! against a list of rules (a small RBAC: subjects, verbs, non-resource
//! URLs, resources). By default no token is known and only the group
//! `system:masters` is allowed everything.
//!
//! The API itself is still served without authentication; only the two
//! review endpoints use this.

use serde_json::{Value, json};

/// Why a review request was refused (a 400 or 422 for the client).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request cannot be decoded or lacks a required field.
    #[error("{0}")]
    BadRequest(String),
    /// The request is well-formed but invalid (upstream's 422 Invalid).
    #[error("{kind} is invalid: {field}: {message}")]
    Invalid {
        /// TokenReview or SubjectAccessReview.
        kind: &'static str,
        /// The field.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A line of a token file is malformed.
    #[error("token file line {line}: {message}")]
    TokenFile {
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// One static bearer token and the user it authenticates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticToken {
    /// The bearer token.
    pub token: String,
    /// The user name.
    pub user: String,
    /// The user's uid.
    pub uid: String,
    /// The user's groups.
    pub groups: Vec<String>,
}

impl StaticToken {
    /// A token for `user` in `groups` (uid = user).
    pub fn new(token: &str, user: &str, groups: &[&str]) -> Self {
        StaticToken { token: token.into(), user: user.into(), uid: user.into(), groups: groups.iter().map(|g| (*g).to_string()).collect() }
    }

    /// Parses kube-apiserver's `--token-auth-file` format: one
    /// `token,user,uid[,"group1,group2"]` per line; `#` comments and blank
    /// lines are skipped.
    pub fn parse_file(text: &str) -> Result<Vec<StaticToken>, Error> {
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |m: &str| Error::TokenFile { line: i + 1, message: m.to_string() };
            let (fields, groups) = match line.split_once(",\"") {
                Some((head, g)) => (head, g.strip_suffix('"').ok_or_else(|| bad("unterminated quoted group list"))?),
                None => (line, ""),
            };
            let f: Vec<&str> = fields.splitn(4, ',').map(str::trim).collect();
            if f.len() < 3 {
                return Err(bad("want token,user,uid[,\"group1,group2\"]"));
            }
            if f[0].is_empty() || f[1].is_empty() {
                return Err(bad("the token and the user must not be empty"));
            }
            let mut gs: Vec<String> = groups.split(',').map(str::trim).filter(|g| !g.is_empty()).map(String::from).collect();
            if let Some(g) = f.get(3) {
                gs.extend(g.split(',').map(str::trim).filter(|g| !g.is_empty()).map(String::from));
            }
            out.push(StaticToken { token: f[0].into(), user: f[1].into(), uid: f[2].into(), groups: gs });
        }
        Ok(out)
    }
}

/// One authorization rule: any of `users` or `groups` may do any of `verbs`
/// on any of `non_resource_urls` (a trailing `*` matches a prefix) and on
/// any of `resources` (`resource` or `resource.group`). `*` matches all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthRule {
    /// User names.
    pub users: Vec<String>,
    /// Group names.
    pub groups: Vec<String>,
    /// Verbs (`get`, `create`, ...).
    pub verbs: Vec<String>,
    /// Non-resource paths.
    pub non_resource_urls: Vec<String>,
    /// Resources.
    pub resources: Vec<String>,
}

impl AuthRule {
    /// Everything, for `group`.
    pub fn allow_group(group: &str) -> Self {
        AuthRule { users: vec![], groups: vec![group.into()], verbs: vec!["*".into()], non_resource_urls: vec!["*".into()], resources: vec!["*".into()] }
    }

    /// `verbs` on the non-resource `paths`, for `user`.
    pub fn user_paths(user: &str, verbs: &[&str], paths: &[&str]) -> Self {
        AuthRule {
            users: vec![user.into()],
            groups: vec![],
            verbs: verbs.iter().map(|v| (*v).to_string()).collect(),
            non_resource_urls: paths.iter().map(|p| (*p).to_string()).collect(),
            resources: vec![],
        }
    }

    fn subject(&self, user: &str, groups: &[String]) -> bool {
        self.users.iter().any(|u| u == "*" || u == user) || self.groups.iter().any(|g| g == "*" || groups.contains(g))
    }
}

/// The cluster's authentication and authorization data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthConfig {
    /// Static bearer tokens.
    pub tokens: Vec<StaticToken>,
    /// Authorization rules; a request is allowed when one matches.
    pub rules: Vec<AuthRule>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig { tokens: vec![], rules: vec![AuthRule::allow_group("system:masters")] }
    }
}

fn matches_any(list: &[String], v: &str) -> bool {
    list.iter().any(|x| x == "*" || x == v)
}

fn path_matches(list: &[String], path: &str) -> bool {
    list.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => p == path,
    })
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(*k)).and_then(Value::as_str)
}

impl AuthConfig {
    /// Answers a TokenReview (the request object, answered with its status).
    pub fn token_review(&self, req: &Value) -> Result<Value, Error> {
        let token = str_at(req, &["spec", "token"]).unwrap_or_default();
        if token.is_empty() {
            return Err(Error::BadRequest("token is required for TokenReview in authentication".into()));
        }
        let mut out = json!({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1", "metadata": {"creationTimestamp": null}, "spec": req.get("spec").cloned().unwrap_or(Value::Null)});
        out["status"] = match self.tokens.iter().find(|t| t.token == token) {
            Some(t) => json!({"authenticated": true, "user": {"username": t.user, "uid": t.uid, "groups": t.groups}}),
            None => json!({"user": {}}),
        };
        Ok(out)
    }

    /// Answers a SubjectAccessReview.
    pub fn subject_access_review(&self, req: &Value) -> Result<Value, Error> {
        let spec = req.get("spec").cloned().unwrap_or(Value::Null);
        let user = str_at(&spec, &["user"]).unwrap_or_default();
        let groups: Vec<String> = spec.get("groups").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect()).unwrap_or_default();
        let invalid = |field, message: &str| Error::Invalid { kind: "SubjectAccessReview", field, message: message.to_string() };
        if user.is_empty() && groups.is_empty() {
            return Err(invalid("spec.user", "at least one of user or group must be specified"));
        }
        let nra = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
        let ra = spec.get("resourceAttributes").filter(|v| !v.is_null());
        let allowed = match (nra, ra) {
            (Some(n), None) => {
                let verb = str_at(n, &["verb"]).unwrap_or_default();
                let path = str_at(n, &["path"]).unwrap_or_default();
                self.rules.iter().any(|r| r.subject(user, &groups) && matches_any(&r.verbs, verb) && path_matches(&r.non_resource_urls, path))
            }
            (None, Some(a)) => {
                let verb = str_at(a, &["verb"]).unwrap_or_default();
                let resource = str_at(a, &["resource"]).unwrap_or_default();
                let group = str_at(a, &["group"]).unwrap_or_default();
                let qualified = if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") };
                self.rules.iter().any(|r| r.subject(user, &groups) && matches_any(&r.verbs, verb) && (matches_any(&r.resources, resource) || matches_any(&r.resources, &qualified)))
            }
            _ => return Err(invalid("spec.resourceAttributes", "exactly one of nonResourceAttributes or resourceAttributes must be specified")),
        };
        let mut out = json!({"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1", "metadata": {"creationTimestamp": null}, "spec": spec});
        out["status"] = if allowed { json!({"allowed": true, "reason": "allowed by the local cluster's rules"}) } else { json!({"allowed": false}) };
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn sar(user: &str, groups: &[&str], verb: &str, path: &str) -> Value {
        json!({"spec": {"user": user, "groups": groups, "nonResourceAttributes": {"verb": verb, "path": path}}})
    }

    #[test]
    fn tokens_authenticate_their_user_only() {
        let c = AuthConfig { tokens: vec![StaticToken::new("t1", "alice", &["ops"])], ..AuthConfig::default() };
        let ok = c.token_review(&json!({"spec": {"token": "t1"}})).unwrap();
        assert_eq!(ok["status"]["authenticated"], true);
        assert_eq!(ok["status"]["user"]["username"], "alice");
        assert_eq!(ok["status"]["user"]["groups"], json!(["ops"]));
        let no = c.token_review(&json!({"spec": {"token": "t2"}})).unwrap();
        assert_eq!(no["status"].get("authenticated"), None);
        assert!(matches!(c.token_review(&json!({"spec": {}})), Err(Error::BadRequest(_))));
    }

    #[test]
    fn masters_allowed_others_by_rule() {
        let c = AuthConfig { tokens: vec![], rules: vec![AuthRule::allow_group("system:masters"), AuthRule::user_paths("prom", &["get"], &["/metrics"])] };
        let allowed = |v: Value| c.subject_access_review(&v).unwrap()["status"]["allowed"] == true;
        assert!(allowed(sar("root", &["system:masters"], "get", "/debug/explain")));
        assert!(allowed(sar("prom", &[], "get", "/metrics")));
        assert!(!allowed(sar("prom", &[], "get", "/debug/explain")));
        assert!(!allowed(sar("prom", &[], "post", "/metrics")));
        assert!(!allowed(sar("system:anonymous", &["system:unauthenticated"], "get", "/metrics")));
        let e = c.subject_access_review(&json!({"spec": {"nonResourceAttributes": {"verb": "get", "path": "/"}}})).unwrap_err();
        assert!(e.to_string().contains("at least one of user or group"), "{e}");
        let e = c.subject_access_review(&json!({"spec": {"user": "x"}})).unwrap_err();
        assert!(e.to_string().contains("exactly one of"), "{e}");
        let r = json!({"spec": {"user": "x", "groups": ["system:masters"], "resourceAttributes": {"verb": "list", "resource": "pods"}}});
        assert!(allowed(r));
    }

    #[test]
    fn token_file_format() {
        let t = StaticToken::parse_file("# comment\nabc,alice,1,\"g1,g2\"\n\ndef,bob,2\n").unwrap();
        assert_eq!(t, vec![StaticToken { token: "abc".into(), user: "alice".into(), uid: "1".into(), groups: vec!["g1".into(), "g2".into()] }, StaticToken { token: "def".into(), user: "bob".into(), uid: "2".into(), groups: vec![] }]);
        assert!(StaticToken::parse_file("abc,alice").is_err());
        assert!(StaticToken::parse_file("abc,alice,1,\"g1").is_err());
    }
}
