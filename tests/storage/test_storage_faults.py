"""Storage faults on a single Keel node: bytes flipped in each kind of file
of its data dir (the newest snapshot, every snapshot, the middle of the
Raft log, the log's tail torn off, IDENTITY), then a restart. Keel must
either start and hold every acknowledged write (falling back to the
previous snapshot plus the log, with the reason logged), or refuse to
start with a clear message: never start and silently miss committed
writes, never panic. A torn tail may lose only a suffix of the writes
(each multi whole or not at all).

Writes are multis of BATCH creates (/s/<i>, data "v<i>"), acknowledged one
by one; snapshots every SNAPSHOT_EVERY entries so that two snapshot files
and log entries after the newest exist; the node is killed with SIGKILL
before the damage (no snapshot at shutdown)."""

import glob
import os
import time

import pytest
from kazoo.client import KazooClient

from conftest import report_summary, require_keel
from harness import KeelServer
from harness.servers import ServerStartError

BATCH = 25
BATCHES_BEFORE = 40
BATCHES_AFTER = 12
SNAPSHOT_EVERY = 10
SNAPSHOT_WAIT_S = 20.0


def write_batches(client, first, count):
    for b in range(first, first + count):
        tx = client.transaction()
        for i in range(b * BATCH, (b + 1) * BATCH):
            tx.create("/s/%06d" % i, b"v%d" % i)
        results = tx.commit()
        assert all(isinstance(r, str) for r in results), results
    return (first + count) * BATCH


def snapshots(data_dir):
    return sorted(glob.glob(os.path.join(data_dir, "snapshots", "snapshot-*.snap")),
                  key=lambda p: int(os.path.basename(p).split("-")[1]))


def log_files(data_dir):
    return sorted(glob.glob(os.path.join(data_dir, "raft", "*.raftlog")))


def data_end(path):
    """Offset after the last non-zero byte (raft-engine may preallocate)."""
    with open(path, "rb") as f:
        data = f.read()
    return len(data.rstrip(b"\x00"))


def flip(path, offset, count=8):
    with open(path, "r+b") as f:
        f.seek(offset)
        old = f.read(count)
        f.seek(offset)
        f.write(bytes(b ^ 0xA5 for b in old))


@pytest.fixture
def loaded(servers, tmp_path):
    """A killed node whose data dir holds two snapshots and a log tail;
    returns (server, number of acknowledged znodes)."""
    require_keel()
    server = servers("keel", settings={"snapshot_every_entries": SNAPSHOT_EVERY})
    client = KazooClient(hosts=server.address, timeout=10)
    client.start(timeout=20)
    client.create("/s")
    acked = write_batches(client, 0, BATCHES_BEFORE)
    deadline = time.monotonic() + SNAPSHOT_WAIT_S
    while len(snapshots(server.data_dir)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(snapshots(server.data_dir)) >= 2, os.listdir(os.path.join(server.data_dir, "snapshots"))
    acked = write_batches(client, BATCHES_BEFORE, BATCHES_AFTER)
    client.stop()
    client.close()
    server.kill()
    return server, acked


def restart(server):
    """(serving, log text of the restart)."""
    before = len(server.log_text())
    try:
        server.start(timeout=60)
        serving = True
    except ServerStartError:
        serving = False
    text = server.log_text()[before:]
    assert "panicked" not in text, text[-3000:]
    return serving, text


def present(server):
    client = KazooClient(hosts=server.address, timeout=10)
    client.start(timeout=20)
    try:
        names = client.get_children("/s") if client.exists("/s") else []
        for name in names[:: max(1, len(names) // 50)]:
            data, _ = client.get("/s/" + name)
            assert data == b"v%d" % int(name), (name, data)
        return sorted(int(n) for n in names)
    finally:
        client.stop()
        client.close()


def assert_all_or_refused(server, acked, serving, log):
    if not serving:
        assert server.proc.returncode not in (0, None), log[-2000:]
        reason = [line.strip() for line in log.splitlines() if line.strip().startswith("0:")]
        return "refused (%s)" % (reason[0] if reason else "exit %d" % server.proc.returncode)
    got = present(server)
    assert got == list(range(acked)), (
        "started but misses acknowledged writes: %d of %d present (first missing %s)\n%s"
        % (len(got), acked, next((i for i in range(acked) if i not in set(got)), None), log[-3000:]))
    return "recovered"


def test_corrupt_newest_snapshot_falls_back_to_the_previous_one(loaded):
    server, acked = loaded
    newest = snapshots(server.data_dir)[-1]
    flip(newest, os.path.getsize(newest) // 2)
    serving, log = restart(server)
    assert serving, log[-3000:]
    assert "corrupt snapshot" in log and os.path.basename(newest) in log, log[-3000:]
    assert present(server) == list(range(acked))


def test_every_snapshot_corrupt_is_refused_or_recovered(loaded):
    server, acked = loaded
    for snap in snapshots(server.data_dir):
        flip(snap, os.path.getsize(snap) // 2)
    serving, log = restart(server)
    report_summary("storage: every snapshot corrupt: %s" % assert_all_or_refused(server, acked, serving, log))


def test_corrupt_entry_in_the_middle_of_the_log_is_refused_or_recovered(loaded):
    server, acked = loaded
    log_file = log_files(server.data_dir)[-1]
    flip(log_file, data_end(log_file) // 2)
    serving, log = restart(server)
    report_summary("storage: corrupt log entry in the middle: %s" % assert_all_or_refused(server, acked, serving, log))


def test_torn_log_tail_loses_only_a_suffix(loaded):
    server, acked = loaded
    log_file = log_files(server.data_dir)[-1]
    end = data_end(log_file)
    with open(log_file, "r+b") as f:
        f.truncate(end - 100)
    serving, log = restart(server)
    assert serving, log[-3000:]
    got = present(server)
    assert got == list(range(len(got))), "not a prefix: %d present of %d" % (len(got), acked)
    assert len(got) % BATCH == 0, "a multi applied in part: %d znodes" % len(got)
    assert len(got) >= acked - 2 * BATCH, "more than the torn entries lost: %d of %d" % (len(got), acked)
    report_summary("storage: torn log tail (100 bytes): %d of %d acknowledged znodes kept" % (len(got), acked))


def test_corrupt_identity_is_refused_with_the_reason(loaded):
    server, _ = loaded
    flip(os.path.join(server.data_dir, "IDENTITY"), 3, 4)
    serving, log = restart(server)
    assert not serving, "started with a corrupt IDENTITY"
    assert "IDENTITY" in log, log[-2000:]


def test_identity_of_a_newer_format_is_refused_naming_both_versions(loaded):
    server, _ = loaded
    path = os.path.join(server.data_dir, "IDENTITY")
    with open(path) as f:
        text = f.read()
    assert text.startswith("format=2\n"), text
    with open(path, "w") as f:
        f.write(text.replace("format=2", "format=9", 1))
    serving, log = restart(server)
    assert not serving, "started with an IDENTITY of a newer format"
    assert "IDENTITY: format version 9, this Keel reads versions 1 to 2" in log, log[-2000:]
