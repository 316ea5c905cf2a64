"""Keel starts from data dirs written by earlier releases (tests/fixtures,
made by storage/fixture.py) and serves exactly the tree they recorded:
every znode's data, Stat and ACL, the last zxid, the live sessions (which
resume with their ids and passwords) and the next sequential name.

A fixture pins the formats its release wrote: the snapshot file (the
consensus envelope and the tree's format), the Raft log (raft-engine's
files, the entry payload format, the Txn encoding of ZooKeeper request
bodies) and IDENTITY (ARCHITECTURE.md, "On-disk formats"). A Keel that
changes one of them must still read the old one, or refuse it with a
message naming the file and both versions; the fixture shows which.
"""

import glob
import json
import os
import shutil

import pytest
from kazoo.client import KazooClient

from conftest import report_summary, require_keel
from harness import KeelServer, make_workdir, srvr_zxid
from storage.fixture import SETTINGS, listing, sessions

FIXTURES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
FIXTURES = sorted(p for p in glob.glob(os.path.join(FIXTURES_DIR, "keel-*")) if os.path.isdir(p))
# What a fixture may weigh (data dir and listing): they live in git.
FIXTURE_BYTES_MAX = 1 << 20


def tree_differences(recorded, served):
    """Readable differences between two listings (at most 20)."""
    by_path = {n["path"]: n for n in served}
    wanted = {n["path"]: n for n in recorded}
    out = ["missing: %s" % p for p in sorted(set(wanted) - set(by_path))]
    out += ["unexpected: %s" % p for p in sorted(set(by_path) - set(wanted))]
    for path in sorted(set(wanted) & set(by_path)):
        for key in ("data", "stat", "acl"):
            if wanted[path][key] != by_path[path][key]:
                out.append("%s %s: recorded %r, served %r" % (path, key, wanted[path][key], by_path[path][key]))
    return out[:20]


def fixture_bytes(path):
    total = os.path.getsize(path + ".json")
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def test_at_least_one_fixture_is_checked_in():
    assert FIXTURES, "no data dir fixture under %s" % FIXTURES_DIR


@pytest.mark.parametrize("fixture", FIXTURES, ids=os.path.basename)
def test_keel_serves_exactly_the_tree_a_fixture_data_dir_recorded(fixture):
    require_keel()
    assert fixture_bytes(fixture) < FIXTURE_BYTES_MAX
    with open(fixture + ".json") as f:
        recorded = json.load(f)
    workdir = make_workdir("fixture-" + os.path.basename(fixture))
    data_dir = os.path.join(workdir, "data")
    shutil.copytree(fixture, data_dir)  # the checked-in files stay untouched
    server = KeelServer(name="fixture", workdir=workdir, data_dir=data_dir, test_defaults=False,
                        settings=SETTINGS)
    server.start(timeout=60)
    try:
        log = server.log_text()
        snapshot = glob.glob(os.path.join(fixture, "snapshots", "snapshot-*.snap"))
        assert snapshot and "snapshot loaded" in log, server.log_tail(40)
        assert srvr_zxid(server.port) == recorded["last zxid"]
        served = listing(server.address)
        different = tree_differences(recorded["tree"], served)
        assert not different, "\n".join(different)
        assert sessions(server.port) == recorded["sessions"]
        for live in recorded["live sessions"]:
            session_id = int(live["id"], 16)
            c = KazooClient(hosts=server.address, timeout=30.0,
                            client_id=(session_id, bytes.fromhex(live["password"])))
            c.start(timeout=30)
            assert c.client_id[0] == session_id, "session %s did not resume" % live["id"]
            c.stop()  # closes it: this is a copy
            c.close()
        c = KazooClient(hosts=server.address, timeout=30.0)
        c.start(timeout=30)
        made = c.create(recorded["next sequential"]["path"], b"", sequence=True)
        c.stop()
        c.close()
        assert made == recorded["next sequential"]["name"]
    finally:
        server.stop()
    report_summary("fixture %s (%s): %d znodes, last zxid %#x, %d sessions served as recorded"
                   % (os.path.basename(fixture), recorded["written by"], len(served), recorded["last zxid"],
                      len(recorded["sessions"])))
    server.cleanup()
