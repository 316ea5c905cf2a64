"""A full disk: a single Keel node's data dir on a small tmpfs (mounted by
the test; skipped where mounting is not permitted), filled up by a
filler file and then by writes. The node must never acknowledge a write
it did not keep; while the log cannot be written it keeps running, says
so (log line, mntr keel_log_write_paused) and serves reads to sessions
already open; once space is freed (the filler removed) it writes again by
itself, and after a restart every acknowledged znode is there with its
data."""
import os
import subprocess
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from conftest import report_summary, require_keel
from harness import KeelServer
from harness.servers import ServerStartError, mntr

FS_BYTES = 160 << 20
LEFT_FREE_BYTES = 3 << 20
VALUE_BYTES = 64 << 10
# raft-engine reserves its log files (64 MiB each) ahead: the writes must
# outgrow the reserved file to meet the full disk.
WRITES_MAX = 3000
WRITE_TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def small_fs(tmp_path_factory):
    mount = tmp_path_factory.mktemp("full-disk") / "fs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % FS_BYTES, "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: %s" % done.stderr.strip())
    yield str(mount)
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(mount, leave_bytes):
    filler = os.path.join(mount, "filler")
    st = os.statvfs(mount)
    free = st.f_bavail * st.f_frsize
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave_bytes))
    return filler


@pytest.fixture(scope="module")
def filled(small_fs):
    """A node that met a full disk under writes, space freed again
    afterwards: (server, acknowledged {path: value}, first refusal, whether
    the process still ran, its log at that moment, its process id then).
    Shared by the module's
    two tests (filling takes most of their time): the one that needs the
    process that met the full disk runs first and checks it has it."""
    require_keel()
    server = KeelServer(name="keel-full-disk", data_dir=os.path.join(small_fs, "data"))
    server.start()
    try:
        # A session opened before the disk fills (a new one needs a write).
        reader = KazooClient(hosts=server.address, timeout=30)
        reader.start(timeout=20)
        filler = fill(small_fs, LEFT_FREE_BYTES)
        acked, refused = write_until_refused(server)
        alive, log = server.running(), server.log_text()
        if alive:
            paused = mntr(server.port).get("keel_log_write_paused")
            assert paused == "1", "mntr keel_log_write_paused = %r while the disk is full" % paused
            assert reader.exists("/full") is not None, "reads are not served while the disk is full"
        reader.stop()
        reader.close()
        os.remove(filler)
        yield server, acked, refused, alive, log, server.proc.pid
    finally:
        server.kill()
        server.cleanup()


def write_until_refused(server):
    client = KazooClient(hosts=server.address, timeout=10)
    client.start(timeout=20)
    client.create("/full")
    acked, refused = {}, None
    for i in range(WRITES_MAX):
        value = os.urandom(VALUE_BYTES)  # incompressible (raft-engine compresses with lz4)
        path = "/full/%04d" % i
        try:
            client.create_async(path, value).get(timeout=WRITE_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - the outcome is what we record
            refused = "%s after %d writes" % (type(e).__name__, i)
            break
        acked[path] = value
    client.stop()
    client.close()
    return acked, refused


def test_full_disk_node_writes_again_once_space_is_freed(filled):
    """While the log cannot be written the node says so (a log line, mntr's
    keel_log_write_paused = 1) and keeps serving reads; once space is
    freed it writes again by itself."""
    server, _, _, alive, log, pid = filled
    assert alive, "the node exited on a full disk"
    assert server.proc.pid == pid, "the node was restarted before this test ran"
    assert "file system is full" in log, "no Keel log line says the disk is full"
    assert writes_again(server), "no write acknowledged within 15 s of freeing space"
    assert mntr(server.port).get("keel_log_write_paused") == "0"
    assert "the Raft log is written again" in server.log_text()


def test_full_disk_never_loses_an_acknowledged_write(filled):
    server, acked, refused, alive, log, _ = filled
    assert refused is not None, "%d writes of %d bytes fit on a %d byte filesystem" % (
        len(acked), VALUE_BYTES, FS_BYTES)
    assert "panicked" not in log, log[-3000:]
    if server.running():
        server.stop()
    try:
        server.start(timeout=60)
    except ServerStartError as e:
        pytest.fail("the node does not start again once space is free: %s" % e)
    check_all_there(server, acked)
    errors = [line for line in log.splitlines() if "nospace" in line or "No space" in line]
    report_summary("full disk: %d writes acknowledged, then %s; the node %s; after a restart all %d are there"
                   % (len(acked), refused, "kept running" if alive else "exited (%s)" % server.proc.returncode,
                      len(acked)))
    if errors:
        report_summary("full disk: first log line about it: %s" % errors[0][:200])


def writes_again(server, timeout_s=15.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        client = KazooClient(hosts=server.address, timeout=5)
        try:
            client.start(timeout=5)
            client.create("/full-after", b"x")
            return True
        except Exception:  # noqa: BLE001 - retried until the deadline
            time.sleep(0.5)
        finally:
            client.stop()
            client.close()
    return False


def check_all_there(server, acked):
    client = KazooClient(hosts=server.address, timeout=10)
    client.start(timeout=20)
    try:
        missing = [p for p, v in sorted(acked.items()) if client.exists(p) is None or client.get(p)[0] != v]
        assert not missing, "%d acknowledged znodes missing or changed after the full disk, first %s" % (
            len(missing), missing[0])
    finally:
        client.stop()
        client.close()
