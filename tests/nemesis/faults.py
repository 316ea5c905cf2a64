"""The nemesis: seeded faults on a running KeelCluster(proxied=True).

One fault at a time, each followed by a healthy gap:

  kill             kill -9 of one member (a random one, the leader in a
                   third of the cases), restarted after 0.5-5 s
  pause            SIGSTOP of one member (the leader in a third of the
                   cases) for 0.5 s up to 2 x the session timeout, SIGCONT
  partition        a random minority cut off from the majority
  bridge           two sides that only one member (the bridge) reaches
  isolate-leader   the leader alone on its side
  restart-cluster  every member killed (kill -9, or SIGTERM for half of
                   them) and started again

Partitions last 1-8 s. Every fault is recorded with its start and end
(seconds on the run's clock) for the summary and the timeline. Python
standard library only."""

import random
import threading
import time

FAULT_KINDS = ("kill", "pause", "partition", "bridge", "isolate-leader", "restart-cluster")
# How often each kind is drawn (restart-cluster rarely: it stops every client).
FAULT_WEIGHTS = (3, 3, 3, 2, 2, 1)
GAP_S = (1.0, 4.0)
PARTITION_S = (1.0, 8.0)
KILL_DOWN_S = (0.5, 5.0)
PAUSE_MIN_S = 0.5
LEADER_TIMEOUT_S = 3.0


class Fault:
    __slots__ = ("kind", "start", "end", "detail")

    def __init__(self, kind, start, detail):
        self.kind, self.start, self.end, self.detail = kind, start, None, detail

    def as_dict(self):
        return {"kind": self.kind, "start": self.start, "end": self.end, "detail": self.detail}


class Nemesis(threading.Thread):
    def __init__(self, cluster, clock, seed, timeout_ms, stop):
        super().__init__(name="nemesis", daemon=True)
        self.cluster = cluster
        self.clock = clock
        self.rng = random.Random(seed)
        self.timeout_ms = timeout_ms
        self.stop_event = stop
        self.faults = []
        self.error = None

    # -------------------------------------------------------------- helpers
    def _sleep(self, seconds):
        """Sleep unless the run ends first; True if it ended."""
        return self.stop_event.wait(seconds)

    def _begin(self, kind, detail):
        fault = Fault(kind, self.clock.seconds(), detail)
        self.faults.append(fault)
        return fault

    def _end(self, fault):
        fault.end = self.clock.seconds()

    def _leader_index(self):
        try:
            leader = self.cluster.leader(timeout=LEADER_TIMEOUT_S)
        except AssertionError:
            return None
        return self.cluster.nodes.index(leader)

    def _pick_member(self):
        n = len(self.cluster.nodes)
        if self.rng.random() < 1 / 3:
            leader = self._leader_index()
            if leader is not None:
                return leader, True
        return self.rng.randrange(n), False

    # -------------------------------------------------------------- faults
    def kill(self):
        i, leader = self._pick_member()
        node = self.cluster.nodes[i]
        fault = self._begin("kill", "n%d%s" % (i + 1, " (leader)" if leader else ""))
        node.kill()
        self._sleep(self.rng.uniform(*KILL_DOWN_S))
        node.start(wait=False)
        self._end(fault)

    def pause(self):
        i, leader = self._pick_member()
        node = self.cluster.nodes[i]
        seconds = self.rng.uniform(PAUSE_MIN_S, 2 * self.timeout_ms / 1000.0)
        fault = self._begin("pause", "n%d%s %.1f s" % (i + 1, " (leader)" if leader else "", seconds))
        node.pause()
        self._sleep(seconds)
        node.resume()
        self._end(fault)

    def _partition(self, kind, sides):
        detail = " | ".join(",".join("n%d" % (i + 1) for i in side) for side in sides)
        fault = self._begin(kind, detail)
        self.cluster.partition(sides)
        self._sleep(self.rng.uniform(*PARTITION_S))
        self.cluster.heal_all()
        self._end(fault)

    def partition(self):
        n = len(self.cluster.nodes)
        members = list(range(n))
        self.rng.shuffle(members)
        minority = members[:self.rng.randrange(1, (n + 1) // 2)]
        self._partition("partition", [sorted(minority), sorted(members[len(minority):])])

    def bridge(self):
        n = len(self.cluster.nodes)
        members = list(range(n))
        self.rng.shuffle(members)
        bridge, rest = members[0], members[1:]
        half = len(rest) // 2
        # The bridge is in no side: it keeps its links to both.
        self._partition("bridge", [sorted(rest[:half]), sorted(rest[half:])])
        self.faults[-1].detail += " (bridge n%d)" % (bridge + 1)

    def isolate_leader(self):
        leader = self._leader_index()
        if leader is None:
            return
        others = [i for i in range(len(self.cluster.nodes)) if i != leader]
        self._partition("isolate-leader", [[leader], others])

    def restart_cluster(self):
        graceful = self.rng.random() < 0.5
        fault = self._begin("restart-cluster", "SIGTERM" if graceful else "kill -9")
        nodes = self.cluster.nodes
        if graceful:
            for node in nodes:
                if node.running():
                    node._signal_group(15)
            for node in nodes:
                if node.proc is not None:
                    try:
                        node.proc.wait(15)
                    except Exception:  # noqa: BLE001 - then kill it
                        pass
        for node in nodes:
            node.kill()
        self._sleep(self.rng.uniform(0.2, 2.0))
        for node in nodes:
            node.start(wait=False)
        self._end(fault)

    # -------------------------------------------------------------- loop
    def run(self):
        try:
            actions = {"kill": self.kill, "pause": self.pause, "partition": self.partition, "bridge": self.bridge,
                       "isolate-leader": self.isolate_leader, "restart-cluster": self.restart_cluster}
            while not self._sleep(self.rng.uniform(*GAP_S)):
                kind = self.rng.choices(FAULT_KINDS, FAULT_WEIGHTS)[0]
                actions[kind]()
        except BaseException as e:  # noqa: BLE001 - reported by the run
            self.error = e
            raise

    def heal(self):
        """Undo everything: links back, paused members continued, stopped
        members started (without waiting)."""
        self.cluster.heal_all()
        for node in self.cluster.nodes:
            if node.paused:
                node.resume()
        for node in self.cluster.nodes:
            if not node.running():
                node.start(wait=False)
        for fault in self.faults:
            if fault.end is None:
                fault.end = self.clock.seconds()
