//! Label selectors and node selectors, compiled once per object.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

/// Labels of an object.
pub type Labels = BTreeMap<String, String>;

/// What a selector reads of a set of labels: a key's value.
pub trait LabelSet {
    /// The value of `key`, or None when the label is absent.
    fn value(&self, key: &str) -> Option<&str>;
}

impl LabelSet for Labels {
    fn value(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// A pod's labels, kept compactly: a daemon holds one per bound pod, and a
/// `BTreeMap` costs a 544-byte node however few labels it holds. The keys and
/// values lie in one string, sorted by key, with the end of each key and of
/// each value in a second allocation; lookups are a binary search. Two equal
/// sets of labels are equal field by field.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct PodLabels {
    text: Box<str>,
    ends: Box<[(u32, u32)]>,
}

impl PodLabels {
    /// The labels of a map (already sorted by key).
    pub fn from_map(m: &Labels) -> Self {
        let mut text = String::with_capacity(m.iter().map(|(k, v)| k.len() + v.len()).sum());
        let mut ends = Vec::with_capacity(m.len());
        for (k, v) in m {
            // An API object is at most a few MiB: offsets fit in u32. Should
            // one not, the labels past it are left out rather than misread.
            let (Ok(ke), Ok(ve)) = (u32::try_from(text.len() + k.len()), u32::try_from(text.len() + k.len() + v.len())) else { break };
            text.push_str(k);
            text.push_str(v);
            ends.push((ke, ve));
        }
        PodLabels { text: text.into_boxed_str(), ends: ends.into_boxed_slice() }
    }

    /// The number of labels.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when there is no label.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    fn entry(&self, i: usize) -> (&str, &str) {
        let start = if i == 0 { 0 } else { self.ends.get(i - 1).map_or(0, |e| e.1 as usize) };
        let Some(&(ke, ve)) = self.ends.get(i) else { return ("", "") };
        (self.text.get(start..ke as usize).unwrap_or_default(), self.text.get(ke as usize..ve as usize).unwrap_or_default())
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        let (mut lo, mut hi) = (0, self.ends.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (k, v) = self.entry(mid);
            match k.cmp(key) {
                std::cmp::Ordering::Equal => return Some(v),
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
            }
        }
        None
    }

    /// True when `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The labels in key order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + '_ {
        (0..self.ends.len()).map(|i| self.entry(i))
    }

    /// The labels as a map.
    pub fn to_map(&self) -> Labels {
        self.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }
}

impl LabelSet for PodLabels {
    fn value(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
}

impl From<&Labels> for PodLabels {
    fn from(m: &Labels) -> Self {
        PodLabels::from_map(m)
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for PodLabels {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(it: I) -> Self {
        let m: Labels = it.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        PodLabels::from_map(&m)
    }
}

impl std::fmt::Debug for PodLabels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// A selector operator.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// The label's value is one of the values.
    In(Vec<String>),
    /// The label is absent or its value is none of the values.
    NotIn(Vec<String>),
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The label is present and, read as an integer, greater than this.
    Gt(i64),
    /// The label is present and, read as an integer, less than this.
    Lt(i64),
}

/// One requirement of a selector.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// The operator and its values.
    pub op: Op,
}

impl Requirement {
    /// Does the value found for the key (None: absent) satisfy this requirement?
    pub fn matches_value(&self, v: Option<&str>) -> bool {
        match (&self.op, v) {
            (Op::In(vals), Some(v)) => vals.iter().any(|x| x == v),
            (Op::In(_), None) => false,
            (Op::NotIn(vals), Some(v)) => !vals.iter().any(|x| x == v),
            (Op::NotIn(_), None) => true,
            (Op::Exists, v) => v.is_some(),
            (Op::DoesNotExist, v) => v.is_none(),
            (Op::Gt(n), Some(v)) => v.parse::<i64>().is_ok_and(|x| x > *n),
            (Op::Lt(n), Some(v)) => v.parse::<i64>().is_ok_and(|x| x < *n),
            (Op::Gt(_) | Op::Lt(_), None) => false,
        }
    }

    /// Does this requirement hold for `labels`?
    pub fn matches<L: LabelSet + ?Sized>(&self, labels: &L) -> bool {
        self.matches_value(labels.value(&self.key))
    }
}

/// A compiled label selector.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Selector {
    reqs: Vec<Requirement>,
    nothing: bool,
}

impl Selector {
    /// Matches every set of labels.
    pub fn everything() -> Self {
        Selector { reqs: Vec::new(), nothing: false }
    }

    /// Matches no set of labels.
    pub fn nothing() -> Self {
        Selector { reqs: Vec::new(), nothing: true }
    }

    /// True when the selector matches nothing.
    pub fn is_nothing(&self) -> bool {
        self.nothing
    }

    /// True when the selector has no requirement and matches everything
    /// (upstream `Selector.Empty()`).
    pub fn is_everything(&self) -> bool {
        !self.nothing && self.reqs.is_empty()
    }

    /// The requirements.
    pub fn requirements(&self) -> &[Requirement] {
        &self.reqs
    }

    /// Adds a requirement (ANDed with the others).
    pub fn push(&mut self, r: Requirement) {
        if !self.reqs.contains(&r) {
            self.reqs.push(r);
        }
    }

    /// Does the selector match these labels?
    pub fn matches<L: LabelSet + ?Sized>(&self, labels: &L) -> bool {
        !self.nothing && self.reqs.iter().all(|r| r.matches(labels))
    }

    /// Compiles a metav1.LabelSelector: a missing selector matches nothing and
    /// an empty one everything, as `metav1.LabelSelectorAsSelector` does.
    /// `path` names the field in errors.
    pub fn from_label_selector(ls: Option<&meta::LabelSelector>, path: &str) -> Result<Self, String> {
        let Some(ls) = ls else { return Ok(Selector::nothing()) };
        let mut sel = Selector::everything();
        if let Some(ml) = &ls.match_labels {
            for (k, v) in ml {
                validate_key(k).map_err(|e| format!("{path}.matchLabels[{k}]: {e}"))?;
                validate_value(v).map_err(|e| format!("{path}.matchLabels[{k}]: {e}"))?;
                sel.push(Requirement { key: k.clone(), op: Op::In(vec![v.clone()]) });
            }
        }
        if let Some(me) = &ls.match_expressions {
            for (i, e) in me.iter().enumerate() {
                let p = format!("{path}.matchExpressions[{i}]");
                validate_key(&e.key).map_err(|m| format!("{p}.key: {m}"))?;
                let values = e.values.clone().unwrap_or_default();
                for v in &values {
                    validate_value(v).map_err(|m| format!("{p}.values: {m}"))?;
                }
                let op = match e.operator.as_str() {
                    "In" | "NotIn" if values.is_empty() => {
                        return Err(format!("{p}.values: must be specified for operator {}", e.operator));
                    }
                    "In" => Op::In(values),
                    "NotIn" => Op::NotIn(values),
                    "Exists" | "DoesNotExist" if !values.is_empty() => {
                        return Err(format!("{p}.values: may not be specified for operator {}", e.operator));
                    }
                    "Exists" => Op::Exists,
                    "DoesNotExist" => Op::DoesNotExist,
                    other => return Err(format!("{p}.operator: {other:?} is not a valid label selector operator")),
                };
                sel.push(Requirement { key: e.key.clone(), op });
            }
        }
        Ok(sel)
    }

    /// A selector from a plain label map (`nodeSelector`), matching everything when empty.
    pub fn from_map(m: &BTreeMap<String, String>) -> Self {
        Selector {
            reqs: m
                .iter()
                .map(|(k, v)| Requirement { key: k.clone(), op: Op::In(vec![v.clone()]) })
                .collect(),
            nothing: false,
        }
    }
}

/// Checks a label key: an optional DNS-subdomain prefix and a name of at most
/// 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric.
pub fn validate_key(k: &str) -> Result<(), String> {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix
        && (p.is_empty() || p.len() > 253 || !p.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')) {
            return Err(format!("invalid label key {k:?}: prefix must be a DNS subdomain"));
        }
    if name.is_empty() {
        return Err(format!("invalid label key {k:?}: name part must be non-empty"));
    }
    validate_name_part(name).map_err(|e| format!("invalid label key {k:?}: {e}"))
}

/// Checks a label value: empty, or at most 63 alphanumerics, '-', '_' or '.',
/// starting and ending alphanumeric.
pub fn validate_value(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Ok(());
    }
    validate_name_part(v).map_err(|e| format!("invalid label value {v:?}: {e}"))
}

fn validate_name_part(s: &str) -> Result<(), String> {
    if s.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    let ok_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.';
    let first_last_ok = s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.chars().last().is_some_and(|c| c.is_ascii_alphanumeric());
    if !s.chars().all(ok_char) || !first_last_ok {
        return Err("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into());
    }
    Ok(())
}

/// One compiled node selector term: label expressions and `metadata.name` fields, ANDed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NodeSelectorTerm {
    /// Requirements on node labels.
    pub exprs: Vec<Requirement>,
    /// Requirements on the node name (`matchFields` with key `metadata.name`).
    pub fields: Vec<Requirement>,
}

impl NodeSelectorTerm {
    /// Does this term select the node?
    pub fn matches(&self, node_name: &str, labels: &Labels) -> bool {
        self.exprs.iter().all(|r| r.matches(labels))
            && self.fields.iter().all(|r| r.matches_value(Some(node_name)))
    }

    /// Compiles a term; an empty term is returned as None (it selects nothing).
    pub fn compile(t: &core::NodeSelectorTerm, path: &str) -> Result<Option<Self>, String> {
        let exprs_in = t.match_expressions.as_deref().unwrap_or_default();
        let fields_in = t.match_fields.as_deref().unwrap_or_default();
        if exprs_in.is_empty() && fields_in.is_empty() {
            return Ok(None);
        }
        let mut exprs = Vec::with_capacity(exprs_in.len());
        for (i, e) in exprs_in.iter().enumerate() {
            let p = format!("{path}.matchExpressions[{i}]");
            validate_key(&e.key).map_err(|m| format!("{p}.key: {m}"))?;
            exprs.push(Requirement { key: e.key.clone(), op: node_op(&e.operator, e.values.as_deref(), &p, false)? });
        }
        let mut fields = Vec::with_capacity(fields_in.len());
        for (i, e) in fields_in.iter().enumerate() {
            let p = format!("{path}.matchFields[{i}]");
            if e.key != "metadata.name" {
                return Err(format!("{p}.key: {:?} is not a supported field selector key (only metadata.name)", e.key));
            }
            fields.push(Requirement { key: e.key.clone(), op: node_op(&e.operator, e.values.as_deref(), &p, true)? });
        }
        Ok(Some(NodeSelectorTerm { exprs, fields }))
    }
}

fn node_op(op: &str, values: Option<&[String]>, path: &str, field: bool) -> Result<Op, String> {
    let values = values.unwrap_or_default().to_vec();
    let need = |ok: bool, what: &str| if ok { Ok(()) } else { Err(format!("{path}.values: {what} for operator {op}")) };
    Ok(match op {
        "In" | "NotIn" => {
            if field {
                need(values.len() == 1, "must have exactly one value")?;
            } else {
                need(!values.is_empty(), "must be non-empty")?;
            }
            if op == "In" { Op::In(values) } else { Op::NotIn(values) }
        }
        "Exists" | "DoesNotExist" if !field => {
            need(values.is_empty(), "must be empty")?;
            if op == "Exists" { Op::Exists } else { Op::DoesNotExist }
        }
        "Gt" | "Lt" if !field => {
            need(values.len() == 1, "must have exactly one value")?;
            let n: i64 = values[0]
                .parse()
                .map_err(|_| format!("{path}.values[0]: {:?} is not an integer", values[0]))?;
            if op == "Gt" { Op::Gt(n) } else { Op::Lt(n) }
        }
        other => return Err(format!("{path}.operator: {other:?} is not a valid node selector operator")),
    })
}

/// A compiled required node selector: terms ORed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeSelector {
    /// The non-empty terms; none at all means nothing matches.
    pub terms: Vec<NodeSelectorTerm>,
}

impl NodeSelector {
    /// Does any term select the node?
    pub fn matches(&self, node_name: &str, labels: &Labels) -> bool {
        self.terms.iter().any(|t| t.matches(node_name, labels))
    }

    /// Compiles a v1.NodeSelector.
    pub fn compile(ns: &core::NodeSelector, path: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for (i, t) in ns.node_selector_terms.iter().enumerate() {
            if let Some(t) = NodeSelectorTerm::compile(t, &format!("{path}.nodeSelectorTerms[{i}]"))? {
                terms.push(t);
            }
        }
        Ok(NodeSelector { terms })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> Labels {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn label_selector_semantics() {
        assert!(!Selector::from_label_selector(None, "s").unwrap_or_else(|_| Selector::everything()).matches(&labels(&[])));
        let empty = meta::LabelSelector::default();
        let s = Selector::from_label_selector(Some(&empty), "s");
        assert_eq!(s.map(|s| s.matches(&labels(&[("a", "b")]))), Ok(true));
        let ls = meta::LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: Some(vec![meta::LabelSelectorRequirement {
                key: "tier".into(),
                operator: "NotIn".into(),
                values: Some(vec!["db".into()]),
            }]),
        };
        let s = Selector::from_label_selector(Some(&ls), "s").expect("valid");
        assert!(s.matches(&labels(&[("app", "web")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "db")])));
        assert!(!s.matches(&labels(&[("app", "db")])));
    }

    #[test]
    fn bad_selectors_name_the_field() {
        let ls = meta::LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![meta::LabelSelectorRequirement {
                key: "tier".into(),
                operator: "Near".into(),
                values: None,
            }]),
        };
        let e = Selector::from_label_selector(Some(&ls), "spec.x.labelSelector").expect_err("invalid");
        assert!(e.contains("spec.x.labelSelector.matchExpressions[0].operator"), "{e}");
        let ls = meta::LabelSelector { match_labels: Some([("bad key!".to_string(), "v".to_string())].into()), match_expressions: None };
        assert!(Selector::from_label_selector(Some(&ls), "s").is_err());
    }

    #[test]
    fn node_selector_terms() {
        let t = core::NodeSelectorTerm {
            match_expressions: Some(vec![core::NodeSelectorRequirement { key: "n".into(), operator: "Gt".into(), values: Some(vec!["5".into()]) }]),
            match_fields: Some(vec![core::NodeSelectorRequirement { key: "metadata.name".into(), operator: "In".into(), values: Some(vec!["node-1".into()]) }]),
        };
        let t = NodeSelectorTerm::compile(&t, "t").expect("valid").expect("non-empty");
        assert!(t.matches("node-1", &labels(&[("n", "6")])));
        assert!(!t.matches("node-2", &labels(&[("n", "6")])));
        assert!(!t.matches("node-1", &labels(&[("n", "5")])));
        assert_eq!(NodeSelectorTerm::compile(&core::NodeSelectorTerm::default(), "t"), Ok(None));
    }

    #[test]
    fn pod_labels_read_as_the_map_they_were_made_from() {
        let m = labels(&[("app", "web"), ("a", ""), ("pod-template-hash", "5d4f"), ("zz/key", "v")]);
        let p = PodLabels::from_map(&m);
        assert_eq!((p.len(), p.is_empty()), (4, false));
        for (k, v) in &m {
            assert_eq!(p.get(k), Some(v.as_str()), "{k}");
        }
        assert_eq!(p.get("ap"), None);
        assert_eq!(p.get(""), None);
        assert!(p.contains_key("a") && !p.contains_key("b"));
        assert_eq!(p.to_map(), m);
        assert!(p.iter().map(|(k, _)| k).eq(m.keys().map(String::as_str)));
        assert_eq!(format!("{p:?}"), format!("{m:?}"));
        assert_eq!(p, m.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect::<PodLabels>());
        assert_ne!(p, PodLabels::from_map(&labels(&[("app", "web")])));
        // Keys and values are not confused across their boundary.
        assert_ne!(PodLabels::from_map(&labels(&[("ab", "c")])), PodLabels::from_map(&labels(&[("a", "bc")])));
        let empty = PodLabels::default();
        assert_eq!((empty.len(), empty.get("a")), (0, None));
        let sel = Selector::from_map(&labels(&[("app", "web")]));
        assert!(sel.matches(&p) && !sel.matches(&empty));
    }

    proptest::proptest! {
        #[test]
        fn pod_labels_answer_as_a_map(kv in proptest::collection::btree_map("[a-c]{0,3}", "[a-c]{0,2}", 0..8), probe in "[a-c]{0,3}") {
            let p = PodLabels::from_map(&kv);
            proptest::prop_assert_eq!(p.get(&probe), kv.get(&probe).map(String::as_str));
            proptest::prop_assert_eq!(p.len(), kv.len());
            proptest::prop_assert_eq!(p.to_map(), kv);
        }
    }
}
