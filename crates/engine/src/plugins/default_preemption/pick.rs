//! Picking one candidate: upstream `pickOneNodeForPreemption` with the
//! default criteria.

use std::sync::Arc;

use berth_model::PodInfo;

use super::candidates::Candidate;

/// The start time of the highest-priority victims: the earliest among them
/// (upstream `GetEarliestPodStartTime`).
pub(super) fn earliest_top_start(victims: &[Arc<PodInfo>]) -> i64 {
    let Some(first) = victims.first() else { return i64::MIN };
    let mut top = first.priority;
    let mut start = first.start_ms;
    for v in victims {
        if v.priority > top {
            top = v.priority;
            start = v.start_ms;
        } else if v.priority == top && v.start_ms < start {
            start = v.start_ms;
        }
    }
    start
}

/// Upstream `pickOneNodeForPreemption` with the default criteria, each a score
/// where higher wins, applied in turn to the candidates still tied.
pub fn pick_one(candidates: &[Candidate]) -> Option<usize> {
    type Score = fn(&Candidate) -> i64;
    const CRITERIA: [Score; 5] = [
        // Fewest PDB violations.
        |c| -(c.pdb_violations as i64),
        // Lowest highest-priority victim.
        |c| -i64::from(c.victims.first().map_or(i32::MIN, |v| v.priority)),
        // Lowest sum of priorities, each shifted to be non-negative.
        |c| -c.victims.iter().map(|v| i64::from(v.priority) + i64::from(i32::MAX) + 1).sum::<i64>(),
        // Fewest victims.
        |c| -(c.victims.len() as i64),
        // Latest start among the highest-priority victims.
        |c| earliest_top_start(&c.victims),
    ];
    let mut remaining: Vec<usize> = (0..candidates.len()).collect();
    for f in CRITERIA {
        if remaining.len() <= 1 {
            break;
        }
        let best = remaining.iter().map(|&i| f(&candidates[i])).max()?;
        remaining.retain(|&i| f(&candidates[i]) == best);
    }
    remaining.first().copied()
}


#[cfg(test)]
mod tests {
    use super::*;


    fn cand(node: usize, pdb: usize, victims: &[(i32, i64)]) -> Candidate {
        let victims = victims
            .iter()
            .enumerate()
            .map(|(i, &(priority, start_ms))| Arc::new(PodInfo { name: format!("v{node}-{i}"), priority, start_ms, ..Default::default() }))
            .collect();
        Candidate { node, victims, pdb_violations: pdb }
    }

    #[test]
    fn pick_one_criteria() {
        let rows: Vec<(&str, Vec<Candidate>, usize)> = vec![
            ("single candidate", vec![cand(0, 3, &[(9, 0)])], 0),
            ("fewest PDB violations", vec![cand(0, 1, &[(1, 0)]), cand(1, 0, &[(9, 0), (9, 0)])], 1),
            ("lowest highest priority", vec![cand(0, 0, &[(5, 0)]), cand(1, 0, &[(3, 0), (3, 0), (3, 0)])], 1),
            ("lowest sum of priorities", vec![cand(0, 0, &[(5, 0), (4, 0)]), cand(1, 0, &[(5, 0), (2, 0)])], 1),
            ("negative priorities: fewer pods win the sum", vec![cand(0, 0, &[(-5, 0), (-5, 0)]), cand(1, 0, &[(-5, 0)])], 1),
            ("fewest victims on equal sums", vec![cand(0, 0, &[(0, 0), (0, 0)]), cand(1, 0, &[(0, 0), (0, 0)]), cand(2, 0, &[(0, 0), (0, 0)])], 0),
            (
                "latest start of the highest-priority victims",
                vec![cand(0, 0, &[(5, 100), (5, 300), (1, 900)]), cand(1, 0, &[(5, 200), (5, 250), (1, 10)])],
                1,
            ),
            ("full tie: the first", vec![cand(0, 0, &[(1, 5)]), cand(1, 0, &[(1, 5)])], 0),
        ];
        for (name, cs, want) in rows {
            assert_eq!(pick_one(&cs).map(|i| cs[i].node), Some(want), "{name}");
        }
        assert_eq!(pick_one(&[]), None);
    }
}
