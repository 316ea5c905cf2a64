#!/usr/bin/env python3
"""Side-by-side benchmark under Go's ZooKeeper client: 3-node ZooKeeper 3.8
ensemble vs 3-node Keel, load from bench/go/loadgen (`make compare-go`).

bench/go/loadgen runs keel bench's create and mix on
github.com/go-zookeeper/zk (v1.0.4, pinned by bench/go/go.sum), one zk.Conn
and one goroutine per session, one request in flight each. A Go program is
far lighter than the JVM of `make compare-java`, so it caps the servers
beside it on these two cores much less. It is built once with `go build`
into bench/work/goload; the runs, the CPU sampling and the table are
bench/loadgen_compare.py's (its docstring says how). Raw rows:
bench/work/compare-go.csv.

Usage: python3 bench/go_compare.py [--duration S] [--warmup S] [--clients 10,100,400]
Python 3 standard library only.
"""

import os
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)

import compare  # noqa: E402,F401  (puts tests/ on the path)
import loadgen_compare  # noqa: E402
from compare import WORK, run_main  # noqa: E402
from harness.golang import build_go, go_command  # noqa: E402

GO_MODULE = os.path.join(BENCH, "go")
BINARY = os.path.join(WORK, "goload")


def prepare():
    try:
        return [build_go(GO_MODULE, "loadgen", BINARY)]
    except RuntimeError as e:
        sys.exit(str(e))


def check():
    if go_command() is None:
        sys.exit("no `go` command (make test-deps installs Debian's golang-go when the machine has no Go)")


GO = loadgen_compare.LoadGenerator(
    label="goload",
    library="Go's client github.com/go-zookeeper/zk (bench/go/loadgen)",
    prepare=prepare,
    check=check,
    csv_name="compare-go.csv",
    work_prefix="go-run",
    describe="GOMAXPROCS " + os.environ.get("GOMAXPROCS", "(Go's default: every core)"),
)


if __name__ == "__main__":
    run_main(lambda: loadgen_compare.main(GO, __doc__.splitlines()[0]))
