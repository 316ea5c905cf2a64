"""A rolling restart under write load (tests/cluster/rolling.py, the code
`make rolling-restart` runs): every node of a 3-node cluster restarted in
turn with SIGTERM then start, followers first and the leader last, while
kazoo clients on every node write. No acknowledged write is lost, no
session expires or changes, no client reconnects more than once per
restart, and writes pause less than 200 ms per leader restart (the
stopping leader drains its connections and hands leadership off)."""

from conftest import report_summary, require_keel
from harness.cluster import KeelCluster

from cluster import rolling


def test_rolling_restart_under_write_load(request):
    require_keel()
    cluster = KeelCluster(3, name="rolling", test_defaults=False, settings={"four_letter_words": ["*"]})
    lines = []
    failed = True
    try:
        cluster.start(timeout=60)
        report = rolling.measure(cluster, rounds=1, out=lines.append)
        failed = False
    finally:
        cluster.stop()
        if failed:
            import sys
            sys.stderr.write(cluster.log_tail(120) + "\n")
    for line in lines:
        report_summary("rolling restart: " + line)
    assert report["acknowledged writes lost"] == 0, report
    assert report["sessions expired"] == 0, report
    assert report["sessions changed"] == 0, report
    assert report["reconnects per restart max"] <= 1, report
    assert report["writes acknowledged"] > 1000, report
    leader_restarts = [r for r in report["restarts"] if r["role"] == "leader"]
    assert leader_restarts, report
    for r in leader_restarts:
        assert r["pause all ms"] < rolling.LEADER_RESTART_PAUSE_MAX_S * 1000, r
        assert r["exit code"] == 0, r
    cluster.cleanup()
