"""Rolling restart under write load: a 3-node Keel cluster, kazoo writers
on every node, each node restarted in turn (SIGTERM, then start; followers
first, the leader last, ROLLING_ROUNDS rounds). Per restart it measures the
longest write pause (no write acknowledged by any client; and the worst
single client, whose pause includes its reconnect when its node is the one
restarted), the reconnects per client, and at the end the acknowledged
writes lost and the sessions expired.

`make rolling-restart` runs this and prints the table;
tests/cluster/test_rolling_restart.py runs the same code and asserts the
targets. Standard library plus kazoo.

    PYTHONPATH=tests .venv/bin/python -m cluster.rolling
"""

import logging
import os
import sys
import threading
import time

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NodeExistsError

from harness.cluster import KeelCluster

WRITERS_PER_NODE = int(os.environ.get("ROLLING_WRITERS_PER_NODE", "2"))
ROUNDS = int(os.environ.get("ROLLING_ROUNDS", "2"))
# After a restarted node serves again and the cluster has a leader: time
# for the writers to settle before the next restart.
SETTLE_S = float(os.environ.get("ROLLING_SETTLE_S", "2.0"))
SESSION_TIMEOUT_S = 10.0
# The target: writes pause less than this per leader restart.
LEADER_RESTART_PAUSE_MAX_S = 0.2
# Writes acknowledged just before a stop that count toward its window.
WINDOW_LEAD_S = 1.0


class Writer(threading.Thread):
    """One kazoo session writing sequential creates as fast as they are
    acknowledged. A create whose outcome is unknown (ConnectionLoss) is
    sent again; NodeExists means the first attempt was applied."""

    def __init__(self, index, hosts):
        super().__init__(name="writer-%d" % index, daemon=True)
        self.index = index
        self.client = KazooClient(hosts=hosts, timeout=SESSION_TIMEOUT_S, randomize_hosts=False,
                                  connection_retry={"max_tries": -1, "delay": 0.05, "backoff": 1.5,
                                                    "max_delay": 1.0})
        self.acked = []  # (monotonic time, path)
        self.states = []  # (monotonic time, KazooState)
        self.errors = []  # (monotonic time, exception class name)
        self.stopping = threading.Event()
        self.client.add_listener(lambda state: self.states.append((time.monotonic(), state)))

    def begin(self):
        self.client.start(timeout=30)
        self.session_id = self.client.client_id[0]
        self.start()

    def run(self):
        i = 0
        while not self.stopping.is_set():
            path = "/rr/w%d-%08d" % (self.index, i)
            try:
                self.client.create(path, b"x")
            except NodeExistsError:
                pass  # an earlier attempt that lost its reply was applied
            except KazooException as e:
                self.errors.append((time.monotonic(), type(e).__name__))
                while not self.client.connected and not self.stopping.is_set():
                    time.sleep(0.005)
                continue
            self.acked.append((time.monotonic(), path))
            i += 1

    def finish(self):
        self.stopping.set()
        self.join(30)
        # Read before stop(): stopping a client closes its session (LOST).
        self.lost = sum(1 for _, s in self.states if s == KazooState.LOST)
        self.final_session_id = self.client.client_id[0] if self.client.client_id else None
        self.client.stop()
        self.client.close()

    def reconnects(self, start, end):
        """Connections regained within [start, end)."""
        return sum(1 for t, s in self.states if start <= t < end and s == KazooState.CONNECTED)



def longest_gap(times, start, end):
    """The longest time without an acknowledgement in [start, end], the
    edges included (a pause running past `end` counts up to it)."""
    inside = sorted(t for t in times if start <= t <= end)
    points = [start] + inside + [end]
    return max(b - a for a, b in zip(points, points[1:]))


def restart_order(cluster):
    """Followers first, the leader last (what an operator does)."""
    leader = cluster.leader(timeout=30)
    return [n for n in cluster.nodes if n is not leader] + [leader]


def measure(cluster, rounds=ROUNDS, writers_per_node=WRITERS_PER_NODE, out=print):
    """Runs the rolling restart on a started cluster; returns the report."""
    setup = KazooClient(hosts=cluster.address, timeout=SESSION_TIMEOUT_S)
    setup.start(timeout=30)
    setup.ensure_path("/rr")
    setup.stop()
    setup.close()
    writers = []
    for k in range(writers_per_node * len(cluster.nodes)):
        home = cluster.nodes[k % len(cluster.nodes)]
        hosts = [home] + [n for n in cluster.nodes if n is not home]
        writers.append(Writer(k, ",".join(n.address for n in hosts)))
    for w in writers:
        w.begin()
    time.sleep(SETTLE_S)
    restarts = []
    try:
        for _ in range(rounds):
            for node in restart_order(cluster):
                restarts.append(restart_one(cluster, node, writers, out))
    finally:
        for w in writers:
            w.finish()
    return summarize(cluster, writers, restarts, out)


def restart_one(cluster, node, writers, out):
    was_leader = cluster.leader(timeout=30) is node
    stopping = time.monotonic()
    code = node.stop(timeout=30)
    stopped = time.monotonic()
    node.start(timeout=60)
    serving = time.monotonic()
    cluster.wait_serving(60)
    new_leader = cluster.leader(timeout=30)
    time.sleep(SETTLE_S)
    end = time.monotonic()
    everyone = [t for w in writers for t, _ in w.acked]
    row = {
        "member": cluster.member_id(node),
        "role": "leader" if was_leader else "follower",
        "exit code": code,
        "stop ms": (stopped - stopping) * 1000,
        "serving after ms": (serving - stopping) * 1000,
        "new leader": cluster.member_id(new_leader),
        "pause all ms": longest_gap(everyone, stopping, end) * 1000,
        "pause worst client ms": max(longest_gap([t for t, _ in w.acked], stopping, end) for w in writers) * 1000,
        "reconnects max": max(w.reconnects(stopping, end) for w in writers),
        "writes retried": sum(1 for w in writers for t, _ in w.errors if stopping <= t < end),
        "clients reconnected": sum(1 for w in writers if w.reconnects(stopping, end) > 0),
    }
    out("restart of member %(member)d (%(role)s): stop %(stop ms).0f ms, serving again after "
        "%(serving after ms).0f ms, leader now %(new leader)d; longest write pause: all clients "
        "%(pause all ms).0f ms, worst client %(pause worst client ms).0f ms; %(clients reconnected)d "
        "clients reconnected, at most %(reconnects max)d time(s) each; %(writes retried)d writes retried "
        "(ConnectionLoss: outcome unknown to the client)" % row)
    return row


def summarize(cluster, writers, restarts, out):
    reader = KazooClient(hosts=cluster.address, timeout=SESSION_TIMEOUT_S)
    reader.start(timeout=30)
    reader.sync("/rr")
    present = set(reader.get_children("/rr"))
    reader.stop()
    reader.close()
    acked = [path for w in writers for _, path in w.acked]
    lost = [p for p in acked if p.rsplit("/", 1)[1] not in present]
    leader_pauses = [r["pause all ms"] for r in restarts if r["role"] == "leader"]
    report = {
        "restarts": restarts,
        "writes acknowledged": len(acked),
        "acknowledged writes lost": len(lost),
        "sessions expired": sum(w.lost for w in writers),
        "sessions changed": sum(1 for w in writers if w.final_session_id != w.session_id),
        "write errors (retried)": sum(len(w.errors) for w in writers),
        "leader restart pause max ms": max(leader_pauses) if leader_pauses else None,
        "reconnects per restart max": max(r["reconnects max"] for r in restarts),
    }
    out("%d writes acknowledged, %d lost; %d sessions expired; %d writes retried after a connection loss; "
        "longest pause per leader restart %s ms (target < %.0f ms)"
        % (report["writes acknowledged"], report["acknowledged writes lost"], report["sessions expired"],
           report["write errors (retried)"],
           "/".join("%.0f" % p for p in leader_pauses), LEADER_RESTART_PAUSE_MAX_S * 1000))
    return report


def main():
    # kazoo logs every dropped connection as a warning; the table says it.
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    cluster = KeelCluster(3, name="rolling", test_defaults=False, settings={"four_letter_words": ["*"]})
    try:
        cluster.start(timeout=60)
        print("rolling restart of a 3-node Keel cluster (%s), %d rounds, %d kazoo writers per node"
              % (cluster.address, ROUNDS, WRITERS_PER_NODE), flush=True)
        report = measure(cluster)
    finally:
        cluster.stop()
    ok = (report["acknowledged writes lost"] == 0 and report["sessions expired"] == 0
          and report["sessions changed"] == 0
          and report["reconnects per restart max"] <= 1
          and (report["leader restart pause max ms"] or 0) < LEADER_RESTART_PAUSE_MAX_S * 1000)
    if ok:
        cluster.cleanup()
    else:
        print("targets missed; logs kept in %s" % cluster.workdir)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
