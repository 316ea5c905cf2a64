"""javac of the Java programs in tests/compat/java, for the harnesses of
the Java applications (curator.py, kafka.py, bookkeeper.py). Standard
library only."""

import os
import shutil
import subprocess

from .servers import REPO_ROOT, make_workdir

JAVA_SOURCES_DIR = os.path.join(REPO_ROOT, "tests", "compat", "java")
JAVAC_TIMEOUT_S = 180
# The JIT setting of the test JVMs that live a minute or less and whose
# speed no test measures (Kafka brokers and their checks, BookKeeper's
# check): C1 only. C2's compiler threads took a third of a Kafka broker's
# CPU: 9.8 s against 6.4 s for a start and one KafkaCheck run on Keel, and
# the JVMs of `make test` share two cores with everything else.
TIER1 = "-XX:TieredStopAtLevel=1"


def compile_sources(sources, classpath, name):
    """javac of tests/compat/java/<sources> against `classpath` into a
    fresh work directory named after `name`; (classpath to run them with,
    that directory). RuntimeError without javac or when javac fails
    (never a skip: `make test` installs it)."""
    if not shutil.which("javac"):
        raise RuntimeError("no javac (make test-deps installs openjdk-17-jdk-headless)")
    out = make_workdir(name)
    paths = [os.path.join(JAVA_SOURCES_DIR, source) for source in sources]
    p = subprocess.run(["javac", "-nowarn", "-d", out, "-cp", classpath] + paths,
                       capture_output=True, text=True, timeout=JAVAC_TIMEOUT_S)
    if p.returncode != 0:
        raise RuntimeError("javac %s failed:\n%s" % (" ".join(sources), p.stderr[-3000:]))
    return classpath + ":" + out, out
