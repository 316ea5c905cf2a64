//! One simulated run: N nodes built from the server's crates (keel-tree's
//! DataTree, keel-session's tracker, keel-consensus's Raft core), clients,
//! a network and disks, all driven by one event queue on a logical clock.
//! No threads, no wall clock, no OS randomness: the seed decides
//! everything, so a run replays byte for byte.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use keel_consensus::core::{
    log_covered, storage_from, Core, CoreConfig, Durable, Outbound, PlantedBug,
};
use keel_consensus::transport::PeerInput;
use keel_consensus::{Change, Member, Membership, RaftStatus, Role};
use keel_jute::{opcode, ErrorCode, Request, SetWatches};
use keel_linearize::{Call, Operation, Ret};
use keel_server::fifo::{Completed, Lane, RequestFifo, Stash, PENDING_REQUESTS_MAX};
use keel_server::kv::barrier::ReadBarrier;
use keel_server::kv::engine::{Outbound as KvOutbound, Responder};
use keel_server::kv::KvEngine;
use keel_server::node::{
    add_auth, AuthAnswer, CloseReason, Outbound as ToClient, Route, SyncContext, SESSION_SECRET,
};
use keel_server::reaper::Reaper;
use keel_tree::watch::WatchKind;
use keel_tree::{owner_kind, Event, OwnerKind, Txn, TxnOp};
use raft::eraftpb::{ConfState, MessageType};

use crate::disk::{verify_snapshot, Loaded, SharedDisk, SimIo, SimSnapshots};
use crate::kv::{
    KvCall, KvOperation, KvRet, ScanIteration, COUNTER_KEYS, HASH_FIELDS, HASH_KEYS, REGISTER_KEYS,
    SET_KEYS, SET_MEMBERS, SPAN_KEYS, WATCH_KEYS,
};
use crate::machine::{
    fnv, kv_digest, new_machine, state_digest, Outbox, SimMachine, SimOutlet, FNV_OFFSET,
};
use crate::rng::Rng;
use crate::workload::{self, AclCall, ReapCall, Step};
use keel_consensus::snapfile::SnapshotRefused;

/// Raft tick of every node (ms), as the server's default.
pub const TICK_MS: u64 = 100;
/// Session timeout the simulated clients ask for (ms).
pub const SESSION_TIMEOUT_MS: u32 = 3_000;
/// A client gives up on a request after this long and moves on (ms).
pub const OP_TIMEOUT_MS: u64 = 4_000;
/// After the faulty part of a run: healed, everyone up, no new requests.
pub const SETTLE_MS: u64 = 8_000;
/// After the settle, events go on up to this long while the serving
/// replicas have not applied the same index (a last entry in flight).
pub const CONVERGENCE_GRACE_MS: u64 = 1_000;
/// Events a client remembers to recognise a repeat (see `watch_event`).
pub const RECENT_EVENTS_KEPT: usize = 64;
/// Chance (per million wakes) that a client pipelines a burst of requests.
pub const PIPELINE_BURST_PER_MILLION: u64 = 250_000;
/// Most requests in one pipelined burst.
pub const PIPELINE_BURST_MAX: u64 = 5;
/// The client id history entries of expiries carry.
pub const SYSTEM_CLIENT: u64 = u64::MAX;
/// Bound on events per run: a run that exceeds it is reported, not hung.
pub const EVENTS_PER_RUN_MAX: u64 = 5_000_000;
/// Entries the simulated nodes keep behind a snapshot: few, so followers
/// that were down fall behind the log and need a snapshot install.
pub const SIM_LOG_KEPT_BEHIND_SNAPSHOT: u64 = 20;
/// At most this many bytes of them: a few of the larger entries (group
/// commits, multis), so the byte bound decides in some runs.
pub const SIM_LOG_KEPT_BEHIND_SNAPSHOT_BYTES: u64 = 4 * 1024;
/// Log bytes between snapshots: the byte trigger fires in some runs.
const SIM_SNAPSHOT_EVERY_LOG_BYTES: u64 = 48 * 1024;
/// Entries between snapshots.
pub const SIM_SNAPSHOT_EVERY_ENTRIES: u64 = 40;
/// Chance (per million crashes) that the crash leaves the newest snapshot
/// corrupt (when the restart can fall back to the previous one).
pub const SNAPSHOT_CORRUPTION_PER_MILLION: u64 = 200_000;
/// The reaper's pass interval is drawn per run from this range (ms).
pub const SIM_REAP_INTERVAL_MIN_MS: u64 = 200;
pub const SIM_REAP_INTERVAL_MAX_MS: u64 = 500;
/// After the settle, no container or TTL node may have been due for
/// longer than this (ms): a few passes, plus the reaper's resend of a
/// deletion lost with a leader change.
pub const REAP_LATE_AFTER_MS: u64 =
    keel_server::reaper::REAP_RESEND_AFTER_MS + 4 * SIM_REAP_INTERVAL_MAX_MS;
const _: () = assert!(REAP_LATE_AFTER_MS < SETTLE_MS);
/// Chance (per million truncations of a snapshot with a keyspace part)
/// that the cut falls exactly at the end of the tree's part.
pub const TREE_END_CUT_PER_MILLION: u64 = 250_000;
/// Chance (per million bit flips in a snapshot with a keyspace part) that
/// the flip hits the low bit of the tree's format version, the one field
/// no checksum covers: 5 ("a part follows") then reads as 4.
pub const TREE_VERSION_FLIP_PER_MILLION: u64 = 250_000;
/// Runs in which an operator removes a member and adds it back.
pub const MEMBERSHIP_FAULT_PER_MILLION: u64 = 300_000;
/// Times the operator asks to add a removed member back (a second apart).
pub const MEMBERSHIP_ATTEMPTS_MAX: u32 = 30;
/// Runs in which a brand-new node (id `nodes + 1`, empty disk) joins: it
/// starts knowing no member, as `keel server --join` does, and an
/// operator asks to add it until it is a member.
pub const JOIN_RUN_PER_MILLION: u64 = 150_000;
/// ... as an observer (else as a voter).
pub const JOINER_OBSERVER_PER_MILLION: u64 = 250_000;
/// ... that replaces a starting member of its role in the same change
/// (joining and leaving in one reconfig: a joint configuration).
pub const JOINER_REPLACES_PER_MILLION: u64 = 400_000;
/// ... that crashes a while after it starts (often while it installs
/// its first snapshot), half of those in a log write.
pub const JOINER_CRASH_PER_MILLION: u64 = 500_000;
/// The reply routing of the operator's reconfigs: a session no node has.
const OPERATOR_CONTEXT: [u8; 12] = [0; 12];
/// Runs with Keel KV clients (1 or 2 of them).
pub const KV_RUN_PER_MILLION: u64 = 500_000;
/// A KV client's pause between a reply and its next request (µs).
pub const KV_THINK_MIN_US: u64 = 100_000;
pub const KV_THINK_MAX_US: u64 = 500_000;
/// A KV client moves to another node (or the same) before a request.
pub const KV_MOVE_PER_MILLION: u64 = 250_000;
/// KV runs whose clients also write and read the SPAN_KEYS (keys of both
/// shards) all together, and their share of such a run's requests. Drawn
/// from generators of their own, so the runs without them stay what they
/// were.
pub const KV_SPAN_RUN_PER_MILLION: u64 = 500_000;
pub const KV_SPAN_REQUEST_PER_MILLION: u64 = 250_000;
const KV_SPAN_SALT: u64 = 0x7370_616e;
/// KV runs whose clients also make keys expire (SET PX, PEXPIRE, PERSIST
/// on the REGISTER_KEYS; the leaders run the server's expiry step every
/// tick), and their share of such a run's requests. Drawn from
/// generators of their own, as the spans are.
pub const KV_EXPIRY_RUN_PER_MILLION: u64 = 500_000;
pub const KV_EXPIRY_REQUEST_PER_MILLION: u64 = 300_000;
const KV_EXPIRY_SALT: u64 = 0x7474_6c73;
/// KV runs whose clients also run WATCH transactions (CAS) on the
/// WATCH_KEYS, and their share of such a run's requests (own generators).
pub const KV_WATCH_RUN_PER_MILLION: u64 = 500_000;
pub const KV_WATCH_REQUEST_PER_MILLION: u64 = 300_000;
const KV_WATCH_SALT: u64 = 0x7761_7463;
/// KV runs whose clients also write and read a hash and a set
/// (HASH_KEYS, SET_KEYS), and their share of such a run's requests
/// (own generators).
pub const KV_TYPES_RUN_PER_MILLION: u64 = 500_000;
pub const KV_TYPES_REQUEST_PER_MILLION: u64 = 500_000;
const KV_TYPES_SALT: u64 = 0x7479_7065;
/// KV runs whose clients also SCAN the keyspace, and the share of such a
/// run's requests that start an iteration (own generators): SCAN calls
/// with a small COUNT, each from the cursor the last one returned, until
/// one returns cursor 0.
pub const KV_SCAN_RUN_PER_MILLION: u64 = 500_000;
pub const KV_SCAN_REQUEST_PER_MILLION: u64 = 100_000;
const KV_SCAN_SALT: u64 = 0x7363_616e;
/// The share of a KV client's one-command writes proposed as a COMMANDS
/// batch (`keel_kv::op`), as a connection proposes what it pipelined: the
/// write, then 1 to `KV_BATCH_GHOSTS_MAX` ghost commands numbered after
/// it (`kv_ghost`: writes of the client's `ghost:` keys, which never
/// exist, so each changes nothing and answers 0; a DEL of two of them may
/// span shards), drawn from a generator of their own, so the other draws
/// stay as they were.
pub const KV_BATCH_WRITE_PER_MILLION: u64 = 250_000;
/// The most ghosts behind a batched write: a batch as full as a
/// connection makes one.
pub const KV_BATCH_GHOSTS_MAX: u64 = keel_kv::op::PIPELINE_COMMANDS_MAX as u64 - 1;
const KV_BATCH_SALT: u64 = 0x6261_7463;
/// SCAN's COUNT in those iterations: small, so one takes several calls
/// and the cursor crosses shards and nodes.
pub const KV_SCAN_COUNT_MIN: u64 = 1;
pub const KV_SCAN_COUNT_MAX: u64 = 4;
/// The most calls an iteration may take (every client key visited one
/// call at a time, with room for keys written meanwhile); more means a
/// cursor that does not move on.
pub const KV_SCAN_CALLS_MAX: u64 = 4 * 16;
const _: () = assert!(KV_SCAN_CALLS_MAX > 2 * 15);
/// A client's pause between a SCAN call's reply and the next call (µs).
pub const KV_SCAN_THINK_MAX_US: u64 = 50_000;
/// One in this many of those requests is a FLUSHDB instead (every key of
/// every shard gone at one log position).
pub const KV_FLUSH_ONE_IN: u64 = 30;
/// A CAS's pause between its GET's reply and its EXEC (µs): the client
/// computes the new value; other clients' writes land meanwhile.
pub const KV_CAS_THINK_MAX_US: u64 = 400_000;
/// The expiries the clients ask (ms): from under a client's pause to
/// several of them.
pub const KV_EXPIRY_MIN_MS: u64 = 20;
pub const KV_EXPIRY_MAX_MS: u64 = 1_500;
/// After the settle, no key may still be held this long (ms) past its
/// deadline: a few expiry steps, plus the resend of a proposal lost in a
/// leader change.
pub const KV_EXPIRE_LATE_AFTER_MS: u64 = keel_server::kv::EXPIRE_RESEND_AFTER_MS + 4 * 200;
const _: () = assert!(KV_EXPIRE_LATE_AFTER_MS < SETTLE_MS);

/// The members a simulated cluster starts with (addresses are names: the
/// simulator routes by id).
fn bootstrap_membership(voters: &[u64], learners: &[u64]) -> Membership {
    let mut peers: Vec<(u64, String)> = voters
        .iter()
        .chain(learners)
        .map(|id| (*id, format!("sim-n{id}:2888")))
        .collect();
    peers.sort_unstable();
    keel_consensus::core::bootstrap_membership(&peers, learners, &BTreeMap::new())
}

/// A snapshot refused at the handshake (the receiver does not know the
/// sender yet) is offered again this often, as the server's transport
/// connects again (`HANDSHAKE_RETRY_MS`), ...
pub const HANDSHAKE_RETRY_US: u64 = 1_000_000;
/// ... this many times.
pub const SNAPSHOT_HELD_MAX: u32 = 10;

/// Salts the seed of the joiner's own generator ("join").
const JOIN_SALT: u64 = 0x6a6f_696e;

/// A node that joins the running cluster (`Options::joiner`).
#[derive(Debug, Clone)]
pub struct Joiner {
    /// Voter or observer, as the operator adds it.
    pub role: Role,
    /// When it starts and asks to be added (ms into the run).
    pub at_ms: u64,
    /// A crash this long after its start, with its restart delay and
    /// whether it dies in a log write (a snapshot install persists too).
    pub crash: Option<(u64, u64, bool)>,
    /// The same reconfig removes a starting member of the joiner's role
    /// (the highest id that is not the preferred leader), as an operator
    /// replaces a machine; the removed node is stopped after the settle.
    pub replaces: bool,
}

impl Joiner {
    /// Drawn from a generator of its own: a seed's other draws stay what
    /// they were.
    fn for_seed(seed: u64, duration_ms: u64) -> Option<Joiner> {
        let mut rng = Rng::new(seed ^ JOIN_SALT);
        rng.chance(JOIN_RUN_PER_MILLION)
            .then(|| Joiner::draw(&mut rng, duration_ms))
    }

    /// A joiner for every run (`SIM_JOIN=1` on a batch soaks joins).
    pub fn always(seed: u64, duration_ms: u64) -> Joiner {
        Joiner::draw(&mut Rng::new(seed ^ JOIN_SALT ^ 1), duration_ms)
    }

    fn draw(rng: &mut Rng, duration_ms: u64) -> Joiner {
        let role = if rng.chance(JOINER_OBSERVER_PER_MILLION) {
            Role::Observer
        } else {
            Role::Voter
        };
        let at_ms = rng.between(500, duration_ms / 2);
        let crash = rng.chance(JOINER_CRASH_PER_MILLION).then(|| {
            (
                rng.between(50, 2_000),
                rng.between(200, 3_000),
                rng.chance(500_000),
            )
        });
        let replaces = rng.chance(JOINER_REPLACES_PER_MILLION);
        Joiner {
            role,
            at_ms,
            crash,
            replaces,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    pub seed: u64,
    /// Members at the start, voters and observers: ids 1..=nodes.
    pub nodes: usize,
    /// A brand-new node, id `nodes + 1`, that joins during the run.
    pub joiner: Option<Joiner>,
    /// Ids of observers (raft learners: replicate, serve, forward writes,
    /// never vote or lead).
    pub observers: Vec<u64>,
    /// Leader affinity: the member that should lead when healthy.
    pub preferred_leader: Option<u64>,
    /// A planted configuration bug: observers are made voters (as if the
    /// member list forgot to leave them out). The observer check must see
    /// one lead.
    pub observers_vote: bool,
    pub clients: usize,
    /// Length of the part of the run with requests and faults (ms).
    pub duration_ms: u64,
    pub faults: bool,
    pub planted_bug: PlantedBug,
    /// A planted bug in the node's connection shell: reads skip the
    /// session's request queue (`keel_server::fifo`) and may overtake the
    /// writes in flight before them. The session-order check must see it.
    pub reads_skip_queue: bool,
    /// A planted bug in the tree's watch manager: persistent-recursive
    /// watches never fire for descendants. The watch checks must see it.
    pub recursive_watches_blind: bool,
    /// A planted bug in the tree's ACL check: every check passes. The ACL
    /// check of the clients must see a request allowed that is not.
    pub acl_blind: bool,
    /// A planted bug in the reaper (`keel_tree::planted::set_reap_early`):
    /// childless TTL nodes go whatever their age, containers that never
    /// had a child go too. The reaper checks must see it.
    pub reap_early: bool,
    /// A planted bug in the reaper (`keel_tree::planted::set_reap_late`):
    /// TTLs read as seconds, no container ever empty. The check after the
    /// settle must see nodes left that are due.
    pub reap_late: bool,
    /// A planted bug in the tree's snapshot writer
    /// (`keel_tree::planted::set_snapshot_torn`): nodes changed while a
    /// snapshot is written are written as they are now, not as they were
    /// at its position. The check of every snapshot written must see it.
    pub snapshot_torn: bool,
    /// Keel KV clients (none in most runs): SET, INCR, DEL and GET on a
    /// few keys, through the log and ReadIndex barriers (crate::kv).
    pub kv_clients: usize,
    /// A planted bug in the KV clients' node side: reads skip the
    /// ReadIndex barrier and read the node's shards at once (a follower
    /// or a deposed leader answers stale). The KV linearizability check
    /// must see it.
    pub kv_reads_skip_barrier: bool,
    /// A planted bug in the keyspace's snapshot part
    /// (`keel_kv::planted::set_snapshot_keys_dropped`): it holds no keys.
    /// The snapshot, digest and lost-write checks must see it.
    pub kv_snapshot_keys_dropped: bool,
    /// The KV clients also send MSET, MULTI/EXEC and MGET of the
    /// SPAN_KEYS (`crate::kv`): writes and reads spanning shards.
    pub kv_spans: bool,
    /// A planted bug in COMMANDS batches
    /// (`keel_kv::planted::set_batch_seq_shifted`): their replies go to
    /// the request after their own. The client must see a reply to a
    /// request not in flight.
    pub kv_batch_seq_shifted: bool,
    /// A planted bug in EXEC (`keel_kv::planted::set_exec_partial`): a
    /// transaction's last command is answered but not applied. The KV
    /// checks must see a spanning write applied in part.
    pub kv_exec_partial: bool,
    /// The KV clients also make keys expire (`KV_EXPIRY_RUN_PER_MILLION`).
    pub kv_expiry: bool,
    /// A planted bug in SET's EX/PX (`keel_kv::planted::set_expire_early`):
    /// the deadline is half as far as asked. The KV linearizability check
    /// must see keys gone too soon.
    pub kv_expire_early: bool,
    /// A planted bug in TTL and PTTL
    /// (`keel_kv::planted::set_ttl_from_log_clock`): they count down from
    /// the log's clock, not the node's. The KV linearizability check must
    /// see a PTTL that shows more time left than the deadline allows.
    pub kv_ttl_from_log_clock: bool,
    /// The KV clients also run WATCH transactions (`KV_WATCH_RUN_PER_MILLION`).
    pub kv_watch: bool,
    /// A planted bug in EXEC (`keel_kv::planted::set_watch_blind`): a
    /// watched key's changes never abort it. The KV linearizability check
    /// must see a CAS succeed on a value that changed.
    pub kv_watch_blind: bool,
    /// The KV clients also use a hash and a set (`KV_TYPES_RUN_PER_MILLION`).
    pub kv_types: bool,
    /// The KV clients also SCAN the keyspace (`KV_SCAN_RUN_PER_MILLION`).
    pub kv_scan: bool,
    /// A planted bug in SCAN (`keel_kv::planted::set_scan_skips`): a call
    /// resumes one position past its cursor. The SCAN check must see an
    /// iteration miss a key that was there all along.
    pub kv_scan_skips: bool,
    /// A planted bug in HDEL and SREM (`keel_kv::planted::set_empty_kept`):
    /// an emptied hash or set stays as an empty key. The KV
    /// linearizability check must see the key's type outlive it.
    pub kv_empty_kept: bool,
    /// The reaper's pass interval on every node (the server's
    /// `container_check_interval_ms`), in logical ms.
    pub container_check_interval_ms: u64,
    /// Keep the readable trace (the fingerprint is always computed).
    pub trace: bool,
}

impl Options {
    /// The batch's options for a seed: 3 or 5 voters, an observer in 30%
    /// of runs, a preferred leader in 30%, 3 to 6 clients.
    pub fn for_seed(seed: u64) -> Options {
        let mut rng = Rng::new(seed ^ 0xa5a5);
        let voters = if rng.chance(300_000) { 5 } else { 3 };
        let clients = rng.between(3, 6) as usize;
        let observer = rng.chance(300_000);
        let nodes = voters + usize::from(observer);
        let preferred_leader = rng.chance(300_000).then(|| rng.between(1, voters as u64));
        let container_check_interval_ms =
            rng.between(SIM_REAP_INTERVAL_MIN_MS, SIM_REAP_INTERVAL_MAX_MS);
        let kv_clients = if rng.chance(KV_RUN_PER_MILLION) {
            rng.between(1, 2) as usize
        } else {
            0
        };
        let duration_ms = 12_000;
        Options {
            seed,
            nodes,
            joiner: Joiner::for_seed(seed, duration_ms),
            observers: if observer {
                vec![nodes as u64]
            } else {
                Vec::new()
            },
            preferred_leader,
            observers_vote: false,
            clients,
            duration_ms,
            faults: true,
            planted_bug: PlantedBug::None,
            reads_skip_queue: false,
            recursive_watches_blind: false,
            acl_blind: false,
            reap_early: false,
            reap_late: false,
            snapshot_torn: false,
            kv_clients,
            kv_reads_skip_barrier: false,
            kv_snapshot_keys_dropped: false,
            kv_spans: kv_clients > 0
                && Rng::new(seed ^ KV_SPAN_SALT).chance(KV_SPAN_RUN_PER_MILLION),
            kv_exec_partial: false,
            kv_batch_seq_shifted: false,
            kv_expiry: kv_clients > 0
                && Rng::new(seed ^ KV_EXPIRY_SALT).chance(KV_EXPIRY_RUN_PER_MILLION),
            kv_expire_early: false,
            kv_ttl_from_log_clock: false,
            kv_watch: kv_clients > 0
                && Rng::new(seed ^ KV_WATCH_SALT).chance(KV_WATCH_RUN_PER_MILLION),
            kv_watch_blind: false,
            kv_types: kv_clients > 0
                && Rng::new(seed ^ KV_TYPES_SALT).chance(KV_TYPES_RUN_PER_MILLION),
            kv_empty_kept: false,
            kv_scan: kv_clients > 0
                && Rng::new(seed ^ KV_SCAN_SALT).chance(KV_SCAN_RUN_PER_MILLION),
            kv_scan_skips: false,
            container_check_interval_ms,
            trace: false,
        }
    }
}

#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub events: u64,
    pub operations: usize,
    pub acknowledged_writes: usize,
    pub unknown_outcomes: usize,
    pub crashes: u64,
    pub torn_writes: u64,
    pub partitions: u64,
    pub messages: u64,
    pub dropped: u64,
    pub duplicated: u64,
    pub max_term: u64,
    pub snapshots_written: u64,
    /// Newest snapshots corrupted at a crash (each refused at the restart).
    pub snapshots_corrupted: u64,
    pub watch_events: u64,
    pub sessions_expired: u64,
    /// Wakes in which a client sent several requests without waiting.
    pub pipelined_bursts: u64,
    /// addWatch requests (persistent and persistent-recursive).
    pub persistent_watches_added: u64,
    /// Requests under ACL_ROOT (checked against the client's identity).
    pub acl_requests: u64,
    /// Requests under REAP_ROOT (containers, TTL nodes, their children).
    pub reap_requests: u64,
    /// Deletions by the reaper that applied (each once, not per replica).
    pub reaped_containers: u64,
    pub reaped_ttl_nodes: u64,
    /// Runs whose linearizability search ran out of budget (undecided).
    pub linearizability_undecided: u64,
    /// Members removed by an operator's reconfig (and added back).
    pub membership_changes: u64,
    /// Brand-new nodes started to join (`Options::joiner`), and those a
    /// leader's snapshot reached (the convergence check then holds them
    /// to the others' state).
    pub joins: u64,
    pub joined: u64,
    /// Keel KV requests (with the final reads), writes acknowledged, and
    /// requests whose outcome stayed unknown.
    pub kv_operations: usize,
    pub kv_acknowledged_writes: usize,
    pub kv_unknown_outcomes: usize,
    /// KV requests spanning shards (MSET, EXEC, MGET of the SPAN_KEYS).
    pub kv_spanning_requests: usize,
    /// KV requests that set or remove a deadline (SET PX, PEXPIRE,
    /// PERSIST), and the leaders' expiry proposals.
    pub kv_expiry_requests: usize,
    pub kv_expiry_proposals: u64,
    /// WATCH transactions' EXECs sent (CAS on the WATCH_KEYS), and those
    /// answered committed and aborted.
    pub kv_cas_requests: usize,
    pub kv_cas_committed: usize,
    pub kv_cas_aborted: usize,
    /// Requests on the hash and the set (HSET, HDEL, HGET, HLEN, SADD,
    /// SREM, SISMEMBER, SCARD, and GET, SET, DEL of them).
    pub kv_typed_requests: usize,
    /// FLUSHDBs sent.
    pub kv_flushes: usize,
    /// One-command writes proposed as a COMMANDS batch behind ghost
    /// commands (`KV_BATCH_WRITE_PER_MILLION`), and those ghosts.
    pub kv_batched_writes: usize,
    pub kv_ghost_commands: usize,
    /// SCAN calls answered, and SCAN iterations finished (cursor 0).
    pub kv_scan_calls: usize,
    pub kv_scans: usize,
    /// Keys whose KV linearizability search ran out of budget.
    pub kv_linearizability_undecided: u64,
    /// Reads leaders served from their read lease (KV reads, syncs).
    pub lease_reads: u64,
}

#[derive(Debug, Clone)]
pub struct Report {
    pub seed: u64,
    pub failures: Vec<String>,
    pub stats: Stats,
    /// FNV of the trace and the final state: equal for equal runs.
    pub fingerprint: u64,
    pub trace: Vec<String>,
    pub history: Vec<Operation>,
    pub kv_history: Vec<KvOperation>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.failures.is_empty()
    }
}

enum Ev {
    Deliver {
        from: u64,
        to: u64,
        epoch: u64,
        input: PeerInput,
        /// Times a snapshot was held back at a refused handshake.
        held: u32,
    },
    Tick {
        node: u64,
        epoch: u64,
    },
    Advance {
        node: u64,
        epoch: u64,
    },
    /// The snapshot writer of `node` writes its next part.
    SnapshotChunk {
        node: u64,
        epoch: u64,
    },
    /// The reaper of `node` makes a pass (`Reaper::pass`).
    Reap {
        node: u64,
        epoch: u64,
    },
    ClientWake {
        client: usize,
        generation: u64,
    },
    ClientTimeout {
        client: usize,
        generation: u64,
        xid: i32,
    },
    ToClient {
        client: usize,
        generation: u64,
        out: ToClient,
    },
    /// A read's reply reaches the client (behind everything queued for
    /// it before: the connection is a FIFO).
    ReadDone {
        client: usize,
        generation: u64,
        xid: i32,
        zxid: i64,
        /// False for a SessionExpired answer: it shows the client no state
        /// (the node's read of a session whose close it applied).
        shows_state: bool,
        watches: Vec<(String, WatchKind)>,
        recorded: Option<(usize, Ret)>,
    },
    Crash {
        node: u64,
        restart_after_ms: u64,
        mid_write: bool,
    },
    Restart {
        node: u64,
    },
    Partition {
        isolated: Vec<u64>,
        heal_after_ms: u64,
    },
    Heal,
    /// An operator removes `node` from the configuration...
    RemoveMember {
        node: u64,
        back_after_ms: u64,
    },
    /// ... and adds it back (asked again until it is a member).
    AddMember {
        node: u64,
        attempt: u32,
    },
    /// The brand-new node starts and an operator asks to add it.
    Join,
    EndFaults,
    /// A KV client sends its next request.
    KvWake {
        client: usize,
    },
    /// A KV client gives up waiting for request `seq` of its connection
    /// number `generation`.
    KvTimeout {
        client: usize,
        generation: u64,
        seq: u64,
    },
    /// A KV client that read its CAS's key on connection `generation`
    /// sends the EXEC.
    KvCasExec {
        client: usize,
        generation: u64,
    },
    /// A KV client in a SCAN iteration on connection `generation` sends
    /// its next call, from `cursor`.
    KvScanNext {
        client: usize,
        generation: u64,
        cursor: u64,
    },
}

type SimCore = Core<SimMachine, SimIo, SimSnapshots>;

struct Node {
    id: u64,
    epoch: u64,
    core: Option<SimCore>,
    disk: SharedDisk,
    fsync_ms: u64,
    tick_ms: u64,
    advance_scheduled: bool,
    busy_until_us: u64,
    next_session: i64,
    /// What the node sent to client connections, not yet routed.
    outbox: Outbox,
    /// The snapshot being written, part by part.
    snapshot: Option<Writing>,
    /// The server's reaper state: what this node proposed while leading.
    reaper: Reaper,
    /// The snapshot corrupted at the last crash, which the restart must
    /// refuse.
    corrupted: Option<u64>,
    /// The keyspace engine of the live epoch (the server's, inline).
    kv: Option<Arc<KvEngine>>,
    /// The last ReadIndex barrier number KV reads asked on this epoch.
    kv_barrier: u64,
    /// The epoch's `RaftStatus::lease_reads` already added to the stats
    /// (read, not reset: the core renews its lease from that counter).
    lease_reads_counted: u64,
}

impl Node {
    /// A node not started yet, with an empty disk.
    fn new(id: u64, rng: &mut Rng) -> Node {
        Node {
            id,
            epoch: 0,
            core: None,
            disk: SharedDisk::default(),
            fsync_ms: rng.between(1, 6),
            tick_ms: TICK_MS - 5 + rng.below(11),
            advance_scheduled: false,
            busy_until_us: 0,
            next_session: 0,
            outbox: Outbox::default(),
            snapshot: None,
            reaper: Reaper::default(),
            corrupted: None,
            kv: None,
            kv_barrier: 0,
            lease_reads_counted: 0,
        }
    }
}

/// A Keel KV client: one connection at a time, one request at a time.
struct KvClient {
    conn: Option<KvConn>,
    pending: Option<KvPending>,
    /// Requests sent (their values are unique: `kv<client>-<n>`).
    sent: u64,
    /// Connections opened (the current one's number).
    connections: u64,
    /// A CAS under way: WATCH answered, its GET or EXEC in flight.
    cas: Option<Cas>,
    /// The key this client last gave a deadline (SET PX, PEXPIRE): what
    /// its PTTL and PEXPIRETIME read, while the deadline may still hold.
    deadline_key: Option<String>,
    /// A SCAN iteration under way.
    scan: Option<ScanState>,
}

/// A KV client's SCAN iteration so far.
struct ScanState {
    /// When its first call was sent (µs).
    invoke: u64,
    count: u64,
    calls: u64,
    keys: BTreeSet<String>,
}

/// A KV client's CAS (WATCH key, GET key, MULTI, SET key, EXEC).
struct Cas {
    key: String,
    watch_seq: u64,
    watches: Vec<keel_kv::op::Watch>,
    /// What its GET read (once answered).
    expect: Option<Option<Vec<u8>>>,
}

/// A KV connection to one node's epoch, as the server's engine holds it.
/// The ghost commands' forms (`kv_ghost`).
const KV_GHOST_FORMS: u64 = 6;

/// A write on client `client`'s `ghost:` keys, which never exist: it
/// changes nothing and answers 0 (form `form` of `KV_GHOST_FORMS`).
fn kv_ghost(client: usize, form: u64) -> Vec<Vec<u8>> {
    let key = format!("ghost:kv{client}");
    let words: Vec<String> = match form {
        0 => vec!["DEL".into(), key],
        1 => vec!["HDEL".into(), key, "f".into()],
        2 => vec!["SREM".into(), key, "m".into()],
        3 => vec!["PERSIST".into(), key],
        4 => vec!["PEXPIRE".into(), key, "1000".into()],
        // Two keys, often on two shards: the borrow inside a batch.
        _ => vec!["DEL".into(), format!("{key}:a"), format!("{key}:b")],
    };
    words.into_iter().map(String::into_bytes).collect()
}

struct KvConn {
    node: u64,
    epoch: u64,
    id: u64,
    replies: tokio::sync::mpsc::UnboundedReceiver<KvOutbound>,
    next_seq: u64,
    /// Request numbers of ghost commands in flight (batched writes'):
    /// their replies are checked and dropped.
    ghosts: Vec<u64>,
}

struct KvPending {
    seq: u64,
    history: usize,
    /// A read waiting for this ReadIndex barrier to pass.
    barrier: Option<u64>,
}

struct Writing {
    index: u64,
    term: u64,
    bytes: Vec<u8>,
    writer: Box<dyn keel_consensus::SnapshotWriter>,
}

#[derive(Debug)]
enum PendingKind {
    CreateSession,
    Write,
    Sync { call: Call, watch: bool },
    Read,
    Auth,
    AclWrite { call: AclCall },
    ReapWrite { call: ReapCall },
}

/// A request as the node's connection shell holds it in the session's
/// queue (`RequestFifo`), as `conn.rs` holds the frames it read.
#[derive(Debug)]
enum Queued {
    /// A request that goes through the log; its transaction is made when
    /// it runs, with the connection's identities then (as `conn.rs`).
    Write {
        xid: i32,
        op: TxnOp,
    },
    /// addauth with `ACL_USER`'s credentials (the AUTH request's body).
    Auth {
        body: Vec<u8>,
    },
    Sync {
        xid: i32,
        context: Vec<u8>,
    },
    Read {
        xid: i32,
        call: Call,
        watch: bool,
        history: Option<usize>,
    },
    /// A read under ACL_ROOT, checked against the client's identity.
    AclRead {
        xid: i32,
        call: AclCall,
    },
    /// addWatch (persistent or persistent-recursive).
    Watch {
        xid: i32,
        path: String,
        recursive: bool,
    },
}

impl Queued {
    /// The server's own decision (`Lane::of`, as `conn.rs` asks it):
    /// well-formed writes pipeline; everything else runs alone.
    fn lane(&self) -> Lane {
        let op_code = match self {
            Queued::Write {
                op: TxnOp::Request { op_code, body },
                ..
            } => return Lane::of(*op_code, body),
            Queued::Write { .. } => opcode::CLOSE_SESSION,
            Queued::Auth { .. } => opcode::AUTH,
            Queued::Sync { .. } => opcode::SYNC,
            Queued::Read { .. } | Queued::AclRead { .. } => opcode::GET_DATA,
            Queued::Watch { .. } => opcode::ADD_WATCH,
        };
        Lane::of(op_code, &[])
    }
}

#[derive(Debug)]
struct Pending {
    xid: i32,
    kind: PendingKind,
    /// Index in the history of the operation this request records.
    history: Option<usize>,
}

#[derive(Debug, Clone)]
struct WatchRecord {
    path: String,
    kind: WatchKind,
    /// The zxid the watch was set at: changes after it must fire it.
    zxid: i64,
}

struct Client {
    id: usize,
    node: u64,
    session: Option<i64>,
    /// Bumped whenever the client's connection changes: messages for an
    /// older connection are ignored, as a closed socket would.
    generation: u64,
    /// Half the clients send `addauth digest ACL_USER` on every new
    /// connection, right after connecting (as ZooKeeper's client does).
    authenticates: bool,
    /// The identities of the current connection (the node's side of it,
    /// as `conn.rs` keeps them): what addauth added so far.
    conn_auth: Vec<keel_jute::Id>,
    /// Requests sent and not answered, in the order sent (xid order).
    pending: std::collections::VecDeque<Pending>,
    /// The node side of the client's current connection: the server's own
    /// session request queue. A new one with every connection.
    conn: RequestFifo<Queued>,
    /// What the node queued for the current connection, not yet handled
    /// by its side of the connection (as `conn.rs`'s inbox and stash).
    stash: Stash,
    next_xid: i32,
    writes: u64,
    /// Newest zxid this session has seen (ZooKeeper never lets a session
    /// read older state than it has seen).
    last_zxid: i64,
    watches: Vec<WatchRecord>,
    /// Paths this session asked a persistent watch on (from the moment it
    /// sent addWatch): it sets no one-shot watch there.
    persistent_paths: BTreeSet<String>,
    /// Paths this session asked a one-shot watch on: it adds no
    /// persistent watch there (ZooKeeper 3.8 keeps one mode per path and
    /// table, so mixing them changes modes; the model does not follow).
    one_shot_paths: BTreeSet<String>,
    last_event_zxid: i64,
    /// When the last message queued for this client arrives: later ones
    /// arrive after it (a TCP connection keeps order).
    fifo_us: u64,
    /// Recent events (path, type, zxid) that fired a watch.
    recent_events: std::collections::VecDeque<(String, keel_jute::EventType, i64)>,
}

/// Leader lingers the simulated nodes run with (`Core::set_linger_us`),
/// one per node by seed: never, shorter and longer than a simulated
/// round trip.
const SIM_LINGERS_US: [u64; 3] = [0, 500, 3_000];

pub struct World {
    options: Options,
    rng: Rng,
    now_us: u64,
    seq: u64,
    queue: BTreeMap<(u64, u64), Ev>,
    nodes: Vec<Node>,
    clients: Vec<Client>,
    clock_ms: Arc<AtomicU64>,
    /// Directed links that drop everything (partitions).
    cut: BTreeSet<(u64, u64)>,
    drop_per_million: u64,
    duplicate_per_million: u64,
    faults_over: bool,
    history: Vec<Operation>,
    /// Expiry operations recorded, by session (to fill in their return).
    expiries: BTreeMap<i64, usize>,
    /// When each zxid was first applied anywhere (µs), for the reaper's
    /// lateness check.
    applied_at_us: BTreeMap<i64, u64>,
    /// Reaper problems reported (each once, not per replica).
    reaper_problems: BTreeSet<String>,
    /// The first digest any node reported at each applied index.
    digests: BTreeMap<u64, (u64, u64)>,
    /// Events by zxid, from the first node to apply each entry.
    events: BTreeMap<i64, Vec<Event>>,
    applied_indexes: BTreeSet<u64>,
    failures: Vec<String>,
    /// An observer was seen leading (reported once).
    observer_led: bool,
    trace: Vec<String>,
    fingerprint: u64,
    stats: Stats,
    kv_clients: Vec<KvClient>,
    kv_history: Vec<KvOperation>,
    /// The KV clients' choices, from a generator of their own: a seed's
    /// other requests and faults stay what they were.
    kv_rng: Rng,
    /// Which KV requests are spanning ones (`Options::kv_spans`).
    kv_span_rng: Rng,
    /// Which KV requests set or remove deadlines (`Options::kv_expiry`).
    kv_expiry_rng: Rng,
    /// Which KV requests go to the WATCH_KEYS (`Options::kv_watch`).
    kv_watch_rng: Rng,
    /// Which KV requests go to the hash and the set (`Options::kv_types`).
    kv_types_rng: Rng,
    kv_batch_rng: Rng,
    /// Which KV requests start a SCAN iteration (`Options::kv_scan`).
    kv_scan_rng: Rng,
    /// The SCAN iterations the clients finished.
    kv_scans: Vec<ScanIteration>,
    /// The starting member the joiner replaces (`Joiner::replaces`).
    replaced: Option<u64>,
}

impl World {
    pub fn new(options: Options) -> World {
        assert!(matches!(options.nodes, 1..=7), "1 to 7 nodes");
        assert!(
            options.joiner.is_none() || options.nodes < 7,
            "a joiner makes at most 7 nodes"
        );
        assert!(options.clients > 0, "at least one client");
        let mut rng = Rng::new(options.seed);
        let drop_per_million = if options.faults { rng.below(30_000) } else { 0 };
        let duplicate_per_million = if options.faults { rng.below(20_000) } else { 0 };
        let mut nodes: Vec<Node> = (1..=options.nodes as u64)
            .map(|id| Node::new(id, &mut rng))
            .collect();
        if options.joiner.is_some() {
            // Its disk and clock from a generator of their own: the run's
            // other draws stay what they were.
            let id = options.nodes as u64 + 1;
            nodes.push(Node::new(id, &mut Rng::new(options.seed ^ 0x006e_6577)));
        }
        let kv_clients = (0..options.kv_clients)
            .map(|_| KvClient {
                conn: None,
                pending: None,
                sent: 0,
                connections: 0,
                cas: None,
                deadline_key: None,
                scan: None,
            })
            .collect();
        let kv_rng = Rng::new(options.seed ^ 0x6b76);
        let kv_span_rng = Rng::new(options.seed ^ KV_SPAN_SALT ^ 0x7271);
        let kv_expiry_rng = Rng::new(options.seed ^ KV_EXPIRY_SALT ^ 0x7271);
        let kv_watch_rng = Rng::new(options.seed ^ KV_WATCH_SALT ^ 0x7271);
        let kv_types_rng = Rng::new(options.seed ^ KV_TYPES_SALT ^ 0x7271);
        let kv_batch_rng = Rng::new(options.seed ^ KV_BATCH_SALT ^ 0x7271);
        let kv_scan_rng = Rng::new(options.seed ^ KV_SCAN_SALT ^ 0x7271);
        let replaced = options
            .joiner
            .as_ref()
            .filter(|j| j.replaces)
            .and_then(|joiner| {
                let observer = joiner.role == Role::Observer;
                (1..=options.nodes as u64).rev().find(|id| {
                    options.observers.contains(id) == observer
                        && options.preferred_leader != Some(*id)
                })
            });
        let clients = (0..options.clients)
            .map(|id| Client {
                id,
                node: 1 + (id as u64 % options.nodes as u64),
                session: None,
                generation: 0,
                authenticates: rng.chance(500_000),
                conn_auth: Vec::new(),
                pending: std::collections::VecDeque::new(),
                conn: RequestFifo::new(PENDING_REQUESTS_MAX),
                stash: Stash::default(),
                next_xid: 1,
                writes: 0,
                last_zxid: 0,
                watches: Vec::new(),
                persistent_paths: BTreeSet::new(),
                one_shot_paths: BTreeSet::new(),
                last_event_zxid: 0,
                fifo_us: 0,
                recent_events: std::collections::VecDeque::new(),
            })
            .collect();
        World {
            options,
            rng,
            now_us: 0,
            seq: 0,
            queue: BTreeMap::new(),
            nodes,
            clients,
            clock_ms: Arc::new(AtomicU64::new(0)),
            cut: BTreeSet::new(),
            drop_per_million,
            duplicate_per_million,
            faults_over: false,
            history: Vec::new(),
            expiries: BTreeMap::new(),
            applied_at_us: BTreeMap::new(),
            reaper_problems: BTreeSet::new(),
            digests: BTreeMap::new(),
            events: BTreeMap::new(),
            applied_indexes: BTreeSet::new(),
            failures: Vec::new(),
            observer_led: false,
            trace: Vec::new(),
            fingerprint: FNV_OFFSET,
            stats: Stats::default(),
            kv_clients,
            kv_history: Vec::new(),
            kv_rng,
            kv_span_rng,
            kv_expiry_rng,
            kv_watch_rng,
            kv_types_rng,
            kv_batch_rng,
            kv_scan_rng,
            kv_scans: Vec::new(),
            replaced,
        }
    }

    /// Handles the next event if it comes by `limit_us`; false when none
    /// does (or the run ran away).
    fn step_until(&mut self, limit_us: u64) -> bool {
        let Some(entry) = self.queue.first_entry() else {
            return false;
        };
        let (time, _) = *entry.key();
        if time > limit_us {
            return false;
        }
        let event = entry.remove();
        self.now_us = time;
        self.clock_ms.store(time / 1000, Ordering::Relaxed);
        self.stats.events += 1;
        if self.stats.events > EVENTS_PER_RUN_MAX {
            self.fail(format!(
                "more than {EVENTS_PER_RUN_MAX} events: runaway run"
            ));
            return false;
        }
        self.handle(event);
        true
    }

    /// The serving replicas have applied the same index.
    fn replicas_agree(&self) -> bool {
        let mut applied = (1..=self.nodes.len() as u64)
            .filter(|&id| self.serves(id))
            .filter_map(|id| self.nodes[(id - 1) as usize].core.as_ref())
            .map(|core| core.applied());
        let first = applied.next();
        applied.all(|index| Some(index) == first)
    }

    fn schedule(&mut self, after_us: u64, event: Ev) {
        self.seq += 1;
        self.queue.insert((self.now_us + after_us, self.seq), event);
    }

    fn note(&mut self, line: String) {
        fnv(&mut self.fingerprint, line.as_bytes());
        if self.options.trace {
            self.trace
                .push(format!("{:>9.3} {line}", self.now_us as f64 / 1000.0));
        }
    }

    fn fail(&mut self, failure: String) {
        self.note(format!("FAILURE {failure}"));
        if self.failures.len() < 20 {
            self.failures.push(failure);
        }
    }

    /// Runs the whole scenario and the end-of-run checks.
    pub fn run(mut self) -> Report {
        keel_tree::planted::set_recursive_blind(self.options.recursive_watches_blind);
        keel_tree::planted::set_acl_blind(self.options.acl_blind);
        keel_tree::planted::set_reap_early(self.options.reap_early);
        keel_tree::planted::set_reap_late(self.options.reap_late);
        keel_tree::planted::set_snapshot_torn(self.options.snapshot_torn);
        keel_kv::planted::set_snapshot_keys_dropped(self.options.kv_snapshot_keys_dropped);
        keel_kv::planted::set_exec_partial(self.options.kv_exec_partial);
        keel_kv::planted::set_batch_seq_shifted(self.options.kv_batch_seq_shifted);
        keel_kv::planted::set_expire_early(self.options.kv_expire_early);
        keel_kv::planted::set_ttl_from_log_clock(self.options.kv_ttl_from_log_clock);
        keel_kv::planted::set_watch_blind(self.options.kv_watch_blind);
        keel_kv::planted::set_empty_kept(self.options.kv_empty_kept);
        keel_kv::planted::set_scan_skips(self.options.kv_scan_skips);
        for id in 1..=self.options.nodes as u64 {
            self.start_node(id);
        }
        for client in 0..self.clients.len() {
            let delay = self.rng.between(1_000, 300_000);
            self.schedule(
                delay,
                Ev::ClientWake {
                    client,
                    generation: 0,
                },
            );
        }
        for client in 0..self.kv_clients.len() {
            let delay = self.kv_rng.between(1_000, 300_000);
            self.schedule(delay, Ev::KvWake { client });
        }
        if self.options.faults {
            self.plan_faults();
        }
        if let Some(joiner) = &self.options.joiner {
            self.schedule(joiner.at_ms * 1000, Ev::Join);
        }
        let end_us = self.options.duration_ms * 1000;
        self.schedule(end_us, Ev::EndFaults);
        let stop_us = end_us + SETTLE_MS * 1000;
        while self.step_until(stop_us) {}
        // An entry proposed in the settle's last moments (a session that
        // expires a full timeout after a late leader change) may not have
        // reached every replica yet (seed 8300134): up to
        // CONVERGENCE_GRACE_MS more, until the serving replicas agree. A
        // replica that is stuck still fails the convergence check.
        let grace_us = stop_us + CONVERGENCE_GRACE_MS * 1000;
        while !self.replicas_agree() && self.step_until(grace_us) {}
        keel_tree::planted::set_recursive_blind(false);
        keel_tree::planted::set_acl_blind(false);
        keel_tree::planted::set_reap_early(false);
        keel_tree::planted::set_reap_late(false);
        keel_tree::planted::set_snapshot_torn(false);
        keel_kv::planted::set_snapshot_keys_dropped(false);
        keel_kv::planted::set_exec_partial(false);
        keel_kv::planted::set_batch_seq_shifted(false);
        keel_kv::planted::set_expire_early(false);
        keel_kv::planted::set_ttl_from_log_clock(false);
        keel_kv::planted::set_watch_blind(false);
        keel_kv::planted::set_empty_kept(false);
        keel_kv::planted::set_scan_skips(false);
        self.finish()
    }

    fn plan_faults(&mut self) {
        let count = self.rng.between(1, 4);
        let span_ms = self.options.duration_ms.saturating_sub(2_000).max(1);
        for _ in 0..count {
            let at_us = (1_000 + self.rng.below(span_ms)) * 1000;
            let fault = match self.rng.below(3) {
                0 => Ev::Crash {
                    node: self.rng.between(1, self.options.nodes as u64),
                    restart_after_ms: self.rng.between(300, 5_000),
                    mid_write: false,
                },
                1 => Ev::Crash {
                    node: self.rng.between(1, self.options.nodes as u64),
                    restart_after_ms: self.rng.between(300, 3_000),
                    mid_write: true,
                },
                _ => {
                    let minority = (self.options.nodes as u64 - 1) / 2;
                    let size = self.rng.between(1, minority.max(1));
                    let mut isolated = BTreeSet::new();
                    while (isolated.len() as u64) < size {
                        isolated.insert(self.rng.between(1, self.options.nodes as u64));
                    }
                    Ev::Partition {
                        isolated: isolated.into_iter().collect(),
                        heal_after_ms: self.rng.between(500, 5_000),
                    }
                }
            };
            self.seq += 1;
            self.queue.insert((at_us, self.seq), fault);
        }
        // Membership changes draw from their own generator: the other
        // faults of a seed stay what they were.
        let mut rng = Rng::new(self.options.seed ^ 0x7265_636f_6e66);
        if self.options.nodes >= 3 && rng.chance(MEMBERSHIP_FAULT_PER_MILLION) {
            let at_us = (1_000 + rng.below(span_ms)) * 1000;
            let fault = Ev::RemoveMember {
                node: rng.between(1, self.options.nodes as u64),
                back_after_ms: rng.between(500, 4_000),
            };
            self.seq += 1;
            self.queue.insert((at_us, self.seq), fault);
        }
    }

    /// The member table an operator gives a re-added member (the simulator
    /// routes by id: addresses are names).
    fn member_entry(&self, id: u64) -> Member {
        let role = if let Some(joiner) = self.joiner().filter(|j| j.0 == id) {
            joiner.1
        } else if self.options.observers.contains(&id) && !self.options.observers_vote {
            Role::Observer
        } else {
            Role::Voter
        };
        Member {
            id,
            role,
            peer: format!("sim-n{id}:2888"),
            election_port: 0,
            client: String::new(),
            bootstrap: false,
        }
    }

    /// A live node that leads, else any live member, to ask a change of.
    fn operator_target(&self) -> Option<u64> {
        let live = self.nodes.iter().filter(|n| self.serves(n.id));
        let live: Vec<&Node> = live.collect();
        live.iter()
            .find(|n| n.core.as_ref().is_some_and(|c| c.is_leader()))
            .or_else(|| live.first())
            .map(|n| n.id)
    }

    fn remove_member(&mut self, id: u64, back_after_ms: u64) {
        if self.faults_over || self.replaced == Some(id) {
            return; // the joiner's change removes that one for good
        }
        // The starting members' voters (a joiner is never the one removed).
        let voters = self.options.nodes - self.options.observers.len();
        if voters < 3 && !self.options.observers.contains(&id) {
            return; // a change must leave at least 2 voters
        }
        let Some(asked) = self.operator_target() else {
            return;
        };
        self.stats.membership_changes += 1;
        self.note(format!("reconfig: n{asked} asked to remove n{id}"));
        self.operator_asks(
            asked,
            Change::Incremental {
                joining: Vec::new(),
                leaving: vec![id],
            },
        );
        self.schedule(
            back_after_ms * 1000,
            Ev::AddMember {
                node: id,
                attempt: 0,
            },
        );
    }

    /// Adds `id` (back, or the joiner) whenever the configuration of the
    /// node the operator asks lacks it with no change under way, checked
    /// every second up to MEMBERSHIP_ATTEMPTS_MAX times: the removal may
    /// be carried out late (a new leader finds it in its log), and a
    /// request asked of a node whose leader changes is lost, as a
    /// client's would be.
    fn add_member(&mut self, id: u64, attempt: u32) {
        if attempt >= MEMBERSHIP_ATTEMPTS_MAX {
            return;
        }
        self.schedule(
            1_000_000,
            Ev::AddMember {
                node: id,
                attempt: attempt + 1,
            },
        );
        // As an operator does: the configuration the node it asks (the
        // leader if there is one) applied lacks `id`, with no change under
        // way. (A removed node's or a joiner's own view would lack members
        // added since and ask for changes that change nothing, which then
        // hold back the ones that do: `SIM_JOIN=1`, seed 848.)
        let Some(asked) = self.operator_target() else {
            return;
        };
        let membership = self.nodes[(asked - 1) as usize]
            .core
            .as_ref()
            .expect("the operator asks a live node")
            .membership();
        let lacking = membership.pending.is_none() && !membership.members.contains_key(&id);
        // The joiner replaces a member in the same change while that
        // one is still in the asked node's configuration.
        let leaving: Vec<u64> = self
            .replaced
            .filter(|r| {
                self.joiner().is_some_and(|j| j.0 == id) && membership.members.contains_key(r)
            })
            .into_iter()
            .collect();
        if !lacking {
            return;
        }
        self.note(format!(
            "reconfig: n{asked} asked to add n{id} (attempt {attempt})"
        ));
        if !leaving.is_empty() {
            self.note(format!(
                "reconfig: ... and to remove {leaving:?} in the same change"
            ));
        }
        let joining = vec![self.member_entry(id)];
        self.operator_asks(asked, Change::Incremental { joining, leaving });
    }

    /// The operator's reconfig, as super (its answer goes nowhere).
    fn operator_asks(&mut self, asked: u64, change: Change) {
        self.node(asked).core.as_mut().expect("alive").reconfigure(
            change,
            None,
            true,
            OPERATOR_CONTEXT.to_vec(),
        );
        self.request_advance(asked);
    }

    /// The joiner's id and role, in a run that has one.
    fn joiner(&self) -> Option<(u64, Role)> {
        let joiner = self.options.joiner.as_ref()?;
        Some((self.options.nodes as u64 + 1, joiner.role))
    }

    /// Node `id` is up, has applied something and its configuration holds
    /// it: a starting member soon after the start, the joiner once a
    /// leader's snapshot brought one.
    fn joined(&self, id: u64) -> bool {
        self.nodes[(id - 1) as usize]
            .core
            .as_ref()
            .is_some_and(|c| c.applied() > 0 && c.membership().members.contains_key(&id))
    }

    /// Clients may use node `id`: it is up and a member (a removed node
    /// closes its clients; a joining one serves once it is a member, as
    /// the server starts serving only after it caught up).
    fn serves(&self, id: u64) -> bool {
        let Some(core) = self.nodes[(id - 1) as usize].core.as_ref() else {
            return false;
        };
        !core.machine().node().removed() && (id <= self.options.nodes as u64 || self.joined(id))
    }

    /// The brand-new node starts with an empty disk, knowing no member,
    /// and an operator asks a member to add it, every second until it is
    /// one (`add_member`), as `keel server --join` asks.
    fn join(&mut self) {
        let (id, role) = self.joiner().expect("a run with a joiner");
        self.stats.joins += 1;
        self.note(format!("n{id} starts to join as {role:?}"));
        self.start_node(id);
        self.schedule(
            0,
            Ev::AddMember {
                node: id,
                attempt: 0,
            },
        );
        let crash = self.options.joiner.as_ref().and_then(|j| j.crash);
        if let Some((after_ms, restart_after_ms, mid_write)) = crash {
            self.schedule(
                after_ms * 1000,
                Ev::Crash {
                    node: id,
                    restart_after_ms,
                    mid_write,
                },
            );
        }
    }

    fn handle(&mut self, event: Ev) {
        match event {
            Ev::Deliver {
                from,
                to,
                epoch,
                input,
                held,
            } => self.deliver(from, to, epoch, input, held),
            Ev::Tick { node, epoch } => self.tick(node, epoch),
            Ev::Advance { node, epoch } => self.advance(node, epoch),
            Ev::SnapshotChunk { node, epoch } => self.snapshot_chunk(node, epoch),
            Ev::Reap { node, epoch } => self.reap(node, epoch),
            Ev::ClientWake { client, generation } => self.client_wake(client, generation),
            Ev::ClientTimeout {
                client,
                generation,
                xid,
            } => self.client_timeout(client, generation, xid),
            Ev::ToClient {
                client,
                generation,
                out,
            } => self.client_receives(client, generation, out),
            Ev::ReadDone {
                client,
                generation,
                xid,
                zxid,
                shows_state,
                watches,
                recorded,
            } => self.read_done(
                client,
                generation,
                (xid, zxid, shows_state),
                watches,
                recorded,
            ),
            Ev::Crash {
                node,
                restart_after_ms,
                mid_write,
            } => self.crash_fault(node, restart_after_ms, mid_write),
            Ev::Restart { node } => self.restart(node),
            Ev::Partition {
                isolated,
                heal_after_ms,
            } => self.partition(isolated, heal_after_ms),
            Ev::Heal => self.heal(),
            Ev::RemoveMember {
                node,
                back_after_ms,
            } => self.remove_member(node, back_after_ms),
            Ev::AddMember { node, attempt } => self.add_member(node, attempt),
            Ev::Join => self.join(),
            Ev::EndFaults => self.end_faults(),
            Ev::KvWake { client } => self.kv_wake(client),
            Ev::KvTimeout {
                client,
                generation,
                seq,
            } => self.kv_timeout(client, generation, seq),
            Ev::KvCasExec { client, generation } => self.kv_cas_exec(client, generation),
            Ev::KvScanNext {
                client,
                generation,
                cursor,
            } => self.kv_scan_next(client, generation, cursor),
        }
    }

    // ---- nodes -------------------------------------------------------

    fn node(&mut self, id: u64) -> &mut Node {
        &mut self.nodes[(id - 1) as usize]
    }

    fn alive(&self, id: u64) -> bool {
        self.nodes[(id - 1) as usize].core.is_some()
    }

    fn start_node(&mut self, id: u64) {
        let members = 1..=self.options.nodes as u64;
        let (voters, learners): (Vec<u64>, Vec<u64>) = if self.options.observers_vote {
            (members.collect(), Vec::new()) // the planted bug
        } else {
            members.partition(|id| !self.options.observers.contains(id))
        };
        let preferred_leader = self.options.preferred_leader;
        let linger_us = |seed: u64| SIM_LINGERS_US[(seed >> 32) as usize % SIM_LINGERS_US.len()];
        let now_ms = self.now_us / 1000;
        let clock = self.clock_ms.clone();
        let seed = self.rng.next_u64();
        let planted_bug = self.options.planted_bug;
        let joining = self.joiner().is_some_and(|j| j.0 == id);
        let node = self.node(id);
        let disk = node.disk.clone();
        let corrupted = node.corrupted.take();
        // A joiner starts as `keel server --join` does: no configuration
        // and no member known (`recover`); a leader's snapshot brings both.
        let (bootstrap, conf_state) = if joining {
            (Membership::default(), ConfState::default())
        } else {
            let conf_state = ConfState {
                voters: voters.clone(),
                learners: learners.clone(),
                ..Default::default()
            };
            (bootstrap_membership(&voters, &learners), conf_state)
        };
        let (tree, keyspace, dedup, durable, refused, membership) = {
            let mut stored = disk.borrow_mut();
            if stored.conf_state.is_none() {
                stored.conf_state = Some(conf_state);
            }
            let Loaded {
                tree,
                keyspace,
                dedup,
                configuration,
                refused,
            } = stored.load_tree();
            // As the server's restart: raft-rs starts from the snapshot's
            // configuration and the log replays later changes.
            let (conf_state, membership) = match configuration {
                Some(c) => (c.conf_state, c.membership),
                None => (stored.conf_state.clone().expect("set above"), bootstrap),
            };
            // As the server's `Store::drop_covered`: a log that ends before
            // the snapshot (the node died installing the leader's snapshot,
            // before compacting the log it covers) is dropped whole.
            if log_covered(stored.last_index(), tree.applied_index()) {
                stored.entries.clear();
            }
            let durable = Durable {
                snapshot_index: tree.applied_index(),
                snapshot_term: tree.applied_term(),
                conf_state,
                hard_state: stored.hard_state.clone(),
                entries: stored.entries.values().cloned().collect(),
            };
            (tree, keyspace, dedup, durable, refused, membership)
        };
        let memory = match storage_from(durable) {
            Ok(memory) => memory,
            Err(error) => {
                // The server refuses to start alike (`keel_consensus::recover`).
                self.check_restart(id, corrupted, &refused);
                return self.fail(format!("n{id} cannot restart: {error}"));
            }
        };
        let config = CoreConfig {
            node_id: id,
            snapshot_every_entries: SIM_SNAPSHOT_EVERY_ENTRIES,
            snapshot_every_log_bytes: SIM_SNAPSHOT_EVERY_LOG_BYTES,
            preferred_leader,
            applied: tree.applied_index(),
            first_sequence: (now_ms << 12).max(dedup.applied(id) + 1),
            dedup,
            seed,
            log_kept_behind_snapshot: SIM_LOG_KEPT_BEHIND_SNAPSHOT,
            log_kept_behind_snapshot_bytes: SIM_LOG_KEPT_BEHIND_SNAPSHOT_BYTES,
            membership,
            reconfig_enabled: true,
            tick_us: node.tick_ms * 1000,
            read_lease: true,
            planted_bug,
        };
        let io = SimIo {
            disk: disk.clone(),
            sent: Vec::new(),
            fsync_ms: node.fsync_ms,
            busy_ms: 0,
            crash_in_next_write: None,
            peers: Default::default(),
        };
        let (machine, kv) = new_machine(id, tree, keyspace, TICK_MS, clock);
        let mut core = Core::new(
            config,
            memory,
            SimSnapshots(disk),
            io,
            machine,
            std::sync::Arc::new(RaftStatus::default()),
        )
        .expect("a simulated node starts");
        // The leader's linger (the server's `linger.rs` sets it from the
        // load; here from the core's seed, not drawn from the run's
        // generator, so the rest of a seed's run draws what it drew before).
        core.set_linger_us(linger_us(seed));
        node.core = Some(core);
        node.kv = Some(kv);
        node.kv_barrier = 0;
        node.lease_reads_counted = 0;
        node.reaper = Reaper::default();
        node.epoch += 1;
        node.advance_scheduled = false;
        node.busy_until_us = 0;
        node.next_session = keel_session::initial_session_id(id as u8, now_ms.max(1));
        let epoch = node.epoch;
        let tick_us = node.tick_ms * 1000;
        self.note(format!("n{id} start epoch {epoch}"));
        self.check_restart(id, corrupted, &refused);
        self.schedule(tick_us, Ev::Tick { node: id, epoch });
        let reap_us = self.options.container_check_interval_ms * 1000;
        self.schedule(reap_us, Ev::Reap { node: id, epoch });
        self.request_advance(id);
    }

    /// A restart refuses the snapshot corrupted at the crash (and no
    /// other: every snapshot written was checked when it was written).
    fn check_restart(&mut self, id: u64, corrupted: Option<u64>, refused: &[(u64, String)]) {
        for (index, error) in refused {
            self.note(format!("n{id} refused snapshot {index}: {error}"));
            if corrupted != Some(*index) {
                self.fail(format!(
                    "n{id}: restart refused snapshot {index}, which was not corrupted: {error}"
                ));
            }
        }
        if let Some(index) = corrupted {
            if !refused.iter().any(|(refused, _)| *refused == index) {
                self.fail(format!(
                    "n{id}: restart loaded snapshot {index}, corrupted at its crash"
                ));
            }
        }
    }

    /// The server's reaper pass (`Reaper::pass`, as its timer calls it):
    /// the leader proposes the deletions of containers and TTL nodes due.
    fn reap(&mut self, id: u64, epoch: u64) {
        let time_ms = (self.now_us / 1000) as i64;
        let interval_us = self.options.container_check_interval_ms * 1000;
        let node = self.node(id);
        if node.epoch != epoch {
            return;
        }
        let core = node.core.as_mut().expect("a live epoch has a core");
        let leader = core.is_leader();
        // The simulated wall clock and every node's monotonic clock are
        // the one logical clock.
        let machine_node = core.machine().node();
        let monotonic_ms = machine_node.now_ms();
        let txns = node
            .reaper
            .pass(machine_node, leader, time_ms, monotonic_ms);
        let mut paths = Vec::new();
        for txn in txns {
            core.propose(txn.encode());
            if let TxnOp::DeleteContainer { path } = txn.op {
                paths.push(path);
            }
        }
        if !paths.is_empty() {
            self.note(format!("n{id} reaps {paths:?}"));
            self.request_advance(id);
        }
        self.schedule(interval_us, Ev::Reap { node: id, epoch });
    }

    fn request_advance(&mut self, id: u64) {
        self.request_advance_after(id, 0);
    }

    /// An advance in `wait_us` at the earliest (a lingering leader's
    /// batch); one already scheduled comes first and asks again.
    fn request_advance_after(&mut self, id: u64, wait_us: u64) {
        let now_us = self.now_us;
        let node = self.node(id);
        if node.advance_scheduled || node.core.is_none() {
            return;
        }
        node.advance_scheduled = true;
        let epoch = node.epoch;
        let after_us = (node.busy_until_us.saturating_sub(now_us) + 50).max(wait_us);
        self.schedule(after_us, Ev::Advance { node: id, epoch });
    }

    fn deliver(&mut self, from: u64, to: u64, epoch: u64, input: PeerInput, held: u32) {
        let node = self.node(to);
        if node.epoch != epoch {
            return; // the connection died with the node
        }
        let Some(core) = node.core.as_mut() else {
            return;
        };
        // A joiner knows no member yet and lets any sender in (the
        // server's `handshake::Acceptor`), until a snapshot names them.
        let peers = &core.io().peers;
        if !peers.is_empty() && !peers.contains(&from) {
            // Refused at the handshake: not a member it knows. The server's
            // transport keeps a snapshot queued and connects again every
            // HANDSHAKE_RETRY_MS until the peer learns the sender (from a
            // member's gossip); other messages are dropped (raft resends). (A
            // dropped snapshot waited out SNAPSHOT_RETRY_TICKS: `SIM_JOIN=1`,
            // seed 8245064.)
            let snapshot = matches!(&input, PeerInput::Raft(m) if m.get_msg_type() == MessageType::MsgSnapshot);
            if snapshot && held < SNAPSHOT_HELD_MAX {
                let input = Ev::Deliver {
                    from,
                    to,
                    epoch,
                    input,
                    held: held + 1,
                };
                self.schedule(HANDSHAKE_RETRY_US, input);
            }
            return;
        }
        core.peer(input);
        self.request_advance(to);
    }

    fn tick(&mut self, id: u64, epoch: u64) {
        let now_ms = self.now_us / 1000;
        let is_observer =
            self.options.observers.contains(&id) || self.joiner() == Some((id, Role::Observer));
        let node = self.node(id);
        if node.epoch != epoch {
            return;
        }
        let tick_us = node.tick_ms * 1000;
        let core = node.core.as_mut().expect("a live epoch has a core");
        core.tick();
        let observer_leads = core.is_leader() && is_observer;
        let term = core.term();
        if observer_leads && !self.observer_led {
            self.observer_led = true;
            self.fail(format!("observer n{id} leads in term {term}"));
        }
        let core = self
            .node(id)
            .core
            .as_mut()
            .expect("a live epoch has a core");
        // Connected clients ping: their sessions are touched here.
        let local = core.machine().node().connected_sessions();
        if !local.is_empty() {
            core.touches(local);
        }
        // The server's own expiry step (on the leader only, as its timers).
        let expired = if core.is_leader() {
            core.machine().node().expire(now_ms as i64)
        } else {
            Vec::new()
        };
        for (_, close) in &expired {
            core.propose(close.encode());
        }
        for (session, _) in expired {
            self.record_expiry(session);
        }
        self.kv_expire(id);
        self.schedule(tick_us, Ev::Tick { node: id, epoch });
        self.request_advance(id);
    }

    fn record_expiry(&mut self, session: i64) {
        if self.expiries.contains_key(&session) {
            return;
        }
        self.note(format!("expire {session:#x}"));
        self.expiries.insert(session, self.history.len());
        self.history.push(Operation {
            client: SYSTEM_CLIENT,
            session,
            call: Call::CloseSession,
            invoke: self.now_us,
            ret: None,
        });
    }

    fn advance(&mut self, id: u64, epoch: u64) {
        let now_us = self.now_us;
        let node = self.node(id);
        if node.epoch != epoch {
            return;
        }
        node.advance_scheduled = false;
        let core = node.core.as_mut().expect("a live epoch has a core");
        core.set_clock_us(now_us);
        let result = core.advance();
        let busy_ms = std::mem::take(&mut core.io_mut().busy_ms);
        let sent = std::mem::take(&mut core.io_mut().sent);
        let recorder = core.machine_mut().observer_mut();
        let digests = std::mem::take(&mut recorder.digests);
        let applied = std::mem::take(&mut recorder.applied);
        let ephemerals = recorder.ephemerals.take();
        let reaper = recorder.reaper.take();
        let more = core.has_ready();
        let wake_at_us = core.wake_at_us();
        let job = core.take_snapshot_job();
        let term = core.term();
        let lease_reads = core.status().lease_reads.load(Ordering::Relaxed);
        let lease_reads_new = lease_reads - node.lease_reads_counted;
        node.lease_reads_counted = lease_reads;
        node.busy_until_us = now_us + busy_ms * 1000;
        self.stats.max_term = self.stats.max_term.max(term);
        self.stats.lease_reads += lease_reads_new;
        if let Err(error) = result {
            self.note(format!("n{id} died in advance: {error}"));
            let restart_after_ms = self.rng.between(300, 3_000);
            return self.crash(id, restart_after_ms);
        }
        if let Some(problem) = ephemerals {
            self.fail(format!("n{id}: {problem}"));
        }
        if let Some(problem) = reaper {
            if self.reaper_problems.insert(problem.clone()) {
                self.fail(format!("n{id}: {problem}"));
            }
        }
        self.check_digests(id, &digests);
        self.record_applied(applied);
        for message in sent {
            self.send(id, message.message, message.after_ms * 1000);
        }
        self.route_outs(id, busy_ms * 1000);
        self.kv_poll(id);
        if more {
            self.request_advance(id);
        } else if let Some(at_us) = wake_at_us {
            self.request_advance_after(id, at_us.saturating_sub(now_us));
        }
        if let Some(job) = job {
            let delay_us = self.rng.between(1_000, 20_000);
            let node = self.node(id);
            node.snapshot = Some(Writing {
                index: job.index,
                term: job.term,
                bytes: job.head,
                writer: job.writer,
            });
            self.schedule(delay_us, Ev::SnapshotChunk { node: id, epoch });
        }
    }

    /// One part of a snapshot is written; applies go on between parts
    /// (the tree keeps the old version of what changes under the writer).
    fn snapshot_chunk(&mut self, id: u64, epoch: u64) {
        let node = self.node(id);
        if node.epoch != epoch {
            return; // lost with the crash: it was never synced
        }
        let writing = node.snapshot.as_mut().expect("a snapshot is being written");
        let more = match writing.writer.next_chunk(&mut writing.bytes) {
            Ok(more) => more,
            Err(error) => {
                let index = writing.index;
                node.snapshot = None;
                let note = format!("n{id} snapshot {index} abandoned: {error}");
                let core = node.core.as_mut().expect("a live epoch has a core");
                core.snapshot_done(index, Err(error), 0);
                self.note(note);
                return self.request_advance(id);
            }
        };
        if more {
            let delay_us = self.rng.between(1_000, 40_000);
            return self.schedule(delay_us, Ev::SnapshotChunk { node: id, epoch });
        }
        let writing = node.snapshot.take().expect("checked above");
        let index = writing.index;
        let checked = verify_snapshot(index, writing.term, &writing.bytes);
        node.disk
            .borrow_mut()
            .keep_snapshot(index, writing.term, writing.bytes);
        let core = node.core.as_mut().expect("a live epoch has a core");
        core.snapshot_done(index, Ok(()), 0);
        self.stats.snapshots_written += 1;
        self.note(format!("n{id} snapshot {index}"));
        self.check_snapshot(id, index, checked);
        self.request_advance(id);
    }

    /// A snapshot just written loads as a restart would load it, and holds
    /// the tree every replica had at its index.
    fn check_snapshot(
        &mut self,
        id: u64,
        index: u64,
        checked: Result<(crate::disk::State, keel_consensus::SnapshotPosition), SnapshotRefused>,
    ) {
        let (tree, keyspace) = match checked {
            Ok((state, _)) => state,
            Err(error) => {
                return self.fail(format!("n{id}: snapshot {index} does not load: {error}"))
            }
        };
        let shards = keyspace.as_ref().map_or(&[][..], |k| &k.shards[..]);
        let held = state_digest(&tree, kv_digest(shards.iter()));
        match self.digests.get(&index) {
            Some(&(digest, _)) if digest == held => {}
            Some(&(digest, by)) => self.fail(format!(
                "n{id}: snapshot {index} holds digest {held:#x} ({} keys), n{by} had {digest:#x} at that index",
                shards.iter().map(|s| s.key_count()).sum::<usize>()
            )),
            None => self.fail(format!(
                "n{id}: snapshot {index} of an index no replica reported"
            )),
        }
    }

    fn check_digests(&mut self, id: u64, digests: &[(u64, u64)]) {
        for &(index, digest) in digests {
            match self.digests.get(&index) {
                None => {
                    self.digests.insert(index, (digest, id));
                }
                Some(&(first, by)) if first != digest => self.fail(format!(
                    "replicas differ at index {index}: n{by} digest {first:#x}, n{id} {digest:#x}"
                )),
                Some(_) => {}
            }
        }
    }

    fn record_applied(&mut self, applied: Vec<crate::machine::AppliedTxn>) {
        for txn in applied {
            let first = !self.applied_at_us.contains_key(&txn.zxid);
            if first {
                self.applied_at_us.insert(txn.zxid, self.now_us);
            }
            if let (Some(reaped), true) = (&txn.reaped, first) {
                self.note(format!("reaped {} ({:?})", reaped.path, reaped.kind));
                match reaped.kind {
                    OwnerKind::Container => self.stats.reaped_containers += 1,
                    _ => self.stats.reaped_ttl_nodes += 1,
                }
            }
            if let Some(session) = txn.closed_session {
                if let Some(&at) = self.expiries.get(&session) {
                    if self.history[at].ret.is_none() {
                        self.history[at].ret =
                            Some((self.now_us.max(self.history[at].invoke + 1), Ret::Done));
                        self.stats.sessions_expired += 1;
                    }
                }
            }
            if self.applied_indexes.insert(txn.index) || !self.events.contains_key(&txn.zxid) {
                self.events.entry(txn.zxid).or_default().extend(txn.events);
            }
        }
    }

    fn send(&mut self, from: u64, message: Outbound, after_us: u64) {
        let (to, input) = match message {
            Outbound::Raft(m) => (m.to, PeerInput::Raft(Box::new(m))),
            Outbound::Forward { to, batch } => (to, PeerInput::Forward(batch)),
            Outbound::Touch { to, sessions } => (to, PeerInput::Touch(sessions)),
            Outbound::Reconfig { to, request } => (to, PeerInput::Reconfig(request)),
            Outbound::ReconfigAnswer { to, answer } => (to, PeerInput::ReconfigAnswer(answer)),
            Outbound::Members { to, members } => (to, PeerInput::Members(members)),
        };
        self.stats.messages += 1;
        if self.cut.contains(&(from, to)) || self.rng.chance(self.drop_per_million) {
            self.stats.dropped += 1;
            return;
        }
        let epoch = self.nodes[(to - 1) as usize].epoch;
        let delay_us = after_us + self.network_delay_us();
        if self.rng.chance(self.duplicate_per_million) {
            self.stats.duplicated += 1;
            let again_us = after_us + self.network_delay_us();
            self.schedule(
                again_us,
                Ev::Deliver {
                    from,
                    to,
                    epoch,
                    input: copy_input(&input),
                    held: 0,
                },
            );
        }
        self.schedule(
            delay_us,
            Ev::Deliver {
                from,
                to,
                epoch,
                input,
                held: 0,
            },
        );
    }

    fn network_delay_us(&mut self) -> u64 {
        if self.options.faults && self.rng.chance(10_000) {
            self.rng.between(20_000, 300_000) // a straggler: reordering
        } else {
            self.rng.between(200, 3_000)
        }
    }

    // ---- faults ------------------------------------------------------

    fn crash_fault(&mut self, id: u64, restart_after_ms: u64, mid_write: bool) {
        if self.faults_over || !self.alive(id) {
            return;
        }
        if mid_write {
            let reached = self.rng.chance(500_000);
            self.stats.torn_writes += 1;
            self.note(format!(
                "n{id} will die in its next log write (reached disk: {reached})"
            ));
            let node = self.node(id);
            node.core
                .as_mut()
                .expect("alive")
                .io_mut()
                .crash_in_next_write = Some(reached);
            return;
        }
        self.crash(id, restart_after_ms);
    }

    fn crash(&mut self, id: u64, restart_after_ms: u64) {
        self.stats.crashes += 1;
        let unsynced_reached_disk = self.rng.chance(500_000);
        self.note(format!(
            "n{id} crash (an unsynced commit index reached disk: {unsynced_reached_disk})"
        ));
        let node = self.node(id);
        node.disk.borrow_mut().crash(unsynced_reached_disk);
        node.core = None;
        node.kv = None;
        node.snapshot = None;
        node.epoch += 1;
        self.corrupt_snapshot(id);
        for client in 0..self.kv_clients.len() {
            if self.kv_clients[client]
                .conn
                .as_ref()
                .is_some_and(|c| c.node == id)
            {
                self.kv_lose_connection(client);
            }
        }
        for client in 0..self.clients.len() {
            if self.clients[client].node == id {
                self.lose_connection(client);
            }
        }
        self.schedule(restart_after_ms * 1000, Ev::Restart { node: id });
    }

    /// Now and then a crash leaves the newest snapshot corrupt (a flipped
    /// byte or a torn end), when the restart can fall back to the one
    /// before it and the log behind it: it must refuse it, load the
    /// previous one and replay (the digest and convergence checks then
    /// show nothing was lost).
    fn corrupt_snapshot(&mut self, id: u64) {
        if !self.options.faults || !self.rng.chance(SNAPSHOT_CORRUPTION_PER_MILLION) {
            return;
        }
        let disk = self.node(id).disk.clone();
        let mut disk = disk.borrow_mut();
        if !disk.fallback_usable() {
            return;
        }
        let (index, _, bytes) = disk.snapshots.last_mut().expect("two kept");
        let index = *index;
        let at = self.rng.below(bytes.len() as u64) as usize;
        let how = if self.rng.chance(500_000) {
            // Now and then the flip that makes format 5 read as format 4,
            // "nothing follows the tree": the restart must see that a
            // keyspace part does (seed 7468986 found it loaded before).
            let (at, bit) = match tree_version_low_byte(bytes) {
                Some(at) if self.rng.chance(TREE_VERSION_FLIP_PER_MILLION) => (at, 0),
                _ => (at, self.rng.below(8)),
            };
            bytes[at] ^= 1 << bit;
            format!("bit {bit} flipped at offset {at} of {}", bytes.len())
        } else {
            let len = bytes.len();
            // Now and then exactly where the tree's part ends and the
            // keyspace's begins: the file says a part follows, so the
            // restart must refuse it (seed 667 found it read as an empty
            // keyspace before the format said so).
            let at = match tree_part_end(bytes) {
                Some(end) if self.rng.chance(TREE_END_CUT_PER_MILLION) => end,
                _ => at,
            };
            bytes.truncate(at);
            format!("truncated to {at} of {len} bytes")
        };
        drop(disk);
        self.stats.snapshots_corrupted += 1;
        self.node(id).corrupted = Some(index);
        self.note(format!("n{id} snapshot {index} corrupted: {how}"));
    }

    fn restart(&mut self, id: u64) {
        if !self.alive(id) {
            self.start_node(id);
        }
    }

    fn partition(&mut self, isolated: Vec<u64>, heal_after_ms: u64) {
        if self.faults_over {
            return;
        }
        self.stats.partitions += 1;
        self.note(format!("partition {isolated:?}"));
        for &inside in &isolated {
            for other in 1..=self.nodes.len() as u64 {
                if !isolated.contains(&other) {
                    self.cut.insert((inside, other));
                    self.cut.insert((other, inside));
                }
            }
        }
        self.schedule(heal_after_ms * 1000, Ev::Heal);
    }

    fn heal(&mut self) {
        if !self.cut.is_empty() {
            self.note("heal".into());
        }
        self.cut.clear();
    }

    fn end_faults(&mut self) {
        self.note("faults end; clients stop".into());
        self.faults_over = true;
        self.drop_per_million = 0;
        self.duplicate_per_million = 0;
        self.heal();
        for id in 1..=self.nodes.len() as u64 {
            // A joiner that never started (its time came after the end)
            // stays down; convergence then reports it.
            if !self.alive(id) && self.node(id).epoch > 0 {
                self.start_node(id);
            }
            let node = self.node(id);
            if let Some(core) = node.core.as_mut() {
                core.io_mut().crash_in_next_write = None;
            }
        }
    }

    // ---- Keel KV clients ---------------------------------------------

    /// A KV client's next request: on its connection (a new one to a live
    /// node if it has none), through the log (writes) or a ReadIndex
    /// barrier (reads), as `server::kv::conn` sends them.
    fn kv_wake(&mut self, client: usize) {
        if self.faults_over || self.kv_clients[client].pending.is_some() {
            return; // no new requests while the cluster settles
        }
        let connected = self.kv_clients[client].conn.as_ref().is_some_and(|c| {
            self.alive(c.node) && self.nodes[(c.node - 1) as usize].epoch == c.epoch
        });
        // Now and then a client moves to another node between requests
        // (a pool, a load balancer): its next read may then meet a node
        // behind the one that acknowledged its write.
        let moves = self.kv_rng.chance(KV_MOVE_PER_MILLION);
        if !connected || moves {
            if let Some(conn) = self.kv_clients[client].conn.take() {
                if let Some(engine) = &self.nodes[(conn.node - 1) as usize].kv {
                    engine.disconnect(conn.id);
                }
            }
            let candidates: Vec<u64> = (1..=self.nodes.len() as u64)
                .filter(|&id| self.serves(id))
                .collect();
            if candidates.is_empty() {
                return self.kv_wake_later(client);
            }
            let node = *self.kv_rng.pick(&candidates);
            let n = self.node(node);
            let epoch = n.epoch;
            let (id, replies) = n.kv.as_ref().expect("a live node has a keyspace").connect();
            self.kv_clients[client].connections += 1;
            self.kv_clients[client].conn = Some(KvConn {
                node,
                epoch,
                id,
                replies,
                next_seq: 1,
                ghosts: Vec::new(),
            });
            self.note(format!("kv{client} connects to n{node} as {id}"));
        }
        let call = {
            let c = &mut self.kv_clients[client];
            c.sent += 1;
            let value = format!("kv{client}-{}", c.sent).into_bytes();
            let rng = &mut self.kv_rng;
            let register =
                REGISTER_KEYS[rng.below(REGISTER_KEYS.len() as u64) as usize].to_string();
            let counter = COUNTER_KEYS[rng.below(COUNTER_KEYS.len() as u64) as usize].to_string();
            match rng.below(100) {
                0..=19 => KvCall::Get { key: register },
                20..=34 => KvCall::Get { key: counter },
                35..=59 => KvCall::Set {
                    key: register,
                    value,
                },
                60..=84 => KvCall::Incr { key: counter },
                _ => KvCall::Del { key: register },
            }
        };
        let expiring = self.kv_expiry_call(client);
        let typed = self.kv_typed_call(client);
        let watching = self.kv_watch_call(client);
        let spanning = self.kv_span_call(client);
        let scanning = self.kv_scan_call(client);
        let (call, cas) = match (scanning.or(spanning), watching) {
            (Some(first), _) => (first, false),
            (None, Some(watching)) => watching,
            (None, None) => (typed.or(expiring).unwrap_or(call), false),
        };
        if call
            .key()
            .is_some_and(|key| HASH_KEYS.contains(&key) || SET_KEYS.contains(&key))
        {
            self.stats.kv_typed_requests += 1;
        }
        if call == KvCall::FlushDb {
            self.stats.kv_flushes += 1;
        }
        if matches!(
            call,
            KvCall::SetPx { .. }
                | KvCall::Pexpire { .. }
                | KvCall::Persist { .. }
                | KvCall::Pttl { .. }
                | KvCall::PexpireTime { .. }
        ) {
            self.stats.kv_expiry_requests += 1;
        }
        if cas {
            let key = call.key().expect("a CAS reads one key").to_string();
            self.kv_watch(client, key);
            if self.kv_clients[client].conn.is_none() {
                return self.kv_wake_later(client);
            }
        }
        self.kv_send(client, call, Vec::new());
    }

    /// Sends `call` on the client's connection: through the log (writes,
    /// with `watches` for a CAS's EXEC) or a ReadIndex barrier (reads).
    fn kv_send(&mut self, client: usize, call: KvCall, watches: Vec<keel_kv::op::Watch>) {
        let conn = self.kv_clients[client]
            .conn
            .as_mut()
            .expect("a client sends on its connection");
        let (node, connection, seq) = (conn.node, conn.id, conn.next_seq);
        conn.next_seq += 1;
        self.note(format!("kv{client} seq {seq} invoke {call:?}"));
        let history = self.kv_history.len();
        self.kv_history.push(KvOperation {
            client: client as u64,
            call: call.clone(),
            invoke: self.now_us,
            ret: None,
            read_clock_ms: None,
            display_ms: None,
        });
        let read = call.is_read();
        self.kv_clients[client].pending = Some(KvPending {
            seq,
            history,
            barrier: None,
        });
        let generation = self.kv_clients[client].connections;
        self.schedule(
            OP_TIMEOUT_MS * 1000,
            Ev::KvTimeout {
                client,
                generation,
                seq,
            },
        );
        if read && self.options.kv_reads_skip_barrier {
            // The planted bug: no barrier, the node's shards at once.
            return self.kv_read_now(client);
        }
        let body = (!read).then(|| {
            // Drawn for every write, batched or not: the draws do not
            // depend on the call.
            let batch = self.kv_batch_rng.chance(KV_BATCH_WRITE_PER_MILLION);
            match call.op(seq, watches) {
                keel_kv::Op::Command { args, .. } if batch => {
                    // The ghosts take the numbers after the write's.
                    let count = 1 + self.kv_batch_rng.below(KV_BATCH_GHOSTS_MAX);
                    let mut commands = vec![args];
                    for _ in 0..count {
                        let form = self.kv_batch_rng.below(KV_GHOST_FORMS);
                        commands.push(kv_ghost(client, form));
                    }
                    let conn = self.kv_clients[client].conn.as_mut().expect("sending");
                    assert_eq!(conn.next_seq, seq + 1);
                    conn.ghosts.extend(seq + 1..=seq + count);
                    conn.next_seq += count;
                    self.stats.kv_batched_writes += 1;
                    self.stats.kv_ghost_commands += count as usize;
                    keel_kv::Op::commands_to_bytes(seq, &commands)
                }
                op => op.to_bytes(),
            }
        });
        let now_ms = (self.now_us / 1000) as i64;
        let n = self.node(node);
        let core = n.core.as_mut().expect("connected to a live node");
        if read {
            n.kv_barrier += 1;
            let number = n.kv_barrier;
            // Every other barrier as the server asks one that several
            // readers wait for: held for the rounds' spacing.
            if number.is_multiple_of(2) {
                core.read_index_batched(ReadBarrier::context(number));
            } else {
                core.read_index(ReadBarrier::context(number));
            }
            self.kv_clients[client]
                .pending
                .as_mut()
                .expect("just set")
                .barrier = Some(number);
        } else {
            let body = body.expect("a write's body");
            let txn = Txn {
                session_id: connection as i64,
                xid: 0,
                time_ms: now_ms,
                auth: Vec::new(),
                op: TxnOp::Kv { body },
            };
            core.propose(txn.encode());
        }
        self.request_advance(node);
    }

    /// In a run with `kv_watch`, a share of the requests go to the
    /// WATCH_KEYS instead (drawn from `kv_watch_rng` every time, so
    /// `kv_rng`'s draws stay the same): most start a CAS (WATCH, then
    /// this GET, then the EXEC, `kv_cas_exec`; flagged `true`), the rest
    /// SET or DEL the key outside any transaction.
    fn kv_watch_call(&mut self, client: usize) -> Option<(KvCall, bool)> {
        let rng = &mut self.kv_watch_rng;
        let draw = rng.below(1_000_000);
        let key = WATCH_KEYS[rng.below(WATCH_KEYS.len() as u64) as usize].to_string();
        if !self.options.kv_watch || draw >= KV_WATCH_REQUEST_PER_MILLION {
            return None;
        }
        let c = &self.kv_clients[client];
        let value = format!("kv{client}-{}", c.sent).into_bytes();
        Some(match draw % 20 {
            0..=13 => (KvCall::Get { key }, true),
            14..=16 => (KvCall::Set { key, value }, false),
            _ => (KvCall::Del { key }, false),
        })
    }

    /// In a run with `kv_types`, a share of the requests go to the hash
    /// or the set instead (drawn from `kv_types_rng` every time): their
    /// own commands mostly, now and then GET (WRONGTYPE), SET (the key
    /// becomes a string) or DEL, and rarely a FLUSHDB.
    fn kv_typed_call(&mut self, client: usize) -> Option<KvCall> {
        let rng = &mut self.kv_types_rng;
        let draw = rng.below(1_000_000);
        let hash = rng.chance(500_000);
        let field = HASH_FIELDS[rng.below(HASH_FIELDS.len() as u64) as usize]
            .as_bytes()
            .to_vec();
        let member = SET_MEMBERS[rng.below(SET_MEMBERS.len() as u64) as usize]
            .as_bytes()
            .to_vec();
        if !self.options.kv_types || draw >= KV_TYPES_REQUEST_PER_MILLION {
            return None;
        }
        let c = &self.kv_clients[client];
        let value = format!("kv{client}-{}", c.sent).into_bytes();
        if draw.is_multiple_of(KV_FLUSH_ONE_IN) {
            return Some(KvCall::FlushDb);
        }
        let key = if hash { HASH_KEYS[0] } else { SET_KEYS[0] }.to_string();
        Some(match (draw % 20, hash) {
            (0, _) => KvCall::Get { key },
            (1, _) => KvCall::Set { key, value },
            (2, _) => KvCall::Del { key },
            (3..=8, true) => KvCall::HSet { key, field, value },
            (9..=12, true) => KvCall::HDel { key, field },
            (13..=15, true) => KvCall::HGet { key, field },
            (16..=17, true) => KvCall::HGetAll { key },
            (_, true) => KvCall::HLen { key },
            (3..=8, false) => KvCall::SAdd { key, member },
            (9..=12, false) => KvCall::SRem { key, member },
            (13..=15, false) => KvCall::SIsMember { key, member },
            (16..=17, false) => KvCall::SMembers { key },
            (_, false) => KvCall::SCard { key },
        })
    }

    /// WATCH `key` on the client's connection, as `conn.rs` does: the
    /// tokens come from the node's shards as they are now (no barrier: a
    /// token from a node behind can only make the EXEC abort).
    fn kv_watch(&mut self, client: usize, key: String) {
        let conn = self.kv_clients[client]
            .conn
            .as_mut()
            .expect("connected above");
        let (node, connection, watch_seq) = (conn.node, conn.id, conn.next_seq);
        conn.next_seq += 1;
        let engine = self
            .node(node)
            .kv
            .clone()
            .expect("connected to a live node");
        let Some(outlet) = engine.outlet_of(connection) else {
            return self.kv_lose_connection(client);
        };
        self.kv_clients[client].cas = Some(Cas {
            key: key.clone(),
            watch_seq,
            watches: Vec::new(),
            expect: None,
        });
        let parts = engine.watch(
            vec![key.into_bytes()],
            Responder {
                outlet,
                seq: watch_seq,
            },
        );
        assert_eq!(parts, 1, "one key is on one shard");
        self.kv_take_replies(client);
        let watched = self.kv_clients[client]
            .cas
            .as_ref()
            .is_some_and(|cas| !cas.watches.is_empty());
        if !watched && self.kv_clients[client].conn.is_some() {
            self.fail(format!(
                "kv{client}: WATCH {watch_seq} got no token at once"
            ));
        }
    }

    /// The CAS's GET was answered (`expect` recorded): after a pause
    /// the client sends its EXEC, which sets a new value if the watched
    /// key has not changed since the WATCH.
    fn kv_cas_exec(&mut self, client: usize, generation: u64) {
        let live = self.kv_follow_up_allowed(client, generation);
        let c = &mut self.kv_clients[client];
        let read = c.cas.as_ref().and_then(|cas| cas.expect.clone());
        let Some(expect) = read.filter(|_| live) else {
            // The connection was lost meanwhile (which dropped the CAS),
            // or the cluster settles (no new requests).
            c.cas = None;
            return self.kv_wake_later(client);
        };
        let cas = c.cas.as_ref().expect("read above");
        c.sent += 1;
        let call = KvCall::CasSet {
            key: cas.key.clone(),
            expect,
            value: format!("kv{client}-{}", c.sent).into_bytes(),
        };
        let watches = cas.watches.clone();
        self.stats.kv_cas_requests += 1;
        self.kv_send(client, call, watches);
    }

    /// A request that follows an earlier answer after a pause (a CAS's
    /// EXEC, a SCAN's next call) may go: the client is still on the
    /// connection `generation` that answered, and the cluster is not
    /// settling.
    fn kv_follow_up_allowed(&self, client: usize, generation: u64) -> bool {
        let c = &self.kv_clients[client];
        c.connections == generation && c.conn.is_some() && !self.faults_over
    }

    /// In a run with `kv_scan`, a share of the requests start a SCAN
    /// iteration instead (drawn from `kv_scan_rng` every time).
    fn kv_scan_call(&mut self, client: usize) -> Option<KvCall> {
        let rng = &mut self.kv_scan_rng;
        let draw = rng.below(1_000_000);
        let count = rng.between(KV_SCAN_COUNT_MIN, KV_SCAN_COUNT_MAX);
        if !self.options.kv_scan || draw >= KV_SCAN_REQUEST_PER_MILLION {
            return None;
        }
        self.kv_clients[client].scan = Some(ScanState {
            invoke: self.now_us,
            count,
            calls: 0,
            keys: BTreeSet::new(),
        });
        Some(KvCall::Scan { cursor: 0, count })
    }

    /// A SCAN call sent from cursor `sent` was answered: the iteration
    /// ends at cursor 0, or goes on from the new cursor after a pause. A
    /// cursor that does not move forward (SCAN walks the slots in order),
    /// or an iteration past KV_SCAN_CALLS_MAX calls, fails the run.
    fn kv_scan_answered(&mut self, client: usize, sent: u64, reply: Option<(u64, Vec<String>)>) {
        self.stats.kv_scan_calls += 1;
        let c = &mut self.kv_clients[client];
        let Some(mut scan) = c.scan.take() else {
            return self.kv_wake_later(client);
        };
        let Some((cursor, keys)) = reply else {
            self.fail(format!(
                "kv{client}: a SCAN call's reply is not [cursor, keys]"
            ));
            return self.kv_wake_later(client);
        };
        scan.calls += 1;
        scan.keys.extend(keys);
        if cursor == 0 {
            self.stats.kv_scans += 1;
            self.kv_scans.push(ScanIteration {
                client: client as u64,
                invoke: scan.invoke,
                end: self.now_us,
                calls: scan.calls,
                keys: scan.keys,
            });
            return self.kv_wake_later(client);
        }
        if cursor <= sent || scan.calls >= KV_SCAN_CALLS_MAX {
            self.fail(format!(
                "kv{client}: SCAN from cursor {sent} returned cursor {cursor} after {} calls: the iteration does not move on",
                scan.calls
            ));
            return self.kv_wake_later(client);
        }
        let generation = c.connections;
        c.scan = Some(scan);
        let pause_us = self.kv_scan_rng.below(KV_SCAN_THINK_MAX_US);
        self.schedule(
            pause_us,
            Ev::KvScanNext {
                client,
                generation,
                cursor,
            },
        );
    }

    /// The next call of the client's SCAN iteration, unless its
    /// connection was lost meanwhile (which dropped the iteration) or the
    /// cluster settles.
    fn kv_scan_next(&mut self, client: usize, generation: u64, cursor: u64) {
        let live = self.kv_follow_up_allowed(client, generation);
        let c = &mut self.kv_clients[client];
        let Some(count) = c.scan.as_ref().map(|scan| scan.count).filter(|_| live) else {
            c.scan = None;
            return self.kv_wake_later(client);
        };
        self.kv_send(client, KvCall::Scan { cursor, count }, Vec::new());
    }

    /// In a run with `kv_spans`, a share of the requests write or read all
    /// the SPAN_KEYS at once instead (drawn from `kv_span_rng` every time,
    /// so `kv_rng`'s draws stay the same).
    fn kv_span_call(&mut self, client: usize) -> Option<KvCall> {
        let draw = self.kv_span_rng.below(1_000_000);
        if !self.options.kv_spans || draw >= KV_SPAN_REQUEST_PER_MILLION {
            return None;
        }
        self.stats.kv_spanning_requests += 1;
        let c = &self.kv_clients[client];
        let value = format!("kv{client}-{}", c.sent).into_bytes();
        Some(match draw % 3 {
            0 => KvCall::Mset { value },
            1 => KvCall::Exec { value },
            _ => KvCall::Mget,
        })
    }

    /// In a run with `kv_expiry`, a share of the requests set or remove a
    /// register key's deadline instead (drawn from `kv_expiry_rng` every
    /// time, so `kv_rng`'s draws stay the same).
    fn kv_expiry_call(&mut self, client: usize) -> Option<KvCall> {
        let rng = &mut self.kv_expiry_rng;
        let draw = rng.below(1_000_000);
        let key = REGISTER_KEYS[rng.below(REGISTER_KEYS.len() as u64) as usize].to_string();
        let ms = rng.between(KV_EXPIRY_MIN_MS, KV_EXPIRY_MAX_MS) as i64;
        if !self.options.kv_expiry || draw >= KV_EXPIRY_REQUEST_PER_MILLION {
            return None;
        }
        let c = &mut self.kv_clients[client];
        let value = format!("kv{client}-{}", c.sent).into_bytes();
        let deadline_key = c.deadline_key.clone().unwrap_or_else(|| key.clone());
        Some(match draw % 20 {
            0..=6 => {
                c.deadline_key = Some(key.clone());
                KvCall::SetPx {
                    key,
                    value,
                    px_ms: ms,
                }
            }
            7..=10 => {
                c.deadline_key = Some(key.clone());
                KvCall::Pexpire { key, ms }
            }
            11..=12 => KvCall::Persist { key },
            13..=16 => KvCall::Pttl { key: deadline_key },
            _ => KvCall::PexpireTime { key: deadline_key },
        })
    }

    /// The leader's KV expiry step, the server's own
    /// (`kv::expiry_proposal`, which `kv::run_expiry` runs every
    /// EXPIRE_CYCLE_MS; here every tick): the keys due by its clock go
    /// into one proposal, one in flight at a time.
    fn kv_expire(&mut self, id: u64) {
        if self.kv_clients.is_empty() {
            return;
        }
        let now_ms = self.now_us / 1000;
        let node = self.node(id);
        let Some(engine) = node.kv.clone() else {
            return;
        };
        let core = node.core.as_mut().expect("a ticking node has a core");
        if !core.is_leader() {
            return;
        }
        let step = keel_server::kv::expiry_proposal(&engine, now_ms as i64, now_ms);
        let Some(txn) = answered_at_once(step) else {
            return;
        };
        core.propose(txn.encode());
        engine.expiry_proposed(now_ms);
        self.stats.kv_expiry_proposals += 1;
        self.note(format!("n{id} proposes an expiry"));
    }

    /// After the settle, no node holds a key more than
    /// KV_EXPIRE_LATE_AFTER_MS past its deadline: the leaders' expiry
    /// steps caught up, whatever leader changes came between.
    fn check_kv_expired_after_settle(&mut self) {
        let now_ms = (self.now_us / 1000) as i64;
        let late_ms = now_ms - KV_EXPIRE_LATE_AFTER_MS as i64;
        let mut problems = Vec::new();
        for node in &self.nodes {
            let Some(engine) = node.kv.clone() else {
                continue;
            };
            let keys = answered_at_once(engine.due(late_ms, 16));
            if !keys.is_empty() {
                let keys: Vec<String> = keys
                    .iter()
                    .map(|k| String::from_utf8_lossy(k).into_owned())
                    .collect();
                problems.push(format!(
                    "kv: n{} still holds {keys:?}, due before {late_ms} ms, at {now_ms} ms",
                    node.id
                ));
            }
        }
        for problem in problems {
            self.fail(problem);
        }
    }

    fn kv_wake_later(&mut self, client: usize) {
        let delay = self.kv_rng.between(KV_THINK_MIN_US, KV_THINK_MAX_US);
        self.schedule(delay, Ev::KvWake { client });
    }

    /// A read whose barrier passed (or, with the planted bug, any read):
    /// the node's shard answers it now, as `conn.rs`'s `read_now`.
    fn kv_read_now(&mut self, client: usize) {
        let c = &self.kv_clients[client];
        let (Some(conn), Some(pending)) = (&c.conn, &c.pending) else {
            return;
        };
        let (node, connection, seq, at) = (conn.node, conn.id, pending.seq, pending.history);
        let call = self.kv_history[at].call.clone();
        let args = call.args();
        let now_ms = (self.now_us / 1000) as i64;
        let engine = self
            .node(node)
            .kv
            .clone()
            .expect("connected to a live node");
        let Some(outlet) = engine.outlet_of(connection) else {
            return;
        };
        let clocks = keel_kv::exec::Clocks::read(engine.clock_ms(), now_ms);
        self.kv_history[at].read_clock_ms = Some(clocks.ctx.now_ms);
        self.kv_history[at].display_ms = Some(clocks.display_ms);
        if matches!(call, KvCall::Mget | KvCall::Scan { .. }) {
            // A read spanning shards: the connection borrows them all
            // (`conn.rs` `read_now`), here at once (`inspect` borrows
            // every shard, as the inline engine's `borrow` would).
            let reply = engine.inspect(|view| keel_kv::keyspace::run(view, &args, clocks));
            return self.kv_reply(client, seq, reply);
        }
        let shard = engine.shard_of(&args[1]);
        let route = keel_kv::session::ReadRoute::checked(&args)
            .expect("a client's read is a keyspace read that passes its checks");
        engine.read(shard, args, route, clocks, Responder { outlet, seq });
        self.kv_take_replies(client);
    }

    /// After node `id` advanced: reads whose barrier passed run, and the
    /// replies its connections got reach their clients.
    fn kv_poll(&mut self, id: u64) {
        if self.kv_clients.is_empty() {
            return;
        }
        let Some(engine) = self.node(id).kv.clone() else {
            return;
        };
        let passed = engine.barrier.passed_number();
        for client in 0..self.kv_clients.len() {
            let c = &self.kv_clients[client];
            if c.conn.as_ref().is_none_or(|conn| conn.node != id) {
                continue;
            }
            let ready = c
                .pending
                .as_ref()
                .and_then(|p| p.barrier)
                .is_some_and(|number| number <= passed);
            if ready {
                self.kv_clients[client]
                    .pending
                    .as_mut()
                    .expect("waiting")
                    .barrier = None;
                self.kv_read_now(client);
            }
            self.kv_take_replies(client);
        }
    }

    /// The reply to the client's request `seq`.
    fn kv_reply(&mut self, client: usize, seq: u64, reply: keel_kv::Reply) {
        if let Some(conn) = self.kv_clients[client].conn.as_mut() {
            if let Some(at) = conn.ghosts.iter().position(|&ghost| ghost == seq) {
                conn.ghosts.swap_remove(at);
                if reply != keel_kv::Reply::Integer(0) {
                    self.fail(format!(
                        "kv{client}: the ghost command of request {seq} answered {reply:?}, not 0"
                    ));
                }
                return;
            }
        }
        let pending = &self.kv_clients[client].pending;
        let Some(pending) = pending.as_ref().filter(|p| p.seq == seq) else {
            self.fail(format!(
                "kv{client}: a reply to request {seq}, which is not in flight: {reply:?}"
            ));
            return;
        };
        let at = pending.history;
        let ret = KvRet::of_call(&reply, &self.kv_history[at].call);
        self.note(format!("kv{client} seq {seq} returns {ret:?}"));
        if !self.kv_history[at].call.is_read() {
            self.stats.kv_acknowledged_writes += 1;
        }
        match (&self.kv_history[at].call, &ret) {
            (KvCall::CasSet { .. }, KvRet::Array(_)) => self.stats.kv_cas_committed += 1,
            (KvCall::CasSet { .. }, KvRet::Aborted) => self.stats.kv_cas_aborted += 1,
            _ => {}
        }
        let cas_read = match (&self.kv_history[at].call, &ret) {
            (KvCall::Get { .. }, KvRet::Value(value)) => Some(value.clone()),
            _ => None,
        };
        let scanned = match &self.kv_history[at].call {
            KvCall::Scan { cursor, .. } => Some((*cursor, crate::kv::scan_reply(&ret))),
            _ => None,
        };
        self.kv_history[at].ret = Some((self.now_us, ret));
        let c = &mut self.kv_clients[client];
        c.pending = None;
        if let Some((sent, reply)) = scanned {
            return self.kv_scan_answered(client, sent, reply);
        }
        match (cas_read, c.cas.as_mut()) {
            // The CAS's GET: its EXEC follows after a pause.
            (Some(expect), Some(cas)) if cas.expect.is_none() => {
                cas.expect = Some(expect);
                let generation = c.connections;
                let pause_us = self.kv_watch_rng.below(KV_CAS_THINK_MAX_US);
                self.schedule(pause_us, Ev::KvCasExec { client, generation });
            }
            _ => {
                c.cas = None;
                self.kv_wake_later(client);
            }
        }
    }

    /// What the client's connection received.
    fn kv_take_replies(&mut self, client: usize) {
        loop {
            let Some(conn) = self.kv_clients[client].conn.as_mut() else {
                return;
            };
            let Ok(message) = conn.replies.try_recv() else {
                return;
            };
            match message {
                KvOutbound::Reply(seq, reply) => self.kv_reply(client, seq, reply),
                KvOutbound::Replies(replies) => {
                    for (seq, reply) in replies {
                        self.kv_reply(client, seq, reply);
                    }
                }
                KvOutbound::Watched(seq, watches) => {
                    let cas = self.kv_clients[client].cas.as_mut();
                    match cas.filter(|cas| cas.watch_seq == seq) {
                        Some(cas) => cas.watches.extend(watches),
                        None => self.fail(format!(
                            "kv{client}: WATCH tokens for request {seq}, which is not in flight"
                        )),
                    }
                }
                KvOutbound::Close(reason) => {
                    self.note(format!("kv{client} closed: {reason}"));
                    self.kv_lose_connection(client);
                    return;
                }
            }
        }
    }

    fn kv_timeout(&mut self, client: usize, generation: u64, seq: u64) {
        let c = &self.kv_clients[client];
        let waiting = c.conn.is_some()
            && c.connections == generation
            && c.pending.as_ref().is_some_and(|p| p.seq == seq);
        if waiting {
            self.note(format!("kv{client} seq {seq} times out"));
            self.kv_lose_connection(client);
        }
    }

    /// The connection is gone (node crash, timeout, closed by the node):
    /// the request in flight has an unknown outcome.
    fn kv_lose_connection(&mut self, client: usize) {
        let c = &mut self.kv_clients[client];
        c.cas = None;
        c.scan = None;
        if let Some(conn) = c.conn.take() {
            if let Some(engine) = &self.nodes[(conn.node - 1) as usize].kv {
                engine.disconnect(conn.id);
            }
        }
        if c.pending.take().is_some() {
            self.stats.kv_unknown_outcomes += 1;
            self.kv_wake_later(client);
        }
    }

    /// Reads of every key from every node after the settle (converged):
    /// an acknowledged write that was lost shows up here.
    fn kv_final_reads(&mut self) {
        if self.kv_clients.is_empty() {
            return;
        }
        let mut at = self.now_us + 1_000;
        let gets = crate::kv::all_keys().into_iter().map(|key| KvCall::Get {
            key: key.to_string(),
        });
        let fields = HASH_KEYS.iter().flat_map(|key| {
            HASH_FIELDS
                .iter()
                .map(|field| KvCall::HGet {
                    key: key.to_string(),
                    field: field.as_bytes().to_vec(),
                })
                .chain([
                    KvCall::HLen {
                        key: key.to_string(),
                    },
                    KvCall::HGetAll {
                        key: key.to_string(),
                    },
                ])
        });
        let members = SET_KEYS.iter().flat_map(|key| {
            SET_MEMBERS
                .iter()
                .map(|member| KvCall::SIsMember {
                    key: key.to_string(),
                    member: member.as_bytes().to_vec(),
                })
                .chain([
                    KvCall::SCard {
                        key: key.to_string(),
                    },
                    KvCall::SMembers {
                        key: key.to_string(),
                    },
                ])
        });
        // Every replica holds the same deadlines (PEXPIRETIME of a key is
        // one point, which the first read narrows the model to).
        let deadlines = crate::kv::all_keys()
            .into_iter()
            .map(|key| KvCall::PexpireTime {
                key: key.to_string(),
            });
        let calls: Vec<KvCall> = gets.chain(fields).chain(members).chain(deadlines).collect();
        for n in 0..self.nodes.len() {
            let Some(engine) = self.nodes[n].kv.clone() else {
                continue;
            };
            for call in &calls {
                let call = call.clone();
                let args = call.args();
                let clocks = keel_kv::exec::Clocks::read(engine.clock_ms(), (at / 1000) as i64);
                let reply = engine.inspect(|view| keel_kv::keyspace::run(view, &args, clocks));
                let ret = KvRet::of_call(&reply, &call);
                self.kv_history.push(KvOperation {
                    client: SYSTEM_CLIENT - 1 - n as u64,
                    call,
                    invoke: at,
                    ret: Some((at + 1, ret)),
                    read_clock_ms: Some(clocks.ctx.now_ms),
                    display_ms: Some(clocks.display_ms),
                });
                at += 2;
            }
        }
    }

    /// The KV history is linearizable key by key, and no counter lost an
    /// acknowledged INCR (each counter ends at least at the INCRs
    /// acknowledged, at most at those sent).
    fn check_kv(&mut self) {
        if self.kv_clients.is_empty() {
            return;
        }
        // A FLUSHDB resets the counters: their INCRs are then checked by
        // the linearizability check alone.
        let flushed = self.kv_history.iter().any(|op| op.call == KvCall::FlushDb);
        for key in COUNTER_KEYS.into_iter().filter(|_| !flushed) {
            let incrs = |acknowledged: bool| {
                self.kv_history
                    .iter()
                    .filter(|op| op.call == KvCall::Incr { key: key.into() })
                    .filter(|op| !acknowledged || op.ret.is_some())
                    .count() as i64
            };
            let (low, high) = (incrs(true), incrs(false));
            for op in self
                .kv_history
                .iter()
                .filter(|op| op.client > SYSTEM_CLIENT - 64)
            {
                if op.call != (KvCall::Get { key: key.into() }) {
                    continue;
                }
                let value = match &op.ret {
                    Some((_, KvRet::Value(None))) => Some(0),
                    Some((_, KvRet::Value(Some(v)))) => {
                        std::str::from_utf8(v).ok().and_then(|v| v.parse().ok())
                    }
                    _ => None,
                };
                match value {
                    Some(n) if (low..=high).contains(&n) => {}
                    _ => {
                        let failure = format!(
                            "kv: counter {key} ends at {:?} on n{}, {low} INCRs acknowledged, {high} sent: an acknowledged write lost",
                            op.ret,
                            SYSTEM_CLIENT - op.client
                        );
                        self.fail(failure);
                        break;
                    }
                }
            }
        }
        for torn in crate::kv::torn_spanning_reads(&self.kv_history) {
            self.fail(torn);
        }
        for problem in crate::kv::check_scans(&self.kv_scans, &self.kv_history) {
            self.fail(problem);
        }
        self.check_span_keys_end_equal();
        let checked = crate::kv::check(&self.kv_history);
        self.stats.kv_linearizability_undecided += checked.undecided.len() as u64;
        for key in checked.undecided {
            self.note(format!("kv linearizability of {key} unknown"));
        }
        for violation in checked.violations {
            self.fail(format!("kv history is not linearizable: {violation}"));
        }
    }

    /// Every node ends with the SPAN_KEYS equal (all absent, or one
    /// value): every write of them sets all three at once.
    fn check_span_keys_end_equal(&mut self) {
        let mut ends: BTreeMap<u64, Vec<KvRet>> = BTreeMap::new();
        for op in &self.kv_history {
            let final_read = op.client > SYSTEM_CLIENT - 64;
            let span_key = match &op.call {
                KvCall::Get { key } => SPAN_KEYS.contains(&key.as_str()),
                _ => false,
            };
            if let (true, true, Some((_, ret))) = (final_read, span_key, &op.ret) {
                ends.entry(SYSTEM_CLIENT - op.client)
                    .or_default()
                    .push(ret.clone());
            }
        }
        for (node, values) in ends {
            if values.windows(2).any(|w| w[0] != w[1]) {
                self.fail(format!(
                    "kv: n{node} ends with the spanning keys unequal, a write applied in part: {values:?}"
                ));
            }
        }
    }

    // ---- clients -----------------------------------------------------

    fn client_wake(&mut self, client: usize, generation: u64) {
        if self.clients[client].generation != generation || !self.clients[client].pending.is_empty()
        {
            return;
        }
        if self.faults_over {
            return; // no new requests while the cluster settles
        }
        if self.clients[client].session.is_none() {
            return self.open_session(client);
        }
        let node = self.clients[client].node;
        if !self.alive(node) {
            return self.lose_connection(client);
        }
        // Now and then a client pipelines a burst of requests, as real
        // clients do; the node's session queue must keep their order.
        let burst = if self.rng.chance(PIPELINE_BURST_PER_MILLION) {
            self.stats.pipelined_bursts += 1;
            self.rng.between(2, PIPELINE_BURST_MAX)
        } else {
            1
        };
        for _ in 0..burst {
            let data = {
                let c = &mut self.clients[client];
                c.writes += 1;
                format!("c{}-{}", c.id, c.writes).into_bytes()
            };
            match workload::next_step(&mut self.rng, data) {
                Step::Write(call) => self.issue_write(client, call),
                Step::SyncRead { call, watch } => {
                    let watch = self.one_shot_allowed(client, &call, watch);
                    // Its read follows the sync's reply: the burst ends.
                    self.issue_sync(client, call, watch);
                    break;
                }
                Step::LocalRead { call, watch } => {
                    let watch = self.one_shot_allowed(client, &call, watch);
                    self.issue_read(client, call, watch, None);
                }
                Step::Acl(call) => self.issue_acl(client, call),
                Step::Reap(call) => self.issue_reap(client, call),
                Step::AddWatch { path, recursive } => {
                    // One watch per path: no mode changes to model.
                    let c = &self.clients[client];
                    let watched =
                        c.persistent_paths.contains(&path) || c.one_shot_paths.contains(&path);
                    if !watched {
                        self.stats.persistent_watches_added += 1;
                        self.issue_watch(client, path, recursive);
                    }
                }
            }
            if self.clients[client].pending.is_empty() {
                break; // nothing sent (a skipped addWatch)
            }
        }
        if self.clients[client].pending.is_empty() && self.clients[client].generation == generation
        {
            self.wake_later(client);
        }
    }

    fn wake_later(&mut self, client: usize) {
        let generation = self.clients[client].generation;
        let delay = self.rng.between(100, 40_000);
        self.schedule(delay, Ev::ClientWake { client, generation });
    }

    fn next_xid(&mut self, client: usize) -> i32 {
        let c = &mut self.clients[client];
        c.next_xid += 1;
        c.next_xid
    }

    fn open_session(&mut self, client: usize) {
        let node = self.pick_node(client);
        let Some(node) = node else {
            return self.wake_later(client);
        };
        let now_ms = self.now_us / 1000;
        let connection_id = self.connection_id(client);
        let n = self.node(node);
        let session = n.next_session;
        n.next_session += 1;
        let route = Route {
            connection_id,
            outlet: SimOutlet {
                connection_id,
                outbox: n.outbox.clone(),
            },
        };
        let core = n.core.as_mut().expect("picked a live node");
        core.machine().node().register(session, route);
        let create = Txn {
            session_id: session,
            xid: 0,
            time_ms: now_ms as i64,
            auth: Vec::new(),
            op: TxnOp::CreateSession {
                timeout_ms: SESSION_TIMEOUT_MS,
            },
        };
        core.propose(create.encode());
        let c = &mut self.clients[client];
        c.node = node;
        c.session = Some(session);
        c.watches.clear();
        c.persistent_paths.clear();
        c.one_shot_paths.clear();
        c.last_event_zxid = 0;
        c.conn = RequestFifo::new(PENDING_REQUESTS_MAX);
        c.conn_auth.clear();
        c.stash = Stash::default();
        c.pending.push_back(Pending {
            xid: 0,
            kind: PendingKind::CreateSession,
            history: None,
        });
        self.note(format!("c{client} opens session {session:#x} on n{node}"));
        self.arm_timeout(client, 0);
        self.request_advance(node);
    }

    /// A live node that has seen at least what the client has seen.
    fn pick_node(&mut self, client: usize) -> Option<u64> {
        let last_zxid = self.clients[client].last_zxid;
        let candidates: Vec<u64> = (1..=self.nodes.len() as u64)
            .filter(|&id| {
                self.serves(id)
                    && self.nodes[(id - 1) as usize]
                        .core
                        .as_ref()
                        .is_some_and(|core| core.machine().node().last_zxid() >= last_zxid)
            })
            .collect();
        if candidates.is_empty() {
            return None;
        }
        Some(*self.rng.pick(&candidates))
    }

    fn arm_timeout(&mut self, client: usize, xid: i32) {
        let generation = self.clients[client].generation;
        self.schedule(
            OP_TIMEOUT_MS * 1000,
            Ev::ClientTimeout {
                client,
                generation,
                xid,
            },
        );
    }

    fn issue_write(&mut self, client: usize, call: Call) {
        let xid = self.next_xid(client);
        let (node, session) = {
            let c = &self.clients[client];
            (c.node, c.session.expect("has a session"))
        };
        let op = match workload::write_request(&call) {
            Some(request) => {
                let mut body = Vec::new();
                request.encode(&mut body);
                TxnOp::Request {
                    op_code: request.op_code(),
                    body,
                }
            }
            None => TxnOp::CloseSession,
        };
        self.note(format!("c{client} {session:#x} xid {xid} invoke {call:?}"));
        let history = self.history.len();
        self.history.push(Operation {
            client: client as u64,
            session,
            call,
            invoke: self.now_us,
            ret: None,
        });
        self.clients[client].pending.push_back(Pending {
            xid,
            kind: PendingKind::Write,
            history: Some(history),
        });
        self.arm_timeout(client, xid);
        let _ = node;
        self.submit(client, Queued::Write { xid, op });
    }

    fn issue_sync(&mut self, client: usize, call: Call, watch: bool) {
        let xid = self.next_xid(client);
        let (node, session) = {
            let c = &self.clients[client];
            (c.node, c.session.expect("has a session"))
        };
        self.note(format!("c{client} {session:#x} xid {xid} sync+{call:?}"));
        let history = self.history.len();
        self.history.push(Operation {
            client: client as u64,
            session,
            call: call.clone(),
            invoke: self.now_us,
            ret: None,
        });
        self.clients[client].pending.push_back(Pending {
            xid,
            kind: PendingKind::Sync { call, watch },
            history: Some(history),
        });
        let _ = node;
        let context = SyncContext {
            session_id: session,
            xid,
            path: String::new(),
        }
        .encode();
        self.arm_timeout(client, xid);
        self.submit(client, Queued::Sync { xid, context });
    }

    /// A read request (recorded in the history when `history` is set).
    fn issue_read(&mut self, client: usize, call: Call, watch: bool, history: Option<usize>) {
        let xid = self.next_xid(client);
        self.clients[client].pending.push_back(Pending {
            xid,
            kind: PendingKind::Read,
            history,
        });
        self.arm_timeout(client, xid);
        let request = Queued::Read {
            xid,
            call,
            watch,
            history,
        };
        if self.options.reads_skip_queue {
            return self.execute(client, request); // the planted bug
        }
        self.submit(client, request);
    }

    /// A request reaches the node's side of the connection: it runs now
    /// or waits in the session's queue, exactly as in `conn.rs`.
    fn submit(&mut self, client: usize, request: Queued) {
        let lane = request.lane();
        let c = &mut self.clients[client];
        assert!(
            c.conn.accepting(),
            "bursts stay far below the queue's bound"
        );
        if let Some(request) = c.conn.arrive(request, lane) {
            self.execute(client, request);
        }
        self.run_waiting(client);
    }

    fn run_waiting(&mut self, client: usize) {
        while let Some(request) = self.clients[client].conn.next_ready() {
            self.execute(client, request);
        }
    }

    /// Runs a request whose turn came: writes and sync go to the log (and
    /// fly), reads are answered from the node's tree.
    fn execute(&mut self, client: usize, request: Queued) {
        let node = self.clients[client].node;
        let now_us = self.now_us;
        match request {
            Queued::Write { xid, op } => {
                // As conn.rs: the transaction carries the connection's
                // identities and the time when the request runs.
                let c = &self.clients[client];
                let txn = Txn {
                    session_id: c.session.expect("has a session"),
                    xid,
                    time_ms: (now_us / 1000) as i64,
                    auth: c.conn_auth.clone(),
                    op,
                };
                let core = self.node(node).core.as_mut().expect("checked alive");
                core.propose(txn.encode());
                self.clients[client].conn.started(xid, now_us);
                self.request_advance(node);
            }
            Queued::Auth { body } => self.authenticate(client, node, &body),
            Queued::Sync { xid, context } => {
                let core = self.node(node).core.as_mut().expect("checked alive");
                core.read_index(context);
                self.clients[client].conn.started(xid, now_us);
                self.request_advance(node);
            }
            Queued::Read {
                xid,
                call,
                watch,
                history,
            } => self.local_read(client, xid, &call, watch, history),
            Queued::Watch {
                xid,
                path,
                recursive,
            } => self.add_watch(client, xid, &path, recursive),
            Queued::AclRead { xid, call } => self.acl_read(client, xid, &call),
        }
    }

    /// addauth on a new connection, before anything else the client sends
    /// on it (ZooKeeper's client re-sends its credentials at every
    /// connect): through the session's queue, as `conn.rs` takes it.
    fn issue_auth(&mut self, client: usize) {
        if !self.clients[client].authenticates || self.clients[client].session.is_none() {
            return;
        }
        let xid = keel_jute::xid::AUTH;
        self.clients[client].pending.push_back(Pending {
            xid,
            kind: PendingKind::Auth,
            history: None,
        });
        self.arm_timeout(client, xid);
        let body = workload::acl_user_auth_packet();
        self.submit(client, Queued::Auth { body });
    }

    /// The node's side of the connection runs addauth (the server's own
    /// `add_auth`) and answers at once.
    fn authenticate(&mut self, client: usize, node: u64, body: &[u8]) {
        let answer = add_auth(&mut self.clients[client].conn_auth, body, None);
        if answer != AuthAnswer::Added {
            self.fail(format!(
                "c{client}: addauth of {} answered {answer:?}",
                workload::ACL_USER
            ));
        }
        let last_zxid = self.node(node).core.as_ref().expect("checked alive");
        let (zxid, _) = answer.reply(last_zxid.machine().node().last_zxid());
        let xid = keel_jute::xid::AUTH;
        self.reply_after_events(client, node, (xid, zxid, true), Vec::new(), None);
    }

    /// A request under ACL_ROOT: a write through the log, a read here;
    /// neither is recorded in the history (the model knows no ACLs), both
    /// are checked against the client's identity (`check_acl`).
    fn issue_acl(&mut self, client: usize, call: AclCall) {
        self.stats.acl_requests += 1;
        let xid = self.next_xid(client);
        self.arm_timeout(client, xid);
        if let AclCall::GetData { .. } = call {
            self.clients[client].pending.push_back(Pending {
                xid,
                kind: PendingKind::Read,
                history: None,
            });
            return self.submit(client, Queued::AclRead { xid, call });
        }
        let session = self.clients[client].session.expect("has a session");
        let request = workload::acl_request(&call, format!("c{client}-{xid}").as_bytes());
        self.note(format!("c{client} {session:#x} xid {xid} acl {call:?}"));
        self.write_outside_history(client, xid, PendingKind::AclWrite { call }, &request);
    }

    /// A write whose reply is only noted (not in the linearizability
    /// history): queued as pending, then sent through the log.
    fn write_outside_history(
        &mut self,
        client: usize,
        xid: i32,
        kind: PendingKind,
        request: &Request,
    ) {
        self.clients[client].pending.push_back(Pending {
            xid,
            kind,
            history: None,
        });
        let op = request_op(request);
        self.submit(client, Queued::Write { xid, op });
    }

    /// A write under REAP_ROOT: through the log, not in the history (the
    /// model knows no deletions by the reaper); its reply is only noted.
    fn issue_reap(&mut self, client: usize, call: ReapCall) {
        self.stats.reap_requests += 1;
        let xid = self.next_xid(client);
        self.arm_timeout(client, xid);
        let session = self.clients[client].session.expect("has a session");
        let request = workload::reap_request(&call, format!("c{client}-{xid}").as_bytes());
        self.note(format!("c{client} {session:#x} xid {xid} {call:?}"));
        self.write_outside_history(client, xid, PendingKind::ReapWrite { call }, &request);
    }

    fn acl_read(&mut self, client: usize, xid: i32, call: &AclCall) {
        let (node, session) = {
            let c = &self.clients[client];
            (c.node, c.session.expect("has a session"))
        };
        let auth = self.clients[client].conn_auth.clone();
        let request = workload::acl_request(call, b"");
        let core = self.node(node).core.as_mut().expect("checked alive");
        let outcome = core.machine().node().read(session, &auth, &request);
        self.check_acl(client, call, &outcome.result);
        self.reply_after_events(client, node, outcome_key(xid, &outcome), Vec::new(), None);
    }

    /// Only ACL_USER may use the nodes under ACL_ROOT (anyone may create
    /// ACL_ROOT itself: its parent is open): an authenticated client is
    /// never refused with NoAuth, and any other never succeeds.
    fn check_acl(
        &mut self,
        client: usize,
        call: &AclCall,
        result: &Result<keel_jute::Response, ErrorCode>,
    ) {
        let authenticated = self.clients[client].authenticates;
        let creates_root = matches!(call, AclCall::Create { path } if path == workload::ACL_ROOT);
        self.note(format!(
            "c{client} acl {call:?} -> {:?}",
            result.as_ref().err()
        ));
        if authenticated && *result == Err(ErrorCode::NoAuth) {
            self.fail(format!(
                "c{client} (authenticated) refused {call:?} with NoAuth"
            ));
        } else if !authenticated && result.is_ok() && !creates_root {
            self.fail(format!(
                "c{client} (not authenticated) allowed {call:?}: ACL bypassed"
            ));
        }
    }

    /// addWatch on the client's node: the server's own `Node::read`.
    fn add_watch(&mut self, client: usize, xid: i32, path: &str, recursive: bool) {
        let (node, session) = {
            let c = &self.clients[client];
            (c.node, c.session.expect("has a session"))
        };
        let request = workload::add_watch_request(path, recursive);
        let auth = self.clients[client].conn_auth.clone();
        let core = self.node(node).core.as_mut().expect("checked alive");
        let outcome = core.machine().node().read(session, &auth, &request);
        self.note(format!(
            "c{client} addWatch {path} recursive={recursive} at {:#x} -> {:?}",
            outcome.zxid,
            outcome.result.is_ok()
        ));
        let key = outcome_key(xid, &outcome);
        self.reply_after_events(client, node, key, outcome.watches, None);
    }

    /// A persistent watch of this client on `path` (a one-shot watch set
    /// on the same path would turn it one-shot, as in ZooKeeper 3.8; the
    /// clients here do not mix the two).
    fn watches_persistently(&self, client: usize, path: &str) -> bool {
        self.clients[client].persistent_paths.contains(path)
    }

    /// Whether the read may set the one-shot watch it asks for; records
    /// the path if so.
    fn one_shot_allowed(&mut self, client: usize, call: &Call, watch: bool) -> bool {
        let Some(path) = call.path() else {
            return watch;
        };
        if !watch || self.watches_persistently(client, path) {
            return false;
        }
        self.clients[client].one_shot_paths.insert(path.to_string());
        true
    }

    fn issue_watch(&mut self, client: usize, path: String, recursive: bool) {
        self.clients[client].persistent_paths.insert(path.clone());
        let xid = self.next_xid(client);
        self.clients[client].pending.push_back(Pending {
            xid,
            kind: PendingKind::Read,
            history: None,
        });
        self.arm_timeout(client, xid);
        self.submit(
            client,
            Queued::Watch {
                xid,
                path,
                recursive,
            },
        );
    }

    /// Runs a read on the client's node now, registering its watches as
    /// the server does under its tree lock; the reply travels behind what
    /// the node queued for the client before (see `read_done`).
    fn local_read(
        &mut self,
        client: usize,
        xid: i32,
        call: &Call,
        watch: bool,
        history: Option<usize>,
    ) {
        let (node, session) = {
            let c = &self.clients[client];
            (c.node, c.session.expect("has a session"))
        };
        let request: Request = workload::read_request(call, watch);
        let auth = self.clients[client].conn_auth.clone();
        let core = self.node(node).core.as_mut().expect("checked alive");
        // The server's own local read: its watches registered under the
        // same lock, with the session's identities (none here).
        let outcome = core.machine().node().read(session, &auth, &request);
        let zxid = outcome.zxid;
        let ret = workload::ret_of(call, &outcome.result);
        self.note(format!("c{client} read {call:?} at {zxid:#x} -> {ret:?}"));
        self.reply_after_events(
            client,
            node,
            outcome_key(xid, &outcome),
            outcome.watches,
            history.map(|at| (at, ret)),
        );
    }

    /// As conn.rs's `send_events_up_to`: events the node queued for this
    /// connection up to the read's zxid go out before its reply.
    fn reply_after_events(
        &mut self,
        client: usize,
        node: u64,
        (xid, zxid, shows_state): (i32, i64, bool),
        watches: Vec<(String, WatchKind)>,
        recorded: Option<(usize, Ret)>,
    ) {
        self.take_outbox(node);
        let generation = self.clients[client].generation;
        let Some(events) = self.clients[client].stash.events_before_reply(zxid) else {
            // The node closed the connection meanwhile: the read goes
            // unanswered, and the Close in the stash reaches the client.
            return self.note(format!(
                "c{client} xid {xid} unanswered: its connection closes"
            ));
        };
        for (event_zxid, event) in events {
            let at_us = self.fifo_slot(client, 100);
            self.seq += 1;
            self.queue.insert(
                (at_us, self.seq),
                Ev::ToClient {
                    client,
                    generation,
                    out: ToClient::Event {
                        zxid: event_zxid,
                        event,
                    },
                },
            );
        }
        let at_us = self.fifo_slot(client, 100);
        self.seq += 1;
        self.queue.insert(
            (at_us, self.seq),
            Ev::ReadDone {
                client,
                generation,
                xid,
                zxid,
                shows_state,
                watches,
                recorded,
            },
        );
    }

    /// The arrival time of a new message for `client`, no earlier than
    /// those already on their way.
    fn fifo_slot(&mut self, client: usize, after_us: u64) -> u64 {
        let c = &mut self.clients[client];
        let at_us = (self.now_us + after_us).max(c.fifo_us);
        c.fifo_us = at_us;
        at_us
    }

    fn read_done(
        &mut self,
        client: usize,
        generation: u64,
        (xid, zxid, shows_state): (i32, i64, bool),
        watches: Vec<(String, WatchKind)>,
        recorded: Option<(usize, Ret)>,
    ) {
        if self.clients[client].generation != generation {
            return; // the connection died before the reply arrived
        }
        if !self.answered_in_order(client, xid) {
            return;
        }
        let pending = self.clients[client].pending.pop_front().expect("checked");
        if shows_state && !matches!(pending.kind, PendingKind::Auth) {
            // (auth is answered at zxid 0, which clients do not count)
            self.response_seen(client, zxid);
        }
        for (path, kind) in watches {
            // The client library keeps one watch per path and kind; the
            // first registration is the one a later change must fire.
            let c = &mut self.clients[client];
            if !c.watches.iter().any(|w| w.path == path && w.kind == kind) {
                c.watches.push(WatchRecord { path, kind, zxid });
            }
        }
        if let Some((at, ret)) = recorded {
            self.history[at].ret = Some((self.now_us.max(self.history[at].invoke + 1), ret));
        }
        if self.clients[client].pending.is_empty() {
            self.wake_later(client);
        }
    }

    /// The session-order check: a session's replies arrive in the order
    /// its requests were sent (ZooKeeper's FIFO client order).
    fn answered_in_order(&mut self, client: usize, xid: i32) -> bool {
        let first = self.clients[client].pending.front().map(|p| p.xid);
        if first == Some(xid) {
            return true;
        }
        self.fail(format!(
            "c{client}: reply to xid {xid} while {first:?} was sent before it: session order broken"
        ));
        false
    }

    fn client_timeout(&mut self, client: usize, generation: u64, xid: i32) {
        let c = &self.clients[client];
        if c.generation != generation || !c.pending.iter().any(|p| p.xid == xid) {
            return;
        }
        self.note(format!("c{client} xid {xid} timed out"));
        self.lose_connection(client);
    }

    /// The connection is gone (node crash, timeout, dropped proposal): the
    /// pending request's outcome is unknown; the client reconnects, to
    /// another node, with the same session, and sets its watches again.
    fn lose_connection(&mut self, client: usize) {
        let old_node = self.clients[client].node;
        let session = self.clients[client].session;
        if let (Some(session), true) = (session, self.alive(old_node)) {
            let connection_id = self.connection_id(client);
            let core = self.node(old_node).core.as_ref().expect("alive");
            core.machine().node().disconnect(session, connection_id);
        }
        let c = &mut self.clients[client];
        c.generation += 1;
        c.conn = RequestFifo::new(PENDING_REQUESTS_MAX);
        c.conn_auth.clear();
        c.stash = Stash::default();
        for pending in std::mem::take(&mut c.pending) {
            if matches!(pending.kind, PendingKind::CreateSession) {
                c.session = None; // it may or may not exist: start afresh
            }
            if pending.history.is_some() {
                self.stats.unknown_outcomes += 1;
            }
        }
        let generation = c.generation;
        let delay = self.rng.between(50_000, 1_000_000);
        self.schedule(delay, Ev::ClientWake { client, generation });
        if self.clients[client].session.is_some() {
            self.reconnect(client);
        }
    }

    /// Moves the session to another live node that has seen what the
    /// client has seen; setWatches re-registers watches, firing the ones
    /// whose paths changed since the client's last zxid.
    fn reconnect(&mut self, client: usize) {
        let Some(node) = self.pick_node(client) else {
            self.clients[client].session = None; // nobody to take it: start over
            return;
        };
        let session = self.clients[client].session.expect("has a session");
        let last_zxid = self.clients[client].last_zxid;
        let watches = std::mem::take(&mut self.clients[client].watches);
        self.clients[client].node = node;
        let connection_id = self.connection_id(client);
        let n = self.node(node);
        let route = Route {
            connection_id,
            outlet: SimOutlet {
                connection_id,
                outbox: n.outbox.clone(),
            },
        };
        let handle = n
            .core
            .as_ref()
            .expect("picked alive")
            .machine()
            .node()
            .clone();
        let password = keel_session::session_password(session, SESSION_SECRET);
        // The server's own session move, then setWatches as the client
        // library sends it right after.
        if !handle.resume(session, &password, route) {
            self.note(format!(
                "c{client} session {session:#x} expired (seen on n{node})"
            ));
            self.clients[client].session = None;
            return self.route_outs(node, 0);
        }
        let list = |kinds: &[WatchKind]| -> Vec<String> {
            watches
                .iter()
                .filter(|w| kinds.contains(&w.kind))
                .map(|w| w.path.clone())
                .collect()
        };
        // The Java client sends setWatches2 when it holds persistent
        // watches, setWatches otherwise.
        let persistent = list(&[WatchKind::Persistent]);
        let recursive = list(&[WatchKind::PersistentRecursive]);
        let set_watches = if persistent.is_empty() && recursive.is_empty() {
            Request::SetWatches(SetWatches {
                relative_zxid: last_zxid,
                data_watches: list(&[WatchKind::Data]),
                exist_watches: list(&[WatchKind::Exist]),
                child_watches: list(&[WatchKind::Child]),
            })
        } else {
            Request::SetWatches2(keel_jute::SetWatches2 {
                relative_zxid: last_zxid,
                data_watches: list(&[WatchKind::Data]),
                exist_watches: list(&[WatchKind::Exist]),
                child_watches: list(&[WatchKind::Child]),
                persistent_watches: persistent,
                persistent_recursive_watches: recursive,
            })
        };
        let auth = self.clients[client].conn_auth.clone();
        let read = handle.read(session, &auth, &set_watches);
        let (fired, kept, zxid) = (read.fired, read.watches, read.zxid);
        self.note(format!(
            "c{client} session {session:#x} moves to n{node}: {} watches fire, {} kept",
            fired.len(),
            kept.len()
        ));
        let generation = self.clients[client].generation;
        let c = &mut self.clients[client];
        // The setWatches reply's header carries the node's zxid, which the
        // client library takes as its last seen (ZooKeeper's ClientCnxn
        // does for every reply): a later move must find a node as far.
        c.last_zxid = c.last_zxid.max(zxid);
        c.watches = kept
            .into_iter()
            .map(|(path, kind)| WatchRecord { path, kind, zxid })
            .collect();
        c.watches.extend(
            watches
                .iter()
                .filter(|w| fired.iter().any(|e| e.path == w.path))
                .cloned(),
        );
        for event in fired {
            self.schedule(
                1,
                Ev::ToClient {
                    client,
                    generation,
                    out: ToClient::Event { zxid, event },
                },
            );
        }
        self.route_outs(node, 0);
        self.issue_auth(client);
    }

    /// The id of the client's current connection in the nodes' reply
    /// registries: one per client and generation.
    fn connection_id(&self, client: usize) -> u64 {
        ((client as u64) << 32) | (self.clients[client].generation & 0xffff_ffff)
    }

    /// Moves what `node` queued for client connections to each client's
    /// stash (messages for a connection that is gone are lost with it);
    /// returns the clients that got some, in order.
    fn take_outbox(&mut self, node: u64) -> Vec<usize> {
        let deliveries = std::mem::take(&mut *self.node(node).outbox.lock());
        let mut touched = Vec::new();
        for delivery in deliveries {
            let Some(client) =
                (0..self.clients.len()).find(|&c| self.connection_id(c) == delivery.connection_id)
            else {
                continue;
            };
            if self.clients[client].node != node {
                continue;
            }
            self.clients[client].stash.push(delivery.message);
            if !touched.contains(&client) {
                touched.push(client);
            }
        }
        touched
    }

    /// The node's side of each connection handles what the node queued
    /// for it, as `conn.rs` does: replies pass the session's queue
    /// (replies of earlier connections are dropped there) and free what
    /// waited behind them; everything goes to the client in order.
    fn route_outs(&mut self, node: u64, after_us: u64) {
        for client in self.take_outbox(node) {
            while let Some(message) = self.clients[client].stash.pop() {
                self.connection_handles(client, message, after_us);
            }
        }
    }

    fn connection_handles(&mut self, client: usize, message: ToClient, after_us: u64) {
        let (reply_xid, op_code) = match &message {
            ToClient::Reply { xid, op_code, .. } => (Some(*xid), *op_code),
            _ => (None, 0),
        };
        let handshaking = matches!(
            self.clients[client].pending.front(),
            Some(Pending {
                kind: PendingKind::CreateSession,
                ..
            })
        );
        let answered = match reply_xid {
            Some(xid) if !handshaking => match self.clients[client].conn.complete(xid, op_code) {
                Ok(Completed::Done { answer, .. }) => {
                    assert!(answer, "the simulated clients send no check alone");
                    true
                }
                Ok(Completed::Foreign) => {
                    return self.note(format!(
                        "c{client}: reply to xid {xid} of an earlier connection dropped"
                    ));
                }
                Err(error) => return self.fail(format!("c{client}: {error}")),
            },
            _ => false,
        };
        let generation = self.clients[client].generation;
        let at_us = self.fifo_slot(client, after_us + 100);
        self.seq += 1;
        self.queue.insert(
            (at_us, self.seq),
            Ev::ToClient {
                client,
                generation,
                out: message,
            },
        );
        if answered {
            // What waited behind the answered request may run now; a
            // read's reply goes out behind this one. (After closeSession
            // the session's queue is closed: nothing runs.)
            self.run_waiting(client);
        }
    }

    fn client_receives(&mut self, client: usize, generation: u64, out: ToClient) {
        if self.clients[client].generation != generation {
            return;
        }
        match out {
            ToClient::Reply {
                xid,
                op_code: opcode::SYNC,
                ..
            } => self.sync_ready(client, xid),
            ToClient::Reply {
                xid, zxid, result, ..
            } => self.reply(client, xid, zxid, result),
            ToClient::Event { zxid, event } => self.watch_event(client, zxid, event),
            ToClient::Close {
                reason: CloseReason::SessionClosed,
            } => {
                self.note(format!("c{client} session closed"));
                let c = &mut self.clients[client];
                c.session = None;
                c.watches.clear();
                c.persistent_paths.clear();
                c.one_shot_paths.clear();
                c.generation += 1;
                c.conn = RequestFifo::new(PENDING_REQUESTS_MAX);
                c.conn_auth.clear();
                c.stash = Stash::default();
                for pending in std::mem::take(&mut c.pending) {
                    if pending.history.is_some() {
                        self.stats.unknown_outcomes += 1;
                    }
                }
                let generation = self.clients[client].generation;
                self.schedule(10_000, Ev::ClientWake { client, generation });
            }
            ToClient::Close { reason } => {
                self.note(format!("c{client} connection closed: {reason}"));
                self.lose_connection(client);
            }
        }
    }

    fn reply(
        &mut self,
        client: usize,
        xid: i32,
        zxid: i64,
        result: Result<keel_jute::Response, ErrorCode>,
    ) {
        // Replies of earlier connections were dropped by the node's side
        // of the connection (`route_outs`); what is left must come in order.
        if !self.answered_in_order(client, xid) {
            return;
        }
        let pending = self.clients[client].pending.pop_front().expect("checked");
        self.response_seen(client, zxid);
        match pending.kind {
            PendingKind::CreateSession => {
                if result.is_err() {
                    self.clients[client].session = None;
                }
                self.note(format!("c{client} session ready: {:?}", result.is_ok()));
                if result.is_ok() {
                    self.issue_auth(client);
                }
            }
            PendingKind::Write => {
                let at = pending.history.expect("writes are recorded");
                let ret = workload::ret_of(&self.history[at].call, &result);
                self.note(format!("c{client} xid {xid} zxid {zxid:#x} -> {ret:?}"));
                if !matches!(ret, Ret::Error(_)) {
                    self.stats.acknowledged_writes += 1;
                }
                self.history[at].ret = Some((self.now_us.max(self.history[at].invoke + 1), ret));
            }
            PendingKind::AclWrite { call } => self.check_acl(client, &call, &result),
            PendingKind::ReapWrite { call } => {
                let outcome = result.as_ref().err();
                self.note(format!("c{client} {call:?} -> {outcome:?}"));
            }
            PendingKind::Sync { .. } | PendingKind::Read | PendingKind::Auth => {
                return self.fail(format!("c{client}: xid {xid} answered as a write"));
            }
        }
        if self.clients[client].pending.is_empty() {
            self.wake_later(client);
        }
    }

    fn sync_ready(&mut self, client: usize, xid: i32) {
        if !self.answered_in_order(client, xid) {
            return;
        }
        let pending = self.clients[client].pending.pop_front().expect("checked");
        let PendingKind::Sync { call, watch } = pending.kind else {
            return self.fail(format!("c{client}: sync {xid} passed for a write"));
        };
        let at = pending.history.expect("synced reads are recorded");
        // The client sends the read once the sync is answered.
        self.issue_read(client, call, watch, Some(at));
    }

    /// A response at `zxid`: the session never goes back in time, and
    /// every watch it holds whose path changed at or before `zxid` must
    /// already have fired.
    fn response_seen(&mut self, client: usize, zxid: i64) {
        let c = &self.clients[client];
        if zxid < c.last_zxid {
            let message = format!(
                "c{client}: response at zxid {zxid:#x} after one at {:#x}: session went back in time",
                c.last_zxid
            );
            return self.fail(message);
        }
        let mut missed = Vec::new();
        for watch in c.watches.iter().filter(|w| w.zxid < zxid) {
            let changes = self.events.range(watch.zxid + 1..=zxid);
            for (at, events) in changes {
                if events.iter().any(|e| fires(watch, e)) {
                    missed.push(format!(
                        "{:?} watch on {} set at {:#x} not fired before a response at {zxid:#x} (change at {at:#x})",
                        watch.kind, watch.path, watch.zxid
                    ));
                    break;
                }
            }
        }
        self.clients[client].last_zxid = zxid;
        for problem in missed {
            self.fail(format!("c{client}: {problem}"));
        }
    }

    fn watch_event(&mut self, client: usize, zxid: i64, event: Event) {
        self.stats.watch_events += 1;
        let c = &mut self.clients[client];
        let before = c.watches.len();
        let last_event = c.last_event_zxid;
        let mut early = None;
        let mut persistent_hits = 0;
        c.watches.retain_mut(|w| {
            let hit = fires(w, &event);
            let persistent = matches!(
                w.kind,
                WatchKind::Persistent | WatchKind::PersistentRecursive
            );
            // A persistent watch may fire several times at one zxid (a
            // multi); a one-shot watch fires for changes after it was set.
            if hit && (zxid < w.zxid || (zxid == w.zxid && !persistent)) {
                early = Some(w.zxid);
            }
            if hit && persistent {
                persistent_hits += 1;
                w.zxid = w.zxid.max(zxid);
            }
            !hit || persistent
        });
        let fired = before - c.watches.len() + persistent_hits;
        c.last_event_zxid = zxid;
        // A client reconnects only to a server that has seen what it has,
        // events included.
        c.last_zxid = c.last_zxid.max(zxid);
        let repeat = (event.path.clone(), event.event_type, zxid);
        let seen = c.recent_events.contains(&repeat);
        if fired > 0 {
            if c.recent_events.len() >= RECENT_EVENTS_KEPT {
                c.recent_events.pop_front();
            }
            c.recent_events.push_back(repeat);
        }
        self.note(format!(
            "c{client} event {:?} {} at {zxid:#x}",
            event.event_type, event.path
        ));
        if fired == 0 && seen {
            // ZooKeeper's setWatches answers a deleted path once per watch
            // table (data, child); the client library drops the second.
            self.note(format!(
                "c{client}: repeated {:?} on {} dropped by the client",
                event.event_type, event.path
            ));
        } else if fired == 0 {
            self.fail(format!(
                "c{client}: event {:?} on {} at {zxid:#x} without a watch (delivered twice?)",
                event.event_type, event.path
            ));
        }
        if zxid < last_event {
            self.fail(format!(
                "c{client}: event at {zxid:#x} after an event at {last_event:#x}: out of zxid order"
            ));
        }
        if let Some(set_at) = early {
            self.fail(format!(
                "c{client}: event on {} at {zxid:#x} for a watch set at {set_at:#x}",
                event.path
            ));
        }
    }

    // ---- end of run --------------------------------------------------

    fn finish(mut self) -> Report {
        if let Some((id, _)) = self.joiner() {
            self.stats.joined += u64::from(self.joined(id));
        }
        self.check_join();
        self.check_convergence();
        self.check_reaped_after_settle();
        self.check_affinity();
        self.final_reads();
        self.check_linearizable();
        self.kv_final_reads();
        self.check_kv();
        self.check_kv_expired_after_settle();
        self.stats.operations = self.history.len();
        self.stats.kv_operations = self.kv_history.len();
        let mut fingerprint = self.fingerprint;
        for node in &self.nodes {
            if let Some(core) = &node.core {
                fnv(
                    &mut fingerprint,
                    &core.machine().node().tree().digest().to_be_bytes(),
                );
            }
        }
        Report {
            seed: self.options.seed,
            failures: self.failures,
            stats: self.stats,
            fingerprint,
            trace: self.trace,
            history: self.history,
            kv_history: self.kv_history,
        }
    }

    /// Healed and quiet for SETTLE_MS: every node has applied the same
    /// entries and holds the same tree.
    /// After the healed, quiet settle, the preferred member leads (the
    /// leader hands over once it is caught up and active).
    fn check_affinity(&mut self) {
        let Some(preferred) = self.options.preferred_leader else {
            return;
        };
        let leaders: Vec<(u64, u64)> = self
            .nodes
            .iter()
            .filter_map(|n| {
                n.core
                    .as_ref()
                    .filter(|c| c.is_leader())
                    .map(|c| (c.term(), n.id))
            })
            .collect();
        let Some(&(term, leader)) = leaders.iter().max() else {
            return self.fail("no leader after settling".into());
        };
        if leader != preferred {
            self.fail(format!(
                "leader affinity: n{leader} leads term {term} after settling, preferred n{preferred}"
            ));
        }
    }

    /// After the settle every serving node's configuration holds the
    /// joiner and not the member it replaced (the operator asked until
    /// then); the replaced node, out of the configuration, is stopped as
    /// an operator stops a removed server, and the checks after this one
    /// look at the members only.
    fn check_join(&mut self) {
        let Some((joiner, _)) = self.joiner() else {
            return;
        };
        // The replaced node may not know it is out (the change committed
        // while it was cut off, and a leader sends nothing to a
        // non-member): the others' configurations decide.
        let serving: Vec<u64> = (1..=self.nodes.len() as u64)
            .filter(|&id| self.serves(id) && Some(id) != self.replaced)
            .collect();
        let mut replaced_out = true;
        for id in serving {
            let core = self.nodes[(id - 1) as usize].core.as_ref().expect("serves");
            let members: Vec<u64> = core.membership().members.keys().copied().collect();
            let replaced_in = self.replaced.is_some_and(|r| members.contains(&r));
            replaced_out &= !replaced_in;
            if !members.contains(&joiner) || replaced_in {
                self.fail(format!(
                    "the join did not complete: n{id}'s configuration is {members:?} after the settle (joiner n{joiner}, replacing {:?})",
                    self.replaced
                ));
            }
        }
        if let Some(replaced) = self.replaced.filter(|_| replaced_out) {
            let node = self.node(replaced);
            if node.core.is_some() {
                node.core = None;
                node.kv = None;
                node.epoch += 1;
                self.note(format!("n{replaced} removed: stopped"));
            }
        }
    }

    fn check_convergence(&mut self) {
        let states: Vec<(u64, u64, u64)> = self
            .nodes
            .iter()
            .filter_map(|n| {
                n.core
                    .as_ref()
                    .map(|c| (n.id, c.applied(), node_digest(n, c)))
            })
            .collect();
        let stopped = usize::from(self.replaced.is_some_and(|r| !self.alive(r)));
        if states.len() + stopped != self.nodes.len() {
            return self.fail("a node is down after the settle period".into());
        }
        let (first_id, first_applied, first_digest) = states[0];
        for &(id, applied, digest) in &states[1..] {
            if applied != first_applied || digest != first_digest {
                self.fail(format!(
                    "no convergence after {SETTLE_MS} ms quiet: n{first_id} applied {first_applied} digest {first_digest:#x}, n{id} applied {applied} digest {digest:#x}"
                ));
            }
        }
    }

    /// After the quiet settle the reaper has caught up: no container that
    /// had a child is empty, and no TTL node has outlived its TTL, for
    /// longer than REAP_LATE_AFTER_MS.
    fn check_reaped_after_settle(&mut self) {
        // Every replica's TTL clock holds exactly its tree's TTL nodes at
        // their last change: the reaper never lacks a node's age.
        let problems: Vec<String> = self
            .nodes
            .iter()
            .filter_map(|n| {
                let node = n.core.as_ref()?.machine().node();
                let covered = node.with_tree_and_ttl_clock(|tree, clock| clock.check_covers(tree));
                covered.err().map(|problem| format!("n{}: {problem}", n.id))
            })
            .collect();
        for problem in problems {
            self.fail(problem);
        }
        let Some(tree) = self
            .nodes
            .iter()
            .find_map(|n| n.core.as_ref().map(|c| c.machine().node().tree().clone()))
        else {
            return;
        };
        let now_ms = self.now_us / 1000;
        let children = tree.node(workload::REAP_ROOT).map(|n| n.children);
        for name in children.unwrap_or_default() {
            let path = format!("{}/{name}", workload::REAP_ROOT);
            let node = tree.node(&path).expect("a listed child exists");
            if !node.children.is_empty() {
                continue;
            }
            let due_ms = match owner_kind(node.stat.ephemeral_owner) {
                // Due since its last child went (that deletion's zxid).
                OwnerKind::Container if node.stat.cversion > 0 => {
                    let at_us = self.applied_at_us.get(&node.stat.pzxid);
                    at_us.map_or(0, |us| us / 1000)
                }
                OwnerKind::Ttl(ttl_ms) => (node.stat.mtime + ttl_ms).max(0) as u64,
                _ => continue,
            };
            let late_ms = now_ms.saturating_sub(due_ms);
            if late_ms > REAP_LATE_AFTER_MS {
                self.fail(format!(
                    "reaper: {path} due since {due_ms} ms is still there at {now_ms} ms"
                ));
            }
        }
    }

    /// Reads of every path after everything else, from the converged
    /// tree: an acknowledged write that was lost shows up here.
    fn final_reads(&mut self) {
        let Some(tree) = self
            .nodes
            .iter()
            .find_map(|n| n.core.as_ref().map(|c| c.machine().node().tree().clone()))
        else {
            return;
        };
        let mut at = self.now_us + 1_000;
        let mut calls: Vec<Call> = Vec::new();
        for path in workload::paths() {
            calls.push(Call::GetData { path: path.clone() });
        }
        for group in workload::GROUPS {
            calls.push(Call::GetChildren {
                path: group.to_string(),
            });
        }
        for call in calls {
            let request = workload::read_request(&call, false);
            let outcome = tree.read(&request, 0, &[]).expect("a tree read");
            let ret = workload::ret_of(&call, &outcome.result);
            self.history.push(Operation {
                client: SYSTEM_CLIENT - 1,
                session: 0,
                call,
                invoke: at,
                ret: Some((at + 1, ret)),
            });
            at += 2;
        }
    }

    fn check_linearizable(&mut self) {
        let outcome = keel_linearize::check(&self.history, keel_linearize::Budget::default());
        match outcome {
            keel_linearize::Outcome::Linearizable => {}
            keel_linearize::Outcome::NotLinearizable { report } => {
                self.fail(format!("history is not linearizable:\n{report}"))
            }
            keel_linearize::Outcome::Unknown { reason } => {
                self.stats.linearizability_undecided += 1;
                self.note(format!("linearizability unknown: {reason}"))
            }
        }
    }
}

/// Does this change fire this watch? (ZooKeeper: data and exist watches
/// fire on created, deleted, data changed; child watches on children
/// changed and deleted.)
fn fires(watch: &WatchRecord, event: &Event) -> bool {
    use keel_jute::EventType::*;
    if watch.kind == WatchKind::PersistentRecursive {
        // The path and every path under it; never NodeChildrenChanged.
        let under = event.path == watch.path
            || event
                .path
                .strip_prefix(watch.path.as_str())
                .is_some_and(|rest| rest.starts_with('/'));
        return under && event.event_type != NodeChildrenChanged;
    }
    if watch.path != event.path {
        return false;
    }
    match watch.kind {
        WatchKind::Data | WatchKind::Exist => {
            matches!(
                event.event_type,
                NodeCreated | NodeDeleted | NodeDataChanged
            )
        }
        WatchKind::Child => matches!(event.event_type, NodeChildrenChanged | NodeDeleted),
        WatchKind::Persistent => matches!(
            event.event_type,
            NodeCreated | NodeDeleted | NodeDataChanged | NodeChildrenChanged
        ),
        WatchKind::PersistentRecursive => unreachable!("handled above"),
    }
}

/// The log operation of a client request.
fn request_op(request: &Request) -> TxnOp {
    let mut body = Vec::new();
    request.encode(&mut body);
    TxnOp::Request {
        op_code: request.op_code(),
        body,
    }
}

fn copy_input(input: &PeerInput) -> PeerInput {
    match input {
        PeerInput::Raft(m) => PeerInput::Raft(m.clone()),
        PeerInput::Forward(b) => PeerInput::Forward(b.clone()),
        PeerInput::Touch(s) => PeerInput::Touch(s.clone()),
        PeerInput::Reconfig(r) => PeerInput::Reconfig(r.clone()),
        PeerInput::ReconfigAnswer(a) => PeerInput::ReconfigAnswer(a.clone()),
        PeerInput::Members(m) => PeerInput::Members(m.clone()),
    }
}

/// Runs one seed with the batch's options.
pub fn run_seed(seed: u64) -> Report {
    World::new(Options::for_seed(seed)).run()
}

/// A live node's digest: its tree's and its keyspace's.
fn node_digest(node: &Node, core: &SimCore) -> u64 {
    let tree = core.machine().node().tree();
    let keyspace = node.kv.as_ref().map_or(0, |kv| {
        kv.inspect(|view| kv_digest(view.shards().map(|s| &*s)))
    });
    state_digest(&tree, keyspace)
}

/// Where the tree's part of a snapshot file starts and ends, if a Keel KV
/// part follows it.
fn tree_part(file: &[u8]) -> Option<(usize, usize)> {
    let (_, state) = keel_consensus::proposal::Envelope::split(file).ok()?;
    let start = file.len() - state.len();
    let end = start + keel_tree::snapshot::part_len(state).ok()?;
    (end < file.len()).then_some((start, end))
}

/// Where the tree's part of a snapshot file ends (the Keel KV part
/// follows), if it is not the file's end.
fn tree_part_end(file: &[u8]) -> Option<usize> {
    tree_part(file).map(|(_, end)| end)
}

/// The offset of the low byte of the tree part's format version, if a
/// keyspace part follows the tree's.
fn tree_version_low_byte(file: &[u8]) -> Option<usize> {
    // `KEELSNAP`, then the version as a big-endian i32.
    tree_part(file).map(|(start, _)| start + 11)
}

/// A read reply's xid, zxid and whether it shows the client any state (a
/// SessionExpired answer does not: see `Node::read`).
fn outcome_key(xid: i32, outcome: &keel_server::node::LocalRead) -> (i32, i64, bool) {
    let expired = outcome.result == Err(ErrorCode::SessionExpired);
    (xid, outcome.zxid, !expired)
}

/// The output of a future of the simulator's inline KV engine, which
/// runs every message on the sender's thread: it is ready when made.
fn answered_at_once<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => panic!("the inline KV engine answers at once"),
    }
}
