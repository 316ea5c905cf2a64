//! When this node learnt of each TTL node's last change, on its monotonic
//! clock: the half of the TTL rule that no wall-clock jump moves.
//!
//! ZooKeeper reaps a TTL node once `wall now - mtime > ttl`, where mtime is
//! the wall time of the server that wrote it, replicated: a leader whose
//! wall clock jumps an hour forward reaps every TTL node at once. Keel
//! keeps that rule (it is the one every replica can check, and the apply
//! step checks it again) and adds this one: the node must also be older
//! than its TTL on this node's monotonic clock, counted from the moment
//! this node applied its last change. That moment is never before the
//! change was made (the writer made it before it was committed, and it is
//! applied after), so the local age never exceeds the true one: nothing
//! goes early. Every replica records it, followers too, so a follower that
//! becomes leader already knows each node's age. A node that starts (its
//! snapshot and log replayed) or installs a snapshot cannot know when the
//! changes it loads were made: it counts them from that moment, so a
//! leader that has just started reaps up to one TTL late (never early).
//!
//! Sans-IO: the apply step passes the time in (`Node`'s clock).

use std::collections::HashMap;

use keel_jute::EventType;
use keel_tree::{DataTree, Event};

/// A TTL node's last change (its mzxid) and when this node applied it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    mzxid: i64,
    applied_at_ms: u64,
}

/// Per TTL node path: its last change as this node applied it. Holds one
/// entry per TTL node of the tree (no more: deletions remove theirs).
#[derive(Debug, Default)]
pub struct TtlClock {
    marks: HashMap<String, Mark>,
}

impl TtlClock {
    /// Every TTL node of `tree` (just loaded) counted from `now_ms`.
    pub fn starting(tree: &DataTree, now_ms: u64) -> TtlClock {
        let marks = tree
            .ttl_nodes()
            .into_iter()
            .map(|(path, mzxid)| {
                let applied_at_ms = now_ms;
                (
                    path,
                    Mark {
                        mzxid,
                        applied_at_ms,
                    },
                )
            })
            .collect();
        TtlClock { marks }
    }

    /// One transaction's changes applied to `tree` at `now_ms`: a TTL node
    /// created or whose data was set starts its age again; a deleted node
    /// leaves. Only creates and setData change an mzxid (and each fires
    /// NodeCreated or NodeDataChanged), so `events` name every change.
    pub fn applied(&mut self, tree: &DataTree, events: &[Event], now_ms: u64) {
        if tree.ttl_node_count() == 0 && self.marks.is_empty() {
            return;
        }
        for event in events {
            match event.event_type {
                EventType::NodeCreated | EventType::NodeDataChanged => {
                    if let Some(mzxid) = tree.ttl_mzxid(&event.path) {
                        let mark = Mark {
                            mzxid,
                            applied_at_ms: now_ms,
                        };
                        self.marks.insert(event.path.clone(), mark);
                    }
                }
                EventType::NodeDeleted => {
                    self.marks.remove(&event.path);
                }
                _ => {}
            }
        }
    }

    /// How long ago (ms, at `now_ms`) this node applied the change `mzxid`
    /// of the TTL node at `path`; None if it has no record of that change.
    pub fn age_ms(&self, path: &str, mzxid: i64, now_ms: u64) -> Option<u64> {
        let mark = self.marks.get(path)?;
        (mark.mzxid == mzxid).then(|| now_ms.saturating_sub(mark.applied_at_ms))
    }

    /// Whether this clock holds exactly `tree`'s TTL nodes, each at its
    /// last change (the simulator checks every replica after its settle).
    pub fn check_covers(&self, tree: &DataTree) -> Result<(), String> {
        let nodes = tree.ttl_nodes();
        for (path, mzxid) in &nodes {
            match self.marks.get(path) {
                Some(mark) if mark.mzxid == *mzxid => {}
                Some(mark) => {
                    return Err(format!(
                        "TTL clock: {path} recorded at change {:#x}, the tree's last is {mzxid:#x}",
                        mark.mzxid
                    ))
                }
                None => return Err(format!("TTL clock: {path} has no record")),
            }
        }
        if nodes.len() != self.marks.len() {
            return Err(format!(
                "TTL clock: {} records for {} TTL nodes",
                self.marks.len(),
                nodes.len()
            ));
        }
        Ok(())
    }

    /// TTL nodes recorded.
    pub fn len(&self) -> usize {
        self.marks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_jute::Request;
    use keel_tree::{Txn, TxnOp};

    const SESSION: i64 = 3;

    fn apply(tree: &mut DataTree, clock: &mut TtlClock, request: Request, now_ms: u64) {
        let mut body = Vec::new();
        request.encode(&mut body);
        let txn = Txn {
            session_id: SESSION,
            xid: 1,
            time_ms: 1_000,
            auth: Vec::new(),
            op: TxnOp::Request {
                op_code: request.op_code(),
                body,
            },
        };
        let applied = tree.apply(1, &txn);
        applied.result.as_ref().expect("applies");
        clock.applied(tree, &applied.events, now_ms);
    }

    fn ttl_node(path: &str) -> Request {
        Request::CreateTtl(keel_jute::CreateTtlRequest {
            path: path.into(),
            data: None,
            acl: keel_tree::acl::open_acl_unsafe(),
            flags: 5,
            ttl: 500,
        })
    }

    fn tree_with_session() -> DataTree {
        let mut tree = DataTree::new();
        let session = TxnOp::CreateSession { timeout_ms: 60_000 };
        tree.apply(1, &crate::node::internal_txn(SESSION, session, 0));
        tree
    }

    #[test]
    fn a_ttl_node_ages_from_when_its_last_change_applied_here() {
        let mut tree = tree_with_session();
        let mut clock = TtlClock::default();
        apply(&mut tree, &mut clock, ttl_node("/t"), 100);
        let created = tree.ttl_mzxid("/t").expect("a TTL node");
        assert_eq!(clock.age_ms("/t", created, 400), Some(300));
        let set = Request::SetData(keel_jute::SetDataRequest {
            path: "/t".into(),
            data: Some(b"x".to_vec()),
            version: -1,
        });
        apply(&mut tree, &mut clock, set, 1_000);
        let changed = tree.ttl_mzxid("/t").expect("still a TTL node");
        assert_ne!(changed, created);
        assert_eq!(clock.age_ms("/t", changed, 1_200), Some(200));
        // An older change is not this node's last one: no age for it.
        assert_eq!(clock.age_ms("/t", created, 1_200), None);
        let delete = Request::Delete(keel_jute::DeleteRequest {
            path: "/t".into(),
            version: -1,
        });
        apply(&mut tree, &mut clock, delete, 1_300);
        assert!(clock.is_empty());
    }

    #[test]
    fn a_loaded_tree_s_ttl_nodes_count_from_the_load_and_other_nodes_are_not_kept() {
        let mut tree = tree_with_session();
        let mut clock = TtlClock::default();
        apply(&mut tree, &mut clock, ttl_node("/t"), 100);
        let persistent = Request::Create(keel_jute::CreateRequest {
            path: "/p".into(),
            data: None,
            acl: keel_tree::acl::open_acl_unsafe(),
            flags: 0,
        });
        apply(&mut tree, &mut clock, persistent, 150);
        assert_eq!(clock.len(), 1);
        let restarted = TtlClock::starting(&tree, 5_000);
        let mzxid = tree.ttl_mzxid("/t").expect("a TTL node");
        assert_eq!(restarted.age_ms("/t", mzxid, 5_100), Some(100));
        assert_eq!(restarted.len(), 1);
    }
}
