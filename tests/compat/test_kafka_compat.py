"""A real Apache Kafka 3.9.1 broker (ZooKeeper mode: its metadata in
ZooKeeper) on Keel, compared with the same broker on Apache ZooKeeper 3.8.

Kafka is the heaviest classic ZooKeeper user: its broker registers with an
ephemeral node, its controller is elected through one, topic creation,
config changes and topic deletion go through znodes, sequential
notification nodes and watches, and its controller writes partition state
with multi requests guarded by version checks (the controller epoch).
tests/compat/java/KafkaCheck.java (Kafka's own Java clients) creates a
topic, changes its config, creates and deletes another, produces 300
records with acks=all and idempotence (the broker takes a producer-id
block from ZooKeeper) and reads them back in a consumer group.

- The same run against standalone ZooKeeper and against Keel (one server,
  and a 3-node cluster with the broker given all three): the broker works
  on both, and the znodes it leaves under its chroot match (paths, which
  are ephemeral, and the data of the nodes whose data does not carry a
  random id or a time).
- On 3 Keel nodes, the node that holds the broker's session is killed
  (kill -9): the broker's ZooKeeper client moves to another node with its
  session, its registration (an ephemeral node) and the controller stay
  the same, and a second run of the check passes.
- A rolling restart of the 3 Keel nodes (each stopped with SIGTERM and
  started again, leader included) under a broker: the same session,
  registration and controller throughout, and the check passes after."""

import shutil
import subprocess
import time
from contextlib import contextmanager

import pytest
from kazoo.client import KazooClient

from compat.znodes import assert_same_znodes
from conftest import report_summary
from harness.javac import TIER1
from harness.kafka import KAFKA_CHROOT, KafkaBroker, compile_kafka_check
from harness.servers import four_letter_word

# Records each run of KafkaCheck produces and reads back.
RECORDS = 300
# One run of KafkaCheck: a JVM, a topic creation and deletion, 300 acked
# writes and a consumer group's join (the broker's first group
# coordinator load included).
CHECK_TIMEOUT_S = 240
# How long a deleted topic may take to leave ZooKeeper (the controller
# deletes it after the admin call returns).
DELETE_WAIT_S = 60
# Children of these change with time (notifications the broker purges,
# deletions in progress): compared by their parent alone.
VOLATILE_PARENTS = ("/admin/delete_topics", "/isr_change_notification", "/log_dir_event_notification",
                    "/config/changes")
# Data compared byte for byte: no random id, no time, no port.
DATA_COMPARED_PREFIXES = ("/config/topics/", "/brokers/topics/%s/partitions/", "/latest_producer_id_block",
                          "/controller_epoch", "/feature")


@pytest.fixture(scope="module")
def check_classpath():
    classpath, out = compile_kafka_check()
    yield classpath
    shutil.rmtree(out, ignore_errors=True)


def run_check(classpath, broker, topic):
    """KafkaCheck against `broker`; its output lines."""
    done = subprocess.run(["java", "-Xmx256m", "-XX:+UseSerialGC", TIER1, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                           "-cp", classpath, "KafkaCheck", broker.bootstrap, topic, str(RECORDS)],
                          capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, "KafkaCheck %s failed (%d):\n%s\n%s\n%s" % (
        topic, done.returncode, done.stdout[-3000:], done.stderr[-3000:], broker.log_tail(60))
    assert "produced %d" % RECORDS in lines and "consumed %d" % RECORDS in lines, lines
    assert "retention.ms 3600000" in lines, lines
    return lines


def wait_deleted(zk, topic):
    deadline = time.monotonic() + DELETE_WAIT_S
    path = KAFKA_CHROOT + "/brokers/topics/" + topic
    while zk.exists(path) is not None:
        assert time.monotonic() < deadline, "%s still there %d s after its deletion" % (path, DELETE_WAIT_S)
        time.sleep(0.2)


def kafka_tree(zk, topic):
    """{path under the chroot: (ephemeral, data or None)} of what the
    broker left, volatile children left out, data kept where comparable."""
    tree = {}
    compared = tuple(p.replace("%s", topic) for p in DATA_COMPARED_PREFIXES)

    def walk(path):
        data, stat = zk.get(KAFKA_CHROOT + path if path else KAFKA_CHROOT)
        keep = path.startswith(compared) or path in compared
        tree[path or "/"] = (stat.ephemeralOwner != 0, data if keep else None)
        if path in VOLATILE_PARENTS:
            return
        for child in sorted(zk.get_children(KAFKA_CHROOT + path if path else KAFKA_CHROOT)):
            walk(path + "/" + child)

    walk("")
    return tree


@contextmanager
def broker_with_client(address, name):
    """A Kafka broker on the servers of connect string `address`, and a
    kazoo client of the same servers: (broker, client), both stopped at
    the end; the broker's log tail is printed if the block fails."""
    broker = KafkaBroker(address, name=name)
    broker.start()
    zk = KazooClient(hosts=address, timeout=15)
    try:
        zk.start(timeout=30)
        yield broker, zk
    except BaseException:
        print(broker.log_tail(100))
        raise
    finally:
        zk.stop()
        zk.close()
        broker.stop(timeout=30)


def kafka_on(server, classpath, topic):
    """Starts a broker on `server` (a connect string's owner), runs the
    check, waits for the deleted topic to go, and returns the tree."""
    with broker_with_client(server.address, "kafka-on-" + server.kind) as (broker, zk):
        lines = run_check(classpath, broker, topic)
        wait_deleted(zk, topic + "-doomed")
        return lines, kafka_tree(zk, topic)


def registration(zk):
    """The Stats of the broker's registration and of the controller node."""
    return zk.get(KAFKA_CHROOT + "/brokers/ids/0")[1], zk.get(KAFKA_CHROOT + "/controller")[1]


def test_a_kafka_broker_on_keel_leaves_what_it_leaves_on_zookeeper(servers, candidate, keel_topology,
                                                                    check_classpath, zk_reference):
    topic = "keel-check"
    (ref_lines, ref_tree), _ = zk_reference("kafka", lambda zk: kafka_on(zk, check_classpath, topic))
    target = servers(candidate, topology=keel_topology)
    lines, tree = kafka_on(target, check_classpath, topic)
    assert [l for l in lines if l.startswith("topics")] == [l for l in ref_lines if l.startswith("topics")]
    assert "/brokers/ids/0" in tree and tree["/brokers/ids/0"][0], "the broker's registration is not ephemeral"
    assert "/controller" in tree and tree["/controller"][0]
    assert_same_znodes(ref_tree, tree, candidate)
    with_data = sum(1 for _, data in tree.values() if data is not None)
    assert with_data >= 5, tree
    line = ("Kafka 3.9.1 broker on %s (%s): %d znodes as on ZooKeeper (%d ephemeral, %d compared by data)" % (
        candidate, keel_topology, len(tree), sum(1 for e, _ in tree.values() if e), with_data))
    print("\n" + line)
    report_summary(line)


def session_holder(cluster, session_id):
    """The member whose `cons` lists the session."""
    needle = b"sid=0x%x," % session_id
    for node in cluster.nodes:
        if node.running() and needle in four_letter_word(node.port, b"cons"):
            return node
    return None


def test_a_kafka_broker_keeps_its_session_when_its_keel_node_is_killed(servers, check_classpath):
    cluster = servers("keel", topology="cluster3")
    with broker_with_client(cluster.address, "kafka-failover") as (broker, zk):
        run_check(check_classpath, broker, "before-kill")
        registered, controller = registration(zk)
        holder = session_holder(cluster, registered.ephemeralOwner)
        assert holder is not None, "no member lists the broker's session 0x%x" % registered.ephemeralOwner
        holder.kill()
        run_check(check_classpath, broker, "after-kill")
        still, controller_after = registration(zk)
        assert still.ephemeralOwner == registered.ephemeralOwner and still.czxid == registered.czxid, (
            "the broker registered again: its session was lost")
        assert controller_after.czxid == controller.czxid, "the controller was elected again"
        assert session_holder(cluster, registered.ephemeralOwner) not in (None, holder)
        line = ("Kafka broker on 3 Keel nodes: its session 0x%x moved off the killed member %s; registration "
                "and controller kept, a second check passed" % (registered.ephemeralOwner, holder.address))
        print("\n" + line)
        report_summary(line)


def test_a_kafka_broker_keeps_its_session_through_a_rolling_restart_of_keel(servers, check_classpath):
    cluster = servers("keel", topology="cluster3")
    with broker_with_client(cluster.address, "kafka-rolling") as (broker, zk):
        run_check(check_classpath, broker, "before-rolling")
        registered, controller = registration(zk)
        for node in cluster.nodes:
            assert node.stop() == 0, "a member did not stop cleanly on SIGTERM"
            node.start()
            cluster.leader(timeout=30)
            cluster.wait_replicated(timeout=30)
            still, _ = registration(zk)
            assert still.czxid == registered.czxid, "the broker registered again after %s restarted" % node.address
        run_check(check_classpath, broker, "after-rolling")
        _, controller_after = registration(zk)
        assert controller_after.czxid == controller.czxid, "the controller was elected again"
        line = ("Kafka broker through a rolling restart of 3 Keel nodes: session 0x%x, registration and "
                "controller kept, a second check passed" % registered.ephemeralOwner)
        print("\n" + line)
        report_summary(line)
