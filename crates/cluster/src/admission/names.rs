//! The string formats of apimachinery's `util/validation` and
//! `api/validate/content` (DNS-1123 labels and subdomains, label keys and
//! values, port names, environment variable names), each returning
//! upstream's messages, and `field.Error`'s wording of a field error.
//!
//! Messages follow the newest upstream source (`content.IsLabelKey`'s
//! "a valid label key", `MaxLenError`'s "bytes").

/// Upstream's `RegexError`: `msg (e.g. 'a',  or 'b', regex used for validation is 're')`.
fn regex_error(msg: &str, re: &str, examples: &[&str]) -> String {
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{e}', "));
    }
    out.push_str(&format!("regex used for validation is '{re}')"));
    out
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} bytes")
}

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_KEY_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
fn is_label_shape(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_subdomain_shape(s: &str) -> bool {
    s.split('.').all(is_label_shape)
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_label_key_name_shape(s: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_alphanumeric();
    !s.is_empty()
        && s.bytes().all(|b| alnum(b) || matches!(b, b'-' | b'_' | b'.'))
        && s.bytes().next().is_some_and(alnum)
        && s.bytes().last().is_some_and(alnum)
}

/// Upstream's `IsDNS1123Label`.
pub fn dns1123_label(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !is_label_shape(v) {
        if is_subdomain_shape(v) {
            errs.push("must not contain dots".into());
        } else {
            errs.push(regex_error(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// Upstream's `IsDNS1123Subdomain`.
pub fn dns1123_subdomain(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !is_subdomain_shape(v) {
        errs.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// Upstream's `IsQualifiedName` (`content.IsLabelKey`): an optional DNS
/// subdomain prefix and `/`, then a name of at most 63 characters.
pub fn qualified_name(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = v.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".into());
            } else {
                errs.extend(dns1123_subdomain(prefix).into_iter().map(|m| format!("prefix part {m}")));
            }
            *name
        }
        _ => {
            return vec![format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(LABEL_KEY_MSG, LABEL_KEY_FMT, &["MyName", "my.name", "123-abc"])
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !is_label_key_name_shape(name) {
        errs.push(format!("name part {}", regex_error(LABEL_KEY_MSG, LABEL_KEY_FMT, &["MyName", "my.name", "123-abc"])));
    }
    errs
}

/// Upstream's `IsValidLabelValue`.
pub fn label_value(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !v.is_empty() && !is_label_key_name_shape(v) {
        errs.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            &format!("({LABEL_KEY_FMT})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// Upstream's `IsValidPortName` (IANA service names).
pub fn port_name(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 15 {
        errs.push(max_len_error(15));
    }
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into());
    }
    if !v.bytes().any(|b| b.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".into());
    }
    if v.contains("--") {
        errs.push("must not contain consecutive hyphens".into());
    }
    if v.starts_with('-') || v.ends_with('-') {
        errs.push("must not begin or end with a hyphen".into());
    }
    errs
}

/// Upstream's `IsRelaxedEnvVarName` (RelaxedEnvironmentVariableValidation,
/// GA and always on since 1.34): printable ASCII other than `=`.
pub fn env_var_name(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.is_empty() {
        errs.push("environment variable name must be non-empty".into());
    }
    if v.chars().any(|c| !(' '..='~').contains(&c) || c == '=') {
        errs.push("a valid environment variable name must consist only of printable ASCII characters other than '='".into());
    }
    errs
}

/// Upstream's `IsValidPortNum`.
pub fn port_number(p: i64) -> Option<&'static str> {
    (!(1..=65535).contains(&p)).then_some("must be between 1 and 65535, inclusive")
}

/// A Go `%q` of a string (the common cases: quotes and backslashes).
pub fn quoted(s: &str) -> String {
    format!("{s:?}")
}

/// `field.Invalid(path, "value", msg)` for each message.
pub fn invalid_each<'a>(path: &'a str, value: &'a str, msgs: Vec<String>) -> impl Iterator<Item = String> + 'a {
    msgs.into_iter().map(move |m| format!("{path}: Invalid value: {}: {m}", quoted(value)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_word_their_errors_as_upstream_does() {
        assert!(dns1123_label("web-1").is_empty());
        assert_eq!(
            dns1123_label("Web_1"),
            ["a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"]
        );
        assert_eq!(dns1123_label("a.b"), ["must not contain dots"]);
        assert!(qualified_name("example.com/My_key.1").is_empty());
        assert_eq!(qualified_name("/x"), ["prefix part must be non-empty"]);
        assert_eq!(qualified_name("a/b/c").len(), 1);
        assert_eq!(qualified_name("bad key").len(), 1);
        assert!(label_value("").is_empty());
        assert_eq!(label_value(&"x".repeat(64)), ["must be no more than 63 bytes"]);
        assert!(port_name("http-2").is_empty());
        assert_eq!(port_name("8080"), ["must contain at least one letter (a-z)"]);
        assert_eq!(port_name("-a--b"), ["must not contain consecutive hyphens", "must not begin or end with a hyphen"]);
        assert!(env_var_name("1 weird.NAME").is_empty());
        assert_eq!(env_var_name("A=B").len(), 1);
    }
}
