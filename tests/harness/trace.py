"""Traces of scenario results, their normalisation and comparison.

A trace is an ordered list of (label, value) entries. Values are JSON-able
structures built by `jsonable()`. Normalisation replaces, per trace:
  * zxids (keys czxid/mzxid/pzxid/zxid/lastZxid...) by Z1, Z2, ... in order of
    first appearance (0 and -1 are kept as they are meaningful);
  * times (ctime/mtime) by "<time>" when plausible (0 is kept; an implausible
    value becomes "<bad-time:VALUE>" so it still shows as a mismatch);
  * session ids (ephemeralOwner/sessionId/session/owner) of sessions registered
    with the trace by "<session:NAME>"; unknown non-zero ids are kept as they
    are (TTL and container nodes encode their type in ephemeralOwner).
Sequential suffixes, versions, data, error codes etc. are kept verbatim.
"""

import json
import time

try:  # kazoo is optional for the Java/C/zkCli traces
    from kazoo.protocol.states import ZnodeStat, WatchedEvent
    from kazoo.security import ACL, Id
    from kazoo.exceptions import KazooException
except ImportError:  # pragma: no cover
    ZnodeStat = WatchedEvent = ACL = Id = KazooException = ()

ZXID_KEYS = {"czxid", "mzxid", "pzxid", "zxid", "lastZxid", "last_zxid"}
TIME_KEYS = {"ctime", "mtime"}
SESSION_KEYS = {"ephemeralOwner", "sessionId", "session", "owner", "session_id"}

STAT_ORDER = ("czxid", "mzxid", "pzxid", "ctime", "mtime", "version", "cversion", "aversion",
              "ephemeralOwner", "dataLength", "numChildren")


def stat_dict(st):
    return {k: getattr(st, k) for k in STAT_ORDER}


def exc_dict(e):
    d = {"err": type(e).__name__}
    code = getattr(e, "code", None)
    if isinstance(code, int):
        d["code"] = code
    if code is None:
        # client-side exception (ValueError, TypeError, ...): message is deterministic
        d["msg"] = str(e)
    return d


def jsonable(x):
    if ZnodeStat and isinstance(x, ZnodeStat):
        return {"stat": stat_dict(x)}
    if ACL and isinstance(x, ACL):
        return {"acl": [x.perms, x.id.scheme, x.id.id]}
    if WatchedEvent and isinstance(x, WatchedEvent):
        return {"event": x.type, "state": x.state, "path": x.path}
    if isinstance(x, BaseException):
        return exc_dict(x)
    if isinstance(x, (bytes, bytearray)):
        try:
            return {"bytes": bytes(x).decode("utf-8")}
        except UnicodeDecodeError:
            return {"hex": bytes(x).hex()}
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    return {"repr": repr(x)}


class Trace:
    def __init__(self, name):
        self.name = name
        self.entries = []
        self.elapsed = []  # seconds since start, per entry (diagnostics only)
        self.sessions = {}  # session id -> name
        self.t0 = time.time()

    def register_session(self, name, session_id):
        if session_id:
            self.sessions[session_id] = name

    def _append(self, label, value):
        self.entries.append([label, value])
        self.elapsed.append(round(time.time() - self.t0, 3))

    def record(self, label, value):
        self._append(label, jsonable(value))

    def call(self, label, fn, *args, **kwargs):
        """Call fn, record {"ok": result} or {"error": exception}; return the result
        (None on exception)."""
        try:
            r = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - every error is a result here
            self._append(label, {"error": exc_dict(e)})
            return None
        self._append(label, {"ok": jsonable(r)})
        return r

    def add_printed(self, stdout):
        """The steps a scenario program printed on stdout, one JSON object
        per line (tests/compat/java's and tests/compat/go's): {"session":
        name, "id": session id} registers a session, {"step": label,
        "result": value} is an entry; other lines (a client library's own
        logging) are passed over."""
        for line in stdout.splitlines():
            line = line.strip()
            if not line.startswith("{"):
                continue
            obj = json.loads(line)
            if "session" in obj:
                self.register_session(obj["session"], obj["id"])
            else:
                self.add_entry(obj["step"], obj["result"])

    def add_entry(self, label, value):
        """An entry recorded by another process (no time of its own here)."""
        self.entries.append([label, value])
        self.elapsed.append(0)

    def labels(self):
        return [e[0] for e in self.entries]

    def normalised(self):
        return normalise(self.entries, self.sessions, self.t0)

    def dump(self, path):
        with open(path, "w") as f:
            json.dump({"name": self.name,
                       "raw": [[t] + e for t, e in zip(self.elapsed, self.entries)],
                       "sessions": {str(k): v for k, v in self.sessions.items()},
                       "normalised": self.normalised()}, f, indent=1)


def normalise(entries, sessions=None, t0=None, now=None):
    sessions = dict(sessions or {})
    zxids = {}
    t0 = t0 if t0 is not None else time.time() - 3600
    now = now if now is not None else time.time() + 3600

    def zx(v):
        if not isinstance(v, int) or v in (0, -1):
            return v
        if v not in zxids:
            zxids[v] = "Z%d" % (len(zxids) + 1)
        return zxids[v]

    def tm(v):
        if not isinstance(v, int) or v == 0:
            return v
        if t0 - 600 <= v / 1000.0 <= now + 600:
            return "<time>"
        return "<bad-time:%d>" % v

    def sess(v):
        if isinstance(v, int) and v in sessions:
            return "<session:%s>" % sessions[v]
        if isinstance(v, int) and v != 0:
            return "0x%x" % (v & 0xFFFFFFFFFFFFFFFF)
        return v

    def walk(x):
        if isinstance(x, dict):
            out = {}
            for k, v in x.items():
                if k in ZXID_KEYS:
                    out[k] = zx(v)
                elif k in TIME_KEYS:
                    out[k] = tm(v)
                elif k in SESSION_KEYS:
                    out[k] = sess(v)
                else:
                    out[k] = walk(v)
            return out
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    return [[label, walk(value)] for label, value in entries]


def _fmt(v):
    return json.dumps(v, sort_keys=True)


def _mask_zxids(v):
    if isinstance(v, dict):
        return {k: ("Z*" if k in ZXID_KEYS and isinstance(x, str) and x.startswith("Z") else _mask_zxids(x))
                for k, x in v.items()}
    if isinstance(v, list):
        return [_mask_zxids(x) for x in v]
    return v


def diff(expected, actual, expected_name="zookeeper", actual_name="keel", limit=60):
    """Human-readable list of differences between two normalised traces
    (lists of [label, value]). Empty list means equal.

    Steps that differ only in zxid numbering after an earlier zxid difference
    are summarised in one line (one extra or missing zxid renumbers every
    later one), but they still count as differences."""
    out = []
    zxid_only = []
    seen_zxid_diff = False
    n = max(len(expected), len(actual))
    for i in range(n):
        e = expected[i] if i < len(expected) else None
        a = actual[i] if i < len(actual) else None
        if e == a:
            continue
        if e is None:
            out.append("#%d only in %s: %s = %s" % (i, actual_name, a[0], _fmt(a[1])))
        elif a is None:
            out.append("#%d only in %s: %s = %s" % (i, expected_name, e[0], _fmt(e[1])))
        elif e[0] != a[0]:
            out.append("#%d step label differs: %s=%r, %s=%r (traces diverged)"
                       % (i, expected_name, e[0], actual_name, a[0]))
            break
        else:
            zonly = _mask_zxids(e[1]) == _mask_zxids(a[1])
            if zonly and seen_zxid_diff:
                zxid_only.append("#%d %s" % (i, e[0]))
                continue
            seen_zxid_diff = (seen_zxid_diff or zonly or _mask_zxids(e[1]) != e[1]
                              or _mask_zxids(a[1]) != a[1])
            out.append("#%d %s%s\n    %s: %s\n    %s: %s"
                       % (i, e[0], " (zxid numbering only)" if zonly else "",
                          expected_name, _fmt(e[1]), actual_name, _fmt(a[1])))
        if len(out) >= limit:
            out.append("... (more differences not shown)")
            break
    if zxid_only:
        out.append("%d later step(s) differ only in zxid numbering (most likely a consequence of an earlier "
                   "extra/missing zxid): %s" % (len(zxid_only), ", ".join(zxid_only[:40])
                                                + (" ..." if len(zxid_only) > 40 else "")))
    return out
