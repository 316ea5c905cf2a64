"""Smoke test of the load generators on other client libraries:
bench/java/LoadGen.java (Apache ZooKeeper's Java client, `make compare-java`,
compiled with javac) and bench/go/loadgen (Go's client
github.com/go-zookeeper/zk, `make compare-go`, built with `go build`). Each
runs for 2 s with 4 sessions of the create and the mix workload against one
ZooKeeper 3.8 server and one Keel server. Its numbers must add up against the
server: the tree is kept (--keep), and the znode count (mntr) and the nodes
found under the run's root (kazoo) must match the creates and deletes it
reports, op for op. Both take the same arguments and print the same summary."""

import os
import shutil
import subprocess

import pytest
from kazoo.client import KazooClient

from conftest import candidate_kind, require_keel
from harness import ZK_CLIENT_CLASSPATH, make_workdir, mntr
from harness.golang import build_go

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
LOADGEN_SRC = os.path.join(BENCH, "java", "LoadGen.java")
GO_MODULE = os.path.join(BENCH, "go")
SESSIONS = 4
DURATION_S = 2
# crates/bench: DATA_NODES, LIST_CHILDREN, DELETE_POOL_PER_LANE (8 while
# sessions <= 2,500), and the mix's shares in basis points.
DATA_NODES = 100
LIST_CHILDREN = 100
DELETE_POOL_PER_LANE = 8
MIX_SHARES = {"create": 0.01, "set": 0.08, "get": 0.45, "list": 0.45, "delete": 0.01}


@pytest.fixture(scope="module", params=["java", "go"])
def loadgen(request):
    """The command that starts one load generator, arguments to follow."""
    out = make_workdir("loadgen-" + request.param)
    if request.param == "java":
        if not shutil.which("javac"):
            pytest.skip("javac not installed")
        subprocess.run(["javac", "-nowarn", "-d", out, "-cp", ZK_CLIENT_CLASSPATH, LOADGEN_SRC],
                       check=True, capture_output=True, timeout=180)
        yield ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-Dzookeeper.sasl.client=false",
               "-cp", ZK_CLIENT_CLASSPATH + ":" + out, "LoadGen"]
    else:
        yield [build_go(GO_MODULE, "loadgen", os.path.join(out, "loadgen"))]
    shutil.rmtree(out, ignore_errors=True)


def run_loadgen(command, server, workload, *extra):
    p = subprocess.run(command + ["--servers", server.address, "--workload", workload,
                                  "--sessions", str(SESSIONS), "--duration", str(DURATION_S)] + list(extra),
                       capture_output=True, text=True, timeout=60, start_new_session=True)
    assert p.returncode == 0, "%s exited %d:\n%s" % (command[-1], p.returncode, p.stderr[-3000:])
    summary = {}
    for line in p.stdout.splitlines():
        key, _, value = line.partition(" ")
        summary[key] = value
    return summary, p.stderr


def count_tree(client, path):
    """Nodes at and under `path`."""
    return 1 + sum(count_tree(client, path + "/" + c) for c in client.get_children(path))


def count_bucket_leaves(client, root):
    """Nodes in the write buckets: root/writes/c<i>/l0-b<k>/n<index>."""
    writes = root + "/writes"
    return sum(len(client.get_children("%s/%s/%s" % (writes, c, b)))
               for c in client.get_children(writes)
               for b in client.get_children(writes + "/" + c))


def count_buckets(client, root):
    """The write buckets: root/writes/c<i>/l0-b<k>."""
    writes = root + "/writes"
    return sum(len(client.get_children("%s/%s" % (writes, c))) for c in client.get_children(writes))


def check_workload(command, server, workload):
    before = int(mntr(server.port)["zk_znode_count"])
    s, stderr = run_loadgen(command, server, workload, "--keep", "--warmup", "0")
    after = int(mntr(server.port)["zk_znode_count"])
    n = lambda key: int(s[key])  # noqa: E731
    tps, ok = float(s["TPS"]), n("successes")
    assert tps > 0 and ok > 0, s
    assert n("errors") == 0 and n("disconnects") == 0 and n("expiries") == 0, s
    assert n("ops") == ok
    assert sum(n("ok_" + k) for k in MIX_SHARES) == ok
    assert abs(tps * float(s["elapsed_s"]) - ok) <= max(2, ok * 0.002), s
    assert 0 < n("p50_us") <= n("p99_us"), s
    # keel bench's progress lines: one per second of the timed phase, and
    # the last one's op count is the total.
    run_lines = [line for line in stderr.splitlines() if line.startswith("[") and "ops/s" in line]
    assert len(run_lines) >= DURATION_S, stderr
    assert run_lines[-1].split("ops")[-1].split()[0] == str(ok), stderr

    # The server holds exactly what LoadGen says it made: the setup tree,
    # every create it counted, minus every delete.
    expected = n("setup_nodes") + n("created_nodes") - n("deleted_nodes")
    assert after - before == expected, (before, after, s)
    client = KazooClient(hosts=server.address, timeout=10)
    client.start()
    try:
        total = count_tree(client, s["root"])
        leaves = count_bucket_leaves(client, s["root"])
        buckets = count_buckets(client, s["root"])
    finally:
        client.stop()
        client.close()
    assert total == expected, (total, s)
    # No warm-up: every node the lanes made is a timed, counted create, or a
    # new bucket (untimed, one per 10,000 nodes of a lane, which a fast
    # server reaches within the 2 s): the setup made one bucket per lane.
    assert buckets == SESSIONS + n("bucket_nodes"), (buckets, s)
    assert n("created_nodes") == n("ok_create") + n("bucket_nodes"), s
    assert n("deleted_nodes") == n("ok_delete"), s
    if workload == "create":
        assert n("setup_nodes") == 1 + 1 + SESSIONS * 2, s
        assert leaves == n("ok_create") == ok, (leaves, s)
    else:
        assert n("setup_nodes") == (1 + 3 + DATA_NODES + LIST_CHILDREN + SESSIONS * 2
                                    + SESSIONS * DELETE_POOL_PER_LANE), s
        assert leaves == SESSIONS * DELETE_POOL_PER_LANE + n("ok_create") - n("ok_delete"), (leaves, s)
        for kind, share in MIX_SHARES.items():
            # Thousands of draws: each share within 5 standard deviations.
            sd = (share * (1 - share) / ok) ** 0.5
            assert abs(n("ok_" + kind) / ok - share) <= 5 * sd + 0.002, (kind, s)


@pytest.mark.parametrize("kind", ["zookeeper", "candidate"])
def test_loadgen_numbers_match_the_server(servers, loadgen, kind):
    if kind == "candidate":
        kind = candidate_kind()
        if kind == "keel":
            require_keel()
    server = servers(kind)
    for workload in ("create", "mix"):
        check_workload(loadgen, server, workload)


def test_loadgen_refuses_bad_arguments(loadgen):
    for args, needle in ((["--workload", "mix", "--sessions", "1", "--duration", "1"], "no server"),
                         (["--servers", "127.0.0.1:1", "--workload", "get", "--sessions", "1", "--duration", "1"],
                          "unknown workload"),
                         (["--servers", "127.0.0.1:1", "--workload", "mix", "--sessions", "0", "--duration", "1"],
                          "--sessions must be"),
                         (["--servers", "127.0.0.1", "--workload", "mix", "--sessions", "1", "--duration", "1"],
                          "bad server address"),
                         (["--servers", "127.0.0.1:1", "--workload", "mix", "--sessions", "1", "--duration", "x"],
                          "--duration wants a whole number"),
                         (["--servers", "127.0.0.1:1", "--workload", "mix", "--sessions", "1", "--duration", "1",
                           "--value-size", "2000000"], "--value-size must be"),
                         (["--servers", "127.0.0.1:1", "--workload", "mix", "--sessions", "1"],
                          "--duration is required")):
        p = subprocess.run(loadgen + args, capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and needle in p.stderr, (args, p.returncode, p.stderr)
