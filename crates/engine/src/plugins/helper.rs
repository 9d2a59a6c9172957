//! Helpers shared by plugins.

use crate::framework::{NodeScore, MAX_NODE_SCORE};

/// Upstream `DefaultNormalizeScore`: scales scores so the highest becomes
/// `MAX_NODE_SCORE`; with `reverse`, the lowest raw score wins.
pub fn default_normalize(scores: &mut [NodeScore], reverse: bool) {
    let max = scores.iter().map(|s| s.score).max().unwrap_or(0);
    if max == 0 {
        if reverse {
            for s in scores.iter_mut() {
                s.score = MAX_NODE_SCORE;
            }
        }
        return;
    }
    for s in scores.iter_mut() {
        s.score = MAX_NODE_SCORE * s.score / max;
        if reverse {
            s.score = MAX_NODE_SCORE - s.score;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize() {
        let mk = |v: &[i64]| v.iter().enumerate().map(|(i, &s)| NodeScore { node: i, score: s }).collect::<Vec<_>>();
        let mut s = mk(&[1, 2, 4]);
        default_normalize(&mut s, false);
        assert_eq!(s.iter().map(|x| x.score).collect::<Vec<_>>(), vec![25, 50, 100]);
        let mut s = mk(&[1, 2, 4]);
        default_normalize(&mut s, true);
        assert_eq!(s.iter().map(|x| x.score).collect::<Vec<_>>(), vec![75, 50, 0]);
        let mut s = mk(&[0, 0]);
        default_normalize(&mut s, true);
        assert_eq!(s.iter().map(|x| x.score).collect::<Vec<_>>(), vec![100, 100]);
    }
}
