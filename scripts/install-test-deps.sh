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
#     pinned by SHA-256 (tests/compat/test_curator_compat.py); Apache Kafka
#     3.9.1 (its broker in ZooKeeper mode, 56 jars, 46 MB) into ./.deps/kafka,
#     pinned the same way (tests/compat/test_kafka_compat.py).
#   * chDB 4.4.0 (ClickHouse 26.9 embedded in Python) in its own venv at
#     ./.deps/chdb-venv (tests/compat/test_clickhouse_compat.py).
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
# fetch_pinned DIR "PATH SHA256"...: each jar from Maven Central into DIR
# unless DIR holds it with that SHA-256 already.
fetch_pinned() {
    local dir="$1" entry path want jar got
    shift
    mkdir -p "$dir"
    for entry in "$@"; do
        path="${entry% *}"
        want="${entry#* }"
        jar="$dir/$(basename "$path")"
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
}
fetch_pinned "$MAVEN_DIR" "${MAVEN_JARS[@]}"
log "Maven jars ready in $MAVEN_DIR"

# Apache Kafka 3.9.1, the last release that keeps its metadata in
# ZooKeeper, with its runtime dependencies (as `mvn dependency:copy-dependencies`
# resolves org.apache.kafka:kafka_2.13:3.9.1, plus slf4j-simple for its
# log), for tests/compat/test_kafka_compat.py: a real broker on Keel. Its
# own ZooKeeper client jar (3.8.4) stays in this directory, apart from
# Debian's. Pinned by SHA-256, kept in .deps/kafka.
KAFKA_DIR="$ROOT/.deps/kafka"
KAFKA_JARS=(
    "net/sourceforge/argparse4j/argparse4j/0.7.0/argparse4j-0.7.0.jar 65ceb669d88f63306c680f8088bbf765bbca72d288a61a03703000076c3d3f56"
    "org/apache/yetus/audience-annotations/0.12.0/audience-annotations-0.12.0.jar ffb101fc066360ff3c77457c927fd7967fb096a6ee9e046ab7071447d8208efc"
    "com/github/ben-manes/caffeine/caffeine/2.9.3/caffeine-2.9.3.jar 1e0a7bbef1dd791653143f3f05d0e489934bf5481e58a87c9e619cd46b68729b"
    "commons-beanutils/commons-beanutils/1.9.4/commons-beanutils-1.9.4.jar 7d938c81789028045c08c065e94be75fc280527620d5bd62b519d5838532368a"
    "commons-cli/commons-cli/1.4/commons-cli-1.4.jar fd3c7c9545a9cdb2051d1f9155c4f76b1e4ac5a57304404a6eedb578ffba7328"
    "commons-collections/commons-collections/3.2.2/commons-collections-3.2.2.jar eeeae917917144a68a741d4c0dff66aa5c5c5fd85593ff217bced3fc8ca783b8"
    "commons-digester/commons-digester/2.1/commons-digester-2.1.jar e0b2b980a84fc6533c5ce291f1917b32c507f62bcad64198fff44368c2196a3d"
    "commons-io/commons-io/2.14.0/commons-io-2.14.0.jar e35d1df7232568ed4b81d9a9ed94a0159b3ff6cf1915cc21eef5cb55d7b157a2"
    "commons-logging/commons-logging/1.2/commons-logging-1.2.jar daddea1ea0be0f56978ab3006b8ac92834afeefbd9b7e4e6316fca57df0fa636"
    "commons-validator/commons-validator/1.7/commons-validator-1.7.jar 4d74f4ce4fb68b2617edad086df6defdf9338467d2377d2c62e69038e1c4f02f"
    "com/google/errorprone/error_prone_annotations/2.10.0/error_prone_annotations-2.10.0.jar a249d4d25dfb86d41e6c82fc335df580189f0c9feeabdc53233fc1e5060724a1"
    "com/fasterxml/jackson/core/jackson-annotations/2.16.2/jackson-annotations-2.16.2.jar d1cdd269ebaa753d1842933194e17d61958f058952d63e03dbfb3d1d78a6926e"
    "com/fasterxml/jackson/core/jackson-core/2.16.2/jackson-core-2.16.2.jar 4f43e2f1430b2d2413e8e5a3d79138e57e891d6a961b18c28ac90859639d8664"
    "com/fasterxml/jackson/core/jackson-databind/2.16.2/jackson-databind-2.16.2.jar 53b6025d98c357068296e4b134242443a248c2c582800879f1c4ea93b54bafa6"
    "com/fasterxml/jackson/dataformat/jackson-dataformat-csv/2.16.2/jackson-dataformat-csv-2.16.2.jar 01a04610def154c50369e8bcd7c5ae1401579f591aa55e88f05093447e24d490"
    "com/fasterxml/jackson/datatype/jackson-datatype-jdk8/2.16.2/jackson-datatype-jdk8-2.16.2.jar 3e9b1b59f638b487b5ae0e2f4190fc98f72b0bf661324e7dfc71a69f6b9d4e29"
    "com/fasterxml/jackson/module/jackson-module-scala_2.13/2.16.2/jackson-module-scala_2.13-2.16.2.jar 1154f6dc8643739c0c3ef4c2a7901ca752b5cca7ebe1908d405ced701a8f3764"
    "net/sf/jopt-simple/jopt-simple/5.0.4/jopt-simple-5.0.4.jar df26cc58f235f477db07f753ba5a3ab243ebe5789d9f89ecf68dd62ea9a66c28"
    "org/bitbucket/b_c/jose4j/0.9.4/jose4j-0.9.4.jar 9012aa4c20319d35159030c3bdecade66863030a98338bfdf73a5238849fb9d9"
    "org/apache/kafka/kafka-clients/3.9.1/kafka-clients-3.9.1.jar 7568b998572d256f0b7bc0afdc1b7a2588b8b08415c62ce314c864a6851ae9d9"
    "org/apache/kafka/kafka-group-coordinator/3.9.1/kafka-group-coordinator-3.9.1.jar fd30310533df51b17d14beb8eb8c9006a9ebb90b536c319776429e413f622a69"
    "org/apache/kafka/kafka-group-coordinator-api/3.9.1/kafka-group-coordinator-api-3.9.1.jar cb267d841def1172d8db24a830936f1c6aaf29c3de5bdbc5bbc42b67d8cb82c0"
    "org/apache/kafka/kafka-metadata/3.9.1/kafka-metadata-3.9.1.jar 35c35118d4abb0b747ad68d1e0be00d5bd02206b462ad76ebbcd85b33436f13a"
    "org/apache/kafka/kafka-raft/3.9.1/kafka-raft-3.9.1.jar 0d4236cf868f8668c74c49bec4bed41e400bb13d6d381a0f8e9843585b2f159f"
    "org/apache/kafka/kafka-server/3.9.1/kafka-server-3.9.1.jar 02b5a92645865e3152e9d1d829f6d4c4b4272f637b7fe4a2b00cabcbcd8df6f4"
    "org/apache/kafka/kafka-server-common/3.9.1/kafka-server-common-3.9.1.jar 99f1f5f81e9d39cfbe5c96ab8e3854be8deca465937192c9a6e2f231678d31f6"
    "org/apache/kafka/kafka-storage/3.9.1/kafka-storage-3.9.1.jar a3041e6192a37e5508519d776f8af93b74d3fd23174b03e270c0394f1c77b59f"
    "org/apache/kafka/kafka-storage-api/3.9.1/kafka-storage-api-3.9.1.jar f466777625641d4bca1314d80206eafa9e2494326496ad626489ba0a0ef479fc"
    "org/apache/kafka/kafka-tools-api/3.9.1/kafka-tools-api-3.9.1.jar c365c872ffc9a04886f248c5fd90067829ed4064fcd8fe5e12611b163cd053b4"
    "org/apache/kafka/kafka-transaction-coordinator/3.9.1/kafka-transaction-coordinator-3.9.1.jar 45b852f2e6e501d4dbdd43b97c4057e6cb6827b76e5aabcffcae8b8e2918554f"
    "org/apache/kafka/kafka_2.13/3.9.1/kafka_2.13-3.9.1.jar 5631c61356d55611c158291a69ad028f3c4fed5d0a610c62a0853c65c89d10f6"
    "org/lz4/lz4-java/1.8.0/lz4-java-1.8.0.jar d74a3334fb35195009b338a951f918203d6bbca3d1d359033dc33edd1cadc9ef"
    "com/yammer/metrics/metrics-core/2.2.0/metrics-core-2.2.0.jar 6b7a14a6f34c10f8683f7b5e2f39df0f07b58c7dff0e468ebbc713905c46979c"
    "io/dropwizard/metrics/metrics-core/4.1.12.1/metrics-core-4.1.12.1.jar cec34936faa625039f4e46123eccaa10a9eb9d9a40c6075830cd81330e259cf9"
    "io/netty/netty-buffer/4.1.105.Final/netty-buffer-4.1.105.Final.jar cc1b0108a60b1eb69bd01a10922851a166c58972cc0683f2116a9e8e7ecdaf0b"
    "io/netty/netty-codec/4.1.105.Final/netty-codec-4.1.105.Final.jar c4f62480b408fb835b454c74cf6394a4c7088ffdaec78742fcece816c46bb58e"
    "io/netty/netty-common/4.1.105.Final/netty-common-4.1.105.Final.jar 399a8045fb43861afb7fc1ef3371f95a0b176692fb268f4867cff4957e63fd25"
    "io/netty/netty-handler/4.1.105.Final/netty-handler-4.1.105.Final.jar 5a6945cf1de374628b37ab1c35a4c47c2f5616db3a94b150720641477112be8e"
    "io/netty/netty-resolver/4.1.105.Final/netty-resolver-4.1.105.Final.jar 7202edd076a1edab50fdb0f3e54f56a02129b326296d9f35f4194f8cfb9b96ef"
    "io/netty/netty-transport/4.1.105.Final/netty-transport-4.1.105.Final.jar be9b8a2f86685a876e469c904cb9fce53a1e826e178d44d2b1d92f6a99054737"
    "io/netty/netty-transport-classes-epoll/4.1.105.Final/netty-transport-classes-epoll-4.1.105.Final.jar a43bf94f784eb759c14f0b0c7e1c5985a64879e8c7ab21ba7c0c80f7a9382b30"
    "io/netty/netty-transport-native-epoll/4.1.105.Final/netty-transport-native-epoll-4.1.105.Final.jar 61f09ce16f0fd25e57a0a732f8fb79344f6b95051d88ac50a28874ad92e6d149"
    "io/netty/netty-transport-native-unix-common/4.1.105.Final/netty-transport-native-unix-common-4.1.105.Final.jar 7db91b72aae19e1cdca13c7fa76d57db20cbaf5b1e770563909a4437c63eb5cb"
    "com/thoughtworks/paranamer/paranamer/2.8/paranamer-2.8.jar 688cb118a6021d819138e855208c956031688be4b47a24bb615becc63acedf07"
    "org/pcollections/pcollections/4.0.1/pcollections-4.0.1.jar 1f82766d7c3221930854033bebff5073ea46b43f27326074bbe15d148c18bfb3"
    "org/scala-lang/modules/scala-collection-compat_2.13/2.10.0/scala-collection-compat_2.13-2.10.0.jar bb10091bd55131a5327bdeddede74e5d8a695acab24a97567111784f2f427299"
    "org/scala-lang/modules/scala-java8-compat_2.13/1.0.2/scala-java8-compat_2.13-1.0.2.jar 90d5b13656be93fb779b8d7c723efa2498a34af06273bb5204afb65f85a20c1b"
    "org/scala-lang/scala-library/2.13.15/scala-library-2.13.15.jar 8e4dbc3becf70d59c787118f6ad06fab6790136a0699cd6412bc9da3d336944e"
    "com/typesafe/scala-logging/scala-logging_2.13/3.9.5/scala-logging_2.13-3.9.5.jar 87a3017d3f43e6ace7566fe4c3d615134c6914ff871c8d64bb32ca1d996d0545"
    "org/scala-lang/scala-reflect/2.13.15/scala-reflect-2.13.15.jar 78d0cc350e1ee42d87c6e11cf5b0dc7bf0b70829c00aa38f27bfb019d439dc11"
    "org/slf4j/slf4j-api/1.7.36/slf4j-api-1.7.36.jar d3ef575e3e4979678dc01bf1dcce51021493b4d11fb7f1be8ad982877c16a1c0"
    "org/slf4j/slf4j-simple/1.7.36/slf4j-simple-1.7.36.jar 2f39bed943d624dfa8f4102d0571283a10870b6aa36f197a8a506f147010c10f"
    "org/xerial/snappy/snappy-java/1.1.10.5/snappy-java-1.1.10.5.jar 0f3f1857ed33116583f480b4df5c0218836c47bfbc9c6221c0d73f356decf37b"
    "org/apache/zookeeper/zookeeper/3.8.4/zookeeper-3.8.4.jar 2d77b152039e7f85dc5438a9304febff86a2f3e55c88976a8be309af39028e97"
    "org/apache/zookeeper/zookeeper-jute/3.8.4/zookeeper-jute-3.8.4.jar 93e854b55d731e745bafec187e2e7bf3389fd2a88e2fc8d1a3c1b9110284b284"
    "com/github/luben/zstd-jni/1.5.6-4/zstd-jni-1.5.6-4.jar 793ca8734aa15687e7e64564eab8b6ae9ee2720eae27aa663074682144b1c386"
)
fetch_pinned "$KAFKA_DIR" "${KAFKA_JARS[@]}"
log "Kafka jars ready in $KAFKA_DIR"

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

# ---------------------------------------------------------------- chDB
# ClickHouse itself, embedded: chDB 4.4.0 (ClickHouse 26.9 as a Python
# extension, with pandas and pyarrow: about 550 MB installed) in a venv of
# its own, so the test venv stays small; tests/compat/test_clickhouse_compat.py
# runs ClickHouse's ZooKeeper client with it.
CHDB_VENV="$ROOT/.deps/chdb-venv"
CHDB_PKGS=("chdb==4.4.0" "chdb-core==26.9.0")
if "$CHDB_VENV/bin/python" - <<'PY' >/dev/null 2>&1
import importlib.metadata as m, sys
sys.exit(m.version("chdb") != "4.4.0" or m.version("chdb-core") != "26.9.0")
PY
then
    log "chDB venv already has ${CHDB_PKGS[*]}"
else
    log "installing ${CHDB_PKGS[*]} into $CHDB_VENV"
    rm -rf "$CHDB_VENV"
    "$PYTHON" -m venv "$CHDB_VENV"
    "$CHDB_VENV/bin/python" -m pip install --disable-pip-version-check -q "${CHDB_PKGS[@]}"
fi

log "ok"
