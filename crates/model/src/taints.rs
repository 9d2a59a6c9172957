//! Taints and tolerations.

use k8s_openapi::api::core::v1 as core;

/// A taint effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Effect {
    /// NoSchedule.
    NoSchedule,
    /// PreferNoSchedule.
    PreferNoSchedule,
    /// NoExecute.
    NoExecute,
    /// Any other value: never tolerated by an effect-specific toleration.
    Other,
}

impl Effect {
    /// Reads an effect string.
    pub fn parse(s: &str) -> Effect {
        match s {
            "NoSchedule" => Effect::NoSchedule,
            "PreferNoSchedule" => Effect::PreferNoSchedule,
            "NoExecute" => Effect::NoExecute,
            _ => Effect::Other,
        }
    }
}

/// A node taint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value.
    pub value: String,
    /// Effect.
    pub effect: Effect,
    /// The effect as written (for messages).
    pub effect_name: String,
}

impl Taint {
    /// From the API type.
    pub fn from_api(t: &core::Taint) -> Self {
        Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect: Effect::parse(&t.effect),
            effect_name: t.effect.clone(),
        }
    }
}

/// A pod toleration.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Toleration {
    /// Key (empty: any key, with operator Exists).
    pub key: String,
    /// Operator is Exists (else Equal).
    pub exists: bool,
    /// Operator is something other than Equal/Exists: tolerates nothing.
    pub bad_operator: bool,
    /// Value.
    pub value: String,
    /// Effect (None: any effect).
    pub effect: Option<Effect>,
}

impl Toleration {
    /// From the API type.
    pub fn from_api(t: &core::Toleration) -> Self {
        let op = t.operator.as_deref().unwrap_or("");
        Toleration {
            key: t.key.clone().unwrap_or_default(),
            exists: op == "Exists",
            bad_operator: !matches!(op, "" | "Equal" | "Exists"),
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.as_deref().filter(|e| !e.is_empty()).map(Effect::parse),
        }
    }

    /// Does this toleration tolerate the taint (upstream `ToleratesTaint`)?
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        if self.bad_operator {
            return false;
        }
        self.exists || self.value == taint.value
    }
}

/// Does any of the tolerations tolerate the taint?
pub fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| t.tolerates(taint))
}

/// The first taint with effect NoSchedule or NoExecute that no toleration
/// tolerates (upstream `FindMatchingUntoleratedTaint` with that filter).
pub fn first_untolerated_hard<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| matches!(t.effect, Effect::NoSchedule | Effect::NoExecute))
        .find(|t| !tolerated(tolerations, t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(k: &str, v: &str, e: Effect) -> Taint {
        Taint { key: k.into(), value: v.into(), effect: e, effect_name: format!("{e:?}") }
    }

    #[test]
    fn toleration_table() {
        let t = taint("dedicated", "gpu", Effect::NoSchedule);
        let tol = |k: &str, exists: bool, v: &str, e: Option<Effect>| Toleration { key: k.into(), exists, bad_operator: false, value: v.into(), effect: e };
        assert!(tol("dedicated", false, "gpu", None).tolerates(&t));
        assert!(!tol("dedicated", false, "cpu", None).tolerates(&t));
        assert!(tol("dedicated", true, "", Some(Effect::NoSchedule)).tolerates(&t));
        assert!(!tol("dedicated", true, "", Some(Effect::NoExecute)).tolerates(&t));
        assert!(tol("", true, "", None).tolerates(&t));
        assert!(!tol("other", true, "", None).tolerates(&t));
    }
}
