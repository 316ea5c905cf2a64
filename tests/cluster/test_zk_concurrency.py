"""ZooKeeper's ordering guarantees under concurrent clients, on real
processes: Keel's connection tasks run on several threads and its apply
step on another, which the simulator (one thread) does not show.

- A client sees a watch event before any reply that shows the change
  (ZooKeeper's programmer's guide: "a client will see a watch event for a
  znode it is watching before seeing the new data"): watchers pipeline
  getData requests while a writer keeps setting the znode.
- A multi is seen whole, and one session's reads never go back: a writer
  sets /a and /b to the same growing value in each multi; readers pipeline
  getData of both, and every value read is at least every value read
  before it on the session.

Each runs against Keel (one node, and three with the clients on every
member) and against Apache ZooKeeper 3.8 (one server), whose run checks
that the test asks only what ZooKeeper gives. KEEL_ZK_CONCURRENCY_SECONDS
sets the length of each load (default 4)."""

import os
import threading
import time

import pytest

from conftest import report_summary
from harness import zkproto as P

SECONDS = float(os.environ.get("KEEL_ZK_CONCURRENCY_SECONDS", "4"))
WATCHERS = 3
READERS = 3
# getData requests one watcher or reader sends in one write.
PIPELINE = 8

SYSTEMS = [("keel", "single"), ("keel", "cluster3"), ("zookeeper", "single")]


class System:
    """The servers under test: `name` (e.g. keel-cluster3) and every
    member's client port."""

    def __init__(self, name, ports):
        self.name = name
        self.ports = ports


@pytest.fixture(params=SYSTEMS, ids=["-".join(s) for s in SYSTEMS])
def system(request, servers):
    kind, topology = request.param
    server = servers(kind, topology=topology)
    return System("-".join(request.param), list(getattr(server, "ports", None) or [server.port]))


def session(port):
    c = P.RawConnection(port, timeout=10.0)
    c.handshake(timeout_ms=10000)
    return c


def get_data(path, watch, xid):
    return P.i32(xid) + P.i32(P.GET_DATA) + P.path_watch_body(path, watch)


def replies(c, xids):
    """Reads frames until every xid in `xids` is answered: yields
    ("event", path) for a notification, ("reply", xid, data, stat)."""
    waiting = set(xids)
    while waiting:
        r = P.Reader(c.read_frame())
        xid, _zxid, err = r.i32(), r.i64(), r.i32()
        if xid == P.XID_NOTIFICATION:
            _type, _state, path = r.i32(), r.i32(), r.ustr()
            yield ("event", path)
            continue
        assert err == 0, "xid %d answered error %d" % (xid, err)
        assert xid in waiting, "a reply to xid %d, not in flight" % xid
        waiting.discard(xid)
        yield ("reply", xid, r.buf(), r.stat())


def keep_writing(port, deadline, request):
    """Sends `request(value)` ((opcode, body)) for value 1, 2, ... on one
    session until `deadline`, each answered before the next; the last
    value written."""
    with session(port) as c:
        value = 0
        while time.monotonic() < deadline:
            value += 1
            hdr, _ = c.request(*request(value))
            assert hdr["err"] == 0, hdr
    return value


def run_clients(targets, errors):
    threads = [threading.Thread(target=target, args=args, daemon=True) for target, args in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(SECONDS + 60)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), "a client hung"


def test_a_watch_event_comes_before_any_reply_that_shows_the_change(system):
    ports = system.ports
    with session(ports[0]) as c:
        assert c.create("/w", b"0")[0] == 0
    deadline = time.monotonic() + SECONDS
    errors = []
    counts = {"writes": 0, "events": 0, "replies": 0, "before": 0}
    lock = threading.Lock()

    def writer():
        try:
            written = keep_writing(ports[0], deadline,
                                   lambda value: (P.SET_DATA, P.set_data_body("/w", str(value).encode())))
            with lock:
                counts["writes"] = written
        except Exception as error:
            errors.append("writer: %r" % error)

    def watcher(index):
        try:
            with session(ports[index % len(ports)]) as c:
                xid = 0
                while time.monotonic() < deadline:
                    # Set the watch; its reply gives the version watched.
                    xid += 1
                    c.send_raw(P.frame(get_data("/w", True, xid)))
                    got = list(replies(c, [xid]))
                    assert [g[0] for g in got] == ["reply"], "an event with no watch set: %r" % got
                    watched = got[0][3]["version"]
                    seen_event = False
                    newest = watched
                    # Read on until the watch fires: no reply may show a
                    # version past the watched one before its event.
                    while not seen_event and time.monotonic() < deadline:
                        batch = list(range(xid + 1, xid + 1 + PIPELINE))
                        xid += PIPELINE
                        c.send_raw(b"".join(P.frame(get_data("/w", False, x)) for x in batch))
                        for got in replies(c, batch):
                            if got[0] == "event":
                                assert got[1] == "/w", got
                                seen_event = True
                                continue
                            version = got[3]["version"]
                            assert seen_event or version == watched, (
                                "a reply showed version %d of /w before the event of the watch set at "
                                "version %d" % (version, watched))
                            assert version >= newest, "a read went back from %d to %d" % (newest, version)
                            newest = version
                            with lock:
                                counts["replies"] += 1
                                counts["before"] += int(not seen_event)
                    with lock:
                        counts["events"] += int(seen_event)
        except Exception as error:
            errors.append("watcher %d: %r" % (index, error))

    run_clients([(writer, ())] + [(watcher, (i,)) for i in range(WATCHERS)], errors)
    assert counts["events"] >= 10 and counts["writes"] >= 10, counts
    # The race the check is about happened: reads answered while a watch
    # was set and its event not yet received.
    assert counts["before"] >= 10, counts
    line = ("watch order under load (%s): %d writes, %d watch events, %d pipelined reads (%d of them "
            "while a watch was pending): no reply showed a change before its event" % (
                system.name, counts["writes"], counts["events"], counts["replies"], counts["before"]))
    print("\n" + line)
    report_summary(line)


def test_a_multi_is_read_whole_and_a_sessions_reads_never_go_back(system):
    ports = system.ports
    with session(ports[0]) as c:
        for path in ("/a", "/b"):
            assert c.create(path, b"0")[0] == 0
    deadline = time.monotonic() + SECONDS
    errors = []
    counts = {"multis": 0, "reads": 0}
    lock = threading.Lock()

    def both(value):
        """A multi setting /a and /b to `value`."""
        data = str(value).encode()
        return P.MULTI, P.multi_body([(P.SET_DATA, P.set_data_body(path, data)) for path in ("/a", "/b")])

    def writer():
        try:
            written = keep_writing(ports[0], deadline, both)
            with lock:
                counts["multis"] = written
        except Exception as error:
            errors.append("writer: %r" % error)

    def reader(index):
        try:
            with session(ports[index % len(ports)]) as c:
                xid = 0
                newest = 0
                while time.monotonic() < deadline:
                    paths = ["/a", "/b", "/b", "/a"] * (PIPELINE // 4)
                    batch = list(range(xid + 1, xid + 1 + len(paths)))
                    xid += len(paths)
                    c.send_raw(b"".join(P.frame(get_data(p, False, x)) for p, x in zip(paths, batch)))
                    values = {}
                    for got in replies(c, batch):
                        assert got[0] == "reply", got
                        values[got[1]] = int(got[2])
                    # Replies come in request order; so must their states.
                    for x in batch:
                        assert values[x] >= newest, "a read went back from %d to %d: %r" % (
                            newest, values[x], [values[y] for y in batch])
                        newest = values[x]
                    with lock:
                        counts["reads"] += len(batch)
        except Exception as error:
            errors.append("reader %d: %r" % (index, error))

    run_clients([(writer, ())] + [(reader, (i,)) for i in range(READERS)], errors)
    assert counts["multis"] >= 10 and counts["reads"] >= 100, counts
    line = ("multi under load (%s): %d multis, %d pipelined reads: none went back" % (
        system.name, counts["multis"], counts["reads"]))
    print("\n" + line)
    report_summary(line)
