#!/usr/bin/env python3
"""Side-by-side benchmark under another client library than keel bench:
3-node ZooKeeper 3.8 ensemble vs 3-node Keel, load from a load generator
that runs keel bench's workloads on that library. bench/java_compare.py
(`make compare-java`: Apache ZooKeeper's Java client, bench/java/LoadGen.java)
and bench/go_compare.py (`make compare-go`: Go's client
github.com/go-zookeeper/zk, bench/go/loadgen) are its two front ends.

The same clusters as bench/compare.py (its start_cluster: loopback, free
ports, fsync on, each system's own defaults), the same workloads (tree, op
mix and op streams of keel bench), but the requests come from another client
library, one session per connection, one request in flight each, sessions
spread round-robin over the three members.

For each workload and client count (COMPARE_CLIENTS, default 10,100,400) a
run goes against ZooKeeper, then Keel, COMPARE_DURATION seconds (default 10)
timed, after COMPARE_WARMUP seconds (default 3) of unrecorded load in the
same process (a JVM's JIT needs warming, so each run warms up, not only each
system's first). Server CPU is measured as compare.py does: utime + stime of
the three server processes, sampled at the load generator's first and last
progress line of the timed phase (same format as keel bench's), divided by
the operations completed in between. Prints one table like compare.py's,
then the load generator's own CPU per operation and the ceiling it puts on
any server beside it on this machine, and writes the raw rows to a CSV in
bench/work.

Python 3 standard library only.
"""

import argparse
import collections
import os
import signal
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)

# bench/compare.py: the clusters, the CPU sampling, the output helpers.
import compare  # noqa: E402
from compare import (  # noqa: E402
    KEEL_BIN, REPO, WORK, WORKLOADS, fmt_ms, log, on_signal, run_sampled,
    start_cluster, stop_all, write_rows_csv,
)

SYSTEMS = ("zookeeper", "keel")
# A run is killed if it has not finished this long after its timed phase.
RUN_GRACE_S = 180

# One load generator: `label` names it in the output ("LoadGen"), `library`
# says which client it drives, `prepare()` builds it and returns the command
# that runs it (its arguments follow), `check()` exits with a message when
# something it needs is missing, `csv_name` and `work_prefix` name its files
# in bench/work, `describe` is logged at the start.
LoadGenerator = collections.namedtuple(
    "LoadGenerator", "label library prepare check csv_name work_prefix describe")


def parse_summary(text):
    """The load generator's stdout: one "key value" per line."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            out[key] = value.strip()
    return out


def loadgen_with_cpu(root, generator, command_prefix, system, group, workload, clients, duration, warmup):
    """One load generator run over every member of `group`: its summary,
    plus the servers' CPU ms per 1,000 operations over the timed phase
    (between its first and last progress lines), as
    compare.bench_with_cpu measures it."""
    out = os.path.join(root, "%s-%s-%s-%d.out" % (generator.label.lower(), system, workload, clients))
    pids = [nd.proc.pid for nd in group.nodes]
    command = command_prefix + ["--servers", group.address, "--workload", workload, "--sessions", str(clients),
                                "--duration", str(duration), "--warmup", str(warmup)]
    status, stdout, lines, cpu_ms_per_kop, loadgen_ms_per_kop = run_sampled(
        command, pids, warmup + duration + RUN_GRACE_S)
    with open(out, "w") as f:
        f.write(" ".join(command) + "\n" + stdout + "".join(lines))
    if status != 0:
        raise RuntimeError("%s failed (%d): %s\n%s" % (
            generator.label, status, " ".join(command), "".join(lines)[-3000:]))
    summary = parse_summary(stdout)
    for key in ("TPS", "p50_us", "p99_us", "ops", "errors", "disconnects", "expiries"):
        if key not in summary:
            raise RuntimeError("%s printed no %r (see %s)" % (generator.label, key, out))
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


def print_results(generator, results, clients_list):
    print()
    compare.print_keel_vs_zookeeper("Load from %s (closed loop):" % generator.library, results, clients_list)
    print_ceiling(generator, results, clients_list)


def print_ceiling(generator, results, clients_list):
    """The load generator shares the cores with the servers, so it bounds
    Keel's TPS even if Keel's servers used no CPU at all: at most
    cores / (its CPU per op). Prints that bound over ZooKeeper's TPS: the
    best Keel/ZK TPS this machine can show under this load generator."""
    cores = os.cpu_count() or 1
    name = generator.label
    print("%s's own CPU ms per 1,000 ops, and the best Keel/ZK TPS a Keel using no CPU could reach "
          "beside it on these %d cores, %d x 1e6 / (%s us per op) / ZK TPS:" % (name, cores, cores, name))
    for workload in WORKLOADS:
        for clients in clients_list:
            z, k = results[("zookeeper", workload, clients)], results[("keel", workload, clients)]
            zl, kl, zt = z["loadgen_cpu_ms_per_kop"], k["loadgen_cpu_ms_per_kop"], float(z["tps"])
            if not (zl and kl) or float(kl) <= 0 or zt <= 0:
                print("  %-6s %4d: n/a" % (workload, clients))
                continue
            bound = cores * 1e6 / float(kl) / zt
            print("  %-6s %4d: %s %8.3f (ZK run) %8.3f (Keel run); ceiling %.2fx"
                  % (workload, clients, name, float(zl), float(kl), bound))
    print()


def main(generator, description):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--duration", type=int, default=int(os.environ.get("COMPARE_DURATION", "10")))
    ap.add_argument("--warmup", type=int, default=int(os.environ.get("COMPARE_WARMUP", "3")))
    ap.add_argument("--clients", default=os.environ.get("COMPARE_CLIENTS", "10,100,400"))
    args = ap.parse_args()
    clients_list = parse_clients(args.clients)
    if args.duration < 1 or args.warmup < 0:
        sys.exit("duration must be >= 1 s and warm-up >= 0 s")

    if not os.access(KEEL_BIN, os.X_OK):
        sys.exit("no Keel binary at %s (run: cargo build --release -p keel)" % KEEL_BIN)
    generator.check()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    os.makedirs(WORK, exist_ok=True)
    log("building %s (%s)" % (generator.label, generator.library))
    command_prefix = generator.prepare()
    root = tempfile.mkdtemp(prefix="%s-%s-" % (generator.work_prefix, time.strftime("%Y%m%dT%H%M%S")), dir=WORK)
    total_runs = len(WORKLOADS) * len(clients_list) * len(SYSTEMS)
    log("work dir %s; %ds warm-up + %ds timed per run, %d runs; %s"
        % (root, args.warmup, args.duration, total_runs, generator.describe))

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
                    row = loadgen_with_cpu(root, generator, command_prefix, system, group, workload, clients,
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

    csv_path = os.path.join(WORK, generator.csv_name)
    write_rows_csv(csv_path, rows_out)

    log("step 3/3: results")
    print_results(generator, results, clients_list)
    troubled = [r for r in rows_out if int(r["errors"]) or int(r["disconnects"]) or int(r["expiries"])]
    for r in troubled:
        print("WARNING: %s %s %s sessions: %s errors, %s disconnects, %s expiries (see %s)"
              % (r["system"], r["workload"], r["clients"], r["errors"], r["disconnects"], r["expiries"],
                 os.path.relpath(root, REPO)))
    print("raw CSV: %s" % os.path.relpath(csv_path, REPO))
    print("server logs and per-run output: %s" % os.path.relpath(root, REPO))
    if troubled:
        sys.exit(1)
