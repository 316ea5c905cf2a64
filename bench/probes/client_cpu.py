#!/usr/bin/env python3
"""Keel's server CPU per operation under two clients (BENCHMARKS.md, "Keel's
CPU per create under Go's client"): on a fresh 3-node cluster of
`bench/tls_split.py` (plain) per run, `keel bench` and then Go's client
(`bench/work/goload`, built by `make compare-go`) run WORKLOAD with CLIENTS
sessions, ROUNDS times in turn. Each run prints the TPS, the three servers'
CPU per operation over 6 s in the middle of the run (user + system from
/proc/PID/stat), and with SYSCALLS=1 the servers' context switches and
system calls per operation over 3 s of it (perf stat).

    python3 bench/probes/client_cpu.py create 100 2
    SYSCALLS=1 python3 bench/probes/client_cpu.py create 100 2

Run it on a quiet machine: nothing else may build or test meanwhile.
"""
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE); sys.path.insert(0, os.path.join(HERE, "..")); sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))
import compare  # noqa: E402
import syscalls  # noqa: E402
import tls_split  # noqa: E402
import zk_ab  # noqa: E402
from syscalls import GOLOAD  # noqa: E402

# The load runs this long before the CPU window opens, and the window lasts
# this long; the load lasts past its end (Go's client: its own warm-up
# included).
WARMUP_S = 3
WINDOW_S = 6
LOAD_S = 10
GO_WARMUP_S = 2


def command(kind, address, workload, clients):
    if kind == "bench":
        return syscalls.load_command("bench", address, workload, clients, LOAD_S)
    return syscalls.load_command("go", address, workload, clients, LOAD_S - GO_WARMUP_S, GO_WARMUP_S)


def one_run(kind, workload, clients):
    """(TPS, servers' CPU us per op, {event: per op} or None)."""
    root = tempfile.mkdtemp(prefix="client-cpu-")
    try:
        group, address, _flags = tls_split.start("none", root)
        pids = [node.proc.pid for node in group.nodes]
        load = subprocess.Popen(command(kind, address, workload, clients), stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        time.sleep(WARMUP_S)
        before, started = compare.cpu_seconds(pids), time.time()
        calls = zk_ab.count_syscalls(pids, ("context-switches",)) if os.environ.get("SYSCALLS") == "1" else None
        time.sleep(max(0.0, WINDOW_S - (time.time() - started)))
        used_s, window_s = compare.cpu_seconds(pids) - before, time.time() - started
        text = load.communicate()[0]
        if load.returncode != 0:
            raise RuntimeError("%s failed: %s" % (kind, text[-500:]))
        tps = float(next(line for line in text.splitlines() if line.startswith("TPS")).split()[1])
        per_op = {name: n / (tps * zk_ab.SYSCALLS_FOR_S) for name, n in calls.items()} if calls else None
        return tps, used_s / window_s * 1e6 / tps, per_op
    finally:
        compare.stop_all()
        compare._groups.clear()


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    try:
        workload, clients, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    except ValueError:
        sys.exit("CLIENTS and ROUNDS are whole numbers\n\n" + __doc__)
    if min(clients, rounds) < 1:
        sys.exit("CLIENTS and ROUNDS must be at least 1")
    if not os.access(GOLOAD, os.X_OK):
        sys.exit("no %s: run `make compare-go` (or bench/go_compare.py) once to build it" % GOLOAD)
    for _ in range(rounds):
        for kind in ("bench", "go"):
            tps, cpu_us, calls = one_run(kind, workload, clients)
            extra = "" if calls is None else "  " + " ".join("%s %.2f" % kv for kv in sorted(calls.items()))
            print("%-5s %s x%d  TPS %8.0f  servers' CPU %5.1f us/op%s" % (
                kind, workload, clients, tps, cpu_us, extra), flush=True)


if __name__ == "__main__":
    main()
