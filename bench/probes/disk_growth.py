#!/usr/bin/env python3
"""How large a 3-node Keel's data directories grow under a stream of large
writes (BENCHMARKS.md, "Results 2026-12-07, 11:00"): THREADS raw sessions,
spread over the members, each keep 4 setData of VALUE_BYTES incompressible
bytes in flight for SECONDS; every 4 s the size of each member's data dir,
its snapshots taken and its applied index are printed; at the end the
members are killed (-9) and restarted, and each must hold the last value
acknowledged for every path.

    python3 bench/probes/disk_growth.py [SECONDS [THREADS [VALUE_BYTES]]]

Defaults: 60 s, 16 threads, 200,000 bytes.
"""
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))
from harness import dir_bytes, mntr  # noqa: E402
from harness import zkproto as zp  # noqa: E402
from harness.cluster import KeelCluster  # noqa: E402

IN_FLIGHT = 4
SAMPLE_S = 4.0


def writer(port, path, value_bytes, stop_at, acknowledged, written, lock):
    conn = zp.RawConnection(port, timeout=30)
    conn.handshake(timeout_ms=30000)
    err, _ = conn.create(path)
    assert err == 0, zp.error_name(err)
    while time.time() < stop_at:
        values = [os.urandom(value_bytes) for _ in range(IN_FLIGHT)]
        for value in values:
            conn.xid += 1
            conn.send_frame(zp.i32(conn.xid) + zp.i32(zp.SET_DATA) + zp.set_data_body(path, value))
        for _ in values:
            reply = zp.Reader(conn.read_frame())
            _, _, err = reply.i32(), reply.i64(), reply.i32()
            assert err == 0, zp.error_name(err)
        with lock:
            acknowledged[path] = values[-1]
            written[0] += value_bytes * IN_FLIGHT
    conn.close()


def main():
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    value_bytes = int(sys.argv[3]) if len(sys.argv) > 3 else 200_000
    cluster = KeelCluster(3, name="diskgrowth")
    cluster.start()
    try:
        acknowledged, written, lock = {}, [0], threading.Lock()
        stop_at = time.time() + seconds
        workers = [threading.Thread(target=writer, args=(cluster.nodes[i % 3].port, "/w%d" % i, value_bytes,
                                                         stop_at, acknowledged, written, lock))
                   for i in range(threads)]
        for w in workers:
            w.start()
        started = time.time()
        while any(w.is_alive() for w in workers):
            time.sleep(SAMPLE_S)
            print("%4.0f s  " % (time.time() - started) + " | ".join(
                "%s %5.0f MB, %s snapshots, index %s" % (
                    n.name, dir_bytes(n.data_dir) / 1e6, mntr(n.port).get("keel_snapshots_taken"),
                    mntr(n.port).get("keel_raft_applied_index")) for n in cluster.nodes), flush=True)
        for w in workers:
            w.join()
        sizes = [dir_bytes(n.data_dir) for n in cluster.nodes]
        cluster.kill()
        restart_started = time.time()
        cluster.start()
        print("killed and restarted in %.1f s" % (time.time() - restart_started))
        lost = 0
        for node in cluster.nodes:
            with zp.RawConnection(node.port, timeout=30) as conn:
                conn.handshake(timeout_ms=30000)
                conn.request(zp.SYNC, zp.ustr("/"))
                for path, value in acknowledged.items():
                    hdr, body = conn.request(zp.GET_DATA, zp.path_watch_body(path))
                    lost += hdr["err"] != 0 or body.buf() != value
        print("disk growth: %d MB of setData in %d s; data dirs at the end %s MB; after kill -9 and restart "
              "%d of %d last values differ" % (
                  written[0] / 1e6, seconds, [round(s / 1e6) for s in sizes], lost,
                  3 * len(acknowledged)))
        return 1 if lost else 0
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
