"""Differential test driven by Go's ZooKeeper client, github.com/go-zookeeper/zk
v1.0.4 (pinned by tests/compat/go/go.sum): tests/compat/go/scenario (every
create mode the library offers, versions and Stats, one-shot watches and the
events on the wire, multi, ACLs and digest auth, an unknown auth scheme, sync,
four-letter-word helpers, large and oversized data, the lock recipe,
ephemerals going with a closed session, container and TTL reaping, invalid
paths) is built with `go build` into a temp dir and run against ZooKeeper (one
standalone server, once per module) and against Keel as one server and as a
3-node cluster (the client gets a connect string listing the three nodes).
The normalised traces must be equal, but for one deliberate difference:
Keel's srvr keeps ZooKeeper 3.4's "built on MM/dd/yyyy" date, which the
library's FLWSrvr parses where it fails on ZooKeeper 3.8's "yyyy-MM-dd", so
the step "FLWSrvr" is excused for Keel (KEEL_DELIBERATE in
tests/compat/topology.py)."""

import os
import shutil
import subprocess

import pytest

from conftest import beside_reference
from harness import make_workdir
from harness.golang import build_go, go_command
from harness.trace import Trace

from compat.topology import compare_traces

GO_MODULE = os.path.join(os.path.dirname(__file__), "go")
# One run takes ~3 s; this bound keeps a server that stops answering (every
# step then waits out its own 15 s bound) within the test's ~60 s budget.
SCENARIO_TIMEOUT_S = 45


@pytest.fixture(scope="module")
def scenario_binary():
    if go_command() is None:
        pytest.fail("no `go` command: `make test-deps` installs Go, which this test needs to build "
                    "tests/compat/go/scenario (Go's ZooKeeper client)")
    out = make_workdir("go-scenario")
    yield build_go(GO_MODULE, "scenario", os.path.join(out, "scenario"))
    shutil.rmtree(out, ignore_errors=True)


def _text(out):
    if isinstance(out, bytes):
        return out.decode("utf-8", "replace")
    return out or ""


def run_go(binary, server, name):
    try:
        p = subprocess.run([binary, server.address], capture_output=True, text=True,
                           timeout=SCENARIO_TIMEOUT_S, start_new_session=True)
        stdout, stderr, status = p.stdout, p.stderr, {"code": p.returncode}
    except subprocess.TimeoutExpired as e:
        # the steps printed so far still show how far it got
        stdout, stderr, status = _text(e.stdout), _text(e.stderr), {"timeout_s": SCENARIO_TIMEOUT_S}
    trace = Trace(name)
    trace.add_printed(stdout)
    if status != {"code": 0}:
        status["stderr_tail"] = stderr[-2000:]
        trace.add_entry("go exit status", status)
    return trace


def test_go_client_scenario_matches_zookeeper(servers, candidate, keel_topology, scenario_binary, zk_reference):
    other = servers(candidate, topology=keel_topology, name="%s-go-%s" % (candidate, keel_topology))
    ref, zk, got = beside_reference(zk_reference, "go", lambda zk: run_go(scenario_binary, zk, "zookeeper"),
                                    other, lambda server: run_go(scenario_binary, server, candidate),
                                    name="zk-go")
    assert ref.entries and ref.entries[-1][0] == "done", (
        "Go scenario failed against ZooKeeper itself:\n%r" % ref.entries[-3:])
    p1 = zk.workdir + "-go-trace.json"
    p2 = other.workdir + "-go-trace.json"
    ref.dump(p1)
    got.dump(p2)
    differences = compare_traces("go", candidate, keel_topology, ref.normalised(), got.normalised())
    assert not differences, ("%d step(s) of the Go-client scenario differ (%s %s; traces %s, %s):\n%s"
                             % (len(differences), candidate, keel_topology, p1, p2, "\n".join(differences)))
