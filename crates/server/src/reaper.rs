//! The container and TTL reaper, ZooKeeper's ContainerManager: on the
//! leader, a pass every `container_check_interval_ms` proposes a
//! DeleteContainer for every candidate `DataTree::reap_candidates` finds
//! (an empty container that once had a child, a childless TTL node not
//! modified within its TTL). A container emptied by a pass's deletion is a
//! candidate of the next pass, as in ZooKeeper: a path nested N deep goes
//! in about N intervals.
//!
//! A TTL node goes only when two clocks agree its TTL has passed: the
//! wall-clock rule every replica checks (`wall now - mtime > ttl`, as
//! ZooKeeper's) and this node's monotonic clock, counted from when it
//! applied the node's last change (`ttl_clock.rs`). A wall clock jumping
//! forward therefore reaps nothing early; one jumping back delays reaping
//! by the jump, as in ZooKeeper (late, never early).
//!
//! `Reaper::pass` is the whole decision, without IO: the server's timer
//! (`run`) and the simulator's tick call it with both clocks' readings and
//! propose what it returns.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use keel_jute::Stat;
use keel_tree::{Txn, TxnOp};

use crate::node::{internal_txn, Node, Outlet};
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

impl Reaper {
    /// One pass on this node, the step the server's timer (`run`) and the
    /// simulator's tick both take every `container_check_interval_ms`: on
    /// the leader, the DeleteContainer transactions to propose now, made
    /// at `wall_ms` (the wall clock node times are kept in), of the
    /// candidates due by both clocks (`monotonic_ms` is the node's clock,
    /// `Node::now_ms`, which its apply step stamps TTL changes with);
    /// elsewhere none, and what this node proposed while leading is
    /// forgotten (the new leader redoes it).
    pub fn pass<O: Outlet>(
        &mut self,
        node: &Node<O>,
        leader: bool,
        wall_ms: i64,
        monotonic_ms: u64,
    ) -> Vec<Txn> {
        if !leader {
            self.forget();
            return Vec::new();
        }
        let candidates = node.with_tree_and_ttl_clock(|tree, ttl_clock| {
            // A change this node has no record of is not old enough: it
            // cannot tell how old it is (never happens: the apply step
            // records every change; the simulator checks that it does).
            let local_age_ms = |path: &str, mzxid: i64| {
                let age_ms = ttl_clock.age_ms(path, mzxid, monotonic_ms).unwrap_or(0);
                i64::try_from(age_ms).unwrap_or(i64::MAX)
            };
            let paths = tree.reap_candidates_aged(wall_ms, local_age_ms);
            paths
                .into_iter()
                .filter_map(|path| {
                    let stamp = NodeStamp::of(&tree.node(&path)?.stat);
                    Some((path, stamp))
                })
                .collect::<Vec<(String, NodeStamp)>>()
        });
        self.select(candidates, monotonic_ms)
            .into_iter()
            .map(|path| internal_txn(0, TxnOp::DeleteContainer { path }, wall_ms))
            .collect()
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
        let leader = shared.raft().is_leader();
        let _op = leader.then(|| crate::profile::enter(crate::profile::Op::REAPER));
        let monotonic_ms = shared.node.now_ms();
        for txn in reaper.pass(&shared.node, leader, wall_clock_ms(), monotonic_ms) {
            if let TxnOp::DeleteContainer { path } = &txn.op {
                tracing::debug!(path, "reaping");
            }
            crate::propose(&shared, &txn);
        }
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

    struct ManualClock(std::sync::atomic::AtomicU64);

    impl crate::node::Clock for ManualClock {
        fn now_ms(&self) -> u64 {
            self.0.load(std::sync::atomic::Ordering::Relaxed)
        }
    }

    struct Nowhere;

    impl Outlet for Nowhere {
        fn send(&self, _: crate::node::Outbound) {}
    }

    const SESSION: i64 = 9;

    fn apply(tree: &mut keel_tree::DataTree, time_ms: i64, request: keel_jute::Request) {
        let mut body = Vec::new();
        request.encode(&mut body);
        let op = TxnOp::Request {
            op_code: request.op_code(),
            body,
        };
        let txn = Txn {
            session_id: SESSION,
            xid: 1,
            time_ms,
            auth: Vec::new(),
            op,
        };
        tree.apply(1, &txn).result.expect("applies");
    }

    fn create(path: &str) -> keel_jute::CreateRequest {
        keel_jute::CreateRequest {
            path: path.into(),
            data: None,
            acl: keel_tree::acl::open_acl_unsafe(),
            flags: 0,
        }
    }

    /// A node (loaded at monotonic time `loaded_ms`) holding an emptied
    /// container /c and a TTL node /t of 500 ms, both written at wall
    /// time 1,000.
    fn node_with_container_and_ttl_node(loaded_ms: u64) -> Node<Nowhere> {
        use keel_jute::Request;
        let mut tree = keel_tree::DataTree::new();
        let session = TxnOp::CreateSession { timeout_ms: 60_000 };
        tree.apply(1, &internal_txn(SESSION, session, 1_000));
        let container = keel_jute::CreateRequest {
            flags: 4,
            ..create("/c")
        };
        apply(&mut tree, 1_000, Request::CreateContainer(container));
        apply(&mut tree, 1_000, Request::Create(create("/c/x")));
        let delete = keel_jute::DeleteRequest {
            path: "/c/x".into(),
            version: -1,
        };
        apply(&mut tree, 1_000, Request::Delete(delete));
        let ttl = keel_jute::CreateTtlRequest {
            path: "/t".into(),
            data: None,
            acl: keel_tree::acl::open_acl_unsafe(),
            flags: 5,
            ttl: 500,
        };
        apply(&mut tree, 1_000, Request::CreateTtl(ttl));
        let clock = ManualClock(std::sync::atomic::AtomicU64::new(loaded_ms));
        Node::new(tree, 1, 100, Arc::new(clock))
    }

    fn paths(txns: Vec<Txn>) -> Vec<String> {
        txns.into_iter()
            .map(|txn| {
                assert_eq!(txn.xid, crate::node::INTERNAL_XID);
                match txn.op {
                    TxnOp::DeleteContainer { path } => path,
                    other => panic!("{other:?}"),
                }
            })
            .collect()
    }

    #[test]
    fn a_pass_on_the_leader_proposes_the_due_deletions_and_elsewhere_none() {
        let node = node_with_container_and_ttl_node(0);
        let mut reaper = Reaper::default();
        assert!(
            reaper.pass(&node, false, 2_000, 1_000).is_empty(),
            "not leading"
        );
        // The TTL node is not due yet (500 ms after its mtime).
        let first = reaper.pass(&node, true, 1_400, 400);
        assert!(first.iter().all(|txn| txn.time_ms == 1_400));
        assert_eq!(paths(first), ["/c"]);
        let due = reaper.pass(&node, true, 1_600, 600);
        assert_eq!(due.len(), 1, "/c is in flight; /t is due: {due:?}");
        assert_eq!(due[0].time_ms, 1_600);
        assert_eq!(paths(due), ["/t"]);
    }

    #[test]
    fn a_wall_clock_jump_forward_reaps_no_ttl_node_before_its_ttl_passed_on_the_monotonic_clock() {
        let node = node_with_container_and_ttl_node(0);
        let mut reaper = Reaper::default();
        const HOUR_MS: i64 = 3_600_000;
        // 100 ms after the write the wall clock says an hour passed.
        assert_eq!(
            paths(reaper.pass(&node, true, 1_100 + HOUR_MS, 100)),
            ["/c"]
        );
        assert!(reaper.pass(&node, true, 1_400 + HOUR_MS, 400).is_empty());
        assert!(
            reaper.pass(&node, true, 1_500 + HOUR_MS, 500).is_empty(),
            "exactly the TTL is not past it"
        );
        assert_eq!(
            paths(reaper.pass(&node, true, 1_501 + HOUR_MS, 501)),
            ["/t"]
        );
    }

    #[test]
    fn a_wall_clock_jump_back_delays_a_ttl_node_by_the_jump_and_never_reaps_it_early() {
        let node = node_with_container_and_ttl_node(0);
        let mut reaper = Reaper::default();
        // An hour back: by the wall clock the TTL has not passed.
        assert_eq!(
            paths(reaper.pass(&node, true, 1_600 - 3_600_000, 600)),
            ["/c"]
        );
        // (/c, never applied here, is overdue and proposed again.)
        assert_eq!(paths(reaper.pass(&node, true, 1_500, 3_600_500)), ["/c"]);
        assert_eq!(paths(reaper.pass(&node, true, 1_501, 3_600_501)), ["/t"]);
    }

    #[test]
    fn a_node_that_just_loaded_its_tree_counts_ttl_nodes_from_the_load() {
        // Loaded (a restart, a snapshot from the leader) at monotonic 10,000:
        // the wall clock says /t is long due, but this node cannot know
        // how old the change is, so it counts from the load: late, not early.
        let node = node_with_container_and_ttl_node(10_000);
        let mut reaper = Reaper::default();
        assert_eq!(paths(reaper.pass(&node, true, 60_000, 10_000)), ["/c"]);
        assert!(reaper.pass(&node, true, 60_400, 10_400).is_empty());
        assert_eq!(paths(reaper.pass(&node, true, 60_600, 10_600)), ["/t"]);
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
