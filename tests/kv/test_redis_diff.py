"""Keel KV against Debian's redis-server 7.0: the same command scripts run
on both, over raw RESP (replies compared byte for byte where Redis defines
the bytes) and through redis-py, with Keel as one node and as a 3-node
cluster (the client on a follower: its writes are forwarded to the leader,
its reads pass a ReadIndex barrier).

Where Redis leaves a reply's order to its hash tables (members of a set
of strings, fields of a large hash, KEYS, SCAN's batches) the elements are
compared as a multiset; TTLs counted down by a clock within 1 s (PTTL:
250 ms); a few values that name the server (CLIENT ID, INFO, COMMAND's
table) by their RESP type only."""

import re
import time

import pytest

from harness.redis import RespConnection


@pytest.fixture(scope="module")
def reference(redis_ref):
    return redis_ref


def canonical(parsed):
    """A parsed reply with every element list sorted (for unordered replies)."""
    if isinstance(parsed, tuple) and parsed and parsed[0] == "set":
        return ("set", sorted(canonical(x) for x in parsed[1]))
    if isinstance(parsed, tuple) and parsed and parsed[0] == "map":
        return ("map", sorted((canonical(k), canonical(v)) for k, v in parsed[1]))
    if isinstance(parsed, list):
        return sorted((canonical(x) for x in parsed), key=repr)
    return parsed


def pairs_canonical(parsed):
    """A RESP2 flat array of field/value pairs as a sorted list of pairs."""
    return sorted(zip(parsed[::2], parsed[1::2]))


def reply_type(raw):
    return raw[:1]


class Recorder:
    """Runs commands on one connection and records what to compare."""

    def __init__(self, port, log=None):
        self.port = port
        self.conn = RespConnection(port)
        self.log = [] if log is None else log

    def other(self):
        """A second connection to the same server, recording into the same log."""
        return Recorder(self.port, self.log)

    def close(self):
        self.conn.close()

    def __call__(self, *args, mode="exact"):
        raw, parsed = self.conn.call(*args)
        self.record(args, raw, parsed, mode)
        return parsed

    def raw(self, data, mode="exact"):
        """Raw bytes in, one reply out."""
        self.conn.send(data)
        raw, parsed = self.conn.reply()
        self.record(data, raw, parsed, mode)
        return parsed

    def record(self, what, raw, parsed, mode):
        if mode == "exact":
            value = raw
        elif mode == "unordered":
            value = canonical(parsed)
        elif mode == "pairs":
            value = pairs_canonical(parsed)
        elif mode == "type":
            value = reply_type(raw)
        elif mode in ("ttl", "pttl"):
            value = (mode, parsed)
        elif mode == "ignore":
            return
        else:
            raise ValueError(mode)
        self.log.append((what, mode, value))

    def note(self, label, value):
        self.log.append((label, "exact", value))


def same(mode, a, b):
    if mode == "ttl" and isinstance(a[1], int) and isinstance(b[1], int):
        return a[1] < 0 and a[1] == b[1] or a[1] >= 0 and b[1] >= 0 and abs(a[1] - b[1]) <= 1
    if mode == "pttl" and isinstance(a[1], int) and isinstance(b[1], int):
        return a[1] < 0 and a[1] == b[1] or a[1] >= 0 and b[1] >= 0 and abs(a[1] - b[1]) <= 250
    return a == b


def compare(scenario, reference_port, keel_port):
    logs = []
    for port in (reference_port, keel_port):
        recorder = Recorder(port)
        try:
            recorder("FLUSHDB", mode="ignore")
            scenario(recorder)
        finally:
            recorder.close()
        logs.append(recorder.log)
    redis_log, keel_log = logs
    differences = []
    for i, (expected, got) in enumerate(zip(redis_log, keel_log)):
        assert expected[0] == got[0], "the scenario ran differently at step %d" % i
        if not same(expected[1], expected[2], got[2]):
            differences.append("step %d %r (%s):\n  redis: %r\n  keel:  %r"
                               % (i, expected[0], expected[1], expected[2], got[2]))
    assert len(redis_log) == len(keel_log)
    assert not differences, "%d differences from redis-server:\n%s" % (len(differences), "\n".join(differences))
    return len(redis_log)


# ---------------------------------------------------------------- scenarios

def strings(r):
    r("SET", "s", "v")
    r("GET", "s")
    r("get", "s")
    r("SET", "s", "w", "NX")
    r("SET", "s", "w", "XX", "GET")
    r("GET", "s")
    r("SET", "n1", "w", "XX")
    r("SET", "n1", "w", "NX", "GET")
    r("SET", "s", "x", "GET", "NX")
    r("SET", "s", "v", "EX", "0")
    r("SET", "s", "v", "EX", "-5")
    r("SET", "s", "v", "PX", "abc")
    r("SET", "s", "v", "EX", "10", "PX", "10")
    r("SET", "s", "v", "EX", "10", "EX", "20")
    r("SET", "s", "v", "KEEPTTL", "EX", "10")
    r("SET", "s", "v", "NX", "XX")
    r("SET", "s", "v", "BOGUS")
    r("SET", "s", "v", "EX")
    r("SET", "s")
    r("GET")
    r("GET", "a", "b")
    r("SETNX", "s", "z")
    r("SETNX", "new1", "z")
    r("GETSET", "s", "new")
    r("GETSET", "missing", "x")
    r("GETDEL", "s")
    r("GETDEL", "s")
    r("MSET", "a", "1", "b", "2", "c", "3")
    r("MSET", "a")
    r("MSET", "a", "1", "b")
    r("MGET", "a", "b", "c", "missing")
    r("MSETNX", "a", "9", "zz", "1")
    r("MSETNX", "y", "1", "z", "2")
    r("MSETNX", "y")
    r("MGET", "y", "z", "zz")
    r("DEL", "a", "b", "missing")
    r("UNLINK", "c")
    r("EXISTS", "a", "y", "y", "z", "missing")
    r("INCR", "cnt")
    r("INCRBY", "cnt", "10")
    r("DECR", "cnt")
    r("DECRBY", "cnt", "3")
    r("INCRBY", "cnt", "abc")
    r("INCRBY", "cnt", "1.5")
    r("INCRBY", "cnt", "9223372036854775807")
    r("DECRBY", "cnt", "-9223372036854775808")
    r("INCRBY", "cnt", "+1")
    r("INCRBY", "cnt", "01")
    r("GET", "cnt")
    r("SET", "notnum", "abc")
    r("INCR", "notnum")
    r("SET", "spaced", " 12")
    r("INCR", "spaced")
    r("SET", "big", "9223372036854775807")
    r("INCR", "big")
    r("SET", "neg", "-9223372036854775808")
    r("DECR", "neg")
    r("APPEND", "ap", "hello")
    r("APPEND", "ap", " world")
    r("GET", "ap")
    r("STRLEN", "ap")
    r("STRLEN", "missing")
    r("SET", "empty", "")
    r("GET", "empty")
    r("STRLEN", "empty")
    r("SET", "bin", b"\x00\r\n\xff")
    r("GET", "bin")
    r("HSET", "h", "f", "v")
    r("GET", "h")
    r("INCR", "h")
    r("INCRBY", "h", "x")
    r("APPEND", "h", "x")
    r("STRLEN", "h")
    r("GETSET", "h", "v")
    r("GETDEL", "h")
    r("SET", "h", "v", "GET")
    r("MGET", "h", "y")
    r("SET", "h", "str")
    r("TYPE", "h")
    r("GET", "h")
    r("SETNX", "s")
    r("DBSIZE")


def expiry(r):
    r("SET", "k", "v", "EX", "100")
    r("TTL", "k", mode="ttl")
    r("PTTL", "k", mode="pttl")
    r("EXPIRE", "k", "200")
    r("TTL", "k", mode="ttl")
    r("EXPIRE", "k", "100", "GT")
    r("EXPIRE", "k", "300", "GT")
    r("EXPIRE", "k", "400", "LT")
    r("EXPIRE", "k", "50", "LT")
    r("EXPIRE", "k", "10", "NX")
    r("EXPIRE", "k", "10", "XX")
    r("TTL", "k", mode="ttl")
    r("EXPIRE", "k", "10", "NX", "XX")
    r("EXPIRE", "k", "10", "GT", "LT")
    r("EXPIRE", "k", "10", "FOO")
    r("EXPIRE", "k", "abc")
    r("EXPIRE", "k")
    r("EXPIRE", "missing", "10")
    r("EXPIRE", "k", "9223372036854775807")
    r("PEXPIRE", "k", "9223372036854775807")
    r("SET", "k", "v", "PX", "9223372036854775807")
    r("SET", "p", "v")
    r("TTL", "p")
    r("PTTL", "p")
    r("EXPIRE", "p", "10", "XX")
    r("EXPIRE", "p", "10", "GT")
    r("PERSIST", "p")
    r("EXPIRE", "p", "100")
    r("PERSIST", "p")
    r("TTL", "p")
    r("PERSIST", "missing")
    r("TTL", "missing")
    r("PTTL", "missing")
    r("EXPIRETIME", "missing")
    r("EXPIRETIME", "p")
    r("EXPIREAT", "p", "4102444800")
    r("EXPIRETIME", "p")
    r("PEXPIRETIME", "p")
    r("PEXPIREAT", "p", "4102444800123")
    r("PEXPIRETIME", "p")
    r("EXPIRETIME", "p")
    r("EXPIRE", "p", "-1")
    r("EXISTS", "p")
    r("SET", "q", "v")
    r("EXPIREAT", "q", "1")
    r("GET", "q")
    r("SET", "r", "v", "PX", "150")
    r("GET", "r")
    time.sleep(0.6)
    r("GET", "r")
    r("EXISTS", "r")
    r("TTL", "r")
    r("SET", "s1", "v", "EX", "100")
    r("SET", "s1", "w")
    r("TTL", "s1")
    r("SET", "s2", "v", "EX", "100")
    r("SET", "s2", "w", "KEEPTTL")
    r("TTL", "s2", mode="ttl")
    r("SET", "c", "1", "EX", "100")
    r("INCR", "c")
    r("APPEND", "c", "0")
    r("TTL", "c", mode="ttl")
    r("SET", "ex", "v", "EXAT", "4102444800")
    r("EXPIRETIME", "ex")
    r("SET", "ex", "v", "PXAT", "4102444800000")
    r("PEXPIRETIME", "ex")
    r("SET", "ex", "v", "EXAT", "0")
    r("SETEX", "se", "100", "v")
    r("TTL", "se", mode="ttl")
    r("SETEX", "se", "0", "v")
    r("SETEX", "se", "x", "v")
    r("PSETEX", "pse", "100000", "v")
    r("PTTL", "pse", mode="pttl")
    r("PSETEX", "pse", "-1", "v")
    r("GETSET", "se", "w")
    r("TTL", "se")
    r("HSET", "hx", "f", "v")
    r("EXPIRE", "hx", "100")
    r("HSET", "hx", "g", "w")
    r("TTL", "hx", mode="ttl")
    r("DBSIZE")


def hashes(r):
    r("HSET", "h", "b", "1", "a", "2")
    r("HSET", "h", "b", "3", "c", "4")
    r("HGETALL", "h")
    r("HKEYS", "h")
    r("HVALS", "h")
    r("HMSET", "h", "d", "5")
    r("HMSET", "h", "d")
    r("HSET", "h", "d")
    r("HSET", "h", "d", "1", "e")
    r("HGET", "h", "d")
    r("HGET", "h", "zz")
    r("HGET", "missing", "a")
    r("HMGET", "h", "a", "zz", "b")
    r("HMGET", "missing", "a", "b")
    r("HLEN", "h")
    r("HLEN", "missing")
    r("HEXISTS", "h", "a")
    r("HEXISTS", "h", "zz")
    r("HSTRLEN", "h", "a")
    r("HSTRLEN", "h", "zz")
    r("HINCRBY", "h", "a", "10")
    r("HINCRBY", "h", "new", "-3")
    r("HINCRBY", "h", "a", "abc")
    r("HINCRBY", "h", "a", "9223372036854775807")
    r("HSET", "h", "s", "x")
    r("HINCRBY", "h", "s", "1")
    r("HINCRBY", "fresh", "f", "5")
    r("HSETNX", "h", "a", "z")
    r("HSETNX", "h", "z", "z")
    r("HGETALL", "h")
    r("HDEL", "h", "a", "b", "zz")
    r("HDEL", "missing", "a")
    r("HGETALL", "h")
    r("HGETALL", "missing")
    r("HKEYS", "missing")
    r("SET", "str", "v")
    r("HGET", "str", "f")
    r("HSET", "str", "f", "v")
    r("HMGET", "str", "f")
    r("HGETALL", "str")
    r("HDEL", "str", "f")
    r("HLEN", "str")
    r("HINCRBY", "str", "f", "1")
    r("HSET", "one", "f", "v")
    r("HDEL", "one", "f", "g")
    r("TYPE", "one")
    r("EXISTS", "one")
    # A long value turns the hash into a table: its order is Redis's hash
    # table's from here on.
    r("HSET", "h", "long", "x" * 65)
    r("HGETALL", "h", mode="pairs")
    r("HLEN", "h")
    fields = []
    for i in range(200):
        fields += ["f%d" % i, "v%d" % i]
    r("HSET", "wide", *fields)
    r("HLEN", "wide")
    r("HGET", "wide", "f150")
    r("HGETALL", "wide", mode="pairs")
    r("HKEYS", "wide", mode="unordered")
    small = []
    for i in range(128):
        small += ["g%d" % i, "v"]
    r("HSET", "edge", *small)
    r("HKEYS", "edge")
    r("HSET", "edge", "g128", "v")
    r("HKEYS", "edge", mode="unordered")
    r("TYPE", "h")


def sets(r):
    r("SADD", "ints", "3", "1", "2", "1", "-7")
    r("SMEMBERS", "ints")
    r("SADD", "ints", "10", "01")
    r("SMEMBERS", "ints", mode="unordered")
    r("SADD", "nums", "5", "4")
    r("SMEMBERS", "nums")
    r("SISMEMBER", "nums", "4")
    r("SISMEMBER", "nums", "04")
    r("SMISMEMBER", "nums", "4", "9", "5")
    r("SMISMEMBER", "missing", "4")
    r("SCARD", "nums")
    r("SREM", "nums", "4", "9")
    r("SMEMBERS", "nums")
    r("SREM", "nums", "5")
    r("EXISTS", "nums")
    r("SADD", "words", "b", "a", "c")
    r("SMEMBERS", "words", mode="unordered")
    r("SISMEMBER", "words", "a")
    r("SCARD", "words")
    r("SREM", "words", "zz")
    r("SMEMBERS", "missing")
    r("SCARD", "missing")
    r("SREM", "missing", "a")
    r("SISMEMBER", "missing", "a")
    r("SADD", "words")
    r("SET", "str", "v")
    r("SADD", "str", "a")
    r("SMEMBERS", "str")
    r("SISMEMBER", "str", "a")
    r("SMISMEMBER", "str", "a")
    r("SCARD", "str")
    r("SREM", "str", "a")
    many = [str(i) for i in range(600)]
    r("SADD", "grow", *many)
    r("SCARD", "grow")
    r("SISMEMBER", "grow", "599")
    r("SMEMBERS", "grow", mode="unordered")
    r("TYPE", "grow")


def keyspace(r):
    r("SET", "user:1", "a")
    r("SET", "user:2", "b")
    r("SET", "user:10", "c")
    r("HSET", "hash:1", "f", "v")
    r("SADD", "set:1", "m")
    r("SET", "{tag}x", "1")
    r("SET", "{tag}y", "2")
    r("TYPE", "user:1")
    r("TYPE", "hash:1")
    r("TYPE", "set:1")
    r("TYPE", "none")
    r("DBSIZE")
    r("DBSIZE", "x")
    r("KEYS", "*", mode="unordered")
    r("KEYS", "user:?", mode="unordered")
    r("KEYS", "user:[12]*", mode="unordered")
    r("KEYS", "*:1", mode="unordered")
    r("KEYS", "nothing*")
    r("KEYS", "\\{tag\\}*", mode="unordered")
    r("SCAN", "abc")
    # The cursor as C's strtoul reads it: a sign, an empty string (0);
    # not a space, a lone sign, or past 64 bits.
    for cursor in ["", "+0", "-0", "007", "-", "+", " 0", "0 ", "18446744073709551616",
                   "-18446744073709551616"]:
        r("SCAN", cursor, "MATCH", "no-such-key*", "COUNT", "100000")
    r("SCAN", "0", "COUNT", "0")
    r("SCAN", "0", "COUNT", "x")
    r("SCAN", "0", "MATCH")
    r("SCAN", "0", "BOGUS", "1")
    for match, kind in ((None, None), ("user:*", None), (None, "hash"), (None, "HASH"), ("*", "string"), (None, "list")):
        seen = []
        cursor = "0"
        for _ in range(1000):
            args = ["SCAN", cursor, "COUNT", "3"]
            if match:
                args += ["MATCH", match]
            if kind:
                args += ["TYPE", kind]
            _, reply = r.conn.call(*args)
            cursor = reply[0].decode()
            seen += reply[1]
            if cursor == "0":
                break
        r.note(("SCAN all", match, kind), sorted(set(seen)))
        r.note(("SCAN no duplicates", match, kind), len(seen) == len(set(seen)))
    r("FLUSHDB", "x")
    r("FLUSHDB", "ASYNC")
    r("DBSIZE")
    r("SET", "a", "1")
    r("FLUSHALL")
    r("DBSIZE")
    r("FLUSHDB", "SYNC")
    r("KEYS", "*")
    r("SCAN", "0")


def transactions(r):
    other = r.other()
    r("MULTI")
    r("SET", "t", "1")
    r("INCR", "t")
    r("GET", "t")
    r("EXEC")
    r("MULTI")
    r("MULTI")
    r("DISCARD")
    r("DISCARD")
    r("EXEC")
    r("MULTI")
    r("SET", "t")
    r("INCR", "t")
    r("EXEC")
    r("GET", "t")
    r("MULTI")
    r("NOSUCHCMD", "x")
    r("EXEC")
    r("MULTI")
    r("SET", "t", "x", "BAD")
    r("INCR", "t")
    r("HSET", "t", "f", "v")
    r("SET", "t2", "v", "EX", "0")
    r("EXEC")
    # Commands that fail their argument checks are answered in their
    # places without the log: alone, and in a transaction a WATCH aborts.
    r("MULTI")
    r("SET", "t", "x", "NX", "XX")
    r("EXPIRE", "t", "x")
    r("EXEC")
    r("WATCH", "t")
    other("SET", "t", "changed")
    r("MULTI")
    r("SET", "t", "x", "BAD")
    r("GET", "t")
    r("EXEC")
    r("MULTI")
    r("PING")
    r("ECHO", "hi")
    r("GET", "t")
    r("SELECT", "0")
    r("EXEC")
    r("MULTI")
    r("EXEC", "foo")
    r("EXEC")
    r("MULTI")
    r("EXEC")
    r("WATCH", "w")
    other("SET", "w", "1")
    r("MULTI")
    r("SET", "w", "2")
    r("EXEC")
    r("GET", "w")
    r("WATCH", "w")
    r("MULTI")
    r("SET", "w", "3")
    r("EXEC")
    r("WATCH", "w")
    r("UNWATCH")
    other("SET", "w", "5")
    r("MULTI")
    r("SET", "w", "6")
    r("EXEC")
    r("MULTI")
    r("WATCH", "w")
    r("SET", "w", "7")
    r("EXEC")
    r("WATCH", "absent")
    other("SET", "absent", "1")
    r("MULTI")
    r("GET", "absent")
    r("EXEC")
    r("WATCH", "gone")
    r("SET", "gone", "1")
    r("WATCH", "gone")
    other("DEL", "gone")
    r("MULTI")
    r("EXEC")
    # A key watched while absent is untouched by another key of its slot
    # going (hash tags put them in one slot), by FLUSHDB, and by the
    # deletion of a key it shares no slot with; its own deletion counts.
    r("SET", "{tag}other", "1")
    r("WATCH", "{tag}lock")
    other("DEL", "{tag}other")
    other("SET", "{tag}more", "1")
    other("EXPIREAT", "{tag}more", "1")
    r("MULTI")
    r("SET", "{tag}lock", "mine")
    r("EXEC")
    r("WATCH", "{tag}lock2")
    other("SET", "{tag}lock2", "x")
    other("DEL", "{tag}lock2")
    r("MULTI")
    r("SET", "{tag}lock2", "mine")
    r("EXEC")
    r("SET", "{f}present", "1")
    r("WATCH", "{f}absent", "unrelated")
    other("FLUSHDB")
    r("MULTI")
    r("SET", "{f}absent", "1")
    r("EXEC")
    r("SET", "{f}present", "1")
    r("WATCH", "{f}present")
    other("FLUSHDB")
    r("MULTI")
    r("SET", "{f}present", "2")
    r("EXEC")
    r("WATCH", "x1", "x2")
    other("SET", "x2", "v")
    r("MULTI")
    r("SET", "x1", "v")
    r("EXEC")
    r("EXISTS", "x1")
    r("WATCH", "w")
    r("MULTI")
    r("DISCARD")
    other("SET", "w", "8")
    r("MULTI")
    r("SET", "w", "9")
    r("EXEC")
    r("WATCH")
    r("MULTI")
    r("WATCH", "a")
    r("DISCARD")
    r("MULTI")
    r("SET", "m1", "a")
    r("SET", "m2", "b")
    r("SET", "{m}3", "c")
    r("MGET", "m1", "m2", "{m}3")
    r("DEL", "m1", "{m}3")
    r("EXEC")
    r("MGET", "m1", "m2", "{m}3")
    # A WATCH abort runs none of the transaction's connection commands
    # (found by test_redis_random_diff.py, seed 537); a transaction that
    # runs renames the connection.
    r("CLIENT", "SETNAME", "kept")
    r("WATCH", "w")
    other("SET", "w", "10")
    r("MULTI")
    r("CLIENT", "SETNAME", "lost")
    r("SET", "w", "11")
    r("CLIENT", "GETNAME")
    r("EXEC")
    r("CLIENT", "GETNAME")
    r("WATCH", "w")
    r("MULTI")
    r("CLIENT", "SETNAME", "")
    r("CLIENT", "GETNAME")
    r("EXEC")
    r("CLIENT", "GETNAME")
    other.close()


def connection(r):
    r("PING")
    r("PING", "hello")
    r("PING", "a", "b")
    r("ECHO", "x")
    r("ECHO")
    r("SELECT", "0")
    r("SELECT", "1")
    r("SELECT", "abc")
    r("SELECT", "-1")
    r("SELECT", "99999999999")
    r("CLIENT", "GETNAME")
    r("CLIENT", "SETNAME", "myname")
    r("CLIENT", "GETNAME")
    r("CLIENT", "SETNAME", "bad name")
    r("CLIENT", "SETNAME", "")
    r("CLIENT", "GETNAME")
    r("CLIENT", "ID", mode="type")
    r("CLIENT")
    r("CLIENT", "FOO")
    r("client", "setname")
    r("CLIENT", "ID", "x")
    r("HELLO", "4")
    r("HELLO", "abc")
    r("HELLO", "2", "FOO")
    r("HELLO", "2", "AUTH", "nobody", "x")
    r("HELLO", "2", "SETNAME", "bad name")
    r("INFO", mode="type")
    r("INFO", "keyspace", mode="type")
    r("COMMAND", "COUNT", mode="type")
    r("COMMAND", "DOCS", "get", mode="type")
    r("COMMAND", "FOO")
    r("TIME", mode="type")
    r("FOO")
    r("FOO", "a", "b")
    r("foo", "x" * 200, "y")
    r("GET", "k", "extra")
    r("READWRITE", mode="ignore")
    # Inline commands, as redis-cli and telnet send them.
    r.raw(b"PING\r\n")
    r.raw(b"SET inl \"a b\\x41\"\r\n")
    r.raw(b"GET inl\r\n")
    r.raw(b"ECHO 'x y'\n")
    r.raw(b"\r\nPING\r\n")
    r.raw(b"*0\r\n*1\r\n$4\r\nPING\r\n")
    r.raw(b"RESET\r\n")
    r("QUIT")
    r.note("closed after QUIT", r.conn.closed())


def resp3(r):
    hello = r("HELLO", "3", mode="ignore")
    fields = dict(hello[1])
    r.note("HELLO 3 fields", sorted(k for k in fields))
    r.note("HELLO 3 proto", fields[b"proto"])
    r.note("HELLO 3 server", fields[b"server"])
    r.note("HELLO 3 version", fields[b"version"])
    r("GET", "missing")
    r("SET", "s", "v")
    r("MGET", "s", "missing")
    r("HSET", "h", "f", "v", "g", "w")
    r("HGETALL", "h")
    r("HGETALL", "missing")
    r("SADD", "set", "2", "1")
    r("SMEMBERS", "set")
    r("SMEMBERS", "missing")
    r("CLIENT", "GETNAME")
    r("INFO", "server", mode="type")
    r("CLIENT", "INFO", mode="type")
    r("WATCH", "s")
    r.other()("SET", "s", "w")
    r("MULTI")
    r("GET", "s")
    r("EXEC")
    r("MULTI")
    r("HGETALL", "h")
    r("SMEMBERS", "set")
    r("EXEC")
    r("SCAN", "0", "MATCH", "nothing*", "COUNT", "1000", mode="type")
    r("HELLO", "2", mode="ignore")
    r("HGETALL", "h")
    r("GET", "missing")


SCENARIOS = [strings, expiry, hashes, sets, keyspace, transactions, connection, resp3]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.__name__ for s in SCENARIOS])
def test_raw_resp_replies_match_redis(reference, kv, scenario):
    steps = compare(scenario, reference.port, kv.port)
    assert steps > 5


PROTOCOL_ERRORS = [
    b"*1\r\n$x\r\n",
    b"*abc\r\n",
    b"*1\r\n:1\r\n",
    b"*1\r\n$-5\r\n",
    b"*2\r\n$3\r\nGET\r\n%1\r\n",
    b"\"unbalanced\r\n",
    b"SET k 'a'b\r\n",
    b"PING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n*1\r\n$x\r\nPING\r\n",
    b"*3\r\n$3\r\nSET\r\n$2\r\npk\r\n$1\r\nv\r\n*2\r\n$3\r\nGET\r\n$2\r\npk\r\n*-3\r\n*2\r\n$3\r\nGET\r\n*1\r\n",
]


@pytest.mark.parametrize("frame", PROTOCOL_ERRORS)
def test_protocol_errors_are_answered_then_closed_like_redis(reference, kv, frame):
    outcomes = []
    for port in (reference.port, kv.port):
        with RespConnection(port) as c:
            c.send(frame)
            outcomes.append(c.replies_until_closed())
    assert outcomes[0] == outcomes[1]
    assert outcomes[1] and outcomes[1][-1].startswith(b"-ERR Protocol error"), outcomes[1]


def test_a_nul_byte_in_an_inline_request_is_refused_at_once(kv):
    """Not compared with redis-server: its strchr never finds the end of
    such a line, so it waits until 64 KB have come and then answers "too
    big inline request". Keel KV answers the requests before it, then
    the protocol error, then closes, without waiting."""
    with RespConnection(kv.port) as c:
        c.send(b"PING\r\nECHO a\x00b\r\nPING\r\n")
        replies = c.replies_until_closed()
    assert replies == [b"+PONG\r\n", b"-ERR Protocol error: NUL byte in inline request\r\n"], replies


def test_a_frame_split_byte_by_byte_is_one_command(kv):
    frame = RespConnection.encode(["SET", "split", "v" * 50]) + RespConnection.encode(["GET", "split"])
    with RespConnection(kv.port) as c:
        for i in range(len(frame)):
            c.send(frame[i:i + 1])
        assert c.reply()[1] == "OK"
        assert c.reply()[1] == b"v" * 50


def pipelined_replies(port, requests):
    """The raw replies of `requests`, sent pipelined (all at once, after a
    FLUSHDB) to the server on `port`."""
    with RespConnection(port) as c:
        c.call("FLUSHDB")
        c.send(b"".join(RespConnection.encode(r) for r in requests))
        return [c.reply()[0] for _ in requests]


def test_pipelined_commands_answer_in_order(reference, kv):
    requests = []
    for i in range(200):
        requests.append(["SET", "p%d" % (i % 7), str(i)])
        requests.append(["GET", "p%d" % (i % 7)])
        requests.append(["INCR", "pc"])
    requests.append(["MGET"] + ["p%d" % i for i in range(7)])
    assert len(requests) == 601
    assert pipelined_replies(reference.port, requests) == pipelined_replies(kv.port, requests)


def test_pipelined_writes_with_errors_between_them_match_redis(reference, kv):
    """Keel proposes a connection's pipelined writes in batches of up to 16
    (`op::PIPELINE_COMMANDS_MAX`, one Raft proposal each): writes that
    fail when applied (WRONGTYPE, not an integer), requests answered on
    arrival between writes (an arity error, PING, an unknown command) and
    runs longer than one batch must answer as redis-server does, in
    order, and leave the same keyspace."""
    requests = []
    for i in range(70):
        requests.append(["SET", "w%d" % (i % 11), "v%d" % i])
        requests.append(["INCR", "n%d" % (i % 3)])
        if i % 4 == 0:
            requests.append(["INCR", "w%d" % (i % 11)])  # not an integer
        if i % 6 == 0:
            requests.append(["HSET", "w%d" % (i % 11), "f", "1"])  # WRONGTYPE
        if i % 9 == 0:
            requests.append(["SET", "only-a-key"])  # arity, answered at once
        if i % 10 == 0:
            requests.append(["PING"])
        if i % 13 == 0:
            requests.append(["NOSUCHCOMMAND", "x"])
        if i % 7 == 0:
            requests.append(["DEL", "w%d" % (i % 5), "n2"])
        requests.append(["APPEND", "log", "%d," % i])
    requests.append(["MGET"] + ["w%d" % i for i in range(11)] + ["n0", "n1", "n2", "log"])
    assert pipelined_replies(reference.port, requests) == pipelined_replies(kv.port, requests)


def write_batches(port):
    """INFO's count of proposals that carried several pipelined writes."""
    with RespConnection(port) as c:
        text = c.call("INFO", "stats")[1].decode()
    return int(re.search(r"^keel_write_batches:(\d+)\r?$", text, re.M).group(1))


PIPELINED_WRITES = [["SET", "b%d" % (i % 5), "v%d" % i] for i in range(40)] + [
    ["INCR", "bn"] for _ in range(40)] + [["MGET"] + ["b%d" % i for i in range(5)] + ["bn"]]


def test_pipelined_writes_are_proposed_in_batches(reference, kv):
    """The counter the rolling-upgrade setting below is checked by moves
    when a connection pipelines writes (in a cluster, on the follower the
    client is connected to, which forwards the batches)."""
    before = write_batches(kv.port)
    assert pipelined_replies(reference.port, PIPELINED_WRITES) == pipelined_replies(kv.port, PIPELINED_WRITES)
    assert write_batches(kv.port) > before


def test_kv_batch_writes_off_proposes_every_write_alone(reference, kv_factory):
    """`kv_batch_writes = false`, for a rolling upgrade from a release that
    cannot apply a batch (README, "Rolling restarts"): the same answers,
    and no proposal carries two writes."""
    target = kv_factory("single", kv_batch_writes=False)
    assert pipelined_replies(reference.port, PIPELINED_WRITES) == pipelined_replies(target.port, PIPELINED_WRITES)
    requests = PIPELINED_WRITES[:-1] * 5 + PIPELINED_WRITES[-1:]
    assert pipelined_replies(reference.port, requests) == pipelined_replies(target.port, requests)
    assert write_batches(target.port) == 0


def test_a_command_pipelined_after_exec_sees_its_connection_commands(reference, kv):
    """A transaction's CLIENT SETNAME runs when the transaction does
    (after the log's reply, on Keel): what the client pipelined behind
    the EXEC must wait for it, aborted by a WATCH or run."""
    script = [["CLIENT", "SETNAME", "before"], ["WATCH", "pw"], ["MULTI"],
              ["CLIENT", "SETNAME", "inside"], ["SET", "pw", "1"], ["EXEC"],
              ["CLIENT", "GETNAME"], ["WATCH", "pw"], ["SET", "pw", "2"], ["MULTI"],
              ["CLIENT", "SETNAME", "aborted"], ["EXEC"], ["CLIENT", "GETNAME"]]
    replies = []
    for port in (reference.port, kv.port):
        with RespConnection(port) as c:
            c.call("FLUSHDB")
            c.send(b"".join(RespConnection.encode(args) for args in script))
            replies.append([c.reply()[0] for _ in script])
    assert replies[0] == replies[1]
    assert replies[1][6] == b"$6\r\ninside\r\n"
    assert replies[1][12] == b"$6\r\ninside\r\n"


def client_fields(line, names=("name", "cmd", "multi", "flags", "resp")):
    """The fields of one CLIENT LIST / CLIENT INFO line named in `names`."""
    fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
    return {name: fields.get(name) for name in names}


def test_client_records_follow_pipelined_commands_like_redis(reference, kv):
    """A connection updates its CLIENT LIST record once a turn: within one
    pipelined batch its own CLIENT INFO and CLIENT LIST must still show
    the name set and the command running, and another connection must see
    the batch's last command once its replies came."""
    seen = []
    for port in (reference.port, kv.port):
        with RespConnection(port) as first, RespConnection(port) as second:
            name = "rec%d" % first.call("CLIENT", "ID")[1]
            first.send(b"".join(RespConnection.encode(args) for args in [
                ["CLIENT", "SETNAME", name], ["SET", "rk", "1"], ["GET", "rk"],
                ["CLIENT", "INFO"], ["INCR", "rk"], ["CLIENT", "LIST"], ["GET", "rk"]]))
            replies = [first.reply()[1] for _ in range(7)]
            own_info = client_fields(replies[3].decode())
            own_list = [client_fields(line) for line in replies[5].decode().splitlines()
                        if "name=%s " % name in line]
            other = [client_fields(line) for line in second.call("CLIENT", "LIST")[1].decode().splitlines()
                     if "name=%s " % name in line]
            for fields in [own_info] + own_list + other:
                fields["name"] = fields["name"] == name
            seen.append((own_info, own_list, other, replies[6]))
    assert seen[0] == seen[1]


def test_total_commands_processed_counts_every_connections_commands_like_redis(reference, kv):
    """INFO's total_commands_processed adds the commands of connections
    served on every shard thread (each counts its own)."""
    counted = []
    for port in (reference.port, kv.port):
        conns = [RespConnection(port) for _ in range(4)]
        try:
            def total():
                info = conns[0].call("INFO", "stats")[1].decode()
                return int(re.search(r"^total_commands_processed:(\d+)\r?$", info, re.M).group(1))
            before = total()
            sent = 0
            for i, conn in enumerate(conns):
                frames = b"".join(RespConnection.encode(["INCR", "tc%d" % j]) for j in range(10 + i))
                conn.send(frames)
                for _ in range(10 + i):
                    conn.reply()
                sent += 10 + i
            counted.append((sent, total() - before))
        finally:
            for conn in conns:
                conn.close()
    assert counted[0] == counted[1]


def test_pipelined_batches_of_many_keys_match_redis(reference, kv):
    """Batches long enough to be prefetched (`Shard::prefetch`: up to 32
    one-key commands at a time, on both shards, the reads handed to the
    other shard's thread and the applied writes too), and multi-key
    commands over more keys than one prefetch takes, against redis-server."""
    keys = ["pk:%03d" % i for i in range(300)] + ["{tag}pk:%d" % i for i in range(40)]
    # Values small enough to sit inside an entry with their key, and not.
    value = lambda i: "v" * (i % 37)  # noqa: E731
    writes = b"".join(RespConnection.encode(["SET", k, value(i)]) for i, k in enumerate(keys))
    writes += b"".join(RespConnection.encode(["INCR", "ctr:%d" % (i % 50)]) for i in range(200))
    writes += RespConnection.encode(["HSET", "hash", "f", "1"])
    reads = []
    for i, k in enumerate(keys):
        reads.append(["GET", k])
        if i % 5 == 0:
            reads.append(["STRLEN", k])
            reads.append(["GET", "absent:%d" % i])
        if i % 9 == 0:
            reads.append(["TYPE", k])
            reads.append(["HGET", "hash", "f"])
    reads.append(["MGET"] + keys[:100] + ["absent"])
    reads.append(["EXISTS"] + keys[100:160])
    reads.append(["MSET"] + [x for i, k in enumerate(keys[:80]) for x in (k, "m%d" % i)])
    reads.append(["DEL"] + keys[200:245])
    reads += [["GET", k] for k in keys]
    reads.append(["MGET"] + ["{tag}pk:%d" % i for i in range(40)])
    frames = b"".join(RespConnection.encode(r) for r in reads)
    replies = []
    for port in (reference.port, kv.port):
        with RespConnection(port) as c:
            c.call("FLUSHDB")
            c.send(writes)
            [c.reply() for _ in range(len(keys) + 201)]
            c.send(frames)
            replies.append([c.reply()[0] for _ in range(len(reads))])
    assert len(replies[0]) == len(reads)
    assert replies[0] == replies[1]


# ---------------------------------------------------------------- redis-py

def redis_py_script(client):
    """What an application does through redis-py; results as comparable values."""
    out = []
    client.flushdb()
    out.append(client.set("a", "1"))
    out.append(client.get("a"))
    out.append(client.set("a", "2", nx=True))
    out.append(client.set("a", "3", xx=True, get=True))
    out.append(client.mset({"b": "x", "c": "y"}))
    out.append(client.mget(["a", "b", "c", "none"]))
    out.append(client.incr("n"))
    out.append(client.incrby("n", 5))
    out.append(client.decr("n"))
    out.append(client.append("b", "z"))
    out.append(client.strlen("b"))
    out.append(client.getdel("c"))
    out.append(client.exists("a", "b", "c"))
    out.append(client.expire("a", 100))
    out.append(abs(client.ttl("a") - 100) <= 1)
    out.append(client.persist("a"))
    out.append(client.ttl("a"))
    out.append(client.hset("h", mapping={"f1": "v1", "f2": "v2"}))
    out.append(client.hgetall("h"))
    out.append(client.hget("h", "f1"))
    out.append(client.hmget("h", ["f1", "nope"]))
    out.append(client.hincrby("h", "cnt", 3))
    out.append(client.hdel("h", "f2"))
    out.append(client.hlen("h"))
    out.append(client.hexists("h", "f1"))
    out.append(client.sadd("s", "x", "y", "z"))
    out.append(sorted(client.smembers("s")))
    out.append(client.sismember("s", "x"))
    out.append(client.srem("s", "x"))
    out.append(client.scard("s"))
    out.append(client.type("h"))
    out.append(sorted(client.scan_iter(match="*", count=2)))
    out.append(sorted(client.keys("*")))
    out.append(client.dbsize())
    with client.pipeline(transaction=True) as pipe:
        pipe.incr("tx")
        pipe.incr("tx")
        pipe.get("tx")
        out.append(pipe.execute())
    with client.pipeline(transaction=True) as pipe:
        pipe.watch("w")
        pipe.multi()
        pipe.set("w", "1")
        out.append(pipe.execute())
    try:
        client.incr("h")
    except Exception as error:  # redis.ResponseError
        out.append(("error", type(error).__name__, str(error)))
    out.append(client.ping())
    out.append(client.echo("hi"))
    out.append(client.client_setname("app"))
    out.append(client.client_getname())
    out.append(client.delete("a", "b", "h", "s", "n", "tx", "w"))
    out.append(client.dbsize())
    return out


@pytest.mark.parametrize("protocol", [2, 3])
def test_redis_py_sees_the_same_results(reference, kv, protocol):
    redis = pytest.importorskip("redis")
    results = []
    for port in (reference.port, kv.port):
        client = redis.Redis(host="127.0.0.1", port=port, protocol=protocol, decode_responses=True)
        try:
            results.append(redis_py_script(client))
        finally:
            client.close()
    assert results[0] == results[1]
