#!/usr/bin/env python3
"""Log replay: a single-node Keel and a single-node Apache ZooKeeper 3.8 restart
from a log of N transactions and no snapshot, one after the other.

For each system, on a fresh data dir under bench/work/ with fsync on and
snapshots pushed out of reach (Keel: --snapshot-every-entries and
--snapshot-every-log-bytes at their maximum; ZooKeeper: snapCount=100000000):
 1. `keel bench --workload WORKLOAD --clients C --duration S` writes the log
    (create: one persistent znode per request, deleted by the bench's cleanup,
    so the log holds creates and deletes; set: setData of 100 nodes);
 2. kill -9, restart;
 3. the replay as the server reports it: ZooKeeper's "{txns} txns loaded in
    {ms} ms"; Keel's "recovered ... read_ms=" (log opened and read) plus
    "caught up: log replayed ... ms= txns=" (every committed transaction
    applied). Both count transactions the same way (one request, one txn).

Prints Keel | ZooKeeper | ratio, progress on stderr, raw results in
bench/work/replay.json. Environment: REPLAY_WORKLOAD (create), REPLAY_SECONDS
(20), REPLAY_CLIENTS (100), REPLAY_SYSTEMS ("keel,zookeeper").
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scale  # noqa: E402  (process handling, servers, log parsing)

SNAPSHOT_NEVER = str(2**63 - 1)
ZK_SNAP_COUNT_NEVER = 100_000_000
RESTART_TIMEOUT_S = 600


class Args:
    """What scale.Keel / scale.ZooKeeper read from their arguments."""

    keel_snapshot_entries = SNAPSHOT_NEVER
    keel_snapshot_log_bytes = SNAPSHOT_NEVER
    zk_snap_count = ZK_SNAP_COUNT_NEVER
    zk_heap_mb = 2048


def write_log(server, workload, clients, seconds, root):
    cmd = [scale.KEEL_BIN, "bench", "--servers", "127.0.0.1:%d" % server["port"], "--workload", workload,
           "--clients", str(clients), "--duration", str(seconds)]
    out = os.path.join(root, "bench-%s.out" % server["name"])
    with open(out, "w") as f:
        subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=True)
    with open(out) as f:
        text = f.read()
    tps = re.search(r"throughput\s+([\d.]+)", text)
    return float(tps.group(1)) if tps else None


def replayed(system, server, since):
    deadline = time.time() + RESTART_TIMEOUT_S
    while time.time() < deadline:
        if server["proc"].poll() is not None:
            raise RuntimeError("%s exited during replay; see %s" % (system.name, server["log"]))
        result = system.replay(server, since, [])
        if result:
            return result
        time.sleep(0.2)
    raise RuntimeError("%s: no replay line within %d s" % (system.name, RESTART_TIMEOUT_S))


def run_system(system, workload, clients, seconds, root):
    scale.log("%s: writing the log (%s, %d clients, %d s)" % (system.name, workload, clients, seconds))
    server = system.start()
    scale.wait_ready(server)
    tps = write_log(server, workload, clients, seconds, root)
    killed = time.time()
    os.killpg(server["proc"].pid, signal.SIGKILL)
    server["proc"].wait()
    scale.log("%s: killed; restarting" % system.name)
    server = system.start()
    result = replayed(system, server, killed - 1.0)
    scale.log("%s: %d txns replayed in %.2f s = %.0f txns/s"
              % (system.name, result["entries"], result["seconds"], result["rate_per_s"]))
    os.killpg(server["proc"].pid, signal.SIGTERM)
    server["proc"].wait(timeout=60)
    result.update(system=system.name, write_tps=tps)
    return result


def main():
    workload = os.environ.get("REPLAY_WORKLOAD", "create")
    seconds = scale.env_int("REPLAY_SECONDS", 20)
    clients = scale.env_int("REPLAY_CLIENTS", 100)
    systems = [s for s in os.environ.get("REPLAY_SYSTEMS", "keel,zookeeper").split(",") if s]
    if not os.access(scale.KEEL_BIN, os.X_OK):
        sys.exit("no Keel binary at %s (run: cargo build --release -p keel)" % scale.KEEL_BIN)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, scale.on_signal)
    os.makedirs(scale.WORK, exist_ok=True)
    root = tempfile.mkdtemp(prefix="replay-%s-" % time.strftime("%Y%m%dT%H%M%S"), dir=scale.WORK)
    results = []
    try:
        for name in systems:
            system = {"keel": scale.Keel, "zookeeper": scale.ZooKeeper}[name](root, Args())
            results.append(run_system(system, workload, clients, seconds, root))
    finally:
        scale.kill_all()
    with open(os.path.join(scale.WORK, "replay.json"), "w") as f:
        json.dump({"workload": workload, "seconds": seconds, "clients": clients, "work_dir": root,
                   "results": results}, f, indent=2, sort_keys=True)
    by = {r["system"]: r for r in results}
    print("log replay after kill -9, no snapshot (%s, %d clients, %d s of writes)" % (workload, clients, seconds))
    print("%-28s %14s %14s %8s" % ("", "keel", "zookeeper", "ratio"))
    for label, key, fmt in (("transactions replayed", "entries", "%d"), ("replay time (s)", "seconds", "%.2f"),
                            ("replay rate (txns/s)", "rate_per_s", "%.0f")):
        k, z = by.get("keel", {}).get(key), by.get("zookeeper", {}).get(key)
        ratio = "%.2fx" % (k / z) if k and z else "n/a"
        print("%-28s %14s %14s %8s" % (label, fmt % k if k is not None else "n/a",
                                       fmt % z if z is not None else "n/a", ratio))
    if "keel" in by:
        print("keel: log read %d ms + apply %d ms" % (by["keel"]["read_ms"], by["keel"]["apply_ms"]))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as e:
        scale.kill_all()
        scale.log("interrupted (%s); all started processes stopped" % (e or "Ctrl-C"))
        sys.exit(130)
