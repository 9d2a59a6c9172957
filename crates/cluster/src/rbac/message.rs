//! Refusals in kube-apiserver's words: the 403 a denied request gets
//! (`responsewriters.ForbiddenStatusError` wrapped by
//! `apierrors.NewForbidden`), and Go's `%q` quoting those messages use.

use serde_json::{Value, json};

use super::attributes::Attributes;

/// Go's `strconv.Quote`: double quotes, `\"` and `\\`, the usual control
/// escapes, `\xNN` for other control bytes, `\uNNNN` for non-printable
/// characters; printable Unicode as it is.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => {
                if (c as u32) < 0x10000 {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%q` on a `[]string`: `["a" "b"]`, `[]` when empty.
pub fn go_quote_list<S: AsRef<str>>(items: &[S]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| go_quote(s.as_ref())).collect();
    format!("[{}]", quoted.join(" "))
}

/// `schema.GroupResource.String()`: `resource.group`, or `resource` in the core group.
pub fn group_resource(group: &str, resource: &str) -> String {
    if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") }
}

/// `apierrors.NewForbidden`'s message: `forbidden: ERR` when there is no
/// resource, `RESOURCE.GROUP is forbidden: ERR` without a name,
/// `RESOURCE.GROUP "NAME" is forbidden: ERR` with one.
pub fn forbidden_with(group: &str, resource: &str, name: &str, err: &str) -> String {
    if group.is_empty() && resource.is_empty() {
        format!("forbidden: {err}")
    } else if name.is_empty() {
        format!("{} is forbidden: {err}", group_resource(group, resource))
    } else {
        format!("{} {} is forbidden: {err}", group_resource(group, resource), go_quote(name))
    }
}

/// What the user may not do, in `forbiddenMessage`'s words:
/// `User "u" cannot list resource "pods" in API group "" in the namespace "default"`,
/// `... at the cluster scope`, `User "u" cannot get path "/metrics"`.
pub fn denial(attrs: &Attributes<'_>) -> String {
    let user = go_quote(&attrs.user.name);
    if !attrs.resource_request {
        return format!("User {user} cannot {} path {}", attrs.verb, go_quote(attrs.path));
    }
    let resource = if attrs.subresource.is_empty() { attrs.resource.to_string() } else { format!("{}/{}", attrs.resource, attrs.subresource) };
    let scope = if attrs.namespace.is_empty() { "at the cluster scope".to_string() } else { format!("in the namespace {}", go_quote(attrs.namespace)) };
    format!("User {user} cannot {} resource {} in API group {} {scope}", attrs.verb, go_quote(&resource), go_quote(attrs.api_group))
}

/// The message of the 403 a denied request gets: [`denial`] followed by
/// `: REASON` when the authorizer gave one, `&`, `<` and `>` escaped as
/// upstream's sanitizer does, in [`forbidden_with`]'s frame, e.g.
/// `pods "p" is forbidden: User "x" cannot get resource "pods" in API group "" in the namespace "default"`.
pub fn forbidden(attrs: &Attributes<'_>, reason: &str) -> String {
    let msg = sanitize(&denial(attrs));
    let err = if reason.is_empty() { msg } else { format!("{msg}: {reason}") };
    forbidden_with(attrs.api_group, attrs.resource, attrs.name, &err)
}

/// Avoid messages that look like HTML (`&`, `<`, `>` as entities).
fn sanitize(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// `metav1.Status` details of a Forbidden: group, kind (the resource) and
/// name, each left out when empty (`{}` for a non-resource request).
pub fn forbidden_details(group: &str, resource: &str, name: &str) -> Value {
    let mut d = json!({});
    for (k, v) in [("name", name), ("group", group), ("kind", resource)] {
        if !v.is_empty() {
            d[k] = json!(v);
        }
    }
    d
}

/// The whole 403 `metav1.Status` body for a denied request.
pub fn forbidden_status(attrs: &Attributes<'_>, reason: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": forbidden(attrs, reason),
        "reason": "Forbidden",
        "details": forbidden_details(attrs.api_group, attrs.resource, attrs.name),
        "code": 403,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rbac::UserInfo;

    #[test]
    fn forbidden_messages_in_upstreams_words() {
        let sa = UserInfo::service_account("berth", "berth");
        let x = UserInfo::new("x", &[]);
        let cases: Vec<(Attributes<'_>, &str, &str)> = vec![
            (
                Attributes::resource(&sa, "list", "", "pods"),
                "",
                r#"pods is forbidden: User "system:serviceaccount:berth:berth" cannot list resource "pods" in API group "" at the cluster scope"#,
            ),
            (Attributes::resource(&x, "list", "", "pods").ns("default"), "", r#"pods is forbidden: User "x" cannot list resource "pods" in API group "" in the namespace "default""#),
            (
                Attributes::resource(&x, "create", "", "pods").ns("default").named("p").subresource("binding"),
                "",
                r#"pods "p" is forbidden: User "x" cannot create resource "pods/binding" in API group "" in the namespace "default""#,
            ),
            (Attributes::resource(&x, "get", "", "pods").ns("default").named("p"), "", r#"pods "p" is forbidden: User "x" cannot get resource "pods" in API group "" in the namespace "default""#),
            (
                Attributes::resource(&x, "create", "rbac.authorization.k8s.io", "clusterrolebindings"),
                "",
                r#"clusterrolebindings.rbac.authorization.k8s.io is forbidden: User "x" cannot create resource "clusterrolebindings" in API group "rbac.authorization.k8s.io" at the cluster scope"#,
            ),
            (Attributes::non_resource(&x, "get", "/metrics"), "", r#"forbidden: User "x" cannot get path "/metrics""#),
            (
                Attributes::resource(&x, "list", "", "pods"),
                r#"RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found"#,
                r#"pods is forbidden: User "x" cannot list resource "pods" in API group "" at the cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found"#,
            ),
            (Attributes::non_resource(&x, "get", "/<b>&"), "", r#"forbidden: User "x" cannot get path "/&lt;b&gt;&amp;""#),
        ];
        for (attrs, reason, want) in cases {
            assert_eq!(forbidden(&attrs, reason), want);
        }
        let s = forbidden_status(&Attributes::non_resource(&x, "get", "/"), "");
        assert_eq!(s["details"], json!({}));
        assert_eq!(s["code"], 403);
        let s = forbidden_status(&Attributes::resource(&x, "get", "apps", "deployments").ns("d").named("n"), "");
        assert_eq!(s["details"], json!({"name": "n", "group": "apps", "kind": "deployments"}));
    }

    #[test]
    fn go_quoting() {
        assert_eq!(go_quote("a\"b\\c\n\u{1}é"), r#""a\"b\\c\n\x01é""#);
        assert_eq!(go_quote_list(&["", "apps"]), r#"["" "apps"]"#);
        assert_eq!(go_quote_list::<&str>(&[]), "[]");
    }
}
