//! The simulated node's state machine: the server's apply step (tree,
//! watches, session tracker) with client connections replaced by an
//! outbox the simulator routes. Like the server's machine.rs it fires
//! watch events before the reply of the request that caused them.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use keel_consensus::{Committed, MachineError, SnapshotJob, SnapshotWriter, StateMachine};
use keel_jute::{ErrorCode, Response};
use keel_session::SessionTracker;
use keel_tree::watch::WatchManager;
use keel_tree::{DataTree, Event, Txn};
use parking_lot::RwLock;

/// xid of transactions the node proposes itself (expiry).
pub const INTERNAL_XID: i32 = i32::MIN;

/// What the machine tells the simulator, in the order it happened.
#[derive(Debug, Clone)]
pub enum MachineOut {
    Reply {
        session: i64,
        xid: i32,
        zxid: i64,
        result: Result<Response, ErrorCode>,
    },
    Event {
        session: i64,
        zxid: i64,
        event: Event,
    },
    /// The session was closed (by its client or by expiry).
    SessionClosed { session: i64, zxid: i64 },
    /// A sync barrier passed: the session's read may run now.
    SyncReady { session: i64, xid: i32 },
    /// A proposal or sync of this session was dropped: connection loss.
    Dropped { session: i64 },
}

/// One applied transaction, for the simulator's global log and checkers.
#[derive(Debug, Clone)]
pub struct AppliedTxn {
    pub index: u64,
    pub zxid: i64,
    pub events: Vec<Event>,
    pub closed_session: Option<i64>,
}

pub struct SimMachine {
    pub node_id: u64,
    /// Shared with the snapshot writer, as the server's tree is.
    pub tree: SharedTree,
    pub watches: WatchManager,
    pub tracker: SessionTracker,
    /// Sessions whose client is connected to this node.
    pub local: BTreeSet<i64>,
    pub out: Vec<MachineOut>,
    /// (applied index, tree digest) after each entry, for the replica check.
    pub digests: Vec<(u64, u64)>,
    pub applied: Vec<AppliedTxn>,
    pub leader: bool,
    pub now_ms: Arc<AtomicU64>,
}

impl SimMachine {
    pub fn new(node_id: u64, tree: DataTree, tick_ms: u64, now_ms: Arc<AtomicU64>) -> SimMachine {
        let tree = Arc::new(RwLock::new(tree));
        let mut tracker = SessionTracker::new(tick_ms);
        for (session, timeout_ms) in tree.read().sessions() {
            tracker.add(session, timeout_ms, now_ms.load(Ordering::Relaxed));
        }
        SimMachine {
            node_id,
            tree,
            watches: WatchManager::new(),
            tracker,
            local: BTreeSet::new(),
            out: Vec::new(),
            digests: Vec::new(),
            applied: Vec::new(),
            leader: false,
            now_ms,
        }
    }

    fn deliver(&mut self, index: u64, txn: &Txn, applied: keel_tree::Applied, asked_here: bool) {
        for event in &applied.events {
            for session in self.watches.trigger(&event.path, event.event_type.code()) {
                if self.local.contains(&session) {
                    self.out.push(MachineOut::Event {
                        session,
                        zxid: applied.zxid,
                        event: event.clone(),
                    });
                }
            }
        }
        if let Some((session, timeout_ms)) = applied.session_created {
            if !self.tracker.contains(session) {
                self.tracker
                    .add(session, timeout_ms, self.now_ms.load(Ordering::Relaxed));
            }
        }
        // As the server: only the node the request arrived at answers it.
        if txn.xid != INTERNAL_XID && asked_here && self.local.contains(&txn.session_id) {
            self.out.push(MachineOut::Reply {
                session: txn.session_id,
                xid: txn.xid,
                zxid: applied.zxid,
                result: applied.result.clone(),
            });
        }
        if let Some(session) = applied.session_closed {
            self.tracker.remove(session);
            self.watches.remove_session(session);
            if self.local.remove(&session) {
                self.out.push(MachineOut::SessionClosed {
                    session,
                    zxid: applied.zxid,
                });
            }
        }
        self.applied.push(AppliedTxn {
            index,
            zxid: applied.zxid,
            events: applied.events,
            closed_session: applied.session_closed,
        });
    }
}

impl StateMachine for SimMachine {
    fn apply(&mut self, index: u64, term: u64, proposals: &[Committed<'_>]) {
        let shared = self.tree.clone();
        let mut tree = shared.write();
        for proposal in proposals {
            let txn = Txn::decode(proposal.payload).expect("the simulator proposes valid txns");
            let applied = tree.apply(term, &txn);
            self.deliver(index, &txn, applied, proposal.origin == self.node_id);
        }
        tree.set_applied(index, term);
        self.digests.push((index, tree.digest()));
    }

    fn skip(&mut self, index: u64, term: u64) {
        let mut tree = self.tree.write();
        tree.set_applied(index, term);
        self.digests.push((index, tree.digest()));
    }

    fn snapshot_begin(&mut self) -> SnapshotJob {
        let mut tree = self.tree.write();
        let head = tree.snapshot_begin();
        SnapshotJob {
            index: tree.applied_index(),
            term: tree.applied_term(),
            head,
            writer: Box::new(TreeWriter {
                tree: self.tree.clone(),
            }),
        }
    }

    fn snapshot_end(&mut self) {
        self.tree.write().snapshot_end();
    }

    fn dropped(&mut self, payloads: Vec<Vec<u8>>) {
        for payload in payloads {
            let txn = Txn::decode(&payload).expect("the simulator proposes valid txns");
            if txn.xid != INTERNAL_XID {
                self.out.push(MachineOut::Dropped {
                    session: txn.session_id,
                });
            }
        }
    }

    fn role_changed(&mut self, leader: bool) {
        self.leader = leader;
        if leader {
            self.tracker.renew_all(self.now_ms.load(Ordering::Relaxed));
        }
    }

    fn touched(&mut self, sessions: &[i64]) {
        for session in sessions {
            self.tracker
                .touch(*session, self.now_ms.load(Ordering::Relaxed));
        }
    }

    fn restore(&mut self, index: u64, bytes: &[u8]) -> Result<(), MachineError> {
        let tree = keel_tree::snapshot::decode(bytes)?;
        if tree.applied_index() != index {
            return Err(
                format!("snapshot holds index {}, not {index}", tree.applied_index()).into(),
            );
        }
        let mut tracker = SessionTracker::new(self.tracker_tick_ms());
        for (session, timeout_ms) in tree.sessions() {
            tracker.add(session, timeout_ms, self.now_ms.load(Ordering::Relaxed));
        }
        // The changes the snapshot jumped over fired no watch: as the
        // server, drop every client connection; clients reconnect and
        // setWatches fires what they missed.
        self.tracker = tracker;
        *self.tree.write() = tree;
        for session in std::mem::take(&mut self.local) {
            self.watches.remove_session(session);
            self.out.push(MachineOut::Dropped { session });
        }
        let tree = self.tree.read();
        self.digests.push((tree.applied_index(), tree.digest()));
        Ok(())
    }

    fn read_ready(&mut self, context: Vec<u8>) {
        let (session, xid) = decode_sync_context(&context);
        self.out.push(MachineOut::SyncReady { session, xid });
    }

    fn read_failed(&mut self, context: Vec<u8>) {
        let (session, _) = decode_sync_context(&context);
        self.out.push(MachineOut::Dropped { session });
    }
}

impl SimMachine {
    fn tracker_tick_ms(&self) -> u64 {
        crate::world::TICK_MS
    }

    /// Every ephemeral belongs to a live session and no closed session
    /// owns one: ZooKeeper's ephemeral contract, checked after each apply.
    pub fn ephemerals_consistent(&self) -> Result<(), String> {
        let tree = self.tree.read();
        let owned: usize = tree
            .sessions()
            .iter()
            .map(|(session, _)| tree.ephemerals_of(*session).len())
            .sum();
        let total = tree.ephemeral_count();
        if owned != total {
            return Err(format!(
                "{total} ephemerals but live sessions own {owned} (index {})",
                tree.applied_index()
            ));
        }
        Ok(())
    }
}

pub fn encode_sync_context(session: i64, xid: i32) -> Vec<u8> {
    let mut context = session.to_be_bytes().to_vec();
    context.extend_from_slice(&xid.to_be_bytes());
    context
}

fn decode_sync_context(context: &[u8]) -> (i64, i32) {
    assert_eq!(context.len(), 12, "the simulator's own sync context");
    let session = i64::from_be_bytes(context[..8].try_into().expect("8 bytes"));
    let xid = i32::from_be_bytes(context[8..].try_into().expect("4 bytes"));
    (session, xid)
}

pub type SharedTree = Arc<RwLock<DataTree>>;

/// The server's snapshot writer, as the simulator runs it: one segment
/// per call under the read lock, while applies go on between calls.
struct TreeWriter {
    tree: SharedTree,
}

impl SnapshotWriter for TreeWriter {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> Result<bool, MachineError> {
        Ok(self.tree.read().snapshot_chunk(out)?)
    }
}
