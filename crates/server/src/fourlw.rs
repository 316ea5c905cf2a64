//! Four-letter words on the client port, in ZooKeeper 3.8's text formats
//! (monitoring tools and client test harnesses parse them).

use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use keel_jute::{ClientInfo, Id};

use crate::config::ServerConfig;
use crate::shared::{ConnectionInfo, Shared};

/// Every word Keel knows (FourLetterCommands.java's set, Keel's `lcks`
/// and ClickHouse Keeper's `ftfl`).
pub const COMMANDS: [&str; 19] = [
    "ruok", "srvr", "stat", "mntr", "conf", "cons", "envi", "wchs", "wchc", "wchp", "dirs", "dump",
    "crst", "srst", "isro", "gtmk", "stmk", "lcks", "ftfl",
];
/// The ZooKeeper version Keel reports: kazoo and the Go harness parse it.
pub const ZOOKEEPER_VERSION: &str = "3.8.0-keel-0.1.0";
/// Deliberately ZooKeeper 3.4's `MM/dd/yyyy HH:mm z` form, not 3.8's
/// `yyyy-MM-dd HH:mm z`: kazoo and Go's client (go-zookeeper/zk FLWSrvr,
/// whose pattern wants `\d\d/\d\d/\d\d\d\d`) parse this line, and the
/// Go client fails on ZooKeeper 3.8's (tests/compat/test_go_compat.py
/// excuses that one difference).
const BUILT_ON: &str = "11/22/2026 00:00 GMT";

/// AbstractFourLetterCommand.ZK_NOT_SERVING: what most words answer while
/// the server is not running (loading its data).
pub const NOT_SERVING: &str = "This ZooKeeper instance is not currently serving requests";

/// The words ZooKeeper 3.8 knows (FourLetterCommands.isKnown): it counts
/// one packet received for each (NIOServerCnxn.checkFourLetterWord's
/// packetReceived(4), before it checks the whitelist). Keel's own `lcks`
/// and `ftfl` are no words to ZooKeeper (it reads them as a frame length
/// that is too long and closes, counting nothing), so they count nothing.
pub fn counted_by_zookeeper(word: &str) -> bool {
    COMMANDS.contains(&word) && !matches!(word, "lcks" | "ftfl")
}

/// The UTF-16 units ZooKeeper's BufferedWriter (8192 chars, the JDK's
/// default) hands its SendBufferWriter at a time.
const WRITER_BUFFER_CHARS: usize = 8192;

/// How many packets ZooKeeper counts as sent for a four-letter word's
/// `answer`: its PrintWriter writes through a BufferedWriter of 8192 chars
/// into SendBufferWriter, which sends (sendBufferSync: one packetSent each)
/// whenever it holds more than 2048 chars and at close; no command
/// flushes on its own. So one packet per 8192 chars begun, none for an
/// empty answer (seen live: a 25501-byte wchp counts 4, 20119-byte wchc 3,
/// the 16310-byte mntr 2, a srvr 1).
pub fn packets_sent_for(answer: &str) -> u64 {
    let chars = if answer.is_ascii() {
        answer.len()
    } else {
        answer.encode_utf16().count()
    };
    chars.div_ceil(WRITER_BUFFER_CHARS) as u64
}

/// The answer to `word` asked by a connection from `asker`; `shared` is
/// None while the node loads its data.
pub fn answer(
    config: &ServerConfig,
    shared: Option<&Shared>,
    word: &str,
    asker: SocketAddr,
) -> String {
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
        (_, Some(shared)) => answer_serving(shared, word, asker),
        _ => format!("{word} is not executed because it is not in the whitelist.\n"),
    }
}

fn answer_serving(shared: &Shared, word: &str, asker: SocketAddr) -> String {
    match word {
        // IsroCommand: "ro" for a ReadOnlyZooKeeperServer, else "rw".
        "isro" if shared.is_read_only() => "ro".into(),
        "isro" => "rw".into(),
        "srvr" => srvr(shared, None),
        "stat" => srvr(shared, Some(asker)),
        "mntr" => mntr(shared),
        "conf" => conf(shared),
        "cons" => cons(shared, asker, false) + "\n",
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
        // CnxnStatResetCommand: every connection's counters and response
        // statistics (ServerCnxn.resetStats); the server's stay (srst's).
        "crst" => {
            for connection in shared.connections().values() {
                connection.reset();
            }
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

/// srvr, or stat (`clients_asked_by`: the asking connection's address):
/// StatCommand, its client lines brief (ServerCnxn.dumpConnectionInfo with
/// brief = true).
fn srvr(shared: &Shared, clients_asked_by: Option<SocketAddr>) -> String {
    let gauges = shared.gauges();
    let mut text = format!("Zookeeper version: {ZOOKEEPER_VERSION}, built on {BUILT_ON}\n");
    if let Some(asker) = clients_asked_by {
        text.push_str("Clients:\n");
        text.push_str(&cons(shared, asker, true));
        text.push('\n');
    }
    let _ = write!(
        text,
        "Latency min/avg/max: {}/{}/{}\nReceived: {}\nSent: {}\nConnections: {}\nOutstanding: {}\nZxid: 0x{:x}\nMode: {}\nNode count: {}\n",
        gauges.min_latency_ms,
        average_latency(gauges.avg_latency_ms),
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

/// One line per connection, ServerCnxn.dumpConnectionInfo's, each ending
/// in a newline: first the connection asking (ZooKeeper lists it too: no
/// session, its one packet read, nothing sent yet, interest ops 0), then
/// the sessions' connections by session id (ZooKeeper's order is its hash
/// set's). `brief` (stat's): the counts only.
fn cons(shared: &Shared, asker: SocketAddr, brief: bool) -> String {
    let connections: Vec<_> = shared.connections().values().cloned().collect();
    connection_lines(asker, connections, brief)
}

fn connection_lines(
    asker: SocketAddr,
    mut connections: Vec<std::sync::Arc<ConnectionInfo>>,
    brief: bool,
) -> String {
    let mut text = format!(" /{asker}[0](queued=0,recved=1,sent=0)\n");
    connections.sort_by_key(|c| c.session_id);
    for c in connections {
        connection_line(&mut text, &c, brief);
    }
    text
}

/// ServerCnxn.dumpConnectionInfo for a connection with a session
/// (interest ops 1: reading), plus the newline ConsCommand prints.
fn connection_line(text: &mut String, c: &ConnectionInfo, brief: bool) {
    let _ = write!(
        text,
        " /{}[1](queued={},recved={},sent={}",
        c.peer,
        c.outstanding.load(Ordering::Relaxed),
        c.received.load(Ordering::Relaxed),
        c.sent.load(Ordering::Relaxed),
    );
    if !brief && c.session_id != 0 {
        let r = c.responses.view();
        let _ = write!(
            text,
            ",sid=0x{:x},lop={},est={},to={}",
            c.session_id,
            r.last_op.name(),
            c.established_ms,
            c.timeout_ms
        );
        if r.last_cxid >= 0 {
            let _ = write!(text, ",lcxid=0x{:x}", r.last_cxid);
        }
        let _ = write!(
            text,
            ",lzxid=0x{:x},lresp={},llat={},minlat={},avglat={},maxlat={}",
            r.last_zxid,
            r.last_response_ms,
            r.last_latency_ms,
            r.min_latency_ms,
            r.avg_latency_ms,
            r.max_latency_ms
        );
    }
    text.push_str(")\n");
}

/// srvr/stat/mntr's average latency as ZooKeeper 3.8 prints it:
/// AvgMinMaxCounter.getAvg rounds the double average to 4 decimals
/// (BigDecimal.setScale(4, HALF_UP) of its exact value), and the text is
/// Java's Double.toString of that (`0.0`, `0.009`, `2.0282`, `5.0E-4`).
pub fn average_latency(avg_ms: f64) -> String {
    java_double_to_string(round_half_up_4(avg_ms))
}

/// BigDecimal(value).setScale(4, HALF_UP).doubleValue() for a finite
/// value >= 0. `{:.4}` rounds the exact binary value correctly, ties to
/// even; a tie is a value that is an odd multiple of 1/32 (x·10⁴ ends in
/// exactly .5 only then), which HALF_UP rounds up instead.
fn round_half_up_4(value: f64) -> f64 {
    if !value.is_finite() || value <= 0.0 {
        return 0.0;
    }
    let thirty_seconds = value * 32.0; // exact: a power of two
    let tie = thirty_seconds.fract() == 0.0
        && thirty_seconds < 2f64.powi(53)
        && thirty_seconds % 2.0 == 1.0;
    if tie {
        // value = j/32, j odd: value·10⁴ = j·312.5, rounded up (j·625+1)/2.
        let units = (thirty_seconds as u64 * 625).div_ceil(2);
        return format!("{}.{:04}", units / 10_000, units % 10_000)
            .parse()
            .unwrap_or(value);
    }
    format!("{value:.4}").parse().unwrap_or(value)
}

/// Java's Double.toString for a finite value: the shortest digits that
/// read back as the same double (Rust's `{}`/`{:e}` produce those too),
/// plain with at least one decimal for 10⁻³ <= |x| < 10⁷, else
/// `d.dddE±n` with at least one decimal.
pub fn java_double_to_string(value: f64) -> String {
    if value == 0.0 {
        return if value.is_sign_negative() {
            "-0.0"
        } else {
            "0.0"
        }
        .into();
    }
    if !value.is_finite() {
        return if value.is_nan() {
            "NaN".into()
        } else if value > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    if (1e-3..1e7).contains(&value.abs()) {
        let text = format!("{value}");
        return if text.contains('.') {
            text
        } else {
            text + ".0"
        };
    }
    let text = format!("{value:e}");
    let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
    if mantissa.contains('.') {
        format!("{mantissa}E{exponent}")
    } else {
        format!("{mantissa}.0E{exponent}")
    }
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
        ("zk_avg_latency", average_latency(g.avg_latency_ms)),
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    use super::*;
    use crate::shared::{LastOp, ResponseStats};

    /// What ZooKeeper 3.8 counted for each word (Received/Sent before and
    /// after it, probed live): one received for each word it knows; sent:
    /// one per 8192 chars of the answer begun.
    #[test]
    fn a_word_counts_its_packets_as_zookeepers_send_buffer_writer_sends_them() {
        assert!(counted_by_zookeeper("srvr"));
        assert!(counted_by_zookeeper("srst"));
        assert!(!counted_by_zookeeper("lcks"));
        assert!(!counted_by_zookeeper("ftfl"));
        assert!(!counted_by_zookeeper("zzzz"));
        assert_eq!(packets_sent_for(""), 0);
        assert_eq!(packets_sent_for("imok"), 1);
        assert_eq!(packets_sent_for(&"x".repeat(8192)), 1);
        assert_eq!(packets_sent_for(&"x".repeat(8193)), 2);
        assert_eq!(packets_sent_for(&"x".repeat(16310)), 2);
        assert_eq!(packets_sent_for(&"x".repeat(20119)), 3);
        assert_eq!(packets_sent_for(&"x".repeat(25501)), 4);
        // Java counts chars (UTF-16 units), not UTF-8 bytes.
        assert_eq!(packets_sent_for(&"é".repeat(8192)), 1);
        assert_eq!(packets_sent_for(&"😀".repeat(4097)), 2);
    }

    fn connection(port: u16, session_id: i64) -> Arc<ConnectionInfo> {
        Arc::new(ConnectionInfo {
            peer: format!("127.0.0.1:{port}").parse().unwrap(),
            session_id,
            timeout_ms: 10000,
            established_ms: 1795808461030,
            received: AtomicU64::new(1),
            sent: AtomicU64::new(1),
            outstanding: AtomicU64::new(0),
            responses: ResponseStats::default(),
        })
    }

    /// ZooKeeper 3.8's cons, seen on the wire: the asking connection
    /// first (in ZooKeeper's hash order it may come anywhere), brief;
    /// then each session's connection with every field, lcxid left out
    /// after crst, zxids in Long.toHexString's two's complement.
    #[test]
    fn cons_prints_zookeepers_fields_and_the_asking_connection() {
        let asker: SocketAddr = "127.0.0.1:53630".parse().unwrap();
        let a = connection(53628, 0x10001b82cac0003);
        a.responses.update(0, 0x37, LastOp::Sess, 1000, 1027);
        a.received.store(2, Ordering::Relaxed);
        a.sent.store(2, Ordering::Relaxed);
        a.responses
            .update(1, 0x37, LastOp::of(3, false), 29092371, 29092373);
        let b = connection(53640, 0x10001b82cac0002);
        let text = connection_lines(asker, vec![a.clone(), b.clone()], false);
        assert_eq!(
            text,
            concat!(
                " /127.0.0.1:53630[0](queued=0,recved=1,sent=0)\n",
                " /127.0.0.1:53640[1](queued=0,recved=1,sent=1,sid=0x10001b82cac0002,lop=null,",
                "est=1795808461030,to=10000,lcxid=0x0,lzxid=0x0,lresp=0,llat=0,minlat=0,avglat=0,maxlat=0)\n",
                " /127.0.0.1:53628[1](queued=0,recved=2,sent=2,sid=0x10001b82cac0003,lop=EXIS,",
                "est=1795808461030,to=10000,lcxid=0x1,lzxid=0x37,lresp=29092373,llat=2,minlat=0,avglat=14,maxlat=27)\n",
            )
        );
        // crst: ServerCnxn.resetStats.
        a.reset();
        let text = connection_lines(asker, vec![a.clone()], false);
        assert!(
            text.ends_with(concat!(
                " /127.0.0.1:53628[1](queued=0,recved=0,sent=0,sid=0x10001b82cac0003,lop=NA,",
                "est=1795808461030,to=10000,lzxid=0xffffffffffffffff,lresp=0,llat=0,minlat=0,avglat=0,maxlat=0)\n",
            )),
            "{text}"
        );
        // stat's lines are brief.
        assert_eq!(
            connection_lines(asker, vec![b], true),
            " /127.0.0.1:53630[0](queued=0,recved=1,sent=0)\n /127.0.0.1:53640[1](queued=0,recved=1,sent=1)\n"
        );
    }

    /// Go's client (go-zookeeper/zk v1.0.4 FLWCons) parses a session's
    /// line only when it has every field ZooKeeper prints.
    #[test]
    fn a_session_line_has_every_field_go_zookeepers_flwcons_wants() {
        let c = connection(53628, 0x1a2b);
        c.responses.update(7, 0x100000034, LastOp::Getd, 5, 9);
        let mut line = String::new();
        connection_line(&mut line, &c, false);
        let fields: Vec<&str> = line
            .trim_end()
            .trim_end_matches(')')
            .split_once('(')
            .unwrap()
            .1
            .split(',')
            .map(|f| f.split_once('=').unwrap().0)
            .collect();
        assert_eq!(
            fields,
            [
                "queued", "recved", "sent", "sid", "lop", "est", "to", "lcxid", "lzxid", "lresp",
                "llat", "minlat", "avglat", "maxlat"
            ]
        );
    }

    /// ZooKeeper 3.8 prints the average latency as Double.toString of
    /// AvgMinMaxCounter.getAvg (4 decimals, HALF_UP): `0/0.0/0` on a fresh
    /// server, `2.0282` once busy; Keel printed `{:.4}`: `0.0000`, `0.0090`.
    #[test]
    fn the_average_latency_prints_as_javas_double_to_string() {
        for (avg, text) in [
            (0.0, "0.0"),
            (0.009, "0.009"),
            (0.00904, "0.009"),
            (2.02817, "2.0282"),
            (1.0, "1.0"),
            (12.5, "12.5"),
            (0.00049, "5.0E-4"),
            (0.00004, "0.0"),
            (0.03125, "0.0313"),  // a tie: HALF_UP, where {:.4} gives 0.0312
            (0.09375, "0.0938"),  // a tie: {:.4} gives 0.0938 (to even)
            (0.015625, "0.0156"), // 1/64: no tie at 4 decimals
            (12345678.9, "1.23456789E7"),
        ] {
            assert_eq!(average_latency(avg), text, "{avg}");
        }
        assert_eq!(java_double_to_string(0.001), "0.001");
        assert_eq!(java_double_to_string(1e7), "1.0E7");
        assert_eq!(java_double_to_string(9999999.0), "9999999.0");
    }
}
