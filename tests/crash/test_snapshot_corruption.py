"""A corrupt newest snapshot after kill -9 (Keel only).

The restart must refuse it (every frame is checksummed), set it aside as
`*.snap.corrupt`, load the snapshot before it, replay the log and lose no
acknowledged write. The simulator does the same at 20% of its crashes
(crates/sim, `corrupt_snapshot`); this runs the server's own restart.
"""

import os
import time

import pytest
from kazoo.client import KazooClient

from conftest import candidate_kind, require_keel
from harness import make_server, snapshot_files

SNAPSHOT_EVERY_ENTRIES = 50
NODES = 400


@pytest.mark.timeout(300)
@pytest.mark.parametrize("damage", ["flipped byte", "truncated"])
def test_a_corrupt_newest_snapshot_is_set_aside_and_the_one_before_loads(damage):
    if candidate_kind() != "keel":
        pytest.skip("Keel's snapshot files")
    require_keel()
    server = make_server("keel", name="keel-snapcorrupt",
                         settings={"snapshot_every_entries": SNAPSHOT_EVERY_ENTRIES})
    try:
        server.start()
        client = KazooClient(hosts=server.address, timeout=10.0)
        client.start(timeout=20)
        client.ensure_path("/snap")
        for i in range(NODES):
            client.create("/snap/n%04d" % i, b"value-%d" % i)
        deadline = time.monotonic() + 30
        while len(snapshot_files(server.data_dir)) < 2 and time.monotonic() < deadline:
            client.set("/snap", b"more")  # entries until two snapshots exist
            time.sleep(0.05)
        client.stop()
        client.close()
        server.kill()
        paths = [path for _, path in snapshot_files(server.data_dir)]
        assert len(paths) >= 2, "two snapshots kept: %r" % paths
        newest = paths[-1]
        with open(newest, "r+b") as f:
            size = os.path.getsize(newest)
            if damage == "truncated":
                f.truncate(size * 2 // 3)
            else:
                f.seek(size // 2)
                byte = f.read(1)
                f.seek(size // 2)
                f.write(bytes([byte[0] ^ 0x20]))
        server.start()
        client = KazooClient(hosts=server.address, timeout=10.0)
        client.start(timeout=20)
        try:
            children = client.get_children("/snap")
            assert len(children) == NODES, "all %d nodes back, got %d" % (NODES, len(children))
            for i in (0, NODES // 2, NODES - 1):
                data, _ = client.get("/snap/n%04d" % i)
                assert data == b"value-%d" % i
        finally:
            client.stop()
            client.close()
        after = [path for _, path in snapshot_files(server.data_dir)]
        assert newest not in after, "the corrupt snapshot is out of the list"
        assert os.path.exists(newest + ".corrupt"), "and kept aside for inspection"
        assert "corrupt snapshot refused" in server.log_text()
    except Exception:
        print(server.log_tail(60))
        raise
    finally:
        server.kill()
    server.cleanup()
