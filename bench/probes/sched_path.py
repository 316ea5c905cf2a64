#!/usr/bin/env python3
"""A single client's create on a 3-node Keel, cut into steps by the
scheduler's own events (BENCHMARKS.md, "Results 2026-12-06, late
morning"). Starts the cluster of `bench/tls_split.py` (no TLS), runs
`keel bench --workload create --clients 1` against the leader, records
`sched:sched_wakeup` and `sched:sched_switch` on every CPU for 0.5 s
(`perf record -a`), and splits each create at the wake-ups of the threads
it passes through:

    request     the leader's client thread is woken (the bench's request)
    bell        the leader's Raft thread is woken (the proposal)
    append      the first follower's Raft thread is woken (the append)
    written     that thread is woken again (its log write is done)
    flushed     and again (its fdatasync is done)
    ack         the leader's Raft thread is woken after that (the ack)
    reply       the leader's client thread is woken for the last time
                before the bench is (the reply handed over)
    end         the bench is woken (the reply on its socket)

It prints each step's median, 25th and 75th percentile in µs. A
wake-up's waker is not used: a wake-up queued to another CPU is traced
there, under whatever task that CPU ran. The thread names are Keel's own
(`keel-raft`; the client thread keeps the process's name, so KEEL_BIN must
be a file named `keel`). Run it on a quiet machine.

    KEEL_BIN=/work/main/target/release/keel python3 bench/probes/sched_path.py
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
from harness.servers import KEEL_BIN  # noqa: E402

# perf script: "COMM TID [CPU] SECONDS: sched:EVENT: FIELDS"
LINE = re.compile(r"\s*\S.*?\s+(\d+)\s+\[\d+\]\s+([\d.]+):\s+sched:(sched_wakeup|sched_switch):\s*(.*)")
RECORD_SECONDS = 0.5
STEPS = ("request -> bell", "bell -> append", "append -> written", "written -> flushed", "flushed -> ack",
         "ack -> reply", "reply -> end", "request -> end")


def threads(pid):
    """{tid: comm} of a process."""
    found = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
            found[int(tid)] = f.read().strip()
    return found


def record(group, leader, path):
    """Runs the bench against the leader and records the scheduler's
    events in its middle; the roles of the threads seen."""
    load = subprocess.Popen([KEEL_BIN, "bench", "--servers", "127.0.0.1:%d" % leader.port, "--workload", "create",
                             "--clients", "1", "--duration", "6"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    time.sleep(3)
    roles = {}
    for tid, comm in threads(leader.proc.pid).items():
        if comm == "keel-raft":
            roles[tid] = "leader raft"
        elif comm == "keel":
            roles[tid] = "leader client"
    for node in group.nodes:
        if node is not leader:
            roles.update({tid: "follower raft" for tid, comm in threads(node.proc.pid).items()
                          if comm == "keel-raft"})
    roles.update({tid: "bench" for tid in threads(load.pid)})
    subprocess.run(["perf", "record", "-q", "-a", "-e", "sched:sched_wakeup", "-e", "sched:sched_switch",
                    "-o", path, "--", "sleep", str(RECORD_SECONDS)],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    summary = load.communicate()[0]
    return roles, [line for line in summary.splitlines() if "p50" in line]


def wakeups(path, roles):
    """[(µs, role woken, tid woken)] in time order."""
    text = subprocess.run(["perf", "script", "-i", path], capture_output=True, text=True, check=True).stdout
    found = []
    for line in text.splitlines():
        m = LINE.match(line)
        if not m or m.group(3) != "sched_wakeup":
            continue
        woken = re.search(r"pid=(\d+)", m.group(4))
        role = roles.get(int(woken.group(1))) if woken else None
        if role:
            found.append((float(m.group(2)) * 1e6, role, int(woken.group(1))))
    return found


def steps(events):
    """{step: [µs]} over the creates between two replies to the bench."""
    ends = [i for i, (_, role, _) in enumerate(events) if role == "bench"]
    found = {step: [] for step in STEPS}
    for a, b in zip(ends, ends[1:]):
        window = events[a + 1:b + 1]

        def first(test, after):
            return next(((t, tid) for t, r, tid in window if test(r, tid) and t > after), (None, None))
        request, _ = first(lambda r, _: r == "leader client", 0)
        bell, _ = first(lambda r, _: r == "leader raft", request or 0)
        append, follower = first(lambda r, _: r == "follower raft", bell or 0)
        written, _ = first(lambda _, tid: tid == follower, append or 0)
        flushed, _ = first(lambda _, tid: tid == follower, written or 0)
        ack, _ = first(lambda r, _: r == "leader raft", flushed or 0)
        replies = [t for t, r, _ in window if r == "leader client"]
        end = events[b][0]
        points = (request, bell, append, written, flushed, ack)
        if None in points or replies[-1] <= ack:
            continue  # a create whose steps were not all seen
        points += (replies[-1], end)
        for step, (start, stop) in zip(STEPS, zip(points, points[1:])):
            found[step].append(stop - start)
        found["request -> end"].append(end - request)
    return found


def main():
    root = tempfile.mkdtemp(prefix="sched-path-")
    group, _, _ = tls_split.start("none", root)
    try:
        leader = group.leader(timeout=30)
        path = os.path.join(root, "sched.data")
        roles, summary = record(group, leader, path)
    finally:
        compare.stop_all()
    print("keel bench:", "; ".join(line.strip() for line in summary))
    found = steps(wakeups(path, roles))
    for step in STEPS:
        values = sorted(found[step])
        if values:
            print("%-16s creates %5d  median %6.1f us  p25 %6.1f  p75 %6.1f" % (
                step, len(values), statistics.median(values), values[len(values) // 4],
                values[3 * len(values) // 4]))


if __name__ == "__main__":
    main()
