#!/usr/bin/env python3
"""Scale test: a single-node Keel and a single-node Apache ZooKeeper 3.8 holding N znodes.

Runs Keel first, then ZooKeeper (never both at once), each on a fresh data dir
under bench/work/ with fsync on. For each system:

 1. start it empty; RSS_empty = VmRSS of the server process (/proc/PID/status);
 2. `keel bench --workload populate --znodes N` (the tree stays; N counts every
    znode under /keel-populate, parents included);
 3. RSS after load; RSS per znode = (VmRSS - RSS_empty) / N bytes;
 4. snapshot under write load: `keel bench --workload set` runs in the
    background in chunks of LOAD_CHUNK_SECONDS while two probe clients loop
    sequentially (one getData of the last populated znode, one setData of a
    probe znode), timing every request, until the server has written a
    snapshot that started after the load did. Snapshot write time comes from
    the server's log (Keel: "snapshot written ... ms=", ZooKeeper: "Snapshot
    taken in N ms"); the worst probe latencies are those of requests that
    overlapped the snapshot [end - write time, end];
 5. kill -9, restart; restart time = from the kill until a fresh connection
    reads the last populated znode (polled every POLL_INTERVAL_S); RSS after
    restart, per znode as in 3 (the same RSS_empty);
 6. log replay rate: ZooKeeper logs "{txns} txns loaded in {ms} ms"; Keel
    logs "recovered ... read_ms=" and "caught up: log replayed ... ms= txns=".
    Both count transactions (one populate multi or one setData is one).

Prints one table (Keel | ZooKeeper | ratio Keel/ZooKeeper) on stdout, progress
on stderr, and writes the raw results to bench/work/scale.json. Every process
it starts runs in its own process group and is killed on exit, on exceptions
and on SIGINT/SIGTERM.

Environment (all optional): SCALE_ZNODES (10000000), SCALE_VALUE_SIZE (100),
SCALE_ZK_HEAP_MB (1024 + 1 KiB per znode), SCALE_ZK_SNAP_COUNT (20000),
SCALE_KEEL_SNAPSHOT_ENTRIES (20000), SCALE_KEEL_SNAPSHOT_LOG_BYTES (Keel's
own default, 64 MiB, which bounds its restart replay; passed only when set),
SCALE_LOAD_CLIENTS (10), SCALE_SNAPSHOT_WAIT_S (600), SCALE_SYSTEMS
("keel,zookeeper"). Python 3 standard library only.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime

# The test suites' harness (Python standard library only): ports, four-letter words.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from harness.servers import four_letter_word, free_port  # noqa: E402

# --- process groups, ports and four-letter words (as bench/compare.py had them) ---

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
WORK = os.path.join(REPO, "bench", "work")
KEEL_BIN = os.environ.get("KEEL_BIN", os.path.join(REPO, "target", "release", "keel"))
JAVA = os.environ.get("JAVA", shutil.which("java") or "/usr/bin/java")
JAVA_DIR = "/usr/share/java"
ZK_CLASSPATH = ":".join(
    os.path.join(JAVA_DIR, j)
    for j in ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-simple.jar")
)

T0 = time.monotonic()
_procs = []  # every Popen we started (servers and bench runs)


def spawn(cmd, logpath, cwd=None):
    f = open(logpath, "ab")
    p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         cwd=cwd, start_new_session=True)
    f.close()
    _procs.append(p)
    return p


def kill_all():
    live = [p for p in _procs if p.poll() is None]
    for p in live:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + 10
    for p in live:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in _procs:
        # Kill the group even if the leader exited (children may linger).
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def on_signal(signum, _frame):
    raise KeyboardInterrupt("signal %d" % signum)


def four_letter(port, word, timeout=2.0):
    """The answer to a four-letter word as text; "" if the server is not up."""
    try:
        return four_letter_word(port, word, timeout=timeout).decode(errors="replace")
    except OSError:
        return ""



POPULATE_ROOT = "/keel-populate"
PROBE_PATH = "/keel-scale-probe"
DEFAULT_ZNODES = 10_000_000
DEFAULT_FANOUT = 1_000
LOAD_CHUNK_SECONDS = 10
POLL_INTERVAL_S = 0.05
READY_TIMEOUT_S = 120
# Pause before an RSS sample: long enough for the allocators to hand freed
# memory back (jemalloc's default dirty-page decay is 10 s; the JVM's GC).
SETTLE_S = 12.0
SESSION_TIMEOUT_MS = 30_000
SOCKET_TIMEOUT_S = 60.0
PROBE_VALUE = b"p" * 100
ZK_BASE_HEAP_MB = 1024
ZK_HEAP_KIB_PER_ZNODE = 1
RESTART_TIMEOUT_S = 3600
POPULATE_TIMEOUT_S = 6 * 3600
ANSI = re.compile(r"\x1b\[[0-9;]*m")

T0 = time.monotonic()


def log(msg):
    print("[%7.1fs] %s" % (time.monotonic() - T0, msg), file=sys.stderr, flush=True)


def env_int(name, default):
    return int(os.environ.get(name, str(default)))


# --- a minimal ZooKeeper client (jute over TCP), enough to time requests ----

OP_EXISTS, OP_GET_DATA, OP_SET_DATA, OP_CREATE, OP_CLOSE = 3, 4, 5, 1, -11
ERR_NONODE, ERR_NODEEXISTS = -101, -110


def _string(s):
    b = s.encode()
    return struct.pack(">i", len(b)) + b


def _buffer(b):
    return struct.pack(">i", len(b)) + b


class ZkConn:
    """One session on one server; requests are sequential (one in flight)."""

    def __init__(self, port, timeout=SOCKET_TIMEOUT_S):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.xid = 0
        body = struct.pack(">iqiq", 0, 0, SESSION_TIMEOUT_MS, 0) + _buffer(b"\0" * 16) + b"\0"
        self._send(body)
        self._recv()

    def _send(self, body):
        self.sock.sendall(struct.pack(">i", len(body)) + body)

    def _read(self, n):
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("server closed the connection")
            out += chunk
        return out

    def _recv(self):
        (length,) = struct.unpack(">i", self._read(4))
        return self._read(length)

    def call(self, op, payload=b""):
        """Sends one request; returns the reply's error code (0 = ok)."""
        self.xid += 1
        self._send(struct.pack(">ii", self.xid, op) + payload)
        while True:
            reply = self._recv()
            xid, _zxid, err = struct.unpack(">iqi", reply[:16])
            if xid == self.xid:
                return err
            # xid -1 (watch event) or -2 (ping) cannot come: no watches, no pings sent.

    def exists(self, path):
        return self.call(OP_EXISTS, _string(path) + b"\0")

    def get_data(self, path):
        return self.call(OP_GET_DATA, _string(path) + b"\0")

    def set_data(self, path, data):
        return self.call(OP_SET_DATA, _string(path) + _buffer(data) + struct.pack(">i", -1))

    def create(self, path, data):
        acl = struct.pack(">i", 1) + struct.pack(">i", 31) + _string("world") + _string("anyone")
        return self.call(OP_CREATE, _string(path) + _buffer(data) + acl + struct.pack(">i", 0))

    def close(self):
        try:
            self.call(OP_CLOSE)
        except OSError:
            pass
        finally:
            self.sock.close()


def last_path(znodes, fanout):
    """Path of the last znode `keel bench --workload populate` creates (crates/bench/src/populate.rs)."""
    names, i = [], znodes - 1
    while True:
        names.append(i % fanout)
        if i < fanout:
            break
        i = i // fanout - 1
    return POPULATE_ROOT + "".join("/%d" % n for n in reversed(names))


# --- process and server helpers ---------------------------------------------

def vm_hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM for pid %d" % pid)


def reset_peak_rss(pid):
    """Linux resets VmHWM to the current RSS on '5' (needs the right to
    write /proc/PID/clear_refs: the same user or root). False if refused."""
    try:
        with open("/proc/%d/clear_refs" % pid, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def vm_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS for pid %d" % pid)


def mntr(port):
    out = {}
    for line in four_letter(port, "mntr").splitlines():
        if "\t" in line:
            k, v = line.split("\t", 1)
            out[k.strip()] = v.strip()
    return out


def wait_ready(server, timeout=READY_TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server["proc"].poll() is not None:
            raise RuntimeError("%s exited (rc %s); see %s" % (server["name"], server["proc"].returncode, server["log"]))
        # ruok answers imok while a server still loads; srvr names its
        # Mode only once it serves (Keel and ZooKeeper alike).
        if "Mode:" in (four_letter(server["port"], "srvr", timeout=1.0) or ""):
            try:
                c = ZkConn(server["port"], timeout=5.0)
                c.exists("/")
                c.close()
                return
            except OSError:
                pass
        time.sleep(POLL_INTERVAL_S)
    raise RuntimeError("%s not serving within %d s; see %s" % (server["name"], timeout, server["log"]))


def log_lines(server):
    with open(server["log"], errors="replace") as f:
        return [ANSI.sub("", line) for line in f]


def parse_time(stamp):
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class Keel:
    name = "keel"

    def __init__(self, root, args):
        self.dir = os.path.join(root, "keel")
        self.data = os.path.join(self.dir, "data")
        os.makedirs(self.data)
        self.port = free_port()
        helptext = subprocess.run([KEEL_BIN, "server", "--help"], capture_output=True, text=True).stdout
        self.flags = ["--snapshot-every-entries", str(args.keel_snapshot_entries)]
        if args.keel_snapshot_log_bytes and "--snapshot-every-log-bytes" in helptext:
            self.flags += ["--snapshot-every-log-bytes", str(args.keel_snapshot_log_bytes)]
        self.settings = {"flags": self.flags}

    def start(self):
        cmd = [KEEL_BIN, "server", "--client-port", str(self.port), "--client-address", "127.0.0.1",
               "--data-dir", self.data, "--four-letter-words", "*"] + self.flags
        logp = os.path.join(self.dir, "server.log")
        env = dict(os.environ, NO_COLOR="1", KEEL_LOG=os.environ.get("KEEL_LOG", "info"))
        f = open(logp, "ab")
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=self.dir, start_new_session=True, env=env)
        f.close()
        _procs.append(proc)
        return {"name": "keel", "port": self.port, "proc": proc, "log": logp}

    def snapshots(self, server, since):
        """[(start, end, ms, bytes)] of snapshots written after `since` (wall clock)."""
        out = []
        pat = re.compile(r"^(\S+)\s+INFO .*snapshot written .*?bytes=(\d+) ms=(\d+) ok=true")
        for line in log_lines(server):
            m = pat.search(line)
            if m:
                end, ms = parse_time(m.group(1)), int(m.group(3))
                if end - ms / 1000.0 >= since:
                    out.append((end - ms / 1000.0, end, ms, int(m.group(2))))
        return out

    def applied_index(self, server):
        """keel_raft_applied_index from mntr (None while it does not answer)."""
        value = mntr(server["port"]).get("keel_raft_applied_index")
        return int(value) if value is not None else None

    def replay(self, server, since, _polls=None):
        """Log replay after a restart, from Keel's own log lines: 'recovered
        ... read_ms=' (raft-engine opened and the log read) and 'caught up:
        log replayed ... ms= txns=' (every committed proposal applied; one
        proposal is one transaction: a multi counts once, as in ZooKeeper)."""
        recovered = re.compile(r"^(\S+)\s+INFO .*recovered snapshot_index=(\d+) log_entries=(\d+) last_index=(\d+) read_ms=(\d+)")
        caught_up = re.compile(r"^(\S+)\s+INFO .*caught up: log replayed .*ms=(\d+) txns=(\d+)")
        read_ms = found = None
        for line in log_lines(server):
            m = recovered.search(line)
            if m and parse_time(m.group(1)) >= since:
                read_ms = int(m.group(5))
            m = caught_up.search(line)
            if m and parse_time(m.group(1)) >= since and read_ms is not None:
                found = (int(m.group(2)), int(m.group(3)))
        if found is None:
            return None
        apply_ms, txns = found
        seconds = max((read_ms + apply_ms) / 1000.0, 1e-3)
        return {"unit": "txns", "entries": txns, "seconds": seconds, "rate_per_s": txns / seconds,
                "read_ms": read_ms, "apply_ms": apply_ms,
                "note": "Keel's log lines: log read (read_ms) + apply until caught up (ms)"}


class ZooKeeper:
    name = "zookeeper"

    def __init__(self, root, args):
        self.dir = os.path.join(root, "zookeeper")
        self.data = os.path.join(self.dir, "data")
        os.makedirs(self.data)
        self.port = free_port()
        self.heap_mb = args.zk_heap_mb
        cfg = [
            "tickTime=2000",
            "dataDir=%s" % self.data,
            "clientPort=%d" % self.port,
            "clientPortAddress=127.0.0.1",
            "4lw.commands.whitelist=*",
            "admin.enableServer=false",
            "forceSync=yes",
            "maxClientCnxns=0",
            "snapCount=%d" % args.zk_snap_count,
            "autopurge.purgeInterval=0",
        ]
        self.cfgpath = os.path.join(self.dir, "zoo.cfg")
        with open(self.cfgpath, "w") as f:
            f.write("\n".join(cfg) + "\n")
        self.settings = {"zoo.cfg": cfg, "heap_mb": self.heap_mb}

    def start(self):
        cmd = [JAVA, "-Xmx%dm" % self.heap_mb, "-Dzookeeper.log.dir=" + self.dir,
               "-Dorg.slf4j.simpleLogger.showDateTime=true",
               "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSXXX",
               "-cp", ZK_CLASSPATH, "org.apache.zookeeper.server.ZooKeeperServerMain", self.cfgpath]
        logp = os.path.join(self.dir, "server.log")
        return {"name": "zookeeper", "port": self.port, "proc": spawn(cmd, logp, cwd=self.dir), "log": logp}

    def snapshots(self, server, since):
        out = []
        pat = re.compile(r"^(\S+) .*Snapshot taken in (\d+) ms")
        snapdir = os.path.join(self.data, "version-2")
        files = sorted((os.path.getmtime(os.path.join(snapdir, n)), os.path.getsize(os.path.join(snapdir, n)))
                       for n in os.listdir(snapdir) if n.startswith("snapshot.") and not n.endswith(".tmp"))
        for line in log_lines(server):
            m = pat.search(line)
            if m:
                end, ms = parse_time(m.group(1)), int(m.group(2))
                if end - ms / 1000.0 >= since:
                    size = next((s for t, s in files if abs(t - end) < 5.0), None)
                    out.append((end - ms / 1000.0, end, ms, size))
        return out

    def applied_index(self, _server):
        return None

    def replay(self, server, since, _polls):
        pat = re.compile(r"^(\S+) .* (\d+) txns loaded in (\d+) ms")
        for line in log_lines(server):
            m = pat.search(line)
            if m and parse_time(m.group(1)) >= since:
                txns, ms = int(m.group(2)), int(m.group(3))
                return {"unit": "txns", "entries": txns, "seconds": ms / 1000.0,
                        "rate_per_s": txns / max(ms / 1000.0, 1e-3),
                        "note": "ZooKeeper's own log line; a populate multi is one txn"}
        return None


# --- the phases ---------------------------------------------------------------

def populate(server, args, root):
    cmd = [KEEL_BIN, "bench", "--servers", "127.0.0.1:%d" % server["port"], "--workload", "populate",
           "--znodes", str(args.znodes), "--value-size", str(args.value_size), "--fanout", str(DEFAULT_FANOUT)]
    out = os.path.join(root, "populate-%s.out" % server["name"])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    _procs.append(proc)
    stdout = []

    def drain_stdout():
        stdout.extend(proc.stdout)

    t = threading.Thread(target=drain_stdout, daemon=True)
    t.start()
    with open(out, "w") as f:
        for line in proc.stderr:
            f.write(line)
            log("  %s: %s" % (server["name"], line.rstrip()))
    rc = proc.wait(timeout=POPULATE_TIMEOUT_S)
    t.join()
    text = "".join(stdout)
    m = re.search(r"^populated (\d+) znodes in ([\d.]+) s$", text, re.M)
    if rc != 0 or not m or int(m.group(1)) != args.znodes:
        raise RuntimeError("populate failed (rc %s): %s; see %s" % (rc, text.strip(), out))
    return float(m.group(2))


class Probe(threading.Thread):
    """A sequential request loop on its own session; records (start, end) wall times."""

    def __init__(self, port, kind, path):
        super().__init__(daemon=True)
        self.port, self.kind, self.path = port, kind, path
        self.samples, self.errors = [], 0
        self.stop = threading.Event()

    def run(self):
        conn = ZkConn(self.port)
        try:
            while not self.stop.is_set():
                start = time.time()
                err = conn.get_data(self.path) if self.kind == "read" else conn.set_data(self.path, PROBE_VALUE)
                end = time.time()
                if err == 0:
                    self.samples.append((start, end))
                else:
                    self.errors += 1
        except OSError as e:
            self.errors += 1
            log("  probe %s failed: %s" % (self.kind, e))
        finally:
            conn.sock.close()

    def worst_ms(self, lo=None, hi=None):
        lat = [(e - s) * 1000.0 for s, e in self.samples if (lo is None or e >= lo) and (hi is None or s <= hi)]
        return max(lat) if lat else None


def snapshot_under_load(system, server, args, root, last):
    conn = ZkConn(server["port"])
    err = conn.create(PROBE_PATH, PROBE_VALUE)
    conn.close()
    if err not in (0, ERR_NODEEXISTS):
        raise RuntimeError("cannot create %s (error %d)" % (PROBE_PATH, err))
    since = time.time()
    probes = [Probe(server["port"], "read", last), Probe(server["port"], "write", PROBE_PATH)]
    for p in probes:
        p.start()
    deadline = time.monotonic() + args.snapshot_wait
    snap, chunks = None, 0
    try:
        while snap is None and time.monotonic() < deadline:
            chunks += 1
            log("  %s: write load chunk %d (%d clients, set, %d s), waiting for a snapshot"
                % (system.name, chunks, args.load_clients, LOAD_CHUNK_SECONDS))
            cmd = [KEEL_BIN, "bench", "--servers", "127.0.0.1:%d" % server["port"], "--workload", "set",
                   "--clients", str(args.load_clients), "--duration", str(LOAD_CHUNK_SECONDS)]
            p = spawn(cmd, os.path.join(root, "load-%s.out" % system.name))
            rc = p.wait(timeout=LOAD_CHUNK_SECONDS + 300)
            if rc != 0:
                raise RuntimeError("write load failed (rc %d); see %s" % (rc, os.path.join(root, "load-%s.out" % system.name)))
            done = system.snapshots(server, since)
            snap = done[0] if done else None
    finally:
        for p in probes:
            p.stop.set()
        for p in probes:
            p.join(timeout=SOCKET_TIMEOUT_S)
    result = {"load_chunks": chunks, "load_seconds": time.time() - since,
              "worst_read_ms_whole_load": probes[0].worst_ms(),
              "worst_write_ms_whole_load": probes[1].worst_ms(),
              "probe_reads": len(probes[0].samples), "probe_writes": len(probes[1].samples),
              "probe_errors": probes[0].errors + probes[1].errors}
    if snap is None:
        log("  %s: no snapshot within %d s of write load" % (system.name, args.snapshot_wait))
        result.update(snapshot_ms=None, snapshot_bytes=None, worst_read_ms=None, worst_write_ms=None)
        return result
    start, end, ms, size = snap
    result.update(snapshot_ms=ms, snapshot_bytes=size,
                  worst_read_ms=probes[0].worst_ms(start, end), worst_write_ms=probes[1].worst_ms(start, end))
    log("  %s: snapshot of %s bytes written in %d ms; worst read %.1f ms, worst write %.1f ms during it"
        % (system.name, size, ms, result["worst_read_ms"] or -1, result["worst_write_ms"] or -1))
    return result


def restart(system, server, last):
    """kill -9, start again, poll with a fresh connection until `last` reads.
    Returns the new server, the seconds from the kill, the kill's wall time
    and the (time, applied index) polls (Keel) for the replay rate."""
    killed = time.time()
    os.killpg(server["proc"].pid, signal.SIGKILL)
    server["proc"].wait()
    server = system.start()
    polls = []
    while True:
        if server["proc"].poll() is not None:
            raise RuntimeError("%s exited after restart; see %s" % (system.name, server["log"]))
        if time.time() - killed > RESTART_TIMEOUT_S:
            raise RuntimeError("%s: %s not readable %d s after restart" % (system.name, last, RESTART_TIMEOUT_S))
        polls.append((time.time(), system.applied_index(server)))
        try:
            c = ZkConn(server["port"], timeout=5.0)
            err = c.get_data(last)
            c.close()
            if err == 0:
                readable = time.time()
                polls.append((readable, system.applied_index(server)))
                return server, readable - killed, killed, polls
        except (OSError, struct.error):
            pass
        time.sleep(POLL_INTERVAL_S)


def run_system(system, args, root):
    res = {"system": system.name, "settings": system.settings, "znodes": args.znodes}
    last = last_path(args.znodes, DEFAULT_FANOUT)
    log("%s: starting empty" % system.name)
    server = system.start()
    wait_ready(server)
    time.sleep(SETTLE_S)
    res["rss_empty_kib"] = vm_rss_kib(server["proc"].pid)
    log("%s: RSS empty %.1f MiB; populating %d znodes" % (system.name, res["rss_empty_kib"] / 1024, args.znodes))
    res["populate_s"] = populate(server, args, root)
    time.sleep(SETTLE_S)
    res["rss_loaded_kib"] = vm_rss_kib(server["proc"].pid)
    res["mntr_loaded"] = mntr(server["port"])
    log("%s: RSS after load %.1f MiB" % (system.name, res["rss_loaded_kib"] / 1024))
    peak_reset = reset_peak_rss(server["proc"].pid)
    steady_kib = vm_rss_kib(server["proc"].pid)
    res.update(snapshot_under_load(system, server, args, root, last))
    if peak_reset:
        # Peak over the write load and the snapshot, against the RSS just before.
        res["snapshot_peak_rss_ratio"] = vm_hwm_kib(server["proc"].pid) / float(steady_kib)
        log("%s: peak RSS during load + snapshot = %.2f x the RSS before it" % (system.name, res["snapshot_peak_rss_ratio"]))
    log("%s: kill -9 and restart" % system.name)
    server, res["restart_s"], killed, polls = restart(system, server, last)
    log("%s: %s readable %.2f s after the kill" % (system.name, last, res["restart_s"]))
    res["replay"] = system.replay(server, killed, polls)
    time.sleep(SETTLE_S)
    res["rss_restarted_kib"] = vm_rss_kib(server["proc"].pid)
    log("%s: RSS after restart %.1f MiB" % (system.name, res["rss_restarted_kib"] / 1024))
    os.killpg(server["proc"].pid, signal.SIGTERM)
    server["proc"].wait(timeout=60)
    for key in ("loaded", "restarted"):
        res["rss_per_znode_%s_bytes" % key] = (res["rss_%s_kib" % key] - res["rss_empty_kib"]) * 1024.0 / args.znodes
    tree_bytes = res["mntr_loaded"].get("keel_tree_bytes")
    res["tree_bytes_per_znode"] = int(tree_bytes) / args.znodes if tree_bytes else None
    return res


# --- the report ---------------------------------------------------------------

ROWS = [
    ("populate time (s)", lambda r: r["populate_s"], "%.1f"),
    ("populate rate (znodes/s)", lambda r: r["znodes"] / max(r["populate_s"], 1e-3), "%.0f"),
    ("RSS empty (MiB)", lambda r: r["rss_empty_kib"] / 1024.0, "%.1f"),
    ("RSS after load (MiB)", lambda r: r["rss_loaded_kib"] / 1024.0, "%.1f"),
    ("RSS/znode after load (B)", lambda r: r["rss_per_znode_loaded_bytes"], "%.0f"),
    ("peak RSS in snapshot phase / before", lambda r: r.get("snapshot_peak_rss_ratio"), "%.2f"),
    ("RSS after restart (MiB)", lambda r: r["rss_restarted_kib"] / 1024.0, "%.1f"),
    ("RSS/znode after restart (B)", lambda r: r["rss_per_znode_restarted_bytes"], "%.0f"),
    ("keel_tree_bytes/znode (B)", lambda r: r["tree_bytes_per_znode"], "%.0f"),
    ("snapshot write time (ms)", lambda r: r["snapshot_ms"], "%.0f"),
    ("snapshot size (MiB)", lambda r: r["snapshot_bytes"] and r["snapshot_bytes"] / 1048576.0, "%.1f"),
    ("worst read during snapshot (ms)", lambda r: r["worst_read_ms"], "%.1f"),
    ("worst write during snapshot (ms)", lambda r: r["worst_write_ms"], "%.1f"),
    ("worst read, whole load (ms)", lambda r: r["worst_read_ms_whole_load"], "%.1f"),
    ("worst write, whole load (ms)", lambda r: r["worst_write_ms_whole_load"], "%.1f"),
    ("restart until last znode read (s)", lambda r: r["restart_s"], "%.2f"),
    ("log replay (txns per s)", lambda r: r["replay"] and r["replay"]["rate_per_s"], "%.0f"),
]
NOT_COMPARABLE = {"keel_tree_bytes/znode (B)"}


def table(results):
    by = {r["system"]: r for r in results}
    k, z = by.get("keel"), by.get("zookeeper")
    lines = [("metric", "Keel", "ZooKeeper", "ratio")]
    for name, get, fmt in ROWS:
        kv = get(k) if k else None
        zv = get(z) if z else None
        ratio = "n/a"
        if kv is not None and zv and name not in NOT_COMPARABLE:
            ratio = "%.2fx" % (kv / zv)
        lines.append((name, fmt % kv if kv is not None else "n/a", fmt % zv if zv is not None else "n/a", ratio))
    widths = [max(len(line[i]) for line in lines) for i in range(4)]
    out = []
    for i, line in enumerate(lines):
        out.append("%-*s | %*s | %*s | %*s" % (widths[0], line[0], widths[1], line[1], widths[2], line[2], widths[3], line[3]))
        if i == 0:
            out.append("-+-".join("-" * w for w in widths))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    znodes = env_int("SCALE_ZNODES", DEFAULT_ZNODES)
    ap.add_argument("--znodes", type=int, default=znodes)
    ap.add_argument("--value-size", type=int, default=env_int("SCALE_VALUE_SIZE", 100))
    ap.add_argument("--zk-heap-mb", type=int, default=None)
    ap.add_argument("--zk-snap-count", type=int, default=env_int("SCALE_ZK_SNAP_COUNT", 20_000))
    ap.add_argument("--keel-snapshot-entries", type=int, default=env_int("SCALE_KEEL_SNAPSHOT_ENTRIES", 20_000))
    ap.add_argument("--keel-snapshot-log-bytes", type=int, default=env_int("SCALE_KEEL_SNAPSHOT_LOG_BYTES", 0))
    ap.add_argument("--load-clients", type=int, default=env_int("SCALE_LOAD_CLIENTS", 10))
    ap.add_argument("--snapshot-wait", type=int, default=env_int("SCALE_SNAPSHOT_WAIT_S", 600))
    ap.add_argument("--systems", default=os.environ.get("SCALE_SYSTEMS", "keel,zookeeper"))
    args = ap.parse_args()
    if args.zk_heap_mb is None:
        args.zk_heap_mb = env_int("SCALE_ZK_HEAP_MB", ZK_BASE_HEAP_MB + args.znodes * ZK_HEAP_KIB_PER_ZNODE // 1024)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if not os.access(KEEL_BIN, os.X_OK):
        sys.exit("no Keel binary at %s (run: cargo build --release -p keel)" % KEEL_BIN)
    for j in ZK_CLASSPATH.split(":"):
        if "zookeeper" in systems and not os.path.isfile(j):
            sys.exit("missing ZooKeeper jar %s" % j)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    os.makedirs(WORK, exist_ok=True)
    root = tempfile.mkdtemp(prefix="scale-%s-" % time.strftime("%Y%m%dT%H%M%S"), dir=WORK)
    log("work dir %s; %d znodes of %d bytes; systems %s; ZooKeeper heap %d MiB"
        % (root, args.znodes, args.value_size, ",".join(systems), args.zk_heap_mb))
    results = []
    try:
        for name in systems:
            system = {"keel": Keel, "zookeeper": ZooKeeper}[name](root, args)
            results.append(run_system(system, args, root))
    finally:
        kill_all()
    out = os.path.join(WORK, "scale.json")
    with open(out, "w") as f:
        json.dump({"znodes": args.znodes, "value_size": args.value_size, "fanout": DEFAULT_FANOUT,
                   "formulas": {"rss_per_znode_bytes": "(VmRSS_kib - rss_empty_kib) * 1024 / znodes",
                                "restart_s": "kill -9 until a fresh connection reads the last populated znode",
                                "worst_*_ms": "slowest probe request overlapping [snapshot end - write time, end]"},
                   "work_dir": root, "results": results}, f, indent=2, sort_keys=True)
    print(table(results))
    print()
    print("RSS/znode = (VmRSS - VmRSS of the empty server at start) / znodes; ratio = Keel / ZooKeeper.")
    print("Log replay: transactions in the log tail behind the snapshot / time to read and apply them.")
    print("raw results: %s; logs: %s" % (os.path.relpath(out, REPO), os.path.relpath(root, REPO)))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as e:
        kill_all()
        log("interrupted (%s); all started processes stopped" % (e or "Ctrl-C"))
        sys.exit(130)
