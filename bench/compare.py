#!/usr/bin/env python3
"""Side-by-side benchmark: 3-node Apache ZooKeeper 3.8 ensemble vs 3-node Keel.

Starts both clusters on loopback (free ports, fsync on, one temp data dir per
node under bench/work/), then runs `keel bench` for the create and mix
workloads at 10, 100 and 400 clients, alternating between the two systems,
with the clients spread over all three nodes. Prints one table (TPS, p99,
Keel/ZooKeeper TPS ratio) plus the peak RSS (VmHWM) of every server, and
writes the raw rows to bench/work/compare.csv.

Every process it starts runs in its own process group and is killed on exit,
on exceptions and on SIGINT/SIGTERM.

Usage: python3 bench/compare.py [--duration S] [--warmup S]
       (COMPARE_DURATION / COMPARE_WARMUP env vars too)
Python 3 standard library only.
"""

import argparse
import csv
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
WORK = os.path.join(REPO, "bench", "work")
KEEL_BIN = os.environ.get("KEEL_BIN", os.path.join(REPO, "target", "release", "keel"))
JAVA = os.environ.get("JAVA", shutil.which("java") or "/usr/bin/java")
JAVA_DIR = "/usr/share/java"
ZK_CLASSPATH = ":".join(
    os.path.join(JAVA_DIR, j)
    for j in ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-simple.jar")
)
WORKLOADS = ("create", "mix")
CLIENTS = (10, 100, 400)
SYSTEMS = ("zookeeper", "keel")

T0 = time.monotonic()
_procs = []  # every Popen we started (servers and bench runs)
_ports = set()


def log(msg):
    print("[%6.1fs] %s" % (time.monotonic() - T0, msg), flush=True)


def free_port():
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p not in _ports:
            _ports.add(p)
            return p


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
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(word.encode())
            chunks = []
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def wait_serving(name, nodes, timeout=120.0):
    """Every node answers ruok with imok, one is leader, the others followers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for n in nodes:
            if n["proc"].poll() is not None:
                raise RuntimeError("%s node %d exited (rc %s); see %s"
                                   % (name, n["id"], n["proc"].returncode, n["log"]))
        modes = []
        for n in nodes:
            if four_letter(n["client"], "ruok") != "imok":
                break
            srvr = four_letter(n["client"], "srvr")
            mode = next((l.split(":", 1)[1].strip() for l in srvr.splitlines()
                         if l.startswith("Mode:")), "")
            modes.append(mode)
        if len(modes) == len(nodes) and sorted(modes) == ["follower"] * (len(nodes) - 1) + ["leader"]:
            log("%s serving: %s" % (name, ", ".join(
                "node%d@%d=%s" % (n["id"], n["client"], m) for n, m in zip(nodes, modes))))
            return
        time.sleep(0.5)
    raise RuntimeError("%s did not become ready within %.0fs" % (name, timeout))


def start_zookeeper(root):
    ids = (1, 2, 3)
    ports = {i: (free_port(), free_port(), free_port()) for i in ids}  # client, peer, election
    nodes = []
    for i in ids:
        d = os.path.join(root, "zk%d" % i)
        data = os.path.join(d, "data")
        os.makedirs(data)
        with open(os.path.join(data, "myid"), "w") as f:
            f.write("%d\n" % i)
        cfg = [
            "tickTime=2000",
            "initLimit=10",
            "syncLimit=5",
            "dataDir=%s" % data,
            "clientPort=%d" % ports[i][0],
            "clientPortAddress=127.0.0.1",
            "4lw.commands.whitelist=*",
            "admin.enableServer=false",
            "forceSync=yes",
            # Default is 60 per IP; 400 loopback clients over 3 nodes need more.
            "maxClientCnxns=0",
        ] + ["server.%d=127.0.0.1:%d:%d" % (j, ports[j][1], ports[j][2]) for j in ids]
        cfgpath = os.path.join(d, "zoo.cfg")
        with open(cfgpath, "w") as f:
            f.write("\n".join(cfg) + "\n")
        cmd = [JAVA, "-Xmx1g", "-Dzookeeper.log.dir=" + d, "-cp", ZK_CLASSPATH,
               "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgpath]
        logp = os.path.join(d, "server.log")
        nodes.append({"id": i, "client": ports[i][0], "proc": spawn(cmd, logp, cwd=d), "log": logp})
    return nodes


def start_keel(root):
    ids = (1, 2, 3)
    peer = {i: free_port() for i in ids}
    client = {i: free_port() for i in ids}
    peers = ",".join("%d=127.0.0.1:%d" % (i, peer[i]) for i in ids)
    nodes = []
    for i in ids:
        d = os.path.join(root, "keel%d" % i)
        data = os.path.join(d, "data")
        os.makedirs(data)
        cmd = [KEEL_BIN, "server", "--id", str(i), "--peers", peers,
               "--client-port", str(client[i]), "--client-address", "127.0.0.1",
               "--data-dir", data, "--four-letter-words", "*"]
        logp = os.path.join(d, "server.log")
        nodes.append({"id": i, "client": client[i], "proc": spawn(cmd, logp, cwd=d), "log": logp})
    return nodes


def run_bench(root, system, nodes, workload, clients, duration, tag):
    servers = ",".join("127.0.0.1:%d" % n["client"] for n in nodes)
    csvp = os.path.join(root, "bench-%s-%s-%d-%s.csv" % (system, workload, clients, tag))
    out = os.path.join(root, "bench-%s-%s-%d-%s.out" % (system, workload, clients, tag))
    cmd = [KEEL_BIN, "bench", "--servers", servers, "--workload", workload,
           "--clients", str(clients), "--duration", str(duration), "--csv", csvp]
    p = spawn(cmd, out)
    try:
        rc = p.wait(timeout=duration + 180)
    except subprocess.TimeoutExpired:
        raise RuntimeError("keel bench hung: %s" % " ".join(cmd))
    if rc != 0:
        with open(out, errors="replace") as f:
            tail = f.read()[-2000:]
        raise RuntimeError("keel bench failed (rc %d): %s\n%s" % (rc, " ".join(cmd), tail))
    with open(csvp, newline="") as f:
        rows = list(csv.DictReader(f))
    return rows[-1]


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=int, default=int(os.environ.get("COMPARE_DURATION", "20")))
    ap.add_argument("--warmup", type=int, default=int(os.environ.get("COMPARE_WARMUP", "3")))
    args = ap.parse_args()

    if not os.access(KEEL_BIN, os.X_OK):
        sys.exit("no Keel binary at %s (run: cargo build --release -p keel)" % KEEL_BIN)
    for j in ZK_CLASSPATH.split(":"):
        if not os.path.isfile(j):
            sys.exit("missing ZooKeeper jar %s" % j)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    os.makedirs(WORK, exist_ok=True)
    root = tempfile.mkdtemp(prefix="run-%s-" % time.strftime("%Y%m%dT%H%M%S"), dir=WORK)
    total_runs = len(WORKLOADS) * len(CLIENTS) * len(SYSTEMS)
    log("work dir %s; duration %ds per run, %d runs, warm-up %ds" % (root, args.duration, total_runs, args.warmup))

    results = {}
    rows_out = []
    rss = {}
    try:
        log("step 1/4: starting 3-node ZooKeeper 3.8 ensemble")
        clusters = {"zookeeper": start_zookeeper(root)}
        log("step 1/4: starting 3-node Keel cluster")
        clusters["keel"] = start_keel(root)
        wait_serving("zookeeper", clusters["zookeeper"])
        wait_serving("keel", clusters["keel"])

        warmed = set()
        n = 0
        for workload in WORKLOADS:
            for clients in CLIENTS:
                for system in SYSTEMS:
                    nodes = clusters[system]
                    if system not in warmed and args.warmup > 0:
                        log("step 2/4: warm-up %s (%s, %d clients, %ds, not recorded)"
                            % (system, workload, clients, args.warmup))
                        run_bench(root, system, nodes, workload, clients, args.warmup, "warmup")
                        warmed.add(system)
                    n += 1
                    log("step 2/4: run %d/%d: %s %s %d clients (%ds)"
                        % (n, total_runs, system, workload, clients, args.duration))
                    row = run_bench(root, system, nodes, workload, clients, args.duration, "run")
                    for nd in nodes:
                        if nd["proc"].poll() is not None:
                            raise RuntimeError("%s node %d died during the run; see %s"
                                               % (system, nd["id"], nd["log"]))
                    results[(system, workload, clients)] = row
                    rows_out.append(dict(system=system, **row))
                    log("          -> %.0f TPS, p99 %s ms, errors %s"
                        % (float(row["tps"]), fmt_ms(float(row["p99_us"])), row["errors"]))

        log("step 3/4: reading peak RSS (VmHWM)")
        for system in SYSTEMS:
            rss[system] = [(nd["id"], vm_hwm_kib(nd["proc"].pid)) for nd in clusters[system]]
    finally:
        log("cleanup: stopping every process started")
        kill_all()

    csv_path = os.path.join(WORK, "compare.csv")
    if rows_out:
        with open(csv_path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows_out[0].keys()))
            w.writeheader()
            w.writerows(rows_out)

    log("step 4/4: results")
    hdr = ("workload", "clients", "ZK TPS", "ZK p99 ms", "Keel TPS", "Keel p99 ms", "Keel/ZK TPS")
    lines = []
    for workload in WORKLOADS:
        for clients in CLIENTS:
            z = results[("zookeeper", workload, clients)]
            k = results[("keel", workload, clients)]
            zt, kt = float(z["tps"]), float(k["tps"])
            lines.append((workload, str(clients), fmt_tps(zt), fmt_ms(float(z["p99_us"])),
                          fmt_tps(kt), fmt_ms(float(k["p99_us"])),
                          "%.2fx" % (kt / zt) if zt > 0 else "n/a"))
    widths = [max(len(r[i]) for r in [hdr] + lines) for i in range(len(hdr))]
    fmt = " | ".join("%%%ds" % w for w in widths)
    print()
    print(fmt % hdr)
    print("-+-".join("-" * w for w in widths))
    for r in lines:
        print(fmt % r)
    print()
    print("Peak RSS (VmHWM) per server process:")
    for system in SYSTEMS:
        vals = [v for _, v in rss[system] if v is not None]
        per = ", ".join("node%d %s" % (i, "%.0f MiB" % (v / 1024) if v else "n/a") for i, v in rss[system])
        print("  %-9s total %.0f MiB, max per node %.0f MiB  (%s)"
              % (system, sum(vals) / 1024, max(vals) / 1024 if vals else 0, per))
    print()
    print("raw CSV: %s" % os.path.relpath(csv_path, REPO))
    print("server logs and per-run output: %s" % os.path.relpath(root, REPO))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as e:
        kill_all()
        log("interrupted (%s); all started processes stopped" % (e or "Ctrl-C"))
        sys.exit(130)
