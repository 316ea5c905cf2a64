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
#     pinned the same way (tests/compat/test_kafka_compat.py); Apache
#     BookKeeper 4.18.2 (bookies and client, 58 jars, 27 MB) into
#     ./.deps/bookkeeper, pinned the same way
#     (tests/compat/test_bookkeeper_compat.py).
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

# Apache BookKeeper 4.18.2 (the storage of Apache Pulsar) with the runtime
# dependencies `mvn dependency:copy-dependencies` resolves for
# org.apache.bookkeeper:bookkeeper-server:4.18.2, less what a bookie on
# Linux x86_64 without TLS or RocksDB never loads (netty-tcnative, the
# other platforms' natives, rocksdbjni, bc-fips: 79 MB of 105), for
# tests/compat/test_bookkeeper_compat.py. Its own ZooKeeper client
# (3.9.5) stays in this directory. Pinned by SHA-256, kept in
# .deps/bookkeeper.
BOOKKEEPER_DIR="$ROOT/.deps/bookkeeper"
BOOKKEEPER_JARS=(
    "org/apache/yetus/audience-annotations/0.12.0/audience-annotations-0.12.0.jar ffb101fc066360ff3c77457c927fd7967fb096a6ee9e046ab7071447d8208efc"
    "org/apache/bookkeeper/bookkeeper-common/4.18.2/bookkeeper-common-4.18.2.jar 980ca282c0c17881a744240158e7e34843d2e11117e31e94b0e9964f84682f38"
    "org/apache/bookkeeper/bookkeeper-common-allocator/4.18.2/bookkeeper-common-allocator-4.18.2.jar c632b2964dab054387cfea22092f3261afe4a0dbe23987d804bdb585c9031c4e"
    "org/apache/bookkeeper/bookkeeper-proto/4.18.2/bookkeeper-proto-4.18.2.jar a0c52217b061b364374f066bda20c4bb01a5d15aee0e0d4e066c93971f806f05"
    "org/apache/bookkeeper/bookkeeper-server/4.18.2/bookkeeper-server-4.18.2.jar 741ee41ce428cf52596fc4b0318a8d6b8d71556e05d4c8d56842d7c423a6d3d2"
    "org/apache/bookkeeper/stats/bookkeeper-stats-api/4.18.2/bookkeeper-stats-api-4.18.2.jar 73b2cfad965b64dce465d35d2fe8e1c00a68a603085eaa9b73fb7815d8ccbc04"
    "org/apache/bookkeeper/bookkeeper-tools-framework/4.18.2/bookkeeper-tools-framework-4.18.2.jar 7b3ca96f11e0d1e4b384847261bc20a2ee6df723401804a778645fdecadfe772"
    "org/checkerframework/checker-qual/3.33.0/checker-qual-3.33.0.jar e316255bbfcd9fe50d165314b85abb2b33cb2a66a93c491db648e498a82c2de1"
    "org/apache/bookkeeper/circe-checksum/4.18.2/circe-checksum-4.18.2.jar ac6dcd0c08c8141d20784f6a2d2587509e12554a203e335845988aa4463beeb3"
    "commons-beanutils/commons-beanutils/1.11.0/commons-beanutils-1.11.0.jar 9e44ba68ec9a3f21286fa2a8bbb003b735c0f69101bb43144b79f4f8aaa74709"
    "commons-cli/commons-cli/1.9.0/commons-cli-1.9.0.jar d3d530d0f28fd0fbbffe2b0b338f70e8cb96f1605579e2e3abd4db29cac24e69"
    "commons-codec/commons-codec/1.18.0/commons-codec-1.18.0.jar ba005f304cef92a3dede24a38ad5ac9b8afccf0d8f75839d6c1338634cf7f6e4"
    "org/apache/commons/commons-collections4/4.1/commons-collections4-4.1.jar b1fe8b5968b57d8465425357ed2d9dc695504518bed2df5b565c4b8e68c1c8a5"
    "org/apache/commons/commons-configuration2/2.15.1/commons-configuration2-2.15.1.jar 61ba5eaab8a17087042fe3d6811573bb85ccbdd6bd9d21ad464e6e20559dd1e8"
    "commons-io/commons-io/2.19.0/commons-io-2.19.0.jar 824268919b4b62f9f40f08c54381de5993b078f58667e332d17348ae019d72b9"
    "org/apache/commons/commons-lang3/3.20.0/commons-lang3-3.20.0.jar 69e5c9fa35da7a51a5fd2099dfe56a2d8d32cf233e2f6d770e796146440263f4"
    "commons-logging/commons-logging/1.2/commons-logging-1.2.jar daddea1ea0be0f56978ab3006b8ac92834afeefbd9b7e4e6316fca57df0fa636"
    "org/apache/commons/commons-text/1.15.0/commons-text-1.15.0.jar 58d2da30f058512a1e7f914e39241deca4dff5c27a085b4ed2faa9e7208067f6"
    "org/apache/bookkeeper/cpu-affinity/4.18.2/cpu-affinity-4.18.2.jar e53359888cbdf212e9682fde933da604bd5382deea51fcee3dde587e9942375b"
    "com/lmax/disruptor/4.0.0/disruptor-4.0.0.jar c2ba80841541272bc815bcadab910d2d716aa563eca15762450ab4c889440505"
    "com/google/errorprone/error_prone_annotations/2.18.0/error_prone_annotations-2.18.0.jar 9e6814cb71816988a4fd1b07a993a8f21bb7058d522c162b1de849e19bea54ae"
    "com/google/guava/failureaccess/1.0.1/failureaccess-1.0.1.jar a171ee4c734dd2da837e4b16be9df4661afab72a41adaf31eb84dfdaf936ca26"
    "com/google/guava/guava/32.0.1-jre/guava-32.0.1-jre.jar bd7fa227591fb8509677d0d1122cf95158f3b8a9f45653f58281d879f6dc48c5"
    "com/carrotsearch/hppc/0.9.1/hppc-0.9.1.jar d58706a2be60c972452550cdba79870bf481447c50eb718308e33a6ba45c65ec"
    "org/apache/bookkeeper/http/http-server/4.18.2/http-server-4.18.2.jar f6e03b374e910cab50f06e7d9f789fa70edfa0ec07c30521eaf8c1adec871605"
    "org/apache/httpcomponents/httpclient/4.5.13/httpclient-4.5.13.jar 6fe9026a566c6a5001608cf3fc32196641f6c1e5e1986d1037ccdbd5f31ef743"
    "org/apache/httpcomponents/httpcore/4.4.13/httpcore-4.4.13.jar e06e89d40943245fcfa39ec537cdbfce3762aecde8f9c597780d2b00c2b43424"
    "com/google/j2objc/j2objc-annotations/2.8/j2objc-annotations-2.8.jar f02a95fa1a5e95edb3ed859fd0fb7df709d121a35290eff8b74dce2ab7f4d6ed"
    "com/fasterxml/jackson/core/jackson-annotations/2.17.1/jackson-annotations-2.17.1.jar fccad82e13172c0e4384db71577219c9b8631c0820f4b18daaa57016fb661c76"
    "com/fasterxml/jackson/core/jackson-core/2.17.1/jackson-core-2.17.1.jar ddb26c8a1f1a84535e8213c48b35b253370434e3287b3cf15777856fc4e58ce6"
    "com/fasterxml/jackson/core/jackson-databind/2.17.1/jackson-databind-2.17.1.jar b6ca2f7d5b1ab245cec5495ec339773d2d90554c48592590673fb18f4400a948"
    "com/beust/jcommander/1.82/jcommander-1.82.jar deeac157c8de6822878d85d0c7bc8467a19cc8484d37788f7804f039dde280b1"
    "org/jctools/jctools-core/4.0.6/jctools-core-4.0.6.jar 374fb4660436a70ba131e15ca7bab8423424c737898a894fb276841c94bdd962"
    "org/jctools/jctools-core-jdk11/4.0.6/jctools-core-jdk11-4.0.6.jar daa0972bf12c8e2aaefd02069a6b47b1f2cf36f0f859f3a0d02223ebf3f10063"
    "com/google/code/findbugs/jsr305/3.0.2/jsr305-3.0.2.jar 766ad2a0783f2687962c8ad74ceecc38a28b9f72a2d085ee438b7813e928d0c7"
    "com/google/guava/listenablefuture/9999.0-empty-to-avoid-conflict-with-guava/listenablefuture-9999.0-empty-to-avoid-conflict-with-guava.jar b372a037d4230aa57fbeffdef30fd6123f9c0c2db85d0aced00c91b974f33f99"
    "org/apache/logging/log4j/log4j-api/2.23.1/log4j-api-2.23.1.jar 92ec1fd36ab3bc09de6198d2d7c0914685c0f7127ea931acc32fd2ecdd82ea89"
    "org/apache/logging/log4j/log4j-core/2.23.1/log4j-core-2.23.1.jar 7079368005fc34f56248f57f8a8a53361c3a53e9007d556dbc66fc669df081b5"
    "org/apache/logging/log4j/log4j-slf4j2-impl/2.23.1/log4j-slf4j2-impl-2.23.1.jar fcc0f68d71152112ce7ca9bf2388dc6d735beee9b699da230a94deef7f4c81c8"
    "org/apache/bookkeeper/native-io/4.18.2/native-io-4.18.2.jar efe0bfee0917159944904173440a75958d596d55f0ca9b7862d1056412b07df3"
    "org/apache/bookkeeper/native-library-common/4.18.2/native-library-common-4.18.2.jar 743bf8ab13b731a6fac3d63b11f838e9f86b1f302d2e5615afe81539332957e9"
    "io/netty/netty-buffer/4.2.14.Final/netty-buffer-4.2.14.Final.jar 1a781d45cbbf1524159840e40d16e5cbc4e6e04eaac26381b00e433eface3e35"
    "io/netty/netty-codec-base/4.2.14.Final/netty-codec-base-4.2.14.Final.jar e6c72017b7118bfe90ebdcaa8bb7d02769499b07be0f1667b7719bab93e37056"
    "io/netty/netty-common/4.2.14.Final/netty-common-4.2.14.Final.jar f157563175b07dbf252924e12390b87e3772ea0a9bf6f7505e7367f26fd722d1"
    "io/netty/netty-handler/4.2.14.Final/netty-handler-4.2.14.Final.jar a23de2261ff904be5eb988eb117b185e15d9997b09304ef0a98fd587abd2e09f"
    "io/netty/netty-resolver/4.2.14.Final/netty-resolver-4.2.14.Final.jar 9c261739a11dbe90a6d2f9bf72dbfb780d776fa086e48e6a9263684e481ea257"
    "io/netty/netty-transport/4.2.14.Final/netty-transport-4.2.14.Final.jar 6f184bc1946a022cb4556c50f35edfd6335ccf02587ea2c520131b5774f5f063"
    "io/netty/netty-transport-classes-epoll/4.2.14.Final/netty-transport-classes-epoll-4.2.14.Final.jar 00a2ec5fd5f9258a09b198aee43234ec879dc0af520b8d1977b8bd7010443362"
    "io/netty/netty-transport-classes-io_uring/4.2.14.Final/netty-transport-classes-io_uring-4.2.14.Final.jar d37799a57bdc17e386757e2aabcfd3ac2d877c642bf25f7734790f945feab3e3"
    "io/netty/netty-transport-native-epoll/4.2.14.Final/netty-transport-native-epoll-4.2.14.Final-linux-x86_64.jar e567c1097de567644de02bd6da4247b0ab1d2721bbb87e528e25eb4b99ab6019"
    "io/netty/netty-transport-native-io_uring/4.2.14.Final/netty-transport-native-io_uring-4.2.14.Final-linux-x86_64.jar 110b2d63040a54060ea9117863a3266be4a40e25c370610ca2aedd43a5d43a41"
    "io/netty/netty-transport-native-unix-common/4.2.14.Final/netty-transport-native-unix-common-4.2.14.Final.jar 6c57976b2bcc87097cb9e9c52b4d55191d2550ac3bddd29e890cb2150b9a5ff0"
    "org/reactivestreams/reactive-streams/1.0.3/reactive-streams-1.0.3.jar 1dee0481072d19c929b623e155e14d2f6085dc011529a0a0dbefc84cf571d865"
    "io/reactivex/rxjava3/rxjava/3.0.1/rxjava-3.0.1.jar 0bb2cae968bcd0822d9201c66ed958499c2839021e6dd10273acdc1c4bc41a19"
    "org/slf4j/slf4j-api/2.0.12/slf4j-api-2.0.12.jar a79502b8abdfbd722846a27691226a4088682d6d35654f9b80e2a9ccacf7ed47"
    "io/github/merlimat/slog/slog/0.9.9/slog-0.9.9.jar 1cfc2657f2e28a1b5f9ebc1465dfa0a53c9f9ba60f99801064e5c13de6e4e4bb"
    "org/apache/zookeeper/zookeeper/3.9.5/zookeeper-3.9.5.jar 936d025db1a85f085edea25048c3f5b3de5fc29329c371a10925e3b78b0b38a0"
    "org/apache/zookeeper/zookeeper-jute/3.9.5/zookeeper-jute-3.9.5.jar abcbc7f9d6c493daa118da6fa3061a201e2c521217526e8535adfb56b629e52a"
)
fetch_pinned "$BOOKKEEPER_DIR" "${BOOKKEEPER_JARS[@]}"
log "BookKeeper jars ready in $BOOKKEEPER_DIR"

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
