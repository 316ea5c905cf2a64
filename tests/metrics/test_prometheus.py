"""Keel's Prometheus endpoint (metrics_port, GET /metrics), scraped by a real
Prometheus (Debian's `prometheus`), with ZooKeeper's metric names, types and
meaning (its Prometheus provider in 3.8: text format 0.0.4, counters without
`_total`, summaries with quantile labels plus _count and _sum) and Keel's own
under keel_; bad requests to the metrics port get an HTTP error or a close and
never disturb the client port."""

import os
import re
import shutil
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from kazoo.client import KazooClient

from conftest import _test_failed, report_summary
from harness import KeelServer, ServerStartError, free_port, make_workdir, mntr, scrape
from harness.prometheus import PrometheusServer, prometheus_available

# ZooKeeperServer.registerMetrics' gauges.
ZOOKEEPER_GAUGES = (
    "znode_count", "watch_count", "ephemerals_count", "approximate_data_size", "num_alive_connections",
    "outstanding_requests", "packets_received", "packets_sent", "global_sessions", "local_sessions",
    "uptime", "avg_latency", "min_latency", "max_latency", "open_file_descriptor_count",
    "max_file_descriptor_count",
)
# ServerMetrics' summaries: DetailLevel.ADVANCED ones report 0.5, 0.9 and 0.99,
# BASIC ones the median only.
ADVANCED = ("0.5", "0.9", "0.99")
BASIC = ("0.5",)
ZOOKEEPER_SUMMARIES = {
    "readlatency": ADVANCED, "updatelatency": ADVANCED, "fsynctime": BASIC, "snapshottime": BASIC,
    "election_time": BASIC, "quorum_ack_latency": ADVANCED, "propagation_latency": ADVANCED,
    "startup_snap_load_time": BASIC, "startup_txns_load_time": BASIC,
}
ZOOKEEPER_COUNTERS = (
    "commit_count", "snap_count", "looking_count", "connection_rejected", "unrecoverable_error_count",
)
KEEL_GAUGES = (
    "keel_raft_term", "keel_raft_leader_id", "keel_raft_commit_index", "keel_raft_applied_index",
    "keel_raft_apply_lag", "keel_raft_is_leader", "keel_serving", "keel_snapshot_last_bytes",
    "keel_snapshot_last_duration_seconds",
)
KEEL_HISTOGRAMS = (
    "keel_heartbeat_rtt_seconds", "keel_group_commit_batch_proposals", "keel_snapshot_duration_seconds",
)
KEEL_COUNTERS = ("keel_snapshots_taken_total", "keel_raft_fsyncs_total", "keel_raft_proposals_total")
# Per operation, on a node that has received requests.
KEEL_PER_OPERATION = {"keel_requests_total": "counter", "keel_request_latency_seconds": "histogram"}

# crates/server/src/metrics.rs: METRICS_CONNECTIONS_MAX, METRICS_HEADER_READ_TIMEOUT_MS.
METRICS_CONNECTIONS_MAX = 16
HEADER_READ_TIMEOUT_S = 5.0

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def exposition(text):
    """The raw text format, as Prometheus reads it: ({name: type}, [(sample
    name, labels text, value)]). Fails on a line that is neither a comment nor
    a sample."""
    types, samples = {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name not in types, "family %s declared twice" % name
            types[name] = kind
        elif line.startswith("# HELP ") or not line:
            continue
        else:
            m = SAMPLE.match(line)
            assert m, "not a sample line: %r" % line
            float(m.group(3))  # NaN, +Inf and numbers only
            samples.append((m.group(1), m.group(2) or "", float(m.group(3))))
    return types, samples


def values(samples, name, labels=""):
    return [v for n, lab, v in samples if n == name and lab == labels]


@pytest.fixture
def prometheus(request):
    """prometheus(targets) -> a started PrometheusServer scraping `targets`
    every second; stopped (SIGTERM, then SIGKILL) at teardown, its log printed
    if the test failed, its work dir removed if it passed."""
    if not prometheus_available():
        pytest.skip("Debian's prometheus is not installed (scripts/install-test-deps.sh installs it)")
    started = []

    def start(targets):
        server = PrometheusServer(targets, make_workdir("prometheus"), scrape_interval="1s")
        started.append(server)
        return server.start()

    yield start
    failed = _test_failed(request)
    for server in started:
        try:
            server.stop()
        except Exception:
            server.kill()
        if failed:
            sys.stderr.write(server.log_tail() + "\n")
        else:
            shutil.rmtree(server.workdir, ignore_errors=True)


def test_prometheus_scrapes_all_three_nodes_and_sees_znode_count_rise(keel_cluster, prometheus):
    cluster = keel_cluster("prom", metrics=True)
    targets = ["127.0.0.1:%d" % p for p in cluster.metrics_ports]
    prom = prometheus(targets)
    up = prom.wait_for('up{job="keel"}', lambda r: len(r) == 3 and all(v == 1 for _, v in r), timeout=30)
    assert sorted(labels["instance"] for labels, _ in up) == sorted(targets)
    before = {labels["instance"]: v for labels, v in prom.wait_for("znode_count", lambda r: len(r) == 3)}

    created = 25
    client = KazooClient(hosts=cluster.address, timeout=10.0)
    client.start(timeout=15)
    try:
        client.create("/prom")
        for i in range(created - 1):
            client.create("/prom/n%d" % i, b"x" * 10)
    finally:
        client.stop()
        client.close()

    grown = prom.wait_for(
        "znode_count",
        lambda r: len(r) == 3 and all(v >= before[labels["instance"]] + created for labels, v in r),
        timeout=30)
    # The leader committed every create (ZooKeeper's commit_count: the
    # leader's commits), and every node's fsyncs were scraped.
    prom.wait_for("sum(commit_count)", lambda r: r and r[0][1] >= created, timeout=30)
    prom.wait_for("count(fsynctime_count > 0)", lambda r: r and r[0][1] == 3, timeout=30)
    health = prom.targets_health()
    assert all(h == "up" and not error for h, error in health.values()), health
    report_summary("prometheus: 3 targets up; znode_count %s -> %s after %d creates"
                   % (sorted(before.values()), sorted(v for _, v in grown), created))


def test_every_metric_is_served_with_zookeepers_names_and_types(keel_cluster):
    from prometheus_client.parser import text_string_to_metric_families

    # Small snapshots every 20 entries, and the lock profiler on: their
    # metrics have values to show.
    cluster = keel_cluster("names", metrics=True, snapshot_every_entries=20, profile_locks=True)
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes if n is not leader)
    writes, reads = 40, 30
    client = KazooClient(hosts=follower.address, timeout=10.0)
    client.start(timeout=15)
    try:
        client.create("/names")
        for i in range(writes - 1):
            client.create("/names/n%d" % i, b"v")
        for i in range(reads):
            client.get("/names/n%d" % (i % (writes - 1)))
        client.get_children("/names", watch=lambda event: None)
        cluster.wait_converged()
        deadline = time.monotonic() + 30
        while not (all(int(mntr(n.port).get("keel_snapshots_taken", "0")) >= 1 for n in cluster.nodes)
                   and int(mntr(leader.port).get("keel_heartbeat_rtt_count", "0")) >= 1):
            assert time.monotonic() < deadline, "no snapshot on every node, or no heartbeat round trip"
            time.sleep(0.1)
        texts = {}
        for node, port in zip(cluster.nodes, cluster.metrics_ports):
            status, headers, text = scrape(port)
            assert status == 200, (node.name, status, text[:200])
            assert headers["content-type"].startswith("text/plain; version=0.0.4"), headers
            texts[node] = text
    finally:
        client.stop()
        client.close()

    for node, text in texts.items():
        # The Python client's parser reads it whole...
        families = {f.name: f for f in text_string_to_metric_families(text)}
        assert "znode_count" in families
        # ... and on the wire every name is ZooKeeper's, typed as ZooKeeper does.
        types, samples = exposition(text)
        for name in ZOOKEEPER_GAUGES + KEEL_GAUGES:
            assert types.get(name) == "gauge", (node.name, name, types.get(name))
            assert len(values(samples, name)) == 1, (node.name, name)
        for name in ZOOKEEPER_COUNTERS:
            assert types.get(name) == "counter", (node.name, name)
            assert len(values(samples, name)) == 1, "%s: counter %s must be named as ZooKeeper's (no _total)" % (
                node.name, name)
        for name, quantiles in ZOOKEEPER_SUMMARIES.items():
            assert types.get(name) == "summary", (node.name, name, types.get(name))
            labels = [lab for n, lab, _ in samples if n == name]
            assert labels == ['{quantile="%s"}' % q for q in quantiles], (node.name, name, labels)
            assert len(values(samples, name + "_count")) == 1 and len(values(samples, name + "_sum")) == 1
        for name in KEEL_HISTOGRAMS:
            assert types.get(name) == "histogram", (node.name, name)
        for name in KEEL_COUNTERS:
            assert types.get(name) == "counter", (node.name, name)

        def one(name, labels=""):
            found = values(samples, name, labels)
            assert len(found) == 1, (node.name, name, labels, found)
            return found[0]

        # Values with ZooKeeper's meaning, the same as mntr's.
        stat = mntr(node.port)
        assert one("znode_count") == int(stat["zk_znode_count"])
        assert one("keel_raft_term") == int(stat["keel_raft_term"])
        assert one("keel_raft_leader_id") == cluster.member_id(leader)
        assert one("keel_serving") == 1
        assert one("max_file_descriptor_count") >= one("open_file_descriptor_count") > 0
        assert one("fsynctime_count") > 0 and one("fsynctime_sum") > 0
        assert one("election_time_count") >= 1 and one("looking_count") >= 1
        assert one("startup_snap_load_time_count") == 1 and one("startup_txns_load_time_count") == 1
        assert one("propagation_latency_count") >= writes, "every node applies every write"
        assert one("unrecoverable_error_count") == 0
        assert one("snapshottime_count") >= 1 and one("keel_snapshots_taken_total") >= 1
        assert one("keel_snapshot_duration_seconds_count") == one("snapshottime_count")
        assert one("keel_snapshot_last_bytes") > 0
        assert types.get("keel_lock_acquisitions_total") == "counter", "profile_locks is on"
        assert values(samples, "keel_lock_acquisitions_total", '{lock="node.write",op="apply"}'), node.name
        if node is leader:
            assert one("commit_count") >= writes
            assert one("quorum_ack_latency_count") > 0
            assert one("keel_raft_is_leader") == 1
            assert one("keel_group_commit_batch_proposals_count") > 0
            assert one("keel_heartbeat_rtt_seconds_count") > 0
        else:
            assert one("commit_count") == 0, "only a leader commits"
            assert one("keel_raft_is_leader") == 0
        if node is follower:
            for name, kind in KEEL_PER_OPERATION.items():
                assert types.get(name) == kind, (node.name, name)
            assert one("keel_requests_total", '{op="create"}') == writes
            assert one("keel_requests_total", '{op="getData"}') == reads
            assert one("updatelatency_count") >= writes
            assert one("readlatency_count") >= reads + 1
            assert one("readlatency", '{quantile="0.5"}') >= 0
            assert one("keel_request_latency_seconds_count", '{op="create"}') == writes
            buckets = [v for n, lab, v in samples
                       if n == "keel_request_latency_seconds_bucket" and lab.startswith('{op="create",')]
            assert buckets == sorted(buckets) and buckets[-1] == writes, buckets
    report_summary("metrics: every ZooKeeper name (%d gauges, %d summaries, %d counters) served by all 3 nodes"
                   % (len(ZOOKEEPER_GAUGES), len(ZOOKEEPER_SUMMARIES), len(ZOOKEEPER_COUNTERS)))


def test_snap_count_counts_the_snapshots_a_leader_sends(keel_cluster):
    """ZooKeeper's snap_count: the leader sent a whole snapshot to a follower
    that was behind its compacted log (here: stopped while 1,600 entries
    passed, snapshots every 300, the log kept 1,000 behind the oldest
    snapshot)."""
    cluster = keel_cluster("snapcount", metrics=True, snapshot_every_entries=300)
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes if n is not leader)
    follower.stop()
    client = KazooClient(hosts=leader.address, timeout=10.0)
    client.start(timeout=15)
    try:
        client.create("/snap")
        # One at a time: each create is its own entry (group commit would
        # put concurrent ones in one).
        first = int(mntr(leader.port)["keel_raft_commit_index"])
        i = 0
        while int(mntr(leader.port)["keel_raft_commit_index"]) < first + 1600:
            for _ in range(100):
                client.create("/snap/n%d" % i, b"v")
                i += 1
    finally:
        client.stop()
        client.close()
    follower.start()
    cluster.wait_converged(timeout=60)
    leader_port = cluster.metrics_ports[cluster.nodes.index(leader)]
    _, samples = exposition(scrape(leader_port)[2])
    assert values(samples, "snap_count") and values(samples, "snap_count")[0] >= 1, values(samples, "snap_count")
    follower_port = cluster.metrics_ports[cluster.nodes.index(follower)]
    _, samples = exposition(scrape(follower_port)[2])
    assert values(samples, "snap_count") == [0], "a follower sends no snapshot"
    assert values(samples, "election_time_count")[0] >= 1


def raw_exchange(port, data, wait=10.0):
    """Sends `data` (may be empty) to the metrics port and returns (what came
    back until the server closed or `wait` passed, seconds, closed by server)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        started = time.monotonic()
        if data:
            try:
                s.sendall(data)
            except OSError:
                pass
        received = b""
        closed = False
        while time.monotonic() - started < wait:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except OSError:  # reset: closed too
                closed = True
                break
            if not chunk:
                closed = True
                break
            received += chunk
        return received, time.monotonic() - started, closed


class ClientProbe:
    """A kazoo session writing and reading on the client port in a loop while
    the metrics port is abused; records every operation's latency and failure."""

    def __init__(self, address):
        self.client = KazooClient(hosts=address, timeout=10.0)
        self.client.start(timeout=15)
        self.client.ensure_path("/probe")
        self.latencies, self.failures = [], []
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self):
        i = 0
        while not self.stop_flag.is_set():
            started = time.monotonic()
            try:
                self.client.set("/probe", b"%d" % i)
                self.client.get("/probe")
                self.latencies.append(time.monotonic() - started)
            except Exception as e:  # noqa: BLE001 - any failure is what we look for
                self.failures.append(repr(e))
            i += 1
            time.sleep(0.01)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_flag.set()
        self.thread.join()
        self.client.stop()
        self.client.close()


def test_bad_metrics_requests_get_an_error_or_a_close_and_the_client_port_keeps_serving(servers):
    metrics_port = free_port()
    server = servers("keel", settings={"metrics_port": metrics_port})
    with ClientProbe(server.address) as probe:
        status, _, body = scrape(metrics_port, "/")
        assert status == 404, (status, body)
        status, _, _ = scrape(metrics_port, "/metrics/extra")
        assert status == 404
        reply, _, _ = raw_exchange(metrics_port, b"POST /metrics HTTP/1.1\r\nHost: x\r\ncontent-length: 0\r\n\r\n",
                                   wait=5)
        assert reply.startswith(b"HTTP/1.1 405"), reply[:100]
        assert b"\r\nallow: GET, HEAD\r\n" in reply, reply[:300]

        reply, _, closed = raw_exchange(metrics_port, b"\x16\x03\x01\x00\xa5garbage\x00\xff\r\n\r\n")
        assert closed and (reply == b"" or reply.startswith(b"HTTP/1.1 400")), reply[:100]
        reply, _, closed = raw_exchange(metrics_port, b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n")
        assert closed and (reply == b"" or reply.startswith(b"HTTP/1.1 431")), reply[:100]
        # A client that connects and sends nothing, or half a request, is
        # closed once the header read time is over.
        # (both at once: each waits out the timeout)
        silent_ones = (b"", b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        with ThreadPoolExecutor(max_workers=len(silent_ones)) as pool:
            outcomes = list(pool.map(lambda data: raw_exchange(metrics_port, data, wait=HEADER_READ_TIMEOUT_S + 5),
                                     silent_ones))
        for data, (reply, seconds, closed) in zip(silent_ones, outcomes):
            assert closed and reply == b"", (data, reply[:100])
            assert HEADER_READ_TIMEOUT_S - 0.5 <= seconds <= HEADER_READ_TIMEOUT_S + 3, seconds

        # Every connection slot held by a silent client: one more gets a 503
        # at once; the slots free up when the silent ones are timed out.
        silent = [socket.create_connection(("127.0.0.1", metrics_port)) for _ in range(METRICS_CONNECTIONS_MAX)]
        try:
            time.sleep(0.3)
            reply, seconds, closed = raw_exchange(metrics_port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", wait=3)
            assert reply.startswith(b"HTTP/1.1 503") and closed and seconds < 2, (reply[:100], seconds)
            time.sleep(HEADER_READ_TIMEOUT_S + 1)
            status, _, text = scrape(metrics_port)
            assert status == 200 and "znode_count" in text
        finally:
            for s in silent:
                s.close()
        status, headers, text = scrape(metrics_port)
        assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    assert not probe.failures, probe.failures[:5]
    assert len(probe.latencies) > 100, len(probe.latencies)
    worst = max(probe.latencies)
    assert worst < 1.0, "a client request took %.3f s while the metrics port was abused" % worst
    report_summary("metrics port abuse (404, 405, garbage, 64 KiB header, silent and half requests, %d+1 "
                   "connections): %d client set+get pairs, none failed, worst %.1f ms"
                   % (METRICS_CONNECTIONS_MAX, len(probe.latencies), worst * 1000))


def test_a_metrics_port_that_cannot_be_bound_stops_the_start():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    server = KeelServer(name="keel-metrics-taken", settings={"metrics_port": port})
    try:
        with pytest.raises(ServerStartError):
            server.start(timeout=20)
        assert server.proc.returncode not in (0, None)
        assert "cannot listen for metrics on 127.0.0.1:%d" % port in server.log_text(), server.log_tail(20)
    finally:
        taken.close()
        server.kill()
    server.cleanup()


def test_metrics_are_off_by_default(servers):
    server = servers("keel")
    assert "prometheus metrics served" not in server.log_text()
    assert "metrics_port" not in open(server.config_path).read()
    assert mntr(server.port).get("zk_server_state") == "standalone"


def test_a_log_written_to_a_file_is_plain_text(servers):
    """The harness sends the server's stderr to a file, as a service
    manager does: no terminal colour codes in it, so `grep 'leader=true'`
    and log shippers see the fields as written."""
    server = servers("keel")
    log = server.log_since_start()
    assert "keel serving" in log
    assert "\x1b[" not in log, log[-400:]
    assert re.search(r"keel serving address=127\.0\.0\.1:\d+", log), log[-400:]
