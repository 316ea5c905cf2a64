"""kazoo helpers: requests kazoo 2.11 lacks (container, TTL, addWatch,
removeWatches, checkWatches, getEphemerals, getAllChildrenNumber, whoAmI), a
client factory that records sessions into a Trace, and wire-level capture of
watch notifications."""

import logging
import struct
import threading
import time
from collections import namedtuple

from kazoo.client import KazooClient
from kazoo.protocol.serialization import (
    Watch, int_struct, read_buffer, read_string, write_buffer, write_string, ZnodeStat,
    stat_struct,
)
from kazoo.protocol.states import Callback

logging.getLogger("kazoo").setLevel(logging.CRITICAL)

CONTAINER_FLAG = 4
TTL_FLAG = 5
TTL_SEQUENTIAL_FLAG = 6
ADD_WATCH_PERSISTENT = 0
ADD_WATCH_PERSISTENT_RECURSIVE = 1
WATCHER_CHILDREN = 1
WATCHER_DATA = 2
WATCHER_ANY = 3

EVENT_NAMES = {1: "NodeCreated", 2: "NodeDeleted", 3: "NodeDataChanged", 4: "NodeChildrenChanged",
               5: "DataWatchRemoved", 6: "ChildWatchRemoved", 7: "PersistentWatchRemoved", -1: "None"}
STATE_NAMES = {0: "Disconnected", 3: "SyncConnected", 4: "AuthFailed", 5: "ConnectedReadOnly",
               6: "SaslAuthenticated", -112: "Expired", 7: "Closed"}


def _acl_bytes(acls):
    b = bytearray(int_struct.pack(len(acls)))
    for acl in acls:
        b.extend(int_struct.pack(acl.perms) + write_string(acl.id.scheme) + write_string(acl.id.id))
    return b


def _read_stat(bytes_, offset):
    return ZnodeStat._make(stat_struct.unpack_from(bytes_, offset))


class CreateContainer(namedtuple("CreateContainer", "path data acl")):
    type = 19

    def serialize(self):
        b = bytearray(write_string(self.path))
        b.extend(write_buffer(self.data))
        b.extend(_acl_bytes(self.acl))
        b.extend(int_struct.pack(CONTAINER_FLAG))
        return b

    @classmethod
    def deserialize(cls, bytes_, offset):
        path, offset = read_string(bytes_, offset)
        return path, _read_stat(bytes_, offset)


class CreateTTL(namedtuple("CreateTTL", "path data acl flags ttl")):
    type = 21

    def serialize(self):
        b = bytearray(write_string(self.path))
        b.extend(write_buffer(self.data))
        b.extend(_acl_bytes(self.acl))
        b.extend(int_struct.pack(self.flags))
        b.extend(struct.pack(">q", self.ttl))
        return b

    @classmethod
    def deserialize(cls, bytes_, offset):
        path, offset = read_string(bytes_, offset)
        return path, _read_stat(bytes_, offset)


class AddWatch(namedtuple("AddWatch", "path mode")):
    type = 106

    def serialize(self):
        return bytearray(write_string(self.path) + int_struct.pack(self.mode))

    @classmethod
    def deserialize(cls, bytes_, offset):
        return True


class RemoveWatches(namedtuple("RemoveWatches", "path watcher_type")):
    type = 18

    def serialize(self):
        return bytearray(write_string(self.path) + int_struct.pack(self.watcher_type))

    @classmethod
    def deserialize(cls, bytes_, offset):
        return True


class CheckWatches(RemoveWatches):
    type = 17


class GetEphemerals(namedtuple("GetEphemerals", "prefix")):
    type = 103

    def serialize(self):
        return bytearray(write_string(self.prefix))

    @classmethod
    def deserialize(cls, bytes_, offset):
        n = int_struct.unpack_from(bytes_, offset)[0]
        offset += 4
        out = []
        for _ in range(max(n, 0)):
            s, offset = read_string(bytes_, offset)
            out.append(s)
        return out


class GetAllChildrenNumber(namedtuple("GetAllChildrenNumber", "path")):
    type = 104

    def serialize(self):
        return bytearray(write_string(self.path))

    @classmethod
    def deserialize(cls, bytes_, offset):
        return int_struct.unpack_from(bytes_, offset)[0]


class WhoAmI(namedtuple("WhoAmI", "")):
    type = 107

    def serialize(self):
        return bytearray()

    @classmethod
    def deserialize(cls, bytes_, offset):
        n = int_struct.unpack_from(bytes_, offset)[0]
        offset += 4
        out = []
        for _ in range(max(n, 0)):
            scheme, offset = read_string(bytes_, offset)
            user, offset = read_string(bytes_, offset)
            out.append([scheme, user])
        return out


def call_ext(client, request, timeout=10.0):
    """Send a custom request through kazoo's connection; return its result or
    raise the kazoo exception mapped from the server's error code."""
    async_result = client.handler.async_result()
    client._call(request, async_result)
    return async_result.get(timeout=timeout)


class RecordingClient(KazooClient):
    """KazooClient that records every watch notification as it comes off the
    wire (reader thread, arrival order) and every connection-state change."""

    def __init__(self, *a, name="client", **kw):
        super().__init__(*a, **kw)
        self.name = name
        self.wire_events = []
        self.callback_events = []
        self.states = []
        self._wire_seen = 0
        self._cb_seen = 0
        self._lock = threading.Lock()
        conn = self._connection
        orig = conn._read_watch_event

        def read_watch_event(buffer, offset, _orig=orig):
            w, _ = Watch.deserialize(buffer, offset)
            with self._lock:
                self.wire_events.append({"type": EVENT_NAMES.get(w.type, w.type),
                                         "state": STATE_NAMES.get(w.state, w.state),
                                         "path": w.path})
            return _orig(buffer, offset)

        conn._read_watch_event = read_watch_event
        self.add_listener(lambda st: self.states.append(str(st)))

    # A watcher function that records kazoo-level callbacks under a tag.
    def watcher(self, tag):
        def w(event):
            with self._lock:
                self.callback_events.append({"watcher": tag, "type": event.type, "path": event.path})
        return w

    def flush(self):
        """Make sure every notification the server sent before now has been read
        and every kazoo watch callback queued so far has run: one round trip on
        this connection, then a barrier through the callback queue."""
        try:
            self.exists("/")
        except Exception:
            pass
        done = threading.Event()
        self.handler.dispatch_callback(Callback("watch", done.set, ()))
        done.wait(10)

    def take_events(self, expect=None, timeout=5.0):
        """Events since the last call: {"wire": [...], "callbacks": [...]}. If
        `expect` (number of wire events) is given and not yet met after the
        flush, keep waiting up to `timeout` and mark what arrived late."""
        self.flush()
        with self._lock:
            wire = self.wire_events[self._wire_seen:]
        late = []
        if expect is not None and len(wire) < expect:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                time.sleep(0.05)
                with self._lock:
                    now = self.wire_events[self._wire_seen:]
                if len(now) >= expect:
                    break
            self.flush()
            with self._lock:
                late = self.wire_events[self._wire_seen + len(wire):]
        with self._lock:
            self._wire_seen = len(self.wire_events)
            # kazoo keeps watchers in a set: their call order is client-side noise
            cbs = sorted(self.callback_events[self._cb_seen:], key=lambda e: (str(e["path"]), e["watcher"], str(e["type"])))
            self._cb_seen = len(self.callback_events)
        out = {"wire": wire, "callbacks": cbs}
        if late:
            out["late"] = late
        return out


class ClientFactory:
    """make_client(name, **kazoo_kwargs) -> started RecordingClient whose
    session id is registered with the trace under `name`."""

    client_class = RecordingClient

    def __init__(self, server, trace=None, default_timeout=10.0):
        self.server = server
        self.trace = trace
        self.default_timeout = default_timeout
        self.clients = []

    @property
    def port(self):
        return self.server.port

    @property
    def address(self):
        return self.server.address

    def __call__(self, name, hosts=None, timeout=None, start=True, **kw):
        c = self.client_class(hosts=hosts or self.server.address,
                              timeout=timeout or self.default_timeout, name=name, **kw)
        self.clients.append(c)
        if start:
            c.start(timeout=20)
            if self.trace is not None:
                self.trace.register_session(name, c.client_id[0])
        return c

    def close_all(self):
        for c in self.clients:
            try:
                c.stop()
                c.close()
            except Exception:
                pass
        self.clients = []
