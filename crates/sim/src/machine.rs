//! The simulated node's state machine is the server's own
//! (`keel_server::node::NodeMachine`): the same apply step, reply registry,
//! local reads, session moves and expiry. This file only plugs it into the
//! simulator: connections are outlets that queue what the node sends into
//! one outbox per node (the simulator routes it over its network), the
//! clock is the simulator's, and an observer records what each apply did
//! for the checkers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use keel_server::node::{ApplyObserver, Clock, Node, NodeMachine, Outbound, Outlet};
use keel_tree::{Applied, DataTree, Event, Txn};
use parking_lot::Mutex;

/// One message the node sent to one client connection.
#[derive(Debug)]
pub struct Delivery {
    pub connection_id: u64,
    pub message: Outbound,
}

/// Everything a node sent since the simulator last looked, in order.
pub type Outbox = Arc<Mutex<Vec<Delivery>>>;

/// A simulated client connection, as the node's reply registry holds it.
pub struct SimOutlet {
    pub connection_id: u64,
    pub outbox: Outbox,
}

impl Outlet for SimOutlet {
    fn send(&self, message: Outbound) {
        self.outbox.lock().push(Delivery {
            connection_id: self.connection_id,
            message,
        });
    }
}

/// The simulator's logical clock.
pub struct SimClock(pub Arc<AtomicU64>);

impl Clock for SimClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// One applied transaction, for the simulator's global log and checkers.
#[derive(Debug, Clone)]
pub struct AppliedTxn {
    pub index: u64,
    pub zxid: i64,
    pub events: Vec<Event>,
    pub closed_session: Option<i64>,
}

/// What the checkers need from each apply.
#[derive(Default)]
pub struct Recorder {
    /// (applied index, tree digest) after each entry, for the replica check.
    pub digests: Vec<(u64, u64)>,
    pub applied: Vec<AppliedTxn>,
    /// The first broken ephemeral contract seen, if any.
    pub ephemerals: Option<String>,
}

impl ApplyObserver for Recorder {
    fn applied(&mut self, index: u64, _txn: &Txn, applied: &Applied) {
        self.applied.push(AppliedTxn {
            index,
            zxid: applied.zxid,
            events: applied.events.clone(),
            closed_session: applied.session_closed,
        });
    }

    fn settled(&mut self, tree: &DataTree) {
        self.digests.push((tree.applied_index(), tree.digest()));
        if self.ephemerals.is_none() {
            self.ephemerals = ephemerals_consistent(tree).err();
        }
    }
}

pub type SimMachine = NodeMachine<SimOutlet, Recorder>;

/// A node's machine over `tree`, with the simulator's clock.
pub fn new_machine(
    node_id: u64,
    tree: DataTree,
    tick_ms: u64,
    now_ms: Arc<AtomicU64>,
) -> SimMachine {
    let node = Node::new(tree, node_id, tick_ms, Arc::new(SimClock(now_ms)));
    // One loader thread: a run must not depend on thread scheduling.
    NodeMachine::new(node, Recorder::default(), 1)
}

/// Every ephemeral belongs to a live session and no closed session owns
/// one: ZooKeeper's ephemeral contract, checked after each apply.
fn ephemerals_consistent(tree: &DataTree) -> Result<(), String> {
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
