"""Bad input stays harmless under load: every raw-socket probe of
test_badinput.py runs again and again while `keel bench` saturates the
same Keel node. Each probe must have the outcome it has on an idle server
(test_badinput.py checks that outcome against ZooKeeper's), the bench's
good clients must see no error, and the server must still serve a fresh
client afterwards."""

import os
import threading
import time

from conftest import report_summary, require_keel
from harness import run_bench

from .test_badinput import PROBES, run_probe, serves_fresh_client

BENCH_SECONDS = int(os.environ.get("KEEL_BADINPUT_LOAD_SECONDS", "20"))
BENCH_CLIENTS = 16
# One prober: probes of the same kind share paths (/badinput-parent) and
# would disturb each other, not the server.
PROBE_THREADS = 1


def test_bad_input_under_a_saturating_bench(servers):
    require_keel()
    server = servers("keel", name="keel-badinput-load")
    baseline = {p.__name__: run_probe(p, server) for p in PROBES}
    summary, failures = {}, []
    rounds = [0]

    def bench():
        summary.update(run_bench(server.address, "mix", BENCH_CLIENTS, BENCH_SECONDS))

    def probes(offset):
        deadline = time.monotonic() + BENCH_SECONDS - 2
        while time.monotonic() < deadline:
            for probe in PROBES[offset:] + PROBES[:offset]:
                got = run_probe(probe, server)
                if got != baseline[probe.__name__]:
                    failures.append("%s under load: %r, idle: %r" % (probe.__name__, got, baseline[probe.__name__]))
            rounds[0] += 1

    threads = [threading.Thread(target=bench)] + [
        threading.Thread(target=probes, args=(k * len(PROBES) // PROBE_THREADS,)) for k in range(PROBE_THREADS)]
    [t.start() for t in threads]
    [t.join(BENCH_SECONDS + 240) for t in threads]
    assert summary, "keel bench did not finish"
    assert not failures, "\n".join(failures[:20])
    assert int(summary.get("errors", "0").split()[0]) == 0, summary
    assert serves_fresh_client(server) is True
    report_summary("bad input under load: %d probe rounds (%d probes each) during a %d s bench at %s TPS, "
                   "0 bench errors" % (rounds[0], len(PROBES), BENCH_SECONDS, summary.get("TPS")))
