"""Apache BookKeeper 4.18.2 (the storage of Apache Pulsar) for
tests/compat/test_bookkeeper_compat.py: its bookies and clients run in
the JVM of tests/compat/java/BookKeeperCheck.java, from the jars `make
test-deps` (scripts/install-test-deps.sh) downloads into .deps/bookkeeper,
pinned there by SHA-256. They bring their own ZooKeeper client, 3.9.5.
Standard library only."""

import glob
import os

from .javac import compile_sources
from .servers import REPO_ROOT

BOOKKEEPER_DIR = os.path.join(REPO_ROOT, ".deps", "bookkeeper")
BOOKKEEPER_JAR = "bookkeeper-server-4.18.2.jar"
# The jars of the bookie, its client and their dependencies: 58 of them.
BOOKKEEPER_JARS_MIN = 50


def bookkeeper_classpath():
    """The jars in .deps/bookkeeper; RuntimeError if they are missing
    (never a skip: `make test` installs them)."""
    jars = sorted(glob.glob(os.path.join(BOOKKEEPER_DIR, "*.jar")))
    if len(jars) < BOOKKEEPER_JARS_MIN or not os.path.isfile(os.path.join(BOOKKEEPER_DIR, BOOKKEEPER_JAR)):
        raise RuntimeError("BookKeeper jars missing in %s (make test-deps downloads them)" % BOOKKEEPER_DIR)
    return ":".join(jars)


def compile_bookkeeper_check():
    """javac of BookKeeperCheck.java into a fresh work directory;
    (classpath to run it with, that directory)."""
    return compile_sources(["BookKeeperCheck.java"], bookkeeper_classpath(), "javac-bookkeeper")


# The jars of the ZooKeeper 3.9.5 client alone, from the same directory
# (test_java_compat.py runs its scenario with them beside Debian's 3.8).
# Its configuration loads netty's TLS classes even for plain connections.
ZK39_CLIENT_JARS = ("zookeeper-3.9.5.jar", "zookeeper-jute-3.9.5.jar", "slf4j-api-2.0.12.jar",
                    "audience-annotations-0.12.0.jar") + tuple(
    "netty-%s-4.2.14.Final.jar" % part for part in ("handler", "common", "buffer", "transport", "resolver",
                                                     "codec-base", "transport-native-unix-common"))


def zookeeper_39_client_classpath():
    """The classpath of the ZooKeeper 3.9.5 Java client BookKeeper brings;
    RuntimeError if a jar is missing."""
    jars = [os.path.join(BOOKKEEPER_DIR, name) for name in ZK39_CLIENT_JARS]
    missing = [j for j in jars if not os.path.isfile(j)]
    if missing:
        raise RuntimeError("%s missing (make test-deps downloads them)" % ", ".join(missing))
    return ":".join(jars)
