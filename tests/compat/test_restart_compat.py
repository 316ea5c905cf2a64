"""Differential test across a clean server restart (SIGTERM, same port, same
data dir): sessions, ephemerals, data and zxids survive; clients reconnect
with their session id and lastZxidSeen; a raw client re-arms its watches
with SetWatches and receives the events it missed.

Keel runs as one server and as a 3-node cluster; the cluster is restarted as
a whole (every node SIGTERMed, then all started again: a full-service restart,
the case a standalone ZooKeeper restart corresponds to). The kazoo client gets
the connect string of all three nodes, the raw connections go to one node
(the cluster's primary). The reference is one standalone ZooKeeper, run once
per module."""

import os
import time

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

from harness import zkproto as P
from harness.trace import Trace

from compat.topology import compare_traces


def wait_connected(client, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.connected and client.states and client.states[-1] == "CONNECTED":
            return True
        time.sleep(0.05)
    return False


def suspensions_merged(states):
    """Kazoo states (consecutive repeats already dropped) with a connection
    between two suspensions folded away: C S C S C -> C S C. A cluster's
    members get their SIGTERM one after another, so a client moved off the
    first can land on one that is about to stop and move once more (seen
    under the parallel test group's load). What the scenario checks stays
    visible: suspended, never LOST, connected again."""
    merged = []
    for state in states:
        if state == "SUSPENDED" and merged[-2:] == ["SUSPENDED", "CONNECTED"]:
            merged.pop()  # back into the same suspension
            continue
        merged.append(state)
    return merged


def raw_sync(conn):
    """`sync` on a raw connection: its server catches up with the leader, and
    the notifications for what it applies meanwhile precede the reply (needed
    when the raw session is on another cluster node than the kazoo client that
    wrote; a no-op on one server)."""
    conn.request(P.SYNC, P.ustr("/"))


def scenario(server, trace):
    rec, call = trace.record, trace.call
    retry = KazooRetry(max_tries=-1, delay=0.1, backoff=1, max_delay=0.2)
    a = KazooClient(hosts=server.address, timeout=10, connection_retry=retry)
    a.states = []
    a.add_listener(lambda st: a.states.append(str(st)))
    a.start(timeout=20)
    trace.register_session("A", a.client_id[0])
    call("create /r", a.create, "/r", b"r")
    call("create /r/p", a.create, "/r/p", b"0")
    call("create ephemeral /r/e", a.create, "/r/e", b"e", ephemeral=True)
    call("create seq", a.create, "/r/s-", b"", sequence=True)
    w = P.RawConnection(server.port)
    r = w.handshake(timeout_ms=10000)
    trace.register_session("W", r["sessionId"])
    hdr, _ = w.request(P.GET_DATA, P.path_watch_body("/r/p", True))
    hdr, _ = w.request(P.EXISTS, P.path_watch_body("/r/new", True))
    hdr, _ = w.request(P.GET_CHILDREN, P.path_watch_body("/r", True))
    last_zxid = hdr["zxid"]
    sid, pw = w.session_id, w.passwd
    w.close()  # connection gone, session alive
    session_a = a.client_id

    trace.exit_code_after_sigterm = server.stop()  # not compared: ZooKeeper's JVM exits 143
    server.start()

    rec("kazoo A reconnected", wait_connected(a))
    states = [s for i, s in enumerate(a.states) if i == 0 or a.states[i - 1] != s]
    if "," in server.address:  # a cluster (the reference is one server)
        states = suspensions_merged(states)
    rec("kazoo A states", states)
    rec("kazoo A kept its session", a.client_id == session_a)
    call("ephemeral of A survived the restart", a.exists, "/r/e")
    call("data survived", a.get, "/r/p")
    call("children survived", lambda: sorted(a.get_children("/r")))
    call("sequence continues after restart", a.create, "/r/s-", b"", sequence=True)
    call("stat /r after restart", a.exists, "/r")

    w = P.RawConnection(server.port)
    resp = w.handshake(timeout_ms=10000, session_id=sid, passwd=pw, last_zxid=last_zxid)
    rec("raw W resumes its session after restart", {"sessionId": resp["sessionId"], "timeOut": resp["timeOut"]})

    def vec(paths):
        return P.i32(len(paths)) + b"".join(P.ustr(x) for x in paths)

    call("A sets /r/p while W is away", a.set, "/r/p", b"1")
    raw_sync(w)  # so that W's server has applied A's set when it checks the watches
    hdr, _ = w.request(P.SET_WATCHES, P.i64(last_zxid) + vec(["/r/p"]) + vec(["/r/new"]) + vec(["/r"]),
                       xid=P.XID_SET_WATCHES)
    rec("W setWatches", P.error_name(hdr["err"]))
    w.ping()
    rec("W events right after setWatches", w.notifications[:])
    del w.notifications[:]
    call("A creates /r/new", a.create, "/r/new", b"")
    raw_sync(w)
    w.ping()
    rec("W events after /r/new created", w.notifications[:])
    rec("W close", P.error_name(w.close_session()))
    w.close()

    # a client that has seen a zxid the server does not have is refused
    x = P.RawConnection(server.port)
    try:
        resp = x.handshake(timeout_ms=10000, last_zxid=last_zxid + (1 << 40))
        rec("connect with lastZxidSeen from the future", {"timeOut": resp["timeOut"]})
    except (P.Closed, OSError) as e:
        rec("connect with lastZxidSeen from the future", {"refused": type(e).__name__})
    finally:
        x.close()

    a.stop()
    a.close()
    b = KazooClient(hosts=server.address, timeout=10)
    b.start(timeout=20)
    b.sync("/")  # B reads what A's session close did
    call("A's ephemeral removed after A closed", b.exists, "/r/e")
    b.stop()
    b.close()


def run(server, name):
    t = Trace(name)
    scenario(server, t)
    return t


def test_restart_matches_zookeeper(servers, candidate, keel_topology, zk_reference):
    ref, zk = zk_reference("restart", lambda zk: run(zk, "zookeeper"), name="zk-restart")
    other = servers(candidate, topology=keel_topology, name="%s-restart-%s" % (candidate, keel_topology))
    got = run(other, candidate)
    p1, p2 = zk.workdir + "-trace.json", other.workdir + "-trace.json"
    ref.dump(p1)
    got.dump(p2)
    differences = compare_traces("restart", candidate, keel_topology, ref.normalised(), got.normalised())
    if candidate == "keel" and got.exit_code_after_sigterm != 0:
        differences.append("keel (%s) exited with status %r on SIGTERM (contract: clean exit, 0)"
                           % (keel_topology, got.exit_code_after_sigterm))
    assert not differences, ("%d step(s) of the restart scenario differ (%s %s; traces %s, %s):\n%s"
                             % (len(differences), candidate, keel_topology, p1, p2, "\n".join(differences)))
