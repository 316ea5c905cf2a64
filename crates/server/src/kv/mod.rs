//! Keel KV: a Redis-protocol front end on the same Raft log as the data
//! tree (`resp_port`). The keyspace itself (commands, replies, snapshot
//! part) is `keel_kv`, without IO; here are its threads and sockets:
//! - `engine`: the shard threads (one per core, each owning its shard),
//!   the apply step's side (`KvApplier`, driven by `node.rs`), borrowing
//!   shards for what spans several, snapshot and restore;
//! - `barrier`: ReadIndex barriers shared by all reads of the node;
//! - `conn`: one task per connection;
//! - this file: the port's accept loop, the leader's expiry cycle, and
//!   what INFO and CLIENT LIST report.

pub mod barrier;
pub mod conn;
pub mod engine;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_consensus::RaftHandle;
use keel_kv::op::Op;
use keel_kv::resp::Limits;
use keel_kv::session::{Server, Session, REDIS_VERSION};
use keel_tree::{Txn, TxnOp};
use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream};

pub use engine::{KvApplier, KvEngine};

use crate::shared::wall_clock_ms;

/// How often the leader looks for expired keys (Redis's default hz 10).
pub const EXPIRE_CYCLE_MS: u64 = 100;
/// Most keys one expiry proposal deletes.
pub const EXPIRE_KEYS_PER_CYCLE_MAX: usize = 1_000;
/// An expiry proposal not applied after this long (lost in a leader
/// change) no longer holds the next one back.
pub const EXPIRE_RESEND_AFTER_MS: u64 = 2_000;
/// Most KV connections at once (Redis's maxclients default); one more is
/// answered Redis's error and closed.
pub const KV_CONNECTIONS_MAX: usize = 10_000;

/// What every KV connection of a node shares.
pub struct KvContext {
    pub engine: Arc<KvEngine>,
    pub raft: RaftHandle,
    pub limits: Limits,
    pub port: u16,
    pub server_id: u64,
    /// The most pipelined writes a connection proposes as one operation:
    /// `keel_kv::op::PIPELINE_COMMANDS_MAX`, or 1 with `kv_batch_writes =
    /// false` (every write alone).
    pub batch_writes_max: usize,
    clients: Mutex<BTreeMap<u64, Arc<ClientRecord>>>,
    run_id: String,
    started: Instant,
}

/// CLIENT LIST's facts about one connection.
pub struct ClientRecord {
    id: u64,
    peer: SocketAddr,
    local: Option<SocketAddr>,
    created: Instant,
    state: Mutex<ClientState>,
}

struct ClientState {
    name: Option<Vec<u8>>,
    last_command: &'static str,
    protocol: i64,
    queued: usize,
    in_multi: bool,
    last_active: Instant,
}

impl ClientRecord {
    fn update(&self, session: &Session, now: Instant) {
        let mut state = self.state.lock();
        if state.name.as_deref() != session.name() {
            state.name = session.name().map(<[u8]>::to_vec);
        }
        state.last_command = session.last_command();
        state.protocol = session.protocol().version();
        state.queued = session.queued();
        state.in_multi = session.in_multi();
        state.last_active = now;
    }

    fn line(&self) -> String {
        let state = self.state.lock();
        let name = state
            .name
            .as_deref()
            .map(String::from_utf8_lossy)
            .unwrap_or_default();
        let multi = if state.in_multi {
            state.queued as i64
        } else {
            -1
        };
        let flags = if state.in_multi { "x" } else { "N" };
        format!(
            "id={} addr={} laddr={} fd=-1 name={name} age={} idle={} flags={flags} db=0 sub=0 psub=0 ssub=0 multi={multi} qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} user=default redir=-1 resp={}",
            self.id,
            self.peer,
            self.local.map_or_else(String::new, |a| a.to_string()),
            self.created.elapsed().as_secs(),
            state.last_active.elapsed().as_secs(),
            state.last_command,
            state.protocol,
        )
    }
}

impl KvContext {
    pub fn new(
        engine: Arc<KvEngine>,
        raft: RaftHandle,
        limits: Limits,
        port: u16,
        server_id: u64,
        batch_writes: bool,
    ) -> KvContext {
        let seed = wall_clock_ms() as u64 ^ ((std::process::id() as u64) << 32) ^ server_id;
        let mut run_id = String::with_capacity(40);
        let mut x = seed | 1;
        while run_id.len() < 40 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let _ = write!(run_id, "{:016x}", x);
        }
        run_id.truncate(40);
        let batch_writes_max = match batch_writes {
            true => keel_kv::op::PIPELINE_COMMANDS_MAX,
            false => 1,
        };
        assert!((1..=keel_kv::op::PIPELINE_COMMANDS_MAX).contains(&batch_writes_max));
        KvContext {
            engine,
            raft,
            limits,
            port,
            server_id,
            batch_writes_max,
            clients: Mutex::new(BTreeMap::new()),
            run_id,
            started: Instant::now(),
        }
    }

    fn register_client(
        &self,
        id: u64,
        peer: SocketAddr,
        local: Option<SocketAddr>,
    ) -> Arc<ClientRecord> {
        let record = Arc::new(ClientRecord {
            id,
            peer,
            local,
            created: Instant::now(),
            state: Mutex::new(ClientState {
                name: None,
                last_command: "NULL",
                protocol: 2,
                queued: 0,
                in_multi: false,
                last_active: Instant::now(),
            }),
        });
        self.clients.lock().insert(id, record.clone());
        record
    }

    fn unregister_client(&self, id: u64) {
        self.clients.lock().remove(&id);
    }

    fn role(&self) -> &'static str {
        if self.raft.is_leader() {
            "master"
        } else {
            "replica"
        }
    }
}

/// What a connection's session sees of the server.
pub struct ServerView<'a> {
    ctx: &'a KvContext,
    connection: u64,
}

impl ServerView<'_> {
    /// Brings this connection's record up to date with its session before
    /// a command reads the records (a connection updates its own once a
    /// turn, so it may lag within one); the record.
    fn update_own_record(&self, session: &Session) -> Option<Arc<ClientRecord>> {
        let record = self.ctx.clients.lock().get(&self.connection).cloned()?;
        record.update(session, Instant::now());
        Some(record)
    }
}

impl Server for ServerView<'_> {
    fn info(&self, sections: &[Vec<u8>], _session: &Session) -> String {
        info(self.ctx, sections)
    }

    fn client_list(&self, session: &Session) -> String {
        self.update_own_record(session);
        let clients: Vec<Arc<ClientRecord>> = self.ctx.clients.lock().values().cloned().collect();
        clients.iter().map(|c| c.line() + "\n").collect()
    }

    fn client_info(&self, session: &Session) -> String {
        let record = self.update_own_record(session);
        record.map(|c| c.line()).unwrap_or_default()
    }

    fn time(&self) -> (u64, u64) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        (now.as_secs(), now.subsec_micros() as u64)
    }

    fn role(&self) -> &'static str {
        self.ctx.role()
    }
}

const INFO_DEFAULT: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "keyspace",
];
/// Redis's `all` adds sections Keel does not have (modules, latency
/// stats, ...): here it is the default set.
const INFO_ALL: &[&str] = INFO_DEFAULT;

/// INFO's text: Redis's sections and field names where Keel has the
/// value, `keel_*` fields for Raft's view.
pub fn info(ctx: &KvContext, asked: &[Vec<u8>]) -> String {
    let mut wanted: Vec<&str> = Vec::new();
    if asked.is_empty() {
        wanted.extend(INFO_DEFAULT);
    }
    for section in asked {
        let section = String::from_utf8_lossy(section).to_ascii_lowercase();
        match section.as_str() {
            "default" => wanted.extend(INFO_DEFAULT),
            "all" | "everything" => wanted.extend(INFO_ALL),
            other => {
                if let Some(known) = INFO_ALL.iter().find(|s| **s == other) {
                    wanted.push(known);
                }
            }
        }
    }
    let mut seen = Vec::new();
    wanted.retain(|s| {
        let new = !seen.contains(s);
        seen.push(*s);
        new
    });
    let mut out = String::new();
    for (i, section) in wanted.iter().enumerate() {
        if i > 0 {
            out.push_str("\r\n");
        }
        info_section(ctx, section, &mut out);
    }
    out
}

fn human(bytes: u64) -> String {
    let units = ["B", "K", "M", "G", "T"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < units.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes}B")
    } else {
        format!("{value:.2}{}", units[unit])
    }
}

fn proc_status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn cpu_seconds() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 100.0
    };
    (ticks(12), ticks(11))
}

fn info_section(ctx: &KvContext, section: &str, out: &mut String) {
    let engine = &ctx.engine;
    let status = &ctx.raft.status;
    let line = |out: &mut String, key: &str, value: &dyn std::fmt::Display| {
        let _ = write!(out, "{key}:{value}\r\n");
    };
    match section {
        "server" => {
            out.push_str("# Server\r\n");
            let uptime = ctx.started.elapsed().as_secs();
            line(out, "redis_version", &REDIS_VERSION);
            line(out, "redis_git_sha1", &"00000000");
            line(out, "redis_git_dirty", &0);
            line(out, "redis_build_id", &"0");
            line(out, "redis_mode", &"standalone");
            line(
                out,
                "os",
                &format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
            );
            line(out, "arch_bits", &(usize::BITS));
            line(out, "multiplexing_api", &"epoll");
            line(out, "process_id", &std::process::id());
            line(out, "run_id", &ctx.run_id);
            line(out, "tcp_port", &ctx.port);
            line(out, "server_time_usec", &(wall_clock_ms() * 1000));
            line(out, "uptime_in_seconds", &uptime);
            line(out, "uptime_in_days", &(uptime / 86_400));
            line(out, "hz", &(1000 / EXPIRE_CYCLE_MS));
            line(
                out,
                "executable",
                &std::env::current_exe()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            );
            line(out, "keel_version", &env!("CARGO_PKG_VERSION"));
            line(out, "keel_server_id", &ctx.server_id);
            line(out, "keel_kv_shards", &engine.shard_count());
        }
        "clients" => {
            out.push_str("# Clients\r\n");
            line(
                out,
                "connected_clients",
                &engine.stats.connected.load(Ordering::Relaxed),
            );
            line(out, "maxclients", &KV_CONNECTIONS_MAX);
            line(out, "blocked_clients", &0);
            line(out, "tracking_clients", &0);
        }
        "memory" => {
            out.push_str("# Memory\r\n");
            let rss = proc_status_kb("VmRSS:") * 1024;
            let peak = proc_status_kb("VmHWM:") * 1024;
            // Keel reports the process: the keyspace shares it with the
            // data tree and the Raft log kept in memory.
            line(out, "used_memory", &rss);
            line(out, "used_memory_human", &human(rss));
            line(out, "used_memory_rss", &rss);
            line(out, "used_memory_rss_human", &human(rss));
            line(out, "used_memory_peak", &peak);
            line(out, "used_memory_peak_human", &human(peak));
            line(out, "maxmemory", &0);
            line(out, "maxmemory_human", &"0B");
            line(out, "maxmemory_policy", &"noeviction");
            line(out, "mem_allocator", &"jemalloc");
        }
        "persistence" => {
            out.push_str("# Persistence\r\n");
            line(out, "loading", &0);
            line(out, "async_loading", &0);
            line(out, "rdb_changes_since_last_save", &0);
            line(out, "rdb_bgsave_in_progress", &0);
            line(out, "rdb_last_bgsave_status", &"ok");
            // Every write is in the Raft log, fsynced on a quorum before
            // it is acknowledged: an always-fsynced append-only file.
            line(out, "aof_enabled", &1);
            line(out, "aof_rewrite_in_progress", &0);
            line(out, "aof_last_write_status", &"ok");
            line(
                out,
                "keel_snapshots_taken",
                &status.snapshots_taken.load(Ordering::Relaxed),
            );
            line(
                out,
                "keel_snapshot_index",
                &status.snapshot_index.load(Ordering::Relaxed),
            );
            line(out, "keel_fsyncs", &status.fsyncs.load(Ordering::Relaxed));
        }
        "stats" => {
            out.push_str("# Stats\r\n");
            let stats = &engine.stats;
            let sum = |f: fn(&engine::ShardCounters) -> u64| engine.counters().map(f).sum::<u64>();
            line(
                out,
                "total_connections_received",
                &stats.connections_received.load(Ordering::Relaxed),
            );
            line(
                out,
                "total_commands_processed",
                &stats.commands_processed.load(Ordering::Relaxed),
            );
            line(out, "instantaneous_ops_per_sec", &0);
            line(
                out,
                "rejected_connections",
                &stats.rejected_connections.load(Ordering::Relaxed),
            );
            line(
                out,
                "expired_keys",
                &sum(|c| c.expired.load(Ordering::Relaxed)),
            );
            line(out, "evicted_keys", &0);
            line(
                out,
                "keyspace_hits",
                &sum(|c| c.hits.load(Ordering::Relaxed)),
            );
            line(
                out,
                "keyspace_misses",
                &sum(|c| c.misses.load(Ordering::Relaxed)),
            );
            line(
                out,
                "total_error_replies",
                &stats.errors.load(Ordering::Relaxed),
            );
            line(
                out,
                "keel_write_batches",
                &stats.write_batches.load(Ordering::Relaxed),
            );
            line(
                out,
                "keel_lease_reads",
                &ctx.raft.status.lease_reads.load(Ordering::Relaxed),
            );
        }
        "replication" => {
            out.push_str("# Replication\r\n");
            let leader = status.leader_id.load(Ordering::Acquire);
            line(
                out,
                "role",
                &if ctx.raft.is_leader() {
                    "master"
                } else {
                    "slave"
                },
            );
            if !ctx.raft.is_leader() {
                line(
                    out,
                    "master_link_status",
                    &if leader != 0 { "up" } else { "down" },
                );
            }
            line(out, "connected_slaves", &0);
            line(
                out,
                "master_repl_offset",
                &status.applied_index.load(Ordering::Acquire),
            );
            line(out, "keel_raft_leader_id", &leader);
            line(out, "keel_raft_term", &status.term.load(Ordering::Acquire));
            line(
                out,
                "keel_raft_commit_index",
                &status.commit_index.load(Ordering::Acquire),
            );
            line(
                out,
                "keel_raft_applied_index",
                &status.applied_index.load(Ordering::Acquire),
            );
        }
        "cpu" => {
            out.push_str("# CPU\r\n");
            let (sys, user) = cpu_seconds();
            line(out, "used_cpu_sys", &format!("{sys:.6}"));
            line(out, "used_cpu_user", &format!("{user:.6}"));
        }
        "keyspace" => {
            out.push_str("# Keyspace\r\n");
            let keys: u64 = engine
                .counters()
                .map(|c| c.keys.load(Ordering::Relaxed))
                .sum();
            let expires: u64 = engine
                .counters()
                .map(|c| c.expiring.load(Ordering::Relaxed))
                .sum();
            if keys > 0 {
                let _ = write!(out, "db0:keys={keys},expires={expires},avg_ttl=0\r\n");
            }
        }
        other => unreachable!("INFO section {other}"),
    }
}

/// Accepts KV connections until the future is dropped.
pub async fn serve_port(ctx: Arc<KvContext>, listener: TcpListener) {
    let slots = Arc::new(tokio::sync::Semaphore::new(KV_CONNECTIONS_MAX));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "KV accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            ctx.engine
                .stats
                .rejected_connections
                .fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let mut stream = stream;
                let _ = stream
                    .write_all(b"-ERR max number of clients reached\r\n")
                    .await;
            });
            continue;
        };
        // Served on a shard thread: its reads of that shard need no
        // hand-off. The socket moves to that thread's runtime.
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(%error, %peer, "KV connection could not be moved to a shard thread");
                continue;
            }
        };
        let ctx = ctx.clone();
        let engine = ctx.engine.clone();
        engine.spawn_connection(async move {
            match TcpStream::from_std(stream) {
                Ok(stream) => conn::serve(ctx, stream, peer).await,
                Err(error) => tracing::warn!(%error, %peer, "KV connection not registered"),
            }
            drop(permit);
        });
    }
}

/// The leader's expiry cycle: every EXPIRE_CYCLE_MS it proposes the
/// deletion of the keys past their deadline by its clock, one proposal in
/// flight at a time. Replicas never expire by their own clocks.
pub async fn run_expiry(ctx: Arc<KvContext>) {
    let started = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(EXPIRE_CYCLE_MS)).await;
        if !ctx.raft.is_leader() {
            continue;
        }
        let since_start_ms = started.elapsed().as_millis() as u64;
        let Some(txn) = expiry_proposal(&ctx.engine, wall_clock_ms(), since_start_ms).await else {
            continue;
        };
        match ctx.raft.propose(txn.encode()) {
            Ok(()) => ctx.engine.expiry_proposed(since_start_ms),
            Err(error) => tracing::warn!(%error, "expiry proposal refused"),
        }
    }
}

/// One expiry step of a leader whose wall clock reads `now_ms` and
/// monotonic clock `monotonic_ms`: the proposal deleting the keys due,
/// unless one is still in flight (`KvEngine::expiry_may_propose`) or none
/// is due. The caller proposes it and then calls
/// `KvEngine::expiry_proposed`. The server's `run_expiry` and the
/// simulator's leaders run this same step.
pub async fn expiry_proposal(engine: &KvEngine, now_ms: i64, monotonic_ms: u64) -> Option<Txn> {
    if !engine.expiry_may_propose(monotonic_ms, EXPIRE_RESEND_AFTER_MS) {
        return None;
    }
    let keys = engine.due(now_ms, EXPIRE_KEYS_PER_CYCLE_MAX).await;
    expiry_txn(keys, now_ms)
}

/// The leader's proposal deleting `keys`, due by its clock `now_ms`
/// (`None` when there are none). Applied, it deletes each key only if it
/// is still expired at the entry's clock: a key written again since it
/// was found due stays (`keel_kv::keyspace::apply`).
fn expiry_txn(keys: Vec<Vec<u8>>, now_ms: i64) -> Option<Txn> {
    assert!(
        keys.len() <= EXPIRE_KEYS_PER_CYCLE_MAX,
        "{} keys",
        keys.len()
    );
    (!keys.is_empty()).then(|| Txn {
        session_id: 0,
        xid: 0,
        time_ms: now_ms,
        auth: Vec::new(),
        op: TxnOp::Kv {
            body: Op::Expire { keys }.to_bytes(),
        },
    })
}
