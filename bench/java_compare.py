#!/usr/bin/env python3
"""Side-by-side benchmark under Apache ZooKeeper's own Java client: 3-node
ZooKeeper 3.8 ensemble vs 3-node Keel, load from bench/java/LoadGen.java
(`make compare-java`).

LoadGen runs keel bench's create and mix on the Java client's asynchronous
API, one ZooKeeper handle per session. It is compiled once with javac into
bench/work/loadgen-classes; the runs, the CPU sampling and the table are
bench/loadgen_compare.py's (its docstring says how). Raw rows:
bench/work/compare-java.csv.

The load generator's JVM: LOADGEN_JVM_OPTIONS (default "-Xms1g -Xmx1g"), the
same for both systems.

Usage: python3 bench/java_compare.py [--duration S] [--warmup S] [--clients 10,100,400]
Python 3 standard library only.
"""

import os
import shlex
import shutil
import subprocess
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)

import compare  # noqa: E402  (puts tests/ on the path)
import loadgen_compare  # noqa: E402
from compare import WORK, run_main  # noqa: E402
from harness import ZK_CLIENT_CLASSPATH  # noqa: E402

LOADGEN_SRC = os.path.join(BENCH, "java", "LoadGen.java")
CLASSES = os.path.join(WORK, "loadgen-classes")
JVM_OPTIONS = shlex.split(os.environ.get("LOADGEN_JVM_OPTIONS", "-Xms1g -Xmx1g"))
# What every LoadGen JVM gets besides the heap: no SASL attempt (neither
# server asks for it) and smaller thread stacks (two client threads per
# session: 800 at 400 sessions).
JVM_FIXED = ["-Xss512k", "-Dzookeeper.sasl.client=false"]


def compile_loadgen():
    """javac LoadGen.java once into CLASSES; returns the run classpath."""
    javac = shutil.which("javac")
    if not javac:
        sys.exit("javac not found (Debian: openjdk-17-jdk-headless; make test-deps installs it)")
    os.makedirs(CLASSES, exist_ok=True)
    p = subprocess.run([javac, "-nowarn", "-d", CLASSES, "-cp", ZK_CLIENT_CLASSPATH, LOADGEN_SRC],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit("javac failed on %s:\n%s" % (LOADGEN_SRC, p.stderr[-3000:]))
    return ZK_CLIENT_CLASSPATH + ":" + CLASSES


def check():
    for j in ZK_CLIENT_CLASSPATH.split(":") + [compare.SLF4J_SIMPLE_JAR]:
        if not os.path.isfile(j):
            sys.exit("missing jar %s (make test-deps installs Debian's zookeeper)" % j)


JAVA = loadgen_compare.LoadGenerator(
    label="LoadGen",
    library="Apache ZooKeeper's Java client (bench/java/LoadGen.java)",
    prepare=lambda: ["java"] + JVM_OPTIONS + JVM_FIXED + ["-cp", compile_loadgen(), "LoadGen"],
    check=check,
    csv_name="compare-java.csv",
    work_prefix="java-run",
    describe="LoadGen JVM " + " ".join(JVM_OPTIONS),
)


if __name__ == "__main__":
    run_main(lambda: loadgen_compare.main(JAVA, __doc__.splitlines()[0]))
