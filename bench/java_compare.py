#!/usr/bin/env python3
"""Side-by-side benchmark under Apache ZooKeeper's own Java client: 3-node
ZooKeeper 3.8 ensemble vs 3-node Keel, load from bench/java/LoadGen.java.

The same clusters as bench/compare.py (its start_cluster: loopback, free
ports, fsync on, each system's own defaults), the same workloads (LoadGen
runs keel bench's create and mix: tree, op mix and op streams), but the
requests come from another client library: the Java client's asynchronous
API, one ZooKeeper handle per session, one request in flight each, sessions
spread round-robin over the three members.

LoadGen is compiled once with javac into bench/work/loadgen-classes. For each
workload and client count (COMPARE_CLIENTS, default 10,100,400) it runs
against ZooKeeper, then Keel, COMPARE_DURATION seconds (default 10) timed,
after COMPARE_WARMUP seconds (default 3) of unrecorded load in the same JVM
(every run is a fresh JVM whose JIT needs warming, so each run warms up, not
only each system's first). Server CPU is measured as compare.py does: utime +
stime of the three server processes, sampled at LoadGen's first and last
progress line of the timed phase (same format as keel bench's), divided by
the operations completed in between. Prints one table like compare.py's, and
writes the raw rows to bench/work/compare-java.csv.

The load generator's JVM: LOADGEN_JVM_OPTIONS (default "-Xms1g -Xmx1g"), the
same for both systems.

Usage: python3 bench/java_compare.py [--duration S] [--warmup S] [--clients 10,100,400]
Python 3 standard library only.
"""

import argparse
import csv
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)

# bench/compare.py: the clusters, the CPU sampling, the output helpers.
import compare  # noqa: E402
from compare import (  # noqa: E402
    KEEL_BIN, REPO, WORK, WORKLOADS, fmt_ms, log, on_signal, run_main, run_sampled,
    start_cluster, stop_all,
)
from harness import ZK_CLIENT_CLASSPATH  # noqa: E402  (compare.py put tests/ on the path)

SYSTEMS = ("zookeeper", "keel")
LOADGEN_SRC = os.path.join(BENCH, "java", "LoadGen.java")
CLASSES = os.path.join(WORK, "loadgen-classes")
JVM_OPTIONS = shlex.split(os.environ.get("LOADGEN_JVM_OPTIONS", "-Xms1g -Xmx1g"))
# What every LoadGen JVM gets besides the heap: no SASL attempt (neither
# server asks for it) and smaller thread stacks (two client threads per
# session: 800 at 400 sessions).
JVM_FIXED = ["-Xss512k", "-Dzookeeper.sasl.client=false"]
# A run is killed if it has not finished this long after its timed phase.
RUN_GRACE_S = 180


def compile_loadgen():
    """javac LoadGen.java once into CLASSES; returns the run classpath."""
    javac = shutil.which("javac")
    if not javac:
        sys.exit("javac not found (Debian: openjdk-17-jdk-headless; make test-deps installs it)")
    os.makedirs(CLASSES, exist_ok=True)
    p = subprocess.run([javac, "-nowarn", "-d", CLASSES, "-cp", ZK_CLIENT_CLASSPATH, LOADGEN_SRC],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit("javac failed on %s:\n%s" % (LOADGEN_SRC, p.stderr[-3000:]))
    return ZK_CLIENT_CLASSPATH + ":" + CLASSES


def parse_summary(text):
    """LoadGen's stdout: one "key value" per line."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            out[key] = value.strip()
    return out


def loadgen_with_cpu(root, classpath, system, group, workload, clients, duration, warmup):
    """One LoadGen run over every member of `group`: its summary, plus the
    servers' CPU ms per 1,000 operations over the timed phase (between its
    first and last progress lines), as compare.bench_with_cpu measures it."""
    out = os.path.join(root, "loadgen-%s-%s-%d.out" % (system, workload, clients))
    pids = [nd.proc.pid for nd in group.nodes]
    command = (["java"] + JVM_OPTIONS + JVM_FIXED + ["-cp", classpath, "LoadGen",
               "--servers", group.address, "--workload", workload, "--sessions", str(clients),
               "--duration", str(duration), "--warmup", str(warmup)])
    status, stdout, lines, cpu_ms_per_kop, loadgen_ms_per_kop = run_sampled(
        command, pids, warmup + duration + RUN_GRACE_S)
    with open(out, "w") as f:
        f.write(" ".join(command) + "\n" + stdout + "".join(lines))
    if status != 0:
        raise RuntimeError("LoadGen failed (%d): %s\n%s" % (
            status, " ".join(command), "".join(lines)[-3000:]))
    summary = parse_summary(stdout)
    for key in ("TPS", "p50_us", "p99_us", "ops", "errors", "disconnects", "expiries"):
        if key not in summary:
            raise RuntimeError("LoadGen printed no %r (see %s)" % (key, out))
    return {
        "system": system,
        "workload": workload,
        "clients": clients,
        "tps": summary["TPS"],
        "p50_us": summary["p50_us"],
        "p99_us": summary["p99_us"],
        "ops": summary["ops"],
        "errors": summary["errors"],
        "disconnects": summary["disconnects"],
        "expiries": summary["expiries"],
        "elapsed_s": summary.get("elapsed_s", ""),
        "cpu_ms_per_kop": "" if cpu_ms_per_kop is None else "%.3f" % cpu_ms_per_kop,
        "loadgen_cpu_ms_per_kop": "" if loadgen_ms_per_kop is None else "%.3f" % loadgen_ms_per_kop,
    }


def parse_clients(text):
    try:
        clients = tuple(int(c) for c in text.split(",") if c.strip())
    except ValueError:
        clients = ()
    if not clients or any(c < 1 for c in clients):
        sys.exit("COMPARE_CLIENTS / --clients wants a comma list of positive numbers, got %r" % text)
    return clients


def print_table(results, clients_list):
    print()
    compare.print_keel_vs_zookeeper("Load from Apache ZooKeeper's Java client (bench/java/LoadGen.java, closed loop):",
                                    results, clients_list)
    print_ceiling(results, clients_list)


def print_ceiling(results, clients_list):
    """The load generator shares the cores with the servers, so it bounds
    Keel's TPS even if Keel's servers used no CPU at all: at most
    cores / (LoadGen CPU per op). Prints that bound over ZooKeeper's TPS:
    the best Keel/ZK TPS this machine can show under this load generator."""
    cores = os.cpu_count() or 1
    print("LoadGen's own CPU ms per 1,000 ops, and the best Keel/ZK TPS a Keel using no CPU could reach "
          "beside it on these %d cores, %d x 1e6 / (LoadGen us per op) / ZK TPS:" % (cores, cores))
    for workload in WORKLOADS:
        for clients in clients_list:
            z, k = results[("zookeeper", workload, clients)], results[("keel", workload, clients)]
            zl, kl, zt = z["loadgen_cpu_ms_per_kop"], k["loadgen_cpu_ms_per_kop"], float(z["tps"])
            if not (zl and kl) or float(kl) <= 0 or zt <= 0:
                print("  %-6s %4d: n/a" % (workload, clients))
                continue
            bound = cores * 1e6 / float(kl) / zt
            print("  %-6s %4d: LoadGen %8.3f (ZK run) %8.3f (Keel run); ceiling %.2fx"
                  % (workload, clients, float(zl), float(kl), bound))
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=int, default=int(os.environ.get("COMPARE_DURATION", "10")))
    ap.add_argument("--warmup", type=int, default=int(os.environ.get("COMPARE_WARMUP", "3")))
    ap.add_argument("--clients", default=os.environ.get("COMPARE_CLIENTS", "10,100,400"))
    args = ap.parse_args()
    clients_list = parse_clients(args.clients)
    if args.duration < 1 or args.warmup < 0:
        sys.exit("duration must be >= 1 s and warm-up >= 0 s")

    if not os.access(KEEL_BIN, os.X_OK):
        sys.exit("no Keel binary at %s (run: cargo build --release -p keel)" % KEEL_BIN)
    for j in ZK_CLIENT_CLASSPATH.split(":") + [compare.SLF4J_SIMPLE_JAR]:
        if not os.path.isfile(j):
            sys.exit("missing jar %s (make test-deps installs Debian's zookeeper)" % j)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    os.makedirs(WORK, exist_ok=True)
    log("compiling %s" % os.path.relpath(LOADGEN_SRC, REPO))
    classpath = compile_loadgen()
    root = tempfile.mkdtemp(prefix="java-run-%s-" % time.strftime("%Y%m%dT%H%M%S"), dir=WORK)
    total_runs = len(WORKLOADS) * len(clients_list) * len(SYSTEMS)
    log("work dir %s; %ds warm-up + %ds timed per run, %d runs; LoadGen JVM %s"
        % (root, args.warmup, args.duration, total_runs, " ".join(JVM_OPTIONS)))

    results = {}
    rows_out = []
    try:
        clusters = {}
        for system in SYSTEMS:
            log("step 1/3: starting 3-node %s cluster" % {"zookeeper": "ZooKeeper 3.8", "keel": "Keel"}[system])
            clusters[system] = start_cluster(root, system)
        n = 0
        for workload in WORKLOADS:
            for clients in clients_list:
                for system in SYSTEMS:
                    group = clusters[system]
                    n += 1
                    log("step 2/3: run %d/%d: %s %s %d sessions (%ds + %ds)"
                        % (n, total_runs, system, workload, clients, args.warmup, args.duration))
                    row = loadgen_with_cpu(root, classpath, system, group, workload, clients,
                                           args.duration, args.warmup)
                    for nd in group.nodes:
                        if not nd.running():
                            raise RuntimeError("%s node %d died during the run; see %s"
                                               % (system, group.member_id(nd), nd.log_path))
                    results[(system, workload, clients)] = row
                    rows_out.append(row)
                    log("          -> %.0f TPS, p99 %s ms, errors %s, disconnects %s, expiries %s, "
                        "server CPU %s ms per 1k ops"
                        % (float(row["tps"]), fmt_ms(float(row["p99_us"])), row["errors"], row["disconnects"],
                           row["expiries"], row["cpu_ms_per_kop"] or "n/a"))
    finally:
        log("cleanup: stopping every process started")
        stop_all()

    csv_path = os.path.join(WORK, "compare-java.csv")
    if rows_out:
        with open(csv_path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows_out[0].keys()))
            w.writeheader()
            w.writerows(rows_out)

    log("step 3/3: results")
    print_table(results, clients_list)
    troubled = [r for r in rows_out if int(r["errors"]) or int(r["disconnects"]) or int(r["expiries"])]
    for r in troubled:
        print("WARNING: %s %s %s sessions: %s errors, %s disconnects, %s expiries (see %s)"
              % (r["system"], r["workload"], r["clients"], r["errors"], r["disconnects"], r["expiries"],
                 os.path.relpath(root, REPO)))
    print("raw CSV: %s" % os.path.relpath(csv_path, REPO))
    print("server logs and per-run output: %s" % os.path.relpath(root, REPO))
    if troubled:
        sys.exit(1)


if __name__ == "__main__":
    run_main(main)
