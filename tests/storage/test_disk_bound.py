"""The data directory stays bounded under a long stream of large writes
(Keel only).

Large values make large log entries: group commit packs up to 4 MiB of
writes into one entry. The log behind the oldest kept snapshot is bounded
in entries (LOG_KEPT_BEHIND_SNAPSHOT) and in bytes
(LOG_KEPT_BEHIND_SNAPSHOT_BYTES, crates/consensus/src/core.rs); with the
entry count alone, a thousand 4 MiB entries stayed on disk, and a node
written 200 KiB values for a minute held 3 GB of log.

One node takes 1 GiB of incompressible setData (256 KiB values, 16 in
flight) with a snapshot every 16 MiB of log; its data directory is
sampled throughout and must stay under DATA_DIR_BYTES_MAX. Then it is
killed with -9, its newest snapshot is damaged, and the restart must fall
back to the snapshot before it and replay the log kept behind it: every
znode holds the last value acknowledged for it."""

import os
import threading
import time

import pytest

from conftest import candidate_kind, report_summary, require_keel
from harness import dir_bytes, make_server, snapshot_files
from harness import zkproto as zp

VALUE_BYTES = 256 * 1024
WRITTEN_BYTES = 1 << 30
IN_FLIGHT = 16
ZNODES = 24
SNAPSHOT_EVERY_LOG_BYTES = 16 << 20
# What raft-engine keeps (crates/consensus/src/store.rs): it purges its
# append queue once that passes 256 MiB (files of 64 MiB), down to the
# files that hold the log since the oldest snapshot (here about
# 2 x 16 MiB, plus at most 16 MiB behind it); the active file grows
# 64 MiB more meanwhile; live entries of old files are copied to its
# rewrite queue, purged once that passes 64 MiB and is mostly garbage.
# 256 + 64 + 2 x 64, and a file more each for a purge that runs behind
# and for the snapshots and a rewrite in progress.
DATA_DIR_BYTES_MAX = (256 + 64 + 2 * 64 + 64 + 64) << 20
SAMPLE_S = 0.2


def write_stream(server):
    """setData of fresh random values, IN_FLIGHT pipelined, until
    WRITTEN_BYTES went out; returns {path: last acknowledged value}."""
    blobs = [os.urandom(VALUE_BYTES) for _ in range(IN_FLIGHT * 2)]
    paths = ["/big%02d" % i for i in range(ZNODES)]
    acknowledged = {}
    with zp.RawConnection(server.port, timeout=30.0) as conn:
        conn.handshake(timeout_ms=30000)
        for path in paths:
            err, _ = conn.create(path)
            assert err == 0, zp.error_name(err)
        sent = 0
        in_flight = []
        while sent < WRITTEN_BYTES or in_flight:
            while sent < WRITTEN_BYTES and len(in_flight) < IN_FLIGHT:
                n = sent // VALUE_BYTES
                path, value = paths[n % ZNODES], blobs[n % len(blobs)]
                conn.xid += 1
                conn.send_frame(zp.i32(conn.xid) + zp.i32(zp.SET_DATA) + zp.set_data_body(path, value))
                in_flight.append((conn.xid, path, value))
                sent += VALUE_BYTES
            reply = zp.Reader(conn.read_frame())
            xid, _, err = reply.i32(), reply.i64(), reply.i32()
            expected, path, value = in_flight.pop(0)
            assert xid == expected, "reply to %d, expected %d" % (xid, expected)
            assert err == 0, "setData %s: %s" % (path, zp.error_name(err))
            acknowledged[path] = value
    return acknowledged


@pytest.mark.timeout(300)
def test_large_writes_leave_the_data_dir_bounded_and_a_fallback_restart_loses_nothing():
    if candidate_kind() != "keel":
        pytest.skip("Keel's data directory")
    require_keel()
    server = make_server("keel", name="keel-diskbound",
                         settings={"snapshot_every_log_bytes": SNAPSHOT_EVERY_LOG_BYTES})
    server.start()
    try:
        peak = [0]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], dir_bytes(server.data_dir))
                done.wait(SAMPLE_S)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.monotonic()
        try:
            acknowledged = write_stream(server)
        finally:
            done.set()
            sampler.join()
        took = time.monotonic() - started
        end_bytes = dir_bytes(server.data_dir)
        report_summary("disk bound: %d MiB of setData in %.1f s; data dir peak %.0f MiB, %.0f MiB at the end "
                       "(bound %d MiB)" % (WRITTEN_BYTES >> 20, took, peak[0] / 2**20, end_bytes / 2**20,
                                           DATA_DIR_BYTES_MAX >> 20))
        assert peak[0] < DATA_DIR_BYTES_MAX, \
            "the data dir reached %d bytes for %d written" % (peak[0], WRITTEN_BYTES)

        server.kill()
        snapshots = [path for _, path in snapshot_files(server.data_dir)]
        assert len(snapshots) >= 2, "two snapshots kept: %r" % snapshots
        with open(snapshots[-1], "r+b") as f:
            f.seek(os.path.getsize(snapshots[-1]) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x20]))
        server.start()
        assert "corrupt snapshot refused" in server.log_since_start()
        with zp.RawConnection(server.port, timeout=30.0) as conn:
            conn.handshake(timeout_ms=30000)
            for path, value in sorted(acknowledged.items()):
                hdr, body = conn.request(zp.GET_DATA, zp.path_watch_body(path))
                assert hdr["err"] == 0, "%s: %s" % (path, zp.error_name(hdr["err"]))
                assert body.buf() == value, "%s lost its last acknowledged value after the restart" % path
    finally:
        server.stop()
