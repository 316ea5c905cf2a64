"""Differential test: a node restarted after kill -9 does not take sessions
before its data is loaded, and (Keel) never holds a new client's handshake.

ZooKeeper accepts no session before its data is loaded: while loading it
closes a session request ("ZooKeeperServer not running"), so the client moves
on to another server, and the four-letter words answer as a server that is
not running (srvr, stat, mntr...: "This ZooKeeper instance is not currently
serving requests"; isro: "null"; ruok: "imok"; AbstractFourLetterCommand and
its subclasses). Keel used to accept connections while it replayed its log
and leave a new handshake unanswered until the replay ended.

The scenario writes FILL_WRITES setData transactions (Keel: no snapshot, so a
restart replays them all), kills the server (in a cluster: one follower)
with SIGKILL, restarts it and probes it every PROBE_EVERY_S from the moment
it starts: a session handshake (answered, closed, or held for HANG_S), srvr,
and while srvr says not serving isro/ruok/mntr/stat.

Compared with ZooKeeper: once a handshake is served every later one is; no
session is served while srvr says not serving; an old session resumes with
its lastZxidSeen once served; a served node has every write.

Required of Keel only: no handshake held (ZooKeeper 3.8.0 itself holds one
made in the first milliseconds after it binds its port: closing it throws a
NullPointerException while its ZKDatabase is still null, and the socket stays
open, so this cannot be compared), handshakes refused before served (the
replay was long enough to test anything), the not-serving answers above, and
"keel serving" logged only after the replay.
"""

import re
import socket
import threading
import time

from conftest import report_summary
from harness import four_letter_word
from harness import zkproto as P
from harness.trace import Trace

from compat.topology import compare_traces

FILL_WRITES = 150_000
# Small enough that a window of requests (and of their replies) fits in a
# fresh loopback socket's buffer: this client writes a whole batch before it
# reads, so with 2,000 both sides once filled their buffers and waited on
# each other until the session expired (a loaded machine, buffers not yet
# grown by autotuning).
FILL_WINDOW = 500
SETTINGS = {"snapshot_every_entries": 100_000_000}
PROBE_EVERY_S = 0.02
# A refusal or an answer comes in milliseconds; HANG_S means "held".
HANG_S = 1.0
SERVED_PROBES = 5
PROBING_MAX_S = 120.0
SESSION_TIMEOUT_MS = 10_000
NOT_SERVING = b"This ZooKeeper instance is not currently serving requests\n"
LOADING_ANSWERS = {"isro": b"null", "ruok": b"imok", "mntr": NOT_SERVING, "stat": NOT_SERVING}


def fill(port):
    """FILL_WRITES setData on /fill, pipelined FILL_WINDOW deep; returns
    (acknowledged writes, the last zxid seen)."""
    body = P.ustr("/fill") + P.buf(b"x" * 16) + P.i32(-1)
    with P.RawConnection(port, timeout=60) as conn:
        conn.handshake(timeout_ms=SESSION_TIMEOUT_MS)
        conn.create("/fill", b"")
        sent = acknowledged = 0
        last_zxid = 0
        while acknowledged < FILL_WRITES:
            batch = []
            while sent < FILL_WRITES and sent - acknowledged < FILL_WINDOW:
                sent += 1
                batch.append(P.frame(P.i32(sent) + P.i32(P.SET_DATA) + body))
            conn.send_raw(b"".join(batch))
            target = FILL_WRITES if sent == FILL_WRITES else acknowledged + FILL_WINDOW // 2
            while acknowledged < target:
                r = P.Reader(conn.read_frame(timeout=60))
                xid, zxid, err = r.i32(), r.i64(), r.i32()
                assert err == 0 and xid == acknowledged + 1, (xid, err)
                acknowledged += 1
                last_zxid = zxid
        conn.close_session()
    return acknowledged, last_zxid


def probe_handshake(port):
    """'down' (port closed), 'refused' (closed unanswered), 'served' or 'hung';
    and how long it took."""
    started = time.monotonic()
    try:
        conn = P.RawConnection(port, timeout=HANG_S)
    except OSError:
        return "down", time.monotonic() - started
    try:
        conn.send_frame(P.connect_request(timeout_ms=1000))
        conn.read_frame(timeout=HANG_S)
        outcome = "served"
    except (P.Closed, ConnectionError):
        outcome = "refused"
    except socket.timeout:
        outcome = "hung"
    finally:
        conn.close()
    return outcome, time.monotonic() - started


def srvr_state(port):
    try:
        answer = four_letter_word(port, b"srvr", timeout=HANG_S)
    except OSError:
        return "down"
    if answer.startswith(b"Zookeeper version:"):
        return "serving"
    return "not serving" if answer == NOT_SERVING else "other: %r" % answer[:80]


class Prober(threading.Thread):
    """Probes `port` until SERVED_PROBES handshakes were served."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.probes = []  # (handshake outcome, seconds, srvr state)
        self.loading_answers = []  # (word, answer) while srvr said not serving
        self.started = time.monotonic()

    def run(self):
        deadline = self.started + PROBING_MAX_S
        while time.monotonic() < deadline:
            outcome, seconds = probe_handshake(self.port)
            state = srvr_state(self.port)
            self.probes.append((outcome, seconds, state))
            if state == "not serving":
                answers = []
                for word in LOADING_ANSWERS:
                    try:
                        answers.append((word, four_letter_word(self.port, word, timeout=HANG_S)))
                    except OSError:
                        pass
                # Only answers bracketed by two "not serving" srvr count: the
                # node may start serving between the words (a loaded machine
                # widened that window enough to catch mntr's serving answer).
                if srvr_state(self.port) == "not serving":
                    self.loading_answers.extend(answers)
            if sum(1 for p in self.probes if p[0] == "served") >= SERVED_PROBES:
                return
            time.sleep(PROBE_EVERY_S)

    def order(self):
        """The handshake outcomes with repeats and 'down' collapsed."""
        seen = []
        for outcome, _, _ in self.probes:
            if outcome != "down" and (not seen or seen[-1] != outcome):
                seen.append(outcome)
        return seen


def resume(port, session_id, passwd, last_zxid):
    with P.RawConnection(port) as conn:
        try:
            reply = conn.handshake(timeout_ms=SESSION_TIMEOUT_MS, session_id=session_id, passwd=passwd,
                                   last_zxid=last_zxid)
        except (P.Closed, OSError) as e:
            return {"refused": type(e).__name__}
        hdr, r = conn.request(P.GET_DATA, P.path_watch_body("/fill", False))
        r.buf()
        version = r.stat()["version"] if hdr["err"] == 0 else P.error_name(hdr["err"])
        conn.close_session()
        return {"resumed": reply["timeOut"] > 0, "/fill version": version}


def scenario(server, trace):
    """Returns the prober (for the Keel-only checks)."""
    rec = trace.record
    node = server.primary if hasattr(server, "primary") else server
    acknowledged, last_zxid = fill(node.port)
    rec("fill writes acknowledged", acknowledged)
    old = P.RawConnection(node.port)
    old.handshake(timeout_ms=SESSION_TIMEOUT_MS)
    session = (old.session_id, old.passwd)
    old.close()  # the session lives on; it resumes after the restart
    node.kill()
    prober = Prober(node.port)
    prober.start()
    node.start()
    prober.join(PROBING_MAX_S)
    assert not prober.is_alive(), "prober still running after %.0fs" % PROBING_MAX_S
    outcomes = [outcome for outcome, _, _ in prober.probes]
    first_served = outcomes.index("served") if "served" in outcomes else len(outcomes)
    rec("served eventually, and every handshake after the first served one is served",
        first_served < len(outcomes) and all(o == "served" for o in outcomes[first_served:]))
    rec("no session served while srvr said not serving",
        not any(outcome == "served" and state == "not serving" for outcome, _, state in prober.probes))
    rec("old session resumes with its lastZxidSeen once served", resume(node.port, *session, last_zxid))
    return prober


def summary(name, prober):
    first = prober.probes[0]
    served_at = next((i for i, p in enumerate(prober.probes) if p[0] == "served"), None)
    refused = [p[1] for p in prober.probes if p[0] == "refused"]
    served = [p[1] for p in prober.probes if p[0] == "served"]
    wrong = sorted({(word, answer[:60]) for word, answer in prober.loading_answers
                    if LOADING_ANSWERS[word] != answer})
    return ("startup %s: %d probes, order %s, %d refused (slowest %.0f ms), served slowest %.0f ms, "
            "first served at probe %s; first %r; unexpected loading answers %r"
            % (name, len(prober.probes), prober.order(), len(refused), max(refused, default=0) * 1000,
               max(served, default=0) * 1000, served_at, first, wrong))


def run(server, name):
    trace = Trace(name)
    prober = scenario(server, trace)
    report_summary(summary(name, prober))
    return trace, prober


def keel_log_order(log):
    """'keel serving' of the last start comes after every replay progress line."""
    last_start = log.rfind("client port open")
    tail = log[last_start:]
    serving = tail.find("keel serving")
    return last_start >= 0 and serving > tail.rfind("replaying the log") and serving > tail.find("caught up")


def test_restarted_node_refuses_sessions_until_loaded_as_zookeeper(servers, candidate, keel_topology, zk_reference):
    ref, zk = zk_reference("startup", lambda zk: run(zk, "zookeeper")[0], name="zk-startup")
    other = servers(candidate, topology=keel_topology, settings=SETTINGS,
                    name="%s-startup-%s" % (candidate, keel_topology))
    got, prober = run(other, "%s %s" % (candidate, keel_topology))
    p1, p2 = zk.workdir + "-trace.json", other.workdir + "-trace.json"
    ref.dump(p1)
    got.dump(p2)
    differences = compare_traces("startup", candidate, keel_topology, ref.normalised(), got.normalised())
    assert not differences, ("%d step(s) of the startup scenario differ (%s %s; traces %s, %s):\n%s"
                             % (len(differences), candidate, keel_topology, p1, p2, "\n".join(differences)))
    if candidate == "keel":
        assert "hung" not in prober.order(), "a handshake was held %.0f s: %s" % (HANG_S, summary(keel_topology, prober))
        assert re.fullmatch(r"refused,served", ",".join(prober.order())), summary(keel_topology, prober)
        wrong = [(word, answer) for word, answer in prober.loading_answers if LOADING_ANSWERS[word] != answer]
        assert not wrong, "four-letter words while loading differ from ZooKeeper's: %r" % wrong[:5]
        assert "refused" in prober.order(), (
            "no handshake was refused: the replay of %d writes was too short to test anything (%s)"
            % (FILL_WRITES, summary(keel_topology, prober)))
        node = other.primary if hasattr(other, "primary") else other
        assert keel_log_order(node.log_text()), "'keel serving' logged before the replay ended:\n" + node.log_tail(40)
