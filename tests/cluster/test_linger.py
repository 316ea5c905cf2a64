"""The write linger follows the load (crates/server/src/linger.rs): under
`keel bench`'s read-mostly mix (9 writes in 100 requests, 100 clients) the
node asks its Raft leader to linger over small batches (mntr
keel_write_linger_us > 0) and the batches grow; under a write-only load
(create) it never lingers, and it stops lingering when the load stops.

A single node: all clients on the one leader, whose own mix decides."""

import threading
import time

from conftest import report_summary

from harness import mntr, run_bench

SECONDS = 6
CLIENTS = 100
# linger.rs: WRITE_LINGER_US_MAX, LINGER_CHECK_MS.
LINGER_US_MAX = 2_000
CHECK_MS = 100


def lingers_seen(port, workload, done):
    """Distinct keel_write_linger_us values while `workload` runs."""
    seen = set()
    while not done.is_set():
        seen.add(int(mntr(port).get("keel_write_linger_us", "-1")))
        time.sleep(0.1)
    return seen


def run_watching(server, workload):
    done = threading.Event()
    result = {}
    bench = threading.Thread(target=lambda: result.update(
        run_bench(server.address, workload, CLIENTS, SECONDS)) or done.set())
    bench.start()
    try:
        seen = lingers_seen(server.port, workload, done)
    finally:
        done.set()
        bench.join()
    return seen, result


def batches(port):
    m = mntr(port)
    return int(m["keel_raft_proposals"]), int(m["keel_raft_batches"])


def test_a_read_mostly_load_lingers_and_a_write_only_load_never_does(servers):
    server = servers("keel")
    assert mntr(server.port)["keel_write_linger_us"] == "0"

    seen, created = run_watching(server, "create")
    assert seen <= {0}, "a write-only load lingered: %r" % seen

    proposals, entries = batches(server.port)
    seen, mixed = run_watching(server, "mix")
    proposals_after, entries_after = batches(server.port)
    lingered = sorted(v for v in seen if v > 0)
    assert lingered, "the mix never lingered: %r (%s TPS)" % (seen, mixed["TPS"])
    assert all(0 < v <= LINGER_US_MAX for v in lingered), seen
    per_entry = (proposals_after - proposals) / max(1, entries_after - entries)

    deadline = time.time() + 5
    while mntr(server.port)["keel_write_linger_us"] != "0":
        assert time.time() < deadline, "still lingering without a load"
        time.sleep(CHECK_MS / 1000)
    report_summary("write linger: mix x%d lingered %d-%d µs (%s TPS, %.1f proposals per entry); "
                   "create x%d never lingered (%s TPS)" % (CLIENTS, lingered[0], lingered[-1], mixed["TPS"],
                                                          per_entry, CLIENTS, created["TPS"]))
