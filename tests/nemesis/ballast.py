"""Ballast: large writes beside the checked workload, so that a nemesis run
of a minute or more fills the members' Raft logs past raft-engine's 64 MiB
files (rotation, purge, the rewrite queue) and grows their snapshots, while
members are killed, paused and cut off. A log file that did not survive
its rotation once made a killed member unable to restart; no workload of
small values ever reached one.

One thread writes incompressible values of VALUE_BYTES to BALLAST_PATHS
paths in turn, at `bytes_per_s` (NEMESIS_BALLAST_KIB_PER_S), through a
raw session on one member at a time; on any error it moves to the next
member with a new session. Each value starts with its sequence number.
`check` reads every path on every member after sync: each must hold the
newest value acknowledged for it, or one whose outcome is unknown (its
connection broke before the answer: it may take effect at any time after
it was sent, so also after a newer acknowledged one)."""

import os
import struct
import threading
import time

from harness import zkproto as zp

VALUE_BYTES = 256 * 1024
BALLAST_PATHS = 8
SESSION_TIMEOUT_MS = 10000
REQUEST_TIMEOUT_S = 15.0
RETRY_PAUSE_S = 0.2


class Ballast(threading.Thread):
    def __init__(self, ports, bytes_per_s, stop):
        super().__init__(name="ballast", daemon=True)
        assert bytes_per_s > 0
        self.ports, self.bytes_per_s, self.stop = ports, bytes_per_s, stop
        self.noise = [os.urandom(VALUE_BYTES - 8) for _ in range(4)]
        self.sequence = 0
        # path -> the sequence acknowledged last; path -> {sequences of unknown outcome}
        self.acknowledged = {}
        self.unknown = {}
        self.written_bytes = 0
        self.failures = 0
        self.error = None

    def path(self, sequence):
        return "/ballast-%d" % (sequence % BALLAST_PATHS)

    def value(self, sequence):
        return struct.pack(">q", sequence) + self.noise[sequence % len(self.noise)]

    def run(self):
        try:
            self._run()
        except Exception as e:  # noqa: BLE001 - reported by the run
            self.error = e

    def _run(self):
        member = 0
        started = time.monotonic()
        while not self.stop.is_set():
            port = self.ports[member % len(self.ports)]
            member += 1
            try:
                with zp.RawConnection(port, timeout=REQUEST_TIMEOUT_S) as conn:
                    conn.handshake(timeout_ms=SESSION_TIMEOUT_MS)
                    self._write_on(conn, started)
            except (OSError, zp.Closed, AssertionError, struct.error):
                self.failures += 1
                self.stop.wait(RETRY_PAUSE_S)

    def _write_on(self, conn, started):
        while not self.stop.is_set():
            due = started + self.written_bytes / self.bytes_per_s
            if due > time.monotonic():
                self.stop.wait(due - time.monotonic())
                continue
            self.sequence += 1
            sequence, path = self.sequence, self.path(self.sequence)
            self.unknown.setdefault(path, set()).add(sequence)
            hdr, _ = conn.request(zp.SET_DATA, zp.set_data_body(path, self.value(sequence)))
            if hdr["err"] == -101:  # the first write of this path
                err, _ = conn.create(path, self.value(sequence))
                if err not in (0, -110):
                    raise AssertionError("create %s: %s" % (path, zp.error_name(err)))
                if err == -110:
                    continue  # made by an earlier create of unknown outcome; written next time
            elif hdr["err"] != 0:
                raise AssertionError("setData %s: %s" % (path, zp.error_name(hdr["err"])))
            self.acknowledged[path] = sequence
            # A write of unknown outcome stays possible: a broken session's
            # request may still be applied after this one (a follower
            # resends what it forwarded after a leader change).
            self.unknown[path].discard(sequence)
            self.written_bytes += VALUE_BYTES

    def check(self, ports):
        """Violations (strings): a member whose value of a ballast path is
        older than the newest acknowledged one, or is none of the values
        that may be there."""
        found = []
        for port in ports:
            try:
                with zp.RawConnection(port, timeout=30.0) as conn:
                    conn.handshake(timeout_ms=30000)
                    hdr, _ = conn.request(zp.SYNC, zp.ustr("/"))
                    assert hdr["err"] == 0, zp.error_name(hdr["err"])
                    for path, acknowledged in sorted(self.acknowledged.items()):
                        hdr, body = conn.request(zp.GET_DATA, zp.path_watch_body(path))
                        if hdr["err"] != 0:
                            found.append("ballast %s on port %d: %s" % (path, port, zp.error_name(hdr["err"])))
                            continue
                        data = body.buf()
                        held = struct.unpack(">q", data[:8])[0] if len(data) >= 8 else None
                        allowed = {acknowledged} | self.unknown.get(path, set())
                        if held not in allowed or data != self.value(held):
                            found.append("ballast %s on port %d holds write %r, acknowledged %d (may also be %s)"
                                         % (path, port, held, acknowledged, sorted(self.unknown.get(path, ()))))
            except (OSError, zp.Closed, AssertionError) as e:
                found.append("ballast check on port %d failed: %s" % (port, e))
        return found
