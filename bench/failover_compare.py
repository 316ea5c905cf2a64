#!/usr/bin/env python3
"""How long a leader's failure stops writes and reads: a 3-member Apache
ZooKeeper 3.8 ensemble against a 3-node Keel, in one run
(`make compare-failover`).

Each round fails the group's leader while two clients run closed loops on
one other member: a writer (setData of one znode) and a reader (getData of
it). Two faults, each in every round:

- kill: kill -9 of the leader's process (its sockets close at once), then
  it starts again;
- stop: SIGSTOP of the leader (a hung process or host: its sockets stay
  open, nothing answers), then SIGCONT.

The gap of a loop is the time from the fault to the end of its first
request that started after the fault and succeeded. After each fault the
member comes back and every member catches up before the next. Both systems run with
their own defaults (ZooKeeper: tickTime 2000 ms, fsync on; Keel: its
defaults), fsync on, on loopback, systems alternating round by round.
Prints every round and the medians side by side, with their ratio.

    python3 bench/failover_compare.py
    FAILOVER_ROUNDS=7 python3 bench/failover_compare.py
"""
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from kazoo.client import KazooClient  # noqa: E402
from harness.cluster import make_cluster  # noqa: E402

SYSTEMS = ("zookeeper", "keel")
FAULTS = ("kill", "stop")
ROUNDS = int(os.environ.get("FAILOVER_ROUNDS", "5"))
# The clients' session timeout: longer than any election, so a round
# measures the election and the clients' reconnection, never a new session.
SESSION_TIMEOUT_S = 30
# How long a loop may take to get a request through after the kill.
GAP_LIMIT_S = 60
# Between rounds: the restarted member catches up, the clients reconnect.
SETTLE_S = 2.0
ZNODE = "/failover-probe"
SETTINGS = {"four_letter_words": ["*"]}


class Loop(threading.Thread):
    """A closed loop of one request kind on one member; `first_after(t)`
    is the finish time of the first success that started after t."""

    def __init__(self, member, request):
        super().__init__(daemon=True)
        self.zk = KazooClient(hosts=member.address, timeout=SESSION_TIMEOUT_S, connection_retry={
            "max_tries": -1, "delay": 0.01, "backoff": 1, "max_delay": 0.05})
        self.zk.start(timeout=30)
        self.request = request
        self.successes = []
        self.lock = threading.Lock()
        self.running = True

    def run(self):
        while self.running:
            started = time.monotonic()
            try:
                self.request(self.zk)
            except Exception:
                time.sleep(0.005)
                continue
            with self.lock:
                self.successes.append((started, time.monotonic()))

    def first_after(self, t):
        with self.lock:
            return next((done for started, done in self.successes if started >= t), None)

    def stop(self):
        self.running = False
        self.join(10)
        self.zk.stop()
        self.zk.close()


def write(zk):
    zk.set(ZNODE, b"x" * 100)


def read(zk):
    zk.get(ZNODE)


def one_round(group, fault):
    """(write gap s, read gap s) of one `fault` of the leader."""
    leader = group.leader(timeout=60)
    survivor = next(n for n in group.nodes if n is not leader)
    loops = [Loop(survivor, write), Loop(survivor, read)]
    for loop in loops:
        loop.start()
    time.sleep(1.0)
    failed_at = time.monotonic()
    if fault == "kill":
        leader.kill()
    else:
        leader.pause()
    deadline = failed_at + GAP_LIMIT_S
    gaps = [None, None]
    while None in gaps and time.monotonic() < deadline:
        gaps = [loop.first_after(failed_at) for loop in loops]
        time.sleep(0.01)
    for loop in loops:
        loop.stop()
    if fault == "kill":
        leader.start()
    else:
        leader.resume()
    group.leader(timeout=60)
    group.wait_replicated(timeout=60)
    time.sleep(SETTLE_S)
    return tuple(None if g is None else g - failed_at for g in gaps)


def start(kind):
    group = make_cluster(kind, 3, settings=SETTINGS, test_defaults=False)
    group.start()
    zk = KazooClient(hosts=group.address, timeout=SESSION_TIMEOUT_S)
    zk.start(timeout=30)
    zk.ensure_path(ZNODE)
    zk.stop()
    zk.close()
    return group


def show(value):
    return "   none" if value is None else "%7.3f" % value


def main():
    groups = {kind: start(kind) for kind in SYSTEMS}
    gaps = {(fault, kind): [] for fault in FAULTS for kind in SYSTEMS}
    try:
        print("round  fault  system      write gap s  read gap s", flush=True)
        for r in range(1, ROUNDS + 1):
            for fault in FAULTS:
                for kind in SYSTEMS:
                    gap = one_round(groups[kind], fault)
                    gaps[fault, kind].append(gap)
                    print("%5d  %-5s  %-10s  %s      %s" % (r, fault, kind, show(gap[0]), show(gap[1])), flush=True)
    finally:
        for group in groups.values():
            group.stop()
            group.cleanup()
    print("\nmedians of %d rounds (a gap never closed counts as %d s):" % (ROUNDS, GAP_LIMIT_S))
    print("fault  gap      zookeeper       keel  keel/zookeeper")
    for fault in FAULTS:
        for i, name in enumerate(("write", "read")):
            zk, keel = (statistics.median(GAP_LIMIT_S if g[i] is None else g[i] for g in gaps[fault, kind])
                        for kind in SYSTEMS)
            print("%-5s  %-5s  %7.3f s  %7.3f s  %5.2fx" % (fault, name, zk, keel, keel / zk if zk else float("inf")))


if __name__ == "__main__":
    main()
