"""Read-only mode (`read_only_when_partitioned`, ZooKeeper's
readonlymode.enabled): a member that has known no leader for max(2 s, tick)
serves clients that connected with the readOnly flag on local sessions,
answers writes NotReadOnly, says `ro` to `isro`, and moves its clients back
to read-write once the quorum is back.

The same scenario runs against a Keel cluster and against a ZooKeeper 3.8
ensemble started with -Dreadonlymode.enabled=true and localSessionsEnabled
(ZooKeeper 3.8 creates no session at all on a read-only server without it:
its ReadOnlyModeTest.testGlobalSessionInRO; kazoo's own read-only test turns
it on too), and the observations are compared. Keel's documented differences
(README, "Read-only mode") are not part of the comparison.
"""

import threading
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NotReadOnlyCallError
from kazoo.protocol.states import KeeperState
from kazoo.security import make_digest_acl

from conftest import report_summary, require_keel
from harness import four_letter_word
from harness.cluster import KeelCluster, ZooKeeperEnsemble

# ZooKeeper's grace period (QuorumPeer: max(2000 ms, tickTime)) after the
# election timeout; a loaded test box gets the rest.
READ_ONLY_WITHIN_S = 20.0
# The quorum back (the others restarted, an election, a catch-up) until
# the read-only client has a read-write session.
READ_WRITE_WITHIN_S = 60.0
SESSION_TIMEOUT_S = 10.0
# A client that keeps retrying its connection at most 0.5 s apart.
RETRY_OFTEN = {"max_tries": -1, "delay": 0.1, "max_delay": 0.5}


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("not within %.0f s: %s" % (timeout, what))


def srvr_mode(port):
    text = four_letter_word(port, "srvr").decode("utf-8", "replace")
    for line in text.splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return text.strip()


def error_of(call):
    """The exception class a call raises, or "ok"."""
    try:
        call()
        return "ok"
    except Exception as e:  # noqa: BLE001 - the class is the observation
        return type(e).__name__


def refused(hosts, read_only=False, wait_s=4.0):
    """Whether a session cannot be had from `hosts` within `wait_s`."""
    c = KazooClient(hosts=hosts, read_only=read_only, timeout=SESSION_TIMEOUT_S,
                    connection_retry=RETRY_OFTEN)
    try:
        c.start(timeout=wait_s)
        return False
    except Exception:  # noqa: BLE001 - a timeout is the expected refusal
        return True
    finally:
        c.stop()
        c.close()


def fill(hosts):
    """A small tree with an ACL the read-only client must respect."""
    c = KazooClient(hosts=hosts, timeout=SESSION_TIMEOUT_S)
    c.start(timeout=30)
    c.ensure_path("/ro")
    c.set("/ro", b"before")
    for i in range(3):
        c.create("/ro/c%d" % i, b"%d" % i)
    c.create("/ro/secret", b"s", acl=[make_digest_acl("alice", "pw", all=True)])
    c.stop()
    c.close()


def read_only_scenario(group, survivor, cut, restore, held_survives=True):
    """`cut()` leaves `survivor` without a quorum, `restore()` brings it
    back. Returns (observations, timings). held_survives: no quorum expired
    sessions meanwhile (a majority that kept running expires the held one
    after its timeout)."""
    obs, timings = {}, {}
    fill(group.address)
    group.wait_replicated(timeout=15)
    # A global session held on the survivor: closed when it goes looking,
    # never renewed while it is read-only, resumed once the quorum is back.
    # Its retries stay 0.5 s apart, as the read-only client's: kazoo's
    # default doubles them without bound, and after a long outage on a
    # loaded box the first retry after the restore came later than the
    # session timeout, which expired it on ZooKeeper (seen once, on 4
    # test processes).
    held = KazooClient(hosts=survivor.address, timeout=SESSION_TIMEOUT_S, connection_retry=RETRY_OFTEN)
    held.start(timeout=30)
    held_session = held.client_id[0]
    # An ephemeral makes it global on ZooKeeper too (with
    # localSessionsEnabled a session starts local, on its server only).
    held.create("/ro/held", b"", ephemeral=True)
    group.wait_replicated(timeout=15)
    cut_at = time.monotonic()
    cut()
    ro = KazooClient(hosts=survivor.address, read_only=True, timeout=SESSION_TIMEOUT_S,
                     connection_retry=RETRY_OFTEN)
    states = []
    ro.add_listener(lambda state: states.append((time.monotonic(), state, ro.client_state)))
    ro.start(timeout=READ_ONLY_WITHIN_S + 10)
    wait_for(lambda: ro.client_state == KeeperState.CONNECTED_RO, READ_ONLY_WITHIN_S,
             "a read-only session on the survivor")
    timings["read-only after the cut"] = time.monotonic() - cut_at
    ro_session = ro.client_id[0]
    obs["client state"] = ro.client_state
    obs["isro"] = four_letter_word(survivor.port, "isro").decode()
    obs["srvr Mode"] = srvr_mode(survivor.port)
    obs["get /ro"] = ro.get("/ro")[0]
    obs["children of /ro"] = sorted(ro.get_children("/ro"))
    obs["exists /ro/c1"] = ro.exists("/ro/c1") is not None
    obs["get /ro/secret without auth"] = error_of(lambda: ro.get("/ro/secret"))
    obs["create"] = error_of(lambda: ro.create("/ro/new", b"x"))
    obs["set"] = error_of(lambda: ro.set("/ro", b"after"))
    obs["delete"] = error_of(lambda: ro.delete("/ro/c0"))
    obs["sync"] = error_of(lambda: ro.sync("/ro"))
    obs["ephemeral"] = error_of(lambda: ro.create("/ro/e", b"", ephemeral=True))

    def multi():
        t = ro.transaction()
        t.create("/ro/m", b"")
        t.commit()
    obs["multi"] = error_of(multi)
    obs["get /ro after the refused writes"] = ro.get("/ro")[0]
    obs["a client without the readOnly flag is refused"] = refused(survivor.address)
    obs["the held global session stays disconnected"] = not held.connected
    obs["a second read-only client connects"] = not refused(survivor.address, read_only=True, wait_s=10)
    restore_at = time.monotonic()
    restore()
    wait_for(lambda: ro.client_state == KeeperState.CONNECTED, READ_WRITE_WITHIN_S,
             "the read-only client back read-write")
    timings["read-write after the restore"] = time.monotonic() - restore_at
    obs["client state after the restore"] = ro.client_state
    obs["a new session after the restore"] = ro.client_id[0] != ro_session
    ro.create("/ro/after", b"written")
    obs["create after the restore"] = ro.get("/ro/after")[0]
    obs["isro after the restore"] = four_letter_word(survivor.port, "isro").decode()
    if held_survives:
        wait_for(lambda: held.connected, READ_WRITE_WITHIN_S, "the held session reconnected")
        obs["the held session resumed"] = held.client_id[0] == held_session
    obs["kazoo states"] = [state for _, state, _ in states]
    for c in (ro, held):
        c.stop()
        c.close()
    return obs, timings


# What both servers must show (Keel's are compared with ZooKeeper's in the
# last test; each test also checks these itself).
EXPECTED = {
    "client state": KeeperState.CONNECTED_RO,
    "isro": "ro",
    "srvr Mode": "read-only",
    "get /ro": b"before",
    "children of /ro": ["c0", "c1", "c2", "held", "secret"],
    "exists /ro/c1": True,
    "get /ro/secret without auth": "NoAuthError",
    "create": "NotReadOnlyCallError",
    "set": "NotReadOnlyCallError",
    "delete": "NotReadOnlyCallError",
    "sync": "NotReadOnlyCallError",
    "ephemeral": "NotReadOnlyCallError",
    "multi": "NotReadOnlyCallError",
    "get /ro after the refused writes": b"before",
    "a client without the readOnly flag is refused": True,
    "the held global session stays disconnected": True,
    "a second read-only client connects": True,
    "client state after the restore": KeeperState.CONNECTED,
    "a new session after the restore": True,
    "create after the restore": b"written",
    "isro after the restore": "rw",
    "the held session resumed": True,
}
assert NoAuthError.__name__ == "NoAuthError" and NotReadOnlyCallError.__name__ == "NotReadOnlyCallError"


def check(obs, name, leave_out=()):
    wrong = {k: (obs.get(k), v) for k, v in EXPECTED.items() if obs.get(k) != v and k not in leave_out}
    assert not wrong, "%s: (seen, expected) %r\nall: %r" % (name, wrong, obs)


def kill_all(nodes):
    threads = [threading.Thread(target=n.kill) for n in nodes]
    [t.start() for t in threads]
    [t.join() for t in threads]


RESULTS = {}


def run_keel_killed(keel_cluster, which):
    cluster = keel_cluster("ro-" + which, read_only_when_partitioned=True)
    leader = cluster.leader(timeout=15)
    survivor = leader if which == "leader" else next(n for n in cluster.nodes if n is not leader)
    others = [n for n in cluster.nodes if n is not survivor]
    obs, timings = read_only_scenario(cluster, survivor, lambda: kill_all(others),
                                      lambda: cluster.start(timeout=60))
    log = survivor.log_text()
    assert "read-only mode" in log and "read-only mode ends" in log, survivor.log_tail(60)
    return obs, timings


@pytest.mark.parametrize("which", ["follower", "leader"])
def test_keel_survivor_of_two_killed_serves_read_only(keel_cluster, which):
    obs, timings = run_keel_killed(keel_cluster, which)
    RESULTS["keel-" + which] = obs
    report_summary("read-only (keel, the %s survives two kill -9): read-only after %.1f s, "
                   "read-write %.1f s after the restart; kazoo states %s"
                   % (which, timings["read-only after the cut"], timings["read-write after the restore"],
                      " ".join(obs["kazoo states"])))
    check(obs, "keel")


@pytest.mark.parametrize("which", ["follower", "leader"])
def test_keel_isolated_member_serves_read_only_until_healed(keel_cluster, which):
    """A member cut off by the proxies (the others keep a quorum and go on
    writing): its read-only clients read the state it had, then come back
    read-write and see what the majority wrote meanwhile."""
    cluster = keel_cluster("roi-" + which, proxied=True, read_only_when_partitioned=True)
    leader = cluster.leader(timeout=15)
    index = next(i for i, n in enumerate(cluster.nodes) if (n is leader) == (which == "leader"))
    isolated = cluster.nodes[index]
    majority = [n for n in cluster.nodes if n is not isolated]

    def cut():
        cluster.isolate(index)

    def heal():
        w = KazooClient(hosts=",".join(n.address for n in majority), timeout=SESSION_TIMEOUT_S)
        w.start(timeout=30)
        w.set("/ro/c2", b"written by the majority")
        w.stop()
        w.close()
        assert four_letter_word(isolated.port, "isro") == b"ro", "still read-only before the heal"
        cluster.heal(index)

    obs, timings = read_only_scenario(cluster, isolated, cut, heal, held_survives=False)
    report_summary("read-only (keel, an isolated %s): read-only after %.1f s, read-write %.1f s after the heal"
                   % (which, timings["read-only after the cut"], timings["read-write after the restore"]))
    check(obs, "keel isolated " + which, leave_out=("the held session resumed",))
    c = KazooClient(hosts=isolated.address, timeout=SESSION_TIMEOUT_S)
    c.start(timeout=30)
    assert c.get("/ro/c2")[0] == b"written by the majority"
    c.stop()
    c.close()
    cluster.wait_converged(timeout=30)


def test_zookeeper_ensemble_read_only_mode_matches_keel(keel_cluster, request):
    """The same scenario against ZooKeeper 3.8 (the two nodes killed, the
    leader survives... whichever ZooKeeper elected: the survivor is its
    first follower) and Keel's follower run above: the observations are
    equal."""
    ensemble = ZooKeeperEnsemble(3, name="zk-ro", settings={
        "extra_system_properties": {"readonlymode.enabled": "true"},
        "zk_config_lines": ["localSessionsEnabled=true", "localSessionsUpgradingEnabled=true"],
    })
    failed = True
    try:
        ensemble.start(timeout=90)
        states = ensemble.states()
        survivor = ensemble.nodes[states.index("follower")]
        others = [n for n in ensemble.nodes if n is not survivor]
        obs, timings = read_only_scenario(ensemble, survivor, lambda: kill_all(others),
                                          lambda: ensemble.start(timeout=90))
        failed = False
    finally:
        ensemble.kill()
        if failed:
            import sys
            sys.stderr.write(ensemble.log_tail(200) + "\n")
        else:
            ensemble.cleanup()
    report_summary("read-only (zookeeper 3.8, a follower survives two kill -9): read-only after %.1f s, "
                   "read-write %.1f s after the restart; kazoo states %s"
                   % (timings["read-only after the cut"], timings["read-write after the restore"],
                      " ".join(obs["kazoo states"])))
    check(obs, "zookeeper")
    keel = RESULTS.get("keel-follower")
    if keel is None:
        require_keel()
        keel, _ = run_keel_killed(keel_cluster, "follower")
    different = {k: (keel[k], obs[k]) for k in EXPECTED if keel[k] != obs[k]}
    assert not different, "keel vs zookeeper: %r" % different
