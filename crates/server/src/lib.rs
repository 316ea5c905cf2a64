//! keel-server: the ZooKeeper-compatible front of Keel. Accepts client
//! connections, runs the request pipeline (`conn`) around the sans-IO
//! node (`node`: tree, watches, sessions, the apply step), expires
//! sessions and reaps containers.
//!
//! `run(listener, config, shutdown)` is the testable entry point: tests
//! bind 127.0.0.1:0 and call it; `keel server` calls `run_with` with the
//! plain and the TLS client port (`ClientListeners`).

pub mod config;
mod conn;
pub mod fifo;
pub mod fourlw;
pub mod join;
pub mod kv;
pub mod linger;
pub mod metrics;
pub mod node;
mod port;
pub mod profile;
pub mod readonly;
pub mod reaper;
pub mod reconfig;
pub mod sasl;
mod shared;
pub mod tls;
pub mod ttl_clock;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use keel_tree::Txn;
use tokio::net::TcpListener;

pub use config::{ConfigError, ServerConfig};
use readonly::ModeSwitch;
pub use reaper::{REAP_PROPOSALS_PER_PASS_MAX, REAP_RESEND_AFTER_MS, REAP_UNAPPLIED_MAX};
use shared::{wall_clock_ms, ApplyMetrics, Shared, Stats};

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("storage: {0}")]
    Consensus(#[from] keel_consensus::ConsensusError),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("the raft driver stopped: {0}")]
    RaftStopped(String),
    #[error("loading the data dir failed: {0}")]
    RecoveryFailed(String),
    #[error("cannot listen for metrics on {address}: {source}")]
    MetricsBind {
        address: String,
        source: std::io::Error,
    },
    #[error("cannot listen for Keel KV on {address}: {source}")]
    RespBind {
        address: String,
        source: std::io::Error,
    },
    #[error("TLS: {0}")]
    Tls(#[from] tls::TlsError),
    #[error(transparent)]
    SaslUsers(#[from] sasl::SaslUsersError),
    #[error("no client port: neither a plain nor a TLS listener was given")]
    NoClientPort,
}

/// Connections the kernel queues on a client port before the server
/// accepts them (Linux caps it at net.core.somaxconn). The standard
/// library's 128 (and ZooKeeper's 50) drop the SYNs of a reconnect storm,
/// thousands of clients moving over after a leader change, and each
/// dropped SYN costs its client a 1 s retransmission.
pub const CLIENT_LISTEN_BACKLOG: u32 = 4_096;

/// Binds a client port (plain or TLS) with `CLIENT_LISTEN_BACKLOG`.
pub async fn bind_client_port(address: &str) -> std::io::Result<TcpListener> {
    let mut last_error = None;
    for address in tokio::net::lookup_host(address).await? {
        let socket = if address.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        // As tokio's TcpListener::bind: a restarted server rebinds at once.
        socket.set_reuseaddr(true)?;
        match socket.bind(address) {
            Ok(()) => return socket.listen(CLIENT_LISTEN_BACKLOG),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the address resolves to nothing",
        )
    }))
}

/// The client ports a server accepts on: plain ZooKeeper protocol, and
/// the same protocol inside TLS (ZooKeeper's clientPort and
/// secureClientPort). Either may be absent, not both.
pub struct ClientListeners {
    pub plain: Option<TcpListener>,
    pub secure: Option<SecureListener>,
}

/// The TLS client port: its listener and the server config its handshakes
/// use (`reload` it to change certificates; open connections keep theirs).
pub struct SecureListener {
    pub listener: TcpListener,
    pub tls: Arc<tls::ReloadableServerConfig>,
}

impl SecureListener {
    /// Loads `config`'s TLS files for `listener` (the secure client port).
    pub fn load(
        listener: TcpListener,
        config: &ServerConfig,
    ) -> Result<SecureListener, ServerError> {
        let files = config.client_tls_files().ok_or_else(|| {
            ConfigError::Invalid("secure_client_port needs tls_cert_file and tls_key_file".into())
        })?;
        let tls = tls::ReloadableServerConfig::load(files, config.tls_client_auth)?;
        Ok(SecureListener {
            listener,
            tls: Arc::new(tls),
        })
    }
}

/// Loads the newest snapshot that verifies (on every core) and opens the
/// log behind it, the KV keyspace cut into `shards` shards; times both
/// (ZooKeeper's startup_snap_load_time, and the log read that
/// startup_txns_load_time starts with).
fn recover(
    raft_config: keel_consensus::RaftConfig,
    shards: usize,
    stats: &Stats,
) -> Result<Recovered, ServerError> {
    keel_consensus::prepare(&raft_config)?;
    let started = std::time::Instant::now();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let ((tree, keyspace), position) = keel_consensus::snapfile::load_newest(
        &raft_config.data_dir.join("snapshots"),
        |bytes| node::load_snapshot(bytes, threads, shards),
        |(tree, _)| tree.applied_index(),
    )?
    .unwrap_or_else(|| {
        (
            (
                keel_tree::DataTree::default(),
                keel_kv::snapshot::empty(shards),
            ),
            Default::default(),
        )
    });
    stats
        .startup_snapshot_load_us
        .record_duration(started.elapsed());
    tracing::info!(
        nodes = tree.node_count(),
        index = tree.applied_index(),
        ms = started.elapsed().as_millis() as u64,
        threads,
        "snapshot loaded"
    );
    assert_eq!(position.index, tree.applied_index());
    let read_started = std::time::Instant::now();
    let recovery = keel_consensus::recover(raft_config, position)?;
    Ok(Recovered {
        tree,
        keyspace,
        recovery,
        log_read: read_started.elapsed(),
    })
}

/// What a node loads from its data dir before its driver starts.
struct Recovered {
    tree: keel_tree::DataTree,
    keyspace: keel_kv::snapshot::Image,
    recovery: keel_consensus::Recovery,
    log_read: Duration,
}

/// How often the replay's progress is logged while a node catches up.
pub const REPLAY_PROGRESS_LOG_MS: u64 = 1_000;
/// How often a catching-up node checks whether it has caught up.
const CATCH_UP_POLL_MS: u64 = 5;

/// Opens the client port at once (sessions refused while loading, see
/// `port`), recovers the data dir, starts the Raft driver, serves clients
/// once everything committed is applied, until `shutdown` resolves.
pub fn run(
    listener: TcpListener,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Running {
    let listeners = ClientListeners {
        plain: Some(listener),
        secure: None,
    };
    run_with(listeners, config, Box::pin(shutdown))
}

/// The server's whole life as one boxed future (`run`, `run_with`). Boxed
/// so that a crate awaiting it sees only `dyn Future`: the server's async
/// code is compiled once, here. (A crate that awaits an unboxed async fn
/// compiles every state machine reachable from it again: the server's
/// tests, `keel bench`'s and the binary each did, a minute of CPU each.)
pub type Running = Pin<Box<dyn Future<Output = Result<(), ServerError>> + Send>>;

/// `run` on the given client ports (plain, TLS or both).
pub fn run_with(
    listeners: ClientListeners,
    config: ServerConfig,
    shutdown: Pin<Box<dyn Future<Output = ()> + Send>>,
) -> Running {
    Box::pin(serve_until(listeners, config, shutdown))
}

async fn serve_until(
    listeners: ClientListeners,
    config: ServerConfig,
    shutdown: Pin<Box<dyn Future<Output = ()> + Send>>,
) -> Result<(), ServerError> {
    config.validate()?;
    let stats = Arc::new(Stats::default());
    let (publish_node, node_state) = tokio::sync::watch::channel(None);
    let metrics = start_metrics(&config, stats.clone(), node_state).await?;
    let address = match (&listeners.plain, &listeners.secure) {
        (Some(plain), _) => plain.local_addr()?,
        (None, Some(secure)) => secure.listener.local_addr()?,
        (None, None) => return Err(ServerError::NoClientPort),
    };
    let sasl_users = match &config.sasl_users_file {
        Some(path) => {
            let users = sasl::SaslUsers::load(path)?;
            tracing::info!(users = users.len(), file = %path.display(), require_sasl = config.require_sasl, "SASL DIGEST-MD5 users loaded");
            Some(Arc::new(users))
        }
        None => None,
    };
    let resp = bind_resp(&config).await?;
    let (publish, serving) = tokio::sync::watch::channel(None);
    let port = Arc::new(port::ClientPort::new(
        config.clone(),
        stats.clone(),
        serving,
        sasl_users,
    ));
    let accept = accept_loops(listeners, port)?;
    tokio::pin!(shutdown, accept);
    tracing::info!(%address, "client port open; loading the data (sessions refused until served)");
    let node = tokio::select! {
        _ = &mut shutdown => return Ok(()),
        result = &mut accept => return result,
        node = start_node(config, stats.clone()) => node?,
    };
    let _ = publish_node.send(Some(node.shared.clone()));
    let asking = node.shared.config.joining().then(|| {
        let raft = node.raft.clone();
        let id = node.shared.config.server_id;
        tokio::spawn(join::ask(node.shared.config.clone(), move || {
            raft.membership().members.contains_key(&id)
        }))
    });
    let serve = async {
        let mut switch = read_only_switch(&node.shared);
        catch_up(&node.shared, &node.startup, switch.as_mut()).await;
        node.shared.stats.caught_up.store(true, Ordering::Relaxed);
        let _ = publish.send(Some(node.shared.clone()));
        let read_only = node.shared.is_read_only();
        tracing::info!(%address, read_only, "keel serving");
        let resp_port = async {
            match resp {
                Some(listener) => kv::serve_port(node.kv.clone(), listener).await,
                None => std::future::pending().await,
            }
        };
        tokio::join!(
            run_timers(node.shared.clone()),
            reaper::run(node.shared.clone()),
            linger::run(node.shared.clone()),
            watch_read_only(node.shared.clone(), switch),
            kv::run_expiry(node.kv.clone()),
            resp_port
        );
    };
    let outcome = tokio::select! {
        _ = &mut shutdown => {
            drain(&node.shared).await;
            hand_off(&node.raft).await;
            Ok(())
        }
        result = &mut accept => result,
        _ = watch_driver(&node.driver) => Err(ServerError::RaftStopped("driver thread exited".into())),
        () = serve => Ok(()),
    };
    if let Some(asking) = asking {
        asking.abort();
    }
    node.raft.shutdown();
    let joined = blocking(|| node.driver.join());
    blocking(|| node.kv.engine.stop());
    if let Some(metrics) = metrics {
        metrics.abort();
    }
    let failed = |error: ServerError| {
        stats.unrecoverable_errors.fetch_add(1, Ordering::Relaxed);
        Err(error)
    };
    match joined {
        Ok(Err(error)) => return failed(error.into()),
        Err(_) => return failed(ServerError::RaftStopped("driver panicked".into())),
        Ok(Ok(())) => {}
    }
    tracing::info!("keel stopped");
    outcome
}

/// Runs `wait` (a join at shutdown) on this thread. A multi-thread
/// runtime is told first, so it moves this worker's other tasks elsewhere;
/// a current-thread runtime (one client thread) has nothing to move, and
/// nothing the waited-for threads need runs on it.
fn blocking<T>(wait: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::current().runtime_flavor() {
        RuntimeFlavor::MultiThread => tokio::task::block_in_place(wait),
        _ => wait(),
    }
}

/// How long a stopping server waits for its connections to finish the
/// requests they took (then it stops anyway: a cluster without a quorum
/// answers no write).
pub const DRAIN_WAIT_MS: u64 = 1_000;
/// How often the drain looks whether every connection has closed.
const DRAIN_POLL_MS: u64 = 2;

/// A planned stop, before the hand-off: every connection stops taking
/// requests, answers those it took (the Raft driver still runs, so
/// writes in flight commit and their replies go out) and closes; its
/// client reconnects to another member at once and resumes its session
/// there. ZooKeeper has no message that tells a client to move: a close
/// after the last reply is the earliest a client can learn it, and no
/// write it sent is left with an unknown outcome (its client would see
/// ConnectionLoss for it). A leader drains before it hands off, so its
/// clients' writes are not dropped by the transfer either.
async fn drain(shared: &Shared) {
    let started = std::time::Instant::now();
    let open = shared.connections().len();
    shared.start_drain();
    while !shared.connections().is_empty() {
        if started.elapsed() >= Duration::from_millis(DRAIN_WAIT_MS) {
            tracing::warn!(
                left = shared.connections().len(),
                waited_ms = DRAIN_WAIT_MS,
                "connections still have requests in flight; stopping anyway"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(DRAIN_POLL_MS)).await;
    }
    tracing::info!(
        connections = open,
        ms = started.elapsed().as_millis() as u64,
        "client connections drained"
    );
}

/// How long a stopping leader waits for its hand-off before it stops
/// anyway (then the others elect a leader after their election timeout).
/// A healthy hand-off takes milliseconds; when the whole cluster stops at
/// once the followers are gone and the leader waits this long in vain.
pub const HAND_OFF_WAIT_MS: u64 = 1_000;
/// How often the hand-off is asked for again while waiting (a transfer
/// raft-rs abandoned, e.g. the target was not caught up yet).
const HAND_OFF_RETRY_MS: u64 = 250;

/// A planned stop of a leader: leadership goes to the most caught-up
/// voter first, so the cluster does not wait out an election timeout.
/// Connections stay served meanwhile (writes are forwarded to the new
/// leader once it leads).
async fn hand_off(raft: &keel_consensus::RaftHandle) {
    if !raft.is_leader() || !raft.status.cluster {
        return;
    }
    let started = std::time::Instant::now();
    let mut asked = started;
    raft.hand_off();
    while raft.is_leader() {
        if started.elapsed() >= Duration::from_millis(HAND_OFF_WAIT_MS) {
            tracing::warn!(
                waited_ms = started.elapsed().as_millis() as u64,
                "leadership hand-off did not finish; stopping anyway"
            );
            return;
        }
        if asked.elapsed() >= Duration::from_millis(HAND_OFF_RETRY_MS) {
            asked = std::time::Instant::now();
            raft.hand_off();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tracing::info!(
        to = raft.leader_id(),
        ms = started.elapsed().as_millis() as u64,
        "leadership handed off; stopping"
    );
}

type DriverThread = std::thread::JoinHandle<Result<(), keel_consensus::ConsensusError>>;

/// A node whose driver runs (and may still be replaying its log).
struct Started {
    shared: Arc<Shared>,
    raft: keel_consensus::RaftHandle,
    /// Keel KV's shards and what its connections share.
    kv: Arc<kv::KvContext>,
    driver: DriverThread,
    startup: StartupReplay,
}

/// The startup's log replay, timed as ZooKeeper's startup_txns_load_time:
/// reading the log, then applying everything it had recorded as committed.
struct StartupReplay {
    log_read: Duration,
    /// Applying started (the driver's start).
    started: std::time::Instant,
    /// The index applied once the log's committed entries are.
    committed_index: u64,
}

/// Binds Keel KV's port if `resp_port` is set (connections are accepted
/// once the node serves); a port that cannot be bound stops the start.
async fn bind_resp(config: &ServerConfig) -> Result<Option<TcpListener>, ServerError> {
    if config.resp_port == 0 {
        return Ok(None);
    }
    let address = format!("{}:{}", config.client_address, config.resp_port);
    let listener = TcpListener::bind(&address)
        .await
        .map_err(|source| ServerError::RespBind {
            address: address.clone(),
            source,
        })?;
    tracing::info!(%address, "Keel KV (Redis protocol) port bound; served once the node has caught up");
    Ok(Some(listener))
}

/// Binds the Prometheus endpoint if `metrics_port` is set and serves it on
/// a task of this runtime (dropped with `run`); a port that cannot be
/// bound stops the start.
async fn start_metrics(
    config: &ServerConfig,
    stats: Arc<Stats>,
    node: tokio::sync::watch::Receiver<Option<Arc<Shared>>>,
) -> Result<Option<tokio::task::JoinHandle<()>>, ServerError> {
    if config.metrics_port == 0 {
        return Ok(None);
    }
    let address = format!("{}:{}", config.metrics_address, config.metrics_port);
    let listener =
        TcpListener::bind(&address)
            .await
            .map_err(|source| ServerError::MetricsBind {
                address: address.clone(),
                source,
            })?;
    tracing::info!(%address, path = metrics::METRICS_PATH, "prometheus metrics served");
    let exporter = Arc::new(metrics::Exporter::new(stats, node));
    Ok(Some(tokio::spawn(metrics::serve(listener, exporter))))
}

/// Loads the newest snapshot and the log (off the async threads, so the
/// client port keeps answering) and starts the driver, which replays.
async fn start_node(config: ServerConfig, stats: Arc<Stats>) -> Result<Started, ServerError> {
    if config.profile_locks {
        profile::enable(true);
    }
    let raft_config = keel_consensus::RaftConfig {
        node_id: config.server_id,
        data_dir: config.data_dir.clone(),
        tick_ms: 100,
        read_lease: config.read_lease,
        log_direct_io: config.log_direct_io,
        snapshot_every_entries: config.snapshot_every_entries,
        snapshot_every_log_bytes: config.snapshot_every_log_bytes,
        peers: config.peer_list()?,
        cluster_name: config.cluster_name.clone(),
        preferred_leader: (config.preferred_leader != 0).then_some(config.preferred_leader),
        observers: config.observers.clone(),
        clients: config.peer_clients(),
        peer_auth: config.peer_auth()?,
        join: config.joining(),
        reconfig_enabled: config.reconfig_enabled,
    };
    if let Some(path) = &config.peer_secret_file {
        keel_consensus::peer_auth::warn_if_readable_by_others(path);
    }
    let recovering = stats.clone();
    let shards = config.kv_shards();
    let Recovered {
        tree,
        keyspace,
        recovery,
        log_read,
    } = tokio::task::spawn_blocking(move || recover(raft_config, shards, &recovering))
        .await
        .map_err(|error| ServerError::RecoveryFailed(error.to_string()))??;
    tracing::info!(
        keys = keyspace.shards.iter().map(|s| s.key_count()).sum::<usize>(),
        shards = keyspace.shards.len(),
        "KV keyspace loaded"
    );
    let committed_index = recovery.commit_index().max(recovery.position.index);
    let clock = Arc::new(shared::MonotonicClock::start());
    let node = node::Node::new(tree, config.server_id, config.tick_time_ms as u64, clock);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let kv_engine = kv::KvEngine::start(
        keyspace,
        kv::engine::first_connection_id(wall_clock_ms() as u64),
    );
    let machine = node::NodeMachine::new(node.clone(), ApplyMetrics::new(stats.clone()), threads)
        .with_kv(kv::KvApplier::new(kv_engine.clone()));
    let started = std::time::Instant::now();
    let (raft, driver) = keel_consensus::start(recovery, machine)?;
    let kv = Arc::new(kv::KvContext::new(
        kv_engine.clone(),
        raft.clone(),
        config.resp_limits(),
        config.resp_port,
        config.server_id,
        config.kv_batch_writes,
    ));
    let shared = Arc::new(Shared::new(config, node, raft.clone(), stats, kv_engine));
    Ok(Started {
        shared,
        raft,
        kv,
        driver,
        startup: StartupReplay {
            log_read,
            started,
            committed_index,
        },
    })
}

/// Where the replay stands: caught up once a leader is known and this node
/// has applied everything committed, up to an entry of the current term
/// (a new leader's first entry commits the whole log before it, so a
/// restarted node does not serve between its old commit index and that).
struct Replay {
    leader_id: u64,
    term: u64,
    applied_term: u64,
    applied_index: u64,
    commit_index: u64,
    last_index: u64,
    /// A cluster member whose configuration has no id yet: the first
    /// leader has not established it (/zookeeper/config would be empty).
    config_unestablished: bool,
}

impl Replay {
    fn read(shared: &Shared) -> Replay {
        let status = &shared.raft().status;
        let applied_term = shared.node.tree().applied_term();
        Replay {
            leader_id: status.leader_id.load(Ordering::Acquire),
            term: status.term.load(Ordering::Acquire),
            applied_term,
            applied_index: status.applied_index.load(Ordering::Acquire),
            commit_index: status.commit_index.load(Ordering::Acquire),
            last_index: status.last_index.load(Ordering::Acquire),
            config_unestablished: status.cluster && {
                let membership = shared.raft().membership();
                membership.config_id == 0 && !membership.members.is_empty()
            },
        }
    }

    fn caught_up(&self) -> bool {
        self.leader_id != 0
            && self.applied_term >= self.term
            && self.applied_index >= self.commit_index
            && !self.config_unestablished
    }

    /// What read-only mode's switch looks at.
    fn observed(&self, loaded: bool) -> readonly::Observed {
        readonly::Observed {
            leader_known: self.leader_id != 0,
            caught_up: self.caught_up(),
            loaded,
        }
    }
}

/// How often read-only mode's switch looks at the cluster and local
/// sessions' deadlines are checked.
const READ_ONLY_POLL_MS: u64 = 20;

/// The switch of a cluster member with `read_only_when_partitioned`
/// (a single node always leads itself: never read-only).
fn read_only_switch(shared: &Shared) -> Option<ModeSwitch> {
    if !shared.config.read_only_when_partitioned {
        return None;
    }
    if !shared.raft().status.cluster {
        tracing::info!("read_only_when_partitioned has no effect on a single node");
        return None;
    }
    Some(ModeSwitch::new(readonly::grace_ms(
        shared.config.tick_time_ms,
    )))
}

/// Read-only mode while the node serves: switches when the cluster says
/// so (`ModeSwitch`), and expires local sessions.
async fn watch_read_only(shared: Arc<Shared>, switch: Option<ModeSwitch>) {
    let Some(mut switch) = switch else {
        return;
    };
    loop {
        tokio::time::sleep(Duration::from_millis(READ_ONLY_POLL_MS)).await;
        let now_ms = shared.now_ms();
        match switch.step(now_ms, Replay::read(&shared).observed(true)) {
            readonly::Transition::EnterReadOnly => enter_read_only(&shared),
            readonly::Transition::LeaveReadOnly => leave_read_only(&shared),
            readonly::Transition::Stay => {}
        }
        let expired: std::collections::HashSet<i64> =
            shared.local_sessions().expire(now_ms).into_iter().collect();
        if !expired.is_empty() {
            let reason = node::CloseReason::LocalSessionExpired;
            shared
                .node
                .close_sessions(|session_id| expired.contains(&session_id), reason);
        }
    }
}

/// No leader for the grace period: the flag first (handshakes from now on
/// are read-only ones), then the global sessions' connections close, as a
/// ZooKeeper follower's do when it goes looking; their sessions live on
/// in the tree and resume on a member that has a leader.
fn enter_read_only(shared: &Shared) {
    shared.set_read_only(true);
    let reason = node::CloseReason::ReadOnly;
    let closed = shared.node.close_sessions(
        |session_id| !keel_session::is_local_session_id(session_id),
        reason,
    );
    let grace_ms = readonly::grace_ms(shared.config.tick_time_ms);
    tracing::warn!(
        grace_ms,
        closed,
        "no leader: read-only mode (read-only clients get local sessions, writes NotReadOnly)"
    );
}

/// A leader is back and this node has caught up: the flag first, then
/// the local sessions go and their connections close; their clients
/// reconnect and get global sessions.
fn leave_read_only(shared: &Shared) {
    shared.set_read_only(false);
    let sessions = shared.local_sessions().clear();
    let reason = node::CloseReason::ReadWrite;
    let closed = shared
        .node
        .close_sessions(keel_session::is_local_session_id, reason);
    tracing::info!(
        leader_id = shared.raft().leader_id(),
        sessions,
        closed,
        "leader known and caught up: read-only mode ends"
    );
}

/// Waits until the node has caught up, logging the replay's progress.
/// With read-only mode on, a node that has replayed its own log but found
/// no leader for the grace period serves read-only clients instead.
async fn catch_up(shared: &Shared, startup: &StartupReplay, mut switch: Option<&mut ModeSwitch>) {
    let started = std::time::Instant::now();
    let mut next_log = started + Duration::from_millis(REPLAY_PROGRESS_LOG_MS);
    let mut replay_timed = false;
    loop {
        let replay = Replay::read(shared);
        if !replay_timed && replay.applied_index >= startup.committed_index {
            replay_timed = true;
            shared
                .stats
                .startup_log_replay_us
                .record_duration(startup.log_read + startup.started.elapsed());
        }
        if replay.caught_up() {
            let ms = started.elapsed().as_millis() as u64;
            let txns = shared
                .raft()
                .status
                .proposals_applied
                .load(Ordering::Relaxed);
            return tracing::info!(
                applied_index = replay.applied_index,
                term = replay.term,
                leader_id = replay.leader_id,
                ms,
                txns,
                txns_per_s = txns * 1000 / ms.max(1),
                "caught up: log replayed"
            );
        }
        if let Some(switch) = switch.as_deref_mut() {
            let loaded = replay.applied_index >= startup.committed_index;
            let observed = replay.observed(loaded);
            if switch.step(shared.now_ms(), observed) == readonly::Transition::EnterReadOnly {
                return enter_read_only(shared);
            }
        }
        if std::time::Instant::now() >= next_log {
            next_log += Duration::from_millis(REPLAY_PROGRESS_LOG_MS);
            tracing::info!(
                applied_index = replay.applied_index,
                commit_index = replay.commit_index,
                last_index = replay.last_index,
                leader_id = replay.leader_id,
                "replaying the log (sessions refused until caught up)"
            );
        }
        tokio::time::sleep(Duration::from_millis(CATCH_UP_POLL_MS)).await;
    }
}

async fn watch_driver(driver: &DriverThread) {
    while !driver.is_finished() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The accept loops of both client ports, as one future.
fn accept_loops(
    listeners: ClientListeners,
    port: Arc<port::ClientPort>,
) -> Result<impl Future<Output = Result<(), ServerError>>, ServerError> {
    if let Some(secure) = &listeners.secure {
        tracing::info!(address = %secure.listener.local_addr()?, client_auth = %secure.tls.client_auth(), "TLS client port open");
    }
    let plain = listeners
        .plain
        .map(|listener| accept_loop(listener, port.clone(), None));
    let secure = listeners
        .secure
        .map(|secure| accept_loop(secure.listener, port, Some(secure.tls)));
    Ok(async move {
        let plain = async {
            match plain {
                Some(accept) => accept.await,
                None => std::future::pending().await,
            }
        };
        let secure = async {
            match secure {
                Some(accept) => accept.await,
                None => std::future::pending().await,
            }
        };
        tokio::try_join!(plain, secure).map(|_| ())
    })
}

/// How long a connection to the TLS port may take to complete its TLS
/// handshake (its first ZooKeeper packet then has HANDSHAKE_TIMEOUT_MS):
/// a client that connects and sends nothing, or a plain-text client that
/// waits for an answer, is closed after at most this long.
pub const TLS_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;

async fn accept_loop(
    listener: TcpListener,
    port: Arc<port::ClientPort>,
    tls: Option<Arc<tls::ReloadableServerConfig>>,
) -> Result<(), ServerError> {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if !port.admit(peer.ip()) {
            tracing::warn!(%peer, "too many connections from this address; refused");
            continue;
        }
        let slot = ConnectionSlot {
            port: port.clone(),
            ip: peer.ip(),
        };
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => conn::serve_plain(&slot.port, stream, peer).await,
                Some(tls) => conn::serve_tls(&slot.port, stream, peer, &tls).await,
            }
            drop(slot);
        });
    }
}

/// An admitted connection's place in the per-address count, given back
/// when its task ends, also by a panic, which is counted (ZooKeeper's
/// unrecoverable_error_count).
struct ConnectionSlot {
    port: Arc<port::ClientPort>,
    ip: std::net::IpAddr,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.port
                .stats
                .unrecoverable_errors
                .fetch_add(1, Ordering::Relaxed);
        }
        self.port.release(self.ip);
    }
}

/// Session expiry every half tick (the reaper runs at its own interval:
/// `reaper::run`).
async fn run_timers(shared: Arc<Shared>) {
    let expiry_every = Duration::from_millis((shared.config.tick_time_ms as u64 / 2).max(5));
    loop {
        tokio::time::sleep(expiry_every).await;
        if !shared.raft().is_leader() {
            // Followers tell the leader which sessions are alive here.
            let touched: Vec<i64> = shared.touched().drain().collect();
            if !touched.is_empty() {
                shared.raft().report_touches(touched);
            }
            continue;
        }
        let _op = profile::enter(profile::Op::EXPIRE);
        shared.touched().clear();
        for (session_id, txn) in shared.node.expire(wall_clock_ms()) {
            tracing::info!(session = format_args!("{session_id:#x}"), "session expired");
            propose(&shared, &txn);
        }
    }
}

fn propose(shared: &Shared, txn: &Txn) {
    if let Err(error) = shared.raft().propose(txn.encode()) {
        tracing::warn!(%error, "internal proposal refused");
    }
}
