#!/usr/bin/env python3
"""Single-client create latency on a 3-node Keel (BENCHMARKS.md, "Single-client
create: where the 0.3 ms goes"): `keel bench --workload create --clients 1`
against each node in turn (ROUNDS rounds of SECONDS each), the leader marked.
With TRACE=1, instead one run against the leader while `perf trace` records
every syscall of the three nodes and the bench for 0.3 s, and the median
time from the bench's send to each step on the leader is printed.

    python3 bench/probes/write_path.py
    TRACE=1 python3 bench/probes/write_path.py
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..")); sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))
import compare  # noqa: E402
import tls_split  # noqa: E402
from harness.servers import KEEL_BIN, run_bench  # noqa: E402

# "START ( DURATION ms): COMM/TID CALL(ARGS" (the duration is blank for a
# call that blocked and is continued on a later line)
TRACE_LINE = re.compile(r"\s*([\d.]+) \(\s*([\d.]*)\s*(?:ms)?\): (\S+)/(\d+) (\w+)\((.*)")


def bench(port, seconds):
    summary = run_bench("127.0.0.1:%d" % port, "create", 1, seconds)
    return {key: summary[key] for key in ("TPS", "p50 latency", "p99 latency")}


def traced(group, leader, path):
    load = subprocess.Popen([KEEL_BIN, "bench", "--servers", "127.0.0.1:%d" % leader.port, "--workload", "create",
                             "--clients", "1", "--duration", "6"], stdout=subprocess.PIPE, text=True)
    time.sleep(3)
    pids = ",".join(str(n.proc.pid) for n in group.nodes) + ",%d" % load.pid
    subprocess.run(["perf", "trace", "-T", "--pid", pids, "-o", path, "--", "sleep", "0.3"],
                   stderr=subprocess.DEVNULL)
    load.communicate()


def steps(path, leader_pid):
    """Median µs from the bench's send to: the leader's client thread reading
    it, the leader's Raft thread waking, the Raft thread's eventfd write (the
    reply handed to the client thread); and from that write to the client
    thread's send of the reply."""
    events = []
    for line in open(path):
        m = TRACE_LINE.match(line)
        if m:
            start_ms, _, comm, tid, call, rest = m.groups()
            fd = re.match(r"fd: (\d+)", rest)
            events.append((float(start_ms) * 1000, comm, int(tid), call, fd.group(1) if fd else ""))
    events.sort()
    threads = {}
    for _, comm, tid, _, _ in events:
        threads.setdefault(tid, comm)
    leader_threads = {t for t in threads if os.path.exists("/proc/%d/task/%d" % (leader_pid, t))}
    leader_raft = {t for t in leader_threads if threads[t] == "keel-raft"}
    # The client-port thread: the leader's thread that reads the bench's
    # requests (the runtime's own thread, not the process's main thread).
    client = {t for t in leader_threads - leader_raft if threads[t] == "keel"}
    sends = [i for i, e in enumerate(events) if e[1].startswith("keel-bench") and e[3] == "sendto"]
    found = {"client thread reads": [], "Raft thread wakes": [], "reply handed over (eventfd)": [],
             "client thread sends the reply, after the eventfd": []}
    for a, b in zip(sends, sends[1:]):
        window, t0 = events[a:b + 1], events[a][0]

        def first(test):
            return next((e[0] - t0 for e in window if test(e)), None)
        got = [first(lambda e: e[2] in client and e[3] == "recvfrom"),
               first(lambda e: e[2] in leader_raft),
               first(lambda e: e[2] in leader_raft and e[3] == "write"),
               first(lambda e: e[2] in client and e[3] == "sendto")]
        if None not in got:
            got[3] -= got[2]
            for key, value in zip(found, got):
                found[key].append(value)
    return {key: (len(v), round(statistics.median(v))) for key, v in found.items() if v}


def main():
    root = tempfile.mkdtemp(prefix="write-path-")
    group, _, _ = tls_split.start("none", root)
    try:
        leader = group.leader(timeout=30)
        if os.environ.get("TRACE"):
            path = os.path.join(root, "trace.txt")
            traced(group, leader, path)
            print("medians from the bench's send (operations, µs):", steps(path, leader.proc.pid))
            return
        for round_number in range(int(os.environ.get("ROUNDS", "2"))):
            for node in group.nodes:
                print(round_number + 1, node.name, "leader" if node is leader else "follower",
                      bench(node.port, int(os.environ.get("SECONDS", "5"))))
    finally:
        compare.stop_all()


if __name__ == "__main__":
    main()
