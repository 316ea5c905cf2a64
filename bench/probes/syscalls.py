#!/usr/bin/env python3
"""System calls and context switches per operation on the three servers of
a fresh 3-node Keel cluster (`bench/tls_split.py`, plain), under keel bench
or under ZooKeeper's Java client (bench/java/LoadGen.java, as `make
compare-java` runs it). `perf stat` counts the servers' recvfrom, sendto,
epoll_wait, write and futex calls and their context switches for 3 s in
the middle of the run (`zk_ab.count_syscalls`; BENCHMARKS.md, "make
compare-java on this machine").

    python3 bench/probes/syscalls.py bench|java|go WORKLOAD CLIENTS
    python3 bench/probes/syscalls.py java mix 400

Run it on a quiet machine: nothing else may build or test meanwhile.
"""
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..")); sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))
import compare  # noqa: E402
import java_compare  # noqa: E402
import tls_split  # noqa: E402
import zk_ab  # noqa: E402
from harness import servers  # noqa: E402

# The run's length, its warm-up (LoadGen) and when the count starts.
RUN_S = 12
WARMUP_S = 3
COUNT_AFTER_S = 8


# Go's load generator, as `make compare-go` builds it.
GOLOAD = os.path.join(compare.WORK, "goload")


def load_command(load, address, workload, clients, duration_s=RUN_S, warmup_s=WARMUP_S):
    """The command line of a load: keel bench (which takes no warm-up),
    ZooKeeper's Java client (LoadGen) or Go's (goload, bench/probes/client_cpu.py)."""
    if load == "bench":
        return [servers.KEEL_BIN, "bench", "--servers", address, "--workload", workload,
                "--clients", str(clients), "--duration", str(duration_s)]
    args = ["--servers", address, "--workload", workload, "--sessions", str(clients),
            "--duration", str(duration_s), "--warmup", str(warmup_s)]
    if load == "go":
        return [GOLOAD] + args
    classpath = java_compare.compile_loadgen()
    return ["java"] + java_compare.JVM_OPTIONS + java_compare.JVM_FIXED + ["-cp", classpath, "LoadGen"] + args


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("bench", "java", "go") or sys.argv[2] not in ("create", "mix"):
        sys.exit(__doc__)
    load, workload = sys.argv[1], sys.argv[2]
    try:
        clients = int(sys.argv[3])
    except ValueError:
        sys.exit("CLIENTS is a whole number\n\n" + __doc__)
    if clients < 1:
        sys.exit("CLIENTS must be at least 1")
    root = tempfile.mkdtemp(prefix="syscalls-")
    try:
        group, address, _ = tls_split.start("none", root)
        command = load_command(load, address, workload, clients)
        run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        time.sleep(COUNT_AFTER_S)
        counts = zk_ab.count_syscalls([node.proc.pid for node in group.nodes], ("context-switches",))
        out = run.communicate()[0]
        if run.returncode != 0:
            sys.exit("the load failed (%d): %s" % (run.returncode, out[-500:]))
        tps_lines = [line for line in out.splitlines() if line.startswith("TPS")]
        if not tps_lines:
            sys.exit("the load printed no TPS line: %s" % out[-500:])
        tps = float(tps_lines[-1].split()[1])
        print("%s %s x%d: %.0f TPS" % (load, workload, clients, tps))
        for name, count in counts.items():
            print("  %-18s %6.2f per operation" % (name, count / (tps * zk_ab.SYSCALLS_FOR_S)))
    finally:
        compare.stop_all()


if __name__ == "__main__":
    main()
