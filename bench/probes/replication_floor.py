#!/usr/bin/env python3
"""Keel's single-client create beside the floor of a replicated write on
this machine (issue 12's single-client target; BENCHMARKS.md, "The floor
of a replicated write").

The floor (`crates/bench/examples/replication_floor.rs`) is one blocking
thread per node and nothing else: the leader sends the client's record to
its followers, appends it to its own log (a 4 KiB O_DIRECT block and an
fdatasync, as Keel's log does), waits for a quorum and replies. Each round
runs the floor, then `keel bench --workload create --clients 1` against a
1-node Keel and against the leader of a 3-node Keel, all on the same file
system, and prints them side by side with issue 12's target computed from
the floor's own fdatasync and round trip.

    python3 bench/probes/replication_floor.py
    ROUNDS=5 SECONDS=6 python3 bench/probes/replication_floor.py
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(HERE, "..")); sys.path.insert(0, os.path.join(REPO, "tests"))
import compare  # noqa: E402
from harness.cluster import make_cluster  # noqa: E402
from harness.servers import make_server  # noqa: E402

FLOOR_BIN = os.path.join(REPO, "target", "release", "examples", "replication_floor")
FLOOR_REQUESTS = 3000
COLUMNS = ("fsync_buffered", "fsync_direct", "loopback_rtt", "one_node", "three_nodes", "keel_1", "keel_3")


def build_floor():
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "keel-bench", "--example", "replication_floor"],
                   cwd=REPO, check=True)


def floor(directory):
    """{name: p50 µs} from one run of the floor program."""
    done = subprocess.run([FLOOR_BIN, directory, str(FLOOR_REQUESTS)], capture_output=True, text=True,
                          timeout=300)
    if done.returncode != 0:
        raise RuntimeError("replication_floor failed: %s" % done.stderr.strip())
    found = {}
    for line in done.stdout.splitlines():
        name, p50_us, _p99_us = line.split()
        found[name] = float(p50_us)
    return found


def keel_p50_us(root, group, tag, seconds):
    """keel bench create x1's p50 against the group's leader (its one node)."""
    row = compare.bench_with_cpu(root, "keel", group, "create", 1, seconds, tag, servers=group.leader_address)
    return float(row["p50_us"])


class Single:
    """One standalone Keel, shaped as compare.bench_with_cpu and stop_all
    take a group."""

    def __init__(self, root):
        self.server = make_server("keel", name="keel-1", workdir=os.path.join(root, "keel-1"),
                                  settings=compare.SETTINGS["keel"], test_defaults=False)
        self.nodes, self.bench_flags = [self.server], []

    def start(self, timeout):
        self.server.start(timeout=timeout)
        self.leader_address = self.server.address

    def stop(self, timeout):
        self.server.stop(timeout=timeout)

    def kill(self):
        self.server.kill()


def start(root, size):
    if size == 1:
        group = Single(root)
    else:
        group = make_cluster("keel", size, name="keel-%d" % size, workdir=os.path.join(root, "keel-%d" % size),
                             settings=compare.SETTINGS["keel"], test_defaults=False)
        group.bench_flags = []
    compare._groups.append(group)
    group.start(timeout=120)
    if size > 1:
        group.leader_address = compare.member_address(group, "leader")
    return group


def main():
    rounds = int(os.environ.get("ROUNDS", "3"))
    seconds = int(os.environ.get("SECONDS", "5"))
    build_floor()
    root = tempfile.mkdtemp(prefix="replication-floor-")
    rows = []
    try:
        one, three = start(root, 1), start(root, 3)
        for number in range(1, rounds + 1):
            row = floor(os.path.join(root, "floor"))
            row["keel_1"] = keel_p50_us(root, one, "r%d" % number, seconds)
            row["keel_3"] = keel_p50_us(root, three, "r%d" % number, seconds)
            rows.append(row)
            print("round %d: %s" % (number, "  ".join("%s %.1f" % (c, row[c]) for c in COLUMNS)), flush=True)
    finally:
        compare.stop_all()
        shutil.rmtree(root, ignore_errors=True)
    med = {c: statistics.median(r[c] for r in rows) for c in COLUMNS}
    target = 1.5 * (med["fsync_buffered"] + 2 * med["loopback_rtt"])
    print()
    print("p50 in us, medians of %d rounds (each round: the floor, then keel bench create x1 for %d s"
          " on each Keel)" % (rounds, seconds))
    print("  fdatasync after a 128-byte buffered append %.1f; after a 4 KiB O_DIRECT block %.1f;"
          " loopback round trip %.1f" % (med["fsync_buffered"], med["fsync_direct"], med["loopback_rtt"]))
    print("  | nodes | floor | Keel (create, on the leader) | Keel - floor | Keel / floor |")
    for label, floor_key, keel_key in (("1", "one_node", "keel_1"), ("3", "three_nodes", "keel_3")):
        print("  | %s | %.1f | %.1f | %.1f | %.2fx |" % (label, med[floor_key], med[keel_key],
                                                      med[keel_key] - med[floor_key], med[keel_key] / med[floor_key]))
    print("  issue 12's target, 1.5 x (fsync + 2 x round trip): %.1f us; the 3-node floor is %.2fx of it;"
          " Keel %s it" % (target, med["three_nodes"] / target, "meets" if med["keel_3"] <= target else "misses"))


if __name__ == "__main__":
    compare.run_main(main)
