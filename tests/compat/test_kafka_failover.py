"""A Kafka controller failover on Keel, compared with the same failover on
Apache ZooKeeper 3.8: two Kafka 3.9.1 brokers (ZooKeeper mode) on a
3-member ensemble of each.

Kafka elects its controller through ZooKeeper: every broker registers
with an ephemeral node under /brokers/ids and watches /controller, an
ephemeral node the first broker to create it owns; the controller bumps
/controller_epoch and guards its partition-state writes with version
checks on it. When the controller's broker dies, its session must expire
on the ensemble, the ephemerals go, the watches fire on the survivor, and
the survivor must win the election, move partition leadership to itself
and shrink the ISRs through conditional writes. Here the ensemble's leader
is killed in the same moment, so the new leader has to expire the dead
broker's session while the survivor's session moves to another member and
stays alive.

The scenario (`failover`), the same on both:

1. brokers 0 and 1 start; a topic of PARTITIONS partitions, 2 replicas
   each; RECORDS records, each acknowledged by both replicas (acks=all);
2. kill -9 of the controller's broker and of the ensemble's leader;
3. the survivor becomes controller (the epoch goes up by one), leads every
   partition, and takes RECORDS more acknowledged records;
4. the killed ensemble member and broker start again; the broker
   registers, rejoins every ISR, and every acknowledged record (2 x
   RECORDS) is read back, each exactly once.

What it saw must be equal on both (the times are reported, not compared)."""

import json
import shutil
import subprocess
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from conftest import report_summary
from harness.javac import TIER1
from harness.kafka import KAFKA_CHROOT, KafkaBroker, compile_kafka_check

TOPIC = "failover"
PARTITIONS = 4
REPLICAS = 2
RECORDS = 300
# The brokers' ZooKeeper session timeout: the controller's broker is
# declared dead this long after its last heartbeat, so shorter than
# Kafka's default (18 s) keeps the test short; within both servers' limits
# (ZooKeeper's tickTime 2000 ms allows 4-40 s).
SESSION_TIMEOUT_MS = 6_000
# One run of KafkaFailover: a JVM and one step (a produce waits for the
# cluster to settle after the kill).
STEP_TIMEOUT_S = 240
# From the kill to the survivor's election: the session timeout, an
# ensemble election and Kafka's own controller work, with room for a
# loaded 2-core machine.
ELECTION_WAIT_S = 90
# From the killed broker's start to its place back in every ISR.
REJOIN_WAIT_S = 120
POLL_S = 0.2
# How long a read of the test's own client retries while it reconnects.
READ_RETRY_S = 60


@pytest.fixture(scope="module")
def classpath():
    classpath, out = compile_kafka_check()
    yield classpath
    shutil.rmtree(out, ignore_errors=True)


def step(classpath, *args):
    """One KafkaFailover step; its output line."""
    done = subprocess.run(["java", "-Xmx256m", "-XX:+UseSerialGC", TIER1, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                           "-cp", classpath, "KafkaFailover"] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    assert done.returncode == 0, "KafkaFailover %s failed (%d):\n%s\n%s" % (
        " ".join(map(str, args)), done.returncode, done.stdout[-3000:], done.stderr[-3000:])
    return done.stdout.strip().splitlines()[-1]


def wait_for(what, check, timeout_s):
    """check() until it returns something true; that value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "no %s within %d s" % (what, timeout_s)
        time.sleep(POLL_S)


class KafkaView:
    """What a kazoo client of the ensemble reads of Kafka's znodes. Each
    read is retried while the client reconnects (the ensemble member it
    uses may be the one killed)."""

    def __init__(self, zk):
        self.zk = zk

    def _get(self, path):
        return self.zk.retry(self.zk.get, KAFKA_CHROOT + path)[0]

    def _json(self, path):
        try:
            return json.loads(self._get(path))
        except NoNodeError:
            return None

    def brokers(self):
        return sorted(int(b) for b in self.zk.retry(self.zk.get_children, KAFKA_CHROOT + "/brokers/ids"))

    def controller(self):
        node = self._json("/controller")
        return None if node is None else node["brokerid"]

    def controller_epoch(self):
        return int(self._get("/controller_epoch"))

    def partitions(self):
        """[(leader, sorted isr)] of TOPIC's partitions, in order."""
        states = [self._json("/brokers/topics/%s/partitions/%d/state" % (TOPIC, p)) for p in range(PARTITIONS)]
        return [None if s is None else (s["leader"], sorted(s["isr"])) for s in states]


def failover(group, classpath):
    """The scenario on a started 3-member `group`; what it saw, and the
    seconds from the kill to the new controller and to the full ISRs."""
    brokers = [KafkaBroker(group.address, name="kafka-%s-b%d" % (group.kind, i), broker_id=i,
                           session_timeout_ms=SESSION_TIMEOUT_MS) for i in range(2)]
    zk = KazooClient(hosts=group.address, timeout=15,
                     command_retry={"max_tries": -1, "delay": POLL_S, "deadline": READ_RETRY_S})
    try:
        for broker in brokers:
            broker.start()
        zk.start(timeout=30)
        view = KafkaView(zk)
        bootstrap = ",".join(b.bootstrap for b in brokers)
        wait_for("registration of both brokers", lambda: view.brokers() == [0, 1], ELECTION_WAIT_S)
        seen = {"brokers": view.brokers(), "created": step(classpath, "create", bootstrap, TOPIC, PARTITIONS, REPLICAS)}
        full = [sorted(range(REPLICAS))] * PARTITIONS
        wait_for("full ISRs", lambda: [p and p[1] for p in view.partitions()] == full, ELECTION_WAIT_S)
        seen["produced before"] = step(classpath, "produce", bootstrap, TOPIC, 0, RECORDS)

        old = view.controller()
        assert old in (0, 1), "no controller among the brokers: %r" % old
        survivor = 1 - old
        epoch = view.controller_epoch()
        member = group.leader()
        killed_at = time.monotonic()
        brokers[old].kill()
        member.kill()
        wait_for("new controller", lambda: view.controller() == survivor, ELECTION_WAIT_S)
        elected_s = time.monotonic() - killed_at
        seen["epoch after kill"] = view.controller_epoch() - epoch
        led = [(survivor, [survivor])] * PARTITIONS
        wait_for("leadership on the survivor", lambda: view.partitions() == led, ELECTION_WAIT_S)
        seen["brokers after kill"] = view.brokers()
        seen["produced after"] = step(classpath, "produce", bootstrap, TOPIC, RECORDS, RECORDS)

        member.start()
        restarted_at = time.monotonic()
        brokers[old].start()
        wait_for("rejoined ISRs", lambda: [p and p[1] for p in view.partitions()] == full, REJOIN_WAIT_S)
        rejoined_s = time.monotonic() - restarted_at
        seen["brokers after restart"] = view.brokers()
        seen["controller after restart"] = "survivor" if view.controller() == survivor else view.controller()
        seen["epoch after restart"] = view.controller_epoch() - epoch
        seen["consumed"] = step(classpath, "consume", bootstrap, TOPIC, 2 * RECORDS)
        return seen, elected_s, rejoined_s
    except BaseException:
        for broker in brokers:
            print(broker.log_tail(60))
        raise
    finally:
        zk.stop()
        zk.close()
        for broker in brokers:
            if broker.running():
                broker.stop(timeout=30)


def test_kafka_moves_its_controller_on_keel_as_on_zookeeper(servers, classpath):
    ensemble = servers("zookeeper", topology="cluster3")
    reference, ref_elected_s, ref_rejoined_s = failover(ensemble, classpath)
    ensemble.stop()
    cluster = servers("keel", topology="cluster3")
    seen, elected_s, rejoined_s = failover(cluster, classpath)
    assert reference["epoch after kill"] == 1, reference
    assert reference["consumed"] == "consumed %d keys in %d records" % (2 * RECORDS, 2 * RECORDS), reference
    assert seen == reference, "ZooKeeper: %r\nKeel: %r" % (reference, seen)
    line = ("Kafka controller failover (2 brokers, controller's broker and ensemble leader killed together): "
            "new controller after %.1f s on ZooKeeper, %.1f s on Keel; ISRs full again %.1f s and %.1f s "
            "after the restart; %d acknowledged records read back on both" % (
                ref_elected_s, elected_s, ref_rejoined_s, rejoined_s, 2 * RECORDS))
    print("\n" + line)
    report_summary(line)
