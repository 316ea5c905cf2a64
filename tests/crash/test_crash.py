"""kill -9 durability test (Keel only by default).

Several kazoo writer threads create/set znodes and remember every
acknowledged write; the server is killed with SIGKILL at seeded random
moments and restarted on the same data dir. After every restart every
acknowledged write must be there (value at least as new as the last ack,
version at least the acked version, acked sequential nodes present), and at
the end the ephemerals of the sessions that died with the server must be gone
once their session timeout has passed.

KEEL_CRASH_KILLS (default 10) sets the number of kills, KEEL_CRASH_SEED the
seed. KEEL_COMPAT_AGAINST=zookeeper runs the same test against ZooKeeper
(validates the test itself).
"""

import os
import random
import threading
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.retry import KazooRetry

from conftest import candidate_kind, report_summary, require_keel
from harness import make_server

KILLS = int(os.environ.get("KEEL_CRASH_KILLS", "10"))
SEED = int(os.environ.get("KEEL_CRASH_SEED", "20240611"))
THREADS = 4
KEYS_PER_THREAD = 25
SESSION_TIMEOUT = 2.0  # seconds, for the ephemeral owners


def new_client(server, timeout=10.0):
    c = KazooClient(hosts=server.address, timeout=timeout,
                    connection_retry=KazooRetry(max_tries=2, delay=0.05, max_delay=0.2),
                    command_retry=None)
    c.start(timeout=20)
    return c


def stop_client(c):
    t = threading.Thread(target=lambda: (c.stop(), c.close()), daemon=True)
    t.start()
    t.join(10)


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.acked = {}       # path -> (counter, version)
        self.attempted = {}   # path -> highest counter ever sent
        self.seq_acked = set()
        self.ephemerals = []  # (path, round)
        self.ack_count = 0
        self.errors = []      # violations seen by writers (e.g. duplicate sequential name)


def writer(tid, server, state, stop, rng, counter):
    try:
        c = new_client(server)
    except Exception:
        return
    known = set()
    try:
        while not stop.is_set():
            r = rng.random()
            try:
                if r < 0.08:
                    p = c.create("/crash/seq/s-", b"%d" % tid, sequence=True)
                    with state.lock:
                        if p in state.seq_acked:
                            state.errors.append("sequential create returned an existing name %s" % p)
                        state.seq_acked.add(p)
                        state.ack_count += 1
                    continue
                key = "/crash/t%d/k%d" % (tid, rng.randrange(KEYS_PER_THREAD))
                counter[0] += 1
                n = counter[0]
                val = b"%d:%d" % (tid, n)
                with state.lock:
                    state.attempted[key] = n
                version = 0
                if key in known:
                    st = c.set(key, val)
                    version = st.version
                else:
                    try:
                        c.create(key, val)
                    except NodeExistsError:
                        st = c.set(key, val)
                        version = st.version
                    known.add(key)
                with state.lock:
                    state.acked[key] = (n, version)
                    state.ack_count += 1
            except KazooException:
                if stop.is_set():
                    break
                time.sleep(0.02)
            except Exception:
                if stop.is_set():
                    break
                time.sleep(0.02)
    finally:
        stop_client(c)


def verify(server, state, label):
    c = new_client(server)
    problems = []
    try:
        with state.lock:
            acked = dict(state.acked)
            attempted = dict(state.attempted)
            seq = set(state.seq_acked)
        for key, (n, version) in sorted(acked.items()):
            try:
                data, st = c.get(key)
            except NoNodeError:
                problems.append("%s: acked write #%d lost: node missing" % (key, n))
                continue
            try:
                got = int(data.split(b":")[1])
            except (IndexError, ValueError):
                problems.append("%s: unreadable value %r" % (key, data))
                continue
            if got < n:
                problems.append("%s: value #%d older than acked #%d" % (key, got, n))
            if got > attempted.get(key, n):
                problems.append("%s: value #%d was never written (max attempted #%d)" % (key, got, attempted.get(key)))
            if st.version < version:
                problems.append("%s: version %d older than acked version %d" % (key, st.version, version))
        for p in sorted(seq):
            if c.exists(p) is None:
                problems.append("%s: acked sequential node lost" % p)
    finally:
        stop_client(c)
    return ["[%s] %s" % (label, p) for p in problems]


@pytest.mark.timeout(900)
def test_kill9_durability():
    kind = candidate_kind()
    if kind == "keel":
        require_keel()
    rng = random.Random(SEED)
    state = State()
    server = make_server(kind, name=kind + "-crash")
    problems = []
    kills = 0
    try:
        server.start()
        setup = new_client(server)
        for t in range(THREADS):
            setup.ensure_path("/crash/t%d" % t)
        setup.ensure_path("/crash/seq")
        setup.ensure_path("/crash/eph")
        stop_client(setup)
        counters = [[0] for _ in range(THREADS)]
        for rnd in range(KILLS):
            # a session that will die with the server, owning ephemerals
            owner = KazooClient(hosts=server.address, timeout=SESSION_TIMEOUT,
                                connection_retry=KazooRetry(max_tries=1, delay=0.05), command_retry=None)
            owner.start(timeout=20)
            for i in range(3):
                p = owner.create("/crash/eph/r%d-%d" % (rnd, i), b"", ephemeral=True)
                state.ephemerals.append((p, rnd))
            stop = threading.Event()
            threads = [threading.Thread(target=writer, daemon=True,
                                        args=(t, server, state, stop, random.Random(rng.random()), counters[t]))
                       for t in range(THREADS)]
            for th in threads:
                th.start()
            time.sleep(rng.uniform(0.3, 2.0))
            server.kill()  # SIGKILL, whole process group
            kills += 1
            stop.set()
            for th in threads:
                th.join(30)
            stop_client(owner)
            server.start()
            problems += verify(server, state, "after kill %d" % kills)
            if problems:
                break
        # ephemerals of dead sessions must go once the session timeout passed
        c = new_client(server)
        deadline = time.monotonic() + max(20.0, SESSION_TIMEOUT * 8)
        left = [p for p, _ in state.ephemerals]
        while left and time.monotonic() < deadline:
            left = [p for p in left if c.exists(p) is not None]
            time.sleep(0.2)
        stop_client(c)
        if left:
            problems.append("%d ephemeral(s) of dead sessions still present %.0fs after restart: %s"
                            % (len(left), max(20.0, SESSION_TIMEOUT * 8), left[:10]))
        problems += state.errors
        # a clean restart (SIGTERM) must also keep everything
        server.stop()
        server.start()
        problems += verify(server, state, "after clean restart")
    except Exception:
        print(server.log_tail(100))
        raise
    finally:
        server.kill()
    line = ("crash test (%s, seed %d): %d kills, %d acknowledged writes (%d keys, %d sequential nodes), "
            "%d ephemerals checked, %d violations" % (kind, SEED, kills, state.ack_count, len(state.acked),
                                                     len(state.seq_acked), len(state.ephemerals), len(problems)))
    print("\n" + line)
    report_summary(line)
    if problems:
        print(server.log_tail(80))
    assert not problems, "durability violations:\n" + "\n".join(problems[:50])
    server.cleanup()
