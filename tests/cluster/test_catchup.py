"""A follower that was down catches up when it comes back:

(a) from the leader's log: 100,000 writes (keel bench creates, and its
    cleanup's deletes) pass while it is stopped;
(b) by snapshot install: with a small snapshot_every_entries the leader's log
    is compacted past the follower's last entry, so the leader sends its
    snapshot (~20 MB of 1 KiB values), which the peer transport streams in
    1 MiB chunks.

Both wait until the follower's tree digest and last zxid equal the leader's
and print how long that took."""

import os
import re
import subprocess
import time

import pytest

from conftest import report_summary

from harness import KEEL_BIN, mntr, raft_applied_index, run_bench, snapshot_files
from harness.peer_auth import peer_auth_settings

LOG_WRITES = int(os.environ.get("KEEL_CATCHUP_WRITES", "100000"))
SNAPSHOT_DATA_NODES = int(os.environ.get("KEEL_CATCHUP_SNAPSHOT_NODES", "20000"))
VALUE_BYTES = 1024
SNAPSHOT_EVERY_ENTRIES = 300
LOG_KEPT_BEHIND_SNAPSHOT = 1000  # crates/consensus (core.rs / driver.rs)
# The log test must not snapshot: its 100k creates and deletes fill ≈ 70 MB of
# log, past the default byte trigger (snapshot_every_log_bytes = 64 MiB).
NO_SNAPSHOT_LOG_BYTES = 1 << 40


def snapshot_indexes(node):
    return [index for index, _ in snapshot_files(node.data_dir)]


def restart_and_time_catch_up(cluster, follower, leader):
    target = mntr(leader.port)
    started = time.time()
    follower.start()
    serving = time.time() - started
    digest, zxid, _ = cluster.wait_converged(timeout=120, nodes=cluster.nodes)
    took = time.time() - started
    assert (digest, zxid) == (target["keel_tree_digest"], target["keel_last_zxid"]), \
        "the cluster moved on while the follower caught up: %r vs %r" % ((digest, zxid), target)
    return took, serving, zxid


def test_a_restarted_follower_catches_up_from_the_log(keel_cluster):
    cluster = keel_cluster("logcatchup", snapshot_every_log_bytes=NO_SNAPSHOT_LOG_BYTES)
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes if n is not leader)
    majority = [n for n in cluster.nodes if n is not follower]
    follower_index = raft_applied_index(follower.port)
    follower.stop()

    written, runs, tps = 0, 0, 0.0
    duration = 6
    while written < LOG_WRITES:
        bench = run_bench(cluster.connect_string(majority), "create", 100, duration)
        runs += 1
        created = int(bench["ops"]) - int(bench["errors"])
        tps = float(bench["TPS"])
        written += 2 * created  # its creates, and the cleanup's deletes
        duration = max(2, int((LOG_WRITES - written) / 2 / max(tps, 1.0)) + 1)
    behind = raft_applied_index(leader.port) - follower_index
    assert not any(snapshot_indexes(leader)), "the leader took a snapshot: the log test would not test the log"

    took, serving, zxid = restart_and_time_catch_up(cluster, follower, leader)
    log = follower.log_since_start()
    assert "installed snapshot from the leader" not in log, "the follower got a snapshot, not the log"
    line = ("catch-up from the log: %d writes (%d bench runs, %.0f TPS) = %d entries while a follower was "
            "down; after restart it served in %.2fs and matched the leader (zxid %s) after %.2fs"
            % (written, runs, tps, behind, serving, zxid, took))
    print("\n" + line)
    report_summary(line)


def write_data(servers, count, value_bytes):
    """`count` persistent nodes (parents included) of `value_bytes` each
    under /keel-populate: `keel bench --workload populate`, whose large
    multis write them in a fraction of a second (kazoo's single creates
    took 13 s of a loaded machine's CPU per run)."""
    command = [KEEL_BIN, "bench", "--servers", servers, "--workload", "populate",
               "--znodes", str(count), "--value-size", str(value_bytes)]
    done = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, "keel bench populate failed (%d):\n%s\n%s" % (
        done.returncode, done.stdout[-2000:], done.stderr[-2000:])


@pytest.mark.parametrize("peer_links", ["plain", "tls"])
def test_a_follower_behind_the_compacted_log_gets_the_snapshot_in_chunks(keel_cluster, tmp_path, peer_links):
    # Over peer TLS the chunks come through rustls records, read by the
    # follower's Raft thread without waiting (wait.rs, handshake.rs).
    settings, node_settings = peer_auth_settings(str(tmp_path), 3, tls=peer_links == "tls")
    cluster = keel_cluster("snapcatchup-" + peer_links, node_settings=node_settings,
                           snapshot_every_entries=SNAPSHOT_EVERY_ENTRIES, **settings)
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes if n is not leader)
    majority = [n for n in cluster.nodes if n is not follower]
    t0 = time.time()
    write_data("127.0.0.1:%d" % leader.port, SNAPSHOT_DATA_NODES, VALUE_BYTES)
    data_s = time.time() - t0
    cluster.wait_converged(timeout=60)
    follower_index = raft_applied_index(follower.port)
    follower.stop()

    # Many small entries (few clients: small group-commit batches) until the
    # leader's log no longer reaches back to the follower's last entry: the
    # log is compacted behind the OLDEST kept snapshot minus
    # LOG_KEPT_BEHIND_SNAPSHOT entries.
    def compacted_past_follower():
        kept = snapshot_indexes(leader)
        return len(kept) >= 2 and kept[0] - LOG_KEPT_BEHIND_SNAPSHOT > follower_index + 1

    runs = 0
    deadline = time.time() + 90
    while not compacted_past_follower():
        assert time.time() < deadline, "the leader's log was not compacted past index %d: snapshots %r, applied %d" % (
            follower_index, snapshot_indexes(leader), raft_applied_index(leader.port))
        run_bench(cluster.connect_string(majority), "create", 4, 3)
        runs += 1
    # The newest snapshot must be written out before the follower asks.
    time.sleep(0.5)
    state = mntr(leader.port)
    behind = int(state["keel_raft_applied_index"]) - follower_index
    snapshot_bytes = os.path.getsize(snapshot_files(leader.data_dir)[-1][1])

    took, serving, zxid = restart_and_time_catch_up(cluster, follower, leader)
    log = follower.log_since_start()
    assert "installed snapshot from the leader" in log, "the follower did not install the leader's snapshot"
    received = re.findall(r"snapshot received.*?\bbytes=(\d+).*?\bchunks=(\d+).*?\bms=(\d+)", log)
    assert received, "no 'snapshot received' line in the follower's log"
    bytes_, chunks, ms = map(int, received[-1])
    assert chunks > 1 and bytes_ >= SNAPSHOT_DATA_NODES * VALUE_BYTES * 0.9, (bytes_, chunks)
    sent = re.findall(r"snapshot sent.*?\bchunks=(\d+)", leader.log_since_start())
    assert sent, "no 'snapshot sent' line in the leader's log"
    line = ("catch-up by snapshot (%s peer links): %d x %d B nodes (%.1fs to write), snapshot_every_entries=%d, %d entries behind "
            "(%d bench runs); leader's snapshot file %.1f MB; follower received %d bytes in %d chunks (%d ms), "
            "installed it, served after %.2fs and matched the leader (zxid %s) after %.2fs"
            % (peer_links, SNAPSHOT_DATA_NODES, VALUE_BYTES, data_s, SNAPSHOT_EVERY_ENTRIES, behind, runs,
               snapshot_bytes / 1e6, bytes_, chunks, ms, serving, zxid, took))
    print("\n" + line)
    report_summary(line)
