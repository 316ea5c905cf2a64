"""Helpers for the heartbeat and catch-up tests: three-node Keel clusters on
loopback with per-test settings, `mntr` as a dict, `keel bench` runs.

Every server binds 127.0.0.1 and is stopped by the `keel_cluster` fixture
(SIGTERM, then SIGKILL), also when the test fails; the harness's atexit hook
kills whatever is left. Logs of a failed test are printed, work dirs of a
passed one removed (the harness's `servers` fixture style)."""

import re
import subprocess
import sys
import threading
import time

import pytest

from conftest import require_keel
from harness import KEEL_BIN, make_server
from harness.servers import four_letter_word, free_port


def mntr(port, timeout=10.0):
    """mntr as {key: value}; {} if the node does not answer."""
    try:
        text = four_letter_word(port, "mntr", timeout=timeout).decode()
    except OSError:
        return {}
    return dict(line.split("\t", 1) for line in text.strip().splitlines() if "\t" in line)


class KeelCluster:
    def __init__(self, name, size=3, **settings):
        require_keel()
        peer_ports = [free_port() for _ in range(size)]
        peers = ",".join("%d=127.0.0.1:%d" % (i + 1, p) for i, p in enumerate(peer_ports))
        self.nodes = [make_server("keel", name="%s%d" % (name, i + 1),
                                  settings=dict(settings, server_id=i + 1, peers=peers))
                      for i in range(size)]

    def start(self, nodes=None):
        errors = []

        def start(node):
            try:
                node.start()
            except Exception as e:  # reported by the assert below
                errors.append("%s: %r\n%s" % (node.name, e, node.log_tail(40)))

        threads = [threading.Thread(target=start, args=(n,)) for n in (nodes or self.nodes)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert not errors, errors
        return self

    def stop(self):
        for n in self.nodes:
            try:
                n.stop()
            except Exception:
                n.kill()

    def servers(self, nodes=None):
        return ",".join("127.0.0.1:%d" % n.port for n in (nodes or self.nodes) if n.running())

    def leader(self, deadline_s=15.0):
        """The node every running member names as leader (one term, one
        leader id, and that node says it leads)."""
        end = time.time() + deadline_s
        states = []
        while time.time() < end:
            running = [n for n in self.nodes if n.running()]
            states = [mntr(n.port) for n in running]
            views = {(s.get("keel_raft_term"), s.get("keel_raft_leader_id")) for s in states}
            if len(views) == 1:
                term, leader_id = next(iter(views))
                if leader_id not in (None, "0"):
                    leader = self.nodes[int(leader_id) - 1]
                    if leader.running() and mntr(leader.port).get("zk_server_state") == "leader":
                        return leader
            time.sleep(0.05)
        raise AssertionError("no agreed leader within %.0fs: %r" % (deadline_s, states))

    def wait_converged(self, deadline_s=30.0, nodes=None):
        """Waits until the given (default: running) nodes report the same
        tree digest and last zxid; returns (digest, zxid, seconds waited)."""
        started = time.time()
        nodes = nodes or [n for n in self.nodes if n.running()]
        states = []
        while time.time() < started + deadline_s:
            states = [mntr(n.port) for n in nodes]
            views = {(s.get("keel_tree_digest"), s.get("keel_last_zxid")) for s in states}
            if len(views) == 1 and None not in next(iter(views)):
                digest, zxid = next(iter(views))
                return digest, zxid, time.time() - started
            time.sleep(0.05)
        raise AssertionError("replicas did not converge within %.0fs: %r" % (
            deadline_s, [(n.name, s.get("keel_tree_digest"), s.get("keel_last_zxid"),
                          s.get("keel_raft_applied_index")) for n, s in zip(nodes, states)]))


@pytest.fixture
def keel_cluster(request):
    """keel_cluster(name, **settings) -> a started KeelCluster; every node is
    stopped at teardown."""
    made = []

    def make(name, **settings):
        c = KeelCluster(name, **settings)
        made.append(c)
        return c.start()

    yield make
    failed = any(getattr(request.node, "rep_" + w, None) is not None
                 and getattr(request.node, "rep_" + w).failed for w in ("setup", "call"))
    for c in made:
        c.stop()
        for n in c.nodes:
            if failed:
                sys.stderr.write(n.log_tail(80) + "\n")
            else:
                n.cleanup()


_SUMMARY_LINE = re.compile(r"^(\S.*?)\s{2,}(.*)$")


def run_bench(servers, workload, clients, duration, value_size=None, timeout=None):
    """Runs `keel bench`; returns its end-of-run summary as {name: value}
    ("TPS", "ops", "errors", "p99 latency", ...)."""
    command = [KEEL_BIN, "bench", "--servers", servers, "--workload", workload,
               "--clients", str(clients), "--duration", str(duration)]
    if value_size is not None:
        command += ["--value-size", str(value_size)]
    done = subprocess.run(command, capture_output=True, text=True,
                          timeout=timeout or duration + 180)
    assert done.returncode == 0, "keel bench failed (%d):\n%s\n%s" % (
        done.returncode, done.stdout[-3000:], done.stderr[-3000:])
    summary = {}
    for line in done.stdout.splitlines():
        m = _SUMMARY_LINE.match(line)
        if m:
            summary[m.group(1)] = m.group(2)
    assert "TPS" in summary, "no TPS in keel bench output:\n%s" % done.stdout
    return summary
