//! A pod's scheduling signature (upstream's opportunistic batching, KEP-5598):
//! two pending pods with the same signature get the same Filter verdict and
//! the same raw Score from every node-local plugin on the same node, so a
//! cycle may reuse the previous pod's per-node results for the nodes that did
//! not change since.
//!
//! The signature is conservative: it covers every field of the compact pod
//! view except the pod's identity and timestamps (uid, name, creation and
//! start time, nomination), hashed through `PodInfo`'s derived `Hash`, so a
//! field added to [`PodInfo`] later is covered without anyone remembering
//! to add it here (its type must be `Hash` for the crate to build).
//!
//! One exception: the name of the claim a pod's ResourceClaimTemplate made
//! for it (every pod has its own) is left out, so that pods of one template
//! can share a signature. What their claims ask for is not in the pod: the
//! DynamicResources plugin adds it to the cycle's signature from the claims
//! themselves (`Plugin::sign_pod` in the engine), and leaves pods whose
//! claims are allocated already unsigned.

use std::hash::{DefaultHasher, Hash, Hasher};

use super::pod::ClaimSource;
use super::PodInfo;

/// The signature of `p` (never 0; 0 means "no signature").
pub fn of(p: &PodInfo) -> u64 {
    let mut shape = p.clone();
    shape.uid = String::new();
    shape.name = String::new();
    shape.created_ms = 0;
    shape.start_ms = 0;
    shape.nominated_node = None;
    shape.signature = 0;
    for c in &mut shape.resource_claims {
        if let ClaimSource::FromTemplate(Some(Some(name))) = &mut c.source {
            name.clear();
        }
    }
    // The derived `Hash` reads every field (fixed keys: equal pods, equal
    // signatures, in every process).
    let mut h = DefaultHasher::new();
    shape.hash(&mut h);
    h.finish().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_does_not_count_but_the_spec_does() {
        let a = PodInfo { uid: "a".into(), name: "a".into(), created_ms: 1, ..Default::default() };
        let b = PodInfo { uid: "b".into(), name: "b".into(), created_ms: 2, ..Default::default() };
        assert_eq!(of(&a), of(&b));
        let mut c = b.clone();
        c.non_zero_cpu = 5;
        assert_ne!(of(&a), of(&c));
        let mut d = b.clone();
        d.images.push("x".into());
        assert_ne!(of(&a), of(&d));
        assert_ne!(of(&a), 0);
        // Fields deep in the view count too.
        let mut e = b.clone();
        e.required_features.push("x");
        assert_ne!(of(&a), of(&e));
        let mut f = b.clone();
        f.requests.milli_cpu = 1;
        assert_ne!(of(&a), of(&f));
        let mut g = b.clone();
        g.namespace = "other".into();
        assert_ne!(of(&a), of(&g));
        let mut n = b.clone();
        n.nominated_node = Some("n".into());
        n.start_ms = 9;
        assert_eq!(of(&a), of(&n));
        // The claim a template made for the pod does not count (the plugin
        // signs what it asks for); whether it exists, and named claims, do.
        use crate::pod::PodClaim;
        let with = |source: ClaimSource| PodInfo { resource_claims: vec![PodClaim { name: "gpu".into(), source }], ..b.clone() };
        let t1 = with(ClaimSource::FromTemplate(Some(Some("b-gpu-x7k2p".into()))));
        let t2 = with(ClaimSource::FromTemplate(Some(Some("c-gpu-p2k7x".into()))));
        assert_eq!(of(&t1), of(&t2));
        assert_ne!(of(&t1), of(&a));
        assert_ne!(of(&t1), of(&with(ClaimSource::FromTemplate(None))));
        assert_ne!(of(&t1), of(&with(ClaimSource::FromTemplate(Some(None)))));
        assert_ne!(of(&with(ClaimSource::Named("x".into()))), of(&with(ClaimSource::Named("y".into()))));
    }
}
