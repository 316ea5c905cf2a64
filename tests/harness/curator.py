"""Apache Curator for the Java tests: the jars `make test-deps`
(scripts/install-test-deps.sh) downloads into .deps/maven, pinned there by
SHA-256, and javac of the scenario sources in tests/compat/java against
them and ZooKeeper 3.8's Debian jars. Standard library only."""

import os

from .javac import compile_sources
from .servers import REPO_ROOT, ZK_CLIENT_CLASSPATH

MAVEN_DIR = os.path.join(REPO_ROOT, ".deps", "maven")
CURATOR_JARS = ("curator-client-5.5.0.jar", "curator-framework-5.5.0.jar", "curator-recipes-5.5.0.jar",
                "guava-31.1-jre.jar", "failureaccess-1.0.1.jar")


def curator_classpath():
    """ZooKeeper's client jars and Curator's; RuntimeError naming the jars
    missing (never a skip: `make test` installs them)."""
    jars = [os.path.join(MAVEN_DIR, name) for name in CURATOR_JARS]
    missing = [jar for jar in jars if not os.path.isfile(jar)]
    if missing:
        raise RuntimeError("Curator jars missing (make test-deps downloads them): %s" % ", ".join(missing))
    return ZK_CLIENT_CLASSPATH + ":" + ":".join(jars)


def compile_curator(sources, name):
    """javac of tests/compat/java/<sources> against Curator into a fresh
    work directory; (classpath to run them with, that directory)."""
    return compile_sources(sources, curator_classpath(), name)
