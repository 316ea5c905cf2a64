"""The differential compatibility scenario (kazoo + raw protocol).

`run_scenario(make_client, trace)` performs many operations against whatever
server `make_client` connects to and records every observable result into
`trace` (see harness.trace). The same function runs against Apache ZooKeeper
and against Keel; the normalised traces must be equal.

Rules for writing steps:
  * everything observable goes through trace.call / trace.record;
  * children lists are sorted (ZooKeeper documents no order);
  * watch notifications are read with client.take_events(expect=N): one round
    trip + callback barrier, so the order is the order on the wire;
  * time-dependent effects (expiry, container/TTL deletion) are recorded as the
    outcome of a bounded poll, never as timings;
  * `make_client` may stand for a cluster (every client gets a connect string
    listing all members and lands on a random one), so ZooKeeper's ensemble
    guarantees are all the scenario may rely on: a session reads its own
    writes and never goes back in time, but before it reads what ANOTHER
    session wrote it calls xsync() (a `sync`: its server catches up with the
    leader; a no-op on a standalone server, done there too so both sides run
    the same scenario). take_events() syncs first for the same reason. Raw
    connections all go to one member (make_client.port) unless they must be
    on the member of a given client (make_client.port_of(client)).
"""

import re
import time

from kazoo.security import ACL, Id, make_digest_acl, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE
from kazoo.exceptions import NoNodeError

from kazoo.retry import KazooRetry

from harness import four_letter_word, SUPER_PASSWORD
from harness.proxy import TcpProxy
from harness import zkproto as P
from harness.kazoo_ext import (
    ClientFactory, RecordingClient,
    AddWatch, CheckWatches, CreateContainer, CreateTTL, GetAllChildrenNumber, GetEphemerals,
    RemoveWatches, call_ext, ADD_WATCH_PERSISTENT, ADD_WATCH_PERSISTENT_RECURSIVE,
    TTL_FLAG, TTL_SEQUENTIAL_FLAG, WATCHER_ANY, WATCHER_CHILDREN, WATCHER_DATA,
)

B = "/compat"


def sorted_children(client, path, **kw):
    r = client.get_children(path, **kw)
    if isinstance(r, tuple):
        return sorted(r[0]), r[1]
    return sorted(r)


def poll_gone(client, path, timeout=6.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.exists(path) is None:
            return "gone"
        time.sleep(0.05)
    return "still there after %.0fs" % timeout


def poll_still_there(client, path, duration=1.0):
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        if client.exists(path) is None:
            return "gone"
        time.sleep(0.05)
    return "still there"


def raw_reply(hdr, r=None, body=None):
    """A raw reply as a trace value: error name, zxid (normalised later)."""
    out = {"err": P.error_name(hdr["err"]), "xid": hdr["xid"], "zxid": hdr["zxid"]}
    if body is not None:
        out["body"] = body
    return out


class SyncingClient(RecordingClient):
    """A RecordingClient whose flush() (the barrier of take_events) starts with
    a `sync`: on a cluster the notifications for another session's write are
    sent by this session's server only once that server has applied the write,
    which the writer's reply does not wait for; after a sync it has, and the
    notifications precede the sync's reply on the wire. On a standalone server
    the sync changes nothing."""

    def flush(self):
        try:
            self.sync("/")
        except Exception:
            pass
        super().flush()


class ScenarioClients(ClientFactory):
    """The `make_client` of run_scenario: make_client(name, **kazoo_kwargs) ->
    started SyncingClient connected to `server.address` (for a ServerGroup: the
    connect string listing every member), its session registered with the
    trace. Also:
      port            where raw-protocol connections go (a group's primary member);
      ports           every member's client port ([port] for one server);
      port_of(client) the client port of the server `client` is connected to."""

    client_class = SyncingClient

    @property
    def ports(self):
        return list(getattr(self.server, "ports", [self.server.port]))

    def port_of(self, client):
        return client._connection._socket.getpeername()[1]



def xsync(*clients):
    """Before a session reads what another session wrote: `sync` (see the module
    docstring). Not recorded; a failure shows in the read that follows."""
    for c in clients:
        try:
            c.sync("/")
        except Exception:
            pass


def run_scenario(make_client, trace):
    call, rec = trace.call, trace.record
    a = make_client("A")
    b = make_client("B")

    # ------------------------------------------------------------ basics
    call("exists missing base", a.exists, B)
    call("create base", a.create, B, b"base", include_data=True)
    call("create base again (NodeExists)", a.create, B, b"again")
    call("create under missing parent (NoNode)", a.create, B + "/missing/child", b"")
    call("get base", a.get, B)
    call("get_children base (empty)", sorted_children, a, B, include_data=True)
    call("create null data", a.create, B + "/null", None, include_data=True)
    call("get null data", a.get, B + "/null")
    call("create empty data", a.create, B + "/empty", b"", include_data=True)
    call("get empty data", a.get, B + "/empty")
    call("create binary data", a.create, B + "/bin", bytes(range(256)), include_data=True)
    call("get binary data", a.get, B + "/bin")
    call("create unicode name", a.create, B + "/\u00e9t\u00e9-\u65e5\u672c", "\u2603".encode(), include_data=True)
    call("get unicode name", a.get, B + "/\u00e9t\u00e9-\u65e5\u672c")
    call("makepath create", a.create, B + "/deep/er/est", b"d", makepath=True)
    call("stat deep", a.exists, B + "/deep")
    call("stat deeper", a.exists, B + "/deep/er")

    # ------------------------------------------------------------ versions & stats
    p = B + "/p"
    call("create p", a.create, p, b"v0", include_data=True)
    call("stat base after child create", a.exists, B)
    call("set p v1 version=0", a.set, p, b"v1", version=0)
    call("set p version=0 again (BadVersion)", a.set, p, b"v2", version=0)
    call("set p version=-1", a.set, p, b"v2", version=-1)
    call("set p version=7 (BadVersion)", a.set, p, b"v3", version=7)
    call("get p", a.get, p)
    call("set p empty", a.set, p, b"")
    call("get p after empty set", a.get, p)
    call("set missing (NoNode)", a.set, B + "/nope", b"x")
    call("get missing (NoNode)", a.get, B + "/nope")
    call("get_children missing (NoNode)", a.get_children, B + "/nope")
    call("create p/c1", a.create, p + "/c1", b"c", include_data=True)
    call("create p/c2", a.create, p + "/c2", b"c", include_data=True)
    call("stat p with 2 children", a.exists, p)
    call("get_children p", sorted_children, a, p, include_data=True)
    call("delete p non-empty (NotEmpty)", a.delete, p)
    call("delete missing (NoNode)", a.delete, B + "/nope")
    call("delete p/c1 bad version (BadVersion)", a.delete, p + "/c1", version=3)
    call("delete p/c1 version=0", a.delete, p + "/c1", version=0)
    call("stat p after child delete", a.exists, p)
    call("set p/c2 twice 1", a.set, p + "/c2", b"x")
    call("set p/c2 twice 2", a.set, p + "/c2", b"y")
    call("stat p after grandchild sets (unchanged)", a.exists, p)
    call("delete p/c2 version=2", a.delete, p + "/c2", version=2)
    call("stat p after all children deleted", a.exists, p)
    call("delete p version=0 (BadVersion, version is 3)", a.delete, p, version=0)
    call("delete p version=3", a.delete, p, version=3)
    call("exists p after delete", a.exists, p)
    call("stat base after p gone", a.exists, B)
    call("sync base", a.sync, B)
    call("sync missing path", a.sync, B + "/nope")

    # ------------------------------------------------------------ sequential
    s = B + "/seq"
    call("create seq parent", a.create, s, b"")
    for i in range(3):
        call("create seq s- #%d" % i, a.create, s + "/s-", b"%d" % i, sequence=True, include_data=True)
    call("delete s-0000000001", a.delete, s + "/s-0000000001")
    call("create seq after delete", a.create, s + "/s-", b"", sequence=True)
    call("create seq other prefix", a.create, s + "/t-", b"", sequence=True)
    call("create ephemeral sequential", a.create, s + "/e-", b"", ephemeral=True, sequence=True, include_data=True)
    call("create seq trailing slash name", a.create, s + "/", b"", sequence=True)
    call("create plain node then seq with same prefix", a.create, s + "/u", b"")
    call("create seq u", a.create, s + "/u", b"", sequence=True)
    call("get_children seq", sorted_children, a, s, include_data=True)
    call("create seq under missing parent", a.create, B + "/noparent/x-", b"", sequence=True)
    # kazoo validates some paths itself (never sent): same on both sides
    call("kazoo relative path (client-side ValueError)", a.create, B + "/a/../b", b"")
    call("kazoo double slash is normalised client-side", a.create, B + "//dbl", b"")
    call("exists normalised double-slash node", a.exists, B + "/dbl")
    call("long path (1000 chars)", a.create, B + "/" + "x" * 1000, b"")
    call("delete long path", a.delete, B + "/" + "x" * 1000)

    # ------------------------------------------------------------ ephemerals
    e = B + "/eph"
    call("create ephemeral", a.create, e, b"e", ephemeral=True, include_data=True)
    call("exists ephemeral (owner A)", a.exists, e)
    call("create child of ephemeral (NoChildrenForEphemerals)", a.create, e + "/c", b"")
    call("create seq child of ephemeral", a.create, e + "/c", b"", sequence=True)
    call("create ephemeral child of ephemeral", a.create, e + "/c", b"", ephemeral=True)
    xsync(b)
    call("B sees ephemeral owner", b.exists, e)
    call("delete ephemeral by other session B", b.delete, e)
    call("recreate ephemeral", a.create, e, b"e2", ephemeral=True)
    xsync(b)
    call("B exists watch on ephemeral", b.exists, e, watch=b.watcher("eph-exists"))
    call("B data watch on ephemeral", b.get, e, watch=b.watcher("eph-get"))
    call("B child watch on base", lambda: sorted(b.get_children(B, watch=b.watcher("base-children"))))
    call("getEphemerals(/) for A", lambda: sorted(call_ext(a, GetEphemerals("/"))))
    call("getEphemerals(" + B + "/seq) for A", lambda: sorted(call_ext(a, GetEphemerals(B + "/seq"))))
    call("getEphemerals for B (none)", lambda: sorted(call_ext(b, GetEphemerals("/"))))
    call("getAllChildrenNumber base", call_ext, a, GetAllChildrenNumber(B))
    call("getAllChildrenNumber /", call_ext, a, GetAllChildrenNumber("/"))

    # close A: its ephemerals disappear, B's watches fire
    a.stop()
    a.close()
    rec("B events after A closed", b.take_events(expect=2))
    call("ephemeral gone after close", b.exists, e)
    call("ephemeral sequential gone after close", sorted_children, b, s)
    call("stat seq after ephemeral removal", b.exists, s)
    call("stat base after ephemeral removal", b.exists, B)

    a = make_client("A2")

    # ------------------------------------------------------------ one-shot watches
    w = B + "/w"
    call("exists watch on missing w", b.exists, w, watch=b.watcher("w-exists"))
    call("A creates w", a.create, w, b"0")
    rec("B events after create w", b.take_events(expect=1))  # base child watch was consumed
    call("B get w with data watch", b.get, w, watch=b.watcher("w-data"))
    call("B get w again with second watcher", b.get, w, watch=b.watcher("w-data2"))
    call("B exists w with watch (same path)", b.exists, w, watch=b.watcher("w-exists2"))
    call("A sets w", a.set, w, b"1")
    rec("B events after set w (one notification)", b.take_events(expect=1))
    call("A sets w again (no watch left)", a.set, w, b"2")
    rec("B events after 2nd set (none)", b.take_events())
    call("B child watch on w", b.get_children, w, watch=b.watcher("w-children"))
    call("B data watch on w", b.get, w, watch=b.watcher("w-data3"))
    call("A creates w/c", a.create, w + "/c", b"")
    rec("B events after child create (child only)", b.take_events(expect=1))
    call("A sets w/c (no watch on it)", a.set, w + "/c", b"z")
    rec("B events after grandchild set (none)", b.take_events())
    call("B child watch on w again", b.get_children, w, watch=b.watcher("w-children2"))
    call("B exists watch on w/c", b.exists, w + "/c", watch=b.watcher("wc-exists"))
    call("A deletes w/c", a.delete, w + "/c")
    rec("B events after child delete", b.take_events(expect=2))
    call("B child + data watch on w before parent delete", b.get_children, w, watch=b.watcher("w-children3"))
    call("B exists watch on w/gone (missing child of w)", b.exists, w + "/gone", watch=b.watcher("wgone-exists"))
    call("A deletes w", a.delete, w)
    rec("B events after parent delete", b.take_events(expect=1))
    call("A recreates w", a.create, w, b"again")
    rec("B events after recreate (child watch on base was consumed)", b.take_events())
    call("A creates w/gone", a.create, w + "/gone", b"")
    rec("B events after w/gone created (exists watch survives parent delete)", b.take_events(expect=1))
    call("watch on root children", lambda: sorted(b.get_children("/", watch=b.watcher("root-children"))))
    call("A creates /compat-top", a.create, "/compat-top", b"")
    rec("B events after root child create", b.take_events(expect=1))
    call("A deletes /compat-top", a.delete, "/compat-top")
    rec("B events after root child delete (none)", b.take_events())
    call("A sets data on /", a.set, "/", b"rootdata")
    call("get /", a.get, "/")
    call("set / back to empty", a.set, "/", b"")

    # remove / check watches
    call("B data watch for removal", b.get, w, watch=b.watcher("w-rm"))
    call("checkWatches data (present)", call_ext, b, CheckWatches(w, WATCHER_DATA))
    call("checkWatches children (absent, NoWatcher)", call_ext, b, CheckWatches(w, WATCHER_CHILDREN))
    call("removeWatches data", call_ext, b, RemoveWatches(w, WATCHER_DATA))
    call("removeWatches data again (NoWatcher)", call_ext, b, RemoveWatches(w, WATCHER_DATA))
    call("removeWatches any on unwatched path", call_ext, b, RemoveWatches(B + "/seq", WATCHER_ANY))
    call("removeWatches on missing path", call_ext, b, RemoveWatches(B + "/nope", WATCHER_ANY))
    call("A sets w after watch removed", a.set, w, b"after-remove")
    rec("B wire events after removed watch (none expected)", b.take_events())

    # persistent and persistent-recursive watches
    pw = B + "/pw"
    call("addWatch persistent on missing pw", call_ext, b, AddWatch(pw, ADD_WATCH_PERSISTENT))
    call("A creates pw", a.create, pw, b"")
    call("A sets pw", a.set, pw, b"1")
    call("A sets pw again", a.set, pw, b"2")
    call("A creates pw/c", a.create, pw + "/c", b"")
    call("A sets pw/c (not watched by persistent non-recursive)", a.set, pw + "/c", b"x")
    call("A deletes pw/c", a.delete, pw + "/c")
    rec("B events persistent", b.take_events(expect=5))
    call("checkWatches any on pw (persistent)", call_ext, b, CheckWatches(pw, WATCHER_ANY))
    call("removeWatches any on pw", call_ext, b, RemoveWatches(pw, WATCHER_ANY))
    call("A sets pw after remove", a.set, pw, b"3")
    rec("B events after persistent removed", b.take_events())
    pr = B + "/pr"
    call("A creates pr", a.create, pr, b"")
    xsync(b)  # else B's server may apply "A creates pr" after the watch: one more event
    call("addWatch persistent-recursive pr", call_ext, b, AddWatch(pr, ADD_WATCH_PERSISTENT_RECURSIVE))
    call("A creates pr/a", a.create, pr + "/a", b"")
    call("A creates pr/a/b", a.create, pr + "/a/b", b"")
    call("A sets pr/a/b", a.set, pr + "/a/b", b"1")
    call("A sets pr", a.set, pr, b"1")
    call("A deletes pr/a/b", a.delete, pr + "/a/b")
    call("A creates pr-sibling (not under pr)", a.create, pr + "-sibling", b"")
    rec("B events persistent-recursive", b.take_events(expect=5))
    call("B also one-shot data watch on pr/a", b.get, pr + "/a", watch=b.watcher("pra-data"))
    call("A sets pr/a", a.set, pr + "/a", b"2")
    rec("B events recursive + one-shot on same node", b.take_events(expect=1))
    call("removeWatches data on pr (recursive watch is not a data watch?)", call_ext, b, RemoveWatches(pr, WATCHER_DATA))
    call("removeWatches any on pr", call_ext, b, RemoveWatches(pr, WATCHER_ANY))
    call("A deletes pr/a", a.delete, pr + "/a")
    rec("B events after recursive removed", b.take_events())
    call("addWatch bad mode", call_ext, b, AddWatch(pr, 7))

    # ------------------------------------------------------------ multi
    m = B + "/m"

    def multi(client, ops):
        t = client.transaction()
        for op in ops:
            getattr(t, op[0])(*op[1:])
        return t.commit()

    call("multi success", multi, a, [("create", m, b"a"), ("create", m + "/x", b""),
                                     ("set_data", m, b"b"), ("check", m, 1), ("delete", m + "/x")])
    call("stat m after multi", a.exists, m)
    call("multi failure (NodeExists in the middle)", multi, a, [
        ("create", m + "/y", b""), ("create", m, b""), ("set_data", m, b"c")])
    call("m/y absent after failed multi", a.exists, m + "/y")
    call("multi check BadVersion", multi, a, [("check", m, 0), ("set_data", m, b"c")])
    call("multi check on missing node", multi, a, [("check", m + "/nope", 0)])
    call("multi delete then create same path", multi, a, [("delete", m), ("create", m, b"new")])
    call("get m after delete+create multi", a.get, m)
    call("multi empty", multi, a, [])
    call("multi create sequential + ephemeral", multi, a, [
        ("create", m + "/q-", b"", None, False, True), ("create", m + "/eph", b"", None, True, False)])
    call("multi NoChildrenForEphemerals", multi, a, [("create", m + "/eph/c", b"")])
    call("multi failure at last op (NoNode)", multi, a, [
        ("set_data", m, b"z"), ("delete", m + "/nope")])
    call("get m after failures", a.get, m)

    # watch events produced by one multi, in wire order
    xsync(b)
    call("B exists watch on m3", b.exists, B + "/m3", watch=b.watcher("m3"))
    call("B exists watch on m3/y", b.exists, B + "/m3/y", watch=b.watcher("m3y"))
    call("B child watch on base before multi", lambda: sorted(b.get_children(B, watch=b.watcher("base-multi"))))
    call("multi creating m3 and m3/y", multi, a, [("create", m + "3", b""), ("create", m + "3/y", b""),
                                                  ("set_data", m + "3", b"z")])
    rec("B events after multi (order on the wire)", b.take_events(expect=3))
    call("B data watch on m3 and child watch on m3", lambda: (b.get(m + "3", watch=b.watcher("m3d"))[0],
                                                            sorted(b.get_children(m + "3", watch=b.watcher("m3c")))))
    call("multi deleting m3/y then m3", multi, a, [("delete", m + "3/y"), ("delete", m + "3")])
    rec("B events after multi delete", b.take_events(expect=2))

    call("create read-only node for multi", a.create, B + "/ro-multi", b"", acl=READ_ACL_UNSAFE)
    call("multi with a NoAuth op", multi, a, [("create", m + "/ok", b""), ("create", B + "/ro-multi/x", b""),
                                             ("set_data", m, b"q")])
    call("multi setData on read-only node", multi, a, [("set_data", B + "/ro-multi", b"x")])
    call("m/ok absent after NoAuth multi", a.exists, m + "/ok")

    # several ephemerals of one session: deletion events when it closes
    e3 = make_client("E3")
    for i in range(4):
        call("E3 creates ephemeral %d" % i, e3.create, B + "/e3-%d" % i, b"", ephemeral=True)
        xsync(b)
        call("B watches ephemeral %d" % i, b.exists, B + "/e3-%d" % i, watch=b.watcher("e3-%d" % i))
    call("B child watch on base before E3 closes", lambda: sorted(b.get_children(B, watch=b.watcher("base-e3"))))
    e3.stop()
    e3.close()
    rec("B events after E3 closed (order on the wire)", b.take_events(expect=5))

    # reconfig is disabled on a standalone server
    call("reconfig (ReconfigDisabled)", a.reconfig, joining=None, leaving=None,
         new_members="server.1=127.0.0.1:2888:3888:participant;127.0.0.1:2181")

    # ------------------------------------------------------------ ACLs
    alice = make_digest_acl("alice", "secret", all=True)
    auth = make_client("Auth", auth_data=[("digest", "alice:secret")])
    sup = make_client("Super", auth_data=[("digest", "super:" + SUPER_PASSWORD)])
    d = B + "/acl-digest"
    call("create digest-protected node", auth.create, d, b"private", acl=[alice])
    call("get_acls digest node", auth.get_acls, d)
    xsync(b)
    call("get without auth (NoAuth)", b.get, d)
    call("set without auth (NoAuth)", b.set, d, b"x")
    call("exists without auth (allowed)", b.exists, d)
    call("get_children without auth (NoAuth)", b.get_children, d)
    call("get_acls without auth", b.get_acls, d)
    call("create child without auth (NoAuth)", b.create, d + "/c", b"")
    call("get with auth", auth.get, d)
    call("set with auth", auth.set, d, b"private2")
    call("create child with auth", auth.create, d + "/c", b"", acl=[alice])
    xsync(sup)
    call("super reads digest node", sup.get, d)
    call("super sets digest node", sup.set, d, b"by-super")
    call("super deletes child", sup.delete, d + "/c")
    call("B add_auth alice later", b.add_auth, "digest", "alice:secret")
    xsync(b)
    call("B get after add_auth", b.get, d)

    ro = B + "/acl-world-ro"
    call("create world read-only", a.create, ro, b"ro", acl=READ_ACL_UNSAFE)
    call("get world ro", a.get, ro)
    call("set world ro (NoAuth)", a.set, ro, b"x")
    call("create child of world ro (NoAuth)", a.create, ro + "/c", b"")
    call("set_acls world ro without ADMIN (NoAuth)", a.set_acls, ro, OPEN_ACL_UNSAFE)
    call("super set_acls world ro", sup.set_acls, ro, OPEN_ACL_UNSAFE, version=0)
    xsync(a)
    call("get_acls world ro after", a.get_acls, ro)
    call("set_acls bad version (BadVersion)", a.set_acls, ro, READ_ACL_UNSAFE, version=0)
    call("set_acls version=1", a.set_acls, ro, READ_ACL_UNSAFE + [ACL(31, Id("digest", "bob:xyz="))], version=1)
    call("get_acls after second set", a.get_acls, ro)
    call("stat after set_acls (aversion)", a.exists, ro)
    call("set_acls on missing node (NoNode)", a.set_acls, B + "/nope", OPEN_ACL_UNSAFE)
    call("set_acls empty list (InvalidACL)", sup.set_acls, ro, [])
    call("delete world-ro node (parent allows DELETE)", a.delete, ro)

    call("create with auth scheme without auth (InvalidACL)", a.create, B + "/acl-auth", b"",
         acl=[ACL(31, Id("auth", ""))])
    call("create with auth scheme with auth", auth.create, B + "/acl-auth", b"", acl=[ACL(31, Id("auth", ""))])
    call("get_acls auth-scheme node", auth.get_acls, B + "/acl-auth")
    call("create with bogus scheme (InvalidACL)", a.create, B + "/acl-bogus", b"",
         acl=[ACL(31, Id("bogus", "x"))])
    call("create with malformed digest id (InvalidACL)", a.create, B + "/acl-bad-digest", b"",
         acl=[ACL(31, Id("digest", "no-colon"))])
    call("create with ip acl 127.0.0.1", a.create, B + "/acl-ip", b"ip", acl=[ACL(31, Id("ip", "127.0.0.1"))])
    call("get ip-acl node from 127.0.0.1", a.get, B + "/acl-ip")
    call("create with ip acl 10.1.2.3", a.create, B + "/acl-ip2", b"ip", acl=[ACL(31, Id("ip", "10.1.2.3"))])
    call("get ip-acl node from wrong ip (NoAuth)", a.get, B + "/acl-ip2")
    call("create with ip acl cidr", a.create, B + "/acl-ip3", b"", acl=[ACL(1, Id("ip", "127.0.0.0/8"))])
    call("get ip cidr node", a.get, B + "/acl-ip3")
    call("create with invalid ip (InvalidACL)", a.create, B + "/acl-ip4", b"", acl=[ACL(31, Id("ip", "not-an-ip"))])
    call("create with perms 0", a.create, B + "/acl-noperm", b"", acl=[ACL(0, Id("world", "anyone"))])
    call("get perms-0 node (NoAuth)", a.get, B + "/acl-noperm")
    call("create with world:someone (InvalidACL?)", a.create, B + "/acl-world-bad", b"",
         acl=[ACL(31, Id("world", "someone"))])
    call("create only-create perms node", a.create, B + "/acl-c", b"", acl=[ACL(4, Id("world", "anyone"))])
    call("create child under create-only", a.create, B + "/acl-c/k", b"")
    call("delete child under create-only (NoAuth, no DELETE)", a.delete, B + "/acl-c/k")
    call("get_children under create-only (NoAuth)", a.get_children, B + "/acl-c")

    # bad auth (raw, so no client library reconnects behind our back): the
    # server answers AUTHFAILED on xid -4 and closes the connection; the
    # session itself lives on until it expires
    raw = P.RawConnection(make_client.port)
    r = raw.handshake(timeout_ms=1000)
    trace.register_session("BadAuth", r["sessionId"])
    rec("BadAuth creates ephemeral", raw.create(B + "/badauth-eph", b"", flags=P.EPHEMERAL))
    raw.send_frame(P.i32(P.XID_AUTH) + P.i32(P.AUTH) + P.i32(0) + P.ustr("bogus") + P.buf(b"x"))
    closed, data = raw.wait_closed(3.0)
    frames = []
    rd = P.Reader(data)
    while rd.remaining() >= 20:
        n = rd.i32()
        frames.append({"xid": rd.i32(), "zxid": rd.i64(), "err": P.error_name(rd.i32())})
        rd.pos += n - 16
    rec("auth with unknown scheme: replies, then closed", [frames, closed])
    raw.close()
    call("BadAuth session expires (its ephemeral goes)", poll_gone, a, B + "/badauth-eph", 8.0)

    # ------------------------------------------------------------ container & TTL
    cont = B + "/cont"
    call("create container", call_ext, a, CreateContainer(cont, b"c", OPEN_ACL_UNSAFE))
    call("stat container (ephemeralOwner marks container)", a.exists, cont)
    call("create container again (NodeExists)", call_ext, a, CreateContainer(cont, b"c", OPEN_ACL_UNSAFE))
    call("create child in container", a.create, cont + "/child", b"")
    call("create ephemeral child in container", a.create, cont + "/echild", b"", ephemeral=True)
    call("delete ephemeral child", a.delete, cont + "/echild")
    call("container still there with one child", poll_still_there, a, cont, 0.6)
    xsync(b)
    call("B watches container", b.exists, cont, watch=b.watcher("cont"))
    call("delete last child", a.delete, cont + "/child")
    call("container deleted after last child removed", poll_gone, a, cont)
    rec("B events after container removal", b.take_events(expect=1))
    e4 = make_client("E4")
    call("E4 creates container cont3", call_ext, e4, CreateContainer(cont + "3", b"", OPEN_ACL_UNSAFE))
    call("E4 creates ephemeral in cont3", e4.create, cont + "3/e", b"", ephemeral=True)
    e4.stop()
    e4.close()
    call("container with only an ephemeral child goes when its session closes", poll_gone, a, cont + "3")
    call("create unused container", call_ext, a, CreateContainer(cont + "2", b"", OPEN_ACL_UNSAFE))
    call("never-used container is kept", poll_still_there, a, cont + "2", 1.0)
    call("container under missing parent", call_ext, a, CreateContainer(B + "/nope/c", b"", OPEN_ACL_UNSAFE))

    ttl = B + "/ttl"
    call("create TTL 800ms", call_ext, a, CreateTTL(ttl, b"t", OPEN_ACL_UNSAFE, TTL_FLAG, 800))
    call("stat TTL node (ephemeralOwner encodes TTL)", a.exists, ttl)
    xsync(b)
    call("B watches TTL node", b.exists, ttl, watch=b.watcher("ttl"))
    call("create TTL ttl=0 (BadArguments)", call_ext, a, CreateTTL(ttl + "0", b"", OPEN_ACL_UNSAFE, TTL_FLAG, 0))
    call("create TTL ttl=-1 (BadArguments)", call_ext, a, CreateTTL(ttl + "n", b"", OPEN_ACL_UNSAFE, TTL_FLAG, -1))
    call("create TTL ttl too large (BadArguments)", call_ext, a,
         CreateTTL(ttl + "big", b"", OPEN_ACL_UNSAFE, TTL_FLAG, 1 << 41))
    call("create TTL with non-TTL flag (BadArguments)", call_ext, a,
         CreateTTL(ttl + "f", b"", OPEN_ACL_UNSAFE, 0, 1000))
    r = call("create TTL sequential", call_ext, a,
             CreateTTL(B + "/ttlseq-", b"", OPEN_ACL_UNSAFE, TTL_SEQUENTIAL_FLAG, 800))
    call("create TTL with child", call_ext, a, CreateTTL(ttl + "p", b"", OPEN_ACL_UNSAFE, TTL_FLAG, 1000))
    call("child of TTL", a.create, ttl + "p/c", b"")
    call("TTL node expires", poll_gone, a, ttl)
    rec("B events after TTL expiry", b.take_events(expect=1))
    if r:
        call("TTL sequential node expires", poll_gone, a, r[0])
    call("TTL node with child is kept", poll_still_there, a, ttl + "p", 1.0)
    call("delete child of TTL", a.delete, ttl + "p/c")
    call("TTL parent expires after child removed", poll_gone, a, ttl + "p")
    # setData restarts the TTL clock (expiry is measured from mtime)
    call("create TTL 2000ms", call_ext, a, CreateTTL(ttl + "m", b"", OPEN_ACL_UNSAFE, TTL_FLAG, 2000))
    time.sleep(1.2)
    call("touch TTL node after 1.2s", a.set, ttl + "m", b"touched")
    time.sleep(1.2)
    call("TTL node still there 2.4s after create, 1.2s after set", a.exists, ttl + "m")
    call("TTL node expires after the set", poll_gone, a, ttl + "m")
    call("children of base after TTL expiry", sorted_children, a, B)

    # ------------------------------------------------------------ session expiry (raw session stops pinging)
    raw = P.RawConnection(make_client.port)
    resp = raw.handshake(timeout_ms=1000)
    trace.register_session("Raw", resp["sessionId"])
    rec("raw handshake", {"timeOut": resp["timeOut"], "sessionId": resp["sessionId"],
                          "passwdLen": len(resp["passwd"] or b""), "readOnly": resp["readOnly"]})
    rec("raw create ephemeral", raw.create(B + "/raw-eph", b"r", flags=P.EPHEMERAL))
    xsync(b)
    call("B sees raw ephemeral owner", b.exists, B + "/raw-eph", watch=b.watcher("raw-eph"))
    closed, _ = raw.wait_closed(timeout=8.0)  # no pings: the server expires the session
    rec("raw connection closed by server after expiry", closed)
    rec("B events after raw session expired", b.take_events(expect=1, timeout=8.0))
    call("raw ephemeral gone", b.exists, B + "/raw-eph")
    sid, pw = raw.session_id, raw.passwd
    raw.close()
    raw = P.RawConnection(make_client.port)
    resp = raw.handshake(timeout_ms=1000, session_id=sid, passwd=pw)
    rec("reconnect with expired session", resp)
    rec("connection closed after expired reconnect", raw.wait_closed(3.0)[0])
    raw.close()
    victim = make_client("Victim")
    call("Victim exists base", victim.exists, B + "/nope")
    # on the Victim's own server: ZooKeeper closes that server's connections of
    # the session (an ensemble member does not close the other members' ones)
    raw = P.RawConnection(make_client.port_of(victim))
    resp = raw.handshake(timeout_ms=30000, session_id=victim.client_id[0], passwd=b"\x00" * 16)
    rec("reconnect live session with wrong password", resp)
    raw.close()
    # ZooKeeper closes the live connection of that session before it checks the
    # password, so the victim is disconnected (and reconnects).
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not (len(victim.states) >= 3 and victim.states[-1] == "CONNECTED"):
        time.sleep(0.05)
    time.sleep(0.2)
    rec("Victim states after its session id was used with a wrong password", list(victim.states))
    call("Victim still works", victim.exists, B + "/nope")
    victim.stop()
    victim.close()

    raw.close()
    raw = P.RawConnection(make_client.port)
    r = raw.handshake(timeout_ms=100)
    trace.register_session("RawShort", r["sessionId"])
    rec("timeout below min is raised to min", r["timeOut"])
    rec("raw close session", raw.close_session())
    raw.close()
    raw = P.RawConnection(make_client.port)
    r = raw.handshake(timeout_ms=3600000)
    trace.register_session("RawLong", r["sessionId"])
    rec("timeout above max is lowered to max", r["timeOut"])
    rec("raw ping", raw_reply(raw.ping()))
    rec("raw close session 2", raw.close_session())
    raw.close()

    # a kazoo session expires while its client is cut off (TCP proxy), then
    # the client reconnects with the old session id and learns it expired
    rec("B states so far", list(b.states))
    # (one proxy per member: the client's connect string lists all of them)
    proxies = [TcpProxy(port).start() for port in make_client.ports]
    try:
        k = make_client("Cut", hosts=",".join(proxy.address for proxy in proxies), timeout=1.0,
                        connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=1, max_delay=0.2))
        call("Cut creates ephemeral", k.create, B + "/cut-eph", b"", ephemeral=True)
        xsync(b)
        call("B watches Cut's ephemeral", b.exists, B + "/cut-eph", watch=b.watcher("cut-eph"))
        # the idle proxies first: cut off from its own, the client would
        # otherwise resume its session through one still open
        live = make_client.port_of(k)
        for proxy in sorted(proxies, key=lambda x: x.port == live):
            proxy.cut()
        rec("B events after Cut's session expired", b.take_events(expect=1, timeout=10.0))
        call("Cut's ephemeral gone", b.exists, B + "/cut-eph")
        for proxy in proxies:
            proxy.resume()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (k.states and k.states[-1] == "CONNECTED" and "LOST" in k.states):
            time.sleep(0.05)
        states = [st for i, st in enumerate(k.states) if i == 0 or k.states[i - 1] != st]
        rec("Cut client states (deduplicated)", states)
        if k.connected:
            trace.register_session("Cut-new", k.client_id[0])
        xsync(k)
        call("Cut works again on a new session", k.exists, B + "/cut-eph")
        k.stop()
        k.close()
    finally:
        for proxy in proxies:
            proxy.close()

    # a session resumed on a second connection (the first one is then closed)
    raw1 = P.RawConnection(make_client.port)
    r = raw1.handshake(timeout_ms=10000)
    trace.register_session("Resumable", r["sessionId"])
    rec("create ephemeral for resume", raw1.create(B + "/resume", b"", flags=P.EPHEMERAL))
    raw = P.RawConnection(make_client.port)
    r = raw.handshake(timeout_ms=10000, session_id=raw1.session_id, passwd=raw1.passwd)
    rec("resume session on new connection", dict(r, passwd="same" if r["passwd"] == raw1.passwd else r["passwd"]))
    rec("first connection closed after resume", raw1.wait_closed(3.0)[0])
    raw1.close()
    hdr, rd = raw.request(P.EXISTS, P.path_watch_body(B + "/resume"))
    rec("exists over resumed connection", {"err": P.error_name(hdr["err"]),
                                           "stat": rd.stat() if hdr["err"] == 0 else None})
    rec("close resumed session", raw.close_session())
    raw.close()
    xsync(b)
    call("ephemeral gone after session closed elsewhere", b.exists, B + "/resume")

    # ------------------------------------------------------------ raw requests kazoo won't send
    raw = P.RawConnection(make_client.port)
    r = raw.handshake(timeout_ms=10000)
    trace.register_session("RawPaths", r["sessionId"])
    raw.create(B + "/rp")
    for path in ["a/b", "/a//b", B + "/rp/", B + "/rp//x", B + "/rp/.", B + "/rp/..", B + "/rp/./x",
                 B + "/rp/x/", "", "/", "/zookeeper", B + "/rp/a\x01b", B + "/rp/a\x7fb",
                 B + "/rp/\ud7ff", B + "/rp/\ufff0"]:
        try:
            body = P.create_body(path)
        except UnicodeEncodeError:
            continue
        hdr, _ = raw.request(P.CREATE, body)
        rec("raw create %r" % path, P.error_name(hdr["err"]))
    hdr, rd = raw.request(P.CREATE, P.create_body(B + "/rp/", flags=P.PERSISTENT_SEQUENTIAL))
    rec("raw create sequential with trailing slash", [P.error_name(hdr["err"]), rd.ustr() if hdr["err"] == 0 else None])
    for path in ["a", B + "/rp/", "", B + "//rp"]:
        hdr, _ = raw.request(P.EXISTS, P.path_watch_body(path))
        rec("raw exists %r" % path, P.error_name(hdr["err"]))
        hdr, _ = raw.request(P.GET_DATA, P.path_watch_body(path))
        rec("raw getData %r" % path, P.error_name(hdr["err"]))
        hdr, _ = raw.request(P.DELETE, P.delete_body(path))
        rec("raw delete %r" % path, P.error_name(hdr["err"]))
    hdr, _ = raw.request(P.CREATE, P.create_body(B + "/rp/f7", flags=7))
    rec("raw create flags=7 (invalid mode)", P.error_name(hdr["err"]))
    hdr, _ = raw.request(P.CREATE, P.create_body(B + "/rp/ttl", flags=P.PERSISTENT_WITH_TTL))
    rec("raw create (opcode 1) with TTL flag", P.error_name(hdr["err"]))
    # a multi whose create op carries flags that are no CreateMode (any
    # create opcode; op 21 also with a TTL mode and a ttl out of range):
    # ZooKeeper reads it and fails that op, BadArguments, the ops before it
    # OK and those after RuntimeInconsistency, the reply's err 0 and a zxid
    # taken (an error txn)
    for op, flags, ttl in [(P.CREATE, 7, None), (P.CREATE2, -1, None), (P.CREATE_CONTAINER, 100, None),
                           (P.CREATE_TTL, 7, 1000), (P.CREATE_TTL, P.PERSISTENT_WITH_TTL, 0)]:
        if ttl is None:
            bad = P.create_body(B + "/rp/mf", flags=flags)
        else:
            bad = P.create_ttl_body(B + "/rp/mf", flags=flags, ttl=ttl)
        hdr, rd = raw.request(P.MULTI, P.multi_body([
            (P.CREATE, P.create_body(B + "/rp/mok")), (op, bad), (P.CHECK, P.check_body(B + "/rp"))]))
        results = []
        while hdr["err"] == 0:
            kind, done, _ = rd.i32(), rd.boolean(), rd.i32()
            if done:
                break
            if kind != P.MULTI_ERROR:
                results.append([kind, "(not an error result)"])
                break
            results.append([kind, P.error_name(rd.i32())])
        rec("raw multi with op %d flags %d ttl %s" % (op, flags, ttl), raw_reply(hdr, body=results))
    hdr, _ = raw.request(P.EXISTS, P.path_watch_body(B + "/rp/mok"))
    rec("raw multi's create before the bad op undone", P.error_name(hdr["err"]))
    hdr, rd = raw.request(P.CREATE2, P.create_body(B + "/rp/c2", b"x"))
    rec("raw create2", [P.error_name(hdr["err"]), rd.ustr(), rd.stat()])
    hdr, rd = raw.request(P.GET_DATA, P.path_watch_body(B + "/null"))
    rec("raw getData null-data node", [P.error_name(hdr["err"]), rd.buf(), rd.stat()])
    hdr, rd = raw.request(P.GET_DATA, P.path_watch_body(B + "/empty"))
    rec("raw getData empty-data node", [P.error_name(hdr["err"]), rd.buf()])
    hdr, rd = raw.request(P.GET_CHILDREN, P.path_watch_body(B + "/deep"))
    rec("raw getChildren (opcode 8)", [P.error_name(hdr["err"]), rd.str_vec()])
    hdr, rd = raw.request(P.GET_CHILDREN2, P.path_watch_body(B + "/deep"))
    rec("raw getChildren2", [P.error_name(hdr["err"]), rd.str_vec(), rd.stat()])
    hdr, rd = raw.request(P.SYNC, P.ustr(B))
    rec("raw sync", [P.error_name(hdr["err"]), rd.ustr()])
    hdr, rd = raw.request(P.GET_ACL, P.ustr("/"))
    n = rd.i32()
    rec("raw getACL /", [P.error_name(hdr["err"]), [(rd.i32(), rd.ustr(), rd.ustr()) for _ in range(n)], rd.stat()])
    hdr, rd = raw.request(P.SET_DATA, P.set_data_body(B + "/rp", None))
    rec("raw setData null", [P.error_name(hdr["err"]), rd.stat()])
    hdr, rd = raw.request(P.GET_DATA, P.path_watch_body(B + "/rp"))
    rec("raw getData after null set", [P.error_name(hdr["err"]), rd.buf()])
    rec("raw ping reply", {k: v for k, v in raw_reply(raw.ping()).items() if k != "zxid"})
    # request with xid the server must echo (arbitrary, non-monotonic)
    hdr, _ = raw.request(P.EXISTS, P.path_watch_body(B), xid=424242)
    rec("raw xid echoed", hdr["xid"])
    hdr, _ = raw.request(P.EXISTS, P.path_watch_body(B), xid=7)
    rec("raw lower xid echoed", hdr["xid"])
    rec("raw close", raw.close_session())
    raw.close()

    # reply-header zxids: which replies carry a new zxid (writes, failed
    # writes) and which repeat the last one (reads, pings)
    raw = P.RawConnection(make_client.port)
    r = raw.handshake(timeout_ms=10000)
    trace.register_session("RawZxid", r["sessionId"])
    zx = []
    for label, op, body in [
        ("create ok", P.CREATE, P.create_body(B + "/zx", b"1")),
        ("exists", P.EXISTS, P.path_watch_body(B + "/zx")),
        ("create NodeExists", P.CREATE, P.create_body(B + "/zx", b"1")),
        ("getData", P.GET_DATA, P.path_watch_body(B + "/zx")),
        ("setData BadVersion", P.SET_DATA, P.set_data_body(B + "/zx", b"2", 9)),
        ("setData ok", P.SET_DATA, P.set_data_body(B + "/zx", b"2", 0)),
        ("getChildren2", P.GET_CHILDREN2, P.path_watch_body(B + "/zx")),
        ("delete NoNode", P.DELETE, P.delete_body(B + "/zx-missing")),
        ("exists missing", P.EXISTS, P.path_watch_body(B + "/zx-missing")),
        ("sync", P.SYNC, P.ustr(B + "/zx")),
        ("getACL", P.GET_ACL, P.ustr(B + "/zx")),
        ("setACL ok", P.SET_ACL, P.ustr(B + "/zx") + P.acl_vec(P.WORLD_ALL) + P.i32(-1)),
        ("delete ok", P.DELETE, P.delete_body(B + "/zx")),
    ]:
        hdr, rd = raw.request(op, body)
        zx.append([label, P.error_name(hdr["err"]), {"zxid": hdr["zxid"]}])
    zx.append(["ping", P.error_name(raw.ping()["err"]), {"zxid": raw.ping()["zxid"]}])
    rec("raw reply zxids", zx)

    # SetWatches (what a client sends after reconnecting): watches whose node
    # changed after relativeZxid fire at once, the others stay armed
    hdr, _ = raw.request(P.CREATE, P.create_body(B + "/sw-data", b"0"))
    hdr, _ = raw.request(P.CREATE, P.create_body(B + "/sw-parent", b""))
    hdr, _ = raw.request(P.CREATE, P.create_body(B + "/sw-quiet", b""))
    hdr, _ = raw.request(P.EXISTS, P.path_watch_body(B + "/sw-quiet"))
    rel = hdr["zxid"]
    raw.request(P.SET_DATA, P.set_data_body(B + "/sw-data", b"1"))
    raw.request(P.CREATE, P.create_body(B + "/sw-created", b""))
    raw.request(P.CREATE, P.create_body(B + "/sw-parent/c", b""))
    w = P.RawConnection(make_client.port)
    r = w.handshake(timeout_ms=10000)
    trace.register_session("RawWatcher", r["sessionId"])

    def vec(paths):
        return P.i32(len(paths)) + b"".join(P.ustr(x) for x in paths)

    body = (P.i64(rel) + vec([B + "/sw-data", B + "/sw-quiet", B + "/sw-nonexistent-data"])
            + vec([B + "/sw-created", B + "/sw-missing"]) + vec([B + "/sw-parent", B + "/sw-quiet"]))
    hdr, _ = w.request(P.SET_WATCHES, body, xid=P.XID_SET_WATCHES)
    rec("setWatches reply", {"xid": hdr["xid"], "err": P.error_name(hdr["err"])})
    w.ping()
    rec("setWatches immediate events", sorted(w.notifications, key=lambda n: (n["path"], n["type"])))
    del w.notifications[:]
    raw.request(P.SET_DATA, P.set_data_body(B + "/sw-quiet", b"x"))
    raw.request(P.CREATE, P.create_body(B + "/sw-missing", b""))
    raw.request(P.CREATE, P.create_body(B + "/sw-quiet/c", b""))
    raw.request(P.SET_DATA, P.set_data_body(B + "/sw-data", b"2"))
    w.ping()
    rec("events on re-armed watches", w.notifications)
    rec("raw watcher close", w.close_session())
    w.close()
    for pth in ("/sw-parent/c", "/sw-parent", "/sw-quiet/c", "/sw-quiet", "/sw-data", "/sw-created", "/sw-missing"):
        raw.request(P.DELETE, P.delete_body(B + pth))
    rec("raw zxid close", raw.close_session())
    raw.close()

    # ------------------------------------------------------------ /zookeeper, 4lw, version
    call("exists /zookeeper", a.exists, "/zookeeper")
    call("children of /zookeeper", sorted_children, a, "/zookeeper")
    call("exists /zookeeper/config", a.exists, "/zookeeper/config")
    call("get /zookeeper/config", a.get, "/zookeeper/config")
    call("exists /zookeeper/quota", a.exists, "/zookeeper/quota")
    call("get_acls /zookeeper/config", a.get_acls, "/zookeeper/config")
    call("delete /zookeeper (BadArguments?)", a.delete, "/zookeeper")
    call("set /zookeeper/config (NoAuth?)", a.set, "/zookeeper/config", b"x")
    call("get_acls /", a.get_acls, "/")
    call("server_version major.minor", lambda: list(a.server_version()[:2]))
    # 4lw go to the primary member (on a ZooKeeper ensemble a follower: a
    # leader's srvr/stat print one more line); a session held open there gives
    # cons/stat a connection to list whichever members the clients landed on
    port = make_client.port
    holder = P.RawConnection(port)
    holder.handshake(timeout_ms=10000)
    rec("4lw ruok", four_letter_word(port, "ruok"))
    rec("4lw isro", four_letter_word(port, "isro"))
    for word in ("envi", "srvr", "conf", "stat", "cons", "wchs", "dirs", "crst", "srst"):
        rec("4lw %s keys" % word, four_letter_word_keys(port, word))
    # mntr: ZooKeeper 3.8 prints ~500 internal metrics (JVM, commit processor,
    # ...); the contract is the classic keys monitoring tools scrape, which
    # both servers must print (each may print more).
    mntr_keys = set(four_letter_word_keys(port, "mntr"))
    rec("4lw mntr classic keys", sorted(k for k in MNTR_CLASSIC_KEYS if k in mntr_keys))
    holder.close_session()
    holder.close()

    # ------------------------------------------------------------ final state
    for cl in (a, b, auth, sup):
        cl.stop()
        cl.close()
    c = make_client("Final", auth_data=[("digest", "super:" + SUPER_PASSWORD)])
    xsync(c)
    call("final tree under base", tree, c, B)
    c.stop()
    c.close()


MNTR_CLASSIC_KEYS = (
    "zk_version", "zk_avg_latency", "zk_max_latency", "zk_min_latency", "zk_packets_received",
    "zk_packets_sent", "zk_num_alive_connections", "zk_outstanding_requests", "zk_server_state",
    "zk_znode_count", "zk_watch_count", "zk_ephemerals_count", "zk_approximate_data_size",
    "zk_open_file_descriptor_count", "zk_max_file_descriptor_count", "zk_global_sessions",
    "zk_local_sessions", "zk_uptime",
)


def four_letter_word_keys(port, word):
    """Sorted set of 'keys' of a 4lw answer: for k=v / k:v / k<TAB>v lines the
    key, so values (versions, counters, paths) don't matter."""
    text = four_letter_word(port, word).decode("utf-8", "replace")
    keys = set()
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("/"):
            keys.add("<connection line>")
            continue
        for sep in ("\t", "=", ":"):
            if sep in line:
                keys.add(line.split(sep, 1)[0].strip())
                break
        else:
            keys.add("<line> " + re.sub(r"[0-9]+", "N", line))
    return sorted(keys)


def tree(client, path):
    """Every node under path: (path, data, version, cversion, numChildren, ephemeral?)."""
    out = []

    def walk(p):
        try:
            data, st = client.get(p)
        except NoNodeError:
            return
        out.append([p, data, st.version, st.cversion, st.aversion, st.numChildren, st.dataLength,
                    st.ephemeralOwner != 0])
        for ch in sorted(client.get_children(p)):
            walk(p.rstrip("/") + "/" + ch)

    walk(path)
    return out
