//! `keel`: thin binary. Parses flags, sets up logging, calls the crates.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use keel_server::ServerConfig;

/// jemalloc, not glibc's malloc: a server that builds millions of
/// long-lived nodes between short-lived request buffers keeps far less
/// freed memory stranded (RSS after populating 1M znodes through `apply`:
/// 370 vs 617 bytes per znode, `tree_scale` example; ARCHITECTURE.md).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its start: background threads return freed
/// pages to the OS on their decay schedule even when the server goes idle
/// (without them, purging happens only inside later allocations, so the
/// garbage of a bulk load stays resident while nothing else happens).
#[export_name = "_rjem_malloc_conf"]
pub static MALLOC_CONF: &[u8] = b"background_thread:true\0";

#[derive(Parser)]
#[command(
    name = "keel",
    version,
    about = "A ZooKeeper-compatible coordination service on Raft"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a Keel server (single node: 127.0.0.1:2181, data in ./keel-data).
    Server(Box<ServerArgs>),
    /// zkCli-compatible client: one command, or interactive without one.
    Cli(CliArgs),
    /// Load generator for ZooKeeper-compatible servers (Keel or ZooKeeper).
    Bench(Box<BenchArgs>),
}

/// Every flag overrides the config file key of the same name.
#[derive(Args)]
struct ServerArgs {
    /// TOML config file; keys as in ServerConfig (client_port, data_dir, ...).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Port of ZooKeeper clients (default 2181; 0 = off, with
    /// --secure-client-port).
    #[arg(long)]
    client_port: Option<u16>,
    /// Address the client ports listen on (default 127.0.0.1).
    #[arg(long)]
    client_address: Option<String>,
    /// Where the Raft log and snapshots live (default ./keel-data).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// ZooKeeper's tickTime: the unit of session timeouts (default 2000).
    #[arg(long)]
    tick_time_ms: Option<u32>,
    /// Shortest session timeout granted (default 2 x tick).
    #[arg(long)]
    min_session_timeout_ms: Option<u32>,
    /// Longest session timeout granted (default 20 x tick).
    #[arg(long)]
    max_session_timeout_ms: Option<u32>,
    /// The super user's digest, super:<base64 sha1> (ZooKeeper's
    /// zookeeper.DigestAuthenticationProvider.superDigest).
    #[arg(long)]
    super_digest: Option<String>,
    /// Comma-separated four-letter words to enable, or "*".
    #[arg(long)]
    four_letter_words: Option<String>,
    /// How often empty container nodes and expired TTL nodes are looked
    /// for (default 60000).
    #[arg(long)]
    container_check_interval_ms: Option<u64>,
    /// A snapshot after this many applied log entries (default 100000).
    #[arg(long)]
    snapshot_every_entries: Option<u64>,
    /// A snapshot also after this many bytes of applied log (default 64
    /// MiB, at least 1 MiB): bounds a restart's replay.
    #[arg(long)]
    snapshot_every_log_bytes: Option<u64>,
    /// Largest request or response frame (ZooKeeper's jute.maxbuffer,
    /// default 1048575).
    #[arg(long)]
    jute_max_buffer_bytes: Option<usize>,
    /// Most client connections from one IP address (default 0 =
    /// unlimited).
    #[arg(long)]
    max_client_connections_per_ip: Option<usize>,
    /// This member's id, 1 to 255 (default 1), as in --peers.
    #[arg(long = "id")]
    server_id: Option<u64>,
    /// Cluster members: 1=HOST:PORT,2=HOST:PORT,3=HOST:PORT (peer ports; an
    /// entry may end with ;CLIENTHOST:CLIENTPORT). Read only by an empty data dir.
    #[arg(long)]
    peers: Option<String>,
    /// Accept ZooKeeper's reconfig (membership changes; super user only).
    #[arg(long)]
    reconfig_enabled: bool,
    /// Join a running cluster: its members' client addresses HOST:PORT[,...]
    /// (with --peer-address, without --peers).
    #[arg(long)]
    join: Option<String>,
    /// This node's peer address HOST:PORT when it joins (--join).
    #[arg(long)]
    peer_address: Option<String>,
    /// File with user:password of a digest identity allowed to reconfigure,
    /// with which a joining node asks to be added.
    #[arg(long)]
    join_auth_file: Option<PathBuf>,
    /// Name of the cluster (default keel); its members must agree.
    #[arg(long)]
    cluster_name: Option<String>,
    /// Leader affinity: id of the member that should lead when healthy.
    #[arg(long)]
    preferred_leader: Option<u64>,
    /// Comma-separated ids (listed in --peers) of non-voting observers.
    #[arg(long, value_delimiter = ',')]
    observers: Option<Vec<u64>>,
    /// Turn on the lock × operation profiler (four-letter word `lcks`).
    #[arg(long)]
    profile_locks: bool,
    /// Threads serving client connections (0 = cores - 1, at least 1).
    #[arg(long)]
    client_threads: Option<usize>,
    /// TLS client port beside --client-port (0 = off; --client-port 0 turns
    /// the plain port off).
    #[arg(long)]
    secure_client_port: Option<u16>,
    /// PEM certificate chain of the TLS port (reread on SIGHUP); with
    /// --peer-tls also the member's (DNS SAN keel-member-<id>).
    #[arg(long)]
    tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file.
    #[arg(long)]
    tls_key_file: Option<PathBuf>,
    /// PEM bundle of trusted CAs (client certificates; peer_tls: both sides).
    #[arg(long)]
    tls_ca_file: Option<PathBuf>,
    /// none | want | need (default need, as ZooKeeper's ssl.clientAuth).
    #[arg(long)]
    tls_client_auth: Option<keel_server::tls::ClientAuth>,
    /// JAAS file whose Server section lists SASL DIGEST-MD5 users.
    #[arg(long)]
    sasl_users_file: Option<PathBuf>,
    /// Close connections that send a request before authenticating with SASL.
    #[arg(long)]
    require_sasl: bool,
    /// Peer connections are mutual TLS 1.3 (needs the three --tls-*-file).
    #[arg(long)]
    peer_tls: bool,
    /// File with the cluster's shared peer secret (at least 32 bytes).
    #[arg(long)]
    peer_secret_file: Option<PathBuf>,
    /// Serve Prometheus metrics on this port (GET /metrics; 0 = off, the default).
    #[arg(long)]
    metrics_port: Option<u16>,
    /// Address of the metrics port (default 127.0.0.1).
    #[arg(long)]
    metrics_address: Option<String>,
    /// Serve read-only clients on local sessions while no leader is known
    /// (ZooKeeper's readonlymode.enabled).
    #[arg(long)]
    read_only_when_partitioned: bool,
    /// Linearizable reads wait for a ReadIndex round each instead of
    /// being served from the leader's read lease (`read_lease = false`).
    #[arg(long)]
    no_read_lease: bool,
    /// The Raft log's writes go through the page cache instead of
    /// O_DIRECT (`log_direct_io = false`).
    #[arg(long)]
    no_log_direct_io: bool,
    /// Keel KV proposes every write alone, never a pipelined batch
    /// (`kv_batch_writes = false`; for a rolling upgrade from a release
    /// without batches).
    #[arg(long)]
    no_kv_batch_writes: bool,
    /// Serve Keel KV (Redis protocol, RESP2/RESP3) on this port of
    /// --client-address (0 = off, the default).
    #[arg(long)]
    resp_port: Option<u16>,
    /// Keel KV's shard threads (0 = one per core, the default).
    #[arg(long)]
    kv_shards: Option<usize>,
    /// The longest argument of a KV request (default 1 MiB).
    #[arg(long)]
    resp_max_bulk_bytes: Option<usize>,
}

#[derive(Args)]
struct CliArgs {
    /// The server to connect to, HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:2181")]
    server: String,
    /// The command and its arguments, e.g. `ls -s /`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

/// Each client is one session issuing requests in a closed loop; the tree a
/// workload needs is built under a fresh root before timing and deleted
/// after (unless --no-cleanup). Progress goes to stderr once a second, the
/// summary to stdout.
/// `populate` instead creates --znodes znodes under /keel-populate (multi
/// batches) and leaves them there.
#[derive(Args)]
struct BenchArgs {
    /// Comma-separated HOST:PORT list; clients are spread over it round-robin.
    #[arg(long, value_name = "HOST:PORT[,...]")]
    servers: String,
    /// create | mix | get | list | set | populate (mix: 1% create, 8% set,
    /// 45% get, 45% getChildren of a 100-child node, 1% delete).
    #[arg(long)]
    workload: String,
    /// Number of sessions (1..=10000; populate: 1..=64, default 4).
    #[arg(long, value_name = "N", required_unless_present = "znodes")]
    clients: Option<usize>,
    /// Length of the timed phase in seconds (not for populate).
    #[arg(long, value_name = "SECONDS", required_unless_present = "znodes")]
    duration: Option<u64>,
    /// Bytes written by create and set, and held by the nodes get reads.
    #[arg(long, value_name = "BYTES", default_value_t = keel_bench::DEFAULT_VALUE_SIZE)]
    value_size: usize,
    /// Append one result row to this CSV file (header if new or empty).
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Write an SVG with throughput over time and the latency percentiles.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Requests each client keeps in flight (1 = synchronous client;
    /// populate: multis per session, default 4).
    #[arg(long, value_name = "K")]
    in_flight: Option<usize>,
    /// populate: znodes to create under /keel-populate (parents included).
    #[arg(long, value_name = "N")]
    znodes: Option<u64>,
    /// populate: most children per parent.
    #[arg(long, value_name = "F", default_value_t = keel_bench::DEFAULT_FANOUT)]
    fanout: u64,
    /// After the run, print the top rows of every server's lock × operation
    /// profile during it (servers started with --profile-locks).
    #[arg(long)]
    profile: bool,
    /// Connect over TLS (--servers are secure client ports), trusting the
    /// CA certificates of this PEM file.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// PEM client certificate for servers that require one (with --tls-key).
    #[arg(long, value_name = "FILE", requires = "tls_ca")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Leave the bench's tree (its root and every node the run made) on
    /// the servers instead of deleting it after the run.
    #[arg(long)]
    no_cleanup: bool,
}

/// The bench's TLS configuration, if --tls-ca is given.
fn bench_tls(args: &BenchArgs) -> anyhow::Result<Option<keel_client::ClientTls>> {
    let Some(ca_file) = &args.tls_ca else {
        return Ok(None);
    };
    let options = keel_client::TlsOptions {
        ca_file: ca_file.clone(),
        cert_file: args.tls_cert.clone(),
        key_file: args.tls_key.clone(),
    };
    Ok(Some(keel_client::ClientTls::load(&options)?))
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Server(args) => server(*args),
        Command::Cli(args) => client(args),
        Command::Bench(args) => bench(*args),
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", one_line(&error));
            std::process::ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, each cause once: the library
/// errors already name their source in their own message ("cannot read
/// config file F: No such file..."), so a cause whose text the line holds
/// is not repeated (anyhow's report would print it again under "Caused
/// by", with a backtrace when RUST_BACKTRACE is set).
fn one_line(error: &anyhow::Error) -> String {
    let mut line = error.to_string();
    for cause in error.chain().skip(1) {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    line
}

fn server_config(args: ServerArgs) -> anyhow::Result<ServerConfig> {
    let mut config = match &args.config {
        Some(path) => ServerConfig::from_file(path)?,
        None => ServerConfig::default(),
    };
    macro_rules! set {
        ($($field:ident),*) => { $( if let Some(value) = args.$field { config.$field = value; } )* };
    }
    set!(
        client_port,
        client_address,
        data_dir,
        tick_time_ms,
        min_session_timeout_ms,
        max_session_timeout_ms,
        container_check_interval_ms,
        snapshot_every_entries,
        snapshot_every_log_bytes,
        jute_max_buffer_bytes,
        max_client_connections_per_ip,
        client_threads,
        server_id,
        peers,
        cluster_name,
        preferred_leader,
        observers,
        metrics_port,
        metrics_address,
        resp_port,
        resp_max_bulk_bytes,
        kv_shards,
        secure_client_port,
        tls_client_auth,
        join,
        peer_address
    );
    if args.reconfig_enabled {
        config.reconfig_enabled = true;
    }
    if args.profile_locks {
        config.profile_locks = true;
    }
    if args.peer_tls {
        config.peer_tls = true;
    }
    if args.require_sasl {
        config.require_sasl = true;
    }
    if args.read_only_when_partitioned {
        config.read_only_when_partitioned = true;
    }
    if args.no_read_lease {
        config.read_lease = false;
    }
    if args.no_log_direct_io {
        config.log_direct_io = false;
    }
    if args.no_kv_batch_writes {
        config.kv_batch_writes = false;
    }
    for (flag, value) in [
        (&mut config.tls_cert_file, args.tls_cert_file),
        (&mut config.tls_key_file, args.tls_key_file),
        (&mut config.tls_ca_file, args.tls_ca_file),
        (&mut config.sasl_users_file, args.sasl_users_file),
        (&mut config.peer_secret_file, args.peer_secret_file),
        (&mut config.join_auth_file, args.join_auth_file),
    ] {
        if value.is_some() {
            *flag = value;
        }
    }
    if let Some(digest) = args.super_digest {
        config.super_digest = Some(digest);
    }
    if let Some(words) = args.four_letter_words {
        config.four_letter_words = words
            .split(',')
            .map(|w| w.trim().to_string())
            .filter(|w| !w.is_empty())
            .collect();
    }
    config.validate()?;
    Ok(config)
}

/// Logs to stderr at `KEEL_LOG`'s levels (else `default_level`): a level
/// (`debug`) or comma-separated `target=level` directives
/// (`info,keel_consensus=debug`). Colours only on a terminal, so a log file
/// or a journal holds plain text. A `KEEL_LOG` that does not parse is an
/// error, not a silent fallback.
fn init_logging(default_level: &str) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter: Targets = match std::env::var("KEEL_LOG") {
        Ok(spec) if !spec.trim().is_empty() => spec.parse().map_err(|e| {
            anyhow::anyhow!(
                "KEEL_LOG={spec:?}: {e} (expected a level such as `debug`, or \
                 `target=level` directives such as `info,keel_consensus=debug`)"
            )
        })?,
        _ => default_level.parse()?,
    };
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_max_level(LevelFilter::TRACE)
        .with_ansi(colour)
        .with_writer(std::io::stderr)
        .finish()
        .with(filter)
        .init();
    Ok(())
}

fn server(args: ServerArgs) -> anyhow::Result<()> {
    init_logging("info")?;
    let config = server_config(args)?;
    let runtime = client_runtime(config.client_threads())?;
    runtime.block_on(async move {
        let plain = match config.client_port {
            0 => None,
            port => Some(listen(&config.client_address, port).await?),
        };
        let secure = match config.secure_client_port {
            0 => None,
            port => {
                let listener = listen(&config.client_address, port).await?;
                let secure = keel_server::SecureListener::load(listener, &config)?;
                tokio::spawn(reload_on_sighup(secure.tls.clone()));
                Some(secure)
            }
        };
        tracing::info!(client_port = config.client_port, secure_client_port = config.secure_client_port, data_dir = %config.data_dir.display(), "starting keel");
        let listeners = keel_server::ClientListeners { plain, secure };
        keel_server::run_with(listeners, config, Box::pin(shutdown_signal()))
            .await
            .context("keel server failed")
    })
}

/// The runtime of the client side (connections, timers, the accept loop).
/// One thread gets a current-thread runtime: the thread that starts the
/// server runs every task, with no work-stealing scheduler (its per-batch
/// poll-time statistics, cross-thread wake-ups) and no second thread
/// beside it. More threads get a multi-thread runtime of that many
/// workers.
fn client_runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    assert!(threads >= 1, "client_threads() is at least 1");
    if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    }
}

async fn listen(host: &str, port: u16) -> anyhow::Result<tokio::net::TcpListener> {
    let address = format!("{host}:{port}");
    keel_server::bind_client_port(&address)
        .await
        .with_context(|| format!("cannot listen on {address}"))
}

/// SIGHUP rereads the TLS certificate, key and CA files: handshakes from
/// then on use them, open connections keep theirs. A file that does not
/// load leaves the previous certificates in use.
async fn reload_on_sighup(tls: std::sync::Arc<keel_server::tls::ReloadableServerConfig>) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = signal(SignalKind::hangup()).expect("SIGHUP handler");
    while hangup.recv().await.is_some() {
        match tls.reload() {
            Ok(()) => {
                tracing::info!(cert = %tls.files().cert_file.display(), "SIGHUP: TLS certificates reloaded")
            }
            Err(error) => {
                tracing::error!(%error, "SIGHUP: TLS certificates not reloaded; the previous ones stay in use")
            }
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    tracing::info!("shutdown requested");
}

fn client(args: CliArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let code = runtime.block_on(async move {
        let (mut stdout, mut stderr) = (std::io::stdout(), std::io::stderr());
        keel_client::cli::run_cli_split(&args.server, args.command, &mut stdout, &mut stderr).await
    })?;
    std::process::exit(code);
}

/// Rows of each server's lock profile `keel bench --profile` prints.
const PROFILE_TOP_ROWS: usize = 12;

fn bench(args: BenchArgs) -> anyhow::Result<()> {
    init_logging("warn")?;
    if args.workload == "populate" {
        return populate(args);
    }
    if args.znodes.is_some() {
        anyhow::bail!("--znodes is only for --workload populate");
    }
    let workload: keel_bench::Workload = args.workload.parse()?;
    let (Some(clients), Some(duration)) = (args.clients, args.duration) else {
        anyhow::bail!("--clients and --duration are required for the {workload} workload");
    };
    let mut config = keel_bench::BenchConfig::new(
        &args.servers,
        workload,
        clients,
        std::time::Duration::from_secs(duration),
    )?;
    config.value_size = args.value_size;
    config.in_flight = args.in_flight.unwrap_or(1);
    config.tls = bench_tls(&args)?;
    config.keep_tree = args.no_cleanup;
    if args.profile && config.tls.is_some() {
        anyhow::bail!("--profile reads `lcks` over the plain client port: not with --tls-ca");
    }
    config.validate()?;
    let servers = config.servers.clone();
    let before = if args.profile {
        let profiles: Result<Vec<_>, _> = servers
            .iter()
            .map(|s| keel_bench::profile::fetch(s))
            .collect();
        Some(profiles?)
    } else {
        None
    };
    let report = keel_bench::run(config, |line| eprintln!("{line}"))?;
    println!("{report}");
    if let Some(before) = before {
        for (server, before) in servers.iter().zip(&before) {
            let after = keel_bench::profile::fetch(server)?;
            let rows = keel_bench::profile::difference(before, &after);
            print!(
                "{}",
                keel_bench::profile::format_top(server, &rows, PROFILE_TOP_ROWS)
            );
        }
    }
    if let Some(path) = &args.csv {
        report.append_csv(path)?;
    }
    if let Some(path) = &args.plot {
        report.write_svg(path)?;
    }
    if let Some(error) = &report.cleanup_error {
        anyhow::bail!("the bench tree {} was not removed: {error}", report.root);
    }
    Ok(())
}

/// `keel bench --workload populate`: progress on stderr, then exactly
/// `populated N znodes in S s` on stdout.
fn populate(args: BenchArgs) -> anyhow::Result<()> {
    let Some(znodes) = args.znodes else {
        anyhow::bail!("--workload populate needs --znodes N");
    };
    if args.duration.is_some() || args.csv.is_some() || args.plot.is_some() {
        anyhow::bail!(
            "--duration, --csv and --plot are not for populate (it runs until N znodes exist)"
        );
    }
    if args.no_cleanup {
        anyhow::bail!("--no-cleanup is not for populate (it always leaves its znodes)");
    }
    let mut config = keel_bench::PopulateConfig::new(&args.servers, znodes)?;
    config.value_size = args.value_size;
    config.fanout = args.fanout;
    config.sessions = args
        .clients
        .unwrap_or(keel_bench::DEFAULT_POPULATE_SESSIONS);
    config.in_flight = args
        .in_flight
        .unwrap_or(keel_bench::DEFAULT_POPULATE_IN_FLIGHT);
    config.tls = bench_tls(&args)?;
    let report = keel_bench::populate(config, |line| eprintln!("{line}"))?;
    eprintln!(
        "{} multis; getAllChildrenNumber({}) = {}; last znode {}",
        report.multis,
        keel_bench::POPULATE_ROOT,
        report.counted,
        report.last_path
    );
    println!("{report}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn an_error_line_names_each_cause_once() {
        let missing = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let config = keel_server::config::ConfigError::Read {
            path: "/x.toml".into(),
            source: missing,
        };
        let error = anyhow::Error::new(config).context("starting the server");
        assert_eq!(
            one_line(&error),
            "starting the server: cannot read config file /x.toml: no such file"
        );
        let plain = anyhow::anyhow!("a").context("b");
        assert_eq!(one_line(&plain), "b: a");
    }
}
