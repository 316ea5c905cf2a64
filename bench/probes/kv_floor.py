#!/usr/bin/env python3
"""Keel KV's SET beside the floor of a replicated SET on this machine
(issue 17's durable-write target; BENCHMARKS.md, "The floor of a
replicated SET").

The floor (`crates/bench/examples/kv_replication_floor.rs`) is one thread
per node serving RESP: each turn of the leader's event loop makes one round
of the SETs read, sends it to the followers, appends it to its log (O_DIRECT
blocks and an fdatasync, as Keel's log is written), waits for a follower's
ack, applies and answers. Six systems start before the first run:
redis-server with `appendfsync always`, Keel on 1 and 3 nodes, the floor on
1 and 3 nodes; each round then runs redis-benchmark SET (50 clients) with
-P 1 and -P 16 against each in turn, and the medians are printed as ratios
to redis-server's.

    python3 bench/probes/kv_floor.py
    ROUNDS=5 N=200000 NP=800000 python3 bench/probes/kv_floor.py
"""
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(HERE, ".."))
import compare_kv  # noqa: E402
import kv_hops  # noqa: E402  (bench/probes, beside this script)
from harness.redis import wait_kv  # noqa: E402
from harness.servers import free_port  # noqa: E402

FLOOR_BIN = os.path.join(REPO, "target", "release", "examples", "kv_replication_floor")
SYSTEMS = ("redis-always", "keel-1", "keel-3", "floor-1", "floor-3")
PIPELINES = (1, 16)
CLIENTS = 50
KEYSPACE = 100000


def start_floor(nodes, root):
    directory = os.path.join(root, "floor-%d" % nodes)
    port = free_port()
    process = subprocess.Popen([FLOOR_BIN, str(nodes), directory, str(port)], stdout=subprocess.DEVNULL,
                               start_new_session=True)
    wait_kv(port)

    def stop():
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        shutil.rmtree(directory, ignore_errors=True)
    return port, stop


def main():
    rounds = int(os.environ.get("ROUNDS", "3"))
    requests = {1: int(os.environ.get("N", "200000")), 16: int(os.environ.get("NP", "800000"))}
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "keel-bench", "--example", "kv_replication_floor"],
                   cwd=REPO, check=True)
    root = tempfile.mkdtemp(prefix="kv-floor-")
    ports, stops, results, cpu = {}, [], {}, {}
    try:
        for system in SYSTEMS:
            if system.startswith("floor-"):
                ports[system], stop = start_floor(int(system[-1]), root)
            else:
                ports[system], stop = compare_kv.start_system(system, root)
            stops.append(stop)
        for number in range(1, rounds + 1):
            for pipeline in PIPELINES:
                for system in SYSTEMS:
                    where = os.path.join(root, system)
                    cpu_before_s = kv_hops.cpu_s(where, ports[system])
                    rps, _ = compare_kv.benchmark(ports[system], "set", pipeline, requests[pipeline], CLIENTS,
                                                  KEYSPACE)
                    cpu_us = (kv_hops.cpu_s(where, ports[system]) - cpu_before_s) * 1e6 / requests[pipeline]
                    results.setdefault((system, pipeline), []).append(rps)
                    cpu.setdefault((system, pipeline), []).append(cpu_us)
                    print("round %d  SET -P %-2d %-13s %10.0f SETs/s  %6.2f us of server CPU per SET"
                          % (number, pipeline, system, rps, cpu_us), flush=True)
    finally:
        for stop in stops:
            stop()
        shutil.rmtree(root, ignore_errors=True)
    print()
    print("SET, %d clients, medians of %d rounds (SETs/s; ratio to redis-always in brackets)" % (CLIENTS, rounds))
    print("%-5s" % "-P" + "".join("%22s" % s for s in SYSTEMS))
    for pipeline in PIPELINES:
        base = statistics.median(results[("redis-always", pipeline)])
        cells = []
        for system in SYSTEMS:
            value = statistics.median(results[(system, pipeline)])
            cells.append("%22s" % ("%.0f (%.2fx)" % (value, value / base)))
        print("%-5d" % pipeline + "".join(cells))
    print("server CPU per SET, us (medians):")
    for pipeline in PIPELINES:
        print("%-5d" % pipeline + "".join("%22.2f" % statistics.median(cpu[(system, pipeline)]) for system in SYSTEMS))
    for pipeline in PIPELINES:
        keel = statistics.median(results[("keel-3", pipeline)])
        floor = statistics.median(results[("floor-3", pipeline)])
        print("-P %d: keel-3 is %.2fx of the 3-node floor" % (pipeline, keel / floor))


if __name__ == "__main__":
    main()
