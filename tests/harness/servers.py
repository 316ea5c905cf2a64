"""Start/stop real Apache ZooKeeper 3.8 (standalone) and Keel servers.

Every server binds 127.0.0.1 on a free port, runs in its own process group
(so that kill() reaches every child) and is registered in a module-level set
that an atexit hook drains, in addition to the pytest fixture finalizers.
"""

import atexit
import os
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

DEFAULT_SETTINGS = {
    "tick_time_ms": 500,
    "min_session_timeout_ms": 1000,
    "container_check_interval_ms": 100,
    "super_digest": SUPER_DIGEST,
    "four_letter_words": ["*"],
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


def free_port():
    """A TCP port on 127.0.0.1 that nobody listens on right now (and that this
    process has not handed out before)."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _ports_handed_out:
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


def make_workdir(prefix):
    os.makedirs(WORK_ROOT, exist_ok=True)
    return tempfile.mkdtemp(prefix=prefix + "-", dir=WORK_ROOT)


class ServerStartError(RuntimeError):
    pass


class BaseServer:
    """Common process handling. Subclasses implement _command()/_prepare()."""

    kind = "server"
    startup_timeout = 60.0

    def __init__(self, name=None, workdir=None, settings=None, port=None):
        self.name = name or self.kind
        self.workdir = workdir or make_workdir(self.name)
        self.settings = dict(DEFAULT_SETTINGS)
        if settings:
            self.settings.update(settings)
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.data_dir = os.path.join(self.workdir, "data")
        os.makedirs(self.data_dir, exist_ok=True)
        self.log_path = os.path.join(self.workdir, "server.log")
        self.proc = None
        self._log_file = None
        self.starts = 0

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

    def start(self, timeout=None):
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
        with _live_lock:
            _live.add(self)
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
            "tickTime=%d" % s["tick_time_ms"],
            "minSessionTimeout=%d" % s["min_session_timeout_ms"],
            "dataDir=%s" % self.data_dir,
            "clientPort=%d" % self.port,
            "clientPortAddress=127.0.0.1",
            "4lw.commands.whitelist=%s" % ",".join(s["four_letter_words"]),
            "extendedTypesEnabled=true",
            "admin.enableServer=false",
            "autopurge.purgeInterval=0",
        ]
        if "max_session_timeout_ms" in s:
            lines.append("maxSessionTimeout=%d" % s["max_session_timeout_ms"])
        if s.get("max_client_connections_per_ip") is not None:
            lines.append("maxClientCnxns=%d" % s["max_client_connections_per_ip"])
        self.config_path = os.path.join(self.workdir, "zoo.cfg")
        with open(self.config_path, "w") as f:
            f.write("\n".join(lines) + "\n")

    def _command(self):
        s = self.settings
        props = {
            "znode.container.checkIntervalMs": s["container_check_interval_ms"],
            "zookeeper.DigestAuthenticationProvider.superDigest": s["super_digest"],
            "zookeeper.admin.enableServer": "false",
            "zookeeper.jmx.log4j.disable": "true",
            "org.slf4j.simpleLogger.defaultLogLevel": os.environ.get("ZK_LOG_LEVEL", "info"),
            "org.slf4j.simpleLogger.showDateTime": "true",
        }
        if "jute_max_buffer_bytes" in s:
            props["jute.maxbuffer"] = s["jute_max_buffer_bytes"]
        for k, v in s.get("extra_system_properties", {}).items():
            props[k] = v
        return (
            [JAVA, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
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
        "snapshot_every_entries", "jute_max_buffer_bytes", "max_client_connections_per_ip",
        "server_id", "peers", "cluster_name", "preferred_leader", "observers",
    )

    def __init__(self, *a, binary=None, **kw):
        super().__init__(*a, **kw)
        self.binary = binary or KEEL_BIN

    def _prepare(self):
        if not os.access(self.binary, os.X_OK):
            raise ServerStartError("Keel binary %s not found (run `cargo build --release -p keel`)" % self.binary)
        s = dict(self.settings)
        s.setdefault("client_address", "127.0.0.1")
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


# ---------------------------------------------------------------- clusters
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


def server_state(port, timeout=2.0):
    """mntr's zk_server_state (leader, follower, observer, standalone) or None."""
    try:
        text = four_letter_word(port, b"mntr", timeout=timeout).decode("utf-8", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("zk_server_state\t"):
            return line.split("\t", 1)[1].strip()
    return None


class ServerGroup:
    """A replicated service of `size` members on 127.0.0.1, started and stopped
    as one. Where a test needs a server it can take a group instead:

      address   the connect string listing every member, in member order
                ("127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"): what clients get;
      ports     every member's client port;
      port      the client port of one member, the *primary*: the first member
                that is a follower after the first start (fixed from then on).
                Raw-protocol connections and four-letter words go there;
      start/stop/kill/restart/running/cleanup/log_tail  as for one server,
                applied to every member (stop returns 0 if every member exited
                with 0, else the first other exit status).
    """

    kind = "group"
    startup_timeout = 60.0

    def __init__(self, size=3, name=None, workdir=None, settings=None):
        self.size = size
        self.name = name or "%s%d" % (self.kind, size)
        self.workdir = workdir or make_workdir(self.name)
        self.host = "127.0.0.1"
        self.nodes = self._make_nodes(settings or {})
        self.primary_index = None

    def _make_nodes(self, settings):
        raise NotImplementedError

    def _node_workdir(self, i):
        return os.path.join(self.workdir, "node%d" % (i + 1))

    # ------------------------------------------------------------------
    @property
    def ports(self):
        return [n.port for n in self.nodes]

    @property
    def address(self):
        return ",".join(n.address for n in self.nodes)

    @property
    def primary(self):
        return self.nodes[self.primary_index or 0]

    @property
    def port(self):
        return self.primary.port

    @property
    def settings(self):
        return self.nodes[0].settings

    def __repr__(self):
        return "<%s %s>" % (self.kind, self.address)

    def _each(self, fn, nodes=None):
        """fn(node) on every node in parallel; re-raise the first error."""
        errors = []

        def run(n):
            try:
                fn(n)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append((n, e))

        threads = [threading.Thread(target=run, args=(n,)) for n in (self.nodes if nodes is None else nodes)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        if errors:
            n, e = errors[0]
            raise ServerStartError("%s: %s: %s" % (self.name, n.name, e)) from e

    def start(self, timeout=None):
        timeout = timeout or self.startup_timeout
        try:
            self._each(lambda n: n.start(timeout) if not n.running() else None)
            self.wait_serving(timeout)
        except Exception:
            self.kill()
            raise
        if self.primary_index is None:
            states = [server_state(p) for p in self.ports]
            self.primary_index = states.index("follower") if "follower" in states else 0
        return self

    def wait_serving(self, timeout=30.0):
        """Until one member is leader and every other one a follower/observer."""
        deadline = time.monotonic() + timeout
        states = []
        while time.monotonic() < deadline:
            states = [server_state(p) for p in self.ports]
            if states.count("leader") == 1 and all(s in ("leader", "follower", "observer") for s in states):
                return states
            time.sleep(0.05)
        raise ServerStartError("%s: no leader with every member following within %.0fs (states %r)\n%s"
                               % (self.name, timeout, states, self.log_tail(40)))

    def leader(self, timeout=10.0):
        self.wait_serving(timeout)
        for n in self.nodes:
            if server_state(n.port) == "leader":
                return n
        raise AssertionError("%s: no leader" % self.name)

    def wait_replicated(self, timeout=10.0):
        """Until every member has applied at least the highest zxid any member
        had applied when this was called (srvr's Zxid): after it, a fresh
        session sees every write acknowledged before the call, whichever member
        it lands on (what `sync` gives one session, for clients that cannot
        sync, e.g. one-shot zkCli.sh processes)."""
        deadline = time.monotonic() + timeout
        target = max(z for z in (srvr_zxid(p) for p in self.ports) if z is not None)
        if target & 0xFFFFFFFF == 0:
            # No transaction in the leader's epoch yet (a ZooKeeper leader
            # reports the epoch's zxid 0xE00000000, a follower that has only
            # synced may still print an older one): nothing new to apply.
            return target
        zxids = []
        while time.monotonic() < deadline:
            zxids = [srvr_zxid(p) for p in self.ports]
            if all(z is not None and z >= target for z in zxids):
                return target
            time.sleep(0.02)
        raise AssertionError("%s: members did not reach zxid 0x%x within %.0fs: %r"
                             % (self.name, target, timeout, zxids))

    def running(self):
        return all(n.running() for n in self.nodes)

    def stop(self, timeout=15.0):
        """SIGTERM to every member at once (one loop, no member is left
        serving while the others go: a client would move to it), then wait
        for each, SIGKILL after `timeout`."""
        running = [n for n in self.nodes if n.running()]
        for n in running:
            n._signal_group(signal.SIGTERM)
        codes = {}

        def wait(n):
            try:
                n.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                n._signal_group(signal.SIGKILL)
                n.proc.wait(10)
            n._signal_group(signal.SIGKILL)  # stragglers in the group
            n._closed()
            codes[n.name] = n.proc.returncode

        self._each(wait, running)
        bad = [codes[n.name] for n in running if codes[n.name] not in (0, None)]
        return bad[0] if bad else 0

    def kill(self):
        for n in self.nodes:
            try:
                n.kill()
            except Exception:
                pass

    def restart(self, timeout=None):
        self.stop()
        return self.start(timeout)

    def cleanup(self):
        shutil.rmtree(self.workdir, ignore_errors=True)

    def log_text(self):
        return "\n".join(n.log_text() for n in self.nodes)

    def log_tail(self, n=200):
        return "\n".join(node.log_tail(max(20, n // len(self.nodes))) for node in self.nodes)

    def __enter__(self):
        return self.start() if not self.running() else self

    def __exit__(self, *exc):
        self.stop()


class KeelCluster(ServerGroup):
    """`size` Keel nodes (`--id`, `--peers` with peer ports on 127.0.0.1); the
    same settings as a single KeelServer otherwise."""

    kind = "keel-cluster"

    def __init__(self, size=3, name=None, workdir=None, settings=None, binary=None):
        self.binary = binary
        super().__init__(size, name, workdir, settings)

    def _make_nodes(self, settings):
        peer_ports = [free_port() for _ in range(self.size)]
        peers = ",".join("%d=127.0.0.1:%d" % (i + 1, p) for i, p in enumerate(peer_ports))
        return [KeelServer(name="%s-n%d" % (self.name, i + 1), workdir=self._node_workdir(i), binary=self.binary,
                           settings=dict(settings, server_id=i + 1, peers=peers))
                for i in range(self.size)]


class ZooKeeperEnsembleMember(ZooKeeperServer):
    """One member of a ZooKeeper 3.8 ensemble (QuorumPeerMain, static config)."""

    kind = "zookeeper-member"

    def __init__(self, *a, myid, servers_lines, **kw):
        super().__init__(*a, **kw)
        self.myid = myid
        self.servers_lines = servers_lines

    def _prepare(self):
        super()._prepare()
        with open(self.config_path, "a") as f:
            f.write("initLimit=10\nsyncLimit=5\n" + "\n".join(self.servers_lines) + "\n")
        with open(os.path.join(self.data_dir, "myid"), "w") as f:
            f.write("%d\n" % self.myid)

    def _command(self):
        return [("org.apache.zookeeper.server.quorum.QuorumPeerMain"
                 if x == "org.apache.zookeeper.server.ZooKeeperServerMain" else x)
                for x in super()._command()]


class ZooKeeperEnsemble(ServerGroup):
    """`size` Apache ZooKeeper 3.8 servers forming an ensemble on 127.0.0.1
    (quorum and election ports bound on 127.0.0.1 too)."""

    kind = "zookeeper-ensemble"

    def _make_nodes(self, settings):
        client_ports = [free_port() for _ in range(self.size)]
        lines = ["server.%d=127.0.0.1:%d:%d;127.0.0.1:%d" % (i + 1, free_port(), free_port(), client_ports[i])
                 for i in range(self.size)]
        return [ZooKeeperEnsembleMember(name="%s-n%d" % (self.name, i + 1), workdir=self._node_workdir(i),
                                        settings=settings, port=client_ports[i], myid=i + 1,
                                        servers_lines=lines)
                for i in range(self.size)]


TOPOLOGIES = {"single": 1, "cluster3": 3}


def make_cluster(kind, size=3, **kw):
    """A not yet started group: a Keel cluster or a ZooKeeper ensemble."""
    if kind == "keel":
        return KeelCluster(size, **kw)
    if kind == "zookeeper":
        return ZooKeeperEnsemble(size, **kw)
    raise ValueError(kind)


def make_topology(kind, topology="single", **kw):
    """make_server(kind) for "single", make_cluster(kind, 3) for "cluster3"."""
    if topology == "single":
        return make_server(kind, **kw)
    return make_cluster(kind, TOPOLOGIES[topology], **kw)
