//! The container and TTL reaper, ZooKeeper's ContainerManager: on the
//! leader, a pass every `container_check_interval_ms` proposes a
//! DeleteContainer for every candidate `DataTree::reap_candidates` finds
//! (an empty container that once had a child, a childless TTL node not
//! modified within its TTL). A container emptied by a pass's deletion is a
//! candidate of the next pass, as in ZooKeeper: a path nested N deep goes
//! in about N intervals.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use keel_jute::Stat;
use keel_tree::TxnOp;

use crate::shared::{wall_clock_ms, Shared};

/// Most deletions one pass proposes; the candidates beyond it are proposed
/// by the following passes (ZooKeeper bounds the rate instead, with
/// `znode.container.maxPerMinute`).
pub const REAP_PROPOSALS_PER_PASS_MAX: usize = 1_000;
/// Most proposed deletions not yet applied; a pass proposes no new path
/// beyond it (those wait for a later pass).
pub const REAP_UNAPPLIED_MAX: usize = 10_000;
/// A deletion proposed this long ago whose node is still there unchanged
/// is proposed again: its proposal was lost (a leader change) or failed.
pub const REAP_RESEND_AFTER_MS: u64 = 2_000;

const _: () = assert!(REAP_PROPOSALS_PER_PASS_MAX <= REAP_UNAPPLIED_MAX);

/// A node's state as far as a deletion cares: applying a DeleteContainer
/// removes the node, and anything that can make one fail (a child added,
/// data set) changes one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeStamp {
    mzxid: i64,
    pzxid: i64,
    cversion: i32,
}

impl NodeStamp {
    pub fn of(stat: &Stat) -> NodeStamp {
        NodeStamp {
            mzxid: stat.mzxid,
            pzxid: stat.pzxid,
            cversion: stat.cversion,
        }
    }
}

struct Proposed {
    stamp: NodeStamp,
    at_ms: u64,
}

/// Which candidates a pass proposes: each one once until it is applied
/// (a proposal takes a log entry and a zxid, so a short interval must not
/// repeat deletions still in flight).
#[derive(Default)]
pub struct Reaper {
    proposed: HashMap<String, Proposed>,
}

impl Reaper {
    /// The candidates to propose now, in the given order: new ones, those
    /// whose node changed since their proposal, and those proposed
    /// `REAP_RESEND_AFTER_MS` ago; within the per-pass and unapplied bounds.
    pub fn select(&mut self, candidates: Vec<(String, NodeStamp)>, now_ms: u64) -> Vec<String> {
        let current: HashSet<&str> = candidates.iter().map(|(path, _)| path.as_str()).collect();
        // No longer a candidate: deleted (applied) or in use again.
        self.proposed
            .retain(|path, _| current.contains(path.as_str()));
        let mut chosen = Vec::new();
        for (path, stamp) in candidates {
            if chosen.len() == REAP_PROPOSALS_PER_PASS_MAX {
                break;
            }
            let due = match self.proposed.get(&path) {
                None => self.proposed.len() < REAP_UNAPPLIED_MAX,
                Some(earlier) => {
                    earlier.stamp != stamp
                        || now_ms >= earlier.at_ms.saturating_add(REAP_RESEND_AFTER_MS)
                }
            };
            if due {
                self.proposed.insert(
                    path.clone(),
                    Proposed {
                        stamp,
                        at_ms: now_ms,
                    },
                );
                chosen.push(path);
            }
        }
        assert!(chosen.len() <= REAP_PROPOSALS_PER_PASS_MAX);
        assert!(self.proposed.len() <= REAP_UNAPPLIED_MAX);
        chosen
    }

    /// This node stopped leading: whatever it proposed is the new
    /// leader's to redo.
    pub fn forget(&mut self) {
        self.proposed.clear();
    }
}

/// One pass every `container_check_interval_ms` (tokio's timer has 1 ms
/// resolution; a pass that overruns delays the next instead of bursting).
pub async fn run(shared: Arc<Shared>) {
    let interval_ms = shared.config.container_check_interval_ms;
    assert!(interval_ms > 0, "validated by ServerConfig");
    let mut passes = tokio::time::interval(Duration::from_millis(interval_ms));
    passes.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reaper = Reaper::default();
    loop {
        passes.tick().await;
        if !shared.raft().is_leader() {
            reaper.forget();
            continue;
        }
        pass(&shared, &mut reaper);
    }
}

fn pass(shared: &Shared, reaper: &mut Reaper) {
    let _op = crate::profile::enter(crate::profile::Op::REAPER);
    let candidates: Vec<(String, NodeStamp)> = {
        let tree = shared.node.tree();
        tree.reap_candidates(wall_clock_ms())
            .into_iter()
            .filter_map(|path| {
                let stamp = NodeStamp::of(&tree.node(&path)?.stat);
                Some((path, stamp))
            })
            .collect()
    };
    if candidates.is_empty() {
        return reaper.forget();
    }
    for path in reaper.select(candidates, shared.now_ms()) {
        tracing::debug!(path, "reaping");
        crate::propose_internal(shared, 0, TxnOp::DeleteContainer { path });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(pzxid: i64) -> NodeStamp {
        NodeStamp {
            mzxid: 1,
            pzxid,
            cversion: 1,
        }
    }

    fn candidates(paths: &[&str]) -> Vec<(String, NodeStamp)> {
        paths.iter().map(|p| (p.to_string(), stamp(5))).collect()
    }

    #[test]
    fn a_deletion_in_flight_is_not_proposed_again_until_it_is_overdue() {
        let mut reaper = Reaper::default();
        assert_eq!(reaper.select(candidates(&["/a", "/b"]), 0), ["/a", "/b"]);
        assert!(reaper.select(candidates(&["/a", "/b"]), 1).is_empty());
        // /a was deleted; its parent became a candidate in the next pass.
        assert_eq!(reaper.select(candidates(&["/b", "/p"]), 2), ["/p"]);
        assert_eq!(
            reaper.select(candidates(&["/b", "/p"]), REAP_RESEND_AFTER_MS),
            ["/b"]
        );
    }

    #[test]
    fn a_node_that_changed_since_its_proposal_is_proposed_again_at_once() {
        let mut reaper = Reaper::default();
        assert_eq!(reaper.select(candidates(&["/c"]), 0), ["/c"]);
        // A child came and went before the deletion applied: it failed
        // (NotEmpty) and the container is empty again, with a new pzxid.
        assert_eq!(reaper.select(vec![("/c".into(), stamp(9))], 1), ["/c"]);
        assert!(reaper.select(vec![("/c".into(), stamp(9))], 2).is_empty());
    }

    #[test]
    fn one_pass_proposes_at_most_its_bound_and_the_next_pass_the_rest() {
        let mut reaper = Reaper::default();
        let many: Vec<(String, NodeStamp)> = (0..REAP_PROPOSALS_PER_PASS_MAX + 10)
            .map(|i| (format!("/c{i:05}"), stamp(5)))
            .collect();
        let first = reaper.select(many.clone(), 0);
        assert_eq!(first.len(), REAP_PROPOSALS_PER_PASS_MAX);
        let second = reaper.select(many, 1);
        assert_eq!(second.len(), 10);
        assert!(second.iter().all(|path| !first.contains(path)));
    }

    #[test]
    fn unapplied_deletions_are_bounded() {
        let mut reaper = Reaper::default();
        let many: Vec<(String, NodeStamp)> = (0..REAP_UNAPPLIED_MAX + 5)
            .map(|i| (format!("/c{i:06}"), stamp(5)))
            .collect();
        let mut proposed = 0;
        for pass in 0..(REAP_UNAPPLIED_MAX / REAP_PROPOSALS_PER_PASS_MAX + 2) {
            proposed += reaper.select(many.clone(), pass as u64).len();
        }
        assert_eq!(proposed, REAP_UNAPPLIED_MAX);
        reaper.forget();
        assert_eq!(reaper.select(many, 100).len(), REAP_PROPOSALS_PER_PASS_MAX);
    }
}
