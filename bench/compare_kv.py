#!/usr/bin/env python3
"""Keel KV against redis-server 7.0 under redis-benchmark, in one run.

Four systems, all started fresh on loopback (free ports, data under
bench/work/) before the first run and stopped after the last; each cell
runs the four in turn, so a cell's ratios come from seconds apart on a
machine whose speed drifts:
- redis-always:   redis-server, appendonly yes, appendfsync always (every
                  write fsynced before its reply, one unreplicated node);
- redis-everysec: redis-server, appendonly yes, appendfsync everysec;
- keel-1:         one Keel node serving the Redis protocol (every write in
                  the Raft log, fsynced before its reply);
- keel-3:         a 3-node Keel cluster, the benchmark on the leader (every
                  write fsynced on a quorum before its reply; reads served
                  under the leader's read lease, or after a ReadIndex
                  barrier).
redis-benchmark (Debian redis-tools) runs SET, GET, INCR and MSET (10 keys)
with 50 clients, without pipelining (COMPARE_KV_REQUESTS, 200,000 requests)
and with -P 16 (COMPARE_KV_PIPELINED_REQUESTS, 800,000: at 200,000 a
pipelined GET run lasted a fraction of a second), against each system in
turn. It prints one table: requests per second and p50 latency per system,
then the ratios keel-1 / redis-always, keel-3 / redis-always and
keel-3 / redis-everysec; the rows go to bench/work/compare-kv.csv.

Usage: python3 bench/compare_kv.py [--requests N] [--pipelined-requests M] [--clients C] [--keyspace R]
       (COMPARE_KV_REQUESTS, COMPARE_KV_CLIENTS, COMPARE_KV_KEYSPACE too;
       --keyspace 0 uses redis-benchmark's one fixed key per test;
       COMPARE_KV_SHARDS=N runs the Keel nodes with kv_shards = N instead
       of their default, one shard per core)
Python 3 standard library only. Run it on a quiet machine.
"""

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "tests"))

from harness.cluster import KeelCluster  # noqa: E402
from harness.redis import (  # noqa: E402
    REDIS_BENCHMARK, KeelKvServer, RedisServer, redis_available, wait_kv,
)
from harness.servers import free_port, keel_available, KEEL_BIN  # noqa: E402

WORK = os.path.join(REPO, "bench", "work")
TESTS = ("set", "get", "incr", "mset")
PIPELINES = (1, 16)
SYSTEMS = ("redis-always", "redis-everysec", "keel-1", "keel-3")
RATIOS = (("keel-1", "redis-always"), ("keel-3", "redis-always"), ("keel-3", "redis-everysec"))


def keel_settings():
    """Settings every Keel node of the run gets on top of the server's
    defaults (COMPARE_KV_SHARDS)."""
    shards = os.environ.get("COMPARE_KV_SHARDS", "")
    if not shards:
        return {}
    if not shards.isdigit() or int(shards) < 1:
        sys.exit("COMPARE_KV_SHARDS must be a number of shards (1 or more), not %r" % shards)
    return {"kv_shards": int(shards)}


KEEL_SETTINGS = keel_settings()


def start_system(name, workdir):
    """Starts `name`; returns (its port for the benchmark, a stop function)."""
    if name.startswith("redis"):
        fsync = "always" if name == "redis-always" else "everysec"
        server = RedisServer(name=name, workdir=os.path.join(workdir, name),
                             settings={"redis_args": ["--appendonly", "yes", "--appendfsync", fsync]})
        server.start()
        return server.port, server.stop
    if name == "keel-1":
        server = KeelKvServer(name=name, workdir=os.path.join(workdir, name), test_defaults=False,
                              settings=dict(KEEL_SETTINGS))
        server.start()
        wait_kv(server.resp_port)
        return server.resp_port, server.stop
    ports = [free_port() for _ in range(3)]
    cluster = KeelCluster(3, name=name, workdir=os.path.join(workdir, name), test_defaults=False,
                          node_settings=lambda member: dict(KEEL_SETTINGS, resp_port=ports[member - 1]))
    cluster.start()
    for port in ports:
        wait_kv(port)
    leader = cluster.leader()
    if name == "keel-3-follower":  # probes only: the benchmark on a follower
        follower = next(n for n in cluster.nodes if n is not leader)
        return int(follower.settings["resp_port"]), cluster.stop
    return int(leader.settings["resp_port"]), cluster.stop


def benchmark(port, test, pipeline, requests, clients, keyspace):
    """One redis-benchmark run: (requests per second, p50 ms)."""
    command = [REDIS_BENCHMARK, "-h", "127.0.0.1", "-p", str(port), "-t", test,
               "-n", str(requests), "-c", str(clients), "-P", str(pipeline), "--csv"]
    if keyspace:
        command += ["-r", str(keyspace)]
    out = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError("redis-benchmark failed: %s %s" % (out.stdout[-500:], out.stderr[-500:]))
    rows = list(csv.reader(line for line in out.stdout.splitlines() if line.strip()))
    header = rows[0]
    for row in rows[1:]:
        values = dict(zip(header, row))
        return float(values["rps"]), float(values["p50_latency_ms"])
    raise RuntimeError("redis-benchmark printed no result: %r" % out.stdout[-500:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=int(os.environ.get("COMPARE_KV_REQUESTS", "200000")))
    parser.add_argument("--pipelined-requests", type=int,
                        default=int(os.environ.get("COMPARE_KV_PIPELINED_REQUESTS", "800000")))
    parser.add_argument("--clients", type=int, default=int(os.environ.get("COMPARE_KV_CLIENTS", "50")))
    parser.add_argument("--keyspace", type=int, default=int(os.environ.get("COMPARE_KV_KEYSPACE", "100000")))
    args = parser.parse_args()
    if not redis_available() or not os.access(REDIS_BENCHMARK, os.X_OK):
        sys.exit("redis-server and redis-benchmark are needed: make test-deps")
    if not keel_available():
        sys.exit("Keel binary %s missing: make build" % KEEL_BIN)
    os.makedirs(WORK, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="compare-kv-", dir=WORK)
    results = {}
    ports, stops = {}, []
    try:
        for system in SYSTEMS:
            ports[system], stop = start_system(system, workdir)
            stops.append(stop)
        for test in TESTS:
            for pipeline in PIPELINES:
                requests = args.requests if pipeline == 1 else args.pipelined_requests
                for system in SYSTEMS:
                    rps, p50 = benchmark(ports[system], test, pipeline, requests, args.clients, args.keyspace)
                    results[(system, test, pipeline)] = (rps, p50)
                    print("%-15s %-5s -P %-2d %12.0f req/s  p50 %7.3f ms" % (system, test, pipeline, rps, p50),
                          flush=True)
    finally:
        for stop in stops:
            stop()
    print()
    header = "%-6s %-4s" % ("test", "-P") + "".join("%16s" % s for s in SYSTEMS) + "".join(
        "%18s" % ("%s/%s" % (a.replace("redis-", "r-"), b.replace("redis-", "r-"))) for a, b in RATIOS)
    print("requests per second, %d clients, %d requests per run (%d with -P 16), keyspace %s" % (
        args.clients, args.requests, args.pipelined_requests, args.keyspace or "one key"))
    print(header)
    rows = []
    for test in TESTS:
        for pipeline in PIPELINES:
            line = "%-6s %-4d" % (test.upper(), pipeline)
            row = {"test": test, "pipeline": pipeline}
            for system in SYSTEMS:
                rps, p50 = results[(system, test, pipeline)]
                line += "%16.0f" % rps
                row[system + "_rps"] = rps
                row[system + "_p50_ms"] = p50
            for a, b in RATIOS:
                ratio = results[(a, test, pipeline)][0] / max(results[(b, test, pipeline)][0], 1e-9)
                line += "%18.2f" % ratio
                row["%s/%s" % (a, b)] = round(ratio, 3)
            print(line)
            rows.append(row)
    path = os.path.join(WORK, "compare-kv.csv")
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print("\nrows written to %s" % path)
    subprocess.run(["rm", "-rf", workdir])


if __name__ == "__main__":
    main()
