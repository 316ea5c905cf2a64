"""Keel KV under concurrent clients, with its keys on different shards:
what a single-threaded redis-server gives for free and a shard-per-core
server must earn.

- WATCH/MULTI/EXEC as optimistic locking: clients on every node increment
  two keys of two shards in transactions guarded by WATCH; no update is
  lost (every EXEC that succeeded moved both keys one step, from the value
  its client read, and no two succeeded from the same value).
- A write spanning shards (MSET, MULTI/EXEC) is seen whole or not at all:
  MGET and a transaction of GETs always read equal values, and the values
  one connection reads never go back, whichever shard each read runs on
  (reads pipelined to different shard threads included), on a follower
  with READONLY's local reads too.
- A connection that pipelines a write spanning every shard and reads the
  keys at once reads its own write on every shard (MSET, MULTI/EXEC,
  pipelined SETs, DEL, MSETNX, APPEND), on every node.
- The WATCH transactions again while the leader is killed and restarted:
  no update lost or doubled, none applied in part.

The differential suites check each command's reply against redis-server;
these check what only concurrency shows. KEEL_KV_CONCURRENCY_SECONDS sets
the length of each load (default 5)."""

import os
import threading
import time

import pytest

from conftest import report_summary
from harness.redis import Closed, NodeRotation, RespConnection, wait_kv

SECONDS = float(os.environ.get("KEEL_KV_CONCURRENCY_SECONDS", "5"))
# Four shard threads even on two cores: more shards, more interleavings.
SHARDS = 4
SLOTS = 16384
CAS_CLIENTS = 8
READERS = 3
# Requests one reader sends in one write (see `READ_ROUND`).
WRITES_PER_ROUND = 16


def crc16(data):
    """CRC16/XMODEM, Redis Cluster's key hash."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def shard_of(key, shards=SHARDS):
    """The shard Keel KV gives `key` (no hash tags in these names)."""
    return crc16(key.encode()) % SLOTS * shards // SLOTS


def keys_on_distinct_shards(prefix, count):
    """`count` key names, each on a shard of its own."""
    found = {}
    n = 0
    while len(found) < count:
        key = "%s%d" % (prefix, n)
        found.setdefault(shard_of(key), key)
        n += 1
    return [found[shard] for shard in sorted(found)]


def test_the_shard_hash_is_redis_clusters():
    # CRC16/XMODEM's check value, and slots Redis Cluster documents.
    assert crc16(b"123456789") == 0x31C3
    assert crc16(b"foo") % SLOTS == 12182
    assert crc16(b"bar") % SLOTS == 5061
    keys = keys_on_distinct_shards("x", 3)
    assert len({shard_of(k) for k in keys}) == 3


@pytest.fixture(params=["single", "cluster3"])
def target(request, kv_factory):
    return kv_factory(request.param, kv_shards=SHARDS)


def connect(port):
    return RespConnection(port, timeout=15.0)


def as_int(value):
    return 0 if value is None else int(value)


def join_clients(threads, errors, timeout_s):
    """Waits for the client threads: none may have failed or hung."""
    for t in threads:
        t.join(timeout_s)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), "a client hung"


def test_watch_transactions_across_shards_lose_no_update(target):
    a, b = keys_on_distinct_shards("cas", 2)
    with connect(target.leader_port()) as c:
        assert c.call("MSET", a, "0", b, "0")[1] == "OK"
    ports = target.ports
    deadline = time.monotonic() + SECONDS
    lock = threading.Lock()
    committed = []  # the value each successful EXEC moved both keys from
    aborted = [0]
    errors = []

    def client(index):
        try:
            with connect(ports[index % len(ports)]) as c:
                while time.monotonic() < deadline:
                    assert c.call("WATCH", a, b)[1] == "OK"
                    x = as_int(c.call("GET", a)[1])
                    y = as_int(c.call("GET", b)[1])
                    assert c.call("MULTI")[1] == "OK"
                    assert c.call("SET", a, str(x + 1))[1] == "QUEUED"
                    assert c.call("SET", b, str(y + 1))[1] == "QUEUED"
                    reply = c.call("EXEC")[1]
                    with lock:
                        if reply is None:
                            aborted[0] += 1
                        else:
                            assert reply == ["OK", "OK"], reply
                            # Both keys were read after the WATCH: a
                            # change between the two reads aborts EXEC.
                            assert x == y, "EXEC succeeded on a torn read: %s=%d %s=%d" % (a, x, b, y)
                            committed.append(x)
        except Exception as error:  # reported by the main thread
            errors.append(repr(error))

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(CAS_CLIENTS)]
    for t in threads:
        t.start()
    join_clients(threads, errors, SECONDS + 60)
    total = len(committed)
    # Each success moved the keys from the value it read: no two from the
    # same value (a lost update) and none skipped.
    assert sorted(committed) == list(range(total)), "lost or doubled updates: %r" % sorted(committed)[:40]
    assert total >= 20, "only %d transactions committed in %.0f s" % (total, SECONDS)
    for port in ports:
        with connect(port) as c:
            assert [as_int(v) for v in c.call("MGET", a, b)[1]] == [total, total], port
    line = ("KV WATCH across shards (%s, %d clients, %.0f s): %d EXECs committed, %d aborted by WATCH, "
            "no update lost" % (target.topology, CAS_CLIENTS, SECONDS, total, aborted[0]))
    print("\n" + line)
    report_summary(line)


# One reader's pipelined round: every value read must not be older than
# any read before it on the connection, and each multi-key read is whole.
READ_ROUND = [
    ("MGET", "a", "b", "c"),
    ("GET", "a"), ("GET", "b"), ("GET", "c"),
    ("MULTI",), ("GET", "c"), ("GET", "a"), ("GET", "b"), ("EXEC",),
    ("GET", "c"), ("GET", "b"), ("GET", "a"),
]


def test_a_write_spanning_shards_is_read_whole_or_not_at_all(target):
    names = dict(zip("abc", keys_on_distinct_shards("span", 3)))
    ports = target.ports
    deadline = time.monotonic() + SECONDS
    errors = []
    acked = [0]
    reads = [0]

    def writer():
        """Every key set to the same growing value, by MSET and by
        MULTI/EXEC in turn, WRITES_PER_ROUND pipelined at a time."""
        try:
            with connect(target.leader_port()) as c:
                value = 0
                while time.monotonic() < deadline:
                    batch = []
                    for _ in range(WRITES_PER_ROUND):
                        value += 1
                        if value % 2:
                            batch.append(("MSET",) + sum(((k, str(value)) for k in names.values()), ()))
                        else:
                            batch += [("MULTI",)] + [("SET", k, str(value)) for k in names.values()] + [("EXEC",)]
                    c.send(b"".join(RespConnection.encode(args) for args in batch))
                    replies = [c.reply()[1] for _ in batch]
                    assert all(r in ("OK", "QUEUED", ["OK"] * len(names)) for r in replies), replies
                    acked[0] = value
        except Exception as error:
            errors.append("writer: %r" % error)

    def reader(index, local=False):
        try:
            with connect(ports[index % len(ports)]) as c:
                if local:
                    # Local reads on a follower may lag the leader, but
                    # they too never go back and never see half a write.
                    assert c.call("READONLY")[1] == "OK"
                newest = 0
                while time.monotonic() < deadline:
                    round_ = [(cmd[0],) + tuple(names[k] for k in cmd[1:]) for cmd in READ_ROUND]
                    c.send(b"".join(RespConnection.encode(args) for args in round_))
                    seen = []
                    queued = False
                    for args in round_:
                        reply = c.reply()[1]
                        if args[0] in ("MGET", "EXEC"):
                            values = [as_int(v) for v in reply]
                            assert len(set(values)) == 1, "%s read a spanning write in part: %r" % (args[0], values)
                            seen.append(values[0])
                            queued = False
                        elif args[0] == "MULTI":
                            assert reply == "OK", reply
                            queued = True
                        elif queued:
                            assert reply == "QUEUED", reply
                        else:
                            seen.append(as_int(reply))
                    for value in seen:
                        assert value >= newest, "a read went back from %d to %d on one connection: %r" % (
                            newest, value, seen)
                        newest = value
                    reads[0] += len(round_)
        except Exception as error:
            errors.append("reader %d: %r" % (index, error))

    threads = [threading.Thread(target=writer, daemon=True)]
    threads += [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(READERS)]
    if target.topology != "single":
        follower = ports.index(target.port)
        threads.append(threading.Thread(target=reader, args=(follower, True), daemon=True))
    for t in threads:
        t.start()
    join_clients(threads, errors, SECONDS + 60)
    assert acked[0] >= 100 and reads[0] >= 100, (acked[0], reads[0])
    with connect(target.leader_port()) as c:
        final = [as_int(v) for v in c.call("MGET", *names.values())[1]]
    assert final == [acked[0]] * len(names), (final, acked[0])
    line = ("KV spanning writes (%s): %d writes over %d shards, %d reads, none saw one in part" % (
        target.topology, acked[0], len(names), reads[0]))
    print("\n" + line)
    report_summary(line)


# Connections per node in the read-your-own-writes test: on two or more
# shard threads of each node, so their own reads run on different shards.
OWN_CLIENTS_PER_NODE = 3
# Spanning writes one connection pipelines in one send, each followed by
# its reads.
OWN_WRITES_PER_SEND = 4


def own_round(keys, value):
    """One spanning write of `keys` (one per shard) to `value`, in the form
    `value` picks, then reads of every key in an order that starts on
    another shard each time: [(request, expected reply)]."""
    v = str(value).encode()
    form = value % 5
    if form == 0:
        writes = [(("MSET",) + sum(((k, v) for k in keys), ()), "OK")]
    elif form == 1:
        writes = [(("MULTI",), "OK")] + [(("SET", k, v), "QUEUED") for k in keys]
        writes.append((("EXEC",), ["OK"] * len(keys)))
    elif form == 2:
        # Single-key writes pipelined together: one batch proposal.
        writes = [(("SET", k, v), "OK") for k in keys]
    elif form == 3:
        writes = [(("DEL",) + tuple(keys), len(keys)), (("EXISTS",) + tuple(keys), 0)]
        writes += [(("GET", k), None) for k in keys]
        writes.append((("MSETNX",) + sum(((k, v) for k in keys), ()), 1))
    else:
        writes = [(("MULTI",), "OK"), (("DEL",) + tuple(keys), "QUEUED")]
        writes += [(("APPEND", k, v), "QUEUED") for k in keys]
        writes.append((("EXEC",), [len(keys)] + [len(v)] * len(keys)))
    turn = value % len(keys)
    order = keys[turn:] + keys[:turn]
    reads = [(("GET", k), v) for k in reversed(order)]
    reads.append((("MGET",) + tuple(order), [v] * len(keys)))
    reads.append((("STRLEN", order[0]), len(v)))
    return writes + reads


def test_a_connection_reads_its_own_spanning_write_at_once(target):
    """A connection that pipelines a write spanning every shard and reads
    the keys straight after it, in the same send, reads the write on every
    shard: its reads run on shard threads, its own among them, that may
    not yet have applied their part unless the write's reply waits for all
    of them (the race `c81ccaf` fixed for MSET). Redis gives this for free;
    each connection owns its keys, so every reply is known in advance."""
    ports = target.ports
    deadline = time.monotonic() + SECONDS
    errors = []
    rounds = [0]

    def client(index):
        keys = [k.encode() for k in keys_on_distinct_shards("own%d_" % index, SHARDS)]
        value = 0
        try:
            with connect(ports[index % len(ports)]) as c:
                while time.monotonic() < deadline:
                    pairs = []
                    for _ in range(OWN_WRITES_PER_SEND):
                        value += 1
                        pairs += own_round(keys, value)
                    c.send(b"".join(RespConnection.encode(request) for request, _ in pairs))
                    for request, expected in pairs:
                        got = c.reply()[1]
                        assert got == expected, "client %d on port %d: %r answered %r, not %r" % (
                            index, ports[index % len(ports)], request, got, expected)
                    rounds[0] += OWN_WRITES_PER_SEND
        except Exception as error:
            errors.append(repr(error))

    count = OWN_CLIENTS_PER_NODE * len(ports)
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    join_clients(threads, errors, SECONDS + 60)
    assert rounds[0] >= 100, rounds[0]
    line = ("KV own spanning writes (%s, %d clients): %d writes over %d shards each read back at once "
            "on every shard" % (target.topology, count, rounds[0], SHARDS))
    print("\n" + line)
    report_summary(line)


def test_a_connection_closed_inside_multi_leaves_no_half_transaction(target):
    """A connection closed after MULTI and its queued writes, before EXEC:
    nothing of the transaction is applied."""
    a, b = keys_on_distinct_shards("drop", 2)
    port = target.ports[-1]
    with connect(target.leader_port()) as c:
        assert c.call("MSET", a, "1", b, "1")[1] == "OK"
    with connect(port) as c:
        c.send(b"".join(RespConnection.encode(args) for args in
                        [("MULTI",), ("SET", a, "2"), ("SET", b, "2")]))
        assert [c.reply()[1] for _ in range(3)] == ["OK", "QUEUED", "QUEUED"]
    with connect(port) as d:
        assert d.call("PING")[1] == "PONG"
        assert [as_int(v) for v in d.call("MGET", a, b)[1]] == [1, 1]


class Retry(Exception):
    """A reply that ends a client's attempt (an error during a leader
    change): it moves to another node."""


def test_watch_transactions_lose_no_update_across_a_leader_kill(kv_factory):
    """The WATCH test's clients on every node while the leader is killed
    (kill -9) and restarted: a transaction whose reply was lost may or may
    not have happened, every other one happened once or not at all."""
    target = kv_factory("cluster3", kv_shards=SHARDS)
    cluster = target.server
    a, b = keys_on_distinct_shards("fail", 2)
    with connect(target.leader_port()) as c:
        assert c.call("MSET", a, "0", b, "0")[1] == "OK"
    ports = target.ports
    stop = threading.Event()
    lock = threading.Lock()
    committed = []
    outcomes = {"aborted": 0, "unknown": 0, "retries": 0}
    errors = []

    def attempt(c, sent):
        """One WATCH transaction; (reply of EXEC, x, y). Raises Retry or a
        connection error; sent[0] turns true once EXEC went out."""
        if c.call("WATCH", a, b)[1] != "OK":
            raise Retry()
        values = [c.call("GET", key)[1] for key in (a, b)]
        if not all(isinstance(v, bytes) for v in values):
            raise Retry()
        x, y = (int(v) for v in values)
        if c.call("MULTI")[1] != "OK":
            raise Retry()
        for key, value in ((a, x + 1), (b, y + 1)):
            if c.call("SET", key, str(value))[1] != "QUEUED":
                raise Retry()
        sent[0] = True
        return c.call("EXEC")[1], x, y

    def client(index):
        nodes = NodeRotation(ports, index)
        try:
            while not stop.is_set():
                c = nodes.connect(stop)
                if c is None:
                    break
                sent = [False]
                try:
                    reply, x, y = attempt(c, sent)
                except (OSError, Closed, Retry):
                    with lock:
                        outcomes["unknown" if sent[0] else "retries"] += 1
                    nodes.drop()
                    continue
                with lock:
                    if reply is None:
                        outcomes["aborted"] += 1
                    elif reply == ["OK", "OK"]:
                        assert x == y, "EXEC succeeded on a torn read: %d %d" % (x, y)
                        committed.append(x)
                    else:  # an error reply: it may have been applied
                        outcomes["unknown"] += 1
        except Exception as error:
            errors.append(repr(error))
        finally:
            nodes.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(CAS_CLIENTS)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.5)
        leader = cluster.leader()
        leader.kill()
        time.sleep(1.0)
        assert cluster.leader(timeout=20) is not leader
        leader.start()
        wait_kv(int(leader.settings["resp_port"]))
        time.sleep(1.5)
    finally:
        stop.set()
    join_clients(threads, errors, 30)
    cluster.wait_replicated()
    finals = []
    for port in ports:
        with connect(port) as c:
            finals.append(tuple(as_int(v) for v in c.call("MGET", a, b)[1]))
    assert len(set(finals)) == 1, "the nodes disagree: %r" % finals
    final_a, final_b = finals[0]
    assert final_a == final_b, "a transaction applied in part: %r" % (finals[0],)
    known = len(committed)
    assert len(set(committed)) == known, "two transactions committed from one value: %r" % sorted(committed)
    assert known <= final_a <= known + outcomes["unknown"], (known, final_a, outcomes)
    assert all(x < final_a for x in committed)
    assert known >= 20, (known, outcomes)
    line = ("KV WATCH across a leader kill (%d clients): %d EXECs committed, %d aborted by WATCH, %d unknown "
            "(connection lost after EXEC), final %d: no update lost or doubled" % (
                CAS_CLIENTS, known, outcomes["aborted"], outcomes["unknown"], final_a))
    print("\n" + line)
    report_summary(line)
