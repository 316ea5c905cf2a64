//! keel-server: the ZooKeeper-compatible front of Keel. Accepts client
//! connections, runs the request pipeline (`conn`), applies committed
//! transactions (`machine`), expires sessions and reaps containers.
//!
//! `run(listener, config, shutdown)` is the testable entry point: tests
//! bind 127.0.0.1:0 and call it; `keel server` does the same.

pub mod config;
mod conn;
pub mod fourlw;
mod machine;
mod shared;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use keel_tree::{Txn, TxnOp};
use tokio::net::TcpListener;

pub use config::{ConfigError, ServerConfig};
use shared::{wall_clock_ms, Shared, INTERNAL_XID};

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
}

/// Loads the newest snapshot that verifies (on every core) and opens the
/// log behind it.
fn recover(
    raft_config: keel_consensus::RaftConfig,
) -> Result<(keel_tree::DataTree, keel_consensus::Recovery), ServerError> {
    keel_consensus::prepare(&raft_config)?;
    let started = std::time::Instant::now();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let tree = keel_consensus::snapfile::load_newest(
        &raft_config.data_dir.join("snapshots"),
        |bytes| keel_tree::snapshot::load(bytes, threads).map_err(|e| e.to_string()),
        |tree| tree.applied_index(),
    )?
    .unwrap_or_default();
    tracing::info!(
        nodes = tree.node_count(),
        index = tree.applied_index(),
        ms = started.elapsed().as_millis() as u64,
        threads,
        "snapshot loaded"
    );
    let position = keel_consensus::SnapshotPosition {
        index: tree.applied_index(),
        term: tree.applied_term(),
        own_sequence: tree.origin_applied(raft_config.node_id),
    };
    let recovery = keel_consensus::recover(raft_config, position)?;
    Ok((tree, recovery))
}

/// Recovers the data dir, starts the Raft driver and serves `listener`
/// until `shutdown` resolves.
pub async fn run(
    listener: TcpListener,
    config: ServerConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    config.validate()?;
    let raft_config = keel_consensus::RaftConfig {
        node_id: config.server_id,
        data_dir: config.data_dir.clone(),
        tick_ms: 100,
        snapshot_every_entries: config.snapshot_every_entries,
        snapshot_every_log_bytes: config.snapshot_every_log_bytes,
        peers: config.peer_list()?,
        cluster_name: config.cluster_name.clone(),
        preferred_leader: (config.preferred_leader != 0).then_some(config.preferred_leader),
        observers: config.observers.clone(),
    };
    let (tree, recovery) = tokio::task::block_in_place(|| recover(raft_config))?;
    let shared = Arc::new(Shared::new(config, tree));
    let machine = machine::Machine {
        shared: shared.clone(),
    };
    let (raft, driver) = keel_consensus::start(recovery, machine)?;
    let _ = shared.raft.set(raft.clone());
    wait_for_leadership(&shared).await;
    tracing::info!(address = %listener.local_addr()?, "keel serving");
    let timers = tokio::spawn(run_timers(shared.clone()));
    let accept = accept_loop(listener, shared.clone());
    tokio::pin!(shutdown);
    let outcome = tokio::select! {
        _ = &mut shutdown => Ok(()),
        result = accept => result,
        _ = watch_driver(&driver) => Err(ServerError::RaftStopped("driver thread exited".into())),
    };
    timers.abort();
    raft.shutdown();
    let joined = tokio::task::block_in_place(|| driver.join());
    match joined {
        Ok(Err(error)) => return Err(error.into()),
        Err(_) => return Err(ServerError::RaftStopped("driver panicked".into())),
        Ok(Ok(())) => {}
    }
    tracing::info!("keel stopped");
    outcome
}

async fn wait_for_leadership(shared: &Shared) {
    let started = std::time::Instant::now();
    while shared.raft().leader_id() == 0 {
        if started.elapsed() > Duration::from_secs(5) && started.elapsed().as_millis() % 5000 < 20 {
            tracing::info!("waiting for a leader");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn watch_driver(
    driver: &std::thread::JoinHandle<Result<(), keel_consensus::ConsensusError>>,
) {
    while !driver.is_finished() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) -> Result<(), ServerError> {
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
        if !admit(&shared, peer.ip()) {
            tracing::warn!(%peer, "too many connections from this address; refused");
            continue;
        }
        let shared = shared.clone();
        tokio::spawn(async move {
            conn::serve(shared.clone(), stream, peer).await;
            release(&shared, peer.ip());
        });
    }
}

fn admit(shared: &Shared, ip: std::net::IpAddr) -> bool {
    let mut per_ip = shared.connections_per_ip.lock();
    let total: usize = per_ip.values().sum();
    let count = per_ip.entry(ip).or_insert(0);
    let limit = shared.config.max_client_connections_per_ip;
    if total >= config::CLIENT_CONNECTIONS_MAX || (limit > 0 && *count >= limit) {
        return false;
    }
    *count += 1;
    true
}

fn release(shared: &Shared, ip: std::net::IpAddr) {
    let mut per_ip = shared.connections_per_ip.lock();
    if let Some(count) = per_ip.get_mut(&ip) {
        *count -= 1;
        if *count == 0 {
            per_ip.remove(&ip);
        }
    }
}

/// Session expiry every half tick; the container/TTL reaper at its interval.
async fn run_timers(shared: Arc<Shared>) {
    let expiry_every = Duration::from_millis((shared.config.tick_time_ms as u64 / 2).max(5));
    let reap_every_ms = shared.config.container_check_interval_ms;
    let mut last_reap_ms = 0;
    loop {
        tokio::time::sleep(expiry_every).await;
        if !shared.raft().is_leader() {
            // Followers tell the leader which sessions are alive here.
            let touched: Vec<i64> = shared.touched.lock().drain().collect();
            if !touched.is_empty() {
                shared.raft().report_touches(touched);
            }
            continue;
        }
        shared.touched.lock().clear();
        let now_ms = shared.now_ms();
        let expired = shared.sessions.lock().expired(now_ms);
        for session_id in expired {
            tracing::info!(session = format_args!("{session_id:#x}"), "session expired");
            propose_internal(&shared, session_id, TxnOp::CloseSession);
        }
        if now_ms >= last_reap_ms + reap_every_ms {
            last_reap_ms = now_ms;
            let candidates = shared.tree.read().reap_candidates(wall_clock_ms());
            for path in candidates {
                propose_internal(&shared, 0, TxnOp::DeleteContainer { path });
            }
        }
    }
}

fn propose_internal(shared: &Shared, session_id: i64, op: TxnOp) {
    let txn = Txn {
        proposal_id: 0,
        session_id,
        xid: INTERNAL_XID,
        time_ms: wall_clock_ms(),
        auth: Vec::new(),
        op,
    };
    if !shared.raft().propose(txn) {
        tracing::warn!("internal proposal refused: queue full");
    }
}
