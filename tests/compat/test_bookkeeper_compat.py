"""Apache BookKeeper 4.18.2 (the storage of Apache Pulsar) on Keel,
compared with the same run on Apache ZooKeeper 3.8.

BookKeeper keeps its metadata in ZooKeeper through its own ZooKeeper
client (3.9.5): each bookie registers with an ephemeral node and stamps a
cookie, ledger ids come from sequential nodes, each ledger's metadata is a
znode of the hierarchical layout, and a reader that opens a ledger with
recovery fences its writer by a version-checked update of that znode.
tests/compat/java/BookKeeperCheck.java runs three bookies and two clients
in one JVM: it writes a ledger on three bookies, pauses (on 3 Keel nodes
the Raft leader is killed with kill -9 here), writes more, recovers the
ledger from a second client (the writer's next write must be refused),
reads every entry back, creates and deletes more ledgers and stops a
bookie (its registration must go); the other bookies' registrations go
when the JVM closes their sessions.

The same run against standalone ZooKeeper and against Keel (one server,
and three nodes with the clients given all three; the bookies get the
first one only, a follower, whose sessions must outlive the leader's
death): the check's lines must
be equal, and so must the znodes under /ledgers (paths with the bookies'
ports left out, and the layout's data)."""

import os
import queue
import re
import shutil
import subprocess
import threading
import time

import pytest
from kazoo.client import KazooClient

from compat.znodes import assert_same_znodes
from conftest import report_summary
from harness.bookkeeper import compile_bookkeeper_check
from harness.javac import TIER1
from harness.servers import make_workdir

BOOKIES = 3
ENTRIES = 200
# One run of BookKeeperCheck: a JVM, three bookies, 2 x ENTRIES entries
# acknowledged by two bookies each, a recovery, a leader's election.
CHECK_TIMEOUT_S = 240
PREFIX = "check: "
LEDGERS_ROOT = "/ledgers"
# Nodes whose data is compared byte for byte (no address, time or random id).
DATA_COMPARED = ("/ledgers/LAYOUT",)
BOOKIE_ADDRESS = re.compile(r"127\.0\.0\.1:\d+")


@pytest.fixture(scope="module")
def classpath():
    classpath, out = compile_bookkeeper_check()
    yield classpath
    shutil.rmtree(out, ignore_errors=True)


# Lines of BookKeeperCheck's output a failure shows: its ZooKeeper
# clients' connections and sessions, and the end.
SHOWN = re.compile(r"[Ss]ession|[Ee]xpired|Disconnected|SyncConnected|Opening socket|ZooKeeper client|Exception")
TAIL_SHOWN_LINES = 40


def shown(output):
    """What a failure prints of the check's `output` lines."""
    picked = [l for l in output[:-TAIL_SHOWN_LINES] if SHOWN.search(l)]
    return "".join(picked[-200:] + ["----- the last lines -----\n"] + output[-TAIL_SHOWN_LINES:])


def run_check(classpath, address, on_pause):
    """BookKeeperCheck against the servers of `address`; on_pause() runs
    when it pauses. Its own lines (the bookies log to the same stdout)."""
    tmp = make_workdir("bookkeeper")
    proc = subprocess.Popen(["java", "-Xmx512m", "-XX:+UseSerialGC", TIER1, "-Djava.io.tmpdir=" + tmp, "-cp", classpath,
                             "BookKeeperCheck", address, str(BOOKIES), str(ENTRIES)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout] + [lines.put(None)], daemon=True)
    reader.start()
    ours, output = [], []
    deadline = time.monotonic() + CHECK_TIMEOUT_S
    try:
        while True:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if line is None:
                break
            output.append(line)
            if line.startswith(PREFIX):
                ours.append(line[len(PREFIX):].strip())
                if ours[-1] == "pause":
                    on_pause()
                    proc.stdin.write("go\n")
                    proc.stdin.flush()
        code = proc.wait(timeout=max(1, deadline - time.monotonic()))
    except (queue.Empty, subprocess.TimeoutExpired):
        proc.kill()
        raise AssertionError("BookKeeperCheck took over %d s; its lines: %s\n%s" % (
            CHECK_TIMEOUT_S, ours, shown(output)))
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    assert code == 0, "BookKeeperCheck failed (%d); its lines: %s\n%s" % (code, ours, shown(output))
    return ours, output


def ledgers_tree(address):
    """{path under /ledgers, bookie ports left out: (ephemeral, data if
    compared, how many paths read so)}."""
    zk = KazooClient(hosts=address, timeout=15)
    zk.start(timeout=30)
    tree = {}
    try:
        def walk(path):
            data, stat = zk.get(path)
            key = BOOKIE_ADDRESS.sub("127.0.0.1:PORT", path)
            _, _, seen = tree.get(key, (None, None, 0))
            tree[key] = (stat.ephemeralOwner != 0, data if path in DATA_COMPARED else None, seen + 1)
            for child in sorted(zk.get_children(path)):
                walk(path + "/" + child)

        walk(LEDGERS_ROOT)
    finally:
        zk.stop()
        zk.close()
    return tree


def bookkeeper_on(address, classpath, on_pause=lambda: None):
    lines, output = run_check(classpath, address, on_pause)
    return lines, ledgers_tree(address), output


def test_bookkeeper_on_keel_as_on_zookeeper(servers, candidate, keel_topology, classpath, zk_reference):
    (ref_lines, ref_tree, _), _ = zk_reference("bookkeeper", lambda zk: bookkeeper_on(zk.address, classpath))
    target = servers(candidate, topology=keel_topology)
    address, killed = target.address, []
    if keel_topology == "cluster3":
        # LocalBookKeeper connects its bookies to the connect string's
        # first server alone (its clients get every server): a follower
        # there keeps them registered through the leader's death, as
        # bookies given the whole ensemble would be.
        leader = target.leader()
        address = ",".join(n.address for n in sorted(target.nodes, key=lambda n: n is leader))

    def kill_the_leader():
        if keel_topology == "cluster3":
            assert target.leader() is leader, "the leader changed before the kill"
            leader.kill()
            killed.append(leader.address)

    lines, tree, output = bookkeeper_on(address, classpath, kill_the_leader)
    expected = ["bookies %d" % BOOKIES, "written ledger 0 last %d" % (ENTRIES - 1), "pause",
                "written again last %d" % (2 * ENTRIES - 1), "recovered last %d closed true" % (2 * ENTRIES - 1),
                "fenced writer refused", "read %d" % (2 * ENTRIES), "ledgers [0, 2, 4]",
                "bookies after a stop %d" % (BOOKIES - 1)]
    assert ref_lines == expected, ref_lines
    assert lines == ref_lines, "ZooKeeper: %s\n%s: %s\nits output:\n%s" % (
        ref_lines, candidate, lines, shown(output))
    assert_same_znodes(ref_tree, tree, candidate)
    # The JVM closed its bookies' sessions when it ended: no registration is left.
    assert not [path for path, (ephemeral, _, _) in tree.items() if ephemeral], tree
    assert tree["/ledgers/cookies/127.0.0.1:PORT"][2] == BOOKIES, tree
    line = ("BookKeeper 4.18.2 on %s (%s%s): 3 bookies, a ledger of %d entries recovered and fenced, %d znodes "
            "as on ZooKeeper" % (candidate, keel_topology, ", leader %s killed mid-run" % killed[0] if killed else "",
                                 2 * ENTRIES, sum(n for _, _, n in tree.values())))
    print("\n" + line)
    report_summary(line)
