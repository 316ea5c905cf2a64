#!/usr/bin/env python3
"""How many election rounds a failover of a 3-node Keel takes (BENCHMARKS.md,
"Split votes"): ROUNDS times, SIGSTOP the leader, wait for the other two to
agree on a new one, and count the terms the failover used (one: a clean
election; more: a split vote or a refused candidate, each costing another
election timeout); then SIGCONT the old leader and let it rejoin. Prints
each failover's terms and seconds and the counts. KEEL_BIN picks the keel
binary.

    KEEL_BIN=target/release/keel ROUNDS=40 python3 bench/probes/election_rounds.py
"""
import collections
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))
from harness.cluster import make_cluster  # noqa: E402
from harness.servers import mntr  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "40"))
SETTLE_S = 1.0


def term(node):
    return int(mntr(node.port).get("keel_raft_term", 0))


def main():
    group = make_cluster("keel", 3, settings={"four_letter_words": ["*"]}, test_defaults=False)
    group.start()
    terms, seconds = collections.Counter(), []
    try:
        for r in range(1, ROUNDS + 1):
            leader = group.leader(timeout=60)
            before = term(leader)
            stopped_at = time.monotonic()
            leader.pause()
            others = [n for n in group.nodes if n is not leader]
            while True:
                views = [mntr(n.port) for n in others]
                ids = {v.get("keel_raft_leader_id") for v in views}
                states = [v.get("zk_server_state") for v in views]
                if len(ids) == 1 and "leader" in states and None not in ids:
                    break
                time.sleep(0.01)
            took = time.monotonic() - stopped_at
            used = max(term(n) for n in others) - before
            terms[used] += 1
            seconds.append(took)
            print("%3d  terms %d  %.3f s" % (r, used, took), flush=True)
            leader.resume()
            group.leader(timeout=60)
            time.sleep(SETTLE_S)
    finally:
        group.stop()
        group.cleanup()
    print("failovers by terms used: %s; median %.3f s, max %.3f s" % (
        dict(sorted(terms.items())), statistics.median(seconds), max(seconds)))


if __name__ == "__main__":
    main()
