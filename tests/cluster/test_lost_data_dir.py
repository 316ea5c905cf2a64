"""A member restarted on an emptied data directory (a disk replaced, a
directory wiped) or on an older copy of it (a backup put back) stops with a
clear error instead of rejoining under its old
id: it forgot the writes it acknowledged and its vote, so rejoining could let
a leader without a committed write be elected (README, "Membership changes":
replace such a member). Before, it either panicked inside raft-rs ("to_commit
N is out of range") or rejoined silently, by which of the leader's messages
reached it first (crates/consensus/src/core/lost_log.rs). The other two
members keep serving, and every acknowledged write stays readable. An
observer, which has no vote, resyncs instead."""

import os
import shutil
import time

from kazoo.client import KazooClient

# How long the emptied member may take to see the leader and stop.
STOP_WITHIN_S = 30
WRITES_BEFORE = 200
WRITES_WHILE_DOWN = 50


def client(hosts):
    c = KazooClient(hosts=hosts, timeout=10.0)
    c.start(timeout=15)
    return c


def empty(node):
    shutil.rmtree(node.data_dir)
    os.makedirs(node.data_dir)


def write(writer, prefix, count):
    for i in range(count):
        writer.create("/%s-%d" % (prefix, i), b"x")


def empty_under_writes(cluster, node, writer):
    """WRITES_BEFORE writes everywhere, then `node` killed and its data
    dir emptied, then WRITES_WHILE_DOWN more writes."""
    write(writer, "before", WRITES_BEFORE)
    cluster.wait_converged(timeout=30)
    node.kill()
    empty(node)
    write(writer, "down", WRITES_WHILE_DOWN)


def wait_exit(node, seconds):
    deadline = time.monotonic() + seconds
    while node.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    return node.proc.poll()


def test_a_member_restarted_on_an_emptied_data_dir_stops_and_the_others_serve(keel_cluster):
    cluster = keel_cluster("lost", snapshot_every_entries=100)
    leader = cluster.leader(timeout=15)
    victim = next(n for n in cluster.nodes if n is not leader)
    others = [n for n in cluster.nodes if n is not victim]
    writer = client(cluster.connect_string(others))
    empty_under_writes(cluster, victim, writer)

    for start in (1, 2):
        victim.start(wait=False)
        code = wait_exit(victim, STOP_WITHIN_S)
        log = victim.log_since_start()
        assert code == 1, "start %d: the emptied member did not stop (exit %r)\n%s" % (start, code, log[-3000:])
        assert "panicked" not in log, log[-3000:]
        assert "lost entries it had acknowledged" in log, log[-3000:]
        assert "counts this member as holding the Raft log up to entry" in log, log[-3000:]
        assert "add it back with --join" in log, log[-3000:]
    told = [n for n in others if "telling it, it stops" in n.log_text()]
    assert told, "the leader did not log the member it told"

    # The two others still make a quorum: writes go on, nothing is lost.
    write(writer, "after", WRITES_WHILE_DOWN)
    reader = client(cluster.connect_string([n for n in others if n is not leader] or others))
    reader.sync("/")
    names = set(reader.get_children("/"))
    for prefix, count in (("before", WRITES_BEFORE), ("down", WRITES_WHILE_DOWN), ("after", WRITES_WHILE_DOWN)):
        assert all("%s-%d" % (prefix, i) in names for i in range(count)), prefix
    assert all(n.running() for n in others)
    writer.stop()
    reader.stop()


def test_a_member_restored_from_an_older_copy_of_its_data_dir_stops(keel_cluster):
    """A backup put back: the member's log ends before what it acknowledged
    since the copy was taken, so it stops the same way."""
    cluster = keel_cluster("restored", snapshot_every_entries=100)
    leader = cluster.leader(timeout=15)
    victim = next(n for n in cluster.nodes if n is not leader)
    others = [n for n in cluster.nodes if n is not victim]
    writer = client(cluster.connect_string(others))
    write(writer, "old", WRITES_BEFORE)
    victim.kill()
    copy = os.path.join(victim.workdir, "copy")
    shutil.copytree(victim.data_dir, copy)
    victim.start(timeout=30)
    write(writer, "new", WRITES_BEFORE)
    cluster.wait_converged(timeout=30)
    victim.kill()
    shutil.rmtree(victim.data_dir)
    shutil.copytree(copy, victim.data_dir)

    victim.start(wait=False)
    code = wait_exit(victim, STOP_WITHIN_S)
    log = victim.log_since_start()
    assert code == 1, "the restored member did not stop (exit %r)\n%s" % (code, log[-3000:])
    assert "lost entries it had acknowledged" in log and "panicked" not in log, log[-3000:]
    writer.create("/after", b"x")
    assert all(n.running() for n in others)
    writer.stop()


def test_an_observer_restarted_on_an_emptied_data_dir_catches_up(keel_cluster):
    """An observer has no vote and its acknowledgements commit nothing:
    losing its log is harmless, so it resyncs, as a ZooKeeper observer
    does, instead of stopping (before, raft-rs panicked in some runs)."""
    cluster = keel_cluster("lostobs", size=4, observers=[4], snapshot_every_entries=100)
    cluster.leader(timeout=15)
    observer = cluster.nodes[3]
    others = cluster.nodes[:3]
    writer = client(cluster.connect_string(others))
    empty_under_writes(cluster, observer, writer)
    observer.start(timeout=30)
    cluster.wait_converged(timeout=30)
    log = observer.log_since_start()
    assert "panicked" not in log and "lost entries it had acknowledged" not in log, log[-3000:]
    reader = client(observer.address)
    reader.sync("/")
    names = set(reader.get_children("/"))
    assert all("before-%d" % i in names for i in range(WRITES_BEFORE))
    assert all("down-%d" % i in names for i in range(WRITES_WHILE_DOWN))
    writer.stop()
    reader.stop()
