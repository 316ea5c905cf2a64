"""Apache Kafka 3.9.1 for tests/compat/test_kafka_compat.py: a real broker
in ZooKeeper mode (its metadata in ZooKeeper, or in Keel), run from the
jars `make test-deps` (scripts/install-test-deps.sh) downloads into
.deps/kafka, pinned there by SHA-256, and tests/compat/java/KafkaCheck.java
compiled against them. Standard library only."""

import glob
import os
import socket

from .javac import TIER1, compile_sources
from .servers import REPO_ROOT, BaseServer

KAFKA_DIR = os.path.join(REPO_ROOT, ".deps", "kafka")
KAFKA_JAR = "kafka_2.13-3.9.1.jar"
# The jars of the broker and of its clients: 56 of them.
KAFKA_JARS_MIN = 50
# The chroot the broker keeps its znodes under.
KAFKA_CHROOT = "/kafka"
# A broker's heap: enough for a few topics; two brokers and their JVM
# clients fit beside the servers on a 2-core, 24 GiB machine.
BROKER_HEAP_MB = 512
# Kafka's default zookeeper.session.timeout.ms: a Keel node that dies
# must hand the broker's session to another node within it.
BROKER_SESSION_TIMEOUT_MS = 18_000
# Broker ids stay below Kafka's reserved.broker.max.id (1000 by default):
# ids above it are the ones Kafka generates itself.
BROKER_ID_LIMIT = 1000


def kafka_classpath():
    """The jars in .deps/kafka; RuntimeError if they are missing (never a
    skip: `make test` installs them)."""
    jars = sorted(glob.glob(os.path.join(KAFKA_DIR, "*.jar")))
    if len(jars) < KAFKA_JARS_MIN or not os.path.isfile(os.path.join(KAFKA_DIR, KAFKA_JAR)):
        raise RuntimeError("Kafka jars missing in %s (make test-deps downloads them)" % KAFKA_DIR)
    return ":".join(jars)


# The Java programs that drive a broker, in tests/compat/java.
JAVA_SOURCES = ("KafkaCheck.java", "KafkaFailover.java")


def compile_kafka_check():
    """javac of JAVA_SOURCES into a fresh work directory; (classpath to
    run them with, that directory)."""
    return compile_sources(JAVA_SOURCES, kafka_classpath(), "javac-kafka")


class KafkaBroker(BaseServer):
    """One Kafka broker (`broker_id`) whose metadata lives at `zookeeper`
    (a connect string) under KAFKA_CHROOT; its client port is `port`.
    Ready once its listener accepts (the broker opens it last, after it
    has registered in ZooKeeper). A restart keeps its id, port and logs."""

    kind = "kafka"
    startup_timeout = 120.0

    def __init__(self, zookeeper, name=None, workdir=None, broker_id=0,
                 session_timeout_ms=BROKER_SESSION_TIMEOUT_MS):
        super().__init__(name=name or "kafka", workdir=workdir, test_defaults=False)
        assert 0 <= broker_id < BROKER_ID_LIMIT, broker_id
        self.zookeeper = zookeeper
        self.broker_id = broker_id
        self.session_timeout_ms = session_timeout_ms

    def _prepare(self):
        properties = {
            "broker.id": str(self.broker_id),
            "listeners": "PLAINTEXT://127.0.0.1:%d" % self.port,
            "log.dirs": self.data_dir,
            "zookeeper.connect": self.zookeeper + KAFKA_CHROOT,
            "zookeeper.session.timeout.ms": str(self.session_timeout_ms),
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "delete.topic.enable": "true",
        }
        with open(os.path.join(self.workdir, "server.properties"), "w") as f:
            f.writelines("%s=%s\n" % item for item in properties.items())

    def _command(self):
        return ["java", "-Xmx%dm" % BROKER_HEAP_MB, "-XX:+UseSerialGC", TIER1,
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp", kafka_classpath(), "kafka.Kafka", os.path.join(self.workdir, "server.properties")]

    def is_ready(self):
        with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
            return True

    @property
    def bootstrap(self):
        return "127.0.0.1:%d" % self.port
