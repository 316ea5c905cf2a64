"""Three-node Keel clusters on loopback: writes through every node, kill -9
of the leader under a concurrent write load, restart and catch-up. Every
acknowledged write must be readable on every node afterwards, and the
replicas' tree digests (mntr keel_tree_digest) must converge."""

import os
import random
import threading
import time

import pytest
from kazoo.client import KazooClient

from conftest import report_summary
from harness import four_letter_word, mntr

KILLS = int(os.environ.get("KEEL_CLUSTER_KILLS", "3"))
WRITERS = 3


@pytest.fixture
def cluster(keel_cluster):
    return keel_cluster("node")


def client(hosts, timeout=10.0):
    c = KazooClient(hosts=hosts, timeout=timeout)
    c.start(timeout=15)
    return c


def test_writes_through_every_node_are_read_everywhere(cluster):
    clients = [client("127.0.0.1:%d" % n.port) for n in cluster.nodes]
    for i in range(60):
        clients[i % 3].create("/w%d" % i, b"%d" % i)
    clients[0].sync("/")
    for c in clients:
        c.sync("/")
        assert len([x for x in c.get_children("/") if x.startswith("w")]) == 60
    modes = sorted(four_letter_word(n.port, "srvr").decode().split("Mode: ")[1].split("\n")[0] for n in cluster.nodes)
    assert modes == ["follower", "follower", "leader"]
    cluster.wait_converged(timeout=15)
    for c in clients:
        c.stop()


def test_a_session_keeps_its_ephemeral_when_its_server_dies(cluster):
    leader = cluster.leader(timeout=10)
    home = next(n for n in cluster.nodes if n is not leader)
    others = [n for n in cluster.nodes if n is not home]
    c = KazooClient(hosts="127.0.0.1:%d,%s" % (home.port, ",".join("127.0.0.1:%d" % n.port for n in others)),
                    timeout=10.0, randomize_hosts=False)
    c.start(timeout=15)
    c.create("/mine", ephemeral=True)
    session = c.client_id[0]
    home.kill()
    observer = client(",".join("127.0.0.1:%d" % n.port for n in others))
    deadline = time.time() + 15
    while time.time() < deadline and not (c.connected and c.client_id[0] == session):
        time.sleep(0.05)
    assert c.connected and c.client_id[0] == session, "session did not move to another server"
    time.sleep(1.0)
    stat = observer.exists("/mine")
    assert stat is not None and stat.ephemeralOwner == session
    c.stop()
    observer.stop()


def test_kill_the_leader_under_load_loses_no_acknowledged_write(cluster):
    rng = random.Random(20261122)
    acked = {}
    lock = threading.Lock()
    stop = threading.Event()

    def writer(w):
        c = client(cluster.connect_string())
        i = 0
        while not stop.is_set():
            path = "/load/w%d-%d" % (w, i)
            try:
                c.create(path, b"x", makepath=True)
                with lock:
                    acked[path] = True
            except Exception:
                pass
            i += 1
        c.stop()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    [t.start() for t in threads]
    failovers = []
    elections = []
    try:
        for _ in range(KILLS):
            time.sleep(0.5 + rng.random())
            leader = cluster.leader(timeout=10)
            before = len(acked)
            t0 = time.time()
            leader.kill()
            new_leader = cluster.leader(timeout=15)
            elections.append(time.time() - t0)
            assert new_leader is not leader
            # Writes flow again: the count of acknowledged writes grows.
            while len(acked) <= before + WRITERS and time.time() - t0 < 20:
                time.sleep(0.01)
            failovers.append(time.time() - t0)
            leader.restart()
    finally:
        stop.set()
        [t.join() for t in threads]
    cluster.wait_converged(timeout=30)
    for n in cluster.nodes:
        c = client("127.0.0.1:%d" % n.port)
        c.sync("/")
        present = set("/load/" + x for x in c.get_children("/load"))
        missing = [p for p in acked if p not in present]
        assert not missing, "node %s lost %d acknowledged writes, e.g. %s" % (n.name, len(missing), missing[:5])
        c.stop()
    failovers.sort()
    elections.sort()
    report_summary("cluster kill -9: %d leader kills, %d acknowledged writes, 0 lost; new leader seen after "
                   "median %.2fs max %.2fs; writes resumed after median %.2fs max %.2fs"
                   % (KILLS, len(acked), elections[len(elections) // 2], elections[-1],
                      failovers[len(failovers) // 2], failovers[-1]))


def test_a_partitioned_node_takes_no_writes_and_converges_after_healing(keel_cluster):
    # every directed peer link i->j through its own TCP proxy (isolate/heal)
    cluster = keel_cluster("pnode", proxied=True)
    leader = cluster.leader(timeout=10)
    victim_index = next(i for i, n in enumerate(cluster.nodes) if n is not leader)
    victim = cluster.nodes[victim_index]
    majority = [n for n in cluster.nodes if n is not victim]
    on_victim = client("127.0.0.1:%d" % victim.port)
    on_majority = client(",".join("127.0.0.1:%d" % n.port for n in majority))
    on_victim.create("/before", b"1")
    cluster.isolate(victim_index)
    # The minority side acknowledges no write...
    result = on_victim.create_async("/minority", b"x")
    time.sleep(3.0)
    assert not (result.ready() and result.successful()), "the isolated node acknowledged a write"
    # ...while the majority keeps going.
    for i in range(50):
        on_majority.create("/majority%d" % i, b"y")
    cluster.heal(victim_index)
    digest = cluster.wait_converged(timeout=30)
    victim_view = client("127.0.0.1:%d" % victim.port)
    victim_view.sync("/")
    names = set(victim_view.get_children("/"))
    assert {"majority%d" % i for i in range(50)} <= names and "before" in names
    report_summary("partition: isolated follower acknowledged no write; after healing all 3 replicas "
                   "converged to digest %s" % digest[0])
    for c in (on_victim, on_majority, victim_view):
        try:
            c.stop()
        except Exception:
            pass


def test_the_preferred_member_leads_whenever_it_is_healthy(keel_cluster):
    cluster = keel_cluster("pref", preferred_leader=2)
    preferred = cluster.nodes[1]

    def leads_within(seconds):
        end = time.time() + seconds
        while time.time() < end:
            if mntr(preferred.port, timeout=2).get("zk_server_state") == "leader":
                return True
            time.sleep(0.05)
        return False

    assert leads_within(10), "node 2 never took the lead"
    preferred.kill()
    other = cluster.leader(timeout=10)  # an election is not blocked by its absence
    assert other is not preferred
    c = client(",".join("127.0.0.1:%d" % n.port for n in cluster.nodes if n is not preferred))
    c.create("/while-away", b"x")
    preferred.restart()
    assert leads_within(15), "node 2 did not take the lead back after catching up"
    c.stop()


def test_an_observer_serves_reads_forwards_writes_and_does_not_vote(keel_cluster):
    cluster = keel_cluster("obs", size=4, observers=[4])
    observer = cluster.nodes[3]
    mode = four_letter_word(observer.port, "srvr").decode().split("Mode: ")[1].split("\n")[0]
    assert mode == "observer"
    c = client("127.0.0.1:%d" % observer.port)
    c.create("/via-observer", b"o")
    assert c.get("/via-observer")[0] == b"o"
    # Three voters: losing one voter and the observer keeps a quorum...
    leader = cluster.leader(timeout=10)
    follower = next(n for n in cluster.nodes[:3] if n is not leader)
    follower.kill()
    observer.kill()
    survivor = client(",".join("127.0.0.1:%d" % n.port for n in cluster.nodes[:3] if n.running()))
    survivor.create("/quorum-of-two", b"")
    # ...and the observer catches up when it comes back.
    observer.restart()
    back = client("127.0.0.1:%d" % observer.port)
    back.sync("/")
    assert back.exists("/quorum-of-two") is not None
    for k in (c, survivor, back):
        try:
            k.stop()
        except Exception:
            pass
