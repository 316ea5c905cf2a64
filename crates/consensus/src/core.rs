//! The sans-IO Raft node: raft-rs's RawNode plus Keel's rules around it
//! (group commit, forwarding, resending after a leader change, ReadIndex,
//! leader affinity, snapshot scheduling). It owns no thread, no clock and
//! no file: inputs arrive as method calls, time as `tick()`, and all IO goes
//! through the `Io` trait in the documented order. The server's driver
//! thread (driver.rs) and the simulator (crates/sim) run this same code.
//!
//! Order of one `advance()` (raft-rs's documented order, etcd's too):
//! 0. reads that arrived on a leader with `read_lease` are decided: under
//!    the lease they wait only for the commit index as it is now, without
//!    one they ask a ReadIndex round (`decide_reads`);
//! 1. queued proposals become ONE entry (group commit) or go to the leader;
//! 2. Ready: messages to peers are sent first (the leader sends appends
//!    before its own fsync: the pipeline), except commit notices (appends
//!    without entries), which wait for step 4 unless they go to a
//!    follower whose proposals just committed;
//! 3. a snapshot from the leader is verified, kept and installed;
//! 4. entries committed earlier are applied (they are already durable),
//!    then the commit notices are sent;
//! 5. new entries + HardState are persisted (one write, one fsync; a
//!    HardState whose only change is the commit index is written without
//!    an fsync: see `must_sync`);
//! 6. persisted messages are sent, the node advances, newly committed
//!    entries are applied, then ReadIndex reads whose index is applied are
//!    answered;
//! 7. a snapshot is requested from the shell when enough entries passed.
//!
//! The lease and the commit index are published for readers on other
//! threads before every send (steps 2 and 6) and apply (steps 4 and 6),
//! and at the end (`publish_lease`).
//!
//! Membership changes (`reconfigure.rs`, a child module for its size) are
//! conf-change entries applied in step 4/6 like any other; the leader's
//! `tick` carries a change under way one step further.

mod lost_log;
mod reconfigure;
pub use reconfigure::bootstrap_membership;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use raft::eraftpb::{ConfState, Entry, EntryType, HardState, Message, Snapshot};
use raft::storage::MemStorage;
use raft::{Config, RawNode, StateRole};

use crate::driver::{RaftStatus, StateMachine};
use crate::membership::Membership;
use crate::proposal::{
    decode_entry, encode_entry, Committed, Configuration, Dedup, Envelope, Proposal, ProposalError,
    ProposalId, BATCH_PROPOSALS_MAX,
};
use crate::transport::PeerInput;
use crate::ConsensusError;

/// Bytes of proposals one entry may carry.
pub const BATCH_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Entries kept in the log behind a snapshot, so a slightly lagging
/// follower catches up from the log rather than by snapshot install.
pub const LOG_KEPT_BEHIND_SNAPSHOT: u64 = 1_000;
/// Most bytes of entries kept behind a snapshot, whatever
/// LOG_KEPT_BEHIND_SNAPSHOT says: the in-memory log behind the newest
/// snapshot (a follower further behind gets the snapshot), the disk log
/// behind the oldest kept one (a restart may have to fall back to it).
/// Large writes make entries of up to BATCH_BYTES_MAX: without this bound
/// a thousand of them would keep 4 GiB of log on disk.
pub const LOG_KEPT_BEHIND_SNAPSHOT_BYTES: u64 = 16 << 20;
/// Raft ticks per election timeout and per heartbeat. A follower's
/// randomized timeout lies in [ELECTION_TICKS + 1, ELECTION_TICKS + 1 +
/// ELECTION_TICKS_SPREAD): one tick above the leader lease that
/// check-quorum makes the other followers honour (they refuse votes while
/// they heard from a leader less than ELECTION_TICKS ago), so the first
/// follower to time out after a leader dies is not refused and waits a
/// second timeout; a spread of half a timeout (raft-rs's default is a
/// whole one) keeps a failover under two election timeouts while distinct
/// random draws and pre-vote keep split votes rare.
pub const ELECTION_TICKS: usize = 10;
pub const ELECTION_TICKS_SPREAD: usize = 5;
pub const HEARTBEAT_TICKS: usize = 2;
/// Proposals of this node kept for resending after a leader change.
pub const UNAPPLIED_PROPOSALS_MAX: usize = 64 * 1024;
/// ReadIndex requests waiting for an answer or for their index to apply.
pub const PENDING_READS_MAX: usize = 64 * 1024;
/// A ReadIndex request unanswered this many ticks is asked again (the
/// leader may have changed or the message been lost).
pub const READ_RETRY_TICKS: u64 = ELECTION_TICKS as u64;
/// A follower still waiting for a snapshot after this many ticks gets it
/// again: the message or the follower may have been lost, and raft-rs
/// keeps the follower paused until told (report_snapshot).
pub const SNAPSHOT_RETRY_TICKS: u64 = 5 * ELECTION_TICKS as u64;
/// Entries the leader has appended and not yet committed before it holds
/// further proposals back for the next entry (adaptive group commit, see
/// `holding`). One: measured on 3 nodes sharing 2 cores, create x10/x400
/// and mix x100 gained 1-10% over no bound (fewer, larger rounds; each
/// round costs every node an fdatasync and a dozen thread wake-ups).
pub const ENTRIES_IN_FLIGHT_MAX: u64 = 1;
/// The longest a leader may linger over a batch after its entries in
/// flight committed (`Core::set_linger_us`; the server asks for it when
/// reads dominate, see `keel_server::linger`).
pub const LINGER_US_MAX: u64 = 10_000;
/// A batch this large goes out at once, lingering or not.
pub const LINGER_BATCH_ENOUGH: usize = 64;
/// The least time between two ReadIndex rounds this node starts (µs). A
/// read asked sooner waits for the spacing to pass. Each round costs the
/// leader a heartbeat to every follower, and every node several thread
/// wake-ups. Without a floor, the rounds speed up whenever the Raft thread
/// gets a core quickly: each round then serves fewer reads, and more of
/// the machine goes to the rounds. Keel KV's reads batch behind one round
/// (`kv/barrier.rs`), so this caps their rounds at 5,000 a second. Only
/// reads asked as batched (`Core::read_index_batched`: more than one
/// reader waits for them) are held; a lone reader's never are.
pub const READ_SPACING_US: u64 = 200;
/// A leader whose ReadIndex round a quorum answered holds a read lease
/// for this many of its ticks, counted from when it asked the round
/// (`CoreConfig::read_lease`). Every follower that answered heard the
/// round's heartbeat after it was asked, and refuses votes (check-quorum)
/// until ELECTION_TICKS of its own ticks passed, that is for more than
/// ELECTION_TICKS - 1 tick periods: no other leader can be elected before
/// the lease ends. The tick kept in hand covers clock rates that differ
/// by up to 1/8 and a driver turn's stale clock.
pub const LEASE_TICKS: u64 = ELECTION_TICKS as u64 - 2;
/// A lease read within this many ticks of the lease's end also asks a
/// ReadIndex round, which renews the lease when answered.
pub const LEASE_RENEW_TICKS: u64 = LEASE_TICKS / 2;
/// A node refuses to vote (pre-vote or vote, unless a leader transfer
/// asks) for this many ticks after it started: it may have answered a
/// leader's heartbeat just before it restarted, and that leader may still
/// hold a lease on it.
pub const VOTES_REFUSED_AFTER_START_TICKS: u64 = ELECTION_TICKS as u64;
/// Ready rounds one `advance` handles at most.
const READY_ROUNDS_MAX: usize = 4;
const READ_CONTEXT_HEADER_BYTES: usize = 16;
/// What a proposal costs in an entry besides its payload (id, length),
/// rounded up for the batch bound.
const PROPOSAL_OVERHEAD_BYTES: usize = 16;

/// Everything a node sends to a peer.
#[derive(Debug, Clone)]
pub enum Outbound {
    Raft(Message),
    /// A follower's proposals for the leader, encoded as an entry payload.
    Forward {
        to: u64,
        batch: Vec<u8>,
    },
    /// Sessions with activity here, for the leader's session tracker.
    Touch {
        to: u64,
        sessions: Vec<i64>,
    },
    /// A client's reconfig for the leader (`ReconfigRequest::encode`).
    Reconfig {
        to: u64,
        request: Vec<u8>,
    },
    /// The leader's refusal of a reconfig, for the node that asked
    /// (`membership::encode_answer`).
    ReconfigAnswer {
        to: u64,
        answer: Vec<u8>,
    },
    /// The members' addresses this node knows (an encoded `Membership`),
    /// for a peer that may lag behind a change adding one of them.
    Members {
        to: u64,
        members: Vec<u8>,
    },
}

/// The node's IO: the network, the raft log and the snapshot files. The
/// server implements it with TCP, raft-engine and files; the simulator
/// with queues and a simulated disk.
pub trait Io {
    fn send(&mut self, message: Outbound);
    /// Returns only when entries and states are durable (fsync).
    fn persist(
        &mut self,
        entries: &[Entry],
        hard_state: Option<&HardState>,
        conf_state: Option<&ConfState>,
    ) -> Result<(), ConsensusError>;
    /// Keeps a HardState whose term and vote are already durable, without
    /// waiting for the disk (the log store holds it for its next synced
    /// write, `LogStore::persist_commit`): only its commit index is new, and a commit
    /// index lost in a crash is learned again from the log's leader (etcd's
    /// `MustSync`: entries, term and vote are synced before any message
    /// that depends on them; the commit index never needs to be). A later
    /// `persist` makes it durable with everything written before it.
    fn persist_commit(&mut self, hard_state: &HardState) -> Result<(), ConsensusError>;
    /// Drops log entries below `index`.
    fn compact_to(&mut self, index: u64) -> Result<(), ConsensusError>;
    /// Keeps (durably) a snapshot received from the leader.
    fn save_snapshot(&mut self, index: u64, term: u64, bytes: &[u8]) -> Result<(), ConsensusError>;
    /// The index of the oldest snapshot kept: compaction stays behind it,
    /// so a corrupt newest snapshot still has a fallback with its log.
    fn oldest_snapshot_index(&self) -> Option<u64>;
    /// The members' peer addresses ("host:port", and whether the member is
    /// from the bootstrap list) changed: the transport connects to and
    /// accepts exactly these ids. The simulator routes by id and ignores it.
    fn set_peers(&mut self, _peers: &BTreeMap<u64, (String, bool)>) {}
    /// The wall clock in ms, for the time a membership change records (the
    /// configuration znode's mtime); the simulator's is 0.
    fn wall_clock_ms(&self) -> i64 {
        0
    }
}

/// Where raft-rs's `snapshot()` finds the newest snapshot to send to a
/// follower behind the compacted log: (index, term, encoded tree).
pub trait SnapshotSource {
    fn newest(&self) -> Option<(u64, u64, Vec<u8>)>;
}

/// raft-rs storage: the in-memory log (MemStorage) for entries and state,
/// plus the newest snapshot for `snapshot()`, so a follower that fell
/// behind the compacted log gets the real tree, not empty metadata.
pub struct KeelStorage<P: SnapshotSource> {
    memory: MemStorage,
    source: P,
    /// Per member, the lowest snapshot index it may be sent: the index of
    /// the entry that added it (an older snapshot's configuration does not
    /// hold it, and raft-rs refuses to restore such a snapshot).
    floors: BTreeMap<u64, u64>,
    /// A snapshot at or above this index was asked for and is not there
    /// yet: the core has one written.
    wanted_at: AtomicU64,
}

impl<P: SnapshotSource> KeelStorage<P> {
    fn wl(&self) -> std::sync::RwLockWriteGuard<'_, raft::storage::MemStorageCore> {
        self.memory.wl()
    }

    fn rl(&self) -> std::sync::RwLockReadGuard<'_, raft::storage::MemStorageCore> {
        self.memory.rl()
    }
}

/// Whether a Ready's writes must reach the disk before the node goes on:
/// new entries, a new term or a new vote must (a node that forgot them
/// could vote twice or lose acknowledged entries); a HardState whose only
/// change is the commit index need not.
fn must_sync(entries: &[Entry], hard_state: Option<&HardState>, durable: &HardState) -> bool {
    !entries.is_empty()
        || hard_state.is_some_and(|hs| hs.term != durable.term || hs.vote != durable.vote)
}

impl<P: SnapshotSource> raft::Storage for KeelStorage<P> {
    fn initial_state(&self) -> raft::Result<raft::RaftState> {
        self.memory.initial_state()
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        context: raft::GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        self.memory.entries(low, high, max_size, context)
    }

    fn term(&self, index: u64) -> raft::Result<u64> {
        self.memory.term(index)
    }

    fn first_index(&self) -> raft::Result<u64> {
        self.memory.first_index()
    }

    fn last_index(&self) -> raft::Result<u64> {
        self.memory.last_index()
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        let unavailable = || raft::Error::Store(raft::StorageError::SnapshotTemporarilyUnavailable);
        let required = request_index.max(self.floors.get(&to).copied().unwrap_or(0));
        let newest = self.source.newest();
        let Some((index, term, data)) = newest.filter(|(index, _, _)| *index >= required) else {
            self.wanted_at.fetch_max(required.max(1), Ordering::Relaxed);
            return Err(unavailable());
        };
        // The configuration as of the snapshot's index (envelope version
        // 2); a file written before it had the bootstrap configuration.
        let conf_state = match Envelope::split(&data) {
            Ok((
                Envelope {
                    configuration: Some(configuration),
                    ..
                },
                _,
            )) => configuration.conf_state,
            _ => self.memory.initial_state()?.conf_state,
        };
        let mut snapshot = Snapshot::default();
        snapshot.set_data(data.into());
        snapshot.mut_metadata().index = index;
        snapshot.mut_metadata().term = term;
        snapshot.mut_metadata().set_conf_state(conf_state);
        Ok(snapshot)
    }
}

/// What a node found on its disk, in raft-rs's terms.
pub struct Durable {
    /// The snapshot the state machine was loaded from (0, 0 if none).
    pub snapshot_index: u64,
    pub snapshot_term: u64,
    pub conf_state: ConfState,
    pub hard_state: HardState,
    /// Log entries as stored (those covered by the snapshot are skipped).
    pub entries: Vec<Entry>,
}

/// Whether a restart must drop the whole log before using it: it ends
/// before the loaded snapshot (a torn tail, or a crash while a snapshot
/// from the leader was installed, after the snapshot was saved and before
/// the log it covers was compacted). The snapshot covers every entry left,
/// and the next append, `snapshot_index + 1`, would otherwise leave a hole
/// after the log's last entry. An empty log is never covered.
pub fn log_covered(last_log_index: Option<u64>, snapshot_index: u64) -> bool {
    last_log_index.is_some_and(|last| last < snapshot_index)
}

/// Builds raft-rs's in-memory storage from what survived on disk. A commit
/// index beyond the surviving log (a torn tail) is clamped. A log that
/// does not start right after the snapshot, or has a hole, is refused.
pub fn storage_from(durable: Durable) -> Result<MemStorage, ConsensusError> {
    let storage = MemStorage::new();
    if durable.snapshot_index > 0 {
        let mut snapshot = Snapshot::default();
        snapshot.mut_metadata().index = durable.snapshot_index;
        snapshot.mut_metadata().term = durable.snapshot_term;
        snapshot
            .mut_metadata()
            .set_conf_state(durable.conf_state.clone());
        storage.wl().apply_snapshot(snapshot)?;
    } else {
        storage.wl().set_conf_state(durable.conf_state);
    }
    let tail: Vec<Entry> = durable
        .entries
        .into_iter()
        .filter(|e| e.index > durable.snapshot_index)
        .collect();
    if let Some(first) = tail.first() {
        if first.index != durable.snapshot_index + 1 {
            return Err(ConsensusError::Gap {
                snapshot_index: durable.snapshot_index,
                first_log_index: first.index,
            });
        }
    }
    if let Some(pair) = tail
        .windows(2)
        .find(|pair| pair[1].index != pair[0].index + 1)
    {
        return Err(ConsensusError::Hole {
            after: pair[0].index,
            next: pair[1].index,
        });
    }
    storage.wl().append(&tail)?;
    let last = durable
        .snapshot_index
        .max(tail.last().map_or(0, |e| e.index));
    let mut hard_state = durable.hard_state;
    hard_state.commit = hard_state.commit.clamp(durable.snapshot_index, last);
    storage.wl().set_hardstate(hard_state);
    Ok(storage)
}

#[derive(Debug, Clone)]
pub struct CoreConfig {
    pub node_id: u64,
    pub snapshot_every_entries: u64,
    /// ... or after this many bytes of applied entries since the last.
    pub snapshot_every_log_bytes: u64,
    pub preferred_leader: Option<u64>,
    /// The index the state machine has applied (its snapshot's).
    pub applied: u64,
    /// This node's first proposal sequence; must exceed every sequence it
    /// used before (see ProposalId).
    pub first_sequence: u64,
    /// The proposals the loaded snapshot had applied (its envelope).
    pub dedup: Dedup,
    /// Seeds the election-timeout randomization, so a simulated run is a
    /// function of its seed.
    pub seed: u64,
    /// Log entries kept behind the oldest snapshot (LOG_KEPT_BEHIND_SNAPSHOT
    /// in the server; the simulator keeps fewer to exercise install).
    pub log_kept_behind_snapshot: u64,
    /// At most this many bytes of them (LOG_KEPT_BEHIND_SNAPSHOT_BYTES in
    /// the server; the simulator's entries are small, so it keeps fewer).
    pub log_kept_behind_snapshot_bytes: u64,
    /// The membership as of `applied` (the snapshot's envelope, or the
    /// bootstrap member list; empty for a single node or a node joining).
    pub membership: Membership,
    /// This node accepts reconfig requests when it leads (ZooKeeper's
    /// reconfigEnabled, checked by the leader).
    pub reconfig_enabled: bool,
    /// The driver's tick period (µs): the unit of the read lease.
    pub tick_us: u64,
    /// The leader serves reads from its lease after a quorum answered a
    /// recent ReadIndex round (`LEASE_TICKS`) instead of asking a round
    /// per read. Assumes every member ticks at the same period and the
    /// members' clock rates differ by less than 1/8.
    pub read_lease: bool,
    /// A bug planted on purpose, to prove the simulator's checkers catch
    /// it. Only with feature `testing` (the simulator).
    #[cfg(feature = "testing")]
    pub planted_bug: PlantedBug,
}

/// Bugs the simulator's test plants to show its checkers can fail.
#[cfg(feature = "testing")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PlantedBug {
    #[default]
    None,
    /// The leader applies (and so acknowledges) its new entries as soon as
    /// they are in its own log, before a quorum has them.
    ApplyBeforeCommit,
    /// Leader affinity does nothing: a leader never hands over to the
    /// preferred member.
    NoLeaderTransfer,
    /// Any node takes a read lease from a ReadIndex round it asked, led
    /// or not, and answers reads from its own state under it.
    LeaseWithoutLeadership,
    /// No new member gets its first snapshot: the leader never sends it
    /// unasked and a joining node never asks (`ask_first_snapshot`), so a
    /// node that joins with an empty disk never catches up.
    NoFirstSnapshot,
}

struct PendingRead {
    context: Vec<u8>,
    asked_tick: u64,
    /// When the read's latest ReadIndex round was asked (µs).
    asked_us: u64,
    /// Asked as batched (`read_index_batched`): subject to the spacing.
    spaced: bool,
    /// The term this node led when it asked the round (0: it did not).
    asked_term: u64,
    /// Set once the leader answered: the index to wait for.
    index: Option<u64>,
}

/// A leader's read lease: valid in `term` until `until_us`.
#[derive(Debug, Clone, Copy)]
struct Lease {
    term: u64,
    until_us: u64,
}

/// A ReadIndex round asked only to renew the lease.
#[derive(Debug, Clone, Copy)]
struct LeaseRound {
    id: u64,
    asked_us: u64,
    asked_tick: u64,
    asked_term: u64,
}

pub struct Core<S: StateMachine, I: Io, P: SnapshotSource> {
    raw: RawNode<KeelStorage<P>>,
    io: I,
    machine: S,
    status: Arc<RaftStatus>,
    config: CoreConfig,
    pending: Vec<Proposal>,
    pending_bytes: usize,
    /// The driver's monotonic clock, µs (`set_clock_us`).
    now_us: u64,
    /// How long the leader may linger over a batch (`set_linger_us`).
    linger_us: u64,
    /// When this node last started a ReadIndex round (µs).
    last_read_ask_us: Option<u64>,
    /// Reads asked within `READ_SPACING_US` of the last round, in order.
    held_reads: Vec<u64>,
    /// Reads a leader with `read_lease` decides at its next `advance`
    /// (when its clock is fresh): served from the lease, or asked.
    undecided_reads: Vec<u64>,
    /// The read lease this leader holds (`LEASE_TICKS`).
    lease: Option<Lease>,
    /// A term in which this node asked another to take over: no lease is
    /// taken in it, since the target's campaign overrides the followers'
    /// refusal to vote.
    lease_barred_term: u64,
    /// The round a lease read asked to renew the lease (no reader waits).
    lease_round: Option<LeaseRound>,
    /// `RaftStatus::lease_reads` when the lease was last renewed: reads
    /// served since (here or by readers on other threads) renew it.
    lease_reads_seen: u64,
    /// When the current lingering began (the entries in flight had
    /// committed and proposals were queued).
    linger_since_us: Option<u64>,
    /// Proposals in the last entry this node proposed.
    last_batch_proposals: usize,
    /// The commit index this leader's appends last carried to the
    /// followers (`tell_commit`).
    commit_told: u64,
    snapshot_running: bool,
    snapshot_wanted: bool,
    /// Bytes of entries applied since the newest snapshot's index.
    log_bytes_since_snapshot: u64,
    /// (index, bytes) of the entries applied since the disk log's first
    /// index (or since the snapshot a restart loaded): where to compact the
    /// logs to keep at most `log_kept_behind_snapshot_bytes` behind a
    /// snapshot.
    applied_sizes: std::collections::VecDeque<(u64, u64)>,
    last_snapshot_index: u64,
    applied: u64,
    leader: bool,
    leader_id: u64,
    next_sequence: u64,
    ticks: u64,
    last_transfer_tick: u64,
    /// This node's proposals not yet seen applied, oldest first: resent to
    /// a new leader after a leader change (`dedup` drops duplicates).
    unapplied: VecDeque<Proposal>,
    /// Which proposals are applied: a resent one is applied once.
    dedup: Dedup,
    reads: BTreeMap<u64, PendingRead>,
    next_read: u64,
    reask_reads: bool,
    /// Followers the leader is sending a snapshot to, since which tick.
    snapshot_sends: BTreeMap<u64, u64>,
    rng: u64,
    /// Membership changes (`reconfigure.rs`).
    reconfig: reconfigure::State,
    /// A leader's heartbeat showed that this node lost entries it had
    /// acknowledged (`lost_log.rs`): it steps nothing more, and `advance`
    /// returns the error.
    lost_log: Option<lost_log::LostLog>,
    /// On the leader: the members told they lost entries, with the term.
    lost_log_revealed: BTreeMap<u64, u64>,
    /// An observer that lost entries said so once (`lost_log.rs`).
    lost_log_observer_told: bool,
}

impl<S: StateMachine, I: Io, P: SnapshotSource> Core<S, I, P> {
    pub fn new(
        config: CoreConfig,
        memory: MemStorage,
        source: P,
        io: I,
        machine: S,
        status: Arc<RaftStatus>,
    ) -> Result<Self, ConsensusError> {
        assert!(config.node_id > 0, "raft node ids start at 1");
        let raft_config = Config {
            id: config.node_id,
            election_tick: ELECTION_TICKS,
            min_election_tick: ELECTION_TICKS + 1,
            max_election_tick: ELECTION_TICKS + 1 + ELECTION_TICKS_SPREAD,
            heartbeat_tick: HEARTBEAT_TICKS,
            applied: config.applied,
            pre_vote: true,
            check_quorum: true,
            max_inflight_msgs: 256,
            // A new commit index rides on the next append; `tell_commit`
            // sends it alone only when no append follows at once.
            skip_bcast_commit: true,
            max_size_per_msg: 1024 * 1024,
            ..Default::default()
        };
        raft_config.validate()?;
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let storage = KeelStorage {
            memory,
            source,
            floors: BTreeMap::new(),
            wanted_at: AtomicU64::new(0),
        };
        let raw = RawNode::new(&raft_config, storage, &logger)?;
        status
            .applied_index
            .store(config.applied, Ordering::Release);
        let mut core = Core {
            raw,
            io,
            machine,
            status,
            pending: Vec::new(),
            pending_bytes: 0,
            now_us: 0,
            linger_us: 0,
            last_read_ask_us: None,
            held_reads: Vec::new(),
            undecided_reads: Vec::new(),
            lease: None,
            lease_barred_term: 0,
            lease_round: None,
            lease_reads_seen: 0,
            linger_since_us: None,
            last_batch_proposals: 0,
            commit_told: 0,
            snapshot_running: false,
            snapshot_wanted: false,
            log_bytes_since_snapshot: 0,
            applied_sizes: std::collections::VecDeque::new(),
            last_snapshot_index: config.applied,
            applied: config.applied,
            leader: false,
            leader_id: 0,
            next_sequence: config.first_sequence,
            ticks: 0,
            last_transfer_tick: 0,
            unapplied: VecDeque::new(),
            dedup: config.dedup.clone(),
            reads: BTreeMap::new(),
            next_read: 1,
            reask_reads: false,
            snapshot_sends: BTreeMap::new(),
            rng: config.seed ^ 0x9e37_79b9_7f4a_7c15,
            reconfig: reconfigure::State::new(config.membership.clone(), config.first_sequence),
            lost_log: None,
            lost_log_revealed: BTreeMap::new(),
            lost_log_observer_told: false,
            config,
        };
        core.redraw_election_timeout();
        core.publish_membership();
        if core.raw.raft.prs().conf().voters().ids().len() == 1 && core.is_voter() {
            core.raw.campaign()?;
        }
        Ok(core)
    }

    /// The planted bug `ApplyBeforeCommit` is on (never without `testing`).
    #[cfg(feature = "testing")]
    fn apply_before_commit(&self) -> bool {
        self.config.planted_bug == PlantedBug::ApplyBeforeCommit
    }

    #[cfg(not(feature = "testing"))]
    const fn apply_before_commit(&self) -> bool {
        false
    }

    /// The planted bug `LeaseWithoutLeadership` is on.
    #[cfg(feature = "testing")]
    fn lease_without_leadership(&self) -> bool {
        self.config.planted_bug == PlantedBug::LeaseWithoutLeadership
    }

    #[cfg(not(feature = "testing"))]
    const fn lease_without_leadership(&self) -> bool {
        false
    }

    fn is_voter(&self) -> bool {
        self.votes(self.config.node_id)
    }

    /// Whether member `id` votes in the configuration in effect (either
    /// half of a joint one).
    fn votes(&self, id: u64) -> bool {
        self.raw.raft.prs().conf().voters().contains(id)
    }

    pub fn machine(&self) -> &S {
        &self.machine
    }

    pub fn machine_mut(&mut self) -> &mut S {
        &mut self.machine
    }

    /// The counters and gauges this node publishes.
    pub fn status(&self) -> &RaftStatus {
        &self.status
    }

    pub fn io(&self) -> &I {
        &self.io
    }

    pub fn io_mut(&mut self) -> &mut I {
        &mut self.io
    }

    pub fn node_id(&self) -> u64 {
        self.config.node_id
    }

    pub fn is_leader(&self) -> bool {
        self.leader
    }

    pub fn leader_id(&self) -> u64 {
        self.leader_id
    }

    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    pub fn applied(&self) -> u64 {
        self.applied
    }

    pub fn commit_index(&self) -> u64 {
        self.raw.raft.raft_log.committed
    }

    /// Room for more proposals in the batch being formed.
    pub fn batch_has_room(&self) -> bool {
        self.pending.len() < BATCH_PROPOSALS_MAX && self.pending_bytes < BATCH_BYTES_MAX
    }

    /// Queues a local proposal (bytes opaque to consensus); it gets its id
    /// here.
    pub fn propose(&mut self, payload: Vec<u8>) {
        let proposal = Proposal {
            id: ProposalId::new(self.config.node_id, self.next_sequence),
            payload,
        };
        self.next_sequence += 1;
        if self.unapplied.len() >= UNAPPLIED_PROPOSALS_MAX {
            let oldest = self.unapplied.pop_front().expect("full");
            self.machine.dropped(vec![oldest.payload]);
        }
        self.unapplied.push_back(proposal.clone());
        self.pending_bytes += PROPOSAL_OVERHEAD_BYTES + proposal.payload.len();
        self.pending.push(proposal);
    }

    /// Appends `data` as an entry's payload as it is, past the batch and
    /// its encoding (a test's entry of another format, or damaged).
    #[cfg(test)]
    pub(crate) fn append_raw_for_test(&mut self, data: Vec<u8>) {
        self.raw
            .propose(Vec::new(), data)
            .expect("a leader takes it");
    }

    /// The dedup table as applied so far (the simulator compares replicas).
    pub fn dedup(&self) -> &Dedup {
        &self.dedup
    }

    /// Session activity seen here: the leader's tracker hears of it.
    pub fn touches(&mut self, sessions: Vec<i64>) {
        if self.leader {
            self.machine.touched(&sessions);
        } else if self.leader_id != 0 {
            self.io.send(Outbound::Touch {
                to: self.leader_id,
                sessions,
            });
        }
    }

    /// A linearizable read barrier (ZooKeeper's sync): `context` comes back
    /// through `StateMachine::read_ready` once this node has applied every
    /// entry committed when the leader confirmed its leadership.
    pub fn read_index(&mut self, context: Vec<u8>) {
        self.add_read(context, false);
    }

    /// A ReadIndex that serves several readers: held while the last round
    /// this node started is younger than `READ_SPACING_US`, then asked
    /// (`release_held_reads`). A lone reader uses `read_index`, so its
    /// reads never wait for the spacing.
    pub fn read_index_batched(&mut self, context: Vec<u8>) {
        self.add_read(context, true);
    }

    fn add_read(&mut self, context: Vec<u8>, spaced: bool) {
        if self.reads.len() >= PENDING_READS_MAX {
            return self.machine.read_failed(context);
        }
        let id = self.next_read;
        self.next_read += 1;
        self.reads.insert(
            id,
            PendingRead {
                context,
                asked_tick: self.ticks,
                asked_us: self.now_us,
                spaced,
                asked_term: 0,
                index: None,
            },
        );
        if self.config.read_lease
            && (self.leader || (self.lease_without_leadership() && self.lease.is_some()))
        {
            self.undecided_reads.push(id);
            return;
        }
        self.ask_or_hold(id);
    }

    fn ask_or_hold(&mut self, id: u64) {
        let spaced = self.reads.get(&id).is_some_and(|read| read.spaced);
        if spaced && self.now_us < self.read_spacing_until_us() {
            self.held_reads.push(id);
            return;
        }
        self.last_read_ask_us = Some(self.now_us);
        self.ask_read(id);
    }

    /// The lease's end, if this node leads and holds one now.
    fn lease_until_us(&self) -> Option<u64> {
        self.lease_held().filter(|until_us| self.now_us < *until_us)
    }

    /// The end of the lease this node holds, whatever the clock says now.
    fn lease_held(&self) -> Option<u64> {
        let raft = &self.raw.raft;
        let lease = self.lease?;
        let leading = raft.state == StateRole::Leader && lease.term == raft.term;
        let valid = (leading || self.lease_without_leadership())
            && lease.term != self.lease_barred_term
            && !raft.has_pending_conf();
        valid.then_some(lease.until_us)
    }

    /// Publishes the lease and the commit index for readers on other
    /// threads (`RaftStatus::lease_covers_read`). Called before anything
    /// that could make a newer commit known (messages, applies) and
    /// whenever the lease may have ended early (a transfer, a role or
    /// configuration change): what the readers see is never newer than
    /// the truth, and never a lease this node no longer holds.
    fn publish_lease(&self) {
        let committed = self.raw.raft.raft_log.committed;
        self.status.lease_commit.store(committed, Ordering::Release);
        let until_us = self.lease_held().unwrap_or(0);
        self.status
            .lease_until_us
            .store(until_us, Ordering::Release);
    }

    /// The term this node leads in (0 when it does not lead).
    fn leading_term(&self) -> u64 {
        let raft = &self.raw.raft;
        if raft.state == StateRole::Leader {
            raft.term
        } else {
            0
        }
    }

    /// A quorum answered a round this node asked at `asked_us` while
    /// leading in `asked_term`.
    fn extend_lease(&mut self, asked_us: u64, asked_term: u64) {
        let raft = &self.raw.raft;
        let leading = raft.state == StateRole::Leader && asked_term == raft.term;
        if !self.config.read_lease
            || !(leading || self.lease_without_leadership())
            || raft.term == self.lease_barred_term
        {
            return;
        }
        let until_us = asked_us + LEASE_TICKS * self.config.tick_us;
        let lease = match self.lease {
            Some(lease) if lease.term == raft.term => Lease {
                term: lease.term,
                until_us: lease.until_us.max(until_us),
            },
            _ => Lease {
                term: raft.term,
                until_us,
            },
        };
        self.lease = Some(lease);
    }

    /// The reads that arrived since the last `advance` on a leader with
    /// `read_lease`: under a lease each waits only for the commit index
    /// as it is now (every write acknowledged so far is committed, and no
    /// other leader can have committed anything); without one it asks a
    /// round as any read does. A read near the lease's end also asks a
    /// round of its own to renew it.
    fn decide_reads(&mut self) {
        if self.undecided_reads.is_empty() {
            return;
        }
        let undecided = std::mem::take(&mut self.undecided_reads);
        let Some(until_us) = self.lease_until_us() else {
            for id in undecided {
                if let Some(read) = self.reads.get_mut(&id) {
                    read.asked_tick = self.ticks;
                    self.ask_or_hold(id);
                }
            }
            return;
        };
        let committed = self.raw.raft.raft_log.committed;
        let mut served = 0;
        for id in undecided {
            if let Some(read) = self.reads.get_mut(&id) {
                read.index.get_or_insert(committed);
                served += 1;
            }
        }
        self.status.lease_reads.fetch_add(served, Ordering::Relaxed);
        if self.now_us + LEASE_RENEW_TICKS * self.config.tick_us >= until_us {
            self.renew_lease();
        }
        self.answer_reads();
    }

    /// A lease that served reads since its last renewal (readers on other
    /// threads use it without telling this thread) and nears its end is
    /// renewed, so they do not meet its end and wait for a round.
    fn maybe_renew_lease(&mut self) {
        let Some(until_us) = self.lease_until_us() else {
            return;
        };
        let served = self.status.lease_reads.load(Ordering::Relaxed);
        if served != self.lease_reads_seen
            && self.now_us + LEASE_RENEW_TICKS * self.config.tick_us >= until_us
        {
            self.renew_lease();
        }
    }

    /// Asks a round whose answer renews the lease, unless one is out.
    fn renew_lease(&mut self) {
        self.lease_reads_seen = self.status.lease_reads.load(Ordering::Relaxed);
        if self
            .lease_round
            .is_some_and(|round| round.asked_tick + READ_RETRY_TICKS > self.ticks)
        {
            return;
        }
        let id = self.next_read;
        self.next_read += 1;
        self.lease_round = Some(LeaseRound {
            id,
            asked_us: self.now_us,
            asked_tick: self.ticks,
            asked_term: self.leading_term(),
        });
        self.ask_read(id);
    }

    /// Leadership goes to `target` (raft-rs's transfer): the target's
    /// campaign overrides the followers' refusal to vote, so this term's
    /// lease ends now.
    fn transfer_leadership(&mut self, target: u64) {
        self.lease_barred_term = self.raw.raft.term;
        self.lease = None;
        self.publish_lease();
        self.raw.transfer_leader(target);
    }

    /// When the spacing after the last ReadIndex round ends (µs).
    fn read_spacing_until_us(&self) -> u64 {
        self.last_read_ask_us.map_or(0, |at| at + READ_SPACING_US)
    }

    /// Asks the reads held for `READ_SPACING_US` once it has passed.
    fn release_held_reads(&mut self) {
        if self.held_reads.is_empty() || self.now_us < self.read_spacing_until_us() {
            return;
        }
        self.last_read_ask_us = Some(self.now_us);
        for id in std::mem::take(&mut self.held_reads) {
            if let Some(read) = self.reads.get_mut(&id) {
                read.asked_tick = self.ticks;
                self.ask_read(id);
            }
        }
    }

    fn ask_read(&mut self, id: u64) {
        let asked_term = self.leading_term();
        if let Some(read) = self.reads.get_mut(&id) {
            read.asked_us = self.now_us;
            read.asked_term = asked_term;
        }
        let mut rctx = Vec::with_capacity(READ_CONTEXT_HEADER_BYTES);
        rctx.extend_from_slice(&self.config.node_id.to_be_bytes());
        rctx.extend_from_slice(&id.to_be_bytes());
        self.raw.read_index(rctx);
        self.redraw_election_timeout();
    }

    /// A vote (or pre-vote) asked within `VOTES_REFUSED_AFTER_START_TICKS`
    /// of this node's start is ignored, as raft-rs ignores one within a
    /// leader's lease: unless a leader transfer asks for it.
    fn refuse_vote(&self, message: &Message) -> bool {
        use raft::eraftpb::MessageType;
        let vote = matches!(
            message.get_msg_type(),
            MessageType::MsgRequestVote | MessageType::MsgRequestPreVote
        );
        vote && self.ticks < VOTES_REFUSED_AFTER_START_TICKS
            && message.context != raft::CAMPAIGN_TRANSFER
    }

    pub fn peer(&mut self, input: PeerInput) {
        match input {
            PeerInput::Raft(mut message) => {
                if self.lost_log.is_some() {
                    return;
                }
                if self.refuse_before_first_snapshot(&message) {
                    return self.ask_first_snapshot(&message);
                }
                if self.refuse_vote(&message) {
                    return;
                }
                if let Some(lost) = self.lost_log_shown(&mut message) {
                    tracing::error!(?lost, "this member lost entries it had acknowledged");
                    self.lost_log = Some(lost);
                    return;
                }
                if self.reveal_lost_log(&message) {
                    return;
                }
                self.reconfig.heard.insert(message.from, self.ticks);
                self.settle_first_snapshot(&message);
                if let Err(error) = self.raw.step(*message) {
                    tracing::debug!(%error, "raft message refused");
                }
                self.redraw_election_timeout();
            }
            PeerInput::Reconfig(request) => self.reconfig_from_peer(&request),
            PeerInput::ReconfigAnswer(answer) => self.reconfig_answered(&answer),
            PeerInput::Members(members) => self.learn_members(&members),
            PeerInput::Forward(batch) => match decode_entry(&batch) {
                Ok(proposals) => {
                    self.pending_bytes += batch.len();
                    self.pending
                        .extend(proposals.into_iter().map(|(id, payload)| Proposal {
                            id,
                            payload: payload.to_vec(),
                        }));
                }
                Err(error) => tracing::warn!(%error, "forwarded batch does not decode; dropped"),
            },
            PeerInput::Touch(sessions) => {
                if self.leader {
                    self.machine.touched(&sessions);
                }
            }
        }
    }

    /// One logical clock tick (the server's is 100 ms).
    pub fn tick(&mut self) {
        self.raw.tick();
        self.redraw_election_timeout();
        self.ticks += 1;
        self.maybe_renew_lease();
        self.maybe_transfer_to_preferred();
        self.retry_reads();
        self.retry_snapshots();
        self.reconfig_tick();
    }

    /// The transport finished (or gave up) sending a snapshot to `to`: a
    /// failure is reported to raft-rs at once; a success restarts the
    /// retry timer, so a large transfer is not sent twice.
    pub fn snapshot_transfer_ended(&mut self, to: u64, sent: bool) {
        if !self.leader {
            return;
        }
        if sent {
            self.snapshot_sends.insert(to, self.ticks);
        } else {
            self.snapshot_sends.remove(&to);
            self.raw.report_snapshot(to, raft::SnapshotStatus::Failure);
        }
    }

    /// raft-rs pauses a follower while it sends it a snapshot and resumes
    /// it only when the follower answers. If the snapshot or the follower
    /// was lost (a crash, a dropped frame), report the failure after
    /// SNAPSHOT_RETRY_TICKS so the leader probes and sends again.
    fn retry_snapshots(&mut self) {
        if !self.leader {
            self.snapshot_sends.clear();
            return;
        }
        let mut waiting: Vec<u64> = self
            .raw
            .raft
            .prs()
            .iter()
            .filter(|(_, p)| p.state == raft::ProgressState::Snapshot)
            .map(|(id, _)| *id)
            .collect();
        waiting.sort_unstable();
        self.snapshot_sends.retain(|id, _| waiting.contains(id));
        for id in waiting {
            let since = *self.snapshot_sends.entry(id).or_insert(self.ticks);
            if self.ticks >= since + SNAPSHOT_RETRY_TICKS {
                tracing::info!(follower = id, "snapshot not acknowledged; sending again");
                self.raw.report_snapshot(id, raft::SnapshotStatus::Failure);
                self.snapshot_sends.remove(&id);
            }
        }
    }

    /// raft-rs draws election timeouts from the OS random source; Keel
    /// redraws each fresh one from its own seeded generator, so a seed
    /// fixes a simulated run. (Called after every call into raft-rs: a
    /// reset shows as election_elapsed == 0.)
    fn redraw_election_timeout(&mut self) {
        if self.raw.raft.election_elapsed != 0 {
            return;
        }
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let timeout = ELECTION_TICKS + 1 + (z % ELECTION_TICKS_SPREAD as u64) as usize;
        self.raw.raft.set_randomized_election_timeout(timeout);
    }

    /// Runs steps 1–7 of the module doc, again while handling a Ready left
    /// more to do (bounded: the rest waits for the next call).
    pub fn advance(&mut self) -> Result<(), ConsensusError> {
        if let Some(lost) = self.lost_log {
            return Err(lost.error());
        }
        self.decide_reads();
        self.release_held_reads();
        self.start_lingering();
        self.flush_proposals();
        for _ in 0..READY_ROUNDS_MAX {
            self.tell_commit();
            self.on_ready()?;
            if std::mem::take(&mut self.reask_reads) {
                self.reask_unanswered_reads();
            }
            if !self.raw.has_ready() && !self.commit_untold() {
                break;
            }
        }
        self.publish_lease();
        self.maybe_snapshot();
        Ok(())
    }

    /// The leader committed past what its appends told the followers.
    fn commit_untold(&self) -> bool {
        self.leader && self.raw.raft.raft_log.committed > self.commit_told
    }

    /// raft-rs runs with `skip_bcast_commit`: a commit learned from acks
    /// is not broadcast at once as an empty append (and acked again). When
    /// the next batch goes out in the same turn its appends carry it
    /// (`flush_proposals`); otherwise this sends it alone, so followers
    /// apply (and answer their clients) without waiting for a heartbeat.
    /// Under load that halves the messages of a round.
    fn tell_commit(&mut self) {
        if self.commit_untold() {
            self.raw.raft.bcast_append();
            self.commit_told = self.raw.raft.raft_log.committed;
        }
    }

    /// Work is waiting for the next `advance` (proposals held back behind
    /// entries in flight wait for an ack, not for the next turn).
    pub fn has_ready(&self) -> bool {
        self.raw.has_ready()
            || self.commit_untold()
            || (!self.pending.is_empty() && !self.holding())
    }

    /// The leader keeps queued proposals for the next entry while
    /// ENTRIES_IN_FLIGHT_MAX of its entries are appended but not yet
    /// committed and the batch has room: the batch grows while the
    /// previous one replicates (adaptive group commit: under a light write
    /// load every write goes out at once, under a heavy one each round
    /// carries everything that queued during the last). Proposals arriving
    /// meanwhile only join that batch: the driver need not wake for them.
    pub(crate) fn holding(&self) -> bool {
        if !(self.leader && self.batch_has_room()) {
            return false;
        }
        self.in_flight() >= ENTRIES_IN_FLIGHT_MAX
            || self
                .linger_until_us()
                .is_some_and(|until| self.now_us < until)
    }

    /// This leader's entries appended and not yet committed.
    fn in_flight(&self) -> u64 {
        let log = &self.raw.raft.raft_log;
        log.last_index().saturating_sub(log.committed)
    }

    /// The monotonic clock lingering is measured on, µs (the driver's
    /// `Instant`, the simulator's logical time); never goes back.
    pub fn set_clock_us(&mut self, now_us: u64) {
        assert!(now_us >= self.now_us, "the clock went back");
        self.now_us = now_us;
    }

    /// How long the leader may hold a batch once its entries in flight
    /// have committed, waiting for more writes to join it (0: never).
    /// Worth it when clients mostly read: the few writes of a round then
    /// share one fdatasync and one replication round trip per node
    /// instead of paying one each, and the clients waiting on them are
    /// few. Writers that only write would lose throughput, which is why
    /// the server sets it from what its clients send.
    pub fn set_linger_us(&mut self, linger_us: u64) {
        assert!(linger_us <= LINGER_US_MAX, "linger {linger_us} µs");
        self.linger_us = linger_us;
    }

    /// When a lingering leader flushes its batch anyway: only while
    /// lingering is allowed, more than one proposal went into the last
    /// entry (a lone writer never waits) and the batch is small.
    fn linger_until_us(&self) -> Option<u64> {
        if self.linger_us == 0
            || self.pending.is_empty()
            || self.pending.len() >= LINGER_BATCH_ENOUGH
            || self.last_batch_proposals < 2
        {
            return None;
        }
        Some(self.linger_since_us? + self.linger_us)
    }

    /// When the driver must advance again although no input came: a
    /// lingering batch's time is up, or held reads may be asked.
    pub fn wake_at_us(&self) -> Option<u64> {
        let reads = (!self.held_reads.is_empty()).then(|| self.read_spacing_until_us());
        let linger = if !self.leader || self.in_flight() >= ENTRIES_IN_FLIGHT_MAX {
            None
        } else {
            self.linger_until_us()
        };
        match (reads, linger) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Lingering starts when proposals wait and nothing is in flight.
    fn start_lingering(&mut self) {
        if self.leader
            && self.linger_since_us.is_none()
            && !self.pending.is_empty()
            && self.in_flight() < ENTRIES_IN_FLIGHT_MAX
        {
            self.linger_since_us = Some(self.now_us);
        }
    }

    fn reask_unanswered_reads(&mut self) {
        let unanswered: Vec<u64> = self
            .reads
            .iter()
            .filter(|(_, r)| r.index.is_none())
            .map(|(id, _)| *id)
            .collect();
        for id in unanswered {
            self.reads.get_mut(&id).expect("listed").asked_tick = self.ticks;
            self.ask_read(id);
        }
    }

    /// Group commit: everything queued becomes one entry; a follower sends
    /// the batch to the leader, which proposes it in arrival order.
    fn flush_proposals(&mut self) {
        if self.pending.is_empty() || self.holding() {
            return;
        }
        let proposals = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        self.linger_since_us = None;
        self.last_batch_proposals = proposals.len();
        let bytes: usize = proposals.iter().map(|p| p.payload.len()).sum();
        let mut data = Vec::with_capacity(bytes + proposals.len() * PROPOSAL_OVERHEAD_BYTES);
        encode_entry(&proposals, &mut data);
        if !self.leader {
            // No leader known: the proposals wait in `unapplied` and go to
            // the leader once one is elected.
            if self.leader_id != 0 {
                self.io.send(Outbound::Forward {
                    to: self.leader_id,
                    batch: data,
                });
            }
            return;
        }
        self.status
            .proposals
            .fetch_add(proposals.len() as u64, Ordering::Relaxed);
        self.status.batches.fetch_add(1, Ordering::Relaxed);
        self.status.batch_proposals.record(proposals.len() as u64);
        if let Err(error) = self.raw.propose(Vec::new(), data) {
            tracing::warn!(%error, count = proposals.len(), "proposal dropped");
            self.machine
                .dropped(proposals.into_iter().map(|p| p.payload).collect());
        } else {
            // The new entry's appends carry the commit index.
            self.commit_told = self.raw.raft.raft_log.committed;
        }
    }

    /// The other nodes whose proposals are among `entries` (so whose
    /// clients wait for them to commit).
    fn origins_elsewhere(&self, entries: &[Entry]) -> Vec<u64> {
        let mut origins = Vec::new();
        for entry in entries {
            if entry.get_entry_type() != EntryType::EntryNormal {
                continue;
            }
            for (id, _) in decode_entry(&entry.data).unwrap_or_default() {
                let origin = id.origin();
                if origin != self.config.node_id && !origins.contains(&origin) {
                    origins.push(origin);
                }
            }
        }
        origins
    }

    fn send_all(&mut self, messages: Vec<Message>) {
        self.publish_lease();
        for message in messages {
            if message.get_msg_type() == raft::eraftpb::MessageType::MsgSnapshot {
                self.status.snapshots_sent.fetch_add(1, Ordering::Relaxed);
            }
            self.io.send(Outbound::Raft(message));
        }
    }

    fn on_ready(&mut self) -> Result<(), ConsensusError> {
        if !self.raw.has_ready() {
            return Ok(());
        }
        let mut ready = self.raw.ready();
        // What the disk holds, taken before a snapshot install: MemStorage's
        // apply_snapshot raises its term to the snapshot's without any
        // write, and a term learned in this Ready must still be synced.
        let durable = self.raw.store().rl().hard_state().clone();
        if let Some(soft) = ready.ss() {
            self.role(soft.raft_state == StateRole::Leader, soft.leader_id);
        }
        // Commit notices wait until this Ready's committed entries are
        // applied: on the leader, the apply hands the replies to the client
        // threads, and waking those first gives them a core before the
        // followers' threads wake for the notices (on two cores, that
        // cuts a lone client's create by a wake-up's wait). A follower
        // whose own clients' proposals just committed is told first: its
        // clients wait on the notice, not on this apply.
        let (notices, urgent) = split_commit_notices(ready.take_messages());
        let waiting = if notices.is_empty() {
            Vec::new()
        } else {
            self.origins_elsewhere(ready.committed_entries())
        };
        let (notices_now, notices) = notices
            .into_iter()
            .partition(|notice| waiting.contains(&notice.to));
        self.send_all(urgent);
        self.send_all(notices_now);
        if !ready.snapshot().is_empty() {
            self.install_snapshot(ready.snapshot().clone())?;
        }
        self.note_read_states(ready.take_read_states());
        self.apply_entries(ready.take_committed_entries())?;
        self.send_all(notices);
        let entries = ready.take_entries();
        let hard_state = ready.hs().cloned();
        if !entries.is_empty() || hard_state.is_some() {
            if must_sync(&entries, hard_state.as_ref(), &durable) {
                self.io.persist(&entries, hard_state.as_ref(), None)?;
                self.status.fsyncs.fetch_add(1, Ordering::Relaxed);
            } else {
                let hs = hard_state.as_ref().expect("must_sync is true without one");
                assert!(
                    hs.commit >= durable.commit,
                    "a commit index never goes back"
                );
                self.io.persist_commit(hs)?;
            }
            let mut storage = self.raw.mut_store().wl();
            storage.append(&entries)?;
            if let Some(hs) = hard_state {
                storage.set_hardstate(hs);
            }
        }
        if let Some(last) = entries.last() {
            self.status.last_index.store(last.index, Ordering::Release);
        }
        self.learn_appended_members(&entries);
        if self.apply_before_commit() && self.leader {
            let early: Vec<Entry> = entries
                .iter()
                .filter(|e| e.index == self.applied + 1 && !e.data.is_empty())
                .cloned()
                .collect();
            self.apply_entries(early)?;
        }
        self.send_all(ready.take_persisted_messages());
        let mut light = self.raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            self.raw
                .mut_store()
                .wl()
                .mut_hard_state()
                .set_commit(commit);
            self.status.commit_index.store(commit, Ordering::Release);
        }
        self.send_all(light.take_messages());
        self.apply_entries(light.take_committed_entries())?;
        self.raw.advance_apply();
        // A commit learned from peers (a follower's appends, the leader's
        // acks) comes in a Ready's HardState, not in the light ready: the
        // status follows raft-rs's own commit index.
        self.status
            .commit_index
            .store(self.raw.raft.raft_log.committed, Ordering::Release);
        self.redraw_election_timeout();
        self.answer_reads();
        Ok(())
    }

    /// A follower behind the leader's compacted log receives the tree:
    /// verify it, keep it as our snapshot, replace the state, drop the log
    /// it covers.
    fn install_snapshot(&mut self, snapshot: Snapshot) -> Result<(), ConsensusError> {
        let index = snapshot.get_metadata().index;
        let term = snapshot.get_metadata().term;
        if self.snapshot_running {
            // The state is about to be replaced under the writer: it will
            // fail, and report so through snapshot_done.
            tracing::info!(
                index,
                "a snapshot being written is abandoned for the leader's"
            );
        }
        // raft-rs has moved its log to the snapshot already (committed is
        // its index): ignoring it would leave raft-rs past a log it does
        // not have, which it panics on at the next election. Stop instead.
        let refused = |reason: String| ConsensusError::LeaderSnapshot { index, reason };
        let (envelope, state) =
            Envelope::split(&snapshot.data).map_err(|error| refused(error.to_string()))?;
        self.machine
            .restore(index, state)
            .map_err(|error| refused(error.to_string()))?;
        self.dedup = envelope.dedup;
        if let Some(configuration) = envelope.configuration {
            self.installed_membership(configuration.membership);
        }
        self.io.save_snapshot(index, term, &snapshot.data)?;
        self.io
            .persist(&[], None, Some(snapshot.get_metadata().get_conf_state()))?;
        self.io.compact_to(index + 1)?;
        self.raw.mut_store().wl().apply_snapshot(snapshot)?;
        self.applied = index;
        self.status.applied_index.store(index, Ordering::Release);
        self.last_snapshot_index = index;
        self.log_bytes_since_snapshot = 0;
        tracing::info!(index, term, "installed snapshot from the leader");
        Ok(())
    }

    fn role(&mut self, leader: bool, leader_id: u64) {
        let new_leader = leader_id != self.leader_id && leader_id != 0;
        self.leader_id = leader_id;
        self.status.leader_id.store(leader_id, Ordering::Release);
        self.status
            .term
            .store(self.raw.raft.term, Ordering::Release);
        if leader != self.leader {
            self.leader = leader;
            self.status.is_leader.store(leader, Ordering::Release);
            tracing::info!(leader, term = self.raw.raft.term, "raft role changed");
            self.publish_lease();
            self.machine.role_changed(leader);
        }
        if new_leader && !self.unapplied.is_empty() {
            // Proposals sent to the old leader may be lost: resend them all,
            // in order; `dedup` applies each proposal id once.
            tracing::info!(
                count = self.unapplied.len(),
                leader_id,
                "resending proposals to the new leader"
            );
            let queued = std::mem::take(&mut self.pending);
            self.pending = resend_order(self.config.node_id, &self.unapplied, queued);
            self.pending_bytes = self
                .pending
                .iter()
                .map(|p| PROPOSAL_OVERHEAD_BYTES + p.payload.len())
                .sum();
        }
        if new_leader {
            // Reads asked of the old leader may never be answered; they are
            // asked again once this Ready is done (raft-rs allows no new
            // messages between ready() and advance() on a follower).
            self.reask_reads = true;
            self.leader_changed_for_reconfigs();
        }
    }

    fn apply_entries(&mut self, entries: Vec<Entry>) -> Result<(), ConsensusError> {
        self.publish_lease();
        for entry in entries {
            let (index, term) = (entry.index, entry.term);
            self.log_bytes_since_snapshot += entry.data.len() as u64;
            self.applied_sizes
                .push_back((index, entry.data.len() as u64));
            if self.apply_before_commit() && index <= self.applied {
                continue; // applied early by the planted bug
            }
            assert!(
                index == self.applied + 1,
                "entry {index} applied after {}",
                self.applied
            );
            match entry.get_entry_type() {
                EntryType::EntryNormal if !entry.data.is_empty() => match decode_entry(&entry.data)
                {
                    Ok(proposals) => {
                        self.forget_applied(&proposals);
                        let fresh: Vec<Committed<'_>> = proposals
                            .iter()
                            .filter(|(id, _)| self.dedup.admit(*id))
                            .map(|(id, payload)| Committed {
                                origin: id.origin(),
                                payload,
                            })
                            .collect();
                        self.status
                            .proposals_applied
                            .fetch_add(fresh.len() as u64, Ordering::Relaxed);
                        if self.leader {
                            // ZooKeeper's commit_count: the leader's commits.
                            self.status
                                .commits
                                .fetch_add(fresh.len() as u64, Ordering::Relaxed);
                        }
                        self.machine
                            .apply(index, term, &fresh)
                            .map_err(|source| ConsensusError::Unapplicable { index, source })?;
                    }
                    Err(source @ ProposalError::EntryFormat(_)) => {
                        // Another release's entry format: refused, as a log
                        // of it is at start (`check_entries`).
                        return Err(ConsensusError::EntryFormat { index, source });
                    }
                    Err(error) => {
                        // Every replica decodes the same bytes the same way, so
                        // skipping keeps them equal; it is still a bug to see.
                        tracing::error!(index, %error, "committed entry does not decode; skipped");
                        self.machine.skip(index, term);
                    }
                },
                EntryType::EntryConfChangeV2 => self.apply_conf_entry(&entry),
                _ => self.machine.skip(index, term),
            }
            self.applied = index;
            self.status.applied_index.store(index, Ordering::Release);
        }
        Ok(())
    }

    /// The leader's answers to ReadIndex requests: the index each read
    /// must wait for. Answers to other nodes' or forgotten requests are
    /// ignored.
    fn note_read_states(&mut self, states: Vec<raft::ReadState>) {
        for state in states {
            let Some((node, id)) = parse_read_context(&state.request_ctx) else {
                continue;
            };
            if node != self.config.node_id {
                continue;
            }
            if let Some(round) = self.lease_round.filter(|round| round.id == id) {
                self.lease_round = None;
                self.extend_lease(round.asked_us, round.asked_term);
            }
            if let Some(read) = self.reads.get_mut(&id) {
                read.index.get_or_insert(state.index);
                let (asked_us, asked_term) = (read.asked_us, read.asked_term);
                self.extend_lease(asked_us, asked_term);
            }
        }
    }

    fn answer_reads(&mut self) {
        let ready: Vec<u64> = self
            .reads
            .iter()
            .filter(|(_, r)| r.index.is_some_and(|index| index <= self.applied))
            .map(|(id, _)| *id)
            .collect();
        for id in ready {
            let read = self.reads.remove(&id).expect("listed");
            self.machine.read_ready(read.context);
        }
    }

    fn retry_reads(&mut self) {
        let stale: Vec<u64> = self
            .reads
            .iter()
            .filter(|(_, r)| r.index.is_none() && r.asked_tick + READ_RETRY_TICKS <= self.ticks)
            .map(|(id, _)| *id)
            .collect();
        for id in stale {
            self.reads.get_mut(&id).expect("listed").asked_tick = self.ticks;
            self.ask_read(id);
        }
    }

    /// A planned stop: the leader hands leadership to the active voter
    /// with the most of its log (raft-rs's leader transfer: the target
    /// campaigns at once, no election timeout is waited out). Returns the
    /// target, or None (not a leader, or no other active voter).
    pub fn hand_off(&mut self) -> Option<u64> {
        if !self.leader {
            return None;
        }
        let me = self.config.node_id;
        let voters: Vec<u64> = self.raw.raft.prs().conf().voters().ids().iter().collect();
        let target = voters
            .into_iter()
            .filter(|id| *id != me)
            .filter_map(|id| {
                let progress = self.raw.raft.prs().get(id)?;
                progress.recent_active.then_some((progress.matched, id))
            })
            .max()
            .map(|(_, id)| id)?;
        tracing::info!(target, "handing leadership over before stopping");
        self.last_transfer_tick = self.ticks;
        self.transfer_leadership(target);
        Some(target)
    }

    /// Leader affinity (ZNBase's idea, done with raft-rs's leader transfer):
    /// a leader that is not the preferred member hands leadership over once
    /// the preferred one is active and has every entry. Elections are never
    /// delayed, so a dead preferred node costs nothing.
    fn maybe_transfer_to_preferred(&mut self) {
        let Some(preferred) = self.config.preferred_leader else {
            return;
        };
        #[cfg(feature = "testing")]
        if self.config.planted_bug == PlantedBug::NoLeaderTransfer {
            return;
        }
        if !self.leader
            || preferred == self.config.node_id
            || self.ticks < self.last_transfer_tick + ELECTION_TICKS as u64
            || !self.change_keeps_voter(preferred)
        {
            return;
        }
        let last_index = self.raw.raft.raft_log.last_index();
        let ready = self
            .raw
            .raft
            .prs()
            .get(preferred)
            .is_some_and(|p| p.recent_active && p.matched >= last_index);
        if ready {
            tracing::info!(preferred, "transferring leadership to the preferred member");
            self.last_transfer_tick = self.ticks;
            self.transfer_leadership(preferred);
        }
    }

    /// Drops this node's proposals that an applied batch carried (or that
    /// came before them: proposals of one origin apply in order).
    fn forget_applied(&mut self, proposals: &[(ProposalId, &[u8])]) {
        let own = proposals
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| id.origin() == self.config.node_id)
            .max();
        if let Some(newest) = own {
            while self.unapplied.front().is_some_and(|p| p.id <= newest) {
                self.unapplied.pop_front();
            }
        }
    }

    fn maybe_snapshot(&mut self) {
        // A new member needs a snapshot holding it (`KeelStorage::floors`).
        let wanted_at = self.raw.store().wanted_at.load(Ordering::Relaxed);
        let due = self.applied >= self.last_snapshot_index + self.config.snapshot_every_entries
            || self.log_bytes_since_snapshot >= self.config.snapshot_every_log_bytes
            || (wanted_at > self.last_snapshot_index && self.applied >= wanted_at);
        if !self.snapshot_running && due && self.applied > self.last_snapshot_index {
            self.snapshot_wanted = true;
        }
    }

    /// A snapshot to write, when one is due. The shell writes it (in the
    /// background, while applies go on) and calls `snapshot_done`.
    pub fn take_snapshot_job(&mut self) -> Option<crate::SnapshotJob> {
        if !std::mem::take(&mut self.snapshot_wanted) {
            return None;
        }
        let mut job = self.machine.snapshot_begin();
        // The file starts with consensus's envelope (the dedup table as of
        // this index), then the state machine's bytes.
        let mut head = Vec::with_capacity(64 + job.head.len());
        Envelope {
            dedup: self.dedup.clone(),
            configuration: Some(Configuration {
                conf_state: self.raw.raft.prs().conf().to_conf_state(),
                membership: self.reconfig.membership.clone(),
            }),
        }
        .encode(&mut head);
        head.extend_from_slice(&job.head);
        job.head = head;
        self.log_bytes_since_snapshot = 0;
        assert_eq!(
            job.index, self.applied,
            "state machine and driver disagree on the applied index"
        );
        self.snapshot_running = true;
        Some(job)
    }

    pub fn snapshot_running(&self) -> bool {
        self.snapshot_running
    }

    pub fn snapshot_done(&mut self, index: u64, result: Result<(), crate::MachineError>, ms: u64) {
        assert!(self.snapshot_running, "no snapshot was running");
        self.snapshot_running = false;
        self.machine.snapshot_end();
        self.status.snapshot_last_ms.store(ms, Ordering::Relaxed);
        self.status.snapshot_max_ms.fetch_max(ms, Ordering::Relaxed);
        if let Err(error) = result {
            tracing::error!(index, %error, "snapshot failed; log kept");
            return;
        }
        self.last_snapshot_index = index;
        self.status.snapshots_taken.fetch_add(1, Ordering::Relaxed);
        self.status.snapshot_index.store(index, Ordering::Release);
        let oldest = self.io.oldest_snapshot_index();
        let oldest_kept = oldest.unwrap_or(0).min(index);
        let compact_index = self.log_start_behind(oldest_kept);
        if compact_index > 1 {
            if let Err(error) = self.io.compact_to(compact_index) {
                tracing::error!(%error, "log compaction failed");
            }
        }
        let memory_index = self.log_start_behind(index);
        if memory_index > 1 {
            let _ = self.raw.mut_store().wl().compact(memory_index);
        }
        assert!(
            compact_index <= memory_index,
            "the disk log would start at {compact_index}, after the in-memory log's {memory_index}"
        );
        // The sizes the next compaction of the disk log needs; if the
        // snapshots could not be listed (the disk log is not compacted
        // then), those the in-memory log needs, so the record stays bounded.
        let sizes_from = if oldest.is_some() {
            compact_index
        } else {
            memory_index
        };
        while self
            .applied_sizes
            .front()
            .is_some_and(|(i, _)| *i < sizes_from)
        {
            self.applied_sizes.pop_front();
        }
    }

    /// Where a log may start behind the snapshot at `snapshot_index`:
    /// `log_kept_behind_snapshot` entries behind it, fewer if they hold more
    /// than `log_kept_behind_snapshot_bytes` (entries whose size is not
    /// known, applied before a restart's snapshot, count as none).
    fn log_start_behind(&self, snapshot_index: u64) -> u64 {
        let mut start = snapshot_index.saturating_sub(self.config.log_kept_behind_snapshot);
        let mut kept_bytes = 0u64;
        for (index, bytes) in self.applied_sizes.iter().rev() {
            if *index > snapshot_index {
                continue;
            }
            if *index <= start {
                break;
            }
            kept_bytes += bytes;
            if kept_bytes > self.config.log_kept_behind_snapshot_bytes {
                start = *index;
                break;
            }
        }
        assert!(
            start <= snapshot_index.max(1),
            "a log would start after its snapshot"
        );
        start
    }
}

/// The batch to send after a leader change: this node's proposals not
/// applied yet (`unapplied`, oldest first: it holds every one of them,
/// also those still `queued`), then the other nodes' proposals that were
/// queued here. The dedup table applies an origin's proposals only in
/// increasing order, so one of ours queued ahead of an older resent one
/// would make the older count as applied: it would never be, and its
/// client would wait for a reply forever.
fn resend_order(
    node_id: u64,
    unapplied: &VecDeque<Proposal>,
    queued: Vec<Proposal>,
) -> Vec<Proposal> {
    let mut batch: Vec<Proposal> = unapplied.iter().cloned().collect();
    batch.extend(queued.into_iter().filter(|p| p.id.origin() != node_id));
    batch
}

fn parse_read_context(rctx: &[u8]) -> Option<(u64, u64)> {
    if rctx.len() != READ_CONTEXT_HEADER_BYTES {
        return None;
    }
    let node = u64::from_be_bytes(rctx[..8].try_into().ok()?);
    let id = u64::from_be_bytes(rctx[8..].try_into().ok()?);
    Some((node, id))
}

/// An append that carries no entries: the leader telling a follower how
/// far it has committed.
pub(crate) fn is_commit_notice(message: &Message) -> bool {
    message.get_msg_type() == raft::eraftpb::MessageType::MsgAppend
        && message.get_entries().is_empty()
}

/// Splits a Ready's messages into commit notices and the rest.
fn split_commit_notices(messages: Vec<Message>) -> (Vec<Message>, Vec<Message>) {
    messages.into_iter().partition(is_commit_notice)
}

#[cfg(test)]
mod resend_tests {
    use super::*;
    use crate::proposal::{Dedup, ProposalId};

    fn proposal(origin: u64, sequence: u64) -> Proposal {
        Proposal {
            id: ProposalId::new(origin, sequence),
            payload: vec![sequence as u8],
        }
    }

    #[test]
    fn a_resend_keeps_this_nodes_proposals_in_order_and_once() {
        // Sequences 10 and 11 went to the old leader and were lost; 12 was
        // proposed here when the new leader appeared and is still queued,
        // beside a proposal node 2 forwarded.
        let unapplied: VecDeque<Proposal> = [10, 11, 12].map(|s| proposal(1, s)).into();
        let queued = vec![proposal(1, 12), proposal(2, 7)];
        let batch = resend_order(1, &unapplied, queued);
        let ids: Vec<(u64, u64)> = batch
            .iter()
            .map(|p| (p.id.origin(), p.id.sequence()))
            .collect();
        assert_eq!(ids, vec![(1, 10), (1, 11), (1, 12), (2, 7)]);
        // Applied in this order, every one of them gets through the dedup;
        // the order before the fix (12 first) lost 10 and 11 for good.
        let mut dedup = Dedup::default();
        assert!(batch.iter().all(|p| dedup.admit(p.id)));
        let mut dedup = Dedup::default();
        let old_order = [12, 10, 11, 12].map(|s| proposal(1, s));
        let admitted: Vec<bool> = old_order.iter().map(|p| dedup.admit(p.id)).collect();
        assert_eq!(admitted, vec![true, false, false, false]);
    }
}
