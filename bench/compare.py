#!/usr/bin/env python3
"""Side-by-side benchmark: 3-node Apache ZooKeeper 3.8 ensemble vs 3-node Keel.

Starts the clusters on loopback (free ports, fsync on, one temp data dir per
node under bench/work/): ZooKeeper, Keel, and each of the two with TLS on
its client ports and between its members (keel-tls; zookeeper-tls,
bench/zk_tls.py: Netty TLS ports, quorum TLS, TLS 1.3, Debian's jars; left
out, with a line naming the missing jars, where Netty is not installed).
COMPARE_SYSTEMS=zookeeper,keel runs the plain two only. Then runs `keel
bench` for the create and mix workloads at 10, 100 and 400 clients,
alternating between the systems, with the clients spread over all three
nodes (over TLS, verifying the servers' certificates, for the TLS systems).
Prints one table (TPS, p99, Keel/ZooKeeper TPS ratio, and the CPU time all
three servers of each system used per 1,000 operations during the timed
run, with its ratio), the single-client create p50 of the plain two (the
client on the leader, then on a follower) next to this machine's fdatasync
p50 (128-byte appends) and loopback round trip,
the peak RSS (VmHWM) of every server, and writes the raw rows to
bench/work/compare.csv. The TLS tables follow: Keel with TLS against plain
Keel, ZooKeeper with TLS against plain ZooKeeper, and Keel against
ZooKeeper, both with TLS.

Server CPU is utime + stime of each server process (/proc/PID/stat, all
threads), sampled at the bench's first and last progress line of the timed
phase (one per second), and divided by the operations completed between the
two lines: setup and cleanup are not counted.

The clusters are started, checked (one leader agreed by a majority, the
others following) and stopped by the test suites' harness (tests/harness/
cluster.py). Every process it starts runs in its
own process group and is stopped on exit, on exceptions and on SIGINT/SIGTERM
(and killed by the harness's atexit hook if anything is left).

With --rounds N (COMPARE_ROUNDS) every cell is run N times, the systems
alternating within each round: the tables then show each cell's median
(TPS, p99 and CPU per operation, each the median of its N values, and the
ratios of those medians), followed by every round's ratios, so a verdict
never rests on one noisy run.

Usage: python3 bench/compare.py [--duration S] [--warmup S] [--rounds N]
       (COMPARE_DURATION / COMPARE_WARMUP / COMPARE_ROUNDS env vars too)
Python 3 standard library only.
"""

import argparse
import csv
import os
import shutil
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "tests"))

# The one cluster harness of the test suites (Python standard library only).
from harness import KEEL_BIN  # noqa: E402
from harness.cluster import make_cluster  # noqa: E402
from harness.servers import ZK_JAR, ZK_JUTE_JAR, SLF4J_API_JAR, SLF4J_SIMPLE_JAR, free_port  # noqa: E402
from harness.peer_auth import peer_auth_settings  # noqa: E402
import zk_tls  # noqa: E402  (bench/, beside this script)

WORK = os.path.join(REPO, "bench", "work")
WORKLOADS = ("create", "mix")
CLIENTS = (10, 100, 400)
# keel-tls: the same Keel cluster with TLS on the client port (the bench
# connects there, verifying the server's certificate) and mutual TLS 1.3
# between the peers (peer_tls): the cost of TLS, against plain Keel.
# zookeeper-tls: ZooKeeper 3.8 the same way (bench/zk_tls.py: Netty TLS
# client ports, quorum TLS, TLS 1.3), from Debian's jars.
# COMPARE_SYSTEMS=zookeeper,keel leaves both out.
SYSTEMS = tuple(os.environ.get("COMPARE_SYSTEMS", "zookeeper,keel,keel-tls,zookeeper-tls").split(","))
LABELS = {"zookeeper": "ZooKeeper 3.8", "keel": "Keel", "keel-tls": "Keel (TLS client and peer links)",
          "zookeeper-tls": "ZooKeeper 3.8 (TLS client ports and quorum links)"}
# The systems whose single-client create latency is measured and printed.
SINGLE_CLIENT_SYSTEMS = ("zookeeper", "keel")
# Where the single client connects, one run each: the leader (what issue
# 12's target counts: one replication hop, fsync + 2 round trips) and a
# follower (its write is forwarded to the leader and the reply comes back:
# a hop more). Connecting to the first member, as before, measured either,
# by the election's luck.
SINGLE_CLIENT_ROLES = ("leader", "follower")


def member_address(group, role):
    """The client address of the group's leader, or of its first follower."""
    leader = group.leader(timeout=30)
    if role == "leader":
        return leader.address
    assert role == "follower", role
    return next(nd.address for nd in group.nodes if nd is not leader)


# Each system with its own defaults, fsync on, not the test suites' settings.
SETTINGS = {
    "zookeeper": {
        "tick_time_ms": 2000,
        "four_letter_words": ["*"],
        "zk_force_sync": True,
        # Default is 60 per IP; 400 loopback clients over 3 nodes need more.
        "max_client_connections_per_ip": 0,
        "zk_jvm_options": ["-Xmx1g"],
    },
    "keel": {
        "four_letter_words": ["*"],
    },
}

T0 = time.monotonic()


def log(msg):
    print("[%6.1fs] %s" % (time.monotonic() - T0, msg), flush=True)


def on_signal(signum, _frame):
    raise KeyboardInterrupt("signal %d" % signum)


def start_cluster(root, system):
    """A 3-member cluster of `system` (harness.cluster), serving: one leader,
    two followers. Its `bench_address` and `bench_flags` are what keel bench
    connects with (keel-tls, zookeeper-tls: the TLS client ports and the CA)."""
    if system == "keel-tls":
        group = start_tls_cluster(root)
    elif system == "zookeeper-tls":
        group = zk_tls.make_group(root, SETTINGS["zookeeper"])
    else:
        group = make_cluster(system, 3, name=system, workdir=os.path.join(root, system),
                             settings=SETTINGS[system], test_defaults=False)
        group.bench_address, group.bench_flags = group.address, []
    _groups.append(group)
    group.start(timeout=120)
    states = group.states()
    log("%s serving: %s" % (system, ", ".join(
        "node%d@%d=%s" % (group.member_id(n), n.port, m) for n, m in zip(group.nodes, states))))
    leader = group.leader(timeout=30)
    log("%s leader: node%d" % (system, group.member_id(leader)))
    return group


def start_tls_cluster(root):
    """Keel with TLS on every client port (no client certificate asked) and
    on every peer link (mutual, certificates naming the members); each
    member's certificate also names 127.0.0.1 for the bench to verify."""
    pki_dir = os.path.join(root, "keel-tls-pki")
    settings, member_settings = peer_auth_settings(pki_dir, 3, tls=True, extra_san="IP:127.0.0.1")
    settings = dict(SETTINGS["keel"], tls_client_auth="none", **settings)
    secure_ports = {i: free_port() for i in (1, 2, 3)}

    def node_settings(member_id):
        return dict(member_settings(member_id), secure_client_port=secure_ports[member_id])

    group = make_cluster("keel", 3, name="keel-tls", workdir=os.path.join(root, "keel-tls"),
                         settings=settings, node_settings=node_settings, test_defaults=False)
    group.bench_address = ",".join("127.0.0.1:%d" % secure_ports[i] for i in (1, 2, 3))
    group.bench_flags = ["--tls-ca", settings["tls_ca_file"]]
    return group


_groups = []


def stop_all():
    """Stops every group started and deletes the servers' data directories
    (logs and per-run output stay): a full run writes gigabytes of Raft
    logs and snapshots. COMPARE_KEEP_DATA=1 keeps them."""
    for g in _groups:
        try:
            g.stop(timeout=10)
        except Exception:
            g.kill()
    if os.environ.get("COMPARE_KEEP_DATA") == "1":
        return
    for g in _groups:
        for node in g.nodes:
            shutil.rmtree(node.data_dir, ignore_errors=True)


def bench(root, system, group, workload, clients, duration, tag):
    """One `keel bench` run over every member; its last CSV row."""
    return bench_with_cpu(root, system, group, workload, clients, duration, tag)


# keel bench's progress line of the timed phase: "[  3.0 s]  12345 ops/s ... ops  123456   errors 0"
RUN_LINE = re.compile(r"^\[\s*([0-9.]+) s\]\s+\d+ ops/s.*\bops\s+(\d+)\s+errors")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids):
    """utime + stime of the processes (all their threads), in seconds."""
    total = 0
    for pid in pids:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / CLK_TCK


def run_sampled(command, pids, deadline_s):
    """Runs a load generator that prints keel bench's progress lines on
    stderr (`keel bench`, bench/java/LoadGen.java), sampling the servers'
    CPU (`pids`) and its own at each. Killed after `deadline_s`. Returns
    (exit status, stdout, stderr lines, the servers' CPU ms per 1,000
    operations over the timed phase, between its first and last progress
    lines, or None, and the load generator's own, or None)."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", stdin=subprocess.DEVNULL, start_new_session=True)
    stdout = []
    reader = threading.Thread(target=lambda: stdout.append(proc.stdout.read()), daemon=True)
    reader.start()
    watchdog = threading.Timer(deadline_s, proc.kill)
    watchdog.start()
    samples, lines = [], []
    try:
        for line in proc.stderr:
            lines.append(line)
            m = RUN_LINE.match(line)
            if m:
                try:
                    own = cpu_seconds([proc.pid])
                except OSError:
                    own = None  # it is exiting
                samples.append((cpu_seconds(pids), int(m.group(2)), own))
        proc.wait()
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    cpu_ms_per_kop = own_ms_per_kop = None
    if len(samples) >= 2 and samples[-1][1] > samples[0][1]:
        kops = (samples[-1][1] - samples[0][1]) / 1000.0
        cpu_ms_per_kop = (samples[-1][0] - samples[0][0]) * 1000.0 / kops
        if samples[0][2] is not None and samples[-1][2] is not None:
            own_ms_per_kop = (samples[-1][2] - samples[0][2]) * 1000.0 / kops
    return proc.returncode, "".join(stdout), lines, cpu_ms_per_kop, own_ms_per_kop


def bench_with_cpu(root, system, group, workload, clients, duration, tag, servers=None):
    """Like bench(), and also the servers' CPU ms per 1,000 operations over
    the timed phase (between its first and last progress lines). `servers`:
    the members to connect to (default: all, `group.bench_address`)."""
    csvp = os.path.join(root, "bench-%s-%s-%d-%s.csv" % (system, workload, clients, tag))
    out = os.path.join(root, "bench-%s-%s-%d-%s.out" % (system, workload, clients, tag))
    pids = [nd.proc.pid for nd in group.nodes]
    command = [KEEL_BIN, "bench", "--servers", servers or group.bench_address, "--workload", workload,
               "--clients", str(clients), "--duration", str(duration), "--csv", csvp] + group.bench_flags
    status, stdout, lines, cpu_ms_per_kop, _ = run_sampled(command, pids, duration + 180)
    with open(out, "w") as f:
        f.write(stdout + "".join(lines))
    if status != 0:
        raise RuntimeError("keel bench failed (%d): %s\n%s" % (
            status, " ".join(command), "".join(lines)[-3000:]))
    with open(csvp, newline="") as f:
        row = list(csv.DictReader(f))[-1]
    row["cpu_ms_per_kop"] = "" if cpu_ms_per_kop is None else "%.3f" % cpu_ms_per_kop
    return row


def write_rows_csv(path, rows):
    """The raw rows of a comparison, one per run, columns from the first."""
    if rows:
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)


def run_main(main):
    """Runs a comparison script's main(); Ctrl-C stops every server started."""
    try:
        main()
    except KeyboardInterrupt as e:
        stop_all()
        log("interrupted (%s); all started processes stopped" % (e or "Ctrl-C"))
        sys.exit(130)


def fdatasync_p50_ms(directory, count=200):
    """p50 of one 128-byte append + fdatasync in `directory` (the servers'
    file system)."""
    path = os.path.join(directory, "fsync-probe")
    times = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for _ in range(count):
            start = time.perf_counter()
            os.write(fd, b"x" * 128)
            os.fdatasync(fd)
            times.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        os.unlink(path)
    return statistics.median(times) * 1000.0


def concurrent_fdatasync_p50_ms(directory, writers=3, count=200):
    """p50 of the same appends made by `writers` threads at once, each to
    its own file: what the three servers of a cluster on this one disk
    see when each syncs its log for the same round (fdatasync releases
    the GIL, so the threads' syncs overlap)."""
    results = [None] * writers
    start = threading.Barrier(writers)

    def writer(index):
        probe = os.path.join(directory, "fsync-probe-%d" % index)
        os.makedirs(probe, exist_ok=True)
        start.wait()
        results[index] = fdatasync_p50_ms(probe, count)
        os.rmdir(probe)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statistics.median(results)


def loopback_rtt_p50_ms(count=2000):
    """p50 of a 16-byte TCP round trip over 127.0.0.1."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def echo():
        conn, _ = listener.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                data = conn.recv(16)
                if not data:
                    return
                conn.sendall(data)

    server = threading.Thread(target=echo, daemon=True)
    server.start()
    times = []
    with socket.create_connection(listener.getsockname()) as c:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(count):
            start = time.perf_counter()
            c.sendall(b"p" * 16)
            got = 0
            while got < 16:
                got += len(c.recv(16 - got))
            times.append(time.perf_counter() - start)
    listener.close()
    server.join(timeout=5)
    return statistics.median(times) * 1000.0


def vm_hwm_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def fmt_tps(v):
    return "%.0f" % v


def fmt_ms(us):
    return "%.2f" % (us / 1000.0)


# Most rounds one compare may run (each round is 6 cells x 4 systems = 24
# runs of --duration with the default COMPARE_SYSTEMS).
ROUNDS_MAX = 9


def median_row(rows):
    """One cell's rounds as one row: the median of each of TPS, p99 and
    CPU per operation (taken separately), and the median of p50."""
    assert rows, "a cell without a run"

    def med(key):
        values = [float(r[key]) for r in rows if r.get(key) not in (None, "")]
        return statistics.median(values) if values else None

    cpu = med("cpu_ms_per_kop")
    return {
        "tps": med("tps"),
        "p50_us": med("p50_us"),
        "p99_us": med("p99_us"),
        "cpu_ms_per_kop": "%.3f" % cpu if cpu is not None else "",
    }


def ratio(numerator, denominator):
    """"0.23x" from two numbers (TPS, or cpu_ms_per_kop strings), or "n/a"
    when either is missing ("") or the denominator is not positive."""
    if numerator in (None, "") or denominator in (None, "") or float(denominator) <= 0:
        return "n/a"
    return "%.2fx" % (float(numerator) / float(denominator))


def print_round_ratios(rounds, numerator, denominator, title):
    """Every round's TPS ratio per cell (only with more than one round)."""
    if len(rounds) < 2:
        return
    print(title)
    for workload in WORKLOADS:
        for clients in CLIENTS:
            ratios = []
            for results in rounds:
                n, d = results[(numerator, workload, clients)], results[(denominator, workload, clients)]
                ratios.append(ratio(n["tps"], d["tps"]))
            print("  %6s %4d: %s" % (workload, clients, " ".join(ratios)))
    print()


def print_table(title, hdr, lines):
    """A right-aligned table of strings under `title` (if any), then a blank line."""
    widths = [max(len(r[i]) for r in [hdr] + lines) for i in range(len(hdr))]
    fmt = " | ".join("%%%ds" % w for w in widths)
    if title:
        print(title)
    print(fmt % hdr)
    print("-+-".join("-" * w for w in widths))
    for r in lines:
        print(fmt % r)
    print()


def print_keel_vs_zookeeper(title, results, clients_list):
    """The main table: TPS, p99 and CPU per operation of ZooKeeper and
    Keel per cell, with Keel/ZooKeeper ratios (also bench/java_compare.py's)."""
    hdr = ("workload", "clients", "ZK TPS", "ZK p99 ms", "Keel TPS", "Keel p99 ms", "Keel/ZK TPS",
           "ZK CPU ms/kop", "Keel CPU ms/kop", "Keel/ZK CPU")
    lines = []
    for workload in WORKLOADS:
        for clients in clients_list:
            z, k = results[("zookeeper", workload, clients)], results[("keel", workload, clients)]
            zt, kt = float(z["tps"]), float(k["tps"])
            zc, kc = z["cpu_ms_per_kop"], k["cpu_ms_per_kop"]
            lines.append((workload, str(clients), fmt_tps(zt), fmt_ms(float(z["p99_us"])),
                          fmt_tps(kt), fmt_ms(float(k["p99_us"])),
                          ratio(kt, zt), zc or "n/a", kc or "n/a", ratio(kc, zc)))
    print_table(title, hdr, lines)


def print_tls_table(results):
    """Keel with TLS on client and peer links against plain Keel, same cells."""
    hdr = ("workload", "clients", "Keel TPS", "Keel p99 ms", "TLS TPS", "TLS p99 ms", "TLS/plain TPS",
           "Keel CPU ms/kop", "TLS CPU ms/kop")
    lines = []
    for workload in WORKLOADS:
        for clients in CLIENTS:
            k, t = results[("keel", workload, clients)], results[("keel-tls", workload, clients)]
            kt, tt = float(k["tps"]), float(t["tps"])
            lines.append((workload, str(clients), fmt_tps(kt), fmt_ms(float(k["p99_us"])), fmt_tps(tt),
                          fmt_ms(float(t["p99_us"])), ratio(tt, kt),
                          k["cpu_ms_per_kop"] or "n/a", t["cpu_ms_per_kop"] or "n/a"))
    print_table("TLS (client port and peer links, keel-tls) against plain Keel:", hdr, lines)


def print_zk_tls_table(results):
    """ZooKeeper with TLS on client and quorum links against plain
    ZooKeeper, and Keel with TLS (keel-tls) against it, same cells."""
    with_keel = "keel-tls" in SYSTEMS
    hdr = ("workload", "clients", "ZK TPS", "ZK TLS TPS", "ZK TLS p99 ms", "ZK TLS/plain TPS",
           "ZK TLS CPU ms/kop") + (("Keel TLS TPS", "Keel/ZK TPS (TLS)", "Keel/ZK CPU (TLS)") if with_keel else ())
    lines = []
    for workload in WORKLOADS:
        for clients in CLIENTS:
            z, t = results[("zookeeper", workload, clients)], results[("zookeeper-tls", workload, clients)]
            zt, tt = float(z["tps"]), float(t["tps"])
            row = (workload, str(clients), fmt_tps(zt), fmt_tps(tt), fmt_ms(float(t["p99_us"])),
                   ratio(tt, zt), t["cpu_ms_per_kop"] or "n/a")
            if with_keel:
                k = results[("keel-tls", workload, clients)]
                kt = float(k["tps"])
                row += (fmt_tps(kt), ratio(kt, tt), ratio(k["cpu_ms_per_kop"], t["cpu_ms_per_kop"]))
            lines.append(row)
    print_table("ZooKeeper 3.8 with TLS (Netty client ports and quorum links, TLS 1.3) against plain ZooKeeper"
                + (", and Keel with TLS against it:" if with_keel else ":"), hdr, lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=int, default=int(os.environ.get("COMPARE_DURATION", "20")))
    ap.add_argument("--warmup", type=int, default=int(os.environ.get("COMPARE_WARMUP", "3")))
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("COMPARE_ROUNDS", "1")))
    args = ap.parse_args()
    if not 1 <= args.rounds <= ROUNDS_MAX:
        sys.exit("--rounds must be 1..%d, not %d" % (ROUNDS_MAX, args.rounds))
    if args.duration < 1:
        sys.exit("--duration must be at least 1 s, not %d" % args.duration)
    global SYSTEMS
    missing = zk_tls.missing_jars() if "zookeeper-tls" in SYSTEMS else []
    if missing:
        log("zookeeper-tls left out: ZooKeeper's TLS needs %s (Debian: libnetty-java)" % ", ".join(missing))
        SYSTEMS = tuple(system for system in SYSTEMS if system != "zookeeper-tls")
    unknown = [system for system in SYSTEMS if system not in LABELS]
    if unknown or len(set(SYSTEMS)) != len(SYSTEMS) or not {"zookeeper", "keel"} <= set(SYSTEMS):
        sys.exit("COMPARE_SYSTEMS must name zookeeper and keel, each once, and any of keel-tls, "
                 "zookeeper-tls, not %r" % ",".join(SYSTEMS))

    if not os.access(KEEL_BIN, os.X_OK):
        sys.exit("no Keel binary at %s (run: cargo build --release -p keel)" % KEEL_BIN)
    for j in (ZK_JAR, ZK_JUTE_JAR, SLF4J_API_JAR, SLF4J_SIMPLE_JAR):
        if not os.path.isfile(j):
            sys.exit("missing ZooKeeper jar %s" % j)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    os.makedirs(WORK, exist_ok=True)
    root = tempfile.mkdtemp(prefix="run-%s-" % time.strftime("%Y%m%dT%H%M%S"), dir=WORK)
    singles = [system for system in SYSTEMS if system in SINGLE_CLIENT_SYSTEMS]
    total_runs = (args.rounds * len(WORKLOADS) * len(CLIENTS) * len(SYSTEMS)
                  + len(singles) * len(SINGLE_CLIENT_ROLES))
    log("work dir %s; duration %ds per run, %d round(s), %d runs, warm-up %ds"
        % (root, args.duration, args.rounds, total_runs, args.warmup))

    rounds = []
    rows_out = []
    rss = {}
    try:
        clusters = {}
        for system in SYSTEMS:
            log("step 1/4: starting 3-node %s cluster" % LABELS[system])
            clusters[system] = start_cluster(root, system)

        warmed = set()
        n = 0
        for round_number in range(1, args.rounds + 1):
            results = {}
            for workload in WORKLOADS:
                for clients in CLIENTS:
                    for system in SYSTEMS:
                        group = clusters[system]
                        if system not in warmed and args.warmup > 0:
                            log("step 2/4: warm-up %s (%s, %d clients, %ds, not recorded)"
                                % (system, workload, clients, args.warmup))
                            bench(root, system, group, workload, clients, args.warmup, "warmup")
                            warmed.add(system)
                        n += 1
                        log("step 2/4: run %d/%d (round %d/%d): %s %s %d clients (%ds)"
                            % (n, total_runs, round_number, args.rounds, system, workload, clients,
                               args.duration))
                        tag = "run" if args.rounds == 1 else "run%d" % round_number
                        row = bench_with_cpu(root, system, group, workload, clients, args.duration, tag)
                        for nd in group.nodes:
                            if not nd.running():
                                raise RuntimeError("%s node %d died during the run; see %s"
                                                   % (system, group.member_id(nd), nd.log_path))
                        results[(system, workload, clients)] = row
                        rows_out.append(dict(system=system, **row, round=round_number))
                        log("          -> %.0f TPS, p99 %s ms, errors %s, server CPU %s ms per 1k ops"
                            % (float(row["tps"]), fmt_ms(float(row["p99_us"])), row["errors"],
                               row["cpu_ms_per_kop"] or "n/a"))
            rounds.append(results)

        single = {}
        for system in singles:
            for role in SINGLE_CLIENT_ROLES:
                n += 1
                log("step 2/4: run %d/%d: %s create 1 client on a %s (%ds): single-client latency"
                    % (n, total_runs, system, role, args.duration))
                group = clusters[system]
                single[(system, role)] = bench_with_cpu(root, system, group, "create", 1, args.duration,
                                                        "single-" + role, servers=member_address(group, role))
                log("          -> p50 %s ms" % fmt_ms(float(single[(system, role)]["p50_us"])))
        log("step 2/4: fdatasync p50 (128-byte appends) and loopback round trip p50")
        fsync_ms = fdatasync_p50_ms(root)
        fsync3_ms = concurrent_fdatasync_p50_ms(root)
        rtt_ms = loopback_rtt_p50_ms()

        log("step 3/4: reading peak RSS (VmHWM)")
        for system in SYSTEMS:
            rss[system] = [(clusters[system].member_id(nd), vm_hwm_kib(nd.proc.pid))
                           for nd in clusters[system].nodes]
    finally:
        log("cleanup: stopping every process started")
        stop_all()

    csv_path = os.path.join(WORK, "compare.csv")
    write_rows_csv(csv_path, rows_out)

    log("step 4/4: results")
    results = {cell: median_row([r[cell] for r in rounds]) for cell in rounds[0]}
    if len(rounds) > 1:
        print()
        print("Each cell: the median of %d rounds (TPS, p99 and CPU per operation each the median"
              " of its own values; ratios of the medians)." % len(rounds))
    print()
    print_keel_vs_zookeeper(None, results, CLIENTS)
    print_round_ratios(rounds, "keel", "zookeeper", "Keel/ZK TPS in each round:")
    if "keel-tls" in SYSTEMS:
        print_tls_table(results)
        print_round_ratios(rounds, "keel-tls", "keel", "TLS/plain TPS in each round:")
    if "zookeeper-tls" in SYSTEMS:
        print_zk_tls_table(results)
        print_round_ratios(rounds, "zookeeper-tls", "zookeeper", "ZooKeeper TLS/plain TPS in each round:")
        if "keel-tls" in SYSTEMS:
            print_round_ratios(rounds, "keel-tls", "zookeeper-tls", "Keel/ZK TPS, both with TLS, in each round:")
    def p50_ms(system, role):
        return float(single[(system, role)]["p50_us"]) / 1000.0

    z1, k1 = p50_ms("zookeeper", "leader"), p50_ms("keel", "leader")
    zf, kf = p50_ms("zookeeper", "follower"), p50_ms("keel", "follower")
    target_ms = 1.5 * (fsync_ms + 2 * rtt_ms)
    print("Single-client create p50: ZK %.2f ms, Keel %.2f ms (Keel/ZK %.2fx)" % (z1, k1, k1 / z1 if z1 else 0))
    print("  (the client on each system's leader; through a follower, which forwards the write:"
          " ZK %.2f ms, Keel %.2f ms, Keel/ZK %.2fx)" % (zf, kf, kf / zf if zf else 0))
    print("This machine: fdatasync p50 %.3f ms (128-byte appends), loopback round trip p50 %.3f ms"
          % (fsync_ms, rtt_ms))
    print("Target for Keel: <= 1.5 x (fsync + 2 x round trip) = %.2f ms: %s"
          % (target_ms, "met" if k1 <= target_ms else "not met"))
    print("Three writers at once on this disk (the three servers' logs): fdatasync p50 %.3f ms"
          % fsync3_ms)
    print()
    print("Peak RSS (VmHWM) per server process:")
    for system in SYSTEMS:
        vals = [v for _, v in rss[system] if v is not None]
        per = ", ".join("node%d %s" % (i, "%.0f MiB" % (v / 1024) if v else "n/a") for i, v in rss[system])
        print("  %-13s total %.0f MiB, max per node %.0f MiB  (%s)"
              % (system, sum(vals) / 1024, max(vals) / 1024 if vals else 0, per))
    print()
    print("raw CSV: %s" % os.path.relpath(csv_path, REPO))
    print("server logs and per-run output: %s" % os.path.relpath(root, REPO))


if __name__ == "__main__":
    run_main(main)
