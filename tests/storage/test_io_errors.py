"""An I/O error of the Raft log other than a full disk is fatal: a single
Keel node whose log's fdatasync (or pwrite) starts failing with EIO must
acknowledge no write after it, stop with a clear message naming its log
directory and a non-zero status, and, restarted on a healthy disk, hold
every write it acknowledged before.

The failures come from an LD_PRELOAD shim (failio.c, compiled here with
the C compiler Rust links with; the test skips without one): while a
trigger file exists, fdatasync/fsync or pwrite on files under the data
dir's raft/ fail with EIO, as on a dying disk. No root, no device-mapper
error target, no FUSE."""

import os
import shutil
import subprocess

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from conftest import report_summary, require_keel
from harness import KeelServer

HERE = os.path.dirname(os.path.abspath(__file__))
SESSION_TIMEOUT_S = 4.0
EXIT_WAIT_S = 15.0
WRITES_BEFORE = 20


class FailingDiskKeel(KeelServer):
    """A Keel server whose Raft log fails (mode "sync" or "write") while
    `trigger` exists."""

    def __init__(self, *a, shim, mode, trigger, **kw):
        super().__init__(*a, **kw)
        self.shim, self.mode, self.trigger = shim, mode, trigger

    def _env(self):
        env = super()._env()
        env.update(LD_PRELOAD=self.shim, KEEL_FAIL_IO_MODE=self.mode, KEEL_FAIL_IO_TRIGGER=self.trigger,
                   KEEL_FAIL_IO_DIR=os.path.join(os.path.realpath(self.data_dir), "raft"))
        return env


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler (cc) to build the failing-I/O shim")
    out = str(tmp_path_factory.mktemp("failio") / "failio.so")
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", out, os.path.join(HERE, "failio.c"), "-ldl"],
                   check=True)
    return out


@pytest.mark.parametrize("mode", ["sync", "write"])
def test_a_log_io_error_stops_the_node_and_loses_no_acknowledged_write(shim, mode, tmp_path):
    require_keel()
    trigger = str(tmp_path / "fail-now")
    server = FailingDiskKeel(name="keel-eio-%s" % mode, shim=shim, mode=mode, trigger=trigger)
    server.start()
    client = KazooClient(hosts=server.address, timeout=SESSION_TIMEOUT_S, connection_retry=None,
                         command_retry=None)
    try:
        client.start(timeout=20)
        for i in range(WRITES_BEFORE):
            client.create("/before-%d" % i, b"v")
        open(trigger, "w").close()
        # This write needs the log: it must not be acknowledged.
        acknowledged = True
        try:
            client.create("/after", b"v")
        except KazooException:
            acknowledged = False
        assert not acknowledged, "a write was acknowledged after the log's %s failed" % mode
        try:
            code = server.proc.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail("the node still runs %.0f s after its log's %s failed\n%s" % (
                EXIT_WAIT_S, mode, server.log_tail(60)))
        log = server.log_text()
        raft_dir = os.path.join(os.path.realpath(server.data_dir), "raft")
        assert code > 0, "exit status %d after the log's %s failed (0: as if nothing happened; < 0: killed by a signal)" % (code, mode)
        assert "could not be made durable" in log and raft_dir in log, server.log_tail(60)
        message = next(line for line in log.splitlines() if "could not be made durable" in line)
    finally:
        client.stop()
        client.close()
        server.kill()
    # A healthy disk again: everything acknowledged is there.
    os.remove(trigger)
    server.start()
    check = KazooClient(hosts=server.address, timeout=SESSION_TIMEOUT_S)
    try:
        check.start(timeout=20)
        missing = [i for i in range(WRITES_BEFORE) if check.exists("/before-%d" % i) is None]
        assert not missing, "acknowledged writes lost: %s" % missing
    finally:
        check.stop()
        check.close()
        server.stop()
    server.cleanup()
    report_summary("log %s error (EIO): exit status %d, %s" % (mode, code, message.strip()[:300]))
