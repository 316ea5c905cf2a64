#!/usr/bin/env bash
# Starts a local Keel cluster on 127.0.0.1 for trying it out:
#   client ports 2181..218N, peer ports 2888..288N, data in ./keel-cluster/N.
# Ctrl-C (or SIGTERM) stops every node it started.
#   scripts/cluster.sh [NODES=3] [--keep-data]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
nodes="${1:-3}"
keel=target/release/keel
[ -x "$keel" ] || cargo build --release -p keel
peers=""
for i in $(seq 1 "$nodes"); do peers="${peers:+$peers,}$i=127.0.0.1:$((2887 + i))"; done
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM
for i in $(seq 1 "$nodes"); do
    mkdir -p "keel-cluster/$i"
    "$keel" server --id "$i" --peers "$peers" --client-port $((2180 + i)) \
        --data-dir "keel-cluster/$i" --four-letter-words '*' > "keel-cluster/$i/server.log" 2>&1 &
    pids+=("$!")
done
echo "keel cluster: $nodes nodes, clients on 127.0.0.1:2181..$((2180 + nodes)), logs in keel-cluster/N/server.log"
echo "connect string: $(seq -s, 2181 $((2180 + nodes)) | sed 's/\([0-9]*\)/127.0.0.1:\1/g')"
wait
