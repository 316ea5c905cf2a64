//! keel-bench: a load generator for ZooKeeper-compatible servers (`keel
//! bench`). It is only a client, so it measures Keel and Apache ZooKeeper
//! alike.
//!
//! A run:
//! 1. connects an admin session to the first server and `clients` bench
//!    sessions, spread over the servers round-robin (client `i` talks to
//!    `servers[i % servers.len()]`);
//! 2. builds the tree the workload needs under a fresh bench root (see the
//!    `tree` module for the layout) and has every session `sync` it;
//! 3. timed phase: every session runs `in_flight` lanes; a lane is a closed
//!    loop issuing one request, waiting for its reply, issuing the next, so
//!    a session has `in_flight` requests in flight (1 = ZooKeeper's usual
//!    synchronous client). Lanes stop issuing at the deadline; replies that
//!    are still due are waited for and counted;
//! 4. closes the bench sessions and deletes the bench root recursively.
//!
//! [`run`] keeps each session on one thread of its own runtimes, so a load
//! generator on the same machine as the servers spends as little CPU per
//! request as it can: the servers, not the client, should be what runs out.
//!
//! Latency (successful requests only) is recorded in µs in an HDR
//! histogram; errors are counted by kind. Which operation a `mix` lane
//! issues next, and which data node a get/set targets, comes from a
//! SplitMix64 stream per lane derived from [`BenchConfig::seed`]
//! ([`DEFAULT_SEED`]), so the op sequence of each lane is repeatable.
//!
//! ```no_run
//! # fn demo() -> Result<(), keel_bench::BenchError> {
//! use std::time::Duration;
//! use keel_bench::{BenchConfig, Workload};
//! let config = BenchConfig::new("127.0.0.1:2181", Workload::Mix, 10, Duration::from_secs(10))?;
//! let report = keel_bench::run(config, |line| eprintln!("{line}"))?;
//! println!("{report}");
//! # Ok(()) }
//! ```

mod populate;
pub mod profile;
mod report;
mod stats;
mod svg;
mod tree;
mod workload;

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use keel_client::{open_acl_unsafe, Acl, Client, ClientError, CreateMode, ErrorCode};
use tokio::task::JoinSet;
use tokio::time::Instant;

pub use populate::{
    populate, populate_async, PopulateConfig, PopulateProgress, PopulateReport, Shape,
    DEFAULT_FANOUT, DEFAULT_POPULATE_IN_FLIGHT, DEFAULT_POPULATE_SESSIONS, MAX_FANOUT,
    MAX_POPULATE_IN_FLIGHT, MAX_POPULATE_SESSIONS, MAX_POPULATE_VALUE_SIZE, MAX_POPULATE_ZNODES,
    MIN_FANOUT, MULTI_MAX_BYTES, MULTI_MAX_OPS, MULTI_OP_OVERHEAD_BYTES, POPULATE_ROOT,
};
pub use report::{BenchReport, LatencySummary, CSV_HEADER};
pub use stats::{HISTOGRAM_MAX_US, HISTOGRAM_SIGNIFICANT_DIGITS};
pub use tree::SETUP_CONCURRENCY;
pub use workload::{OpKind, SplitMix64, Workload, DEFAULT_SEED, MIX_BASIS_POINTS};

use stats::{Counts, Stats};
use tree::{DeleteProgress, Layout};

/// Most sessions one run opens.
pub const MAX_CLIENTS: usize = 10_000;
/// Most requests one session keeps in flight (`--in-flight`).
pub const MAX_IN_FLIGHT: usize = 1_024;
/// Most lanes (clients × in-flight) in one run.
pub const MAX_LANES: usize = 100_000;
/// Longest timed phase.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 60 * 60);
/// Largest `--value-size`: 1 MiB. A server with ZooKeeper's default
/// jute.maxbuffer (0xfffff) refuses requests that big, so values close to
/// it give errors there.
pub const MAX_VALUE_SIZE: usize = 1 << 20;
/// `--value-size` when not given.
pub const DEFAULT_VALUE_SIZE: usize = 100;
/// Time allowed to open one session (TCP connect plus handshake).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Session timeout the bench sessions ask for.
pub const SESSION_TIMEOUT_MS: u32 = 30_000;
/// Data nodes the get/set operations choose from (uniformly).
pub const DATA_NODES: usize = 100;
/// Children of the node `list` reads.
pub const LIST_CHILDREN: usize = 100;
/// Bytes of each of those children.
pub const LIST_CHILD_BYTES: usize = 50;
/// Most nodes a lane puts under one bucket node before starting the next.
pub const BUCKET_NODES: u64 = 10_000;
/// Nodes prepared per lane for `mix` deletes to take before the lane's own
/// creates have made some (at most; see [`DELETE_POOL_TOTAL`]).
pub const DELETE_POOL_PER_LANE: u64 = 8;
/// Cap on the prepared delete pool over all lanes (at least one per lane).
pub const DELETE_POOL_TOTAL: u64 = 20_000;

const SECOND: Duration = Duration::from_secs(1);

/// Why a run could not be made (or was refused before it started).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("unknown workload {0:?}; expected one of: create, mix, get, list, set, populate")]
    UnknownWorkload(String),
    #[error("invalid bench setting: {0}")]
    Invalid(String),
    #[error("cannot connect to {server}: {reason}")]
    Connect { server: String, reason: String },
    #[error("preparing the bench tree {root} failed at {path}: {source}")]
    Prepare {
        root: String,
        path: String,
        source: ClientError,
    },
    #[error("deleting the bench tree {root} failed at {path}: {source}")]
    Cleanup {
        root: String,
        path: String,
        source: ClientError,
    },
    #[error(
        "{root} already exists with {existing} znodes under it; populate does not resume: \
         delete it first (keel cli --server HOST:PORT deleteall {root}) or use an empty server"
    )]
    PopulateExists { root: String, existing: u64 },
    #[error(
        "populate created {expected} znodes but getAllChildrenNumber({root}) counts {counted}"
    )]
    PopulateCount {
        root: String,
        expected: u64,
        counted: u64,
    },
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What to run. Build with [`BenchConfig::new`] and adjust the public
/// fields; [`run`] validates them.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// "host:port" of each server; client `i` uses `servers[i % len]`.
    pub servers: Vec<String>,
    pub workload: Workload,
    /// Sessions, 1..=[`MAX_CLIENTS`].
    pub clients: usize,
    /// Length of the timed phase, up to [`MAX_DURATION`].
    pub duration: Duration,
    /// Bytes written by create and set (and held by the data nodes).
    pub value_size: usize,
    /// Requests each session keeps in flight, 1..=[`MAX_IN_FLIGHT`].
    pub in_flight: usize,
    /// Seed of the per-lane op generators.
    pub seed: u64,
    /// The bench root; `None` = `/keel-bench-<time>-<pid>`. It must not
    /// exist (the run refuses to touch a tree it did not make).
    pub root: Option<String>,
    /// Connect over TLS (every server is a secure client port).
    pub tls: Option<keel_client::ClientTls>,
    /// Leave the bench root and everything the run made under it
    /// (`--no-cleanup`): to inspect it, or when the servers are thrown
    /// away after the run and deleting a million nodes would only cost time.
    pub keep_tree: bool,
}

impl BenchConfig {
    /// A config with the defaults (`value_size` 100, `in_flight` 1,
    /// [`DEFAULT_SEED`], a generated root); `servers` is comma-separated.
    pub fn new(
        servers: &str,
        workload: Workload,
        clients: usize,
        duration: Duration,
    ) -> Result<BenchConfig, BenchError> {
        Ok(BenchConfig {
            servers: parse_servers(servers)?,
            workload,
            clients,
            duration,
            value_size: DEFAULT_VALUE_SIZE,
            in_flight: 1,
            seed: DEFAULT_SEED,
            root: None,
            tls: None,
            keep_tree: false,
        })
    }

    /// Checks every bound; the error names the offending setting.
    pub fn validate(&self) -> Result<(), BenchError> {
        let invalid = |m: String| Err(BenchError::Invalid(m));
        if self.servers.is_empty() {
            return invalid("no server given (--servers HOST:PORT[,HOST:PORT...])".into());
        }
        for s in &self.servers {
            if s.is_empty() || s.contains('/') || s.contains(',') {
                return invalid(format!("bad server address {s:?}: expected HOST:PORT"));
            }
        }
        if self.clients == 0 || self.clients > MAX_CLIENTS {
            return invalid(format!(
                "clients must be 1..={MAX_CLIENTS}, got {}",
                self.clients
            ));
        }
        if self.in_flight == 0 || self.in_flight > MAX_IN_FLIGHT {
            return invalid(format!(
                "in-flight must be 1..={MAX_IN_FLIGHT}, got {}",
                self.in_flight
            ));
        }
        if self.clients * self.in_flight > MAX_LANES {
            return invalid(format!(
                "clients × in-flight must be at most {MAX_LANES}, got {} × {}",
                self.clients, self.in_flight
            ));
        }
        if self.duration.is_zero() || self.duration > MAX_DURATION {
            return invalid(format!(
                "duration must be more than 0 and at most {} s, got {} s",
                MAX_DURATION.as_secs(),
                svg::trim(self.duration.as_secs_f64(), 3)
            ));
        }
        if self.value_size > MAX_VALUE_SIZE {
            return invalid(format!(
                "value-size must be at most {MAX_VALUE_SIZE} bytes (1 MiB), got {}",
                self.value_size
            ));
        }
        if let Some(root) = &self.root {
            let ok = root.starts_with('/')
                && root.len() > 1
                && !root.ends_with('/')
                && !root.contains("//")
                && root != "/zookeeper"
                && !root.starts_with("/zookeeper/");
            if !ok {
                return invalid(format!(
                    "bench root {root:?} must be an absolute znode path other than / and /zookeeper"
                ));
            }
        }
        Ok(())
    }

    fn lanes(&self) -> usize {
        self.clients * self.in_flight
    }

    /// Delete-pool nodes prepared per lane for `mix`.
    fn delete_pool_per_lane(&self) -> u64 {
        if !self.workload.deletes() {
            return 0;
        }
        (DELETE_POOL_TOTAL / self.lanes() as u64).clamp(1, DELETE_POOL_PER_LANE)
    }
}

/// Splits "host:port[,host:port...]" (spaces around entries are ignored).
pub fn parse_servers(servers: &str) -> Result<Vec<String>, BenchError> {
    let list: Vec<String> = servers
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if list.is_empty() {
        return Err(BenchError::Invalid(format!(
            "no server in {servers:?} (expected HOST:PORT[,HOST:PORT...])"
        )));
    }
    Ok(list)
}

/// A progress report, handed to the `progress` callback of [`run`] about
/// once a second. `Display` gives the line `keel bench` prints on stderr.
#[derive(Debug, Clone, PartialEq)]
pub enum ProgressLine {
    /// Sessions being opened and the tree being built (only while that
    /// takes more than a second).
    Setup {
        elapsed: Duration,
        connected: usize,
        clients: usize,
        created: u64,
        to_create: u64,
    },
    /// The timed phase, once per second.
    Run {
        /// Since the timed phase started.
        elapsed: Duration,
        /// Successful operations in the second that just ended.
        ops_per_sec: u64,
        /// p99 latency of all successes so far.
        p99_us: u64,
        /// Operations (successes + errors) so far.
        ops: u64,
        /// Errors so far.
        errors: u64,
    },
    /// The bench root being deleted (only while that takes more than a
    /// second).
    Cleanup {
        elapsed: Duration,
        found: u64,
        deleted: u64,
    },
}

impl fmt::Display for ProgressLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProgressLine::Setup {
                elapsed,
                connected,
                clients,
                created,
                to_create,
            } => write!(
                f,
                "setup   {:>5.1} s: {connected}/{clients} sessions, {created}/{to_create} nodes created",
                elapsed.as_secs_f64()
            ),
            ProgressLine::Run {
                elapsed,
                ops_per_sec,
                p99_us,
                ops,
                errors,
            } => write!(
                f,
                "[{:>5.1} s] {ops_per_sec:>8} ops/s   p99 {p99_us:>7} µs   ops {ops:>10}   errors {errors}",
                elapsed.as_secs_f64()
            ),
            ProgressLine::Cleanup {
                elapsed,
                found,
                deleted,
            } => write!(
                f,
                "cleanup {:>5.1} s: {found} nodes found, {deleted} deleted",
                elapsed.as_secs_f64()
            ),
        }
    }
}

/// Runs the benchmark on runtimes of its own: the setup on a multi-thread
/// one, each session (its lanes and its client's tasks) on one of a
/// current-thread runtime per CPU (`Workers`). Must not be called from
/// inside a Tokio runtime; use [`run_async`] there.
pub fn run(
    config: BenchConfig,
    mut progress: impl FnMut(&ProgressLine),
) -> Result<BenchReport, BenchError> {
    run_dyn(config, &mut progress)
}

/// `run`, not generic: the engine compiles once, in this crate, not again
/// in every crate that calls `run`.
fn run_dyn(
    config: BenchConfig,
    progress: &mut dyn FnMut(&ProgressLine),
) -> Result<BenchReport, BenchError> {
    config.validate()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("keel-bench")
        .build()
        .map_err(BenchError::Runtime)?;
    let workers = Workers::start().map_err(BenchError::Runtime)?;
    let report = runtime.block_on(run_on(config, progress, workers.handles.clone()));
    drop(workers);
    report
}

/// One current-thread runtime per core, each on its own thread: a
/// session's tasks (its lane, and its client's reader and writer) all run
/// on one of them, so handing a request or a reply from one task to the
/// next never wakes another thread. (On a multi-thread runtime they hop
/// between workers, and on the 2-core VMs Keel is measured on each such
/// wake-up costs the machine more than the request itself.)
struct Workers {
    handles: Vec<tokio::runtime::Handle>,
    stops: Vec<tokio::sync::oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Workers {
    fn start() -> std::io::Result<Workers> {
        let count = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut workers = Workers {
            handles: Vec::new(),
            stops: Vec::new(),
            threads: Vec::new(),
        };
        for index in 0..count {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            workers.handles.push(runtime.handle().clone());
            workers.stops.push(stop);
            workers.threads.push(
                std::thread::Builder::new()
                    .name(format!("keel-bench-{index}"))
                    .spawn(move || {
                        let _ = runtime.block_on(stopped);
                    })?,
            );
        }
        Ok(workers)
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for stop in self.stops.drain(..) {
            let _ = stop.send(());
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// [`run`] on the caller's runtime (which must be multi-threaded or at
/// least have time and IO enabled).
pub async fn run_async(
    config: BenchConfig,
    mut progress: impl FnMut(&ProgressLine),
) -> Result<BenchReport, BenchError> {
    run_on(config, &mut progress, Vec::new()).await
}

/// `run_async` with session `i`'s tasks on `workers[i % len]` (the
/// caller's runtime when `workers` is empty). Not generic: `run` blocks on
/// it here, so a crate that calls `run` compiles none of the engine again
/// (one that awaits `run_async` still does).
async fn run_on(
    config: BenchConfig,
    progress: &mut dyn FnMut(&ProgressLine),
    workers: Vec<tokio::runtime::Handle>,
) -> Result<BenchReport, BenchError> {
    config.validate()?;
    let setup_started = Instant::now();
    let layout = Layout {
        root: config.root.clone().unwrap_or_else(default_root),
    };
    let connected = Arc::new(AtomicUsize::new(0));
    let created = Arc::new(AtomicU64::new(0));
    let value: Arc<[u8]> = Arc::from(value_bytes(config.value_size));
    let levels = tree::prepare_levels(
        &layout,
        config.workload,
        config.clients,
        config.in_flight,
        &value,
        config.delete_pool_per_lane(),
    );
    let to_create: u64 = levels.iter().map(|l| l.len() as u64).sum();
    let setup_line = |_: Duration| ProgressLine::Setup {
        elapsed: setup_started.elapsed(),
        connected: connected.load(Ordering::Relaxed),
        clients: config.clients,
        created: created.load(Ordering::Relaxed),
        to_create,
    };

    // 1. Sessions.
    let admin = connect(&config.servers[0], config.tls.as_ref()).await?;
    let sessions = ticking(connect_all(&config, &connected, &workers), |e| {
        progress(&setup_line(e))
    })
    .await;
    let clients = match sessions {
        Ok(c) => c,
        Err(e) => {
            let _ = admin.close().await;
            return Err(e);
        }
    };

    // 2. The tree, then a sync on every session so each one's server has
    //    caught up with the admin session's writes.
    let acl: Arc<Vec<Acl>> = Arc::new(open_acl_unsafe());
    let prepared = ticking(
        async {
            tree::create_levels(&admin, &acl, &layout.root, levels, &created).await?;
            let root = layout.root.clone();
            tree::parallel(clients.clone(), SETUP_CONCURRENCY, move |c| {
                let root = root.clone();
                async move {
                    c.sync(&root).await.map_err(|source| BenchError::Prepare {
                        path: root.clone(),
                        root,
                        source,
                    })
                }
            })
            .await
            .map(drop)
        },
        |e| progress(&setup_line(e)),
    )
    .await;
    if let Err(e) = prepared {
        close_all(clients).await;
        // Only delete what this run made: the root exists because of us
        // iff its create (the first one) succeeded.
        if created.load(Ordering::Relaxed) > 0 {
            let p = Arc::new(DeleteProgress::default());
            if let Err(c) = tree::delete_tree(&admin, &layout.root, &p).await {
                tracing::warn!(error = %c, "cleanup after a failed setup failed");
            }
        }
        let _ = admin.close().await;
        return Err(e);
    }
    let setup = setup_started.elapsed();

    // 3. The timed phase.
    let plan = Arc::new(Plan {
        workload: config.workload,
        data_paths: (0..DATA_NODES).map(|i| layout.data_node(i)).collect(),
        list_path: layout.list_node(),
        layout: layout.clone(),
        value,
        acl,
    });
    let measured = measure(&plan, &clients, &config, &workers, progress).await;

    // 4. Close the sessions, delete the tree (unless asked to keep it).
    tracing::debug!("timed phase over; closing the bench sessions");
    close_all(clients).await;
    let cleanup_started = Instant::now();
    let cleaned = if config.keep_tree {
        Ok(0)
    } else {
        let deletion = Arc::new(DeleteProgress::default());
        ticking(tree::delete_tree(&admin, &layout.root, &deletion), |e| {
            progress(&ProgressLine::Cleanup {
                elapsed: e,
                found: deletion.found.load(Ordering::Relaxed),
                deleted: deletion.deleted.load(Ordering::Relaxed),
            })
        })
        .await
    };
    let cleanup = cleanup_started.elapsed();
    let _ = admin.close().await;

    let Measured {
        totals,
        per_second,
        per_second_errors,
        elapsed,
    } = measured;
    let tps = if elapsed.is_zero() {
        0.0
    } else {
        totals.successes as f64 / elapsed.as_secs_f64()
    };
    Ok(BenchReport {
        workload: config.workload,
        servers: config.servers.clone(),
        clients: config.clients,
        in_flight: config.in_flight,
        value_size: config.value_size,
        seed: config.seed,
        root: layout.root.clone(),
        duration: config.duration,
        elapsed,
        ops: totals.ops(),
        successes: totals.successes,
        errors: totals.errors,
        tps,
        latency: LatencySummary::of(&totals.histogram),
        ops_by_kind: OpKind::ALL
            .iter()
            .map(|k| (*k, totals.ops_by_kind[k.index()]))
            .collect(),
        error_kinds: totals.error_kinds.into_iter().collect(),
        per_second,
        per_second_errors,
        histogram: totals.histogram,
        setup,
        cleaned_nodes: *cleaned.as_ref().unwrap_or(&0),
        cleanup,
        cleanup_error: cleaned.err().map(|e| e.to_string()),
        kept_tree: config.keep_tree,
    })
}

/// "/keel-bench-<ms since the epoch, hex>-<pid>".
fn default_root() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("/keel-bench-{ms:x}-{}", std::process::id())
}

/// `n` bytes of printable filler.
fn value_bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| b'a' + (i % 26) as u8).collect()
}

/// Polls `fut` to completion, calling `tick` with the time since the start
/// once a second meanwhile.
async fn ticking<T>(fut: impl Future<Output = T>, mut tick: impl FnMut(Duration)) -> T {
    let started = Instant::now();
    let mut ticker = tokio::time::interval_at(started + SECOND, SECOND);
    tokio::pin!(fut);
    loop {
        tokio::select! {
            out = &mut fut => return out,
            _ = ticker.tick() => tick(started.elapsed()),
        }
    }
}

/// Opens one session on `server` (over TLS when `tls` is given) within
/// [`CONNECT_TIMEOUT`].
async fn connect(server: &str, tls: Option<&keel_client::ClientTls>) -> Result<Client, BenchError> {
    let fail = |reason: String| BenchError::Connect {
        server: server.to_string(),
        reason,
    };
    let attempt = Client::connect_with(server, SESSION_TIMEOUT_MS, tls);
    match tokio::time::timeout(CONNECT_TIMEOUT, attempt).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(ClientError::Io(e))) if e.raw_os_error() == Some(24) => Err(fail(format!(
            "{e} (each client needs a socket: raise the open-file limit, ulimit -n)"
        ))),
        Ok(Err(e)) => Err(fail(e.to_string())),
        Err(_) => Err(fail(format!(
            "no session within the connect timeout of {} s",
            CONNECT_TIMEOUT.as_secs()
        ))),
    }
}

/// Opens the bench sessions, client `i` on `servers[i % len]`.
async fn connect_all(
    config: &BenchConfig,
    connected: &Arc<AtomicUsize>,
    workers: &[tokio::runtime::Handle],
) -> Result<Vec<Client>, BenchError> {
    let targets: Vec<(usize, String)> = (0..config.clients)
        .map(|i| (i, config.servers[i % config.servers.len()].clone()))
        .collect();
    let mut clients = tree::parallel(targets, SETUP_CONCURRENCY, |(i, server)| {
        let connected = connected.clone();
        let tls = config.tls.clone();
        let worker = worker_of(workers, i);
        async move {
            // Connected on its worker: the client's tasks live there.
            let c = match worker {
                Some(worker) => {
                    let target = server.clone();
                    worker
                        .spawn(async move { connect(&target, tls.as_ref()).await })
                        .await
                        .map_err(|e| BenchError::Connect {
                            server,
                            reason: format!("the connecting task ended: {e}"),
                        })??
                }
                None => connect(&server, tls.as_ref()).await?,
            };
            connected.fetch_add(1, Ordering::Relaxed);
            Ok::<_, BenchError>((i, c))
        }
    })
    .await?;
    clients.sort_by_key(|(i, _)| *i);
    Ok(clients.into_iter().map(|(_, c)| c).collect())
}

/// The runtime session `index`'s tasks run on (None: the caller's).
fn worker_of(workers: &[tokio::runtime::Handle], index: usize) -> Option<tokio::runtime::Handle> {
    (!workers.is_empty()).then(|| workers[index % workers.len()].clone())
}

/// Closes every session (closeSession), errors ignored.
async fn close_all(clients: Vec<Client>) {
    let _ = tree::parallel(clients, SETUP_CONCURRENCY, |c| async move {
        let _ = c.close().await;
        Ok::<(), ()>(())
    })
    .await;
}

/// What every lane shares.
struct Plan {
    workload: Workload,
    layout: Layout,
    data_paths: Vec<String>,
    list_path: String,
    value: Arc<[u8]>,
    acl: Arc<Vec<Acl>>,
}

/// One closed loop of one session.
struct Lane {
    client: usize,
    lane: usize,
    /// Index over all lanes of the run (client × in_flight + lane).
    global: usize,
    rng: SplitMix64,
    /// Index of the next node this lane creates.
    next_node: u64,
    /// Nodes this lane created and has not deleted, oldest first (`mix`).
    live: VecDeque<u64>,
}

struct Measured {
    totals: Counts,
    per_second: Vec<u64>,
    per_second_errors: Vec<u64>,
    elapsed: Duration,
}

async fn measure(
    plan: &Arc<Plan>,
    clients: &[Client],
    config: &BenchConfig,
    workers: &[tokio::runtime::Handle],
    progress: &mut dyn FnMut(&ProgressLine),
) -> Measured {
    let stats = Arc::new(Stats::new(config.lanes()));
    let pool = config.delete_pool_per_lane();
    let mut lanes = JoinSet::new();
    let started = Instant::now();
    let deadline = started + config.duration;
    for (c, client) in clients.iter().enumerate() {
        for l in 0..config.in_flight {
            let global = c * config.in_flight + l;
            let lane = Lane {
                client: c,
                lane: l,
                global,
                rng: SplitMix64::for_lane(config.seed, global),
                next_node: pool,
                live: (0..pool).collect(),
            };
            let lane = run_lane(plan.clone(), client.clone(), lane, stats.clone(), deadline);
            match worker_of(workers, c) {
                Some(worker) => lanes.spawn_on(lane, &worker),
                None => lanes.spawn(lane),
            };
        }
    }
    let mut totals = Stats::empty_totals();
    let mut per_second = Vec::new();
    let mut per_second_errors = Vec::new();
    let mut ticker = tokio::time::interval_at(started + SECOND, SECOND);
    let mut last_tick = started;
    loop {
        tokio::select! {
            joined = lanes.join_next() => match joined {
                None => break,
                Some(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Some(_) => {}
            },
            now = ticker.tick() => {
                let (ok, errors) = stats.drain_into(&mut totals);
                per_second.push(ok);
                per_second_errors.push(errors);
                let secs = (now - last_tick).as_secs_f64().max(1e-3);
                last_tick = now;
                progress(&run_line(now - started, (ok as f64 / secs).round() as u64, &totals));
            }
        }
    }
    let elapsed = started.elapsed();
    let (ok, errors) = stats.drain_into(&mut totals);
    // Replies after the last tick: a second of their own if the lanes beat
    // the tick due at the deadline (so every second of the duration gets a
    // progress line), else part of the last second.
    let seconds = config.duration.as_secs_f64().ceil() as usize;
    let ticks = per_second.len();
    match (per_second.last_mut(), per_second_errors.last_mut()) {
        (Some(o), Some(e)) if ticks >= seconds => {
            *o += ok;
            *e += errors;
        }
        _ => {
            per_second.push(ok);
            per_second_errors.push(errors);
            let secs = last_tick.elapsed().as_secs_f64().max(1e-3);
            progress(&run_line(
                elapsed,
                (ok as f64 / secs).round() as u64,
                &totals,
            ));
        }
    }
    Measured {
        totals,
        per_second,
        per_second_errors,
        elapsed,
    }
}

fn run_line(elapsed: Duration, ops_per_sec: u64, totals: &Counts) -> ProgressLine {
    ProgressLine::Run {
        elapsed,
        ops_per_sec,
        p99_us: if totals.histogram.is_empty() {
            0
        } else {
            totals.histogram.value_at_quantile(0.99)
        },
        ops: totals.ops(),
        errors: totals.errors,
    }
}

/// The closed loop: draw an op, issue it, wait, record; until the deadline
/// (or until the session is lost).
async fn run_lane(
    plan: Arc<Plan>,
    client: Client,
    mut lane: Lane,
    stats: Arc<Stats>,
    deadline: Instant,
) {
    while Instant::now() < deadline {
        let mut kind = plan.workload.draw(&mut lane.rng);
        if kind == OpKind::Delete && lane.live.is_empty() {
            // Nothing of ours left to delete (rare: the delete pool is
            // exhausted); create instead, which keeps the lane's node count
            // from drifting down.
            kind = OpKind::Create;
        }
        let mut created = None;
        let owned: String;
        let path: &str = match kind {
            OpKind::Create => {
                let index = lane.next_node;
                lane.next_node += 1;
                if index > 0 && index.is_multiple_of(BUCKET_NODES) {
                    // A new bucket: untimed, like the tree setup.
                    let bucket = plan
                        .layout
                        .bucket(lane.client, lane.lane, index / BUCKET_NODES);
                    match client
                        .create(&bucket, &[], &plan.acl, CreateMode::Persistent)
                        .await
                    {
                        Ok(_) | Err(ClientError::Zk(ErrorCode::NodeExists)) => {}
                        Err(e) => {
                            stats.error(lane.global, kind, &e);
                            if !client.is_connected() {
                                return;
                            }
                            continue;
                        }
                    }
                }
                created = Some(index);
                owned = plan.layout.node(lane.client, lane.lane, index);
                &owned
            }
            OpKind::Delete => {
                let index = lane.live.pop_front().expect("checked non-empty");
                owned = plan.layout.node(lane.client, lane.lane, index);
                &owned
            }
            OpKind::Get | OpKind::Set => {
                &plan.data_paths[lane.rng.below(plan.data_paths.len() as u64) as usize]
            }
            OpKind::List => &plan.list_path,
        };
        let started = Instant::now();
        let result = match kind {
            OpKind::Create => client
                .create(path, &plan.value, &plan.acl, CreateMode::Persistent)
                .await
                .map(drop),
            OpKind::Set => client.set_data(path, &plan.value, -1).await.map(drop),
            OpKind::Get => client.get_data(path, false).await.map(drop),
            OpKind::List => client.get_children(path, false).await.map(drop),
            OpKind::Delete => client.delete(path, -1).await,
        };
        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        match result {
            Ok(()) => {
                stats.success(lane.global, kind, micros);
                if let (Some(index), true) = (created, plan.workload.deletes()) {
                    lane.live.push_back(index);
                }
            }
            Err(e) => {
                stats.error(lane.global, kind, &e);
                if !client.is_connected() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> BenchConfig {
        BenchConfig::new("127.0.0.1:1", Workload::Mix, 4, SECOND).unwrap()
    }

    #[test]
    fn defaults_validate() {
        let c = config();
        assert_eq!((c.value_size, c.in_flight, c.seed), (100, 1, DEFAULT_SEED));
        c.validate().unwrap();
    }

    #[test]
    fn bounds_are_enforced() {
        let check = |f: &dyn Fn(&mut BenchConfig), needle: &str| {
            let mut c = config();
            f(&mut c);
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(needle), "{e:?} lacks {needle:?}");
        };
        check(&|c| c.clients = 0, "clients");
        check(&|c| c.clients = MAX_CLIENTS + 1, "clients");
        check(&|c| c.duration = Duration::ZERO, "duration");
        check(&|c| c.duration = MAX_DURATION + SECOND, "duration");
        check(&|c| c.value_size = MAX_VALUE_SIZE + 1, "value-size");
        check(&|c| c.in_flight = 0, "in-flight");
        check(&|c| c.in_flight = MAX_IN_FLIGHT + 1, "in-flight");
        check(
            &|c| {
                c.clients = MAX_CLIENTS;
                c.in_flight = MAX_IN_FLIGHT;
            },
            "clients × in-flight",
        );
        check(&|c| c.root = Some("/".into()), "bench root");
        check(&|c| c.root = Some("/zookeeper/x".into()), "bench root");
        check(&|c| c.servers.clear(), "no server");
        assert!(parse_servers(" , ").is_err());
        assert_eq!(
            parse_servers("a:1, b:2").unwrap(),
            vec!["a:1".to_string(), "b:2".to_string()]
        );
        let mut c = config();
        c.value_size = MAX_VALUE_SIZE;
        c.validate().unwrap();
    }

    #[test]
    fn delete_pool_scales_down_with_lanes() {
        let mut c = config();
        assert_eq!(c.delete_pool_per_lane(), DELETE_POOL_PER_LANE);
        c.clients = 10_000;
        assert_eq!(c.delete_pool_per_lane(), 2);
        c.in_flight = 10;
        assert_eq!(c.delete_pool_per_lane(), 1);
        c.workload = Workload::Create;
        assert_eq!(c.delete_pool_per_lane(), 0);
    }

    #[test]
    fn progress_lines_read_well() {
        let line = ProgressLine::Run {
            elapsed: Duration::from_secs(3),
            ops_per_sec: 12_345,
            p99_us: 987,
            ops: 40_000,
            errors: 2,
        };
        let s = line.to_string();
        assert!(s.contains("3.0 s") && s.contains("12345 ops/s") && s.contains("p99"));
        assert!(s.contains("987 µs") && s.ends_with("errors 2"));
    }
}
