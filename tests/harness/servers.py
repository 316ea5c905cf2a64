"""Start/stop one real Apache ZooKeeper 3.8 or Keel server; four-letter
words (`mntr` as a dict, srvr's Zxid); `keel bench` runs.

Every server binds 127.0.0.1 (on a free port unless told otherwise), runs in
its own process group (so that kill() reaches every child) and is registered
in a module-level set that an atexit hook drains, in addition to the pytest
fixture finalizers. Clusters and ensembles of these servers: harness.cluster.

Python 3 standard library only, no pytest: bench/compare.py and
`python3 -m harness.cluster` use it outside pytest.
"""

import atexit
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WORK_ROOT = os.environ.get("KEEL_TEST_WORKDIR", os.path.join(REPO_ROOT, "tests", "work"))
KEEL_BIN = os.environ.get("KEEL_BIN", os.path.join(REPO_ROOT, "target", "release", "keel"))

JAVA = os.environ.get("JAVA", shutil.which("java") or "/usr/bin/java")
JAVA_DIR = "/usr/share/java"
# zookeeper.jar's manifest Class-Path already names jute, netty, jackson,
# commons-*, metrics, snappy and slf4j-api (all in /usr/share/java); we only
# add an slf4j binding so the server log goes to stderr.
ZK_JAR = os.path.join(JAVA_DIR, "zookeeper.jar")
ZK_JUTE_JAR = os.path.join(JAVA_DIR, "zookeeper-jute.jar")
SLF4J_API_JAR = os.path.join(JAVA_DIR, "slf4j-api.jar")
SLF4J_SIMPLE_JAR = os.path.join(JAVA_DIR, "slf4j-simple.jar")
SLF4J_NOP_JAR = os.path.join(JAVA_DIR, "slf4j-nop.jar")
ZK_SERVER_CLASSPATH = ":".join([ZK_JAR, ZK_JUTE_JAR, SLF4J_API_JAR, SLF4J_SIMPLE_JAR])
ZK_CLIENT_CLASSPATH = ":".join([ZK_JAR, ZK_JUTE_JAR, SLF4J_API_JAR, SLF4J_NOP_JAR])
ZKCLI = "/usr/share/zookeeper/bin/zkCli.sh"
CLI_MT = "/usr/lib/zookeeper/bin/cli_mt"

SUPER_DIGEST = "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
SUPER_PASSWORD = "test"  # base64(sha1("super:test")) == the digest above

# What the test suites run with (settings=... adds to or overrides these).
# A server made with test_defaults=False starts from {} instead: every key
# left out is the server's own default (bench/compare.py, `make cluster`).
DEFAULT_SETTINGS = {
    "tick_time_ms": 500,
    "min_session_timeout_ms": 1000,
    "container_check_interval_ms": 100,
    "super_digest": SUPER_DIGEST,
    "four_letter_words": ["*"],
    # ZooKeeper only: TTL nodes on; a small, quickly started JVM
    "zk_extended_types": True,
    "zk_jvm_options": ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"],
}

_live = set()
_live_lock = threading.Lock()
_ports_handed_out = set()


def _kill_all_live():
    with _live_lock:
        servers = list(_live)
    for s in servers:
        try:
            s.kill()
        except Exception:
            pass


atexit.register(_kill_all_live)


# Knuth's multiplicative hash: spreads ports of one parity evenly over
# the workers' shares.
_PORT_HASH_MULTIPLIER = 2654435761
_PORT_HASH_SHIFT = 12


def _worker_share():
    """(index, count) of this pytest-xdist worker (`make test` runs some
    suites on several processes), (0, 1) outside xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count < 2:
        return 0, 1
    index = int(worker[2:])
    assert 0 <= index < count, (worker, count)
    return index, count


def free_port():
    """A TCP port on 127.0.0.1 that nobody listens on right now (and that this
    process has not handed out before). Under pytest-xdist each worker takes
    only the ports of its own share (a hash of the port, as the kernel's
    bind(0) picks ports of one parity), so no two workers hand out the same
    port."""
    index, count = _worker_share()
    for _ in range(200 * count):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if (port * _PORT_HASH_MULTIPLIER >> _PORT_HASH_SHIFT) % count == index and port not in _ports_handed_out:
            _ports_handed_out.add(port)
            return port
    raise RuntimeError("no free port")


def four_letter_word(port, word, host="127.0.0.1", timeout=5.0):
    """Send a four-letter word and return everything the server sends back
    before closing the connection (bytes)."""
    if isinstance(word, str):
        word = word.encode()
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word)
        try:
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        chunks = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                b = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)


def keel_available():
    return os.path.isfile(KEEL_BIN) and os.access(KEEL_BIN, os.X_OK)


def dir_bytes(path):
    """Bytes of the files under `path` (a data dir); a file deleted while
    it is walked (a log purge) counts as none."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def rss_bytes(pid):
    """Resident memory of a process and its children (a JVM started
    through a wrapper counts). RuntimeError if the process is gone."""
    total = 0
    for p in [pid] + _children(pid):
        try:
            with open("/proc/%d/status" % p) as f:
                total += next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            if p == pid:
                raise RuntimeError("no VmRSS for process %d" % pid)
    return total


def _children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            kids = [int(x) for x in f.read().split()]
    except OSError:
        return []
    return kids + [k for kid in kids for k in _children(kid)]


SNAPSHOT_FILE = re.compile(r"^snapshot-(\d+)-(\d+)\.snap$")


def snapshot_files(data_dir):
    """A Keel data dir's snapshot files as [(index, path)], oldest first;
    [] if it has no snapshots folder yet."""
    folder = os.path.join(data_dir, "snapshots")
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found = [(int(m.group(1)), os.path.join(folder, m.group(0))) for m in map(SNAPSHOT_FILE.match, names) if m]
    return sorted(found)


def make_workdir(prefix):
    os.makedirs(WORK_ROOT, exist_ok=True)
    return tempfile.mkdtemp(prefix=prefix + "-", dir=WORK_ROOT)


class ServerStartError(RuntimeError):
    pass


class BaseServer:
    """Common process handling. Subclasses implement _command()/_prepare()."""

    kind = "server"
    startup_timeout = 60.0

    def __init__(self, name=None, workdir=None, settings=None, port=None, data_dir=None, test_defaults=True):
        self.name = name or self.kind
        self.workdir = workdir or make_workdir(self.name)
        os.makedirs(self.workdir, exist_ok=True)
        self.settings = dict(DEFAULT_SETTINGS) if test_defaults else {}
        if settings:
            self.settings.update(settings)
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.data_dir = data_dir or os.path.join(self.workdir, "data")
        os.makedirs(self.data_dir, exist_ok=True)
        self.log_path = os.path.join(self.workdir, "server.log")
        self.proc = None
        self._log_file = None
        self.starts = 0
        self.paused = False

    # ------------------------------------------------------------------
    @property
    def address(self):
        return "%s:%d" % (self.host, self.port)

    def __repr__(self):
        return "<%s %s pid=%s>" % (self.kind, self.address, self.proc.pid if self.proc else None)

    def _command(self):
        raise NotImplementedError

    def _prepare(self):
        pass

    def _env(self):
        return dict(os.environ)

    def start(self, timeout=None, wait=True):
        """Start the process and (wait=True) wait until it serves; wait=False
        returns at once (a node restarted while its cluster has no quorum
        would not serve until the quorum is back: tests/nemesis)."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self._prepare()
        self._log_file = open(self.log_path, "ab")
        self._log_file.write(("\n===== start #%d: %s\n" % (self.starts + 1, " ".join(self._command()))).encode())
        self._log_file.flush()
        self.proc = subprocess.Popen(
            self._command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            env=self._env(),
            start_new_session=True,  # own process group
        )
        self.starts += 1
        self.paused = False
        with _live_lock:
            _live.add(self)
        if not wait:
            return self
        try:
            self.wait_ready(timeout or self.startup_timeout)
        except Exception:
            self.kill()
            raise
        return self

    def is_ready(self):
        # ZooKeeper and Keel answer ruok with imok before they serve (while
        # loading their data a session handshake is closed); srvr tells,
        # unless the whitelist leaves it out.
        if four_letter_word(self.port, b"ruok", timeout=1.0) != b"imok":
            return False
        srvr = four_letter_word(self.port, b"srvr", timeout=1.0)
        return srvr.startswith(b"Zookeeper version:") or b"not in the whitelist" in srvr

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerStartError(
                    "%s exited with code %s before becoming ready\n%s"
                    % (self.name, self.proc.returncode, self.log_tail())
                )
            try:
                if self.is_ready():
                    return
            except OSError as e:
                last = e
            time.sleep(0.1)
        raise ServerStartError(
            "%s did not answer ruok with imok within %.0fs (last error: %r)\n%s"
            % (self.name, timeout, last, self.log_tail())
        )

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def _signal_group(self, sig):
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def pause(self):
        """SIGSTOP the process group (resume() continues it)."""
        self._signal_group(signal.SIGSTOP)
        self.paused = True

    def resume(self):
        self._signal_group(signal.SIGCONT)
        self.paused = False

    def stop(self, timeout=15.0):
        """SIGTERM, then SIGKILL after `timeout`. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.proc.wait(10)
        self._signal_group(signal.SIGKILL)  # stragglers in the group
        self._closed()
        return self.proc.returncode

    def kill(self):
        """kill -9 the whole process group."""
        if self.proc is None:
            return None
        self._signal_group(signal.SIGKILL)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self._closed()
        return self.proc.returncode

    def _closed(self):
        with _live_lock:
            _live.discard(self)
        if self._log_file:
            self._log_file.close()
            self._log_file = None

    def restart(self, timeout=None):
        if self.running():
            self.stop()
        return self.start(timeout)

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_since_start(self):
        """The log since the last start (after its `===== start #` line)."""
        return self.log_text().rsplit("===== start #", 1)[-1]

    def log_tail(self, n=200):
        lines = self.log_text().splitlines()
        return "----- %s log (%s), last %d lines -----\n%s\n----- end of log -----" % (
            self.name, self.log_path, min(n, len(lines)), "\n".join(lines[-n:]))

    def cleanup(self):
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self):
        return self.start() if not self.running() else self

    def __exit__(self, *exc):
        self.stop()


class ZooKeeperServer(BaseServer):
    """Apache ZooKeeper 3.8 standalone (org.apache.zookeeper.server.ZooKeeperServerMain)."""

    kind = "zookeeper"

    def _prepare(self):
        s = self.settings
        lines = [
            "tickTime=%d" % s.get("tick_time_ms", 2000),
            "dataDir=%s" % self.data_dir,
            "clientPort=%d" % self.port,
            "clientPortAddress=127.0.0.1",
            "4lw.commands.whitelist=%s" % ",".join(s.get("four_letter_words", ["*"])),
            "admin.enableServer=false",
            "autopurge.purgeInterval=0",
        ]
        if "min_session_timeout_ms" in s:
            lines.insert(1, "minSessionTimeout=%d" % s["min_session_timeout_ms"])
        if s.get("zk_extended_types"):
            lines.append("extendedTypesEnabled=true")
        if "zk_force_sync" in s:
            lines.append("forceSync=%s" % ("yes" if s["zk_force_sync"] else "no"))
        if "max_session_timeout_ms" in s:
            lines.append("maxSessionTimeout=%d" % s["max_session_timeout_ms"])
        if s.get("reconfig_enabled"):
            lines.append("reconfigEnabled=true")
        if s.get("max_client_connections_per_ip") is not None:
            lines.append("maxClientCnxns=%d" % s["max_client_connections_per_ip"])
        # zoo.cfg lines the keys above do not cover (e.g. localSessionsEnabled=true)
        lines.extend(s.get("zk_config_lines", []))
        if "zk_listen_backlog" in s:
            # Java's default is 50 (Keel's is CLIENT_LISTEN_BACKLOG).
            lines.append("clientPortListenBacklog=%d" % s["zk_listen_backlog"])
        self.config_path = os.path.join(self.workdir, "zoo.cfg")
        with open(self.config_path, "w") as f:
            f.write("\n".join(lines) + "\n")

    def _command(self):
        s = self.settings
        props = {
            "zookeeper.admin.enableServer": "false",
            "zookeeper.jmx.log4j.disable": "true",
            "org.slf4j.simpleLogger.defaultLogLevel": os.environ.get("ZK_LOG_LEVEL", "info"),
            "org.slf4j.simpleLogger.showDateTime": "true",
        }
        if "container_check_interval_ms" in s:
            props["znode.container.checkIntervalMs"] = s["container_check_interval_ms"]
        if "super_digest" in s:
            props["zookeeper.DigestAuthenticationProvider.superDigest"] = s["super_digest"]
        if "jute_max_buffer_bytes" in s:
            props["jute.maxbuffer"] = s["jute_max_buffer_bytes"]
        for k, v in s.get("extra_system_properties", {}).items():
            props[k] = v
        return (
            [JAVA] + list(s.get("zk_jvm_options", []))
            + ["-D%s=%s" % (k, v) for k, v in props.items()]
            + ["-cp", ZK_SERVER_CLASSPATH, "org.apache.zookeeper.server.ZooKeeperServerMain", self.config_path]
        )


def _toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    s = str(v).replace("\\", "\\\\").replace('"', '\\"')
    return '"%s"' % s


class KeelServer(BaseServer):
    """target/release/keel server --client-port P --data-dir D --config F.toml"""

    kind = "keel"

    TOML_KEYS = (
        "client_address", "tick_time_ms", "min_session_timeout_ms", "max_session_timeout_ms",
        "super_digest", "four_letter_words", "container_check_interval_ms",
        "snapshot_every_entries", "snapshot_every_log_bytes", "jute_max_buffer_bytes", "max_client_connections_per_ip",
        "server_id", "peers", "cluster_name", "preferred_leader", "observers", "profile_locks",
        "tls_cert_file", "tls_key_file", "tls_ca_file", "peer_tls", "peer_secret_file",
        "secure_client_port", "tls_client_auth", "sasl_users_file", "require_sasl",
        "metrics_port", "metrics_address", "read_only_when_partitioned",
        "reconfig_enabled", "join", "peer_address", "join_auth_file",
        "resp_port", "resp_max_bulk_bytes", "client_threads", "read_lease", "kv_shards",
        "log_direct_io", "kv_batch_writes",
    )
    # A key listed twice would be written twice: TOML refuses the file.
    assert len(set(TOML_KEYS)) == len(TOML_KEYS), "TOML_KEYS lists a key twice"

    def __init__(self, *a, binary=None, **kw):
        super().__init__(*a, **kw)
        self.binary = binary or KEEL_BIN

    def _prepare(self):
        if not os.access(self.binary, os.X_OK):
            raise ServerStartError("Keel binary %s not found (run `cargo build --release -p keel`)" % self.binary)
        s = dict(self.settings)
        s.setdefault("client_address", "127.0.0.1")
        unknown = sorted(k for k in set(s) - set(self.TOML_KEYS) if not k.startswith("zk_"))
        if unknown:
            # A setting the harness did not write would silently not apply
            # (zk_* keys are ZooKeeper's only).
            raise ValueError("Keel settings the harness does not know: %s (add them to KeelServer.TOML_KEYS)"
                             % ", ".join(unknown))
        self.config_path = os.path.join(self.workdir, "keel.toml")
        with open(self.config_path, "w") as f:
            for k in self.TOML_KEYS:
                if k in s and s[k] is not None:
                    f.write("%s = %s\n" % (k, _toml_value(s[k])))

    def _env(self):
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "info")
        env.setdefault("RUST_BACKTRACE", "1")
        env.setdefault("NO_COLOR", "1")
        return env

    def _command(self):
        return [self.binary, "server", "--client-port", str(self.port),
                "--data-dir", self.data_dir, "--config", self.config_path]


def make_server(kind, **kw):
    if kind == "zookeeper":
        return ZooKeeperServer(**kw)
    if kind == "keel":
        return KeelServer(**kw)
    raise ValueError(kind)


# ---------------------------------------------------------------- four-letter words
def mntr(port, timeout=10.0):
    """`mntr` as {key: value} (both strings); {} if the server does not answer."""
    try:
        text = four_letter_word(port, b"mntr", timeout=timeout).decode("utf-8", "replace")
    except OSError:
        return {}
    return dict(line.split("\t", 1) for line in text.strip().splitlines() if "\t" in line)


def raft_applied_index(port):
    """A Keel node's Raft applied index (mntr), 0 if it does not answer."""
    return int(mntr(port).get("keel_raft_applied_index", "0"))


def server_state(port, timeout=2.0):
    """mntr's zk_server_state (leader, follower, observer, standalone) or None."""
    return mntr(port, timeout).get("zk_server_state")


def srvr_zxid(port, timeout=2.0):
    """The last zxid a server has applied, from its `srvr` answer ("Zxid: 0x..."),
    or None if it does not answer (ZooKeeper and Keel print the same line)."""
    try:
        text = four_letter_word(port, b"srvr", timeout=timeout).decode("utf-8", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Zxid:"):
            return int(line.split(":", 1)[1].strip(), 16)
    return None


def scrape(port, path="/metrics", host="127.0.0.1", timeout=5.0):
    """GET http://host:port/path (Keel's Prometheus endpoint): (status, headers
    dict with lower-case names, body text)."""
    import http.client
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read().decode("utf-8", "replace")
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body
    finally:
        connection.close()


# ---------------------------------------------------------------- keel bench
_BENCH_SUMMARY_LINE = re.compile(r"^(\S.*?)\s{2,}(.*)$")


def run_bench(servers, workload, clients, duration, value_size=None, csv_path=None, out_path=None,
              timeout=None, binary=None, keep_tree=False):
    """Runs `keel bench` against `servers` (a connect string) and returns its
    end-of-run summary as {name: value} ("TPS", "ops", "errors", "p99 latency",
    ...); with csv_path it also writes its CSV there, with out_path its output;
    keep_tree leaves the bench's nodes (--no-cleanup: for servers thrown away
    after the test, where deleting a million nodes would only cost time).
    Raises AssertionError if it fails or prints no TPS. The bench process is
    killed if this is interrupted (Ctrl-C, a timeout)."""
    command = [binary or KEEL_BIN, "bench", "--servers", servers, "--workload", workload,
               "--clients", str(clients), "--duration", str(duration)]
    if value_size is not None:
        command += ["--value-size", str(value_size)]
    if csv_path is not None:
        command += ["--csv", csv_path]
    if keep_tree:
        command.append("--no-cleanup")
    try:
        done = subprocess.run(command, capture_output=True, text=True, errors="replace",
                              timeout=timeout or duration + 180, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise AssertionError("keel bench hung: %s" % " ".join(command))
    if out_path is not None:
        with open(out_path, "w") as f:
            f.write(done.stdout + done.stderr)
    assert done.returncode == 0, "keel bench failed (%d): %s\n%s\n%s" % (
        done.returncode, " ".join(command), done.stdout[-3000:], done.stderr[-3000:])
    summary = {}
    for line in done.stdout.splitlines():
        m = _BENCH_SUMMARY_LINE.match(line)
        if m:
            summary[m.group(1)] = m.group(2)
    assert "TPS" in summary, "no TPS in keel bench output:\n%s" % done.stdout
    return summary
