//! Four-letter words on the client port, in ZooKeeper 3.8's text formats
//! (monitoring tools and client test harnesses parse them).

use std::fmt::Write;
use std::sync::atomic::Ordering;

use keel_jute::{ClientInfo, Id};

use crate::config::ServerConfig;
use crate::shared::Shared;

/// Every word Keel knows (FourLetterCommands.java's set, Keel's `lcks`
/// and ClickHouse Keeper's `ftfl`).
pub const COMMANDS: [&str; 19] = [
    "ruok", "srvr", "stat", "mntr", "conf", "cons", "envi", "wchs", "wchc", "wchp", "dirs", "dump",
    "crst", "srst", "isro", "gtmk", "stmk", "lcks", "ftfl",
];
/// The ZooKeeper version Keel reports: kazoo and the Go harness parse it.
pub const ZOOKEEPER_VERSION: &str = "3.8.0-keel-0.1.0";
const BUILT_ON: &str = "11/22/2026 00:00 GMT";

/// AbstractFourLetterCommand.ZK_NOT_SERVING: what most words answer while
/// the server is not running (loading its data).
pub const NOT_SERVING: &str = "This ZooKeeper instance is not currently serving requests";

/// The answer to `word`; `shared` is None while the node loads its data.
pub fn answer(config: &ServerConfig, shared: Option<&Shared>, word: &str) -> String {
    let _op = crate::profile::enter(crate::profile::Op::FOURLW);
    if !config.four_letter_word_enabled(word) {
        return format!("{word} is not executed because it is not in the whitelist.\n");
    }
    match (word, shared) {
        // ZooKeeper's RuokCommand, EnvCommand and the trace-mask commands
        // answer whether or not the server runs.
        ("ruok", _) => "imok".into(),
        ("envi", _) => envi(config),
        // ClickHouse Keeper's feature flags, one `name<TAB>0|1` line each:
        // fixed by the build, so known while the data still loads.
        ("ftfl", _) => keel_tree::keeper::ftfl(),
        ("gtmk" | "stmk", _) => "0\n".into(),
        // IsroCommand prints "null" for a server that is not running.
        ("isro", None) => "null".into(),
        (_, None) if COMMANDS.contains(&word) => format!("{NOT_SERVING}\n"),
        (_, Some(shared)) => answer_serving(shared, word),
        _ => format!("{word} is not executed because it is not in the whitelist.\n"),
    }
}

fn answer_serving(shared: &Shared, word: &str) -> String {
    match word {
        // IsroCommand: "ro" for a ReadOnlyZooKeeperServer, else "rw".
        "isro" if shared.is_read_only() => "ro".into(),
        "isro" => "rw".into(),
        "srvr" => srvr(shared, false),
        "stat" => srvr(shared, true),
        "mntr" => mntr(shared),
        "conf" => conf(shared),
        "cons" => cons(shared) + "\n",
        "wchs" => wchs(shared),
        "wchc" => wchc(shared),
        "wchp" => wchp(shared),
        "dump" => dump(shared),
        "dirs" => dirs(shared),
        // Keel's own: the lock × operation profiler's matrix (profile.rs).
        "lcks" => crate::profile::report(),
        "srst" => {
            shared.stats.reset();
            "Server stats reset.\n".into()
        }
        "crst" => {
            shared.stats.reset();
            "Connection stats reset.\n".into()
        }
        _ => format!("{word} is not executed because it is not in the whitelist.\n"),
    }
}

fn mode(shared: &Shared) -> &'static str {
    let status = &shared.raft().status;
    if shared.is_read_only() {
        // ReadOnlyZooKeeperServer.getState()
        "read-only"
    } else if !status.cluster {
        "standalone"
    } else if status.observer.load(std::sync::atomic::Ordering::Acquire) {
        "observer"
    } else if status.is_leader.load(Ordering::Relaxed) {
        "leader"
    } else {
        "follower"
    }
}

fn srvr(shared: &Shared, with_clients: bool) -> String {
    let gauges = shared.gauges();
    let mut text = format!("Zookeeper version: {ZOOKEEPER_VERSION}, built on {BUILT_ON}\n");
    if with_clients {
        text.push_str("Clients:\n");
        text.push_str(&cons(shared));
        text.push('\n');
    }
    let _ = write!(
        text,
        "Latency min/avg/max: {}/{:.4}/{}\nReceived: {}\nSent: {}\nConnections: {}\nOutstanding: {}\nZxid: 0x{:x}\nMode: {}\nNode count: {}\n",
        gauges.min_latency_ms,
        gauges.avg_latency_ms,
        gauges.max_latency_ms,
        gauges.packets_received,
        gauges.packets_sent,
        gauges.num_alive_connections,
        gauges.outstanding_requests,
        gauges.last_zxid,
        mode(shared),
        gauges.znode_count,
    );
    text
}

fn cons(shared: &Shared) -> String {
    let mut text = String::new();
    let mut connections: Vec<_> = shared.connections().values().cloned().collect();
    connections.sort_by_key(|c| c.session_id);
    for c in connections {
        let _ = writeln!(
            text,
            " /{}[1](queued=0,recved={},sent={},sid=0x{:x},lop=NA,est=0,to={},lzxid=0x{:x})",
            c.peer,
            c.received.load(Ordering::Relaxed),
            c.sent.load(Ordering::Relaxed),
            c.session_id,
            c.timeout_ms,
            c.last_zxid.load(Ordering::Relaxed)
        );
    }
    text
}

fn mntr(shared: &Shared) -> String {
    let g = shared.gauges();
    let status = &shared.raft().status;
    let heartbeat = status.heartbeat.summary();
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed).to_string();
    let lines: Vec<(&str, String)> = vec![
        (
            "zk_version",
            format!("{ZOOKEEPER_VERSION}, built on {BUILT_ON}"),
        ),
        ("zk_uptime", g.uptime_ms.to_string()),
        ("zk_server_state", mode(shared).into()),
        ("zk_avg_latency", format!("{:.4}", g.avg_latency_ms)),
        ("zk_max_latency", g.max_latency_ms.to_string()),
        ("zk_min_latency", g.min_latency_ms.to_string()),
        ("zk_packets_received", g.packets_received.to_string()),
        ("zk_packets_sent", g.packets_sent.to_string()),
        (
            "zk_num_alive_connections",
            g.num_alive_connections.to_string(),
        ),
        (
            "zk_outstanding_requests",
            g.outstanding_requests.to_string(),
        ),
        ("zk_znode_count", g.znode_count.to_string()),
        ("zk_watch_count", g.watch_count.to_string()),
        ("zk_ephemerals_count", g.ephemerals_count.to_string()),
        (
            "zk_approximate_data_size",
            g.approximate_data_size.to_string(),
        ),
        (
            "zk_open_file_descriptor_count",
            g.open_file_descriptor_count.to_string(),
        ),
        (
            "zk_max_file_descriptor_count",
            g.max_file_descriptor_count.to_string(),
        ),
        ("zk_global_sessions", g.global_sessions.to_string()),
        ("zk_local_sessions", g.local_sessions.to_string()),
        ("keel_tree_digest", format!("{:#018x}", g.tree_digest)),
        ("keel_tree_bytes", g.tree_bytes.to_string()),
        (
            "keel_snapshot_preimage_bytes",
            g.snapshot_preimage_bytes.to_string(),
        ),
        ("keel_snapshot_last_ms", load(&status.snapshot_last_ms)),
        ("keel_snapshot_max_ms", load(&status.snapshot_max_ms)),
        ("keel_last_zxid", format!("{:#x}", g.last_zxid)),
        ("keel_raft_leader_id", load(&status.leader_id)),
        ("keel_raft_term", load(&status.term)),
        ("keel_raft_commit_index", load(&status.commit_index)),
        ("keel_raft_applied_index", load(&status.applied_index)),
        ("keel_raft_fsyncs", load(&status.fsyncs)),
        (
            "keel_log_write_paused",
            (status.log_write_paused.load(Ordering::Relaxed) as u8).to_string(),
        ),
        ("keel_raft_proposals", load(&status.proposals)),
        ("keel_raft_batches", load(&status.batches)),
        // How long the leader may hold a small batch now (linger.rs).
        ("keel_write_linger_us", load(&status.linger_us)),
        ("keel_snapshots_taken", load(&status.snapshots_taken)),
        // Leader → follower heartbeat round trips (0 on a node that never
        // led): proof that a saturating write load does not starve them.
        ("keel_heartbeat_rtt_count", heartbeat.count.to_string()),
        ("keel_heartbeat_rtt_p50_us", heartbeat.p50_us.to_string()),
        ("keel_heartbeat_rtt_p99_us", heartbeat.p99_us.to_string()),
        ("keel_heartbeat_rtt_max_us", heartbeat.max_us.to_string()),
    ];
    lines
        .into_iter()
        .map(|(key, value)| format!("{key}\t{value}\n"))
        .collect()
}

fn conf(shared: &Shared) -> String {
    let c = &shared.config;
    let mut text = format!(
        "clientPort={}\nsecureClientPort={}\ndataDir={}\ndataDirSize={}\ndataLogDir={}\ndataLogSize={}\ntickTime={}\nmaxClientCnxns={}\nminSessionTimeout={}\nmaxSessionTimeout={}\nclientPortListenBacklog=-1\nserverId={}\n",
        port_or_off(c.client_port),
        port_or_off(c.secure_client_port),
        c.data_dir.join("snapshots").display(),
        size(c.data_dir.join("snapshots")),
        c.data_dir.join("raft").display(),
        size(c.data_dir.join("raft")),
        c.tick_time_ms,
        c.max_client_connections_per_ip,
        c.min_session_timeout(),
        c.max_session_timeout(),
        c.server_id,
    );
    if shared.raft().status.cluster {
        text.push_str(&quorum_conf(shared));
    }
    text
}

/// What a quorum member's `conf` adds (QuorumZooKeeperServer.dumpConf):
/// the quorum settings, then "membership: " and the configuration as
/// /zookeeper/config holds it. Keel has no initLimit/syncLimit; it shows
/// its election timeout in ticks for both (followers sync by Raft, bounded
/// by the same timeout). electionAlg is ZooKeeper's only one (3).
fn quorum_conf(shared: &Shared) -> String {
    let membership = shared.raft().membership();
    let me = membership.members.get(&shared.config.server_id);
    let peer = me.map_or_else(|| shared.config.peer_address.clone(), |m| m.peer.clone());
    let quorum_port = peer
        .rsplit_once(':')
        .map_or("", |(_, port)| port)
        .to_string();
    let election_port = match me.map(|m| m.election_port) {
        Some(port) if port != 0 => port.to_string(),
        _ => quorum_port.clone(),
    };
    let observer = shared
        .raft()
        .status
        .observer
        .load(std::sync::atomic::Ordering::Acquire);
    let ticks = keel_consensus::ELECTION_TICKS;
    format!(
        "initLimit={ticks}\nsyncLimit={ticks}\nelectionAlg=3\nelectionPort={election_port}\nquorumPort={quorum_port}\npeerType={}\nmembership: \n{}",
        u8::from(observer),
        crate::reconfig::render(&membership.members, membership.config_id),
    )
}

/// ZooKeeper prints -1 for a client port it does not open.
fn port_or_off(port: u16) -> i32 {
    if port == 0 {
        -1
    } else {
        port as i32
    }
}

/// ZooKeeper's Environment keys (kazoo and tools parse zookeeper.version);
/// the java.* keys describe Keel's process, which has no JVM.
fn envi(config: &ServerConfig) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let os_version = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
    let home = std::env::var("HOME").unwrap_or_default();
    let executable = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    format!(
        "Environment:\nzookeeper.version={ZOOKEEPER_VERSION}, built on {BUILT_ON}\nhost.name={}\njava.version=none (keel {})\njava.vendor=none\njava.home=none\njava.class.path={executable}\njava.library.path=none\njava.io.tmpdir={}\njava.compiler=<NA>\nos.name={}\nos.arch={}\nos.version={}\nuser.name={user}\nuser.home={home}\nuser.dir={}\nos.memory.free=0MB\nos.memory.max=0MB\nos.memory.total=0MB\n",
        host.trim(),
        env!("CARGO_PKG_VERSION"),
        std::env::temp_dir().display(),
        std::env::consts::OS,
        std::env::consts::ARCH,
        os_version.trim(),
        config.data_dir.display()
    )
}

fn wchs(shared: &Shared) -> String {
    shared.node.with_watches(|watches| {
        format!(
            "{} connections watching {} paths\nTotal watches:{}\n",
            watches.session_count(),
            watches.path_count(),
            watches.watch_count()
        )
    })
}

fn wchc(shared: &Shared) -> String {
    let mut text = String::new();
    for (session_id, paths) in shared.node.with_watches(|w| w.paths_by_session()) {
        let _ = writeln!(text, "0x{session_id:x}");
        for path in paths {
            let _ = writeln!(text, "\t{path}");
        }
    }
    text
}

fn wchp(shared: &Shared) -> String {
    let mut text = String::new();
    for (path, sessions) in shared.node.with_watches(|w| w.sessions_by_path()) {
        let _ = writeln!(text, "{path}");
        for session_id in sessions {
            let _ = writeln!(text, "\t0x{session_id:x}");
        }
    }
    text
}

fn dump(shared: &Shared) -> String {
    let tree = shared.node.tree();
    let sessions = tree.sessions();
    let mut text = format!(
        "SessionTracker dump:\nGlobal Sessions({}):\n",
        sessions.len()
    );
    for (session_id, timeout_ms) in &sessions {
        let _ = writeln!(text, "0x{session_id:x}\t{timeout_ms}ms");
    }
    let with_ephemerals: Vec<_> = sessions
        .iter()
        .filter(|(id, _)| !tree.ephemerals_of(*id).is_empty())
        .collect();
    let _ = writeln!(
        text,
        "ephemeral nodes dump:\nSessions with Ephemerals ({}):",
        with_ephemerals.len()
    );
    for (session_id, _) in with_ephemerals {
        let _ = writeln!(text, "0x{session_id:x}:");
        for path in tree.ephemerals_of(*session_id) {
            let _ = writeln!(text, "\t{path}");
        }
    }
    text
}

/// Bytes of the files directly in `dir` (conf's and dirs' sizes).
fn size(dir: std::path::PathBuf) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn dirs(shared: &Shared) -> String {
    format!(
        "datadir_size: {}\nlogdir_size: {}\n",
        size(shared.config.data_dir.join("snapshots")),
        size(shared.config.data_dir.join("raft"))
    )
}

/// whoAmI: ZooKeeper's AuthUtil.getClientInfos (digest user = before ':').
pub fn client_infos(auth: &[Id]) -> Vec<ClientInfo> {
    auth.iter()
        .map(|id| {
            let user = match id.scheme.as_str() {
                "digest" => id.id.split(':').next().unwrap_or("").to_string(),
                _ => id.id.clone(),
            };
            ClientInfo {
                auth_scheme: id.scheme.clone(),
                user,
            }
        })
        .collect()
}
