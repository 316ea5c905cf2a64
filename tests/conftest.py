"""Shared pytest fixtures: servers that are always killed at the end (even on
failure), Keel-availability skips, server-log dumps for failed tests."""

import os
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import (  # noqa: E402
    KEEL_BIN, keel_available, make_server, ZooKeeperServer, KeelServer,
)
from harness.cluster import KeelCluster, make_topology  # noqa: E402

SKIP_NO_KEEL = ("Keel binary %s is missing: build it with `cargo build --release -p keel` "
                "(`make test` always does)" % KEEL_BIN)


SUMMARY = []


def report_summary(line):
    """Print `line` in pytest's terminal summary (visible without -s)."""
    SUMMARY.append(line)


def pytest_sessionfinish(session):
    """An xdist worker sends its summary lines to the controller."""
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["keel_summary"] = list(SUMMARY)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """The controller collects a finished worker's summary lines."""
    SUMMARY.extend(getattr(node, "workeroutput", {}).get("keel_summary", []))


def pytest_terminal_summary(terminalreporter):
    if SUMMARY:
        terminalreporter.section("keel test summary")
        for line in SUMMARY:
            terminalreporter.write_line(line)


def candidate_kind():
    """What the differential tests compare ZooKeeper against: Keel by default;
    KEEL_COMPAT_AGAINST=zookeeper compares ZooKeeper with a second ZooKeeper
    (validates the scenarios and the normalisation)."""
    kind = os.environ.get("KEEL_COMPAT_AGAINST", "keel")
    assert kind in ("keel", "zookeeper"), kind
    return kind


def require_keel():
    if not keel_available():
        pytest.skip(SKIP_NO_KEEL)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def _test_failed(request):
    return any(getattr(request.node, "rep_" + w, None) is not None
               and getattr(request.node, "rep_" + w).failed for w in ("setup", "call"))


def _stop_all(request, started, log_lines):
    """Teardown of the server fixtures: stop (SIGTERM, then SIGKILL) every
    server/group; print their logs if the test failed, else remove their work
    dirs."""
    failed = _test_failed(request)
    for s in started:
        try:
            s.stop()
        except Exception:
            s.kill()
        if failed:
            sys.stderr.write(s.log_tail(log_lines) + "\n")
        else:
            s.cleanup()


@pytest.fixture
def servers(request):
    """servers(kind, **kw) starts a server ("zookeeper" or "keel"); all are
    stopped at teardown; logs of a failed test are printed.
    servers(kind, topology="cluster3", **kw) starts a 3-member group instead
    (harness.cluster.ServerGroup: a Keel cluster, or a ZooKeeper ensemble)."""
    started = []

    def start(kind, topology="single", **kw):
        if kind == "keel":
            require_keel()
        s = make_topology(kind, topology, **kw)
        started.append(s)
        s.start()
        return s

    yield start
    _stop_all(request, started, 150)


@pytest.fixture
def keel_cluster(request):
    """keel_cluster(name, size=3, proxied=False, node_settings=None, metrics=False,
    **settings) -> a started harness.cluster.KeelCluster (test settings plus
    `settings`, plus node_settings(member id) for each member; serving: one
    leader, the others following; metrics=True: each node's Prometheus
    endpoint on a free port, `cluster.metrics_ports`). Stopped at teardown
    like `servers`; its logs are printed if the test failed."""
    started = []

    def start(name="keel", size=3, proxied=False, node_settings=None, metrics=False, **settings):
        require_keel()
        c = KeelCluster(size, name=name, settings=settings, proxied=proxied, node_settings=node_settings,
                        metrics_ports=metrics or None)
        started.append(c)
        return c.start()

    yield start
    _stop_all(request, started, 240)


@pytest.fixture
def candidate():
    kind = candidate_kind()
    if kind == "keel":
        require_keel()
    return kind


# The topologies the differential compat suites run the candidate in: one
# server, and a 3-member cluster whose clients get a connect string listing all
# three members (for KEEL_COMPAT_AGAINST=zookeeper: a 3-member ZooKeeper
# ensemble). The reference is always one standalone ZooKeeper.
COMPAT_TOPOLOGIES = ("single", "cluster3")


@pytest.fixture(params=COMPAT_TOPOLOGIES)
def keel_topology(request):
    return request.param


def beside_reference(zk_reference, key, run_reference, candidate, run_candidate, **server_kw):
    """(reference result, reference server, run_candidate(candidate)): the
    candidate's run goes on in a thread while the reference runs (when it is
    not cached already), so a module pays for one of the two. Only for
    scenarios run by other processes whose outcome does not hang on timing
    (zkCli, the Java client); the kazoo scenario (TTL timings) runs one
    after the other."""
    with ThreadPoolExecutor(max_workers=1) as beside:
        got_later = beside.submit(run_candidate, candidate)
        try:
            ref, zk = zk_reference(key, run_reference, **server_kw)
        finally:
            got = got_later.result()
    return ref, zk, got


# How many times a reference scenario runs against a fresh ZooKeeper before
# its failure fails the test. ZooKeeper 3.8 takes connections on its port
# before its database is loaded. Closing one then throws a
# NullPointerException (ZooKeeperServer.removeCnxn: zkDb is null) and the
# socket stays open unanswered, so the client waits out its connect timeout:
# in test_restart_compat a kazoo client reconnecting to the restarted server
# hung so for 10 s, and the raw session resumed after it had expired (a
# `make test` of 2026-11-29). The candidate never gets a second run.
REFERENCE_ATTEMPTS = 2


@pytest.fixture(scope="module")
def zk_reference(request):
    """zk_reference(key, run, **server_kw) -> (run(zk), zk): `run` against a
    standalone ZooKeeper started for it and stopped right after, once per module
    and key. The scenarios do the same thing whatever they run against, so one
    reference result serves the candidate in every topology. The server's
    workdir (log) is kept if a test of the module failed."""
    cache = {}
    failed_before = request.session.testsfailed
    made = []

    def get(key, run, **kw):
        for attempt in range(1, REFERENCE_ATTEMPTS + 1):
            if key in cache:
                break
            zk = make_server("zookeeper", **kw)
            made.append(zk)
            zk.start()
            try:
                cache[key] = (run(zk), zk)
            except BaseException as error:
                sys.stderr.write(zk.log_tail(150) + "\n")
                # pytest's outcomes (skip, fail) and interrupts are not retried.
                if attempt == REFERENCE_ATTEMPTS or not isinstance(error, Exception):
                    raise
                sys.stderr.write("ZooKeeper's reference run %r failed (above); run once more on a new server\n" % key)
            finally:
                try:
                    zk.stop()
                except Exception:
                    zk.kill()
        return cache[key]

    yield get
    if request.session.testsfailed == failed_before:
        for zk in made:
            zk.cleanup()
