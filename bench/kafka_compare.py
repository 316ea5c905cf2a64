#!/usr/bin/env python3
"""Kafka's metadata work on a 3-node Apache ZooKeeper 3.8 ensemble and on a
3-node Keel cluster, side by side in one run (`make compare-kafka`).

A real application's load instead of `keel bench`'s: an Apache Kafka 3.9.1
broker in ZooKeeper mode (tests/harness/kafka.py; the jars `make test-deps`
pins into .deps/kafka), connected to all three members, and
bench/java/KafkaTopics.java driving it with Kafka's Admin client. Per run:
- the broker's start, until its listener accepts (it registers, elects
  itself controller and loads the cluster's metadata from ZooKeeper);
- TOPICS topics of PARTITIONS partitions created in requests of 50, until
  every partition has a leader: the controller writes each topic's
  assignment and each partition's state to ZooKeeper (multi requests
  guarded by its epoch) and reads them back through watches;
- all of them deleted, until the broker lists none.
Each phase is timed from the client; the CPU time the three servers used
during the create and delete phases comes from /proc. The systems
alternate within each round (a fresh cluster and broker per run, fsync on
for both, as in `make compare`); the table gives each system's medians
and ZooKeeper's time over Keel's.

Env: KAFKA_COMPARE_ROUNDS (3), KAFKA_COMPARE_TOPICS (200),
KAFKA_COMPARE_PARTITIONS (4). Output under bench/work/. Python 3 standard
library only."""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare  # noqa: E402  (puts tests/ on the path)
from compare import WORK, log, run_main  # noqa: E402
from harness import KEEL_BIN  # noqa: E402
from harness.kafka import KafkaBroker, kafka_classpath  # noqa: E402

SYSTEMS = ("zookeeper", "keel")
ROUNDS = int(os.environ.get("KAFKA_COMPARE_ROUNDS", "3"))
TOPICS = int(os.environ.get("KAFKA_COMPARE_TOPICS", "200"))
PARTITIONS = int(os.environ.get("KAFKA_COMPARE_PARTITIONS", "4"))
ROUNDS_MAX = 20
TOPICS_MAX = 5_000
PARTITIONS_MAX = 64
# KafkaTopics's own deadline is 600 s per step; this bounds the JVM.
RUN_TIMEOUT_S = 1_500
SOURCE = os.path.join(HERE, "java", "KafkaTopics.java")


def compile_topics(root):
    """javac KafkaTopics.java into root/classes; the run classpath."""
    if not shutil.which("javac"):
        sys.exit("javac not found (Debian: openjdk-17-jdk-headless; make test-deps installs it)")
    try:
        jars = kafka_classpath()
    except RuntimeError as error:
        sys.exit(str(error))
    classes = os.path.join(root, "classes")
    p = subprocess.run(["javac", "-nowarn", "-d", classes, "-cp", jars, SOURCE], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("javac failed on %s:\n%s" % (SOURCE, p.stderr[-3000:]))
    return classes + ":" + jars


def one_run(root, system, classpath, tag):
    """A fresh cluster and broker of `system`: {start_s, create_s, delete_s, cpu_s}."""
    group = compare.start_cluster(os.path.join(root, tag), system)
    broker = None
    try:
        pids = [node.proc.pid for node in group.nodes]
        started = time.monotonic()
        broker = KafkaBroker(group.address, name="kafka-" + tag, workdir=os.path.join(root, tag, "kafka"))
        broker.start()
        start_s = time.monotonic() - started
        cpu_before = compare.cpu_seconds(pids)
        done = subprocess.run(["java", "-Xmx512m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath,
                               "KafkaTopics", broker.bootstrap, str(TOPICS), str(PARTITIONS)],
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        cpu_s = compare.cpu_seconds(pids) - cpu_before
        if done.returncode != 0:
            raise RuntimeError("KafkaTopics failed on %s:\n%s\n%s" % (system, done.stdout[-2000:],
                                                                     done.stderr[-3000:]))
        phases = dict(line.split() for line in done.stdout.splitlines() if line.endswith(tuple("0123456789")))
        return {"start_s": start_s, "create_s": float(phases["create_s"]), "delete_s": float(phases["delete_s"]),
                "cpu_s": cpu_s}
    finally:
        if broker is not None:
            broker.stop(timeout=30)
        group.stop(timeout=10)
        for node in group.nodes:
            shutil.rmtree(node.data_dir, ignore_errors=True)


def main():
    if not (1 <= ROUNDS <= ROUNDS_MAX and 1 <= TOPICS <= TOPICS_MAX and 1 <= PARTITIONS <= PARTITIONS_MAX):
        sys.exit("KAFKA_COMPARE_ROUNDS must be 1..%d, KAFKA_COMPARE_TOPICS 1..%d, KAFKA_COMPARE_PARTITIONS "
                 "1..%d" % (ROUNDS_MAX, TOPICS_MAX, PARTITIONS_MAX))
    if not os.access(KEEL_BIN, os.X_OK):
        sys.exit("no Keel binary at %s (run: cargo build --release -p keel)" % KEEL_BIN)
    os.makedirs(WORK, exist_ok=True)
    root = tempfile.mkdtemp(prefix="kafka-%s-" % time.strftime("%Y%m%dT%H%M%S"), dir=WORK)
    classpath = compile_topics(root)
    results = {system: [] for system in SYSTEMS}
    for round_ in range(1, ROUNDS + 1):
        order = SYSTEMS if round_ % 2 else tuple(reversed(SYSTEMS))
        for system in order:
            log("round %d/%d: %s, %d topics x %d partitions" % (round_, ROUNDS, system, TOPICS, PARTITIONS))
            r = one_run(root, system, classpath, "%s-%d" % (system, round_))
            results[system].append(r)
            log("round %d  %-9s  broker start %5.1f s  create %6.2f s (%6.1f topics/s)  delete %6.2f s  "
                "servers' CPU %5.1f s" % (round_, system, r["start_s"], r["create_s"], TOPICS / r["create_s"],
                                         r["delete_s"], r["cpu_s"]))
    print_table(results)
    print("per-run output: %s" % os.path.relpath(root, os.path.dirname(HERE)))


def print_table(results):
    med = {s: {k: statistics.median(r[k] for r in results[s]) for k in results[s][0]} for s in SYSTEMS}
    print()
    print("Kafka 3.9.1 broker, %d topics x %d partitions, medians of %d rounds (3 nodes each, fsync on)" % (
        TOPICS, PARTITIONS, ROUNDS))
    print("%-10s | %15s | %12s | %12s | %12s | %17s" % (
        "system", "broker start s", "create s", "topics/s", "delete s", "servers' CPU s"))
    print("-" * 94)
    for s in SYSTEMS:
        m = med[s]
        print("%-10s | %15.2f | %12.2f | %12.1f | %12.2f | %17.2f" % (
            s, m["start_s"], m["create_s"], TOPICS / m["create_s"], m["delete_s"], m["cpu_s"]))
    z, k = med["zookeeper"], med["keel"]
    print("ZooKeeper's time over Keel's: broker start %.2fx, create %.2fx, delete %.2fx; servers' CPU %.2fx" % (
        z["start_s"] / k["start_s"], z["create_s"] / k["create_s"], z["delete_s"] / k["delete_s"],
        z["cpu_s"] / max(k["cpu_s"], 1e-9)))
    print("create ratio per round: %s" % " ".join(
        "%.2fx" % (a["create_s"] / b["create_s"]) for a, b in zip(results["zookeeper"], results["keel"])))


if __name__ == "__main__":
    run_main(main)
