"""Fixtures of the security suite: certificates, secure servers (stopped at
teardown, logs printed on failure) and the compiled Java client."""

import shutil
import sys

import pytest

from conftest import require_keel
from security.secure import OPENSSL, Pki, compile_java, make_secure_server, new_workdir

# Every test runs against Keel and against ZooKeeper 3.8 where both can do
# it: the same client code, the same expected outcome.
KINDS = ("keel", "zookeeper")


@pytest.fixture(scope="module")
def pki():
    if not OPENSSL:
        pytest.skip("openssl CLI not installed")
    directory = new_workdir("pki")
    yield Pki.standard(directory)
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def fresh_pki():
    """Certificates of this test alone (it may rewrite them)."""
    if not OPENSSL:
        pytest.skip("openssl CLI not installed")
    directory = new_workdir("pki")
    yield Pki.standard(directory)
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def java_classes():
    if not shutil.which("javac"):
        pytest.skip("javac not installed")
    directory = new_workdir("javac-secure")
    yield compile_java(directory)
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def shared_secure_servers():
    """The module's shared servers, by (kind, settings): started by the
    first test that asks for one with shared=True, stopped at the module's
    end (a ZooKeeper start is a JVM's: 3 to 4 s of CPU)."""
    shared = {}
    yield shared
    for server in shared.values():
        try:
            server.stop()
        except Exception:
            server.kill()
        server.cleanup()


@pytest.fixture
def secure_server(request, shared_secure_servers):
    """secure_server(kind, shared=False, **settings) -> a started
    SecureKeelServer or SecureZooKeeperServer (settings: see
    security/secure.py). shared=True: the module's server of that kind and
    those settings, started once (for tests that only add nodes of their
    own and do not stop, reconfigure or count on the server's log)."""
    started = []
    used_shared = []

    def start(kind, name=None, shared=False, **settings):
        if kind == "keel":
            require_keel()
        key = (kind, tuple(sorted((k, id(v) if k == "tls" else v) for k, v in settings.items())))
        if shared and key in shared_secure_servers:
            server = shared_secure_servers[key]
            assert server.running(), "the shared %s server stopped: %s" % (kind, server.log_tail(60))
            used_shared.append(server)
            return server
        server = make_secure_server(kind, name=name or "%s-secure" % kind, settings=settings)
        (used_shared if shared else started).append(server)
        if shared:
            shared_secure_servers[key] = server
        server.start()
        return server

    yield start
    failed = any(getattr(request.node, "rep_" + when, None) is not None
                 and getattr(request.node, "rep_" + when).failed for when in ("setup", "call"))
    for server in started:
        try:
            server.stop()
        except Exception:
            server.kill()
        if failed:
            sys.stderr.write(server.log_tail(150) + "\n")
        else:
            server.cleanup()
    if failed:
        for server in used_shared:
            sys.stderr.write("(shared by the module's tests)\n" + server.log_tail(150) + "\n")
