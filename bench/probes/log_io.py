#!/usr/bin/env python3
"""The Raft log's two ways to write (BENCHMARKS.md, "2026-12-06, later"):
appends of 128 bytes, each followed by an fdatasync, written through the
page cache (pwrite of the 128 bytes) or with O_DIRECT (pwrite of the whole
4 KiB block that holds them, as zerofill.rs does), into a file whose room
was written with zeros first. One writer, then WRITERS (3: the three
servers of a cluster on one disk) at once. Prints each writer's p50
latency and CPU time (user + system) per append.

    python3 bench/probes/log_io.py            # in bench/work
    DIR=/path ROUNDS=3 N=1000 python3 bench/probes/log_io.py
"""
import mmap
import os
import resource
import statistics
import sys
import time
from multiprocessing import Process, Queue

BLOCK = 4096
APPEND = 128


def writer(directory, direct, n, out, tag):
    path = os.path.join(directory, "log-io-%s-%d" % ("direct" if direct else "buffered", tag))
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, b"\0" * (BLOCK * (n * APPEND // BLOCK + 8)))
    os.fsync(fd)
    os.close(fd)
    fd = os.open(path, os.O_RDWR | (os.O_DIRECT if direct else 0))
    block = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT asks
    record = b"r" * APPEND
    latencies = []
    before = resource.getrusage(resource.RUSAGE_SELF)
    for i in range(n):
        offset = i * APPEND
        started = time.perf_counter()
        if direct:
            block[offset % BLOCK:offset % BLOCK + APPEND] = record
            os.pwrite(fd, block, offset // BLOCK * BLOCK)
            if (offset + APPEND) % BLOCK == 0:
                block[:] = b"\0" * BLOCK
        else:
            os.pwrite(fd, record, offset)
        os.fdatasync(fd)
        latencies.append(time.perf_counter() - started)
    after = resource.getrusage(resource.RUSAGE_SELF)
    os.close(fd)
    os.unlink(path)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / n
    out.put((statistics.median(latencies), cpu))


def run(directory, direct, writers, n):
    out = Queue()
    procs = [Process(target=writer, args=(directory, direct, n, out, i)) for i in range(writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            sys.exit("a writer failed (O_DIRECT refused by %s?)" % directory)
    return [out.get() for _ in procs]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    directory = os.environ.get("DIR", os.path.join(here, "..", "work"))
    os.makedirs(directory, exist_ok=True)
    rounds = int(os.environ.get("ROUNDS", "3"))
    n = int(os.environ.get("N", "1000"))
    writers = int(os.environ.get("WRITERS", "3"))
    print("%d appends of %d bytes + fdatasync per writer, in %s" % (n, APPEND, os.path.realpath(directory)))
    for r in range(rounds):
        for direct in (False, True):
            for count in (1, writers):
                results = run(directory, direct, count, n)
                print("round %d  %-8s writers %d:  p50 %s us   CPU/append %s us" % (
                    r + 1, "direct" if direct else "buffered", count,
                    " ".join("%4.0f" % (lat * 1e6) for lat, _ in results),
                    " ".join("%5.1f" % (cpu * 1e6) for _, cpu in results)))


if __name__ == "__main__":
    main()
