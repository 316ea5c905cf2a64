"""Membership changes through ZooKeeper's reconfig API on a running Keel
cluster, under a write load: grow 3 -> 5 and shrink back with zkCli.sh
(`reconfig -add/-remove`, authenticated as super) and with kazoo
(`client.reconfig`; one new member asks to join by itself with
`join_auth_file`), replace a killed member with a fresh one in one reconfig,
move an observer in and out, start a member added while it was down after
the whole cluster restarted. After each
step: no acknowledged write lost, every replica's digest equal
(wait_converged). ZooKeeper 3.8's error codes for a misused reconfig are
compared with a real ZooKeeper ensemble.

The writer's connect string lists the three first members only: a client
whose list names old members keeps working."""

import os
import subprocess
import threading
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import (BadArgumentsError, BadVersionError, NewConfigNoQuorumError, NoAuthError,
                              ZookeeperError)

from conftest import _test_failed, report_summary, require_keel
from harness import SUPER_PASSWORD, ZKCLI
from harness.cluster import make_cluster
from harness.servers import KeelServer, free_port, four_letter_word, mntr

# A joining node gets a snapshot and catches up in well under a second here;
# the change itself is a few log entries a tick apart.
CHANGE_TIMEOUT_S = 60
SUPER_AUTH = [("digest", "super:" + SUPER_PASSWORD)]


def super_client(hosts):
    client = KazooClient(hosts=hosts, auth_data=SUPER_AUTH, timeout=10.0)
    client.start(timeout=20)
    return client


def config_of(client):
    """(text, version) of /zookeeper/config as a client reads it."""
    data, _ = client.get("/zookeeper/config")
    text = data.decode()
    return text, int(text.rsplit("version=", 1)[1], 16)


def member_ids(text):
    return sorted(int(line.split("=", 1)[0][len("server."):]) for line in text.splitlines()
                  if line.startswith("server."))


def server_string(node, peer_port, role="participant"):
    return "server.%d=127.0.0.1:%d:%d:%s;127.0.0.1:%d" % (
        int(node.settings["server_id"]), peer_port, peer_port + 1, role, node.port)


class Writer:
    """Creates /load/w<i> in a loop through the given connect string and
    remembers every acknowledged path."""

    def __init__(self, hosts):
        self.client = KazooClient(hosts=hosts, timeout=10.0)
        self.client.start(timeout=20)
        self.client.ensure_path("/load")
        self.acked = []
        self.failed = 0
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        i = 0
        while not self.stop_event.is_set():
            path = "/load/w%07d" % i
            i += 1
            try:
                self.client.create(path, b"v")
                self.acked.append(path)
            except Exception:  # noqa: BLE001 - retried with the next path; counted
                self.failed += 1
                time.sleep(0.05)
            time.sleep(0.002)

    def stop(self):
        self.stop_event.set()
        self.thread.join(30)
        self.client.stop()
        self.client.close()


def check_step(cluster, members, writer, what):
    """Every member has every acknowledged write, with equal digests."""
    acked = list(writer.acked)
    converged = cluster.wait_converged(timeout=CHANGE_TIMEOUT_S, nodes=members)
    reader = KazooClient(hosts=",".join(n.address for n in members), timeout=10.0)
    reader.start(timeout=20)
    try:
        reader.sync("/load")
        present = set(reader.get_children("/load"))
    finally:
        reader.stop()
        reader.close()
    lost = [p for p in acked if p.rsplit("/", 1)[1] not in present]
    assert not lost, "%s: %d acknowledged writes lost, first %s" % (what, len(lost), lost[:3])
    report_summary("reconfig: %s: %d acknowledged writes all present, %d replicas at digest %s"
                   % (what, len(acked), len(members), converged.digest))


def wait_for(condition, what, timeout=CHANGE_TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("%s not within %.0f s" % (what, timeout))


def serving_state(node):
    return mntr(node.port, 2.0).get("zk_server_state")


@pytest.fixture
def joiners(request):
    """joiners(cluster, member_id, later=False, **settings) -> a started
    KeelServer that joins `cluster` (`join`, its own `peer_address`); not
    waited for (it serves once added); later=True: not started yet (the
    test starts it). Stopped at teardown, logs printed on failure."""
    started = []

    def start(cluster, member_id, later=False, **settings):
        peer_port = free_port()
        node = KeelServer(name="%s-n%d" % (cluster.name, member_id),
                          workdir=os.path.join(cluster.workdir, "node%d" % member_id),
                          settings=dict(settings, server_id=member_id, join=cluster.address,
                                        peer_address="127.0.0.1:%d" % peer_port, reconfig_enabled=True))
        node.peer_port = peer_port
        started.append(node)
        if not later:
            node.start(timeout=60, wait=False)
        return node

    yield start
    failed = _test_failed(request)
    for node in started:
        try:
            node.stop()
        except Exception:  # noqa: BLE001
            node.kill()
        if failed:
            print(node.log_tail(150))


def zkcli(hosts, *commands):
    """zkCli.sh with `commands` on stdin after `addauth digest super:...`."""
    script = "addauth digest super:%s\n%s\nquit\n" % (SUPER_PASSWORD, "\n".join(commands))
    done = subprocess.run([ZKCLI, "-server", hosts], input=script, capture_output=True, text=True, timeout=120)
    return done.stdout + done.stderr


@pytest.mark.skipif(not os.access(ZKCLI, os.X_OK), reason="zkCli.sh not installed")
def test_grow_to_five_and_shrink_back_with_zkcli_under_load(keel_cluster, joiners):
    cluster = keel_cluster("rczk", reconfig_enabled=True)
    first = list(cluster.nodes)
    writer = Writer(cluster.address)
    try:
        time.sleep(0.5)
        n4, n5 = joiners(cluster, 4), joiners(cluster, 5)
        time.sleep(1.0)
        assert serving_state(n4) is None, "a joining node serves before it is added"
        added = ",".join(server_string(n, n.peer_port) for n in (n4, n5))
        out = zkcli(cluster.address, "reconfig -add %s" % added)
        assert "server.4=" in out and "server.5=" in out, out[-3000:]
        wait_for(lambda: all(serving_state(n) in ("leader", "follower") for n in (n4, n5)), "4 and 5 follow")
        check_step(cluster, first + [n4, n5], writer, "3 -> 5 (zkCli.sh reconfig -add)")
        conf = four_letter_word(n5.port, b"conf").decode()
        assert member_ids(conf.split("membership: \n", 1)[1]) == [1, 2, 3, 4, 5], conf

        out = zkcli(cluster.address, "reconfig -remove 4,5")
        assert "server.1=" in out and "server.4=" not in out, out[-3000:]
        wait_for(lambda: all(mntr(n.port, 2.0).get("keel_raft_leader_id") not in ("4", "5") for n in first),
                 "a leader among 1-3")
        check_step(cluster, first, writer, "5 -> 3 (zkCli.sh reconfig -remove)")
        client = super_client(cluster.address)
        text, _ = config_of(client)
        client.stop()
        assert member_ids(text) == [1, 2, 3], text
        wait_for(lambda: not _accepts_session(n4) and not _accepts_session(n5),
                 "removed members refuse sessions")
    finally:
        writer.stop()
    assert writer.acked, "no write was acknowledged"


def _accepts_session(node):
    client = KazooClient(hosts=node.address, timeout=2.0, connection_retry={"max_tries": 0})
    try:
        client.start(timeout=3)
    except Exception:  # noqa: BLE001 - refused, as a removed server refuses
        return False
    client.stop()
    client.close()
    return True


def test_grow_and_shrink_with_kazoo_fires_config_watches(keel_cluster, joiners):
    cluster = keel_cluster("rckz", reconfig_enabled=True)
    secret = os.path.join(cluster.workdir, "join.auth")
    with open(secret, "w") as f:
        f.write("super:%s\n" % SUPER_PASSWORD)
    first = list(cluster.nodes)
    writer = Writer(cluster.address)
    admin = super_client(cluster.address)
    changes = []
    watcher = KazooClient(hosts=cluster.address, timeout=10.0)
    watcher.start(timeout=20)

    def on_config(data, stat, event=None):
        changes.append((stat.mzxid if stat else None, event.type if event else None))

    watcher.DataWatch("/zookeeper/config", on_config)
    try:
        _, version = config_of(admin)
        n4 = joiners(cluster, 4)
        with pytest.raises(BadVersionError):
            admin.reconfig(joining=server_string(n4, n4.peer_port), leaving=None, new_members=None,
                           from_config=version + 1)
        data, stat = admin.reconfig(joining=server_string(n4, n4.peer_port), leaving=None,
                                    new_members=None, from_config=version)
        assert member_ids(data.decode()) == [1, 2, 3, 4]
        assert stat.version == -1 and stat.mzxid == int(data.decode().rsplit("version=", 1)[1], 16), stat
        # Member 5 asks by itself (a reconfig as super from its join_auth_file).
        n5 = joiners(cluster, 5, join_auth_file=secret)
        wait_for(lambda: member_ids(config_of(admin)[0]) == [1, 2, 3, 4, 5], "member 5 added at its own request")
        # Its own request's answer comes after the configuration is in
        # effect (the leader answers once it applied the change), so the
        # log line may come a little after the member list shows it; a
        # lost answer is asked again and then finds the node a member.
        try:
            wait_for(lambda: any(line in n5.log_text() for line in (
                "the cluster added this node", "no answer (the node may have been added meanwhile)")),
                "member 5's log saying its request was answered", timeout=15)
        except AssertionError as error:
            raise AssertionError("%s\n%s" % (error, n5.log_tail(40))) from None
        check_step(cluster, first + [n4, n5], writer, "3 -> 5 (kazoo, incremental)")

        # Non-incremental: the first three members, by their config lines.
        text, version = config_of(admin)
        keep = [line for line in text.splitlines() if line.split("=")[0] in ("server.1", "server.2", "server.3")]
        data, _ = admin.reconfig(joining=None, leaving=None, new_members=",".join(keep), from_config=version)
        assert member_ids(data.decode()) == [1, 2, 3], data
        check_step(cluster, first, writer, "5 -> 3 (kazoo, non-incremental)")
        wait_for(lambda: sum(1 for _, event in changes if event is not None) >= 3,
                 "a config watch event per change", timeout=10)
    finally:
        watcher.stop()
        admin.stop()
        writer.stop()


def test_a_killed_member_is_replaced_by_a_fresh_one(keel_cluster, joiners):
    cluster = keel_cluster("rcrep", reconfig_enabled=True)
    writer = Writer(cluster.address)
    try:
        time.sleep(0.5)
        dead = cluster.nodes[2]
        dead.kill()
        alive = cluster.nodes[:2]
        check_step(cluster, alive, writer, "member 3 killed")
        # Without credentials it waits for an operator. (Asking to be added
        # alone would get NewConfigNoQuorum, as from ZooKeeper: 2 of the 4
        # voters it would make are caught up.)
        fresh = joiners(cluster, 4)
        wait_for(lambda: "waiting for an operator" in fresh.log_text(), "the fresh member waits", timeout=20)
        admin = super_client(cluster.connect_string())
        data, _ = admin.reconfig(joining=server_string(fresh, fresh.peer_port), leaving="3", new_members=None)
        admin.stop()
        assert member_ids(data.decode()) == [1, 2, 4], data
        wait_for(lambda: serving_state(fresh) in ("leader", "follower"), "the fresh member follows")
        check_step(cluster, alive + [fresh], writer, "member 3 replaced by member 4")
        # The new configuration's quorum is 1, 2, 4: 3 is not needed any more.
        cluster.nodes[0].kill()
        check_step(cluster, [cluster.nodes[1], fresh], writer, "member 1 killed after the replacement")
        # Restarted with its first --peers (1, 2, 3), member 1 takes the
        # members from its data dir and follows again; so does the new
        # member restarted with --join.
        cluster.nodes[0].start(timeout=60)
        check_step(cluster, alive + [fresh], writer, "member 1 restarted with its old --peers")
        fresh.stop()
        fresh.start(timeout=60)
        check_step(cluster, alive + [fresh], writer, "member 4 restarted")
        assert "membership=dynamic" in open(os.path.join(cluster.nodes[0].data_dir, "IDENTITY")).read()
    finally:
        writer.stop()


def test_an_observer_moves_in_and_out(keel_cluster, joiners):
    cluster = keel_cluster("rcobs", reconfig_enabled=True)
    first = list(cluster.nodes)
    writer = Writer(cluster.address)
    admin = super_client(cluster.address)
    try:
        observer = joiners(cluster, 4, observers=[4])
        data, _ = admin.reconfig(joining=server_string(observer, observer.peer_port, "observer"),
                                 leaving=None, new_members=None)
        assert ":observer;" in data.decode().split("server.4=", 1)[1].split("\n")[0], data
        wait_for(lambda: serving_state(observer) == "observer", "member 4 observes")
        check_step(cluster, first + [observer], writer, "observer 4 in")
        reader = KazooClient(hosts=observer.address, timeout=10.0)
        reader.start(timeout=20)
        assert reader.exists("/load")
        reader.stop()
        admin.reconfig(joining=None, leaving="4", new_members=None)
        check_step(cluster, first, writer, "observer 4 out")
        text, _ = config_of(admin)
        assert member_ids(text) == [1, 2, 3], text
    finally:
        admin.stop()
        writer.stop()


# Small enough that the writes after the change put every member's newest
# snapshot past it.
FIRST_SNAPSHOT_EVERY_ENTRIES = 40


def test_a_member_added_while_down_gets_its_first_snapshot_after_the_cluster_restarted(keel_cluster, joiners):
    """An observer is added while its node is down, so the leader's first
    snapshot for it is lost; the members snapshot past the change and all
    restart, which forgets that it still needs one (the leader keeps that in
    memory). Started afterwards with --join, the node takes nothing before a
    snapshot and asks the leader for one. Before that ask it stayed empty
    for good (simulator, SIM_JOIN=1, seeds 260, 294 and 358)."""
    cluster = keel_cluster("rcfirst", reconfig_enabled=True,
                           snapshot_every_entries=FIRST_SNAPSHOT_EVERY_ENTRIES)
    first = list(cluster.nodes)
    late = joiners(cluster, 4, later=True, observers=[4])
    admin = super_client(cluster.address)
    try:
        data, _ = admin.reconfig(joining=server_string(late, late.peer_port, "observer"),
                                 leaving=None, new_members=None)
        assert member_ids(data.decode()) == [1, 2, 3, 4], data
        admin.ensure_path("/first")
        for i in range(4 * FIRST_SNAPSHOT_EVERY_ENTRIES):
            admin.create("/first/n%04d" % i, b"v")
    finally:
        admin.stop()
        admin.close()
    cluster.wait_converged(timeout=CHANGE_TIMEOUT_S, nodes=first)
    cluster.kill()
    cluster.start(timeout=120)
    late.start(timeout=60, wait=False)
    wait_for(lambda: serving_state(late) == "observer", "the member added while down observes")
    converged = cluster.wait_converged(timeout=CHANGE_TIMEOUT_S, nodes=first + [late])
    reader = KazooClient(hosts=late.address, timeout=10.0)
    reader.start(timeout=20)
    try:
        count = len(reader.get_children("/first"))
    finally:
        reader.stop()
        reader.close()
    assert count == 4 * FIRST_SNAPSHOT_EVERY_ENTRIES, count
    report_summary("reconfig: a member added while down caught up after a full restart: %d nodes, digest %s"
                   % (count, converged.digest))


MISUSES = ["no auth", "bad server string", "stale config id", "a majority removed at once",
           "no synced quorum", "stale config id before a bad string"]


def misuse_outcomes(group):
    """What each misuse of reconfig gets on `group`, as exception names."""
    admin = super_client(group.address)
    anonymous = KazooClient(hosts=group.address, timeout=10.0)
    anonymous.start(timeout=20)
    text, version = config_of(admin)
    first_line = text.splitlines()[0].split("=", 1)[1]
    ports = [free_port() for _ in range(6)]
    cases = {
        "no auth": (anonymous, dict(joining=None, leaving="3", new_members=None)),
        "bad server string": (admin, dict(joining="server.4=127.0.0.1:1234", leaving=None, new_members=None)),
        "stale config id": (admin, dict(joining=None, leaving="3", new_members=None, from_config=version + 7)),
        "a majority removed at once": (admin, dict(joining=None, leaving="2,3", new_members=None)),
        "no synced quorum": (admin, dict(joining=None, leaving=None, new_members=(
            "server.1=%s,server.5=127.0.0.1:%d:%d;%d,server.6=127.0.0.1:%d:%d;%d"
            % ((first_line,) + tuple(ports))))),
        "stale config id before a bad string": (admin, dict(joining="server.4=x", leaving=None, new_members=None,
                                                            from_config=version + 7)),
    }
    outcomes = {}
    for name in MISUSES:
        client, kwargs = cases[name]
        try:
            client.reconfig(**kwargs)
            outcomes[name] = "OK"
        except ZookeeperError as e:
            outcomes[name] = type(e).__name__
    anonymous.stop()
    admin.stop()
    return outcomes


@pytest.mark.parametrize("kind", ["zookeeper", "keel"])
def test_misused_reconfig_gets_zookeepers_error_codes(kind):
    if kind == "keel":
        require_keel()
    group = make_cluster(kind, 3, name="rcerr-" + kind, settings={"reconfig_enabled": True})
    try:
        group.start()
        outcomes = misuse_outcomes(group)
    finally:
        group.kill()
    expected = {
        "no auth": NoAuthError.__name__,
        "bad server string": BadArgumentsError.__name__,
        "stale config id": BadVersionError.__name__,
        "a majority removed at once": BadArgumentsError.__name__,
        "no synced quorum": NewConfigNoQuorumError.__name__,
        "stale config id before a bad string": BadVersionError.__name__,
    }
    assert outcomes == expected, outcomes
    report_summary("reconfig misuse on %s: %s" % (kind, ", ".join("%s=%s" % kv for kv in outcomes.items())))
    group.cleanup()


def test_reconfig_is_refused_when_disabled_as_zookeepers_default(keel_cluster):
    cluster = keel_cluster("rcoff")
    admin = super_client(cluster.address)
    try:
        text, _ = config_of(admin)
        assert member_ids(text) == [1, 2, 3], text
        with pytest.raises(ZookeeperError) as refused:
            admin.reconfig(joining=None, leaving="3", new_members=None)
        assert type(refused.value).__name__ == "ReconfigDisabledError"
    finally:
        admin.stop()
