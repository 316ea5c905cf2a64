"""Apache Curator's InterProcessMutex on a 3-node Keel cluster whose leader
is killed (kill -9) and restarted twice under the load: worker sessions
take the lock, compare-and-set a counter one higher, let go
(tests/compat/java/CuratorFailover.java). The lock must stay exclusive, no
write under it may find the counter moved, no session may expire (each
outage is far shorter than the 15 s session timeout), the workers must go
on after each election, and the counter must end between the writes
acknowledged and those plus the ones whose outcome is unknown."""

import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import report_summary
from harness.curator import compile_curator

SECONDS = int(os.environ.get("KEEL_CURATOR_FAILOVER_SECONDS", "16"))
WORKERS = 4
# When the kills come (s after the workers start) and how long a killed
# leader stays down.
KILL_AT_S = (3.0, 9.0)
DOWN_S = 2.0
# Progress the workers must make in the last seconds of the run, after
# the second leader change.
TAIL_S = 3
RUN_TIMEOUT_S = SECONDS + 120


@pytest.fixture(scope="module")
def failover_classes():
    classpath, out = compile_curator(["CompatScenario.java", "CuratorFailover.java"], "javac-failover")
    yield classpath
    shutil.rmtree(out, ignore_errors=True)


def test_a_curator_lock_stays_exclusive_across_leader_kills(keel_cluster, failover_classes):
    cluster = keel_cluster("curator-failover")
    proc = subprocess.Popen(["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", failover_classes,
                             "CuratorFailover", cluster.connect_string(), str(SECONDS), str(WORKERS)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    killed = []
    try:
        began = time.monotonic()
        for at_s in KILL_AT_S:
            time.sleep(max(0.0, began + at_s - time.monotonic()))
            leader = cluster.leader(timeout=20)
            leader.kill()
            killed.append(cluster.member_id(leader))
            time.sleep(DOWN_S)
            leader.start()
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, "CuratorFailover exited %s:\n%s" % (proc.returncode, err[-3000:])
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    progress = [line for line in lines if "t" in line]
    summary = next(line["summary"] for line in lines if "summary" in line)
    report_summary("curator failover: leaders %s killed; %s" % (killed, json.dumps(summary)))
    assert summary["overlaps"] == 0, summary
    assert summary["stale"] == 0, summary
    assert summary["expired"] == 0, summary
    assert summary["acknowledged"] > 0, summary
    low, high = summary["acknowledged"], summary["acknowledged"] + summary["unknown"]
    assert low <= summary["final"] <= high, \
        "counter %d, %d writes acknowledged, %d unknown: %s" % (summary["final"], low, high - low, summary)
    tail = [p["acknowledged"] for p in progress if p["t"] >= SECONDS - TAIL_S]
    assert tail and tail[-1] > tail[0], "no progress after the last leader change: %s" % progress
    cluster.wait_converged(timeout=30)
