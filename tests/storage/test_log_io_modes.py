"""The Raft log written both ways (`log_direct_io`): with O_DIRECT in whole
blocks (the default) and through the page cache. Under each, a node loaded
with writes of every size (the records' ends land anywhere in their 4 KiB
blocks; a write of several blocks too), killed with -9 and restarted, holds
every write it acknowledged, byte for byte, and appends after it to the log
it continues (its last block read back, not zeroed), through a second
kill and restart."""

import os
import random

import pytest
from kazoo.client import KazooClient

from conftest import require_keel
from harness import KeelServer

SESSION_TIMEOUT_S = 4.0
WRITES = 300


def value(seed, i):
    rng = random.Random(seed * 100_000 + i)
    size = rng.choice([0, 1, 7, 100, 513, 4095, 4096, 4097, 9000, 30000])
    return bytes(rng.randrange(256) for _ in range(size))


def write_phase(server, seed):
    client = KazooClient(hosts=server.address, timeout=SESSION_TIMEOUT_S)
    client.start(timeout=20)
    try:
        for i in range(WRITES):
            client.create("/p%d-%d" % (seed, i), value(seed, i))
    finally:
        client.stop()
        client.close()


def check_phases(server, seeds):
    client = KazooClient(hosts=server.address, timeout=SESSION_TIMEOUT_S)
    client.start(timeout=20)
    try:
        for seed in seeds:
            for i in range(WRITES):
                data, _ = client.get("/p%d-%d" % (seed, i))
                assert data == value(seed, i), "znode /p%d-%d differs after kill -9" % (seed, i)
    finally:
        client.stop()
        client.close()


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "buffered"])
def test_acknowledged_writes_survive_kill_9_with_the_log_written_either_way(direct):
    require_keel()
    server = KeelServer(name="keel-logio-%s" % ("direct" if direct else "buffered"),
                        settings={"log_direct_io": direct})
    server.start()
    try:
        write_phase(server, 1)
        server.kill()
        server.start()
        check_phases(server, [1])
        write_phase(server, 2)
        server.kill()
        server.start()
        check_phases(server, [1, 2])
        log = server.log_text()
        assert "refuses O_DIRECT" not in log, "the log fell back to buffered writes:\n" + server.log_tail(20)
        raft = os.path.join(server.data_dir, "raft")
        assert any(name.endswith(".raftlog") for name in os.listdir(raft)), os.listdir(raft)
    finally:
        server.kill()
