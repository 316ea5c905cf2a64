"""Differential tests driven by ZooKeeper's own command-line clients:
  * the C client shell /usr/lib/zookeeper/bin/cli_mt (commands on stdin);
  * zkCli.sh one-shot commands (/usr/share/zookeeper/bin/zkCli.sh -server ...),
    all of them in one JVM (tests/compat/java/ZkCliBatch.java: the class,
    classpath and settings zkCli.sh runs, a ZooKeeperMain per command).
The same commands run against ZooKeeper (one standalone server, once per module
for each client) and against Keel as one server and as a 3-node cluster (the
clients get a connect string listing the three nodes); outputs are compared
after normalisation (zxids renumbered, dates/session ids/ports masked)."""

import base64
import functools
import os
import queue
import re
import subprocess
import threading
import time

import pytest

from conftest import beside_reference
from harness import CLI_MT, ZKCLI, ZK_CLIENT_CLASSPATH
from harness.javac import TIER1, compile_sources

from compat.topology import compare_traces


# ---------------------------------------------------------------- normalisation
class Normaliser:
    def __init__(self):
        self.zxids = {}
        self.sessions = {}

    def zx(self, v):
        v = int(v, 16) if v.lower().startswith("0x") else int(v)
        if v == 0:
            return "0"
        return self.zxids.setdefault(v, "Z%d" % (len(self.zxids) + 1))

    def sess(self, v):
        v = int(v, 16) if v.lower().startswith("0x") else int(v)
        if v == 0:
            return "0"
        return self.sessions.setdefault(v, "<session%d>" % (len(self.sessions) + 1))

    def line(self, s):
        s = s.rstrip()
        # zkCli.sh: "cZxid = 0x1a"; cli_mt prints hex without prefix: "czxid=1a"
        s = re.sub(r"\b([cmp]Zxid) = (0x[0-9a-fA-F]+)",
                   lambda m: "%s=%s" % (m.group(1), self.zx(m.group(2))), s)
        s = re.sub(r"\b([cmp]zxid)=([0-9a-fA-F]+)\b",
                   lambda m: "%s=%s" % (m.group(1), self.zx("0x" + m.group(2))), s)
        s = re.sub(r"\b([cm]time)\s*=\s*[A-Z][a-z]{2} [A-Z][a-z]{2} .*?\d{4}",
                   lambda m: "%s=%s" % (m.group(1), "<epoch0>" if "1970" in m.group(0) else "<time>"), s)
        s = re.sub(r"ephemeralOwner\s*=\s*(0x)?([0-9a-fA-F]+)",
                   lambda m: "ephemeralOwner=%s" % self.sess("0x" + m.group(2)), s)
        s = re.sub(r"session id: (0x[0-9a-fA-F]+)", lambda m: "session id: %s" % self.sess(m.group(1)), s)
        s = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", s)
        return s


# ---------------------------------------------------------------- C client
CLI_MT_COMMANDS = [
    "create /cc", "create +e /cc/e", "create +s /cc/s-", "create +s /cc/s-", "create2 /cc/c2",
    "create +c /cc/cont", "create +t=600000 /cc/ttl", "create +e /cc/e", "create /cc/e/child",
    "set /cc hello", "get /cc", "ls /cc", "ls2 /cc", "exists /cc/e", "exists /cc/nope",
    "wexists /cc/w", "create /cc/w", "create /nope/x", "delete /cc", "delete /cc/c2",
    "delete /cc/missing", "sync /cc", "get /missing", "get /zookeeper/config", "ls /zookeeper",
    "addauth digest u:p", "aget /cc", "als /cc",
]

DROP = re.compile(r"ZOO_(INFO|WARN|ERROR|DEBUG)|^time = \d+ msec$|^\s*$")
# After each command, cli_mt is sent `sync` of a path that is never
# created. cli_mt prints its answer ("[<path>]: rc = 0", then "\tname =
# <path>") from its completion thread, after every completion and watch
# event of the commands before it (one session, its replies in order), and
# prints nothing when it sends it. So everything printed before it is the
# command's output. A command that prints nothing (addauth, exists of a
# node that is there) costs one round trip, not a wait for output that
# never comes. (Not `exists`: cli_mt runs it synchronously and prints its
# answer from its main thread, which races the completion thread.)
CLI_MT_FENCE_PATH = "/keel-cli-mt-fence"
CLI_MT_FENCE_LINES = ["[%s]: rc = 0" % CLI_MT_FENCE_PATH, "\tname = %s" % CLI_MT_FENCE_PATH]
# How long a command's fence is waited for.
CLI_MT_FENCE_S = 15.0


def run_cli_mt(server):
    p = subprocess.Popen(["stdbuf", "-oL", "-eL", CLI_MT, "-h", server.address],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, errors="replace", start_new_session=True)
    lines = []
    lock = threading.Lock()

    def reader():
        for ln in p.stdout:
            with lock:
                lines.append(ln)

    t = threading.Thread(target=reader, daemon=True)
    t.start()

    def fenced(what):
        """The lines before the fence's answer (which is dropped)."""
        p.stdin.write("sync %s\n" % CLI_MT_FENCE_PATH)
        p.stdin.flush()
        deadline = time.monotonic() + CLI_MT_FENCE_S
        n = len(CLI_MT_FENCE_LINES)
        while True:
            with lock:
                stripped = [ln.rstrip("\n") for ln in lines]
                at = next((i for i in range(len(stripped) - n + 1)
                           if stripped[i:i + n] == CLI_MT_FENCE_LINES), None)
                if at is not None:
                    block = lines[:at]
                    del lines[:at + n]
                    return block
            if time.monotonic() >= deadline or p.poll() is not None:
                with lock:
                    seen = list(lines)
                raise AssertionError("cli_mt against %s: no answer to the fence after %r within %.0f s "
                                     "(cli_mt %s); its output since: %r"
                                     % (server.address, what, CLI_MT_FENCE_S,
                                        "exited %s" % p.returncode if p.poll() is not None else "running",
                                        seen))
            time.sleep(0.01)

    blocks = []
    try:
        blocks.append(("<connect>", fenced("<connect>")))
        for cmd in CLI_MT_COMMANDS:
            p.stdin.write(cmd + "\n")
            p.stdin.flush()
            blocks.append((cmd, fenced(cmd)))
        p.stdin.write("quit\n")
        p.stdin.close()
        p.wait(10)
        t.join(5)
        with lock:
            blocks.append(("quit", list(lines)))
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait()
    n = Normaliser()
    out = []
    for cmd, block in blocks:
        norm = sorted(n.line(ln) for ln in block if not DROP.search(ln.rstrip()))
        out.append((cmd, norm))
    return out


def compare(suite, candidate, topology, ref, got):
    """compare_traces() on (command, output lines) blocks."""
    return compare_traces(suite, candidate, topology, [[c, b] for c, b in ref], [[c, b] for c, b in got])


@pytest.mark.skipif(not os.access(CLI_MT, os.X_OK), reason="C client %s not installed" % CLI_MT)
def test_c_client_cli_mt_matches_zookeeper(servers, candidate, keel_topology, zk_reference):
    ref, _ = zk_reference("cli_mt", run_cli_mt, name="zk-climt")
    assert any("rc = 0" in ln for _, b in ref for ln in b), "cli_mt produced no results against ZooKeeper: %r" % ref
    other = servers(candidate, topology=keel_topology, name="%s-climt-%s" % (candidate, keel_topology))
    got = run_cli_mt(other)
    diffs = compare("cli_mt", candidate, keel_topology, ref, got)
    assert not diffs, "%d cli_mt command(s) differ (%s %s):\n%s" % (len(diffs), candidate, keel_topology,
                                                                     "\n".join(diffs))


# ---------------------------------------------------------------- zkCli.sh
ZKCLI_COMMANDS = [
    ["create", "/zc", "data"],
    ["create", "/zc", "again"],
    ["create", "-s", "/zc/s-", "x"],
    ["create", "-s", "/zc/s-", "y"],
    # (no `create -e`: a one-shot zkCli.sh exits without closing its session, so
    # the ephemeral would vanish at a random later moment, on ZooKeeper too)
    ["create", "-c", "/zc/cont"],
    ["create", "-t", "100000", "/zc/ttl", "t"],
    ["create", "/zc/missing/child", "x"],
    ["ls", "/"],
    ["ls", "/zc"],
    ["ls", "-s", "/zc"],
    ["ls", "-R", "/zc"],
    ["get", "/zc"],
    ["get", "-s", "/zc"],
    ["set", "/zc", "new"],
    ["set", "-v", "0", "/zc", "stale"],
    ["stat", "/zc"],
    ["stat", "/missing"],
    ["get", "/missing"],
    ["getAcl", "/zc"],
    ["setAcl", "/zc/s-0000000000", "world:anyone:r"],
    ["getAcl", "/zc/s-0000000000"],
    ["set", "/zc/s-0000000000", "denied"],
    ["getEphemerals", "/"],
    ["setquota", "-n", "10", "/zc"],
    ["listquota", "/zc"],
    ["delquota", "/zc"],
    ["listquota", "/zc"],
    ["getAllChildrenNumber", "/zc"],
    ["delete", "/zc"],
    ["delete", "/zc/s-0000000001"],
    ["deleteall", "/zc"],
    ["ls", "/"],
    ["ls", "/zookeeper"],
    ["get", "/zookeeper/config"],
    ["sync", "/"],
    ["create", "/bad/"],
]


# How long one zkCli command may take in the batch JVM.
ZKCLI_COMMAND_TIMEOUT_S = 60


@functools.lru_cache(maxsize=None)
def zkcli_batch_java():
    """The java command zkCli.sh runs (its JAVA, CLASSPATH, log settings
    and CLIENT_JVMFLAGS, from the zkEnv.sh it sources), with ZkCliBatch
    in place of ZooKeeperMain."""
    bindir = os.path.dirname(ZKCLI)
    libexec = os.path.join(bindir, "..", "libexec", "zkEnv.sh")
    env_sh = libexec if os.path.exists(libexec) else os.path.join(bindir, "zkEnv.sh")
    shown = subprocess.run(["bash", "-c", '. "$1" >/dev/null 2>&1; printf "%s\\n" "$JAVA" "$CLASSPATH" "$ZOO_LOG_DIR"',
                            "zkenv", env_sh], capture_output=True, text=True, check=True, timeout=30)
    java, classpath, log_dir = shown.stdout.split("\n")[:3]
    _, classes = compile_sources(["ZkCliBatch.java"], ZK_CLIENT_CLASSPATH, "javac-zkcli")
    log_file = "zookeeper-%s-cli-%s.log" % (os.environ.get("USER", ""), os.uname().nodename)
    return [java or "java", "-Dzookeeper.log.dir=" + log_dir, "-Dzookeeper.log.file=" + log_file,
            "-cp", classpath + ":" + classes, TIER1, "-Xmx128m",
            "org.apache.zookeeper.ZkCliBatch"]


def run_zkcli(server):
    n = Normaliser()
    out = []
    p = subprocess.Popen(zkcli_batch_java() + [server.address], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
    results = queue.Queue()
    stderr = []

    def read_results():
        for ln in p.stdout:
            results.put(ln)

    threading.Thread(target=read_results, daemon=True).start()
    threading.Thread(target=lambda: stderr.extend(p.stderr), daemon=True).start()
    try:
        for args in ZKCLI_COMMANDS:
            if hasattr(server, "wait_replicated"):
                # A cluster: every command is a new session on a random member
                # and a one-shot zkCli cannot `sync` before it runs its
                # command; wait until every member has applied what the
                # previous commands wrote instead (what the sync would
                # ensure). Nothing to wait for on one server.
                server.wait_replicated()
            p.stdin.write("\t".join(args) + "\n")
            p.stdin.flush()
            try:
                result = results.get(timeout=ZKCLI_COMMAND_TIMEOUT_S)
            except queue.Empty:
                raise AssertionError("zkCli batch against %s: no result for %r within %d s (JVM %s); its stderr: %s"
                                     % (server.address, " ".join(args), ZKCLI_COMMAND_TIMEOUT_S,
                                        "exited %s" % p.poll() if p.poll() is not None else "running",
                                        "".join(stderr)[-3000:]))
            word, code, stdout_b64, stderr_b64 = (result.rstrip("\n").split(" ") + ["", ""])[:4]
            assert word == "result", "zkCli batch printed %r" % result
            text = [base64.b64decode(part).decode("utf-8", "replace") for part in (stdout_b64, stderr_b64)]
            # The connection event ("WATCHER::" / "WatchedEvent state:SyncConnected
            # type:None path:null") is printed by the event thread and races with
            # the command's own output: drop it.
            lines = [ln for ln in (text[0] + "\n" + text[1]).splitlines()
                     if ln.strip() and "SLF4J" not in ln and not ln.startswith("Connecting to")
                     and ln.strip() != "WATCHER::" and "type:None path:null" not in ln]
            out.append((" ".join(args), [n.line(ln) for ln in lines] + ["exit=%s" % code]))
        p.stdin.close()
        p.wait(10)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait()
    return out


@pytest.mark.skipif(not os.access(ZKCLI, os.X_OK), reason="zkCli.sh not installed")
def test_zkcli_matches_zookeeper(servers, candidate, keel_topology, zk_reference):
    other = servers(candidate, topology=keel_topology, name="%s-zkcli-%s" % (candidate, keel_topology))
    ref, _, got = beside_reference(zk_reference, "zkcli", run_zkcli, other, run_zkcli, name="zk-zkcli")
    diffs = compare("zkcli", candidate, keel_topology, ref, got)
    assert not diffs, "%d zkCli.sh command(s) differ (%s %s):\n%s" % (len(diffs), candidate, keel_topology,
                                                                      "\n".join(diffs))
