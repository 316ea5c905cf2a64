#!/usr/bin/env bash
# Re-captures the golden frames in ../golden from a real Apache ZooKeeper.
#
#   bash crates/jute/tests/capture/recapture.sh
#
# Needs: Debian's `zookeeper` package (jars in /usr/share/java), a JDK
# (javac), python3, and optionally kazoo (KAZOO_PYTHON, a python that can
# `import kazoo`; skipped if absent). Starts a private standalone ZooKeeper on
# loopback with a temporary dataDir, the capture proxy in front of it, runs
# the drivers, and stops everything it started.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
GOLDEN="$(cd "$HERE/../golden" && pwd)"
ZK_PORT="${ZK_PORT:-21870}"
PROXY_PORT="${PROXY_PORT:-21871}"
CONTROL_PORT="${CONTROL_PORT:-21872}"
KAZOO_PYTHON="${KAZOO_PYTHON:-/tmp/jute-venv/bin/python}"
JARS=/usr/share/java
# zookeeper.jar's manifest Class-Path pulls in netty, jute, metrics, ...
CLASSPATH_ZK="$JARS/zookeeper.jar:$JARS/slf4j-simple.jar"

WORK="$(mktemp -d /tmp/keel-jute-capture.XXXXXX)"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

wait_for_port() {
    for _ in $(seq 100); do
        if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', $1), 0.2)" 2>/dev/null; then
            return 0
        fi
        sleep 0.2
    done
    echo "port $1 did not open" >&2
    return 1
}

for port in "$ZK_PORT" "$PROXY_PORT" "$CONTROL_PORT"; do
    if python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null; then
        echo "port $port is already in use; set ZK_PORT/PROXY_PORT/CONTROL_PORT" >&2
        exit 1
    fi
done

mkdir -p "$WORK/data" "$WORK/out" "$WORK/classes"
cat > "$WORK/zoo.cfg" <<EOF
tickTime=2000
dataDir=$WORK/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
maxClientCnxns=60
4lw.commands.whitelist=*
admin.enableServer=false
EOF

# extendedTypesEnabled (TTL nodes) is a system property, not a zoo.cfg key.
java -Dzookeeper.extendedTypesEnabled=true -Dzookeeper.admin.enableServer=false \
    -cp "$CLASSPATH_ZK" org.apache.zookeeper.server.ZooKeeperServerMain "$WORK/zoo.cfg" \
    > "$WORK/zookeeper.log" 2>&1 &
PIDS+=($!)
wait_for_port "$ZK_PORT"

python3 "$HERE/capture_proxy.py" --listen "127.0.0.1:$PROXY_PORT" \
    --upstream "127.0.0.1:$ZK_PORT" --control "127.0.0.1:$CONTROL_PORT" \
    --out "$WORK/out" > "$WORK/proxy.log" 2>&1 &
PIDS+=($!)
wait_for_port "$CONTROL_PORT"

javac -d "$WORK/classes" -cp "$JARS/zookeeper.jar" "$HERE/GoldenDriver.java"
java -cp "$WORK/classes:$JARS/zookeeper.jar:$JARS/slf4j-nop.jar" \
    GoldenDriver "127.0.0.1:$PROXY_PORT" "$CONTROL_PORT"

if "$KAZOO_PYTHON" -c "import kazoo" 2>/dev/null; then
    "$KAZOO_PYTHON" "$HERE/kazoo_driver.py" "127.0.0.1:$PROXY_PORT" "$CONTROL_PORT"
else
    echo "kazoo not available via $KAZOO_PYTHON; skipping kazoo frames" >&2
fi

rm -f "$GOLDEN"/*.hex
cp "$WORK/out"/*.hex "$GOLDEN/"
echo "captured $(ls "$GOLDEN"/*.hex | wc -l) frames into $GOLDEN (work dir $WORK)"
