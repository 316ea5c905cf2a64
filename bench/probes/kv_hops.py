#!/usr/bin/env python3
"""Where a Keel KV read goes (BENCHMARKS.md, "Keel KV GET: the cost is the
hand-off"): starts one system of `make compare-kv` (SYSTEM: keel-1, keel-3,
keel-3-follower (the benchmark on a follower),
redis-always, redis-everysec), runs redis-benchmark against it (T: get,
set, ...; N requests, C clients (50), 100,000 keys, P requests per pipeline) and prints its result and
the context switches per request of each server thread (from
/proc/PID/task/TID/status) and the servers' CPU time per request (from
/proc/PID/stat: steadier than throughput on a noisy machine). With PERF=FILE, `perf record -a` runs for 5 s
during the load and writes FILE (with call graphs when PERF_CALLGRAPH=1).
FILL=1 sets the keyspace's keys first (redis-benchmark SET -P 16,
800,000 requests), so GETs find values: on an empty keyspace every GET
answers nil and skips the value's cache misses. KEEL_BIN picks the keel
binary.

    SYSTEM=keel-1 T=get python3 bench/probes/kv_hops.py
"""
import glob
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..")); sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))
import compare_kv  # noqa: E402


def pids(root, port):
    """The servers' processes: their command lines name root, except
    redis-server's, which it rewrites to "redis-server 127.0.0.1:PORT"."""
    found = set()
    for pattern in (root, "redis-server 127.0.0.1:%d" % port):
        found.update(subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split())
    return sorted(found)


def switches(root, port):
    """{(thread name, task dir): voluntary + involuntary switches} of the servers' threads."""
    out = {}
    for pid in pids(root, port):
        for task in glob.glob("/proc/%s/task/*" % pid):
            try:
                name = open(task + "/comm").read().strip()
                status = dict(line.split(":\t") for line in open(task + "/status").read().splitlines() if ":\t" in line)
                out[(name, task)] = int(status["voluntary_ctxt_switches"]) + int(status["nonvoluntary_ctxt_switches"])
            except (OSError, KeyError, ValueError):
                pass  # the thread ended meanwhile
    return out


def cpu_s(root, port):
    """CPU seconds (user + system) used so far by the servers' processes."""
    total = 0
    for pid in pids(root, port):
        try:
            fields = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
        except (OSError, IndexError, ValueError):
            pass  # the process ended meanwhile
    return total / os.sysconf("SC_CLK_TCK")


# Keys redis-benchmark picks from (-r), as make compare-kv's keyspace.
KEYSPACE_KEYS = 100_000
# SET requests FILL=1 sends before the measured run: 8 per key of the
# keyspace, so nearly every key is set.
FILL_REQUESTS = 8 * KEYSPACE_KEYS


def main():
    root = tempfile.mkdtemp(prefix="kv-hops-")
    port, stop = compare_kv.start_system(os.environ.get("SYSTEM", "keel-1"), root)
    try:
        requests = int(os.environ.get("N", "300000"))
        if os.environ.get("FILL") == "1":
            # Every key of the keyspace set first (-P 16), so a GET finds
            # its key and answers its value (not nil), as in make compare-kv.
            subprocess.run(["redis-benchmark", "-p", str(port), "-t", "set", "-n", str(FILL_REQUESTS), "-r", str(KEYSPACE_KEYS),
                            "-c", "50", "-P", "16", "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        before = switches(root, port)
        cpu_before = cpu_s(root, port)
        bench = subprocess.Popen(["redis-benchmark", "-p", str(port), "-t", os.environ.get("T", "get"), "-n",
                                  str(requests), "-r", str(KEYSPACE_KEYS), "-c", os.environ.get("C", "50"), "-P", os.environ.get("P", "1"), "-q"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if os.environ.get("PERF"):
            time.sleep(2)
            graph = ["-g"] if os.environ.get("PERF_CALLGRAPH") == "1" else []
            subprocess.run(["perf", "record", "-a", "-F", "2999"] + graph + ["-o", os.environ["PERF"], "--", "sleep", "5"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        text = bench.communicate()[0]
        after = switches(root, port)
        cpu_used_s = cpu_s(root, port) - cpu_before
        print(text.replace("\r", "\n").strip().splitlines()[-1])
        per_thread = {}
        for key, count in after.items():
            per_thread[key[0]] = per_thread.get(key[0], 0) + count - before.get(key, 0)
        print("context switches per request:",
              {name: round(n / requests, 3) for name, n in sorted(per_thread.items()) if n > 100})
        print("server CPU per request: %.2f us" % (cpu_used_s * 1e6 / requests))
    finally:
        stop()


if __name__ == "__main__":
    main()
