#!/usr/bin/env bash
# Installs everything the Keel test suites need. Idempotent: a second run on a
# machine that already has everything does no network access at all.
#
#   * Debian packages zookeeper + zookeeper-bin (Apache ZooKeeper 3.8 jars in
#     /usr/share/java, zkCli.sh, the C client cli_mt), prometheus (the
#     server that scrapes Keel in tests/metrics; installed, never started as a
#     service), openssl (the command line that makes the certificates of
#     tests/cluster/test_peer_auth.py) and faketime (libfaketime: tests/clock
#     moves a server's wall clock), redis-server and redis-tools (tests/kv
#     compares Keel KV with redis-server 7.0; `make compare-kv` runs
#     redis-benchmark), openjdk-17-jdk-headless (javac: the Java-client tests
#     and `make compare-java` compile their Java sources). Runs `apt-get
#     update` only when a package is missing.
#   * Go: the machine's own Go SDK (`go` on PATH or /usr/local/go/bin/go),
#     else Debian's golang-go; then the modules of the Go programs the tests
#     and `make compare-go` build (bench/go, tests/compat/go: Go's ZooKeeper
#     client github.com/go-zookeeper/zk, pinned by their go.sum) are
#     downloaded into Go's module cache (no network once they are there).
#   * Apache Curator 5.5 and Guava from Maven Central into ./.deps/maven,
#     pinned by SHA-256 (tests/compat/test_curator_compat.py).
#   * A Python venv at ./.venv (repo root) with kazoo, pytest, pytest-timeout,
#     pytest-xdist (`make test` runs the suites that neither load the machine
#     nor measure time on two processes), prometheus-client (its text-format parser), pure-sasl (kazoo's SASL
#     DIGEST-MD5, tests/security) and redis (redis-py, tests/kv).
#
# Works as root without sudo; uses sudo only when not root and it exists.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PYTHON="${PYTHON:-python3}"
VENV="${KEEL_VENV:-$ROOT/.venv}"
PY_PKGS=("kazoo==2.11.0" "pytest" "pytest-timeout" "pytest-xdist" "prometheus-client" "pure-sasl" "redis")
APT_PKGS=(zookeeper zookeeper-bin openjdk-17-jdk-headless prometheus openssl faketime redis-server redis-tools)

log() { printf '[test-deps] %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" = 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        log "need root to run: $*"
        return 1
    fi
}

# ---------------------------------------------------------------- Debian packages
missing=()
for p in "${APT_PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Only refresh the lists when the package is unknown or cannot be installed
    # from the current lists.
    if ! as_root apt-get install -y --no-install-recommends "${missing[@]}"; then
        log "apt-get install failed; running apt-get update and retrying"
        as_root apt-get update
        as_root apt-get install -y --no-install-recommends "${missing[@]}"
    fi
else
    log "Debian packages already installed: ${APT_PKGS[*]}"
fi

for f in /usr/share/java/zookeeper.jar /usr/share/java/zookeeper-jute.jar \
         /usr/share/zookeeper/bin/zkCli.sh; do
    [ -e "$f" ] || { log "missing $f after install"; exit 1; }
done
[ -x /usr/lib/zookeeper/bin/cli_mt ] || log "note: /usr/lib/zookeeper/bin/cli_mt absent (C client tests will skip)"
[ -x /usr/bin/prometheus ] || { log "missing /usr/bin/prometheus after install"; exit 1; }
[ -x /usr/bin/redis-server ] || { log "missing /usr/bin/redis-server after install"; exit 1; }
# Debian starts redis-server as a service on 6379 when it can; the tests
# start their own on free ports, and `make run-kv` wants 6379.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet redis-server 2>/dev/null; then
    as_root systemctl disable --now redis-server || log "could not stop the redis-server service"
fi

# ---------------------------------------------------------------- Go
go_bin() {
    if command -v go >/dev/null 2>&1; then command -v go; return; fi
    for g in /usr/local/go/bin/go /usr/lib/go/bin/go; do
        if [ -x "$g" ]; then echo "$g"; return; fi
    done
}
GO="$(go_bin)"
if [ -z "$GO" ]; then
    log "no Go on this machine: installing Debian's golang-go"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get install -y --no-install-recommends golang-go \
        || { as_root apt-get update && as_root apt-get install -y --no-install-recommends golang-go; }
    GO="$(go_bin)"
    [ -n "$GO" ] || { log "missing go after installing golang-go"; exit 1; }
fi
for module in bench/go tests/compat/go; do
    [ -f "$module/go.mod" ] || continue
    if ! (cd "$module" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly "$GO" mod download); then
        log "go mod download failed in $module"
        exit 1
    fi
done
log "Go modules ready ($("$GO" version))"

# ---------------------------------------------------------------- Maven jars
# Apache Curator 5.5 (framework, recipes) and the Guava it needs, for
# tests/compat/test_curator_compat.py; ZooKeeper's own jars come from Debian.
# Pinned by SHA-256, kept in .deps/maven.
MAVEN_DIR="$ROOT/.deps/maven"
MAVEN_CENTRAL="${MAVEN_CENTRAL:-https://repo1.maven.org/maven2}"
MAVEN_JARS=(
    "org/apache/curator/curator-client/5.5.0/curator-client-5.5.0.jar 735cdfd18aae95d3b4e793583933ba3c54f4630225b4dbb807b4dc0fc18fd91a"
    "org/apache/curator/curator-framework/5.5.0/curator-framework-5.5.0.jar ae73926d062be14d37a32a5c024027f38a2920e0d07ba4f82261424d37c8fc38"
    "org/apache/curator/curator-recipes/5.5.0/curator-recipes-5.5.0.jar 3b7a49173ee3910c6256dcec0cac7e6c7c96124fac9758033bc989e6fc880da4"
    "com/google/guava/guava/31.1-jre/guava-31.1-jre.jar a42edc9cab792e39fe39bb94f3fca655ed157ff87a8af78e1d6ba5b07c4a00ab"
    "com/google/guava/failureaccess/1.0.1/failureaccess-1.0.1.jar a171ee4c734dd2da837e4b16be9df4661afab72a41adaf31eb84dfdaf936ca26"
)
mkdir -p "$MAVEN_DIR"
for entry in "${MAVEN_JARS[@]}"; do
    path="${entry% *}"
    want="${entry#* }"
    jar="$MAVEN_DIR/$(basename "$path")"
    if [ -f "$jar" ] && [ "$(sha256sum "$jar" | cut -d' ' -f1)" = "$want" ]; then
        continue
    fi
    log "downloading $(basename "$path") from $MAVEN_CENTRAL"
    curl -fsSL --retry 3 -m 120 -o "$jar.part" "$MAVEN_CENTRAL/$path"
    got="$(sha256sum "$jar.part" | cut -d' ' -f1)"
    if [ "$got" != "$want" ]; then
        rm -f "$jar.part"
        log "$(basename "$path"): SHA-256 $got, expected $want"
        exit 1
    fi
    mv "$jar.part" "$jar"
done
log "Maven jars ready in $MAVEN_DIR"

# ---------------------------------------------------------------- Python venv
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    log "creating venv at $VENV with $PYTHON"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
fi

if "$VENV/bin/python" - <<'PY' >/dev/null 2>&1
import importlib.metadata as m, sys
need = {"kazoo": "2.11.0"}
for name in ("kazoo", "pytest", "pytest-timeout", "pytest-xdist", "prometheus-client", "pure-sasl", "redis"):
    v = m.version(name)
    if name in need and v != need[name]:
        sys.exit(1)
PY
then
    log "venv already has ${PY_PKGS[*]}"
else
    log "installing into venv: ${PY_PKGS[*]}"
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q "${PY_PKGS[@]}"
fi

log "ok"
