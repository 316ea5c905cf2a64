#!/usr/bin/env python3
"""Capture proxy for ZooKeeper's client protocol (stdlib only).

Sits between a ZooKeeper client and server, forwards every frame unchanged
in both directions, and writes each frame to its own golden file:

    <out>/<label>.<req|rsp>.hex

A golden file is a few `# key: value` header lines followed by the full frame
(4-byte length prefix included) as hex, 32 bytes per line.

Frames are named by a *label*. A driver program sets labels over a small
line-based control socket so that captures get descriptive, stable names:

    label NAME     the next client frame (pings excepted) is NAME; its reply,
                   matched by xid, gets the same name
    prefix NAME    unlabeled frames become NAME_<opname> (default: auto)
    wait NAME      block until the reply labeled NAME has been written
    drop           close every proxied connection (forces a reconnect, so
                   the client re-sends auth and SetWatches)
    quit           stop the proxy

Pings become ping, ping_2, ... (only the first --max-pings are recorded); watch notifications become
notification_<EventType>[_N]. Each command is answered with "ok" or "err ...".

Usage:
    capture_proxy.py --listen 127.0.0.1:21871 --upstream 127.0.0.1:21870 \
                     --control 127.0.0.1:21872 --out DIR
"""

import argparse
import os
import socket
import struct
import sys
import threading
import time

OPCODES = {
    0: "notification", 1: "create", 2: "delete", 3: "exists", 4: "getData",
    5: "setData", 6: "getACL", 7: "setACL", 8: "getChildren", 9: "sync",
    11: "ping", 12: "getChildren2", 13: "check", 14: "multi", 15: "create2",
    16: "reconfig", 17: "checkWatches", 18: "removeWatches",
    19: "createContainer", 20: "deleteContainer", 21: "createTTL",
    22: "multiRead", 100: "auth", 101: "setWatches", 102: "sasl",
    103: "getEphemerals", 104: "getAllChildrenNumber", 105: "setWatches2",
    106: "addWatch", 107: "whoAmI", -10: "createSession", -11: "closeSession",
}
EVENT_TYPES = {
    -1: "None", 1: "NodeCreated", 2: "NodeDeleted", 3: "NodeDataChanged",
    4: "NodeChildrenChanged", 5: "DataWatchRemoved", 6: "ChildWatchRemoved",
    7: "PersistentWatchRemoved",
}
PING_OP = 11
NOTIFICATION_XID = -1
MAX_FRAME = 16 * 1024 * 1024  # far above jute.maxbuffer; only a sanity cap
HEX_BYTES_PER_LINE = 32
WAIT_TIMEOUT_S = 20.0


class Registry:
    """Labels, file naming and completion tracking shared by all connections."""

    def __init__(self, out_dir, max_pings):
        self.out_dir = out_dir
        self.max_pings = max_pings
        self.pings = 0
        self.lock = threading.Condition()
        self.pending = None
        self.prefix = "auto"
        self.used = set()
        self.done = set()
        self.connections = []

    def unique(self, base):
        """Returns base, or base_2, base_3, ... if already taken."""
        name, n = base, 1
        while name in self.used:
            n += 1
            name = "%s_%d" % (base, n)
        self.used.add(name)
        return name

    def label_for_request(self, op):
        with self.lock:
            if op == PING_OP:
                self.pings += 1
                if self.pings > self.max_pings:
                    return None  # forwarded but not recorded
                return self.unique("ping")
            if self.pending is not None:
                name, self.pending = self.pending, None
                return self.unique(name)
            name = "connect" if op is None else OPCODES.get(op, "op%d" % op)
            return self.unique("%s_%s" % (self.prefix, name))

    def write(self, label, suffix, meta, frame):
        if label is None:
            return
        path = os.path.join(self.out_dir, "%s.%s.hex" % (label, suffix))
        lines = ["# keel-jute golden frame captured from Apache ZooKeeper by capture_proxy.py"]
        lines.append("# label: %s" % label)
        for key, value in meta:
            lines.append("# %s: %s" % (key, value))
        hexed = frame.hex()
        step = HEX_BYTES_PER_LINE * 2
        lines.extend(hexed[i:i + step] for i in range(0, len(hexed), step))
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")

    def mark_done(self, label):
        if label is None:
            return
        with self.lock:
            self.done.add(label)
            self.lock.notify_all()

    def wait(self, label):
        deadline = time.time() + WAIT_TIMEOUT_S
        with self.lock:
            while label not in self.done:
                left = deadline - time.time()
                if left <= 0:
                    return False
                self.lock.wait(left)
        return True


def read_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def read_frame(sock):
    prefix = read_exact(sock, 4)
    if prefix is None:
        return None
    (length,) = struct.unpack(">i", prefix)
    if length < 0 or length > MAX_FRAME:
        raise ValueError("bad frame length %d" % length)
    payload = read_exact(sock, length)
    if payload is None:
        return None
    return prefix + payload


def op_meta(op):
    return "%d (%s)" % (op, OPCODES.get(op, "?"))


class Connection:
    """One proxied client connection with its xid -> (label, op) table."""

    def __init__(self, registry, client, upstream):
        self.registry = registry
        self.client = client
        self.upstream = upstream
        self.lock = threading.Lock()
        self.connect_label = None
        self.inflight = {}

    def close(self):
        for s in (self.client, self.upstream):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def on_client_frame(self, frame, first):
        if first:
            label = self.registry.label_for_request(None)
            self.connect_label = label
            meta = [("direction", "client->server"), ("kind", "connect_request")]
            self.registry.write(label, "req", meta, frame)
            return
        xid, op = struct.unpack(">ii", frame[4:12])
        label = self.registry.label_for_request(op)
        with self.lock:
            self.inflight[xid] = (label, op)
        meta = [("direction", "client->server"), ("kind", "request"),
                ("xid", xid), ("opcode", op_meta(op))]
        self.registry.write(label, "req", meta, frame)

    def on_server_frame(self, frame, first):
        if first:
            label = self.connect_label or self.registry.unique("connect")
            meta = [("direction", "server->client"), ("kind", "connect_response")]
            self.registry.write(label, "rsp", meta, frame)
            self.registry.mark_done(label)
            return
        xid, zxid, err = struct.unpack(">iqi", frame[4:20])
        if xid == NOTIFICATION_XID:
            (event,) = struct.unpack(">i", frame[20:24])
            with self.registry.lock:
                label = self.registry.unique("notification_%s" % EVENT_TYPES.get(event, event))
            op = 0
        else:
            with self.lock:
                label, op = self.inflight.pop(xid, ("?", None))
            if label == "?":
                with self.registry.lock:
                    label = self.registry.unique("unmatched_xid%d" % xid)
                op = 0
        meta = [("direction", "server->client"), ("kind", "reply"),
                ("xid", xid), ("opcode", op_meta(op)), ("zxid", zxid), ("err", err)]
        self.registry.write(label, "rsp", meta, frame)
        self.registry.mark_done(label)

    def pump(self, src, dst, handler):
        first = True
        try:
            while True:
                frame = read_frame(src)
                if frame is None:
                    break
                handler(frame, first)
                first = False
                dst.sendall(frame)
        except (OSError, ValueError) as e:
            print("capture_proxy: connection ended: %s" % e, file=sys.stderr)
        finally:
            self.close()


def serve_clients(registry, listen, upstream_addr):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(listen)
    server.listen(16)
    while True:
        client, _ = server.accept()
        upstream = socket.create_connection(upstream_addr)
        conn = Connection(registry, client, upstream)
        with registry.lock:
            registry.connections.append(conn)
        threading.Thread(target=conn.pump, args=(client, upstream, conn.on_client_frame),
                         daemon=True).start()
        threading.Thread(target=conn.pump, args=(upstream, client, conn.on_server_frame),
                         daemon=True).start()


def handle_command(registry, line):
    cmd, _, arg = line.strip().partition(" ")
    if cmd == "label":
        with registry.lock:
            registry.pending = arg
        return "ok"
    if cmd == "prefix":
        with registry.lock:
            registry.prefix = arg or "auto"
        return "ok"
    if cmd == "wait":
        return "ok" if registry.wait(arg) else "err timeout waiting for %s" % arg
    if cmd == "drop":
        with registry.lock:
            conns, registry.connections = registry.connections, []
        for conn in conns:
            conn.close()
        return "ok"
    if cmd == "quit":
        os._exit(0)
    return "err unknown command %r" % cmd


def serve_control(registry, control):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(control)
    server.listen(4)
    while True:
        sock, _ = server.accept()
        threading.Thread(target=control_session, args=(registry, sock), daemon=True).start()


def control_session(registry, sock):
    with sock, sock.makefile("rw") as f:
        for line in f:
            f.write(handle_command(registry, line) + "\n")
            f.flush()


def host_port(text):
    host, _, port = text.rpartition(":")
    return host, int(port)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--listen", type=host_port, required=True)
    parser.add_argument("--upstream", type=host_port, required=True)
    parser.add_argument("--control", type=host_port, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--max-pings", type=int, default=2,
                        help="record at most this many pings (all are forwarded)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    registry = Registry(args.out, args.max_pings)
    threading.Thread(target=serve_control, args=(registry, args.control), daemon=True).start()
    serve_clients(registry, args.listen, args.upstream)


if __name__ == "__main__":
    main()
