#!/usr/bin/env bash
# Starts a local Keel cluster on 127.0.0.1 for trying it out:
#   client ports 2181..218N, peer ports 2888..288N, Prometheus metrics on
#   127.0.0.1:7000..700N-1/metrics (--metrics-port P moves them, 0 = off),
#   data in ./keel-cluster/N
#   (kept between runs), logs in ./keel-cluster/N/server.log.
# Ctrl-C (or SIGTERM) stops every node it started.
#   scripts/cluster.sh [NODES=3] [--keep-data]
# A thin wrapper: the cluster is the test harness's (tests/harness/cluster.py),
# `PYTHONPATH=tests python3 -m harness.cluster up --help` lists its options.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ -x target/release/keel ] || cargo build --release -p keel
PYTHONPATH=tests${PYTHONPATH:+:$PYTHONPATH} exec python3 -m harness.cluster up "$@"
