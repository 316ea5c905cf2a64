//! Membership changes end to end through several `Core`s on an in-memory
//! network: the bootstrap configuration gets an id, a node joining with an
//! empty data dir gets a snapshot and votes, a leader that leaves hands
//! over first, and ZooKeeper's refusals come back to the node that asked.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use raft::eraftpb::{ConfState, Entry, HardState, MessageType};

use crate::core::SnapshotSource;
use crate::core::{
    bootstrap_membership, is_commit_notice, storage_from, Core, CoreConfig, Durable, Io, Outbound,
};
use crate::membership::{Change, Member, Members, Membership, ReconfigError, Role};
use crate::proposal::Dedup;
use crate::transport::PeerInput;
use crate::{Committed, ConsensusError, RaftStatus, SnapshotJob, SnapshotWriter, StateMachine};

pub(crate) type Outbox = Rc<RefCell<Vec<(u64, Outbound)>>>;
type Stored = Rc<RefCell<Option<(u64, u64, Vec<u8>)>>>;

pub(crate) struct NetIo {
    id: u64,
    outbox: Outbox,
    /// Messages sent so far.
    sent: Arc<AtomicUsize>,
    snapshot: Stored,
}

impl Io for NetIo {
    fn send(&mut self, message: Outbound) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        self.outbox.borrow_mut().push((self.id, message));
    }
    fn persist(
        &mut self,
        _: &[Entry],
        _: Option<&HardState>,
        _: Option<&ConfState>,
    ) -> Result<(), ConsensusError> {
        Ok(())
    }
    fn persist_commit(&mut self, _: &HardState) -> Result<(), ConsensusError> {
        Ok(())
    }
    fn compact_to(&mut self, _: u64) -> Result<(), ConsensusError> {
        Ok(())
    }
    fn save_snapshot(&mut self, index: u64, term: u64, bytes: &[u8]) -> Result<(), ConsensusError> {
        *self.snapshot.borrow_mut() = Some((index, term, bytes.to_vec()));
        Ok(())
    }
    fn oldest_snapshot_index(&self) -> Option<u64> {
        self.snapshot.borrow().as_ref().map(|(index, _, _)| *index)
    }
}

pub(crate) struct Snapshots(Stored);

impl SnapshotSource for Snapshots {
    fn newest(&self) -> Option<(u64, u64, Vec<u8>)> {
        self.0.borrow().clone()
    }
}

struct Done;

impl SnapshotWriter for Done {
    fn next_chunk(&mut self, _: &mut Vec<u8>) -> Result<bool, crate::MachineError> {
        Ok(false)
    }
}

/// Records configurations that came into effect and refusals.
#[derive(Default)]
pub(crate) struct Machine {
    index: u64,
    term: u64,
    configurations: Vec<(Vec<u64>, Option<Vec<u8>>)>,
    refused: Vec<(Vec<u8>, ReconfigError)>,
    pub(crate) applied: usize,
    /// Contexts of the reads answered (`read_ready`), in order.
    pub(crate) reads: Vec<Vec<u8>>,
    /// When set (to its node's `NetIo::sent`), every apply records how
    /// many messages the node had sent by then.
    sent_counter: Option<Arc<AtomicUsize>>,
    sent_at_apply: Vec<usize>,
}

impl StateMachine for Machine {
    fn apply(
        &mut self,
        index: u64,
        term: u64,
        proposals: &[Committed<'_>],
    ) -> Result<(), crate::MachineError> {
        self.applied += proposals.len();
        (self.index, self.term) = (index, term);
        if let Some(sent) = &self.sent_counter {
            self.sent_at_apply.push(sent.load(Ordering::Relaxed));
        }
        Ok(())
    }
    fn skip(&mut self, index: u64, term: u64) {
        (self.index, self.term) = (index, term);
    }
    fn snapshot_begin(&mut self) -> SnapshotJob {
        SnapshotJob {
            index: self.index,
            term: self.term,
            head: b"machine".to_vec(),
            writer: Box::new(Done),
        }
    }
    fn snapshot_end(&mut self) {}
    fn dropped(&mut self, _: Vec<Vec<u8>>) {}
    fn role_changed(&mut self, _: bool) {}
    fn touched(&mut self, _: &[i64]) {}
    fn restore(&mut self, index: u64, _: &[u8]) -> Result<(), crate::MachineError> {
        self.index = index;
        Ok(())
    }
    fn read_ready(&mut self, context: Vec<u8>) {
        self.reads.push(context);
    }
    fn read_failed(&mut self, _: Vec<u8>) {}
    fn reconfigured(
        &mut self,
        index: u64,
        term: u64,
        members: &Members,
        _: i64,
        reply: Option<&[u8]>,
    ) -> u64 {
        (self.index, self.term) = (index, term);
        let ids = members.keys().copied().collect();
        self.configurations.push((ids, reply.map(<[u8]>::to_vec)));
        (term << 32) | index
    }
    fn reconfig_failed(&mut self, context: Vec<u8>, error: ReconfigError) {
        self.refused.push((context, error));
    }
}

pub(crate) type Node = Core<Machine, NetIo, Snapshots>;

pub(crate) struct Net {
    pub(crate) nodes: BTreeMap<u64, Node>,
    pub(crate) outbox: Outbox,
}

fn member(id: u64, role: Role) -> Member {
    Member {
        id,
        role,
        peer: format!("127.0.0.1:{}", 2887 + id),
        election_port: 3887 + id as u16,
        client: format!("127.0.0.1:{}", 2180 + id),
        bootstrap: false,
    }
}

impl Net {
    /// Voters 1..=n bootstrapped as a cluster.
    pub(crate) fn bootstrap(n: u64) -> Net {
        let mut net = Net {
            nodes: BTreeMap::new(),
            outbox: Rc::default(),
        };
        let peers: Vec<(u64, String)> = (1..=n)
            .map(|id| (id, format!("127.0.0.1:{}", 2887 + id)))
            .collect();
        let membership = bootstrap_membership(&peers, &[], &BTreeMap::new());
        let conf_state = ConfState {
            voters: (1..=n).collect(),
            ..Default::default()
        };
        for id in 1..=n {
            net.add(id, conf_state.clone(), membership.clone());
        }
        net
    }

    /// A node with `conf_state` (empty: joining).
    pub(crate) fn add(&mut self, id: u64, conf_state: ConfState, membership: Membership) {
        let storage = storage_from(Durable {
            snapshot_index: 0,
            snapshot_term: 0,
            conf_state,
            hard_state: HardState::default(),
            entries: Vec::new(),
        })
        .expect("storage");
        let stored = Stored::default();
        let config = CoreConfig {
            node_id: id,
            snapshot_every_entries: 1_000_000,
            snapshot_every_log_bytes: u64::MAX,
            preferred_leader: None,
            applied: 0,
            first_sequence: 1,
            dedup: Dedup::default(),
            seed: id,
            log_kept_behind_snapshot: 1_000,
            log_kept_behind_snapshot_bytes: u64::MAX,
            membership,
            reconfig_enabled: true,
            tick_us: 100_000,
            read_lease: true,
            #[cfg(feature = "testing")]
            planted_bug: crate::core::PlantedBug::None,
        };
        let io = NetIo {
            id,
            outbox: self.outbox.clone(),
            sent: Arc::default(),
            snapshot: stored.clone(),
        };
        let core = Core::new(
            config,
            storage,
            Snapshots(stored),
            io,
            Machine::default(),
            Arc::new(RaftStatus::default()),
        )
        .expect("a core");
        self.nodes.insert(id, core);
    }

    /// One round: every node ticks, messages are delivered, snapshots due
    /// are written at once.
    fn round(&mut self) {
        for node in self.nodes.values_mut() {
            node.tick();
            node.advance().expect("advance");
        }
        for _ in 0..8 {
            if !self.deliver_outbox() {
                break;
            }
        }
    }

    /// Delivers every queued message, then advances every node and writes
    /// the snapshots due at once; false if nothing was queued.
    fn deliver_outbox(&mut self) -> bool {
        let messages: Vec<(u64, Outbound)> = self.outbox.borrow_mut().drain(..).collect();
        if messages.is_empty() {
            return false;
        }
        for (from, message) in messages {
            self.deliver(from, message);
        }
        for node in self.nodes.values_mut() {
            node.advance().expect("advance");
            if let Some(job) = node.take_snapshot_job() {
                let (index, term) = (job.index, job.term);
                node.io_mut()
                    .save_snapshot(index, term, &job.head)
                    .expect("kept");
                node.snapshot_done(index, Ok(()), 0);
            }
        }
        true
    }

    pub(crate) fn deliver(&mut self, from: u64, message: Outbound) {
        let (to, input) = match message {
            Outbound::Raft(m) => {
                if m.get_msg_type() == MessageType::MsgSnapshot {
                    if let Some(leader) = self.nodes.get_mut(&from) {
                        leader.snapshot_transfer_ended(m.to, true);
                    }
                }
                (m.to, PeerInput::Raft(Box::new(m)))
            }
            Outbound::Forward { to, batch } => (to, PeerInput::Forward(batch)),
            Outbound::Touch { to, sessions } => (to, PeerInput::Touch(sessions)),
            Outbound::Reconfig { to, request } => (to, PeerInput::Reconfig(request)),
            Outbound::ReconfigAnswer { to, answer } => (to, PeerInput::ReconfigAnswer(answer)),
            Outbound::Members { to, members } => (to, PeerInput::Members(members)),
        };
        if let Some(node) = self.nodes.get_mut(&to) {
            node.peer(input);
        }
    }

    /// Delivers the messages queued now, `expected` of them (`what` they
    /// are, for the failure), without advancing any node.
    fn deliver_queued(&mut self, expected: usize, what: &str) {
        let messages: Vec<(u64, Outbound)> = self.outbox.borrow_mut().drain(..).collect();
        assert_eq!(messages.len(), expected, "{what}");
        for (from, message) in messages {
            self.deliver(from, message);
        }
    }

    /// Delivers messages without ticking (so no heartbeat goes out) until
    /// none is left.
    pub(crate) fn settle(&mut self) {
        for _ in 0..32 {
            if !self.deliver_outbox() {
                return;
            }
        }
        panic!("messages still flowing: {}", self.describe());
    }

    pub(crate) fn run_until(&mut self, rounds: usize, mut done: impl FnMut(&Net) -> bool) {
        for _ in 0..rounds {
            if done(self) {
                return;
            }
            self.round();
        }
        assert!(
            done(self),
            "not done after {rounds} rounds: {}",
            self.describe()
        );
    }

    fn describe(&self) -> String {
        self.nodes
            .values()
            .map(|n| {
                let m = n.membership();
                format!(
                    "\n{}: leader={} applied={} commit={} members={:?} pending={:?} conf={:?} configs={:?}",
                    n.node_id(),
                    n.leader_id(),
                    n.applied(),
                    n.commit_index(),
                    m.members.keys().collect::<Vec<_>>(),
                    m.pending.as_ref().map(|p| p.target.iter().map(|(id, m)| (*id, m.role)).collect::<Vec<_>>()),
                    n.conf_state(),
                    n.machine().configurations,
                )
            })
            .collect()
    }

    pub(crate) fn leader(&self) -> Option<u64> {
        self.nodes
            .values()
            .find(|n| n.is_leader())
            .map(|n| n.node_id())
    }

    fn config_ids(&self) -> Vec<Vec<u64>> {
        self.nodes
            .values()
            .map(|n| n.membership().members.keys().copied().collect())
            .collect()
    }

    fn everyone_has(&self, ids: &[u64]) -> bool {
        self.nodes.values().all(|n| {
            let m = n.membership();
            m.pending.is_none() && m.members.keys().copied().collect::<Vec<_>>() == ids
        })
    }
}

/// A leader is elected and every node applied the first configuration.
pub(crate) fn settled(net: &Net) -> bool {
    net.leader().is_some() && net.nodes.values().all(|n| n.membership().config_id != 0)
}

pub(crate) fn established() -> Net {
    let mut net = Net::bootstrap(3);
    net.run_until(400, settled);
    net
}

#[test]
fn the_leader_batches_behind_an_entry_in_flight_and_followers_learn_commits_without_a_heartbeat() {
    let mut net = established();
    net.settle();
    let leader = net.leader().expect("a leader");
    let start: BTreeMap<u64, (usize, u64)> = net
        .nodes
        .iter()
        .map(|(id, n)| (*id, (n.machine().applied, n.machine().index)))
        .collect();
    let node = net.nodes.get_mut(&leader).expect("leader");
    node.propose(b"a".to_vec());
    node.advance().expect("advance");
    // Without the hold each advance would make an entry of its own.
    node.propose(b"b".to_vec());
    node.advance().expect("advance");
    node.propose(b"c".to_vec());
    node.advance().expect("advance");
    assert!(
        !node.has_ready(),
        "b and c wait for the entry carrying a to commit"
    );
    net.settle();
    for (id, n) in &net.nodes {
        let (applied, index) = start[id];
        assert_eq!(
            n.machine().applied,
            applied + 3,
            "node {id}: a, b, c applied"
        );
        assert_eq!(
            n.machine().index,
            index + 2,
            "node {id}: a alone, then b and c in one entry"
        );
    }
}

/// One proposal made on `proposer`, carried to its commit step by step.
/// Returns, for the leader's turn that learns the commit from the acks,
/// how many of that turn's messages went out before its apply, and the
/// followers its commit notices went to, in the order sent.
fn commit_one_proposal(net: &mut Net, proposer: u64) -> (usize, Vec<u64>) {
    let leader = net.leader().expect("a leader");
    let outbox = net.outbox.clone();
    let sent = {
        let node = net.nodes.get_mut(&leader).expect("leader");
        let sent = node.io_mut().sent.clone();
        node.machine_mut().sent_counter = Some(sent.clone());
        sent
    };
    let node = net.nodes.get_mut(&proposer).expect("proposer");
    node.propose(b"a".to_vec());
    node.advance().expect("advance");
    if proposer != leader {
        net.deliver_queued(1, "the follower forwards its proposal");
        let node = net.nodes.get_mut(&leader).expect("leader");
        node.advance().expect("advance");
    }
    // The appends reach the followers, their acks the leader.
    net.deliver_queued(2, "one append per follower");
    for (id, node) in net.nodes.iter_mut() {
        if *id != leader {
            node.advance().expect("advance");
        }
    }
    net.deliver_queued(2, "one ack per follower");
    let node = net.nodes.get_mut(&leader).expect("leader");
    node.advance().expect("advance");
    let sent_before_turn = sent.load(Ordering::Relaxed) - outbox.borrow().len();
    let applied_at = std::mem::take(&mut node.machine_mut().sent_at_apply);
    assert_eq!(applied_at.len(), 1, "one apply: {applied_at:?}");
    let notified: Vec<u64> = outbox
        .borrow()
        .iter()
        .filter_map(|(from, m)| match m {
            Outbound::Raft(m) if *from == leader && is_commit_notice(m) => Some(m.to),
            _ => None,
        })
        .collect();
    net.settle();
    assert!(net
        .nodes
        .values()
        .all(|n| n.machine().index == n.commit_index()));
    (applied_at[0] - sent_before_turn, notified)
}

#[test]
fn the_leader_applies_its_own_clients_commit_before_it_sends_the_commit_notices() {
    let mut net = established();
    net.settle();
    let leader = net.leader().expect("a leader");
    let (sent_before_apply, notified) = commit_one_proposal(&mut net, leader);
    assert_eq!(
        sent_before_apply, 0,
        "applied before the turn sent anything"
    );
    assert_eq!(notified.len(), 2, "then each follower hears of the commit");
}

#[test]
fn the_follower_whose_client_waits_hears_of_the_commit_before_the_leader_applies() {
    let mut net = established();
    net.settle();
    let leader = net.leader().expect("a leader");
    let follower = *net
        .nodes
        .keys()
        .find(|id| **id != leader)
        .expect("a follower");
    let (sent_before_apply, notified) = commit_one_proposal(&mut net, follower);
    assert_eq!(sent_before_apply, 1, "one notice before the apply");
    assert_eq!(notified.len(), 2, "each follower hears of the commit");
    assert_eq!(notified[0], follower, "the proposer's follower first");
}

#[test]
fn a_lingering_leader_holds_a_small_batch_until_its_time_is_up_but_never_a_lone_write() {
    let mut net = established();
    net.settle();
    let leader = net.leader().expect("a leader");
    let entries = |net: &Net| net.nodes[&leader].machine().index;
    let node = net.nodes.get_mut(&leader).expect("leader");
    node.set_linger_us(1_000);
    node.set_clock_us(10_000);
    // The last entry carried one proposal: a lone writer goes at once.
    node.propose(b"a".to_vec());
    node.advance().expect("advance");
    assert!(node.wake_at_us().is_none());
    net.settle();
    let after_a = entries(&net);
    // Two proposals in one entry (b waits behind a's entry in flight).
    let node = net.nodes.get_mut(&leader).expect("leader");
    node.propose(b"b".to_vec());
    node.advance().expect("advance");
    node.propose(b"c".to_vec());
    node.advance().expect("advance");
    net.settle();
    assert_eq!(entries(&net), after_a + 2, "b alone, c after it");
    let node = net.nodes.get_mut(&leader).expect("leader");
    node.propose(b"c2".to_vec());
    node.propose(b"c3".to_vec());
    node.advance().expect("advance");
    net.settle();
    let before = entries(&net);
    // Now the leader lingers: d waits for e although nothing is in flight.
    let node = net.nodes.get_mut(&leader).expect("leader");
    node.set_clock_us(20_000);
    node.propose(b"d".to_vec());
    node.advance().expect("advance");
    assert!(!node.has_ready(), "d is held");
    assert_eq!(node.wake_at_us(), Some(21_000));
    node.set_clock_us(20_500);
    node.propose(b"e".to_vec());
    node.advance().expect("advance");
    assert!(!node.has_ready(), "d and e are held until 21,000 µs");
    net.settle();
    assert_eq!(entries(&net), before, "nothing went out while lingering");
    let node = net.nodes.get_mut(&leader).expect("leader");
    node.set_clock_us(21_000);
    assert!(node.has_ready(), "the linger is over");
    node.advance().expect("advance");
    net.settle();
    assert_eq!(entries(&net), before + 1, "d and e in one entry");
    // Lingering off: the next small batch goes at once.
    let node = net.nodes.get_mut(&leader).expect("leader");
    node.set_linger_us(0);
    node.propose(b"f".to_vec());
    assert!(node.has_ready());
    assert!(node.wake_at_us().is_none());
}

#[test]
fn the_first_leader_gives_the_bootstrap_configuration_an_id() {
    let net = established();
    let ids: Vec<u64> = net
        .nodes
        .values()
        .map(|n| n.membership().config_id)
        .collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    for node in net.nodes.values() {
        assert_eq!(node.machine().configurations, vec![(vec![1, 2, 3], None)]);
    }
}

/// Asks `at` (as super, context "ask") to add member 4 as a voter.
fn ask_to_add_voter_4(net: &mut Net, at: u64) {
    net.nodes.get_mut(&at).unwrap().reconfigure(
        Change::Incremental {
            joining: vec![member(4, Role::Voter)],
            leaving: vec![],
        },
        None,
        true,
        b"ask".to_vec(),
    );
}

#[test]
fn a_node_with_an_empty_data_dir_joins_gets_a_snapshot_and_votes() {
    let mut net = established();
    let follower = (1..=3).find(|id| Some(*id) != net.leader()).unwrap();
    net.add(4, ConfState::default(), Membership::default());
    ask_to_add_voter_4(&mut net, follower);
    net.run_until(2_000, |net| net.everyone_has(&[1, 2, 3, 4]));
    let asked = net.nodes[&follower].machine();
    assert_eq!(
        asked.configurations.last(),
        Some(&(vec![1, 2, 3, 4], Some(b"ask".to_vec()))),
        "the node that was asked answers"
    );
    let joined = &net.nodes[&4];
    assert!(
        joined.membership().members[&4].role == Role::Voter,
        "a voter once caught up"
    );
    let ids: Vec<u64> = net
        .nodes
        .values()
        .map(|n| n.membership().config_id)
        .collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "one config id: {ids:?}");
    // The new voter counts: with 1 and 2 gone, 3 and 4 are no majority of 4.
    net.nodes.retain(|id, _| *id != 1 && *id != 2);
    for _ in 0..300 {
        net.round();
    }
    assert_eq!(net.leader(), None, "2 of 4 voters cannot elect");
}

#[test]
fn a_joining_node_asks_a_leader_for_its_first_snapshot() {
    let mut net = established();
    let leader = net.leader().unwrap();
    net.add(4, ConfState::default(), Membership::default());
    let mut heartbeat = raft::eraftpb::Message::default();
    heartbeat.set_msg_type(MessageType::MsgHeartbeat);
    heartbeat.from = leader;
    heartbeat.to = 4;
    heartbeat.term = 7;
    heartbeat.commit = 5;
    net.outbox.borrow_mut().clear();
    let joiner = net.nodes.get_mut(&4).unwrap();
    joiner.peer(PeerInput::Raft(Box::new(heartbeat)));
    assert_eq!(joiner.commit_index(), 0, "nothing taken before a snapshot");
    assert_eq!(joiner.term(), 0, "not even the term");
    let sent: Vec<(u64, Outbound)> = net.outbox.borrow_mut().drain(..).collect();
    let [(4, Outbound::Raft(ask))] = &sent[..] else {
        panic!("one answer from the joiner, not {sent:?}");
    };
    assert_eq!(ask.get_msg_type(), MessageType::MsgAppendResponse);
    assert_eq!((ask.to, ask.term), (leader, 7));
    assert!(ask.reject && ask.request_snapshot >= 1 && ask.index == 0);
}

/// A leader that restarted from a snapshot taken after the entry that
/// added a member has no floor for it: the member, which answers nothing
/// before its first snapshot, must ask for one (simulator, `SIM_JOIN=1`,
/// seed 358: the joiner stayed empty for good).
#[test]
fn a_leader_without_a_floor_for_a_new_member_sends_the_snapshot_it_asks_for() {
    let mut net = established();
    let leader = net.leader().unwrap();
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    // The new member is down while it is added: its first snapshot is lost.
    ask_to_add_voter_4(&mut net, follower);
    net.run_until(200, |net| {
        net.nodes[&leader].conf_state().learners.contains(&4)
    });
    net.nodes.get_mut(&leader).unwrap().forget_floors();
    net.add(4, ConfState::default(), Membership::default());
    net.run_until(3_000, |net| net.everyone_has(&[1, 2, 3, 4]));
    assert!(net.nodes[&4].applied() > 0, "the joiner holds the snapshot");
}

#[test]
fn removing_the_leader_hands_leadership_off_first() {
    let mut net = established();
    let leader = net.leader().unwrap();
    net.nodes.get_mut(&leader).unwrap().reconfigure(
        Change::Incremental {
            joining: vec![],
            leaving: vec![leader],
        },
        None,
        true,
        b"me".to_vec(),
    );
    let rest: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    net.run_until(2_000, |net| {
        net.nodes
            .iter()
            .filter(|(id, _)| **id != leader)
            .all(|(_, n)| n.membership().members.keys().copied().collect::<Vec<_>>() == rest)
    });
    let new_leader = net.leader().expect("a leader");
    assert_ne!(new_leader, leader);
    assert!(
        net.nodes[&leader].machine().configurations.len() >= 2 || {
            // The old leader was answered: it applied the change before it left.
            net.nodes[&leader].machine().refused.is_empty()
        }
    );
    // The two left commit writes alone.
    net.nodes
        .get_mut(&new_leader)
        .unwrap()
        .propose(b"after".to_vec());
    net.run_until(200, |net| {
        rest.iter().all(|id| net.nodes[id].machine().applied == 1)
    });
}

#[test]
fn refusals_come_back_in_zookeepers_order_to_the_node_that_asked() {
    let mut net = established();
    let follower = (1..=3).find(|id| Some(*id) != net.leader()).unwrap();
    let config_id = net.nodes[&follower].membership().config_id;
    let ask = |net: &mut Net, change: Change, expected: Option<u64>, authorized: bool| {
        net.nodes.get_mut(&follower).unwrap().reconfigure(
            change,
            expected,
            authorized,
            b"c".to_vec(),
        );
        net.run_until(200, |net| {
            !net.nodes[&follower].machine().refused.is_empty()
        });
        let (_, error) = net
            .nodes
            .get_mut(&follower)
            .unwrap()
            .machine_mut()
            .refused
            .pop()
            .unwrap();
        error
    };
    let leaving = |ids: Vec<u64>| Change::Incremental {
        joining: vec![],
        leaving: ids,
    };
    assert_eq!(
        ask(&mut net, leaving(vec![3]), Some(config_id + 1), false),
        ReconfigError::BadVersion {
            expected: config_id + 1,
            current: config_id
        },
        "a stale config id before the rest"
    );
    assert!(matches!(
        ask(&mut net, leaving(vec![2, 3]), Some(config_id), true),
        ReconfigError::BadArguments(_)
    ));
    let replace = Change::Replace(vec![
        member(1, Role::Voter),
        member(5, Role::Voter),
        member(6, Role::Voter),
    ]);
    assert_eq!(
        ask(&mut net, replace, None, true),
        ReconfigError::NoQuorum,
        "a majority of new voters that are not synced"
    );
    assert_eq!(
        ask(&mut net, leaving(vec![3]), None, false),
        ReconfigError::NoAuth,
        "authorization is checked last"
    );
    assert_eq!(net.config_ids(), vec![vec![1, 2, 3]; 3], "nothing changed");
}

#[test]
fn an_observer_moves_in_and_out() {
    let mut net = established();
    net.add(4, ConfState::default(), Membership::default());
    let leader = net.leader().unwrap();
    net.nodes.get_mut(&leader).unwrap().reconfigure(
        Change::Incremental {
            joining: vec![member(4, Role::Observer)],
            leaving: vec![],
        },
        None,
        true,
        b"in".to_vec(),
    );
    net.run_until(2_000, |net| net.everyone_has(&[1, 2, 3, 4]));
    let leader = net.leader().unwrap();
    assert_ne!(leader, 4, "an observer never leads");
    net.nodes
        .get_mut(&leader)
        .unwrap()
        .propose(b"seen by 4".to_vec());
    net.run_until(200, |net| net.nodes[&4].machine().applied == 1);
    net.nodes.get_mut(&leader).unwrap().reconfigure(
        Change::Incremental {
            joining: vec![],
            leaving: vec![4],
        },
        None,
        true,
        b"out".to_vec(),
    );
    net.run_until(2_000, |net| {
        (1..=3).all(|id| net.nodes[&id].membership().members.len() == 3)
    });
}
