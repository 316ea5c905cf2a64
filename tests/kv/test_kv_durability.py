"""Keel KV keeps every acknowledged write: kill -9 of a single node under
write load (restarted on its data dir: snapshot with its keyspace part, then
the log), kill -9 of a 3-node cluster's leader under load, reads that are
linearizable across nodes, a lagging follower that catches up by a
snapshot holding the keyspace, and keys that expire on every replica when
the leader that saw them set is killed before they are due.

The writers pipeline a third of their writes (up to 24 at once), so the
kills also fall among batches of one connection's writes.

KEEL_KV_CRASH_KILLS (default 3) and KEEL_KV_CLUSTER_KILLS (default 2) set the
number of kills, KEEL_KV_CRASH_SEED the seed."""

import os
import random
import re
import threading
import time

from conftest import report_summary
from harness.servers import raft_applied_index
from harness.redis import Closed, NodeRotation, RespConnection, wait_kv

KILLS = int(os.environ.get("KEEL_KV_CRASH_KILLS", "3"))
CLUSTER_KILLS = int(os.environ.get("KEEL_KV_CLUSTER_KILLS", "2"))
SEED = int(os.environ.get("KEEL_KV_CRASH_SEED", "20261125"))
WRITERS = 4
KEYS_PER_WRITER = 20


class Acked:
    """What the writers were told is done: per key the highest value written
    (values of a key only grow: one writer per key), per counter the
    highest INCR reply, per set the members added."""

    def __init__(self):
        self.lock = threading.Lock()
        self.values = {}
        self.counters = {}
        self.members = {}
        self.count = 0


def next_write(rng, index, counter, acked):
    """One random write (SET, INCR or SADD) of writer `index`: its
    arguments, and what records its reply as acknowledged (true when the
    reply is the success it should be)."""
    kind = rng.random()
    if kind < 0.6:
        key = "w%d:k%d" % (index, rng.randrange(KEYS_PER_WRITER))

        def on_set(reply):
            if reply != "OK":
                return False
            with acked.lock:
                acked.values[key] = max(acked.values.get(key, 0), counter)
            return True
        return ["SET", key, "%012d" % counter], on_set
    if kind < 0.8:
        name = "w%d:n" % index

        def on_incr(reply):
            if not isinstance(reply, int):
                return False
            with acked.lock:
                acked.counters[name] = max(acked.counters.get(name, 0), reply)
            return True
        return ["INCR", name], on_incr
    name = "w%d:s" % index

    def on_sadd(reply):
        if not isinstance(reply, int):
            return False
        with acked.lock:
            acked.members.setdefault(name, set()).add(str(counter).encode())
        return True
    return ["SADD", name, str(counter)], on_sadd


# Writes a writer sends pipelined at most: past the 16 a connection
# proposes as one batch (`op::PIPELINE_COMMANDS_MAX`), so a kill can fall
# between two batches of one pipeline, or inside one.
PIPELINE_WRITES_MAX = 24


def writer(ports, index, acked, stop, seed):
    """SET/INCR/SADD through whichever node answers, one at a time or (a
    third of the rounds) pipelined; a failed or dropped connection moves
    on to the next node (a write without its reply is unacknowledged: it
    may or may not have happened)."""
    rng = random.Random(seed)
    counter = 0
    nodes = NodeRotation(ports, index)
    while not stop.is_set():
        conn = nodes.connect(stop)
        if conn is None:
            break
        count = rng.randint(2, PIPELINE_WRITES_MAX) if rng.random() < 0.33 else 1
        writes = []
        for _ in range(count):
            counter += 1
            writes.append(next_write(rng, index, counter, acked))
        try:
            conn.send(b"".join(RespConnection.encode(args) for args, _ in writes))
            ok = True
            for _, on_reply in writes:
                if on_reply(conn.reply()[1]):
                    with acked.lock:
                        acked.count += 1
                else:
                    ok = False
            if not ok:
                time.sleep(0.05)
        except (OSError, Closed, ValueError):
            nodes.drop()
    nodes.close()


def check(port, acked, local=False):
    """Every acknowledged write is there (a value at least as new as the
    last acknowledged one: an unacknowledged later write may have landed)."""
    missing = []
    with RespConnection(port, timeout=30.0) as c:
        if local:
            assert c.call("READONLY")[1] == "OK"
        with acked.lock:
            values = dict(acked.values)
            counters = dict(acked.counters)
            members = {k: set(v) for k, v in acked.members.items()}
        for key, value in values.items():
            got = c.call("GET", key)[1]
            if got is None or int(got) < value:
                missing.append((key, value, got))
        for key, value in counters.items():
            got = c.call("GET", key)[1]
            if got is None or int(got) < value:
                missing.append((key, value, got))
        for key, value in members.items():
            got = c.call("SMEMBERS", key)[1]
            lost = value - set(got or [])
            if lost:
                missing.append((key, sorted(lost)[:5], len(lost)))
    assert not missing, "acknowledged writes lost: %r" % missing[:10]


def run_writers(ports, acked, seed):
    stop = threading.Event()
    threads = [threading.Thread(target=writer, args=(ports, i, acked, stop, seed + i), daemon=True)
               for i in range(WRITERS)]
    for t in threads:
        t.start()
    return stop, threads


def test_kill_9_under_write_load_loses_no_acknowledged_write(kv_factory):
    # Small snapshot triggers: restarts load a snapshot with the keyspace
    # part and replay the log behind it.
    target = kv_factory("single", snapshot_every_entries=400)
    server = target.server
    rng = random.Random(SEED)
    acked = Acked()
    stop, threads = run_writers([server.resp_port], acked, SEED)
    try:
        for kill in range(KILLS):
            time.sleep(rng.uniform(0.8, 2.0))
            server.kill()
            before = acked.count
            server.start()
            wait_kv(server.resp_port)
            check(server.resp_port, acked)
            assert acked.count >= before
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    check(server.resp_port, acked)
    assert acked.count > 50, "the writers barely wrote (%d acknowledged)" % acked.count
    snapshots = [n for n in os.listdir(os.path.join(server.data_dir, "snapshots")) if n.endswith(".snap")]
    assert snapshots, "no snapshot was written: the restarts did not load a keyspace part"
    report_summary("kv crash: %d kills, %d acknowledged writes, none lost" % (KILLS, acked.count))


def test_kill_the_leader_under_load_loses_no_acknowledged_write(kv_factory):
    target = kv_factory("cluster3")
    cluster = target.server
    ports = target.ports
    rng = random.Random(SEED + 1)
    acked = Acked()
    stop, threads = run_writers(ports, acked, SEED + 100)
    try:
        for _ in range(CLUSTER_KILLS):
            time.sleep(rng.uniform(1.0, 2.0))
            leader = cluster.leader()
            leader.kill()
            time.sleep(rng.uniform(1.0, 2.0))
            assert cluster.leader(timeout=20) is not leader
            leader.start()
            wait_kv(int(leader.settings["resp_port"]))
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert acked.count > 50
    cluster.wait_replicated()
    # Linearizable reads through every node, and each node's own state
    # (READONLY) once it has caught up.
    for port in ports:
        check(port, acked)
    time.sleep(1.0)
    sizes = []
    for port in ports:
        check(port, acked, local=True)
        with RespConnection(port) as c:
            c.call("READONLY")
            sizes.append(c.call("DBSIZE")[1])
    assert len(set(sizes)) == 1, "replicas hold different keyspaces: %r" % sizes
    report_summary("kv cluster: %d leader kills, %d acknowledged writes, none lost, %d keys on each replica"
                   % (CLUSTER_KILLS, acked.count, sizes[0]))


def info_int(conn, section, field):
    """The integer `field` of INFO's `section`."""
    info = conn.call("INFO", section)[1].decode()
    found = re.search(r"^%s:(\d+)\r?$" % re.escape(field), info, re.M)
    assert found, "INFO %s has no %s: %r" % (section, field, info)
    return int(found.group(1))


def lease_reads(conn):
    """INFO's count of the reads a node served under its leader's lease."""
    return info_int(conn, "stats", "keel_lease_reads")


def test_reads_are_linearizable_across_nodes_and_readonly_reads_are_local(kv_factory):
    target = kv_factory("cluster3")
    ports = target.ports
    conns = [RespConnection(p) for p in ports]
    leader = conns[ports.index(target.leader_port())]
    try:
        leased_before = lease_reads(leader)
        for i in range(150):
            writer_conn = conns[i % 3]
            reader_conn = conns[(i + 1) % 3]
            assert writer_conn.call("SET", "lin", str(i))[1] == "OK"
            # Acknowledged on one node: any node's read that starts after
            # it sees it (ReadIndex barrier, then this node's state).
            assert reader_conn.call("GET", "lin")[1] == str(i).encode()
            assert reader_conn.call("INCR", "lin")[1] == i + 1
            assert conns[(i + 2) % 3].call("GET", "lin")[1] == str(i + 1).encode()
        # A third of those reads ran on the leader; it served them from its
        # read lease, with no ReadIndex round of their own.
        assert lease_reads(leader) - leased_before >= 50
        local = conns[1]
        assert local.call("READONLY")[1] == "OK"
        value = local.call("GET", "lin")[1]
        assert value is not None
        assert local.call("READWRITE")[1] == "OK"
    finally:
        for c in conns:
            c.close()


def test_without_the_read_lease_every_read_waits_for_a_round(kv_factory):
    target = kv_factory("cluster3", read_lease=False)
    ports = target.ports
    conns = [RespConnection(p) for p in ports]
    leader = conns[ports.index(target.leader_port())]
    try:
        for i in range(30):
            assert conns[i % 3].call("SET", "lin", str(i))[1] == "OK"
            assert leader.call("GET", "lin")[1] == str(i).encode()
        assert lease_reads(leader) == 0
    finally:
        for c in conns:
            c.close()


def kv_shards(conn):
    """INFO's number of the node's KV shards."""
    return info_int(conn, "server", "keel_kv_shards")


def test_a_restart_with_another_kv_shards_cuts_the_keyspace_anew(kv_factory):
    """kv_shards is a node's own choice: a restart with another count
    loads the snapshot's keyspace part and replays the log tail into the
    new shards, every key of every type and its expiry intact."""
    target = kv_factory("single", kv_shards=1, snapshot_every_entries=300)
    server = target.server

    def contents(c):
        keys = sorted(c.call("KEYS", "*")[1])
        strings = [c.call("GET", k)[1] for k in keys if k.startswith(b"s:")]
        return (c.call("DBSIZE")[1], keys, strings, c.call("HGETALL", "h")[1],
                sorted(c.call("SMEMBERS", "set")[1]), c.call("TTL", "ttl")[1] > 0)

    with RespConnection(server.resp_port) as c:
        assert kv_shards(c) == 1
        for i in range(700):
            assert c.call("SET", "s:%d" % i, "v%d" % i)[1] == "OK"
        c.call("HSET", "h", "f", "1", "g", "2")
        c.call("SADD", "set", "a", "b", "c")
        c.call("SET", "ttl", "v", "EX", "1000")
        before = contents(c)
    assert before[0] == 703 and before[5]
    for shards in (3, 2):
        server.stop()
        server.settings["kv_shards"] = shards
        server.start()
        wait_kv(server.resp_port)
        with RespConnection(server.resp_port) as c:
            assert kv_shards(c) == shards
            assert contents(c) == before
    snapshots = [n for n in os.listdir(os.path.join(server.data_dir, "snapshots")) if n.endswith(".snap")]
    assert snapshots, "no snapshot was written: the restarts did not load a keyspace part"


def test_a_lagging_follower_gets_the_keyspace_by_snapshot(kv_factory):
    target = kv_factory("cluster3", snapshot_every_entries=300)
    cluster = target.server
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes if n is not leader)
    follower.stop()
    with RespConnection(int(leader.settings["resp_port"])) as c:
        for i in range(2500):
            assert c.call("SET", "snap:%d" % i, "v%d" % i)[1] == "OK"
        c.call("HSET", "snap:h", "f", "v", "g", "w")
        c.call("SADD", "snap:s", "1", "2", "x")
        c.call("SET", "snap:ttl", "v", "EX", "1000")
        expected = c.call("DBSIZE")[1]
    follower.start()
    port = int(follower.settings["resp_port"])
    wait_kv(port)
    # KV writes do not move the ZooKeeper zxid (cluster.wait_replicated
    # would return at once): wait on the Raft applied index instead.
    # The install is logged just after the index moves: poll both.
    target_index = raft_applied_index(leader.port)
    deadline = time.time() + 60
    while time.time() < deadline and (raft_applied_index(follower.port) < target_index
                                      or "installed snapshot from the leader" not in follower.log_since_start()):
        time.sleep(0.05)
    assert raft_applied_index(follower.port) >= target_index, follower.log_tail(40)
    assert "installed snapshot from the leader" in follower.log_since_start(), \
        "the follower caught up from the log: the test did not exercise a snapshot install"
    with RespConnection(port) as c:
        assert c.call("READONLY")[1] == "OK"
        deadline = time.time() + 30
        while c.call("DBSIZE")[1] != expected and time.time() < deadline:
            time.sleep(0.2)
        assert c.call("DBSIZE")[1] == expected
        assert c.call("GET", "snap:1234")[1] == b"v1234"
        assert c.call("HGETALL", "snap:h")[1] == [b"f", b"v", b"g", b"w"]
        assert sorted(c.call("SMEMBERS", "snap:s")[1]) == [b"1", b"2", b"x"]
        assert 990 <= c.call("TTL", "snap:ttl")[1] <= 1000
    report_summary("kv snapshot catch-up: %d keys on the restarted follower, by a snapshot install"
                   % expected)


def test_keys_expire_on_every_replica_across_a_leader_kill(kv_factory):
    """Expiry is the leader's: keys set to expire go from every replica
    once they are due even when the leader that saw them set is killed
    before, and keys without a deadline stay. The new leader's expiry
    cycle proposes their deletion; a read hides a key as soon as the log's
    clock passes its deadline."""
    target = kv_factory("cluster3")
    cluster = target.server
    leader = cluster.leader()
    follower_port = next(int(n.settings["resp_port"]) for n in cluster.nodes if n is not leader)
    expiring, kept = 150, 150
    with RespConnection(follower_port) as c:
        for i in range(expiring):
            assert c.call("SET", "exp:%d" % i, "v", "PX", "1500")[1] == "OK"
        for i in range(kept):
            assert c.call("SET", "keep:%d" % i, "v")[1] == "OK"
        assert c.call("PEXPIRE", "keep:0", "1500")[1] == 1
        assert c.call("PERSIST", "keep:0")[1] == 1
    set_at = time.time()
    leader.kill()
    assert cluster.leader(timeout=20) is not leader
    live = [int(n.settings["resp_port"]) for n in cluster.nodes if n is not leader]
    deadline = set_at + 20
    gone_after = None
    while time.time() < deadline:
        sizes = []
        for port in live:
            with RespConnection(port) as c:
                c.call("READONLY")
                sizes.append(c.call("DBSIZE")[1])
        if sizes == [kept] * len(live):
            gone_after = time.time() - set_at
            break
        time.sleep(0.1)
    assert gone_after is not None, "replicas still hold %r keys, %d expected" % (sizes, kept)
    leader.start()
    port = int(leader.settings["resp_port"])
    wait_kv(port)
    with RespConnection(port) as c:
        c.call("READONLY")
        wait_until = time.time() + 30
        while c.call("DBSIZE")[1] != kept and time.time() < wait_until:
            time.sleep(0.1)
        assert c.call("DBSIZE")[1] == kept, "the restarted node holds expired keys"
        assert c.call("GET", "exp:7")[1] is None
        assert c.call("GET", "keep:0")[1] == b"v"
        assert c.call("TTL", "keep:0")[1] == -1
    report_summary("kv expiry: %d keys due 1.5 s after they were set, the leader killed at once: "
                   "gone from both live replicas %.1f s after the writes" % (expiring, gone_after))
