"""ClickHouse Keeper's protocol extensions, spoken on the raw protocol
(harness/zkproto.py) against Keel, one server and a 3-node cluster (the raw
connection goes to a follower there, so the writes are forwarded).

No ClickHouse binary is available to this suite, and ZooKeeper has none of
these requests, so nothing here is differential: the expected bytes and error
codes are ClickHouse Keeper's, read from its sources
(src/Common/ZooKeeper/ZooKeeperCommon.cpp for the wire forms,
src/Coordination/KeeperStorage*.cpp for the semantics; see README.md,
"ClickHouse extensions"):

  * /keeper/feature_flags holds the flag bits ClickHouse's client reads
    (FILTERED_LIST..REMOVE_RECURSIVE: 0xf8 0x00), /keeper/api_version "3";
    `ftfl` prints them; / lists no `keeper` (ZooKeeper compatibility), /keeper
    is read-only (BadArguments);
  * filteredList (500) = getChildren2 of all / persistent / ephemeral children;
  * createIfNotExists (502): success without change on an existing node,
    BadArguments for a sequential one;
  * checkNotExists (501): a read outside multi, a check inside;
  * removeRecursive (503): the subtree or nothing (NotEmpty over the limit),
    a missing node is success;
  * multiRead (22) takes exists, getChildren2 and filteredList too; a failed
    op is reported in ClickHouse's form (own type, no body) to a client that
    read the feature flags, in ZooKeeper's (-1 + ErrorResponse) otherwise.
"""

import socket

import pytest

from conftest import require_keel
from harness import four_letter_word
from harness import zkproto as P
from harness.cluster import make_topology

OK = 0
MARSHALLINGERROR = -5
UNIMPLEMENTED = -6
BADARGUMENTS = -8
NONODE = -101
NODEEXISTS = -110
NOTEMPTY = -111
RUNTIMEINCONSISTENCY = -2

FEATURE_FLAGS = b"\xf8\x00"
FTFL = [
    ("filtered_list", 1), ("multi_read", 1), ("check_not_exists", 1),
    ("create_if_not_exists", 1), ("remove_recursive", 1), ("multi_watches", 0),
    ("check_stat", 0), ("persistent_watches", 0), ("create_with_stats", 0),
    ("try_remove", 0), ("list_with_stat_and_data", 0),
]


@pytest.fixture(scope="module", params=("single", "cluster3"))
def keel(request):
    require_keel()
    server = make_topology("keel", request.param, name="keel-clickhouse-" + request.param)
    failed_before = request.session.testsfailed
    server.start()
    yield server
    try:
        server.stop()
    except Exception:
        server.kill()
    if request.session.testsfailed != failed_before:
        print(server.log_tail(200))
    else:
        server.cleanup()


def ports(server):
    """Every member's client port (one server: its own)."""
    return getattr(server, "ports", [server.port])


def session(server, port=None):
    conn = P.RawConnection(server.port if port is None else port)
    conn.handshake()
    return conn


def clickhouse_session(server, port=None):
    """A session that learnt the extensions as ClickHouse's client does."""
    conn = session(server, port)
    hdr, r = conn.request(P.GET_DATA, P.path_watch_body("/keeper/feature_flags"))
    assert hdr["err"] == OK and r.buf() == FEATURE_FLAGS
    return conn


def create(conn, path, flags=P.PERSISTENT, data=b"v"):
    err, _ = conn.create(path, data, flags)
    assert err == OK, "create %s: %s" % (path, P.error_name(err))


def multi_results(r):
    """Decodes a multi/multiRead reply body: [(type, err, value)]."""
    results = []
    while True:
        op, done, err = r.i32(), r.boolean(), r.i32()
        if done:
            assert (op, err) == (-1, -1) and r.remaining() == 0
            return results
        if op == P.MULTI_ERROR:
            body = r.i32()
            assert body == err, "ErrorResponse %d after header %d" % (body, err)
            results.append((op, err, None))
        elif err != OK:
            results.append((op, err, None))  # ClickHouse's form: no body
        elif op in (P.CREATE, P.CREATE_IF_NOT_EXISTS):
            results.append((op, err, r.ustr()))
        elif op in (P.DELETE, P.CHECK, P.CHECK_NOT_EXISTS, P.REMOVE_RECURSIVE):
            results.append((op, err, None))
        elif op in (P.SET_DATA, P.EXISTS):
            results.append((op, err, r.stat()))
        elif op == P.GET_DATA:
            results.append((op, err, (r.buf(), r.stat())))
        elif op == P.GET_CHILDREN:
            results.append((op, err, r.str_vec()))
        elif op == P.GET_CHILDREN2:
            results.append((op, err, (r.str_vec(), r.stat())))
        else:
            raise AssertionError("unexpected result type %d" % op)


def exists_stat(conn, path):
    hdr, r = conn.request(P.EXISTS, P.path_watch_body(path))
    return r.stat() if hdr["err"] == OK else P.error_name(hdr["err"])


def children(conn, path):
    hdr, r = conn.request(P.GET_CHILDREN, P.path_watch_body(path))
    assert hdr["err"] == OK, P.error_name(hdr["err"])
    return sorted(r.str_vec())


# ---------------------------------------------------------------- /keeper
def test_feature_flags_api_version_and_ftfl(keel):
    with session(keel) as c:
        hdr, r = c.request(P.GET_DATA, P.path_watch_body("/keeper/feature_flags"))
        assert hdr["err"] == OK
        data, stat = r.buf(), r.stat()
        assert data == FEATURE_FLAGS
        assert (stat["dataLength"], stat["czxid"], stat["version"]) == (2, 0, 0)
        hdr, r = c.request(P.GET_DATA, P.path_watch_body("/keeper/api_version"))
        assert (hdr["err"], r.buf()) == (OK, b"3")
        assert children(c, "/keeper") == ["api_version", "feature_flags"]
        assert exists_stat(c, "/keeper")["numChildren"] == 2
    for port in ports(keel):
        lines = four_letter_word(port, b"ftfl").decode().splitlines()
        assert [tuple(line.split("\t")) for line in lines] == [(n, str(v)) for n, v in FTFL]


def test_the_root_lists_no_keeper_as_zookeeper_does(keel):
    with session(keel) as c:
        assert "keeper" not in children(c, "/")
        assert "zookeeper" in children(c, "/")
        root = exists_stat(c, "/")
        assert root["numChildren"] == len(children(c, "/"))
        hdr, r = c.request(P.GET_ALL_CHILDREN_NUMBER, P.ustr("/keeper"))
        assert (hdr["err"], r.i32()) == (OK, 2)


def test_keeper_is_read_only(keel):
    with session(keel) as c:
        writes = [
            (P.CREATE, P.create_body("/keeper")),
            (P.CREATE, P.create_body("/keeper/mine")),
            (P.CREATE_IF_NOT_EXISTS, P.create_body("/keeper/mine")),
            (P.SET_DATA, P.set_data_body("/keeper/api_version", b"9")),
            (P.DELETE, P.delete_body("/keeper/feature_flags")),
            (P.SET_ACL, P.ustr("/keeper") + P.acl_vec(P.WORLD_ALL) + P.i32(-1)),
            (P.REMOVE_RECURSIVE, P.remove_recursive_body("/keeper", 100)),
        ]
        for op, body in writes:
            hdr, _ = c.request(op, body)
            assert hdr["err"] == BADARGUMENTS, (op, P.error_name(hdr["err"]))
        hdr, _ = c.request(P.CREATE, P.create_body("/keeper/mine/deeper"))
        assert hdr["err"] == NONODE
        hdr, r = c.request(P.GET_DATA, P.path_watch_body("/keeper/api_version"))
        assert (hdr["err"], r.buf()) == (OK, b"3")


# ---------------------------------------------------------------- filteredList
def test_filtered_list(keel):
    with session(keel) as c:
        create(c, "/fl")
        create(c, "/fl/persistent")
        create(c, "/fl/ephemeral", P.EPHEMERAL)
        hdr, r = c.request(P.GET_CHILDREN2, P.path_watch_body("/fl"))
        plain = (sorted(r.str_vec()), r.stat())
        got = {}
        for kind in (P.LIST_ALL, P.LIST_PERSISTENT_ONLY, P.LIST_EPHEMERAL_ONLY):
            hdr, r = c.request(P.FILTERED_LIST, P.filtered_list_body("/fl", kind))
            assert hdr["err"] == OK
            got[kind] = (sorted(r.str_vec()), r.stat())
            assert r.remaining() == 0
        assert got[P.LIST_ALL] == plain, "filteredList ALL is getChildren2"
        assert got[P.LIST_PERSISTENT_ONLY][0] == ["persistent"]
        assert got[P.LIST_EPHEMERAL_ONLY][0] == ["ephemeral"]
        hdr, _ = c.request(P.FILTERED_LIST, P.filtered_list_body("/fl-missing"))
        assert hdr["err"] == NONODE
        # A type byte ClickHouse never sends: a marshalling error, and the
        # session goes on.
        hdr, _ = c.request(P.FILTERED_LIST, P.ustr("/fl") + P.boolean(False) + b"\x07")
        assert hdr["err"] == MARSHALLINGERROR
        assert c.ping()["err"] == OK


def test_filtered_list_leaves_a_child_watch(keel):
    with session(keel) as c, session(keel) as writer:
        create(c, "/flw")
        hdr, _ = c.request(P.FILTERED_LIST, P.filtered_list_body("/flw", P.LIST_EPHEMERAL_ONLY, True))
        assert hdr["err"] == OK
        create(writer, "/flw/x")
        event = c.read_notification()
        assert (event["type"], event["path"]) == (4, "/flw")  # NodeChildrenChanged


# ---------------------------------------------------------------- createIfNotExists
def test_create_if_not_exists(keel):
    with session(keel) as c:
        create(c, "/cine")
        hdr, r = c.request(P.CREATE_IF_NOT_EXISTS, P.create_body("/cine/a", b"first"))
        assert (hdr["err"], r.ustr()) == (OK, "/cine/a")
        before = exists_stat(c, "/cine")
        hdr, r = c.request(P.CREATE_IF_NOT_EXISTS, P.create_body("/cine/a", b"second"))
        assert (hdr["err"], r.ustr()) == (OK, "/cine/a")
        assert exists_stat(c, "/cine") == before, "an existing node changes nothing"
        hdr, r = c.request(P.GET_DATA, P.path_watch_body("/cine/a"))
        assert r.buf() == b"first"
        for flags in (P.PERSISTENT_SEQUENTIAL, P.EPHEMERAL_SEQUENTIAL):
            hdr, _ = c.request(P.CREATE_IF_NOT_EXISTS, P.create_body("/cine/s-", flags=flags))
            assert hdr["err"] == BADARGUMENTS
        hdr, _ = c.request(P.CREATE_IF_NOT_EXISTS, P.create_body("/cine-missing/a"))
        assert hdr["err"] == NONODE
        hdr, r = c.request(P.CREATE_IF_NOT_EXISTS, P.create_body("/cine/e", flags=P.EPHEMERAL))
        assert hdr["err"] == OK
        assert exists_stat(c, "/cine/e")["ephemeralOwner"] == c.session_id


# ---------------------------------------------------------------- checkNotExists
def test_check_not_exists_outside_a_multi(keel):
    with session(keel) as c:
        create(c, "/cne")
        cases = [("/cne", -1, NODEEXISTS), ("/cne", 0, NODEEXISTS), ("/cne", 7, OK),
                 ("/cne/none", -1, OK), ("/keeper/api_version", -1, NODEEXISTS)]
        for path, version, want in cases:
            hdr, r = c.request(P.CHECK_NOT_EXISTS, P.check_body(path, version))
            assert (hdr["err"], r.remaining()) == (want, 0), (path, version)


# ---------------------------------------------------------------- removeRecursive
def test_remove_recursive(keel):
    with session(keel) as c, session(keel) as watcher:
        for path in ("/rr", "/rr/a", "/rr/a/b", "/rr/a/b/c", "/rr/d"):
            create(c, path)
        hdr, _ = watcher.request(P.GET_DATA, P.path_watch_body("/rr/a/b/c", True))
        assert hdr["err"] == OK
        hdr, _ = watcher.request(P.GET_CHILDREN, P.path_watch_body("/", True))
        assert hdr["err"] == OK
        for limit in (0, 1, 4):
            hdr, _ = c.request(P.REMOVE_RECURSIVE, P.remove_recursive_body("/rr", limit))
            assert hdr["err"] == NOTEMPTY, limit
        assert children(c, "/rr") == ["a", "d"], "nothing went"
        root = exists_stat(c, "/")
        hdr, r = c.request(P.REMOVE_RECURSIVE, P.remove_recursive_body("/rr", 5))
        assert (hdr["err"], r.remaining()) == (OK, 0)
        assert exists_stat(c, "/rr") == "NONODE"
        after = exists_stat(c, "/")
        assert after["numChildren"] == root["numChildren"] - 1
        assert after["cversion"] == root["cversion"] + 1
        assert after["pzxid"] == hdr["zxid"]
        events = [watcher.read_notification() for _ in range(2)]
        assert sorted((e["type"], e["path"]) for e in events) == [(2, "/rr/a/b/c"), (4, "/")]
        for path, want in (("/rr", OK), ("/rr/x/y", OK), ("/", BADARGUMENTS),
                           ("/zookeeper", BADARGUMENTS), ("/rr/", BADARGUMENTS)):
            hdr, _ = c.request(P.REMOVE_RECURSIVE, P.remove_recursive_body(path, 10))
            assert hdr["err"] == want, path
        # The limit is unsigned: 2^32-1 is a large limit, not -1.
        create(c, "/rr2")
        hdr, _ = c.request(P.REMOVE_RECURSIVE, P.remove_recursive_body("/rr2", 0xFFFFFFFF))
        assert hdr["err"] == OK


# ---------------------------------------------------------------- multi
def test_multi_with_clickhouse_ops(keel):
    with session(keel) as c:
        create(c, "/m")
        create(c, "/m/old")
        create(c, "/m/old/x")
        ops = [
            (P.CHECK_NOT_EXISTS, P.check_body("/m/new", -1)),
            (P.CREATE_IF_NOT_EXISTS, P.create_body("/m/new")),
            (P.CREATE_IF_NOT_EXISTS, P.create_body("/m/new")),
            (P.REMOVE_RECURSIVE, P.remove_recursive_body("/m/old", 2)),
            (P.CHECK, P.check_body("/m", -1)),
        ]
        hdr, r = c.request(P.MULTI, P.multi_body(ops))
        assert hdr["err"] == OK
        assert multi_results(r) == [
            (P.CHECK_NOT_EXISTS, OK, None),
            (P.CREATE_IF_NOT_EXISTS, OK, "/m/new"),
            (P.CREATE_IF_NOT_EXISTS, OK, "/m/new"),
            (P.REMOVE_RECURSIVE, OK, None),
            (P.CHECK, OK, None),
        ]
        assert children(c, "/m") == ["new"]
        # All or nothing: the failing check undoes the create before it.
        failing = [
            (P.CREATE_IF_NOT_EXISTS, P.create_body("/m/other")),
            (P.CHECK_NOT_EXISTS, P.check_body("/m/new", 0)),
            (P.REMOVE_RECURSIVE, P.remove_recursive_body("/m/new", 1)),
        ]
        hdr, r = c.request(P.MULTI, P.multi_body(failing))
        assert hdr["err"] == OK
        assert multi_results(r) == [(-1, OK, None), (-1, NODEEXISTS, None),
                                    (-1, RUNTIMEINCONSISTENCY, None)]
        assert children(c, "/m") == ["new"]
        hdr, r = c.request(P.MULTI, P.multi_body([(P.REMOVE_RECURSIVE, P.remove_recursive_body("/keeper", 9))]))
        assert multi_results(r) == [(-1, BADARGUMENTS, None)]


def test_clickhouse_reads_are_unknown_inside_a_write_multi(keel):
    """As ZooKeeper answers an op it does not know inside a multi: the multi
    does not deserialize (MarshallingError) and the session goes on."""
    with session(keel) as c:
        for op, body in ((P.FILTERED_LIST, P.filtered_list_body("/")),
                         (P.EXISTS, P.path_watch_body("/")),
                         (504, P.check_body("/"))):
            hdr, _ = c.request(P.MULTI, P.multi_body([(op, body)]))
            assert hdr["err"] == MARSHALLINGERROR, op
        assert c.ping()["err"] == OK
        # Outside a multi, an op code Keel does not know closes the
        # connection after Unimplemented, as ZooKeeper does.
        hdr, _ = c.request(504, P.check_body("/"))
        assert hdr["err"] == UNIMPLEMENTED
        closed, _ = c.wait_closed(5)
        assert closed


# ---------------------------------------------------------------- multiRead
def multi_read(conn, ops):
    hdr, r = conn.request(P.MULTI_READ, P.multi_body(ops))
    assert hdr["err"] == OK, P.error_name(hdr["err"])
    return multi_results(r)


def multi_read_ops():
    return [
        (P.GET_DATA, P.path_watch_body("/mr")),
        (P.GET_DATA, P.path_watch_body("/mr/none")),
        (P.EXISTS, P.path_watch_body("/mr")),
        (P.EXISTS, P.path_watch_body("/mr/none")),
        (P.GET_CHILDREN, P.path_watch_body("/mr")),
        (P.GET_CHILDREN2, P.path_watch_body("/mr")),
        (P.FILTERED_LIST, P.filtered_list_body("/mr", P.LIST_EPHEMERAL_ONLY)),
        (P.FILTERED_LIST, P.filtered_list_body("/mr/none")),
    ]


def test_multi_read_in_both_forms(keel):
    with session(keel) as c:
        create(c, "/mr", data=b"d")
        create(c, "/mr/p")
        create(c, "/mr/e", P.EPHEMERAL)
        stat = exists_stat(c, "/mr")
        # A client that never read the feature flags: ZooKeeper's form.
        got = multi_read(c, multi_read_ops())
        assert got == [
            (P.GET_DATA, OK, (b"d", stat)),
            (-1, NONODE, None),
            (P.EXISTS, OK, stat),
            (-1, NONODE, None),
            (P.GET_CHILDREN, OK, ["e", "p"]),
            (P.GET_CHILDREN2, OK, (["e", "p"], stat)),
            (P.GET_CHILDREN2, OK, (["e"], stat)),
            (-1, NONODE, None),
        ]
    with clickhouse_session(keel) as ch:
        got = multi_read(ch, multi_read_ops())
        # ClickHouse's form: the op's own reply type, the code, no body
        # (a filteredList is answered by a list, type 12).
        assert [g[:2] for g in got] == [
            (P.GET_DATA, OK), (P.GET_DATA, NONODE), (P.EXISTS, OK), (P.EXISTS, NONODE),
            (P.GET_CHILDREN, OK), (P.GET_CHILDREN2, OK), (P.GET_CHILDREN2, OK),
            (P.GET_CHILDREN2, NONODE),
        ]


def test_writes_inside_multi_read_are_refused(keel):
    with clickhouse_session(keel) as c:
        only_writes = [(P.CREATE_IF_NOT_EXISTS, P.create_body("/mrw"))]
        hdr, _ = c.request(P.MULTI_READ, P.multi_body(only_writes))
        assert hdr["err"] == MARSHALLINGERROR
        mixed = [(P.GET_DATA, P.path_watch_body("/")),
                 (P.REMOVE_RECURSIVE, P.remove_recursive_body("/mrw", 1))]
        hdr, _ = c.request(P.MULTI_READ, P.multi_body(mixed))
        assert hdr["err"] == MARSHALLINGERROR
        assert exists_stat(c, "/mrw") == "NONODE"
        assert c.ping()["err"] == OK


# ---------------------------------------------------------------- cluster
def test_every_member_agrees(keel):
    """The writes above went through the log: every member holds them, and
    answers the extensions alike."""
    with session(keel) as c:
        create(c, "/agree")
        hdr, _ = c.request(P.CREATE_IF_NOT_EXISTS, P.create_body("/agree/a"))
        assert hdr["err"] == OK
        hdr, _ = c.request(P.REMOVE_RECURSIVE, P.remove_recursive_body("/agree/a", 1))
        assert hdr["err"] == OK
    if hasattr(keel, "wait_converged"):
        keel.wait_converged()
    answers = []
    for port in ports(keel):
        with session(keel, port) as c:
            hdr, r = c.request(P.FILTERED_LIST, P.filtered_list_body("/agree"))
            answers.append((hdr["err"], r.str_vec(), r.stat()))
    assert all(a == answers[0] for a in answers), answers
    assert answers[0][:2] == (OK, [])


def test_server_still_serves(keel):
    with session(keel) as c:
        assert c.ping()["err"] == OK
    assert four_letter_word(keel.port, b"ruok") == b"imok"
    with socket.create_connection(("127.0.0.1", keel.port), timeout=5):
        pass
