"""Keel KV fixtures: Debian's redis-server as the reference, and Keel
serving the Redis protocol as one node or as a 3-node cluster. Servers
are started once per module and stopped at its end (logs of a failed
module printed, work dirs of a passed one removed)."""

import sys

import pytest

from harness import keel_available
from harness.cluster import KeelCluster
from harness.redis import KeelKvServer, RedisServer, redis_available, wait_kv
from harness.servers import free_port

SKIP_NO_REDIS = ("redis-server is missing: `make test-deps` installs Debian's "
                 "redis-server and redis-tools")


def require_redis():
    if not redis_available():
        pytest.skip(SKIP_NO_REDIS)


def require_keel():
    if not keel_available():
        pytest.skip("Keel binary missing: cargo build --release -p keel")


class KvTarget:
    """Keel KV as tests use it: `port` is the Redis port a test's client
    connects to (in a cluster: a follower's, so writes are forwarded and
    reads go through a ReadIndex barrier on the leader); `ports` every
    node's."""

    def __init__(self, topology, server):
        self.topology = topology
        self.server = server

    @property
    def ports(self):
        if self.topology == "single":
            return [self.server.resp_port]
        return [int(n.settings["resp_port"]) for n in self.server.nodes]

    @property
    def port(self):
        if self.topology == "single":
            return self.server.resp_port
        leader = self.server.leader()
        follower = next(n for n in self.server.nodes if n is not leader and n.running())
        return int(follower.settings["resp_port"])

    def leader_port(self):
        if self.topology == "single":
            return self.server.resp_port
        return int(self.server.leader().settings["resp_port"])


def start_kv(topology, name="kv", settings=None):
    settings = dict(settings or {})
    if topology == "single":
        server = KeelKvServer(name=name, settings=settings)
        server.start()
        return KvTarget(topology, server)
    ports = [free_port() for _ in range(3)]
    cluster = KeelCluster(3, name=name, settings=settings,
                          node_settings=lambda member: {"resp_port": ports[member - 1]})
    cluster.start()
    for port in ports:
        wait_kv(port)
    return KvTarget(topology, cluster)


def _stop(request, things, failed_before):
    failed = request.session.testsfailed > failed_before
    for thing in things:
        try:
            thing.stop()
        except Exception:
            thing.kill()
        if failed:
            sys.stderr.write(thing.log_tail(150) + "\n")
        else:
            thing.cleanup()


@pytest.fixture(scope="module")
def redis_ref(request):
    """A redis-server started for the module, configured as Keel KV is
    (one database: SELECT 1 is an error on both; nothing persisted)."""
    require_redis()
    server = RedisServer(name="redis-ref", settings={"redis_args": ["--databases", "1"]})
    server.start()
    failed_before = request.session.testsfailed
    yield server
    _stop(request, [server], failed_before)


@pytest.fixture(scope="module", params=["single", "cluster3"])
def kv(request):
    """Keel KV, one node or three, started for the module."""
    require_keel()
    target = start_kv(request.param, name="kv-" + request.param)
    failed_before = request.session.testsfailed
    yield target
    _stop(request, [target.server], failed_before)


@pytest.fixture
def kv_factory(request):
    """kv_factory(topology, **settings) -> a KvTarget stopped at teardown."""
    require_keel()
    started = []
    failed_before = request.session.testsfailed

    def make(topology="single", **settings):
        target = start_kv(topology, settings=settings)
        started.append(target.server)
        return target

    yield make
    _stop(request, started, failed_before)
