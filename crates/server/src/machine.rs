//! The apply step: committed transactions change the tree, fire watches
//! and route results, all while the tree's write lock is held, so a read
//! that follows sees both the change and every event it fired queued
//! ahead of its reply.

use std::sync::Arc;

use keel_consensus::{Committed, MachineError, SnapshotJob, SnapshotWriter, StateMachine};
use keel_jute::{opcode, ErrorCode, KeeperState, WatcherEvent};
use keel_tree::{Applied, DataTree, Txn, TxnOp};

use crate::shared::{Outbound, Shared, INTERNAL_XID};

pub struct Machine {
    pub shared: Arc<Shared>,
}

impl StateMachine for Machine {
    fn apply(&mut self, index: u64, term: u64, proposals: &[Committed<'_>]) {
        let shared = &self.shared;
        let mut tree = shared.tree.write();
        for proposal in proposals {
            // Every replica decodes the same committed bytes the same way:
            // one that does not decode is skipped everywhere alike.
            let txn = match Txn::decode(proposal.payload) {
                Ok(txn) => txn,
                Err(error) => {
                    tracing::error!(index, %error, "committed proposal does not decode; skipped");
                    continue;
                }
            };
            let applied = tree.apply(term, &txn);
            let asked_here = proposal.origin == shared.config.server_id;
            self.deliver(&txn, &applied, asked_here);
        }
        tree.set_applied(index, term);
    }

    fn skip(&mut self, index: u64, term: u64) {
        self.shared.tree.write().set_applied(index, term);
    }

    fn snapshot_begin(&mut self) -> SnapshotJob {
        let mut tree = self.shared.tree.write();
        let head = tree.snapshot_begin();
        SnapshotJob {
            index: tree.applied_index(),
            term: tree.applied_term(),
            head,
            writer: Box::new(TreeWriter {
                shared: self.shared.clone(),
            }),
        }
    }

    fn snapshot_end(&mut self) {
        self.shared.tree.write().snapshot_end();
    }

    fn dropped(&mut self, payloads: Vec<Vec<u8>>) {
        for txn in payloads.iter().filter_map(|p| Txn::decode(p).ok()) {
            self.shared.send_to(
                txn.session_id,
                Outbound::Close {
                    reason: "not the leader: proposal dropped",
                },
            );
        }
    }

    fn touched(&mut self, sessions: &[i64]) {
        let now_ms = self.shared.now_ms();
        let mut tracker = self.shared.sessions.lock();
        for session_id in sessions {
            tracker.touch(*session_id, now_ms);
        }
    }

    fn restore(&mut self, index: u64, bytes: &[u8]) -> Result<(), MachineError> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let tree = keel_tree::snapshot::load(bytes, threads)?;
        if tree.applied_index() != index {
            return Err(Box::new(IndexMismatch {
                found: tree.applied_index(),
                expected: index,
            }));
        }
        self.replace(tree);
        Ok(())
    }

    fn read_ready(&mut self, context: Vec<u8>) {
        let Some((session_id, xid, path)) = decode_sync_context(&context) else {
            return tracing::error!("sync context does not decode");
        };
        // Every entry committed before the barrier is applied: the reply
        // carries the newest zxid, as ZooKeeper's sync reply does.
        let zxid = self.shared.tree.read().last_zxid();
        if let Some(route) = self.shared.routes.lock().get(&session_id) {
            route.send(Outbound::Reply {
                xid,
                zxid,
                op_code: opcode::SYNC,
                result: Ok(keel_jute::Response::Sync(path)),
            });
        }
    }

    fn read_failed(&mut self, context: Vec<u8>) {
        if let Some((session_id, _, _)) = decode_sync_context(&context) {
            self.shared.send_to(
                session_id,
                Outbound::Close {
                    reason: "too many syncs pending",
                },
            );
        }
    }

    fn role_changed(&mut self, leader: bool) {
        if leader {
            // A new leader must not expire sessions for the election's
            // sake: every session gets a fresh deadline.
            let now_ms = self.shared.now_ms();
            self.shared.sessions.lock().renew_all(now_ms);
        }
    }
}

impl Machine {
    /// A snapshot from the leader replaces the tree.
    fn replace(&mut self, tree: DataTree) {
        let mut current = self.shared.tree.write();
        let now_ms = self.shared.now_ms();
        let mut tracker = keel_session::SessionTracker::new(self.shared.config.tick_time_ms as u64);
        for (session_id, timeout_ms) in tree.sessions() {
            tracker.add(session_id, timeout_ms, now_ms);
        }
        *self.shared.sessions.lock() = tracker;
        *current = tree;
        // The changes the snapshot jumped over fired no watch. As a
        // ZooKeeper follower that resyncs from a SNAP, drop every client
        // connection: clients reconnect and setWatches fires what they
        // missed since their last zxid.
        let mut watches = self.shared.watches.lock();
        for (session_id, route) in self.shared.routes.lock().iter() {
            watches.remove_session(*session_id);
            route.send(Outbound::Close {
                reason: "state replaced by a snapshot from the leader",
            });
        }
    }

    /// Events first, then the reply: ZooKeeper sends a watch notification
    /// before the response of the request that fired it.
    fn deliver(&self, txn: &Txn, applied: &Applied, asked_here: bool) {
        let shared = &self.shared;
        let mut watches = shared.watches.lock();
        let mut routes = shared.routes.lock();
        for event in &applied.events {
            for session_id in watches.trigger(&event.path, event.event_type.code()) {
                if let Some(route) = routes.get(&session_id) {
                    let event = WatcherEvent {
                        event_type: event.event_type.code(),
                        state: KeeperState::SyncConnected.code(),
                        path: event.path.clone(),
                    };
                    route.send(Outbound::Event {
                        zxid: applied.zxid,
                        event,
                    });
                }
            }
        }
        if let Some((session_id, timeout_ms)) = applied.session_created {
            let mut sessions = shared.sessions.lock();
            if !sessions.contains(session_id) {
                sessions.add(session_id, timeout_ms, shared.now_ms());
            }
        }
        // Only the node the request arrived at answers it: after a client
        // moved its session elsewhere, a reply for its old connection's
        // request must not reach the new connection (ZooKeeper binds a
        // reply to the connection the request came on).
        if txn.xid != INTERNAL_XID && asked_here {
            if let Some(route) = routes.get(&txn.session_id) {
                let op_code = op_code_of(&txn.op);
                route.send(Outbound::Reply {
                    xid: txn.xid,
                    zxid: applied.zxid,
                    op_code,
                    result: applied.result.clone(),
                });
            }
        }
        if let Some(session_id) = applied.session_closed {
            shared.sessions.lock().remove(session_id);
            watches.remove_session(session_id);
            if let Some(route) = routes.remove(&session_id) {
                route.send(Outbound::Close {
                    reason: "session closed",
                });
            }
        } else if matches!(txn.op, TxnOp::CloseSession)
            && applied.result == Err(ErrorCode::SessionExpired)
        {
            routes.remove(&txn.session_id);
        }
    }
}

fn op_code_of(op: &TxnOp) -> i32 {
    match op {
        TxnOp::Request { op_code, .. } => *op_code,
        TxnOp::CreateSession { .. } => opcode::CREATE_SESSION,
        TxnOp::CloseSession => opcode::CLOSE_SESSION,
        TxnOp::DeleteContainer { .. } => opcode::DELETE_CONTAINER,
        TxnOp::Sync { .. } => opcode::SYNC,
    }
}

/// A sync's ReadIndex context: session id, xid, path.
pub fn encode_sync_context(session_id: i64, xid: i32, path: &str) -> Vec<u8> {
    let mut context = Vec::with_capacity(12 + path.len());
    context.extend_from_slice(&session_id.to_be_bytes());
    context.extend_from_slice(&xid.to_be_bytes());
    context.extend_from_slice(path.as_bytes());
    context
}

fn decode_sync_context(context: &[u8]) -> Option<(i64, i32, String)> {
    if context.len() < 12 {
        return None;
    }
    let session_id = i64::from_be_bytes(context[..8].try_into().ok()?);
    let xid = i32::from_be_bytes(context[8..12].try_into().ok()?);
    let path = String::from_utf8(context[12..].to_vec()).ok()?;
    Some((session_id, xid, path))
}

/// A snapshot from the leader that is not at the position it was sent for.
#[derive(Debug, thiserror::Error)]
#[error("snapshot holds index {found}, not {expected}")]
pub struct IndexMismatch {
    pub found: u64,
    pub expected: u64,
}

/// Writes the snapshot started by `snapshot_begin` a segment at a time,
/// each under the tree's read lock: applies wait at most one segment.
struct TreeWriter {
    shared: Arc<Shared>,
}

impl SnapshotWriter for TreeWriter {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> Result<bool, MachineError> {
        Ok(self.shared.tree.read().snapshot_chunk(out)?)
    }
}
