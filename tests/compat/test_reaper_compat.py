"""Differential test: the container/TTL reaper honours a short interval.

ZooKeeper's ContainerManager runs a pass every `znode.container.checkIntervalMs`
and deletes every candidate it finds; a container emptied by a pass's deletion
goes in the next pass. So with a 10 ms interval a lock path of containers
nested three deep is gone within a few intervals of its last child's deletion,
and a TTL node goes within a few intervals of its TTL (Curator's
TestInterProcessSemaphoreMutex.testContainerCleanup and TestPersistentTtlNode
rely on it). Keel used to reap once per half tick (250 ms with the harness's
500 ms tick), a step per nesting level.

Timings are measured from watch notifications (no polling) and recorded as
"within the bound" booleans, so the traces compare exactly; the measured
milliseconds go to the test summary."""

import threading
import time

from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE

from conftest import report_summary
from harness.kazoo_ext import CreateContainer, CreateTTL, TTL_FLAG, call_ext
from harness.trace import Trace

from compat.topology import compare_traces

INTERVAL_MS = 10
SETTINGS = {"container_check_interval_ms": INTERVAL_MS}
# Three nested containers under /reap: one pass each once the lease goes.
NESTED = ("/reap/lock", "/reap/lock/x", "/reap/lock/x/y")
LEASE = NESTED[-1] + "/lease"
# The issue asks for 10 intervals; one step per level (3) plus the watch's
# delivery leaves room on an idle machine, not on a loaded 2-core CI box,
# so the compared bound is 20 intervals (200 ms). Keel's old reaper needs at
# least 2 half-ticks (500 ms) for three levels: this bound fails it.
NESTED_BOUND_MS = 20 * INTERVAL_MS
TTL_MS = 200
TTL_NODES = 5
# TTL nodes created 50 ms apart: a reaper with a 250 ms period leaves one of
# them at least 200 ms past its TTL, which this bound (15 intervals) refuses.
TTL_SPACING_MS = 50
TTL_BOUND_MS = 15 * INTERVAL_MS
EVENT_WAIT_S = 10.0


class DeletionClock:
    """Watches `path` with exists() and notes when NodeDeleted arrives."""

    def __init__(self, client, path):
        self.deleted = threading.Event()
        self.at = None
        client.exists(path, watch=self._fired)

    def _fired(self, event):
        if event.type == "DELETED":
            self.at = time.monotonic()
            self.deleted.set()

    def wait(self):
        return self.deleted.wait(EVENT_WAIT_S)


def nested_containers(client, trace, timings):
    rec, call = trace.record, trace.call
    call("create /reap", client.create, "/reap", b"")
    for path in NESTED:
        call("create container %s" % path, call_ext, client, CreateContainer(path, b"", OPEN_ACL_UNSAFE))
    call("create the lease", client.create, LEASE, b"")
    clock = DeletionClock(client, NESTED[0])
    started = time.monotonic()
    call("delete the lease", client.delete, LEASE)
    rec("outermost container deleted (event)", clock.wait())
    elapsed_ms = (clock.at - started) * 1000 if clock.at else None
    timings.append("nested containers gone after %s ms" % (None if elapsed_ms is None else round(elapsed_ms)))
    rec("three nested containers gone within %d ms" % NESTED_BOUND_MS,
        elapsed_ms is not None and elapsed_ms <= NESTED_BOUND_MS)
    call("children of /reap", client.get_children, "/reap")


def ttl_nodes(client, trace, timings):
    rec, call = trace.record, trace.call
    created = []
    for i in range(TTL_NODES):
        path = "/reap/ttl-%d" % i
        before = time.monotonic()
        call("create TTL node %d" % i, call_ext, client,
             CreateTTL(path, b"", OPEN_ACL_UNSAFE, TTL_FLAG, TTL_MS))
        after = time.monotonic()
        created.append((path, before, after, DeletionClock(client, path)))
        time.sleep(TTL_SPACING_MS / 1000)
    late_ms = []
    for i, (path, before, after, clock) in enumerate(created):
        rec("TTL node %d deleted (event)" % i, clock.wait())
        if clock.at is None:
            continue
        late_ms.append(round((clock.at - after) * 1000 - TTL_MS))
        rec("TTL node %d: not before its TTL, within %d ms after it" % (i, TTL_BOUND_MS),
            (clock.at - before) * 1000 >= TTL_MS and (clock.at - after) * 1000 <= TTL_MS + TTL_BOUND_MS)
    timings.append("TTL nodes gone %s ms after their TTL" % late_ms)


def run(server, name):
    trace = Trace(name)
    timings = []
    client = KazooClient(hosts=server.address, timeout=10)
    client.start(timeout=20)
    try:
        nested_containers(client, trace, timings)
        ttl_nodes(client, trace, timings)
    finally:
        client.stop()
        client.close()
    report_summary("reaper at %d ms, %s: %s" % (INTERVAL_MS, name, "; ".join(timings)))
    return trace


def test_reaper_honours_a_short_interval_as_zookeeper(servers, candidate, keel_topology, zk_reference):
    ref, zk = zk_reference("reaper", lambda zk: run(zk, "zookeeper"), name="zk-reaper", settings=SETTINGS)
    other = servers(candidate, topology=keel_topology, settings=SETTINGS,
                    name="%s-reaper-%s" % (candidate, keel_topology))
    got = run(other, "%s %s" % (candidate, keel_topology))
    p1, p2 = zk.workdir + "-trace.json", other.workdir + "-trace.json"
    ref.dump(p1)
    got.dump(p2)
    differences = compare_traces("reaper", candidate, keel_topology, ref.normalised(), got.normalised())
    assert not differences, ("%d step(s) of the reaper scenario differ (%s %s; traces %s, %s):\n%s"
                             % (len(differences), candidate, keel_topology, p1, p2, "\n".join(differences)))
