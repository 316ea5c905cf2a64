"""The checks of a nemesis run, on its recorded history (dicts in the
keel-linearize jsonl format plus `zxid`, `node` and, for getData, `stat`).
Each returns a list of violations (strings); pure functions apart from
`linearizability`, which runs the keel-linearize binary. Python standard
library only.

1. linearizability: keel-linearize on every write and synced read, with
   unknown outcomes (crates/linearize).
2. acknowledged writes: in the final state (read after healing, after a
   sync) the newest acknowledged write of every path is there or was
   replaced by something an unacknowledged write could have done; zxids
   order the writes (a write's reply carries its transaction's zxid, and
   the node's Stat its czxid/mzxid).
3. local reads (ZooKeeper's promise for reads without sync: sequential
   consistency per session): the zxids of a session's replies never go
   back; a value read carries the mzxid of the write that wrote it, and no
   acknowledged write to the path lies between that mzxid and the zxid the
   member had applied when it read.
4. ephemerals: none left at the end; no read (after a sync begun later
   than this) shows an abandoned session's ephemeral later than the
   session timeout + EXPIRY_SLACK_S after the abandonment, counted from
   the end of the last fault overlapping that window (a fault may hold
   expiry back: no quorum, or a new leader that renews every deadline).
(Replica digests are compared by the run itself, harness wait_converged.)
"""

import json
import subprocess
from collections import defaultdict

# Expiry happens on the leader's tick after the deadline; the follower's
# touches reach it every half tick, and the poll of the monitor adds its
# interval. Beyond the session timeout allow this much.
EXPIRY_SLACK_S = 6.0
ERRORS_NO_EFFECT = ("error",)


def data_of(d):
    if "data_hex" in d:
        return bytes.fromhex(d["data_hex"]).decode("latin-1")
    return d.get("data", "")


def is_write(call):
    return call["op"] in ("create", "delete", "setData", "multi", "closeSession")


def acked(op):
    ret = op.get("ret")
    return ret is not None and ret.get("type") != "error"


# ---------------------------------------------------------------- 1
def write_history(ops, path):
    with open(path, "w") as f:
        for op in ops:
            f.write(json.dumps(op, sort_keys=True) + "\n")


def linearizability(history_path, binary, timeout_s=1800):
    """(violations, output): runs keel-linearize on the file."""
    try:
        done = subprocess.run([binary, history_path], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return ["keel-linearize did not finish within %d s" % timeout_s], ""
    out = done.stdout + done.stderr
    if done.returncode == 0:
        return [], out
    if done.returncode == 1:
        return ["history is not linearizable (keel-linearize report above)"], out
    if done.returncode == 2:
        return ["linearizability undecided: keel-linearize's search budget ran out"], out
    return ["keel-linearize failed (exit %d)" % done.returncode], out


# ---------------------------------------------------------------- effects
def effects(op):
    """(path, kind, data, ephemeral) of every change an acknowledged write made."""
    call, ret = op["call"], op["ret"]
    if call["op"] == "multi":
        pairs = zip(call["ops"], ret["results"])
    else:
        pairs = [(call, ret)]
    out = []
    for sub, r in pairs:
        if sub["op"] == "create":
            out.append((r["path"], "create", data_of(sub), bool(sub.get("ephemeral"))))
        elif sub["op"] == "setData":
            out.append((sub["path"], "set", data_of(sub), False))
        elif sub["op"] == "delete":
            out.append((sub["path"], "delete", None, False))
    return out


class Writes:
    """The writes of a history, indexed by path."""

    def __init__(self, ops):
        self.acked = defaultdict(list)            # path -> [(zxid, kind, data, ephemeral)]
        self.unknown_data = defaultdict(set)      # path -> data an unacked create/set may have written
        self.unknown_seq_data = defaultdict(set)  # parent -> data of unacked sequential creates
        self.unknown_deletes = set()
        self.unknown_ephemeral = set()            # paths (or parents of sequentials) unacked ephemeral creates name
        self.data = defaultdict(set)              # path -> every data written there (acked or not)
        for op in ops:
            call = op["call"]
            if call["op"] not in ("create", "delete", "setData", "multi"):
                continue
            if acked(op):
                if "zxid" not in op:
                    continue
                for path, kind, data, ephemeral in effects(op):
                    self.acked[path].append((op["zxid"], kind, data, ephemeral))
                    if data is not None:
                        self.data[path].add(data)
            elif op.get("ret") is None:
                self._unknown(call)
        for lst in self.acked.values():
            lst.sort(key=lambda e: e[0])  # stable: a multi's effects keep their order

    def _unknown(self, call):
        for sub in call["ops"] if call["op"] == "multi" else [call]:
            path = sub["path"]
            if sub["op"] == "delete":
                self.unknown_deletes.add(path)
            elif sub["op"] in ("create", "setData"):
                data = data_of(sub)
                if sub.get("sequential"):
                    parent = path.rsplit("/", 1)[0]
                    self.unknown_seq_data[parent].add(data)
                    if sub.get("ephemeral"):
                        self.unknown_ephemeral.add(parent)
                else:
                    self.unknown_data[path].add(data)
                    self.data[path].add(data)
                    if sub.get("ephemeral"):
                        self.unknown_ephemeral.add(path)

    def unacked_could_write(self, path, data):
        parent = path.rsplit("/", 1)[0]
        return data in self.unknown_data.get(path, ()) or data in self.unknown_seq_data.get(parent, ())

    def could_be_written(self, path, data):
        return data in self.data.get(path, ()) or self.unacked_could_write(path, data)


# ---------------------------------------------------------------- 2
def lost_writes(ops, final):
    """`final`: path -> None (no node) or {"data", "version", "czxid",
    "mzxid", "ephemeralOwner"} for every path the final reads covered."""
    w = Writes(ops)
    violations = []
    for path in sorted(set(final) | set(w.acked)):
        if path not in final:
            continue  # not covered by the final reads (cannot happen for the workload's key space)
        node = final[path]
        last = w.acked[path][-1] if w.acked.get(path) else None
        problem = _final_problem(path, node, last, w)
        if problem:
            violations.append("%s: %s" % (path, problem))
    return violations


def _final_problem(path, node, last, w):
    parent = path.rsplit("/", 1)[0]
    if last is None:
        if node is not None and not w.unacked_could_write(path, node["data"]):
            return "holds %r, which no write to it carried" % node["data"]
        return None
    zxid, kind, data, _ = last
    if kind == "delete":
        if node is None:
            return None
        if node["czxid"] > zxid and w.unacked_could_write(path, node["data"]):
            return None
        return ("deleted at zxid 0x%x (acknowledged) but holds %r (czxid 0x%x)"
                % (zxid, node["data"], node["czxid"]))
    if node is None:
        if path in w.unknown_deletes:
            return None
        if _ephemeral_incarnation(path, w, zxid) or path in w.unknown_ephemeral or parent in w.unknown_ephemeral:
            return None  # its session is closed: it had to go
        return "acknowledged %s at zxid 0x%x (%r) is lost: no node" % (kind, zxid, data)
    if node["mzxid"] < zxid:
        return ("acknowledged %s at zxid 0x%x (%r) is lost: the node's mzxid is 0x%x (%r)"
                % (kind, zxid, data, node["mzxid"], node["data"]))
    if node["mzxid"] == zxid and node["data"] != data:
        return "acknowledged %s at zxid 0x%x wrote %r, the node holds %r at that mzxid" % (
            kind, zxid, data, node["data"])
    if node["mzxid"] > zxid and not w.unacked_could_write(path, node["data"]):
        return ("holds %r (mzxid 0x%x) after the newest acknowledged write (0x%x), and no unacknowledged "
                "write carried it" % (node["data"], node["mzxid"], zxid))
    return None


def _ephemeral_incarnation(path, w, zxid):
    """Was the node the write at `zxid` changed created as an ephemeral by an
    acknowledged create (the newest create at or before it)?"""
    creates = [e for e in w.acked.get(path, ()) if e[0] <= zxid and e[1] in ("create", "delete")]
    return bool(creates) and creates[-1][1] == "create" and creates[-1][3]


# ---------------------------------------------------------------- 3
def local_reads(ops):
    """Sequential consistency per session (see the module's doc)."""
    w = Writes(ops)
    violations = []
    by_session = defaultdict(list)
    for op in ops:
        if op.get("zxid", 0) > 0 and op.get("ret") is not None:
            by_session[(op["process"], op["session"])].append(op)
    for (process, session), lst in sorted(by_session.items()):
        lst.sort(key=lambda o: o["invoke"])
        for before, after in zip(lst, lst[1:]):
            if after["zxid"] < before["zxid"]:
                violations.append(
                    "session 0x%x (process %d): reply at zxid 0x%x (%s %s, member %s) after one at 0x%x (%s)"
                    % (session, process, after["zxid"], after["call"]["op"], after["call"].get("path"),
                       after.get("node"), before["zxid"], before["call"]["op"]))
    for op in ops:
        if op["call"]["op"] == "getData" and (op.get("ret") or {}).get("type") == "data" and "stat" in op:
            problem = _read_problem(op, w)
            if problem:
                violations.append("%s read by session 0x%x%s: %s" % (
                    op["call"]["path"], op["session"], " (local)" if op.get("local") else "", problem))
    return violations


def _read_problem(op, w):
    path = op["call"]["path"]
    data, mzxid, at = data_of(op["ret"]), op["stat"]["mzxid"], op.get("zxid", 0)
    if at and mzxid > at:
        return "mzxid 0x%x is after the zxid 0x%x the member read at" % (mzxid, at)
    writes = w.acked.get(path, ())
    by_zxid = [e for e in writes if e[0] == mzxid]
    if by_zxid and by_zxid[-1][2] is not None and by_zxid[-1][2] != data:
        return "read %r at mzxid 0x%x, which wrote %r" % (data, mzxid, by_zxid[-1][2])
    if not by_zxid and not w.could_be_written(path, data):
        return "read %r, which no write to it carried" % data
    if at:
        missed = [e for e in writes if mzxid < e[0] <= at]
        if missed:
            return ("read %r (mzxid 0x%x) at zxid 0x%x, missing the acknowledged %s at 0x%x"
                    % (data, mzxid, at, missed[0][1], missed[0][0]))
    return None


# ---------------------------------------------------------------- 4
def expiry_deadline(abandoned_s, faults, timeout_s, slack_s=EXPIRY_SLACK_S):
    """When an abandoned session's ephemerals must be gone by: the session
    timeout + slack after the abandonment, pushed to the same span after
    the end of any fault that overlaps it."""
    deadline = abandoned_s + timeout_s + slack_s
    changed = True
    while changed:
        changed = False
        for start, end in faults:
            if start <= deadline and end >= abandoned_s and end + timeout_s + slack_s > deadline:
                deadline = end + timeout_s + slack_s
                changed = True
    return deadline


def ephemerals(final, seen, pending, alive, faults, timeout_s):
    """`final` as for lost_writes; `seen`: session -> (abandoned µs, the
    latest µs after which a synced read still showed one of its ephemerals)
    from the monitor; `pending`: SessionInfos whose ephemerals the monitor
    still saw at the end; `alive`: sessions that should have expired and
    resumed; `faults`: [(start s, end s)]."""
    violations = []
    for path, node in sorted(final.items()):
        if node is not None and node.get("ephemeralOwner"):
            violations.append("%s: ephemeral of session 0x%x still there at the end (every session has ended)"
                              % (path, node["ephemeralOwner"]))
    for session, (abandoned_us, seen_us) in sorted(seen.items()):
        deadline = expiry_deadline(abandoned_us / 1e6, faults, timeout_s)
        if seen_us / 1e6 > deadline:
            violations.append("session 0x%x: an ephemeral still there %.1f s after the session was abandoned "
                              "(allowed: %.1f s)" % (session, (seen_us - abandoned_us) / 1e6,
                                                     deadline - abandoned_us / 1e6))
    for info in pending:
        violations.append("session 0x%x (%s at %.1f s): its ephemerals %s were still there at the end"
                          % (info.session_id, info.end, info.end_at / 1e6, sorted(info.ephemerals)))
    for info in alive:
        violations.append("session 0x%x (%s at %.1f s) could still be resumed after the run"
                          % (info.session_id, info.end, info.end_at / 1e6))
    return violations


def latencies(pairs):
    """Sorted (second - first) in s of {key: (first µs, second µs)}."""
    return sorted((b - a) / 1e6 for a, b in pairs.values())
