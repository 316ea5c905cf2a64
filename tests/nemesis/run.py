"""`make nemesis`: a Jepsen-style fault campaign on real `keel` processes.

    NEMESIS_SECONDS=180 NEMESIS_NODES=3 NEMESIS_SEED=1 \\
        PYTHONPATH=tests .venv/bin/python -m nemesis.run

A KeelCluster(proxied=True) of NEMESIS_NODES (3 or 5) members; two
workload clients per member (nemesis.workload) and an ephemeral monitor;
the nemesis (nemesis.faults) for NEMESIS_SECONDS; then everything healed, a
quiet QUIET_S, the clients' sessions closed, abandoned sessions left to
expire, final reads (after sync) of every path, and the checks
(nemesis.checks): linearizability (keel-linearize), acknowledged writes
present, local reads sequentially consistent per session, replica digests
equal (mntr keel_tree_digest / keel_last_zxid), ephemerals gone with their
sessions. Prints a summary; writes history.jsonl, faults.json,
summary.txt and timeline.svg to the run's work dir (kept, printed at the
end). The last line is `nemesis: <N> operations, <F> faults, <V>
violations`; the exit status is 1 when V > 0.

NEMESIS_PLANT=lost-write (tests only) drops the newest acknowledged write
of one path from the final reads, as a server that lost it would show: the
run must then report violations.
"""

import json
import os
import random
import sys
import threading
import time
from collections import Counter

from harness.cluster import KeelCluster
from harness.servers import KEEL_BIN, REPO_ROOT, make_workdir

from . import checks, timeline
from .ballast import VALUE_BYTES as BALLAST_VALUE_BYTES, Ballast
from .client import Expired, GaveUp, Session
from .faults import Nemesis
from .workload import (
    FINAL_PROCESS, Client, Clock, EphemeralMonitor, KeySpace, Recorder, confirm_ended,
)

LINEARIZE_BIN = os.environ.get("KEEL_LINEARIZE_BIN",
                               os.path.join(REPO_ROOT, "target", "release", "keel-linearize"))
SESSION_TIMEOUT_MS = 4000
EPOCH_S = 6.0
CLIENTS_PER_NODE = 2
QUIET_S = 5.0
SERVING_TIMEOUT_S = 120.0
CONVERGE_TIMEOUT_S = 60.0
FINAL_READ_TRIES = 8
PROGRESS_EVERY_S = 10.0
# Large writes beside the workload (nemesis.ballast), KiB/s; 0: none.
DEFAULT_BALLAST_KIB_PER_S = 2048


class Run:
    def __init__(self, seconds, nodes, seed, plant=None, out=print, ballast_kib_per_s=DEFAULT_BALLAST_KIB_PER_S):
        assert nodes in (3, 5), "NEMESIS_NODES must be 3 or 5"
        self.seconds, self.nodes, self.seed, self.plant, self.out = seconds, nodes, seed, plant, out
        self.ballast_kib_per_s = ballast_kib_per_s
        self.ballast = None
        self.timeout_s = SESSION_TIMEOUT_MS / 1000.0
        self.violations = {}
        self.notes = []
        self.converged, self.linearize_output, self.alive = "not checked", "", []

    # -------------------------------------------------------------- phases
    def start(self):
        self.workdir = make_workdir("nemesis")
        self.cluster = KeelCluster(self.nodes, name="nemesis", workdir=os.path.join(self.workdir, "cluster"),
                                   proxied=True, settings={"max_session_timeout_ms": 10000})
        self.cluster.start()
        self.clock = Clock()
        self.rec = Recorder(self.clock)
        self.keys = KeySpace(self.clock, EPOCH_S)
        self.stop_clients = threading.Event()
        self.stop_nemesis = threading.Event()
        ports = self.cluster.ports
        self.monitor = EphemeralMonitor(ports, self.rec, SESSION_TIMEOUT_MS, threading.Event())
        self.clients = [Client(c, ports, self.rec, self.keys, self.seed * 1000 + c, SESSION_TIMEOUT_MS,
                               self.stop_clients, self.monitor)
                        for c in range(CLIENTS_PER_NODE * self.nodes)]
        self.nemesis = Nemesis(self.cluster, self.clock, self.seed, SESSION_TIMEOUT_MS, self.stop_nemesis)
        self.stop_ballast = threading.Event()
        if self.ballast_kib_per_s > 0:
            self.ballast = Ballast(ports, self.ballast_kib_per_s * 1024, self.stop_ballast)
        self.monitor.start()
        for c in self.clients:
            c.start()
        if self.ballast is not None:
            self.ballast.start()
        self.nemesis.start()

    def wait(self):
        end = time.monotonic() + self.seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(PROGRESS_EVERY_S, left))
            self.out("nemesis: %5.0f s  %6d operations  %3d faults" % (
                self.clock.seconds(), len(self.rec.ops), len(self.nemesis.faults)), flush=True)

    def heal(self):
        self.stop_nemesis.set()
        self.nemesis.join(60)
        self.nemesis.heal()
        self.healed_at = self.clock.seconds()
        try:
            self.cluster.wait_serving(SERVING_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - a cluster that never serves again is a violation
            self.violation("availability", "the cluster did not serve within %.0f s of healing: %s"
                           % (SERVING_TIMEOUT_S, str(e).splitlines()[0]))
        time.sleep(QUIET_S)
        self.stop_clients.set()
        self.stop_ballast.set()
        if self.ballast is not None:
            self.ballast.join(60)
            if self.ballast.is_alive():
                self.violation("client", "the ballast writer did not stop within 60 s")
            if self.ballast.error is not None:
                raise self.ballast.error
        for c in self.clients:
            c.join(120)
            if c.is_alive():
                self.violation("client", "client %d did not stop within 120 s" % c.cid)
            if c.error is not None:
                raise c.error

    def settle_sessions(self):
        """Sessions that ended without an answered close must expire: wait
        their timeout (+ slack) from the latest such end, let the monitor
        see their ephemerals go, then ask the members."""
        ends = [i.end_at / 1e6 for i in self.rec.sessions.values()
                if i.end in ("abandoned", "gave-up", "close-unknown")]
        due = max(ends + [self.healed_at]) + self.timeout_s + checks.EXPIRY_SLACK_S
        self.monitor.stop_event.set()
        while self.clock.seconds() < due + checks.EXPIRY_SLACK_S and self.monitor.still_pending():
            time.sleep(0.2)
        time.sleep(max(0.0, due - self.clock.seconds()))
        self.monitor.halt.set()
        self.monitor.join(30)
        if self.monitor.error is not None:
            raise self.monitor.error
        self.alive, self.unconfirmed = confirm_ended(self.cluster.ports, self.rec, SESSION_TIMEOUT_MS)
        if self.unconfirmed:
            self.notes.append("%d ended sessions could not be confirmed expired (no member answered)"
                              % len(self.unconfirmed))

    def final_reads(self):
        """Reads (after sync) of every path of every epoch, every child the
        groups list and every path a write named: recorded in the history,
        returned as path -> None | {data, version, czxid, mzxid, ephemeralOwner}."""
        paths = set()
        for epoch in sorted(self.keys.epochs_used):
            paths.update(KeySpace.paths(epoch))
        for op in list(self.rec.ops):
            if checks.acked(op) and op["call"]["op"] in ("create", "multi"):
                paths.update(e[0] for e in checks.effects(op))
        final, session = {}, None
        for group in sorted(p for p in paths if p.count("/") == 1):
            got, session = self._final_read({"op": "getChildren", "path": group}, session)
            if got is not None and got.ret.get("type") == "children":
                paths.update("%s/%s" % (group, n) for n in got.ret["names"])
        for path in sorted(paths):
            got, session = self._final_read({"op": "getData", "path": path}, session)
            if got is None:
                self.notes.append("final read of %s had no answer" % path)
                continue
            if got.ret.get("type") == "data":
                final[path] = dict(got.stat, data=checks.data_of(got.ret))
            elif got.ret.get("code") == -101:
                final[path] = None
        if session is not None:
            session.close()
        return final

    def _final_read(self, call, session):
        for _ in range(FINAL_READ_TRIES):
            try:
                if session is None:
                    session = Session(self.cluster.ports, 0, SESSION_TIMEOUT_MS, self.clock)
                    if not session.open(deadline_s=10.0):
                        session = None
                        continue
                session.ensure()
                op = self.rec.invoke(FINAL_PROCESS, session.session_id, call)
                if not session.sync(call["path"]):
                    continue
                reply = session.call(call)
                self.rec.complete(op, reply)
                if reply.ret is not None and reply.ret.get("code") != -112:
                    return reply, session
            except (Expired, GaveUp):
                session = None
        return None, session

    def plant_lost_write(self, final):
        """Test only: make the final reads miss the newest acknowledged
        setData of one path, as a server that lost it would answer."""
        w = checks.Writes(self.rec.ops)
        for path, node in sorted(final.items()):
            sets = [e for e in w.acked.get(path, ()) if e[1] == "set"]
            if node is None or len(sets) < 2 or node["mzxid"] != sets[-1][0]:
                continue
            older = sets[-2]
            node.update(data=older[2], mzxid=older[0], version=node["version"] - 1)
            for op in reversed(self.rec.ops):
                if op["process"] == FINAL_PROCESS and op["call"] == {"op": "getData", "path": path}:
                    op["ret"] = {"type": "data", "data": older[2], "version": node["version"]}
                    op["stat"]["mzxid"] = older[0]
                    break
            self.notes.append("planted: the final read of %s misses the write at zxid 0x%x" % (path, sets[-1][0]))
            return
        raise AssertionError("planted lost-write: no path with two acknowledged setData to drop one from")

    # -------------------------------------------------------------- checks
    def violation(self, check, text):
        self.violations.setdefault(check, []).append(text)

    def check(self, final):
        try:
            converged = self.cluster.wait_converged(CONVERGE_TIMEOUT_S)
            self.converged = "equal on %d members: digest %s at zxid %s" % (
                self.nodes, converged.digest, converged.zxid)
        except AssertionError as e:
            self.converged = "DIFFER"
            self.violation("replicas", str(e))
        self.history_path = os.path.join(self.workdir, "history.jsonl")
        ops = sorted(self.rec.ops, key=lambda o: o["invoke"])
        checks.write_history(ops, self.history_path)
        found, self.linearize_output = checks.linearizability(self.history_path, LINEARIZE_BIN)
        for v in found:
            self.violation("linearizability", v)
        for v in checks.lost_writes(ops, final):
            self.violation("acknowledged writes", v)
        if self.ballast is not None:
            for v in self.ballast.check(self.cluster.ports):
                self.violation("acknowledged writes", v)
        for v in checks.local_reads(ops):
            self.violation("session order", v)
        faults = [(f.start, f.end) for f in self.nemesis.faults]
        for v in checks.ephemerals(final, self.monitor.seen, self.monitor.still_pending(), self.alive, faults,
                                   self.timeout_s):
            self.violation("ephemerals", v)

    # -------------------------------------------------------------- report
    def report(self):
        ops = self.rec.ops
        outcomes = Counter(timeline.outcome(o) for o in ops)
        kinds = Counter(("local " if o.get("local") else "") + o["call"]["op"] for o in ops)
        faults = Counter(f.kind for f in self.nemesis.faults)
        ends = Counter(i.end for i in self.rec.sessions.values())
        gone = checks.latencies(self.monitor.gone)
        seen = checks.latencies(self.monitor.seen)
        violations = sum(len(v) for v in self.violations.values())
        lines = [
            "",
            "nemesis: seed %d, %d nodes, %.0f s of faults, session timeout %d ms, %d clients"
            % (self.seed, self.nodes, self.seconds, SESSION_TIMEOUT_MS, len(self.clients)),
            "operations: %d  (ok %d, failed with an error %d, unknown %d)"
            % (len(ops), outcomes["ok"], outcomes["failed"], outcomes["unknown"]),
            "  by kind: " + ", ".join("%s %d" % kv for kv in sorted(kinds.items())),
            "sessions: %d  (%s)" % (len(self.rec.sessions), ", ".join("%s %d" % kv for kv in sorted(ends.items()))),
            "faults: %d  (%s)" % (len(self.nemesis.faults), ", ".join("%s %d" % kv for kv in sorted(faults.items()))),
            self.ballast_line(),
            "ephemerals of abandoned sessions: %d sessions watched, gone (expired or deleted by another client) "
            "after median %s s, max %s s; latest still seen %s s after the abandonment (allowed: %.0f s + faults)"
            % (len(gone), _seconds(gone, len(gone) // 2), _seconds(gone, -1), _seconds(seen, -1),
               self.timeout_s + checks.EXPIRY_SLACK_S),
            "replicas: %s" % self.converged,
            "linearizability: " + (self.linearize_output.strip().splitlines() or ["?"])[-1],
        ]
        lines += ["note: " + n for n in self.notes]
        for check_name in ("linearizability", "acknowledged writes", "session order", "replicas", "ephemerals",
                           "availability", "client"):
            found = self.violations.get(check_name, [])
            lines.append("check %-20s %s" % (check_name + ":", "ok" if not found else "%d VIOLATIONS" % len(found)))
            lines += ["    " + v for v in found[:20]]
            if len(found) > 20:
                lines.append("    ... %d more" % (len(found) - 20))
        if self.violations.get("linearizability"):
            lines += ["", self.linearize_output[-6000:]]
        svg = os.path.join(self.workdir, "timeline.svg")
        with open(svg, "w") as f:
            f.write(timeline.render(ops, [f.as_dict() for f in self.nemesis.faults], self.clock.seconds(),
                                    "keel nemesis: seed %d, %d nodes" % (self.seed, self.nodes)))
        with open(os.path.join(self.workdir, "faults.json"), "w") as f:
            json.dump([f.as_dict() for f in self.nemesis.faults], f, indent=1)
        lines.append("work dir: %s (history.jsonl, faults.json, timeline.svg, cluster/)" % self.workdir)
        lines.append("nemesis: %d operations, %d faults, %d violations" % (len(ops), len(self.nemesis.faults),
                                                                           violations))
        text = "\n".join(lines)
        with open(os.path.join(self.workdir, "summary.txt"), "w") as f:
            f.write(text + "\n")
        self.out(text, flush=True)
        return violations

    def ballast_line(self):
        if self.ballast is None:
            return "ballast: none"
        b = self.ballast
        return ("ballast: %d MiB of large writes (%d KiB/s asked, %d KiB values, %d paths), %d acknowledged, "
                "%d sessions broken; Raft log files per member %s"
                % (b.written_bytes >> 20, self.ballast_kib_per_s, BALLAST_VALUE_BYTES >> 10, len(b.acknowledged),
                   b.written_bytes // BALLAST_VALUE_BYTES, b.failures, self.log_files()))

    def log_files(self):
        counts = []
        for node in self.cluster.nodes:
            try:
                counts.append(sum(1 for n in os.listdir(os.path.join(node.data_dir, "raft"))
                                  if n.endswith((".raftlog", ".rewrite"))))
            except OSError:
                counts.append(0)
        return counts

    def execute(self):
        self.start()
        try:
            self.wait()
            self.heal()
            self.settle_sessions()
            final = self.final_reads()
            if self.plant == "lost-write":
                self.plant_lost_write(final)
            self.check(final)
        finally:
            self.stop_clients.set()
            self.stop_ballast.set()
            self.stop_nemesis.set()
            self.monitor.halt.set()
            try:
                self.nemesis.heal()
            except Exception:  # noqa: BLE001 - stopping anyway
                pass
            self.cluster.stop()
        return self.report()


def _seconds(values, i):
    return "%.1f" % values[i] if values else "-"


def run(seconds, nodes=3, seed=None, plant=None, out=print, ballast_kib_per_s=None):
    """One run; returns (violations, the Run). ballast_kib_per_s: None
    takes NEMESIS_BALLAST_KIB_PER_S (default DEFAULT_BALLAST_KIB_PER_S)."""
    seed = random.randrange(1 << 31) if seed is None else seed
    if ballast_kib_per_s is None:
        ballast_kib_per_s = int(os.environ.get("NEMESIS_BALLAST_KIB_PER_S", str(DEFAULT_BALLAST_KIB_PER_S)))
    r = Run(seconds, nodes, seed, plant, out, ballast_kib_per_s)
    return r.execute(), r


def main():
    for path, what in ((KEEL_BIN, "cargo build --release -p keel"),
                       (LINEARIZE_BIN, "cargo build --release -p keel-linearize")):
        if not os.access(path, os.X_OK):
            print("nemesis: %s is missing: %s" % (path, what), file=sys.stderr)
            return 2
    seconds = float(os.environ.get("NEMESIS_SECONDS", "180"))
    nodes = int(os.environ.get("NEMESIS_NODES", "3"))
    seed = os.environ.get("NEMESIS_SEED")
    violations, _ = run(seconds, nodes, int(seed) if seed else None, os.environ.get("NEMESIS_PLANT") or None,
                        out=lambda *a, **kw: print(*a, **kw))
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
