"""ClickHouse's own ZooKeeper client on Keel, compared with ZooKeeper 3.8.

ClickHouse 26.9, embedded through chDB (`make test-deps` installs chdb
4.4.0 into .deps/chdb-venv), runs tests/compat/clickhouse_scenario.py: DDL
of replicated tables (ReplicatedMergeTree and ReplicatedReplacingMergeTree
with macros and partitions, two replicas of one table, drops, detach and
attach, SYSTEM DROP REPLICA). Each statement's table and replica znodes
are written by ClickHouse's client, with one large multi per table. On
Keel, which announces ClickHouse Keeper's extensions in
/keeper/feature_flags, the drops go through removeRecursive; on ZooKeeper
through plain deletes.

- The same scenario against standalone ZooKeeper and against Keel (one
  server, and a 3-node cluster with all three in ClickHouse's config): the
  statements' results match, and so do the znodes left under /clickhouse
  (paths, ephemerals, versions, child versions, child counts and data,
  except the table's random UUID).
- On one Keel node with its Prometheus metrics on, ClickHouse is seen to
  use the extension (keel_requests_total{op="removeRecursive"})."""

import json
import os
import subprocess
import urllib.request

import pytest
from kazoo.client import KazooClient

from compat.znodes import assert_same_znodes
from conftest import report_summary
from harness.servers import REPO_ROOT, free_port, make_workdir

CHDB_PYTHON = os.path.join(REPO_ROOT, ".deps", "chdb-venv", "bin", "python")
SCENARIO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clickhouse_scenario.py")
# The scenario's DDL, chDB's start included.
SCENARIO_TIMEOUT_S = 180
# Nodes whose data is the table's random UUID: compared by length.
RANDOM_DATA = ("/creator_info", "/table_shared_id")


def chdb_python():
    """.deps/chdb-venv's Python; RuntimeError if missing (never a skip:
    `make test` installs it)."""
    if not os.access(CHDB_PYTHON, os.X_OK):
        raise RuntimeError("no chDB venv at %s (make test-deps installs it)" % CHDB_PYTHON)
    return CHDB_PYTHON


def clickhouse_config(path, ports):
    nodes = "".join("<node><host>127.0.0.1</host><port>%d</port></node>" % port for port in ports)
    with open(path, "w") as f:
        f.write("<clickhouse><zookeeper>%s<session_timeout_ms>10000</session_timeout_ms></zookeeper>"
                "<macros><shard>1</shard><replica>r1</replica></macros></clickhouse>\n" % nodes)


def run_scenario(server):
    """The scenario against `server`: (its JSON lines, the tree under
    /clickhouse as {path: (ephemeral, version, cversion, children, data)})."""
    workdir = make_workdir("clickhouse")
    config = os.path.join(workdir, "config.xml")
    ports = getattr(server, "ports", None) or [server.port]
    clickhouse_config(config, ports)
    done = subprocess.run([chdb_python(), SCENARIO, os.path.join(workdir, "db"), config],
                          capture_output=True, text=True, timeout=SCENARIO_TIMEOUT_S)
    assert done.returncode == 0, "the ClickHouse scenario failed (%d):\n%s\n%s" % (
        done.returncode, done.stdout[-3000:], done.stderr[-3000:])
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    zk = KazooClient(hosts=",".join("127.0.0.1:%d" % p for p in ports), timeout=15)
    zk.start(timeout=30)
    try:
        zk.sync("/clickhouse")
        return results, dump(zk, "/clickhouse")
    finally:
        zk.stop()
        zk.close()


def dump(zk, top):
    tree = {}

    def walk(path):
        data, stat = zk.get(path)
        if path.endswith(RANDOM_DATA):
            data = len(data)
        tree[path] = (stat.ephemeralOwner != 0, stat.version, stat.cversion, stat.numChildren, data)
        for child in sorted(zk.get_children(path)):
            walk(path + "/" + child)

    walk(top)
    return tree


def assert_same(ref, got, candidate):
    (ref_results, ref_tree), (results, tree) = ref, got
    assert len(results) == len(ref_results), (ref_results, results)
    for want, have in zip(ref_results, results):
        assert have == want, "ZooKeeper: %r\n%s: %r" % (want, candidate, have)
    assert_same_znodes(ref_tree, tree, candidate)


def test_clickhouse_ddl_on_keel_leaves_what_it_leaves_on_zookeeper(servers, candidate, keel_topology,
                                                                     zk_reference):
    ref, _ = zk_reference("clickhouse", run_scenario)
    got = run_scenario(servers(candidate, topology=keel_topology))
    assert_same(ref, got, candidate)
    results, tree = got
    assert any(r.get("rows") for r in results), results
    assert len(tree) >= 50, sorted(tree)
    line = "ClickHouse 26.9 (chDB) on %s (%s): %d statements and %d znodes as on ZooKeeper" % (
        candidate, keel_topology, len(results), len(tree))
    print("\n" + line)
    report_summary(line)


def test_clickhouse_drops_tables_with_keels_remove_recursive(servers):
    metrics_port = free_port()
    keel = servers("keel", settings={"metrics_port": metrics_port})
    results, _ = run_scenario(keel)
    assert all("error" not in r or "readonly" in r["error"] for r in results), results
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics_port, timeout=10) as response:
        text = response.read().decode()
    counts = {line.split('"')[1]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith('keel_requests_total{op="')}
    assert counts.get("removeRecursive", 0) >= 3, counts
    assert counts.get("multi", 0) >= 5, counts


@pytest.fixture(autouse=True, scope="module")
def _chdb_installed():
    chdb_python()
