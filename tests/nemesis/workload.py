"""The clients of a nemesis run and the history they record.

Each client is a thread with one ZooKeeper session at a time
(nemesis.client.Session, raw protocol) on a small key space that rotates
every `epoch_s` seconds (Jepsen's independent keys: the checker splits a
history by top-level node, so each epoch's groups are checked alone and a
fault's unknown outcomes only cost the search of their own epoch):

    /e<epoch>-g<0..GROUPS-1>            groups
    /e<epoch>-g<j>/<a|b|c>              children
    /e<epoch>-g<j>/s-<10 digits>        sequential children

A session lives in one epoch: at the next one its client closes it and
opens another. It creates its ephemerals in one group (its home), and a
multi stays in one group: the checker must check together every group a
session's closeSession touches (its ephemerals) and every group of a
multi, so this keeps each group of each epoch a part of its own. Steps (like crates/sim/src/workload.rs): creates (15%
sequential, 25% ephemeral), setData and delete with versions (40% any),
multi of 2-3 ops (with checks), reads after `sync` (recorded for the
linearizability checker), local reads (recorded with "local": true and
checked for session order only: ZooKeeper's promise), explicit
closeSession, and abandoned sessions (the connection dropped without a
close: the session must expire, and the ephemeral monitor times how long
its ephemerals outlive the abandonment).

Every operation is recorded with its invocation and completion time (µs of
one monotonic clock), process (client), session, outcome (None = unknown),
the reply's zxid and the member that answered. Python standard library
only."""

import random
import threading
import time

from .client import SESSION_EXPIRED, Expired, GaveUp, Session, session_alive

GROUPS = 3
CHILDREN = ("a", "b", "c")
SEQUENTIAL_PREFIX = "s-"
# Process ids of records that are not a client's own request order.
EXPIRY_PROCESS_BASE = 1_000_000   # a session's end observed by client N: N + base
MONITOR_PROCESS = 2_000_000
FINAL_PROCESS = 2_000_001
MONITOR_INTERVAL_S = 0.5
# A client waits 0..2 x this between its requests: keeps the history small
# enough for the checker (~40 requests/s per client) and the CPU modest.
THINK_MS = 12


class Clock:
    """µs since the run started (one monotonic clock for every record)."""

    def __init__(self):
        self.t0 = time.monotonic()

    def now(self):
        return int((time.monotonic() - self.t0) * 1e6)

    def seconds(self):
        return time.monotonic() - self.t0


class Recorder:
    """The history (list of dicts in the jsonl format of keel-linearize, plus
    zxid/node/stat) and what is known of every session."""

    def __init__(self, clock):
        self.clock = clock
        self.ops = []
        self.sessions = {}
        self.lock = threading.Lock()

    def invoke(self, process, session, call, local=False):
        op = {"process": process, "session": session, "invoke": self.clock.now(), "call": call, "ret": None}
        if local:
            op["local"] = True
        with self.lock:
            self.ops.append(op)
        return op

    def complete(self, op, reply):
        """Fill in a Reply (ret None leaves the outcome unknown)."""
        if reply.node is not None:
            op["node"] = reply.node
        if reply.ret is None:
            return
        op["complete"] = max(self.clock.now(), op["invoke"] + 1)
        op["ret"] = reply.ret
        if reply.zxid is not None:
            op["zxid"] = reply.zxid
        if reply.stat is not None:
            op["stat"] = reply.stat

    def record_done(self, process, session, call, invoke, ret):
        """An operation known only afterwards (a session's end)."""
        op = {"process": process, "session": session, "invoke": invoke, "call": call, "ret": None}
        if ret is not None:
            op["complete"] = max(self.clock.now(), invoke + 1)
            op["ret"] = ret
        with self.lock:
            self.ops.append(op)
        return op


class KeySpace:
    def __init__(self, clock, epoch_s):
        self.clock = clock
        self.epoch_s = epoch_s
        self.epochs_used = set()

    def epoch(self):
        return int(self.clock.seconds() // self.epoch_s)

    @staticmethod
    def groups(epoch):
        return ["/e%d-g%d" % (epoch, j) for j in range(GROUPS)]

    @staticmethod
    def paths(epoch):
        out = []
        for g in KeySpace.groups(epoch):
            out.append(g)
            out.extend("%s/%s" % (g, c) for c in CHILDREN)
        return out


class SessionInfo:
    """What the run knows of one session (Recorder.sessions[id])."""

    def __init__(self, process, session_id, passwd, epoch, start):
        self.process = process
        self.session_id = session_id
        self.passwd = passwd
        self.epoch = epoch
        self.start = start
        self.alive_at = start      # latest invoke of a request that proved it alive
        self.end = None            # how it ended: closed, expired, abandoned, gave-up
        self.end_at = None
        self.close_op = None       # the record of its end (closeSession)
        self.ephemerals = set()    # paths it created (or may have) as ephemerals
        self.home = None           # the group of its ephemerals
        self.last_zxid = 0
        self.seen_at = None        # µs: latest sync before a read that still showed an ephemeral of it


class Client(threading.Thread):
    """One workload client: sessions one after the other until `stop`."""

    def __init__(self, cid, ports, recorder, keys, seed, timeout_ms, stop, monitor):
        super().__init__(name="nemesis-client-%d" % cid, daemon=True)
        self.cid = cid
        self.ports = ports
        self.rec = recorder
        self.keys = keys
        self.rng = random.Random(seed)
        self.timeout_ms = timeout_ms
        self.stop_event = stop
        self.monitor = monitor
        self.session = None
        self.info = None
        self.writes = 0
        self.error = None

    # -------------------------------------------------------------- sessions
    def _open(self):
        s = Session(self.ports, self.cid + self.rng.randrange(len(self.ports)), self.timeout_ms, self.rec.clock)
        start = self.rec.clock.now()
        if not s.open(deadline_s=5.0):
            time.sleep(0.2)
            return
        epoch = self.keys.epoch()
        self.keys.epochs_used.add(epoch)
        self.session = s
        self.info = SessionInfo(self.cid, s.session_id, s.passwd, epoch, start)
        self.info.home = self.rng.randrange(GROUPS)
        with self.rec.lock:
            self.rec.sessions[s.session_id] = self.info

    def _ended(self, how, op):
        info = self.info
        info.end, info.end_at, info.close_op = how, self.rec.clock.now(), op
        info.last_zxid = self.session.last_zxid
        self.session, self.info = None, None

    def _expired(self):
        """A member said the session is gone: it closed (expired) at some
        point after the last request that found it alive."""
        op = self.rec.record_done(self.cid + EXPIRY_PROCESS_BASE, self.info.session_id, {"op": "closeSession"},
                                  self.info.alive_at, {"type": "done"})
        self._ended("expired", op)

    def _abandon(self, how="abandoned"):
        """Drop the session without closing it: it must expire by itself."""
        self.session.abandon()
        op = self.rec.record_done(self.cid + EXPIRY_PROCESS_BASE, self.info.session_id, {"op": "closeSession"},
                                  self.rec.clock.now(), None)
        info = self.info
        self._ended(how, op)
        if info.ephemerals:
            self.monitor.watch(info)

    def _close(self):
        try:
            self.session.ensure()
        except Expired:
            return self._expired()
        except GaveUp:
            return self._abandon("gave-up")
        op = self.rec.invoke(self.cid, self.info.session_id, {"op": "closeSession"})
        reply = self.session.close()
        self.rec.complete(op, reply)
        if reply.ret is not None and reply.ret.get("code") == SESSION_EXPIRED:
            self._ended("expired", op)
            return
        info = self.info
        self._ended("closed" if reply.ret is not None else "close-unknown", op)
        if reply.ret is None and info.ephemerals:
            self.monitor.watch(info)

    # -------------------------------------------------------------- steps
    def _path(self, epoch, group=None):
        group = "/e%d-g%d" % (epoch, self.rng.randrange(GROUPS) if group is None else group)
        if self.rng.random() < 0.25:
            return group
        return "%s/%s" % (group, self.rng.choice(CHILDREN))

    def _version(self):
        return -1 if self.rng.random() < 0.4 else self.rng.randrange(3)

    def _data(self):
        self.writes += 1
        return "p%d-%d" % (self.cid, self.writes)

    def _write(self, epoch, data, group=None, in_multi=False):
        """A write in `group` (default: any; ephemerals only in the home group)."""
        kind = self.rng.randrange(4 if in_multi else 3)
        if kind == 0:
            ephemeral = self.rng.random() < 0.25 and group in (None, self.info.home)
            if ephemeral:
                group = self.info.home
            if group is None:
                group = self.rng.randrange(GROUPS)
            sequential = self.rng.random() < 0.15
            path = ("/e%d-g%d/%s" % (epoch, group, SEQUENTIAL_PREFIX) if sequential else self._path(epoch, group))
            call = {"op": "create", "path": path, "data": data}
            if ephemeral:
                call["ephemeral"] = True
            if sequential:
                call["sequential"] = True
            return call
        if kind == 1:
            return {"op": "setData", "path": self._path(epoch, group), "data": data, "version": self._version()}
        if kind == 2:
            return {"op": "delete", "path": self._path(epoch, group), "version": self._version()}
        return {"op": "check", "path": self._path(epoch, group), "version": self._version()}

    def _read(self, epoch):
        kind = self.rng.randrange(3)
        if kind == 2:
            return {"op": "getChildren", "path": "/e%d-g%d" % (epoch, self.rng.randrange(GROUPS))}
        return {"op": ("getData", "exists")[kind], "path": self._path(epoch)}

    def _note_ephemerals(self, call):
        subs = call["ops"] if call["op"] == "multi" else [call]
        for sub in subs:
            if sub["op"] == "create" and sub.get("ephemeral"):
                # Sequential names are only known from the reply: watch the group.
                self.info.ephemerals.add(sub["path"].rsplit("/", 1)[0] + "/*" if sub.get("sequential")
                                         else sub["path"])

    def _request(self, call, local=False):
        op = self.rec.invoke(self.cid, self.info.session_id, call, local)
        if call["op"] in ("create", "multi"):
            self._note_ephemerals(call)
        reply = self.session.call(call)
        self.rec.complete(op, reply)
        self._after(op, reply)

    def _synced_read(self, call):
        op = self.rec.invoke(self.cid, self.info.session_id, call)
        if not self.session.sync(call["path"]):
            op["ret"] = None  # the read was never sent: a read of unknown outcome constrains nothing
            op["note"] = "sync failed"
            if self.session.expired:
                self._expired()
            return
        reply = self.session.call(call)
        self.rec.complete(op, reply)
        self._after(op, reply)

    def _after(self, op, reply):
        if reply.ret is None:
            return
        if reply.ret.get("type") == "error" and reply.ret.get("code") == SESSION_EXPIRED:
            self._expired()
            return
        self.info.alive_at = max(self.info.alive_at, op["invoke"])

    def step(self):
        epoch = self.info.epoch
        roll = self.rng.randrange(1000)
        if roll < 5:
            return self._abandon()
        if roll < 15:
            return self._close()
        if roll < 415:
            return self._request(self._write(epoch, self._data()))
        if roll < 515:
            data, group = self._data(), self.rng.randrange(GROUPS)
            ops = [self._write(epoch, "%s.%d" % (data, i), group, in_multi=True)
                   for i in range(self.rng.randrange(2, 4))]
            return self._request({"op": "multi", "ops": ops})
        if roll < 795:
            return self._synced_read(self._read(epoch))
        return self._request(self._read(epoch), local=True)

    def run(self):
        try:
            while not self.stop_event.is_set():
                if self.session is None:
                    self._open()
                    continue
                if self.keys.epoch() != self.info.epoch:
                    self._close()
                    continue
                try:
                    self.session.ensure()
                except Expired:
                    self._expired()
                    continue
                except GaveUp:
                    self._abandon("gave-up")
                    continue
                self.step()
                time.sleep(self.rng.uniform(0, 2 * THINK_MS / 1000.0))
            if self.session is not None:
                self._close()
        except BaseException as e:  # noqa: BLE001 - reported by the run
            self.error = e
            raise


class EphemeralMonitor(threading.Thread):
    """Times how long the ephemerals of abandoned sessions (and of sessions
    whose close was not answered) outlive them: every MONITOR_INTERVAL_S it
    reads each such path after a sync, until no node there is owned by the
    session. Its reads are recorded as synced reads."""

    def __init__(self, ports, recorder, timeout_ms, stop):
        super().__init__(name="nemesis-ephemeral-monitor", daemon=True)
        self.ports = ports
        self.rec = recorder
        self.timeout_ms = timeout_ms
        self.stop_event = stop
        self.pending = []
        self.synced_at = 0
        self.gone = {}      # session id -> (abandoned at µs, gone at µs)
        self.seen = {}      # session id -> (abandoned at µs, latest µs an ephemeral of it was still seen)
        self.halt = threading.Event()  # stop even with sessions pending
        self.lock = threading.Lock()
        self.session = None
        self.error = None

    def watch(self, info):
        with self.lock:
            self.pending.append(info)

    def _read(self, path, owner):
        """True if no node at `path` (or under it, for "group/*") is owned by
        `owner`; None if unknown; False if one is (at some moment after
        self.synced_at)."""
        if path.endswith("/*"):
            group = path[:-2]
            call = {"op": "getChildren", "path": group}
            got = self._synced(call)
            if got is None:
                return None
            if got.get("type") != "children":
                return True
            verdicts = [self._read("%s/%s" % (group, name), owner) for name in got["names"]]
            return None if None in verdicts else all(verdicts)
        got = self._synced({"op": "getData", "path": path}, want_stat=True)
        if got is None:
            return None
        ret, stat = got
        return ret.get("type") != "data" or stat is None or stat["ephemeralOwner"] != owner

    def _synced(self, call, want_stat=False):
        s = self.session
        op = self.rec.invoke(MONITOR_PROCESS, s.session_id, call)
        self.synced_at = op["invoke"]
        if not s.sync(call["path"]):
            return None
        reply = s.call(call)
        self.rec.complete(op, reply)
        if reply.ret is None:
            return None
        return (reply.ret, reply.stat) if want_stat else reply.ret

    def _poll(self):
        with self.lock:
            pending = list(self.pending)
        for info in pending:
            verdicts = []
            for path in sorted(info.ephemerals):
                verdicts.append(self._read(path, info.session_id))
                if verdicts[-1] is False:
                    info.seen_at = self.synced_at
                    break
            if None not in verdicts and all(verdicts):
                with self.lock:
                    self.pending.remove(info)
                    self.gone[info.session_id] = (info.end_at, self.rec.clock.now())
                    if info.seen_at is not None:
                        self.seen[info.session_id] = (info.end_at, info.seen_at)

    def run(self):
        try:
            while not self.halt.is_set():
                if self.session is None or self.session.expired:
                    s = Session(self.ports, 0, self.timeout_ms, self.rec.clock)
                    if not s.open(deadline_s=5.0):
                        continue
                    self.session = s
                try:
                    self.session.ensure()
                    self._poll()
                except (Expired, GaveUp):
                    self.session = None
                    continue
                with self.lock:
                    idle = not self.pending
                if self.stop_event.is_set() and idle:
                    break
                if self.stop_event.wait(MONITOR_INTERVAL_S) and not idle:
                    time.sleep(MONITOR_INTERVAL_S)
            if self.session is not None:
                self.session.close()
        except BaseException as e:  # noqa: BLE001 - reported by the run
            self.error = e
            raise

    def still_pending(self):
        with self.lock:
            return list(self.pending)


def confirm_ended(ports, recorder, timeout_ms):
    """After the run: every session that ended without a known close
    (abandoned, gave up, close unanswered) must have expired. Its end record
    gets the moment a member said so. Returns the sessions still alive and
    those no member could tell about."""
    alive, unknown = [], []
    for info in list(recorder.sessions.values()):
        if info.end not in ("abandoned", "gave-up", "close-unknown") or info.close_op is None:
            continue
        verdict = session_alive(ports, info.session_id, info.passwd, timeout_ms, info.last_zxid)
        if verdict is False:
            op = info.close_op
            op["complete"] = max(recorder.clock.now(), op["invoke"] + 1)
            op["ret"] = {"type": "done"}
        elif verdict is True:
            alive.append(info)
        else:
            unknown.append(info)
    return alive, unknown
