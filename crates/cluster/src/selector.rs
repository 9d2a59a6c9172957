//! Label and field selectors, in the string forms of the Kubernetes API
//! (`?labelSelector=` / `?fieldSelector=`) and the structured
//! `metav1.LabelSelector` form used by PodDisruptionBudgets.

use super::jsonptr::Pointer as _;
use serde_json::Value;

/// Errors from parsing a selector.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The label selector string could not be parsed.
    #[error("unable to parse requirement: {0}")]
    BadLabelSelector(String),
    /// The field selector string could not be parsed.
    #[error("invalid field selector: {0}")]
    BadFieldSelector(String),
    /// The field selector names a field the resource does not support.
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `key=value` or `key==value`.
    Eq(String, String),
    /// `key!=value` (also matches objects without the key).
    Ne(String, String),
    /// `key in (a,b)`.
    In(String, Vec<String>),
    /// `key notin (a,b)` (also matches objects without the key).
    NotIn(String, Vec<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    NotExists(String),
}

/// A parsed label selector: all requirements must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// The requirements, ANDed.
    pub reqs: Vec<Requirement>,
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')
}

fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_set(rest: &str, whole: &str) -> Result<Vec<String>, Error> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| Error::BadLabelSelector(whole.to_string()))?;
    let vals: Vec<String> = inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    if vals.is_empty() {
        return Err(Error::BadLabelSelector(whole.to_string()));
    }
    Ok(vals)
}

impl LabelSelector {
    /// Parse the string form (`a=b,c!=d,e in (f,g),!h`).
    pub fn parse(s: &str) -> Result<Self, Error> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self { reqs });
        }
        for part in split_top_level(s) {
            let p = part.trim();
            if p.is_empty() {
                return Err(Error::BadLabelSelector(s.to_string()));
            }
            if let Some(k) = p.strip_prefix('!') {
                let k = k.trim();
                if k.is_empty() || !k.chars().all(is_key_char) {
                    return Err(Error::BadLabelSelector(p.to_string()));
                }
                reqs.push(Requirement::NotExists(k.to_string()));
                continue;
            }
            let key_end = p.find(|c: char| !is_key_char(c)).unwrap_or(p.len());
            let key = &p[..key_end];
            if key.is_empty() {
                return Err(Error::BadLabelSelector(p.to_string()));
            }
            let rest = p[key_end..].trim_start();
            let check_val = |v: &str| -> Result<String, Error> {
                let v = v.trim();
                if v.chars().all(is_key_char) {
                    Ok(v.to_string())
                } else {
                    Err(Error::BadLabelSelector(p.to_string()))
                }
            };
            let req = if rest.is_empty() {
                Requirement::Exists(key.to_string())
            } else if let Some(v) = rest.strip_prefix("!=") {
                Requirement::Ne(key.to_string(), check_val(v)?)
            } else if let Some(v) = rest.strip_prefix("==") {
                Requirement::Eq(key.to_string(), check_val(v)?)
            } else if let Some(v) = rest.strip_prefix('=') {
                Requirement::Eq(key.to_string(), check_val(v)?)
            } else if let Some(v) = rest.strip_prefix("notin") {
                Requirement::NotIn(key.to_string(), parse_set(v, p)?)
            } else if let Some(v) = rest.strip_prefix("in") {
                Requirement::In(key.to_string(), parse_set(v, p)?)
            } else {
                return Err(Error::BadLabelSelector(p.to_string()));
            };
            reqs.push(req);
        }
        Ok(Self { reqs })
    }

    /// Build from a structured `metav1.LabelSelector` JSON value
    /// (`matchLabels` + `matchExpressions`). `None`/null selects nothing
    /// in the policy/v1 sense is handled by the caller; an empty object
    /// selects everything.
    pub fn from_structured(v: &Value) -> Result<Self, Error> {
        let mut reqs = Vec::new();
        if let Some(m) = v.get("matchLabels").and_then(Value::as_object) {
            for (k, val) in m {
                let val = val.as_str().unwrap_or_default().to_string();
                reqs.push(Requirement::Eq(k.clone(), val));
            }
        }
        if let Some(exprs) = v.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e.get("key").and_then(Value::as_str).unwrap_or_default().to_string();
                let op = e.get("operator").and_then(Value::as_str).unwrap_or_default();
                let vals: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
                    .unwrap_or_default();
                reqs.push(match op {
                    "In" => Requirement::In(key, vals),
                    "NotIn" => Requirement::NotIn(key, vals),
                    "Exists" => Requirement::Exists(key),
                    "DoesNotExist" => Requirement::NotExists(key),
                    other => return Err(Error::BadLabelSelector(format!("operator {other}"))),
                });
            }
        }
        Ok(Self { reqs })
    }

    /// True when there are no requirements.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Does an object (full JSON) match?
    pub fn matches_object(&self, obj: &Value) -> bool {
        if self.reqs.is_empty() {
            return true;
        }
        let labels = obj.at("/metadata/labels");
        self.matches_labels(labels)
    }

    /// Does a labels map (JSON object or absent) match?
    pub fn matches_labels(&self, labels: Option<&Value>) -> bool {
        self.matches_with(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str))
    }

    /// Does a set of labels, read through `get` (label key to value), match?
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.reqs.iter().all(|r| match r {
            Requirement::Eq(k, v) => get(k) == Some(v.as_str()),
            Requirement::Ne(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

/// One field requirement: (JSON pointer, value, equal?).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldReq {
    /// JSON pointer of the field, e.g. `/spec/nodeName`.
    pub pointer: String,
    /// Value to compare with (missing fields compare as "").
    pub value: String,
    /// `true` for `=`/`==`, `false` for `!=`.
    pub eq: bool,
}

/// A parsed field selector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    /// The requirements, ANDed.
    pub reqs: Vec<FieldReq>,
}

impl FieldSelector {
    /// Parse `a=b,c!=d`, accepting only the fields in `supported`
    /// (dotted names) plus metadata.name and metadata.namespace.
    pub fn parse(s: &str, supported: &[&str]) -> Result<Self, Error> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self { reqs });
        }
        for part in s.split(',') {
            let p = part.trim();
            let (field, value, eq) = if let Some((f, v)) = p.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = p.split_once("==") {
                (f, v, true)
            } else if let Some((f, v)) = p.split_once('=') {
                (f, v, true)
            } else {
                return Err(Error::BadFieldSelector(p.to_string()));
            };
            let field = field.trim();
            if !(field == "metadata.name" || field == "metadata.namespace" || supported.contains(&field)) {
                return Err(Error::UnsupportedField(field.to_string()));
            }
            reqs.push(FieldReq { pointer: field_pointer(field), value: value.trim().to_string(), eq });
        }
        Ok(Self { reqs })
    }

    /// True when there are no requirements.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Does the object match?
    pub fn matches(&self, obj: &Value) -> bool {
        self.matches_with(|pointer| field_text(obj.at(pointer)))
    }

    /// Does an object whose fields are read through `get` (JSON pointer to
    /// the field's text, see [`field_text`]) match?
    pub fn matches_with(&self, get: impl Fn(&str) -> String) -> bool {
        self.reqs.iter().all(|r| (get(&r.pointer) == r.value) == r.eq)
    }
}

/// A field as a field selector compares it: strings, booleans and numbers
/// as text, anything else (or nothing) as "".
pub fn field_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

/// A field by its dotted name (`spec.nodeName`), as a field selector
/// compares it: strings borrowed, booleans and numbers as text, anything
/// else (or a missing field) "". No pointer text is built.
pub fn field_text_at<'a>(obj: &'a Value, dotted: &str) -> std::borrow::Cow<'a, str> {
    let v = dotted.split('.').try_fold(obj, |v, k| v.get(k));
    match v {
        Some(Value::String(s)) => std::borrow::Cow::Borrowed(s.as_str()),
        other => std::borrow::Cow::Owned(field_text(other)),
    }
}

/// The JSON pointer of a dotted field name (`spec.nodeName` is
/// `/spec/nodeName`).
pub fn field_pointer(field: &str) -> String {
    format!("/{}", field.replace('.', "/"))
}

/// A combined filter for list and watch.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this namespace (None = all).
    pub namespace: Option<String>,
    /// Label selector.
    pub labels: LabelSelector,
    /// Field selector.
    pub fields: FieldSelector,
}

impl Filter {
    /// Does the object pass?
    pub fn matches(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && obj.at("/metadata/namespace").and_then(Value::as_str) != Some(ns.as_str()) {
                return false;
            }
        self.labels.matches_object(obj) && self.fields.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_field_read_by_name_is_the_field_read_by_pointer() {
        let obj = json!({"spec": {"nodeName": "n1", "hostNetwork": true, "priority": 7, "list": ["a"]}, "status": {}});
        for f in ["spec.nodeName", "spec.hostNetwork", "spec.priority", "spec.list", "status.phase", "missing.deeper.still", "spec"] {
            assert_eq!(field_text_at(&obj, f), field_text(obj.pointer(&field_pointer(f))), "{f}");
        }
    }

    #[test]
    fn label_selectors() {
        let obj = json!({"metadata": {"labels": {"app": "web", "tier": "fe"}}});
        let m = |s: &str| LabelSelector::parse(s).map(|l| l.matches_object(&obj));
        assert_eq!(m("app=web"), Ok(true));
        assert_eq!(m("app==web,tier=fe"), Ok(true));
        assert_eq!(m("app!=web"), Ok(false));
        assert_eq!(m("app in (web, db)"), Ok(true));
        assert_eq!(m("app notin (web,db)"), Ok(false));
        assert_eq!(m("x notin (a)"), Ok(true));
        assert_eq!(m("app"), Ok(true));
        assert_eq!(m("!app"), Ok(false));
        assert_eq!(m("!missing,tier in (fe)"), Ok(true));
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("a b").is_err());
        assert!(LabelSelector::parse(",").is_err());
    }

    #[test]
    fn field_selectors() {
        let obj = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}});
        let f = FieldSelector::parse("spec.nodeName=n1,metadata.name!=q", &["spec.nodeName"]).map(|f| f.matches(&obj));
        assert_eq!(f, Ok(true));
        let f = FieldSelector::parse("spec.nodeName=", &["spec.nodeName"]).map(|f| f.matches(&json!({})));
        assert_eq!(f, Ok(true));
        assert!(FieldSelector::parse("spec.foo=1", &[]).is_err());
        assert!(FieldSelector::parse("garbage", &[]).is_err());
    }
}
