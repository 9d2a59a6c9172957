//! Who asks ([`UserInfo`]) and what for ([`Attributes`]), and the
//! attributes of an HTTP request ([`RequestInfo`], upstream's
//! `RequestInfoFactory.NewRequestInfo` in
//! `apiserver/pkg/endpoints/request/requestinfo.go`).

use std::collections::BTreeMap;

use super::{ALL_AUTHENTICATED, ALL_SERVICE_ACCOUNTS, ALL_UNAUTHENTICATED, ANONYMOUS, SERVICE_ACCOUNT_USER_PREFIX, SYSTEM_MASTERS};

/// Why a request's attributes could not be determined.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A `watch` or `proxy` path with nothing after the verb
    /// (upstream answers 500 "failed to create RequestInfo").
    #[error("unable to determine kind and namespace from url, {0}")]
    Unparseable(String),
}

/// An authenticated (or anonymous) user: `user.Info`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// The user name (`system:serviceaccount:NS:NAME` for a service account).
    pub name: String,
    /// The user's uid.
    pub uid: String,
    /// The user's groups.
    pub groups: Vec<String>,
    /// Extra authenticator data.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user named `name` in `groups` (no uid, no extra).
    pub fn new(name: &str, groups: &[&str]) -> Self {
        UserInfo { name: name.into(), groups: groups.iter().map(|g| (*g).to_string()).collect(), ..UserInfo::default() }
    }

    /// The anonymous user: `system:anonymous` in `system:unauthenticated`.
    pub fn anonymous() -> Self {
        UserInfo::new(ANONYMOUS, &[ALL_UNAUTHENTICATED])
    }

    /// A service account's user as its token authenticates it: named
    /// `system:serviceaccount:NS:NAME`, in `system:serviceaccounts`,
    /// `system:serviceaccounts:NS` and `system:authenticated`.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        UserInfo {
            name: service_account_user(namespace, name),
            groups: vec![ALL_SERVICE_ACCOUNTS.into(), format!("{ALL_SERVICE_ACCOUNTS}:{namespace}"), ALL_AUTHENTICATED.into()],
            ..UserInfo::default()
        }
    }

    /// Is the user in `system:masters` (allowed everything, escalation included)?
    pub fn is_privileged(&self) -> bool {
        self.in_group(SYSTEM_MASTERS)
    }

    /// Is the user in `group`?
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

impl UserInfo {
    /// The user a SubjectAccessReview's spec names (`user`, `uid`,
    /// `groups`, `extra`).
    pub fn from_review_spec(spec: &serde_json::Value) -> UserInfo {
        let strings = |v: Option<&serde_json::Value>| -> Vec<String> { v.and_then(serde_json::Value::as_array).map(|a| a.iter().filter_map(serde_json::Value::as_str).map(String::from).collect()).unwrap_or_default() };
        UserInfo {
            name: spec.get("user").and_then(serde_json::Value::as_str).unwrap_or_default().to_string(),
            uid: spec.get("uid").and_then(serde_json::Value::as_str).unwrap_or_default().to_string(),
            groups: strings(spec.get("groups")),
            extra: spec.get("extra").and_then(serde_json::Value::as_object).map(|m| m.iter().map(|(k, v)| (k.clone(), strings(Some(v)))).collect()).unwrap_or_default(),
        }
    }
}

/// `system:serviceaccount:NS:NAME`.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("{SERVICE_ACCOUNT_USER_PREFIX}{namespace}:{name}")
}

/// What a request asks: upstream's `authorizer.Attributes`, borrowed so
/// that building one costs nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attributes<'a> {
    /// Who asks.
    pub user: &'a UserInfo,
    /// The verb: `get`, `list`, `watch`, `create`, `update`, `patch`,
    /// `delete`, `deletecollection`, or a special verb (`bind`, `escalate`,
    /// `impersonate`, ...); for a non-resource request the HTTP method in
    /// lower case.
    pub verb: &'a str,
    /// The namespace ("" at the cluster scope).
    pub namespace: &'a str,
    /// The API group ("" for the core group).
    pub api_group: &'a str,
    /// The API version ("" when not known; RBAC does not read it).
    pub api_version: &'a str,
    /// The resource (`pods`).
    pub resource: &'a str,
    /// The subresource (`binding`, `status`), "" for none.
    pub subresource: &'a str,
    /// The object's name, "" for a collection.
    pub name: &'a str,
    /// A resource request (else a non-resource one, matched by `path`).
    pub resource_request: bool,
    /// The request path (non-resource requests).
    pub path: &'a str,
}

impl<'a> Attributes<'a> {
    /// A resource request for `verb` on `resource` in `api_group`, at the
    /// cluster scope, on the collection; narrow it with [`Self::ns`],
    /// [`Self::named`] and [`Self::subresource`].
    pub fn resource(user: &'a UserInfo, verb: &'a str, api_group: &'a str, resource: &'a str) -> Self {
        Attributes { user, verb, namespace: "", api_group, api_version: "", resource, subresource: "", name: "", resource_request: true, path: "" }
    }

    /// A non-resource request for `verb` (`get`, `post`, ...) on `path`.
    pub fn non_resource(user: &'a UserInfo, verb: &'a str, path: &'a str) -> Self {
        Attributes { user, verb, namespace: "", api_group: "", api_version: "", resource: "", subresource: "", name: "", resource_request: false, path }
    }

    /// In `namespace`.
    pub fn ns(mut self, namespace: &'a str) -> Self {
        self.namespace = namespace;
        self
    }

    /// On the object `name`.
    pub fn named(mut self, name: &'a str) -> Self {
        self.name = name;
        self
    }

    /// On the subresource `subresource`.
    pub fn subresource(mut self, subresource: &'a str) -> Self {
        self.subresource = subresource;
        self
    }
}

/// A request's attributes as kube-apiserver derives them from its method,
/// path and query (owned; [`RequestInfo::attributes`] borrows them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// Under `/api` or `/apis/<group>/<version>`.
    pub resource_request: bool,
    /// The path as given.
    pub path: String,
    /// See [`Attributes::verb`].
    pub verb: String,
    /// `api` or `apis` (resource requests).
    pub api_prefix: String,
    /// The group ("" for `/api`).
    pub api_group: String,
    /// The version.
    pub api_version: String,
    /// The namespace ("" at the cluster scope).
    pub namespace: String,
    /// The resource.
    pub resource: String,
    /// The subresource.
    pub subresource: String,
    /// The object's name (also from `fieldSelector=metadata.name=X` on a list or watch).
    pub name: String,
    /// The path parts after the namespace: `resource/name/subresource/...`.
    pub parts: Vec<String>,
}

/// Go's `strconv.ParseBool` truths.
fn parse_bool(v: &str) -> bool {
    matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

/// `path.IsValidPathSegmentName`: not `.`/`..`, no `/` or `%`.
fn valid_path_segment(name: &str) -> bool {
    name != "." && name != ".." && !name.contains('/') && !name.contains('%')
}

/// The value a field selector requires `metadata.name` to equal
/// (`metadata.name=x` or `==x`, possibly among other terms).
fn exact_name(selector: &str) -> Option<String> {
    selector.split(',').find_map(|term| {
        let term = term.trim();
        if term.contains("!=") {
            return None;
        }
        let (k, v) = term.split_once("==").or_else(|| term.split_once('='))?;
        (k.trim() == "metadata.name").then(|| v.trim().to_string())
    })
}

impl RequestInfo {
    /// Derives the attributes of `method` on `path` with the raw query
    /// string `query` (percent-encoded, without `?`), as kube-apiserver's
    /// request-info filter does: paths outside `/api/v1...` and
    /// `/apis/<group>/<version>...` are non-resource requests (verb = the
    /// method in lower case); `GET` without a name is `list` (or `watch`
    /// with `watch=true`), `DELETE` without a name is `deletecollection`,
    /// `/watch/` and `/proxy/` path verbs are honoured, and a list or watch
    /// with `fieldSelector=metadata.name=X` is on the object `X`.
    pub fn parse(method: &str, path: &str, query: Option<&str>) -> Result<RequestInfo, Error> {
        let method_verb = method.to_ascii_lowercase();
        let non_resource = || RequestInfo { resource_request: false, path: path.to_string(), verb: method_verb.clone(), ..RequestInfo::default() };
        let trimmed = path.trim_matches('/');
        let mut parts: Vec<&str> = if trimmed.is_empty() { Vec::new() } else { trimmed.split('/').collect() };
        // /api/<version>/... or /apis/<group>/<version>/...
        let Some(&prefix) = parts.first() else { return Ok(non_resource()) };
        if prefix != "api" && prefix != "apis" {
            return Ok(non_resource());
        }
        parts.remove(0);
        let mut info = RequestInfo { resource_request: true, path: path.to_string(), api_prefix: prefix.to_string(), ..RequestInfo::default() };
        if prefix == "apis" {
            if parts.is_empty() {
                return Ok(non_resource());
            }
            info.api_group = parts.remove(0).to_string();
        }
        if parts.is_empty() {
            return Ok(non_resource());
        }
        info.api_version = parts.remove(0).to_string();
        if parts.is_empty() {
            return Ok(non_resource());
        }
        if parts[0] == "watch" || parts[0] == "proxy" {
            if parts.len() < 2 {
                return Err(Error::Unparseable(path.to_string()));
            }
            info.verb = parts.remove(0).to_string();
        } else {
            info.verb = match method {
                "POST" => "create",
                "GET" | "HEAD" => "get",
                "PUT" => "update",
                "PATCH" => "patch",
                "DELETE" => "delete",
                _ => "",
            }
            .to_string();
        }
        if parts[0] == "namespaces" && parts.len() > 1 {
            info.namespace = parts[1].to_string();
            // namespaces/<ns>/<resource>/..., except the namespace's own subresources
            if parts.len() > 2 && parts[2] != "status" && parts[2] != "finalize" {
                parts.drain(..2);
            }
        }
        info.parts = parts.iter().map(|p| (*p).to_string()).collect();
        if parts.len() >= 3 && info.verb != "proxy" {
            info.subresource = parts[2].to_string();
        }
        if parts.len() >= 2 {
            info.name = parts[1].to_string();
        }
        info.resource = parts[0].to_string();
        if info.name.is_empty() && info.verb == "get" {
            // A malformed query is read as no options, as upstream does.
            let pairs: Vec<(String, String)> = query.and_then(|q| serde_urlencoded::from_str(q).ok()).unwrap_or_default();
            let watch = pairs.iter().any(|(k, v)| k == "watch" && parse_bool(v));
            info.verb = if watch { "watch" } else { "list" }.to_string();
            if let Some(name) = pairs.iter().find(|(k, _)| k == "fieldSelector").and_then(|(_, v)| exact_name(v))
                && valid_path_segment(&name)
            {
                info.name = name;
            }
        }
        if info.name.is_empty() && info.verb == "delete" {
            info.verb = "deletecollection".to_string();
        }
        Ok(info)
    }

    /// The request a SubjectAccessReview's spec asks about (also the
    /// `spec` of a Local- or SelfSubjectAccessReview): its
    /// `resourceAttributes` (namespace, verb, group, version, resource,
    /// subresource, name) or its `nonResourceAttributes` (path, verb).
    /// `None` when it has neither or both (upstream's 422: "exactly one of
    /// nonResourceAttributes or resourceAttributes must be specified").
    pub fn from_review_spec(spec: &serde_json::Value) -> Option<RequestInfo> {
        let field = |v: &serde_json::Value, k: &str| v.get(k).and_then(serde_json::Value::as_str).unwrap_or_default().to_string();
        let ra = spec.get("resourceAttributes").filter(|v| !v.is_null());
        let nra = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
        match (ra, nra) {
            (Some(a), None) => Some(RequestInfo {
                resource_request: true,
                verb: field(a, "verb"),
                namespace: field(a, "namespace"),
                api_group: field(a, "group"),
                api_version: field(a, "version"),
                resource: field(a, "resource"),
                subresource: field(a, "subresource"),
                name: field(a, "name"),
                ..RequestInfo::default()
            }),
            (None, Some(a)) => Some(RequestInfo { resource_request: false, verb: field(a, "verb"), path: field(a, "path"), ..RequestInfo::default() }),
            _ => None,
        }
    }

    /// The attributes of this request by `user`.
    pub fn attributes<'a>(&'a self, user: &'a UserInfo) -> Attributes<'a> {
        Attributes {
            user,
            verb: &self.verb,
            namespace: &self.namespace,
            api_group: &self.api_group,
            api_version: &self.api_version,
            resource: &self.resource,
            subresource: &self.subresource,
            name: &self.name,
            resource_request: self.resource_request,
            path: &self.path,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(method: &str, path: &str, query: Option<&str>) -> RequestInfo {
        RequestInfo::parse(method, path, query).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// Upstream's `TestGetAPIRequestInfo` cases that apply (requestinfo_test.go).
    #[test]
    fn resource_requests_from_paths() {
        /// (method, path, query, verb, group, version, namespace, resource, name, subresource)
        type Case = (&'static str, &'static str, Option<&'static str>, &'static str, &'static str, &'static str, &'static str, &'static str, &'static str, &'static str);
        let cases: &[Case] = &[
            ("GET", "/api/v1/namespaces", None, "list", "", "v1", "", "namespaces", "", ""),
            ("GET", "/api/v1/namespaces/other", None, "get", "", "v1", "other", "namespaces", "other", ""),
            ("GET", "/api/v1/namespaces/other/pods/foo", None, "get", "", "v1", "other", "pods", "foo", ""),
            ("GET", "/api/v1/namespaces/other/pods", None, "list", "", "v1", "other", "pods", "", ""),
            ("GET", "/api/v1/namespaces/other/pods", Some("watch=true"), "watch", "", "v1", "other", "pods", "", ""),
            ("GET", "/api/v1/namespaces/other/pods", Some("watch=1&fieldSelector=metadata.name%3Dp"), "watch", "", "v1", "other", "pods", "p", ""),
            ("GET", "/api/v1/namespaces/other/pods", Some("fieldSelector=metadata.name%3D%3Dp,spec.nodeName%3Dn"), "list", "", "v1", "other", "pods", "p", ""),
            ("GET", "/api/v1/namespaces/other/pods", Some("fieldSelector=metadata.name%3Da%2Fb"), "list", "", "v1", "other", "pods", "", ""),
            ("GET", "/api/v1/pods", None, "list", "", "v1", "", "pods", "", ""),
            ("HEAD", "/api/v1/namespaces/other/pods/foo", None, "get", "", "v1", "other", "pods", "foo", ""),
            ("GET", "/api/v1/watch/pods", None, "watch", "", "v1", "", "pods", "", ""),
            ("GET", "/api/v1/watch/namespaces/other/pods/foo", None, "watch", "", "v1", "other", "pods", "foo", ""),
            ("POST", "/api/v1/namespaces/other/pods", None, "create", "", "v1", "other", "pods", "", ""),
            ("POST", "/api/v1/namespaces/other/pods/foo/binding", None, "create", "", "v1", "other", "pods", "foo", "binding"),
            ("PUT", "/api/v1/namespaces/other/pods/foo/status", None, "update", "", "v1", "other", "pods", "foo", "status"),
            ("PATCH", "/apis/apps/v1/namespaces/other/deployments/d/scale", None, "patch", "apps", "v1", "other", "deployments", "d", "scale"),
            ("DELETE", "/api/v1/namespaces/other/pods/foo", None, "delete", "", "v1", "other", "pods", "foo", ""),
            ("DELETE", "/api/v1/namespaces/other/pods", None, "deletecollection", "", "v1", "other", "pods", "", ""),
            ("PUT", "/api/v1/namespaces/other/finalize", None, "update", "", "v1", "other", "namespaces", "other", "finalize"),
            ("GET", "/api/v1/namespaces/other/status", None, "get", "", "v1", "other", "namespaces", "other", "status"),
            ("GET", "/api/v1/proxy/namespaces/other/pods/foo/a/b", None, "proxy", "", "v1", "other", "pods", "foo", ""),
            ("GET", "/api/v1/nodes/n/proxy/metrics", None, "get", "", "v1", "", "nodes", "n", "proxy"),
            ("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", None, "create", "rbac.authorization.k8s.io", "v1", "", "clusterrolebindings", "", ""),
        ];
        for &(method, path, query, verb, group, version, ns, resource, name, sub) in cases {
            let i = parse(method, path, query);
            let got = (i.resource_request, i.verb.as_str(), i.api_group.as_str(), i.api_version.as_str(), i.namespace.as_str(), i.resource.as_str(), i.name.as_str(), i.subresource.as_str());
            assert_eq!(got, (true, verb, group, version, ns, resource, name, sub), "{method} {path} {query:?}");
        }
    }

    #[test]
    fn non_resource_requests_from_paths() {
        for (method, path) in [("GET", "/"), ("GET", "/healthz"), ("GET", "/api"), ("GET", "/apis"), ("GET", "/apis/apps"), ("GET", "/version"), ("POST", "/metrics"), ("GET", "/openapi/v2")] {
            let i = parse(method, path, None);
            assert!(!i.resource_request, "{path}");
            assert_eq!(i.verb, method.to_ascii_lowercase());
            assert_eq!(i.path, path);
        }
        assert!(RequestInfo::parse("GET", "/api/v1/watch", None).is_err());
    }

    #[test]
    fn review_specs() {
        let spec = serde_json::json!({"user": "u", "groups": ["g"], "extra": {"k": ["v"]}, "resourceAttributes": {"namespace": "ns", "verb": "create", "resource": "pods", "subresource": "binding", "name": "p"}});
        let (u, i) = (UserInfo::from_review_spec(&spec), RequestInfo::from_review_spec(&spec));
        assert_eq!((u.name.as_str(), u.groups.as_slice(), u.extra.get("k").map(Vec::len)), ("u", &["g".to_string()][..], Some(1)));
        let i = i.unwrap_or_default();
        let a = i.attributes(&u);
        assert_eq!((a.resource_request, a.verb, a.namespace, a.resource, a.subresource, a.name), (true, "create", "ns", "pods", "binding", "p"));
        let n = RequestInfo::from_review_spec(&serde_json::json!({"nonResourceAttributes": {"verb": "get", "path": "/metrics"}})).unwrap_or_default();
        assert_eq!((n.resource_request, n.verb.as_str(), n.path.as_str()), (false, "get", "/metrics"));
        assert_eq!(RequestInfo::from_review_spec(&serde_json::json!({"user": "u"})), None);
    }

    #[test]
    fn users() {
        let sa = UserInfo::service_account("berth", "berth");
        assert_eq!(sa.name, "system:serviceaccount:berth:berth");
        assert_eq!(sa.groups, ["system:serviceaccounts", "system:serviceaccounts:berth", "system:authenticated"]);
        assert!(!sa.is_privileged());
        assert!(UserInfo::new("root", &["system:masters"]).is_privileged());
        assert_eq!(UserInfo::anonymous().groups, ["system:unauthenticated"]);
    }
}
