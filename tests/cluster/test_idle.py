"""An idle Keel uses (almost) no CPU: a single node and every member of a
3-node cluster, with no clients, for a few seconds.

Guards against a driver loop that spins: a single node's raft thread once
selected on a disconnected peer channel, which is always ready, and burned a
whole core while idle (and slowed every single-node benchmark with it)."""

import os
import time

# Seconds of idleness measured, after the servers settle.
IDLE_SECONDS = 4.0
SETTLE_SECONDS = 1.0
# Most CPU an idle server may use: ticks, heartbeats and timers cost a few
# tenths of a percent; a spinning thread costs 100%.
IDLE_CPU_FRACTION_MAX = 0.05


def cpu_seconds(pid):
    """utime + stime of a process (all its threads), from /proc/PID/stat."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def idle_fractions(pids):
    time.sleep(SETTLE_SECONDS)
    before = {pid: cpu_seconds(pid) for pid in pids}
    started = time.monotonic()
    time.sleep(IDLE_SECONDS)
    elapsed = time.monotonic() - started
    return {pid: (cpu_seconds(pid) - before[pid]) / elapsed for pid in pids}


def test_an_idle_single_node_uses_no_cpu(servers):
    keel = servers("keel")
    fractions = idle_fractions([keel.proc.pid])
    print("idle single node: %.1f%% of a core" % (100 * fractions[keel.proc.pid]))
    assert fractions[keel.proc.pid] < IDLE_CPU_FRACTION_MAX, fractions


def test_idle_cluster_members_use_no_cpu(keel_cluster):
    cluster = keel_cluster("idle")
    pids = [node.proc.pid for node in cluster.nodes]
    fractions = idle_fractions(pids)
    print("idle 3-node cluster: %s of a core" % ", ".join("%.1f%%" % (100 * f) for f in fractions.values()))
    assert all(f < IDLE_CPU_FRACTION_MAX for f in fractions.values()), fractions
