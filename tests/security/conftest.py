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


@pytest.fixture
def secure_server(request):
    """secure_server(kind, **settings) -> a started SecureKeelServer or
    SecureZooKeeperServer (settings: see security/secure.py)."""
    started = []

    def start(kind, name=None, **settings):
        if kind == "keel":
            require_keel()
        server = make_secure_server(kind, name=name or "%s-secure" % kind, settings=settings)
        started.append(server)
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
