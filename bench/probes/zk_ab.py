#!/usr/bin/env python3
"""A/B of Keel builds under `keel bench` on a 3-node cluster (BENCHMARKS.md,
"Results 2026-11-27, morning"). Runs the binaries given in turn, ROUNDS
times, each on a fresh cluster of `bench/tls_split.py` (TLS: none, client,
peer or both; default none), and prints per run the TPS, the servers'
CPU per operation (user + system from /proc/PID/stat, setup included:
steadier than TPS on a noisy machine) and keel bench's own (getrusage of
the reaped bench process, its setup and cleanup included: it shares the
two cores with the servers), then each binary's medians.
SYSCALLS=1 also counts, for 3 s in the middle of each run, the servers'
sendto, recvfrom, epoll_wait, eventfd/pipe writes and futex calls per
operation (perf stat on the syscalls tracepoints).

    python3 bench/probes/zk_ab.py ROUNDS WORKLOAD CLIENTS SECONDS BIN_A [BIN_B ...]
    python3 bench/probes/zk_ab.py 4 get 100 6 /tmp/keel-before target/release/keel

Run it on a quiet machine: nothing else may build or test meanwhile.
"""
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..")); sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))
import compare  # noqa: E402
import tls_split  # noqa: E402
from harness import servers  # noqa: E402

SYSCALLS = ("sendto", "recvfrom", "epoll_wait", "write", "futex")
# How long into a run the syscall count starts, and how long it lasts.
SYSCALLS_AFTER_S = 2.0
SYSCALLS_FOR_S = 3


def count_syscalls(processes, extra_events=()):
    """{syscall: calls} of `processes` over SYSCALLS_FOR_S seconds; other
    perf events (`extra_events`, such as context-switches) under their own
    names."""
    events = ",".join(["syscalls:sys_enter_" + name for name in SYSCALLS] + list(extra_events))
    out = subprocess.run(["perf", "stat", "-x,", "-e", events, "-p", ",".join(str(p) for p in processes),
                          "--", "sleep", str(SYSCALLS_FOR_S)], capture_output=True, text=True)
    counts = {}
    for line in out.stderr.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[0].isdigit():
            counts[fields[2].rsplit("sys_enter_", 1)[-1]] = int(fields[0])
    return counts


def one_run(binary, workload, clients, seconds, mode):
    """(TPS, servers' CPU us per op, bench's CPU us per op, {syscall: calls per op} or None)."""
    servers.KEEL_BIN = binary
    root = tempfile.mkdtemp(prefix="zk-ab-")
    try:
        group, address, flags = tls_split.start(mode, root)
        processes = [node.proc.pid for node in group.nodes]
        before = compare.cpu_seconds(processes)
        bench = subprocess.Popen([binary, "bench", "--servers", address, "--workload", workload,
                                  "--clients", str(clients), "--duration", str(seconds)] + flags,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        calls = None
        if os.environ.get("SYSCALLS") == "1":
            time.sleep(SYSCALLS_AFTER_S)
            calls = count_syscalls(processes)
        # Only the bench ends (and is reaped) in this window: the servers
        # stop later, the syscall count's perf ended before it.
        reaped_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        text = bench.communicate()[0]
        reaped_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        bench_s = (reaped_after.ru_utime + reaped_after.ru_stime
                   - reaped_before.ru_utime - reaped_before.ru_stime)
        if bench.returncode != 0:
            raise RuntimeError("keel bench failed: %s" % text[-500:])
        used_s = compare.cpu_seconds(processes) - before
        tps = float(next(line for line in text.splitlines() if line.startswith("TPS")).split()[1])
        ops = tps * seconds
        per_op = {name: n / (tps * SYSCALLS_FOR_S) for name, n in calls.items()} if calls else None
        return tps, used_s * 1e6 / ops, bench_s * 1e6 / ops, per_op
    finally:
        compare.stop_all()
        compare._groups.clear()


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    try:
        rounds, workload, clients, seconds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    except ValueError:
        sys.exit("ROUNDS, CLIENTS and SECONDS are whole numbers\n\n" + __doc__)
    if min(rounds, clients, seconds) < 1:
        sys.exit("ROUNDS, CLIENTS and SECONDS must be at least 1")
    binaries = [os.path.abspath(b) for b in sys.argv[5:]]
    mode = os.environ.get("TLS", "none")
    if mode not in tls_split.MODES:
        sys.exit("TLS=%s: expected one of %s" % (mode, ", ".join(tls_split.MODES)))
    missing = [b for b in binaries if not os.access(b, os.X_OK)]
    if missing:
        sys.exit("not an executable: %s" % ", ".join(missing))
    results = {b: [] for b in binaries}
    for round_number in range(1, rounds + 1):
        for binary in binaries:
            tps, cpu_us, bench_us, calls = one_run(binary, workload, clients, seconds, mode)
            results[binary].append((tps, cpu_us, bench_us))
            extra = "" if calls is None else "  " + " ".join("%s %.2f" % kv for kv in sorted(calls.items()))
            print("round %d  %-40s TPS %8.0f  servers' CPU %5.1f us/op  bench %5.1f us/op%s" % (
                round_number, binary, tps, cpu_us, bench_us, extra), flush=True)
    print("medians (%s x%d, %d s, TLS %s, %d rounds):" % (workload, clients, seconds, mode, rounds))
    for binary, runs in results.items():
        print("  %-40s TPS %8.0f  servers' CPU %5.2f us/op  bench %5.2f us/op" % (
            binary, statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs),
            statistics.median(r[2] for r in runs)))


if __name__ == "__main__":
    main()
