//! ClusterRole aggregation, as upstream's clusterrole-aggregation
//! controller (`pkg/controller/clusterroleaggregation`): a ClusterRole with
//! `aggregationRule.clusterRoleSelectors` gets the union of the rules of
//! the other ClusterRoles its selectors match (each selector's matches in
//! name order, a rule already present not repeated). Aggregated roles may
//! feed others (`view` into `edit` into `admin`), so the union is taken
//! until nothing changes, as the controller converges.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::rules::same_rule;

/// A selector the controller cannot use (it leaves the role as it is).
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A `matchExpressions` entry is malformed.
    #[error("clusterrole {role:?}: invalid aggregation selector: {message}")]
    BadSelector {
        /// The aggregating ClusterRole.
        role: String,
        /// What is wrong (upstream's `LabelSelectorAsSelector` error).
        message: String,
    },
}

/// `metav1.LabelSelectorAsSelector` then `Matches`: every `matchLabels`
/// pair and every expression must hold; an empty selector matches all. A
/// malformed expression is an error whatever the labels.
pub fn selector_matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> Result<bool, String> {
    let exprs = sel.match_expressions.as_deref().unwrap_or_default();
    for e in exprs {
        let empty = e.values.as_deref().unwrap_or_default().is_empty();
        match e.operator.as_str() {
            "In" | "NotIn" if empty => return Err(format!("for 'in', 'notin' operators, values set can't be empty (key {:?})", e.key)),
            "Exists" | "DoesNotExist" if !empty => return Err(format!("values set must be empty for exists and does not exist (key {:?})", e.key)),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            op => return Err(format!("{op:?} is not a valid label selector operator")),
        }
    }
    let labels_ok = sel.match_labels.iter().flatten().all(|(k, v)| labels.get(k) == Some(v));
    Ok(labels_ok
        && exprs.iter().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            let value = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => !value.is_some_and(|v| values.contains(v)),
                "Exists" => value.is_some(),
                _ => value.is_none(),
            }
        }))
}

/// What aggregation needs of a ClusterRole.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RoleView {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// The rules as stored.
    pub rules: Vec<PolicyRule>,
    /// `Some` when the role has an aggregationRule (even an empty one:
    /// the controller then sets no rules).
    pub selectors: Option<Vec<LabelSelector>>,
}

impl RoleView {
    pub fn of(cr: &ClusterRole) -> RoleView {
        RoleView {
            name: cr.metadata.name.clone().unwrap_or_default(),
            labels: cr.metadata.labels.clone().unwrap_or_default(),
            rules: cr.rules.clone().unwrap_or_default(),
            selectors: cr.aggregation_rule.as_ref().map(|a| a.cluster_role_selectors.clone().unwrap_or_default()),
        }
    }
}

/// The result of aggregating a set of ClusterRoles.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Aggregation {
    /// For each aggregating ClusterRole whose selectors are valid, the
    /// rules the controller would give it.
    pub rules: BTreeMap<String, Vec<PolicyRule>>,
    /// Aggregating roles left as they are, and why.
    pub errors: Vec<Error>,
}

/// Aggregates over `views` (any order), to a fixed point.
pub(crate) fn aggregate_views<'a>(views: impl IntoIterator<Item = &'a RoleView>) -> Aggregation {
    let mut views: Vec<&RoleView> = views.into_iter().collect();
    views.sort_by(|a, b| a.name.cmp(&b.name));
    let mut errors = Vec::new();
    // For each aggregating role: its index and, per selector, the indexes it matches (name order).
    let mut plans: Vec<(usize, Vec<Vec<usize>>)> = Vec::new();
    for (i, v) in views.iter().enumerate() {
        let Some(selectors) = &v.selectors else { continue };
        let mut per_selector = Vec::new();
        let mut bad = None;
        for sel in selectors {
            let mut matched = Vec::new();
            for (j, other) in views.iter().enumerate() {
                if j == i {
                    continue;
                }
                match selector_matches(sel, &other.labels) {
                    Ok(true) => matched.push(j),
                    Ok(false) => {}
                    Err(m) => {
                        bad = Some(m);
                        break;
                    }
                }
            }
            if bad.is_some() {
                break;
            }
            per_selector.push(matched);
        }
        match bad {
            Some(message) => errors.push(Error::BadSelector { role: v.name.clone(), message }),
            None => plans.push((i, per_selector)),
        }
    }
    let mut effective: Vec<Vec<PolicyRule>> = views.iter().map(|v| v.rules.clone()).collect();
    // Each pass can only pull rules one aggregation step further; more
    // passes than roles means a cycle that does not settle (cannot happen
    // with unions, but bound it anyway).
    for _ in 0..=views.len() {
        let mut changed = false;
        for (i, per_selector) in &plans {
            let mut union: Vec<PolicyRule> = Vec::new();
            for matched in per_selector {
                for &j in matched {
                    for r in &effective[j] {
                        if !union.iter().any(|u| same_rule(u, r)) {
                            union.push(r.clone());
                        }
                    }
                }
            }
            if !super::rules::same_rules(&union, &effective[*i]) {
                effective[*i] = union;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let rules = plans.iter().map(|(i, _)| (views[*i].name.clone(), effective[*i].clone())).collect();
    Aggregation { rules, errors }
}

/// Aggregates `cluster_roles` as the controller would once settled.
pub fn aggregate(cluster_roles: &[ClusterRole]) -> Aggregation {
    let views: Vec<RoleView> = cluster_roles.iter().map(RoleView::of).collect();
    aggregate_views(&views)
}

/// The ClusterRoles whose stored rules differ from their aggregation, with
/// the rules to write back (what the controller would update).
pub fn updates(cluster_roles: &[ClusterRole]) -> Vec<(String, Vec<PolicyRule>)> {
    let agg = aggregate(cluster_roles);
    cluster_roles
        .iter()
        .filter_map(|cr| {
            let name = cr.metadata.name.as_deref()?;
            let want = agg.rules.get(name)?;
            let have = cr.rules.as_deref().unwrap_or_default();
            (!super::rules::same_rules(want, have)).then(|| (name.to_string(), want.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rbac::rules::{RuleBuilder, rule, same_rules};
    use k8s_openapi::api::rbac::v1::AggregationRule;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, ObjectMeta};

    fn role(name: &str, labels: &[(&str, &str)], rules: Vec<PolicyRule>, aggregate_labels: Option<&[(&str, &str)]>) -> ClusterRole {
        ClusterRole {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(labels.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()),
                ..ObjectMeta::default()
            },
            rules: Some(rules),
            aggregation_rule: aggregate_labels.map(|l| AggregationRule {
                cluster_role_selectors: Some(vec![LabelSelector { match_labels: Some(l.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()), match_expressions: None }]),
            }),
        }
    }

    /// Upstream's controller test cases (clusterroleaggregation_controller_test.go):
    /// no aggregation, one match, two matches with a shared rule, a chain.
    #[test]
    fn unions_in_name_order_without_repeats_and_chains() {
        let get_pods = rule(&["get"]).groups(&[""]).resources(&["pods"]);
        let list_pods = rule(&["list"]).groups(&[""]).resources(&["pods"]);
        let get_nodes = rule(&["get"]).groups(&[""]).resources(&["nodes"]);
        let roles = vec![
            role("admin", &[], vec![], Some(&[("to-admin", "true")])),
            role("edit", &[("to-admin", "true")], vec![], Some(&[("to-edit", "true")])),
            role("view", &[("to-edit", "true")], vec![], Some(&[("to-view", "true")])),
            role("b-view-part", &[("to-view", "true")], vec![list_pods.clone(), get_pods.clone()], None),
            role("a-view-part", &[("to-view", "true")], vec![get_pods.clone()], None),
            role("edit-part", &[("to-edit", "true")], vec![get_nodes.clone()], None),
            role("plain", &[], vec![get_nodes.clone()], None),
        ];
        let agg = aggregate(&roles);
        assert!(agg.errors.is_empty());
        assert!(same_rules(&agg.rules["view"], &[get_pods.clone(), list_pods.clone()]));
        // edit: its selector matches edit-part and view, in name order.
        assert!(same_rules(&agg.rules["edit"], &[get_nodes.clone(), get_pods.clone(), list_pods.clone()]));
        assert!(same_rules(&agg.rules["admin"], &agg.rules["edit"].clone()));
        assert!(!agg.rules.contains_key("plain"));
        let ups = updates(&roles);
        assert_eq!(ups.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["admin", "edit", "view"]);
        // Written back, nothing more to do.
        let written: Vec<ClusterRole> = roles
            .into_iter()
            .map(|mut r| {
                if let Some((_, rules)) = ups.iter().find(|(n, _)| Some(n) == r.metadata.name.as_ref()) {
                    r.rules = Some(rules.clone());
                }
                r
            })
            .collect();
        assert!(updates(&written).is_empty());
    }

    #[test]
    fn an_empty_aggregation_rule_clears_and_a_bad_selector_is_left_alone() {
        let get_pods = rule(&["get"]).groups(&[""]).resources(&["pods"]);
        let mut empty = role("empty", &[], vec![get_pods.clone()], None);
        empty.aggregation_rule = Some(AggregationRule { cluster_role_selectors: None });
        let mut bad = role("bad", &[], vec![get_pods.clone()], None);
        bad.aggregation_rule = Some(AggregationRule {
            cluster_role_selectors: Some(vec![LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![LabelSelectorRequirement { key: "k".into(), operator: "In".into(), values: None }]),
            }]),
        });
        let agg = aggregate(&[empty, bad, role("other", &[("k", "v")], vec![get_pods], None)]);
        assert_eq!(agg.rules["empty"], Vec::<PolicyRule>::new());
        assert!(!agg.rules.contains_key("bad"));
        assert!(matches!(&agg.errors[..], [Error::BadSelector { role, .. }] if role == "bad"));
    }

    #[test]
    fn selectors() {
        let labels: BTreeMap<String, String> = [("a".to_string(), "1".to_string())].into();
        let expr = |op: &str, values: &[&str]| LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: op.into(),
                values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_string()).collect()),
            }]),
        };
        assert_eq!(selector_matches(&LabelSelector::default(), &labels), Ok(true));
        assert_eq!(selector_matches(&expr("In", &["1", "2"]), &labels), Ok(true));
        assert_eq!(selector_matches(&expr("NotIn", &["1"]), &labels), Ok(false));
        assert_eq!(selector_matches(&expr("Exists", &[]), &labels), Ok(true));
        assert_eq!(selector_matches(&expr("DoesNotExist", &[]), &labels), Ok(false));
        assert!(selector_matches(&expr("In", &[]), &labels).is_err());
        assert!(selector_matches(&expr("Gt", &["1"]), &labels).is_err());
    }
}
