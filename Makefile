# Keel: build, run, and test against real Apache ZooKeeper 3.8.
#
#   make run            build and serve on 127.0.0.1:2181 with data in ./keel-data,
#                       Prometheus metrics on 127.0.0.1:7000/metrics
#   make run-kv         Keel KV: a single node serving the Redis protocol on 127.0.0.1:6379,
#                       data in ./keel-kv-data (ZooKeeper port 2182)
#   make test           everything CI runs (deps, build, cargo tests, Python suites)
#   make test-compat    differential suites (kazoo/raw, Java client, C client, zkCli.sh) + bad input
#   make test-crash     kill -9 durability test (KEEL_CRASH_KILLS=N for more kills)
#   make test-selfcheck the Python suites with ZooKeeper in place of Keel (validates the harness)
#   make sim            simulator soak: SIM_FIRST_SEED=N SIM_SEEDS=M (default 0 and 1000)
#   make fuzz           cargo-fuzz targets: FUZZ_TARGET=name (default all) FUZZ_SECONDS=S
#   make compare        Keel vs a 3-node ZooKeeper 3.8 ensemble under keel bench, both also with TLS
#                       on client and member links (BENCHMARKS.md; COMPARE_DURATION=S per run,
#                       COMPARE_ROUNDS=N rounds with medians, COMPARE_SYSTEMS=zookeeper,keel: no TLS)
#   make compare-java   the same clusters under ZooKeeper's own Java client (bench/java/LoadGen.java,
#                       bench/java_compare.py: COMPARE_DURATION, COMPARE_WARMUP, COMPARE_CLIENTS)
#   make compare-go     the same under Go's client github.com/go-zookeeper/zk (bench/go/loadgen,
#                       bench/go_compare.py: the same variables)
#   make compare-kv     Keel KV (1 and 3 nodes) vs redis-server 7.0 (appendfsync always/everysec)
#                       under redis-benchmark, ratios printed (bench/compare_kv.py)
#   make scale          Keel vs ZooKeeper 3.8 holding SCALE_ZNODES znodes (default 10,000,000):
#                       RSS per znode, snapshot under load, restart (bench/scale.py, BENCHMARKS.md)
#   make replay         Keel vs ZooKeeper 3.8 log replay rate after kill -9, no snapshot (bench/replay.py)
#   make rolling-restart  restart every node of a 3-node cluster in turn under write load; per restart the
#                       longest write pause, reconnects, and at the end lost writes and expired sessions
#                       (tests/cluster/rolling.py: ROLLING_ROUNDS (2), ROLLING_WRITERS_PER_NODE (2))
#   make nemesis        fault campaign on a real cluster, every history checked (tests/nemesis, docs/RELIABILITY.md):
#                       NEMESIS_SECONDS (180) NEMESIS_NODES (3 or 5) NEMESIS_SEED (random)
#
# PYTEST_ARGS="-k watch -x" passes extra arguments to pytest.

SHELL       := /bin/bash
CARGO       ?= cargo
VENV        ?= .venv
PY          := $(VENV)/bin/python
KEEL        := target/release/keel
PYTEST      := $(PY) -m pytest
PYTEST_ARGS ?=
SUITES      := tests/compat tests/badinput tests/crash tests/cluster tests/metrics tests/security tests/storage tests/clock tests/scale tests/nemesis tests/kv
# suites that compare against ZooKeeper (the cluster suite is Keel-only)
SELFCHECK_SUITES := tests/compat tests/badinput tests/crash
# Test files that spend most of their time waiting (servers starting,
# sessions expiring, JVMs, faults healing) and measure no short time:
# `make test` runs them first on PYTEST_WORKERS processes (pytest-xdist,
# one file per worker at a time), then every other test file of SUITES one
# test at a time. A new test file runs alone unless listed here. The list
# is ordered longest first (tests/work/parallel.xml of the last run has
# each test's seconds) and runs in this order, so no long file starts last.
PARALLEL_TESTS := tests/compat/test_kafka_failover.py tests/compat/test_cli_compat.py \
	tests/nemesis/test_nemesis.py tests/security/test_tls.py tests/compat/test_kafka_compat.py \
	tests/cluster/test_catchup.py tests/compat/test_java_compat.py tests/cluster/test_read_only.py \
	tests/kv/test_kv_concurrency.py tests/cluster/test_churn.py tests/compat/test_kazoo_compat.py tests/compat/test_loadgen.py \
	tests/metrics/test_prometheus.py tests/cluster/test_reconfig.py tests/cluster/test_zk_concurrency.py \
	tests/cluster/test_cluster.py tests/compat/test_bookkeeper_compat.py tests/badinput/test_badinput.py \
	tests/kv/test_kv_durability.py tests/crash/test_crash.py tests/compat/test_go_compat.py \
	tests/security/test_sasl.py tests/cluster/test_curator_failover.py tests/storage/test_full_disk.py \
	tests/compat/test_curator_compat.py tests/compat/test_random_compat.py tests/cluster/test_peer_auth.py \
	tests/compat/test_clickhouse_compat.py tests/storage/test_log_io_modes.py tests/compat/test_restart_compat.py \
	tests/crash/test_snapshot_corruption.py tests/kv/test_redis_diff.py tests/badinput/test_config.py \
	tests/compat/test_clickhouse_ext.py tests/compat/test_digest_compat.py tests/storage/test_storage_faults.py \
	tests/kv/test_redis_random_diff.py tests/storage/test_io_errors.py tests/storage/test_fixture_datadir.py \
	tests/nemesis/test_checks.py
PYTEST_WORKERS ?= 4
# tests/scale prints ZooKeeper 3.8's numbers beside Keel's when this is 1
# (never asserted; about a minute more): `make test KEEL_SCALE_ZOOKEEPER=1`.
KEEL_SCALE_ZOOKEEPER ?= 0
export KEEL_SCALE_ZOOKEEPER
# Both runs always happen; the target fails if either fails (pytest's 5,
# "no tests collected", is not a failure: PYTEST_ARGS="-k ..." may select
# nothing in one of them). Each leaves its per-test seconds in tests/work.
define run_python_suites
	status=0; \
	$(PYTEST) $(PARALLEL_TESTS) -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder \
		--durations=10 --junitxml=tests/work/parallel.xml $(PYTEST_ARGS) \
		|| [ $$? -eq 5 ] || status=1; \
	$(PYTEST) $(SUITES) $(addprefix --ignore=,$(PARALLEL_TESTS)) --durations=25 \
		--junitxml=tests/work/serial.xml $(PYTEST_ARGS) \
		|| [ $$? -eq 5 ] || status=1; \
	exit $$status
endef

.PHONY: all build run run-kv cluster test test-build test-deps cargo-test test-compat test-crash test-badinput test-selfcheck test-python clean-test compare compare-java compare-go compare-kafka compare-failover compare-kv scale replay sim fuzz nemesis rolling-restart

all: build

# keel-linearize: the history checker tests/nemesis runs.
build:
	$(CARGO) build --release -p keel -p keel-linearize

cluster: build
	bash scripts/cluster.sh 3

run: build
	$(KEEL) server --client-port 2181 --data-dir ./keel-data --metrics-port 7000

# Keel KV: a single node serving the Redis protocol on 6379 (redis-cli, redis-py,
# redis-benchmark), its data in ./keel-kv-data; the ZooKeeper port on 2182.
run-kv: build
	$(KEEL) server --client-port 2182 --data-dir ./keel-kv-data --resp-port 6379

test-deps:
	bash scripts/install-test-deps.sh

cargo-test:
	$(CARGO) test --workspace --release

clean-test:
	rm -rf tests/work

# The test dependencies install while cargo compiles the workspace's tests;
# both finish before any test runs (crates/client's tests use Debian's
# ZooKeeper).
test-build:
	@bash scripts/install-test-deps.sh & deps=$$!; \
	$(CARGO) test --workspace --release --no-run; built=$$?; \
	if ! wait $$deps; then echo "make test: installing the test dependencies failed (above)" >&2; exit 1; fi; \
	exit $$built

# `build` after `cargo-test`: the workspace test build unifies the crates'
# `testing` features (fuzzing helpers, planted bugs) into its keel binary;
# the Python suites run the production binary, built without them.
test: test-build cargo-test build clean-test
	$(run_python_suites)

test-python: test-deps clean-test
	$(run_python_suites)

test-compat: test-deps build clean-test
	$(PYTEST) tests/compat tests/badinput $(PYTEST_ARGS)

test-badinput: test-deps build clean-test
	$(PYTEST) tests/badinput $(PYTEST_ARGS)

test-crash: test-deps build clean-test
	$(PYTEST) tests/crash -s $(PYTEST_ARGS)

# ZooKeeper vs ZooKeeper: needs no Keel binary; every comparison must pass.
test-selfcheck: test-deps clean-test
	KEEL_COMPAT_AGAINST=zookeeper $(PYTEST) $(SELFCHECK_SUITES) $(PYTEST_ARGS)

# Keel KV vs redis-server 7.0 (appendfsync always and everysec), single-node and
# 3-node Keel, under redis-benchmark (SET, GET, INCR, MSET; -P 1 and 16; 50 clients):
# COMPARE_KV_REQUESTS (200000 per run), COMPARE_KV_PIPELINED_REQUESTS (800000 per -P 16 run),
# COMPARE_KV_CLIENTS, COMPARE_KV_KEYSPACE, COMPARE_KV_SHARDS (the Keel nodes' kv_shards).
compare-kv: test-deps build
	python3 bench/compare_kv.py

# Side-by-side benchmark vs a 3-node ZooKeeper 3.8 ensemble (COMPARE_DURATION=S per run).
compare: test-deps build
	python3 bench/compare.py

# The same side-by-side run with the load from Apache ZooKeeper's Java client
# (bench/java/LoadGen.java, compiled into bench/work): create and mix at
# COMPARE_CLIENTS sessions (default 10,100,400), COMPARE_DURATION=S per run (default 10).
# Kafka's metadata work (a real Kafka 3.9.1 broker in ZooKeeper mode: start,
# topic creation, deletion) on 3-node ZooKeeper and 3-node Keel, alternating
# (bench/kafka_compare.py: KAFKA_COMPARE_ROUNDS, _TOPICS, _PARTITIONS).
compare-kafka: test-deps build
	python3 bench/kafka_compare.py

# How long a leader's failure (kill -9, SIGSTOP) stops a writer and a reader
# on another member, 3-node ZooKeeper against 3-node Keel, alternating
# (bench/failover_compare.py: FAILOVER_ROUNDS, default 5).
compare-failover: test-deps build
	$(PY) bench/failover_compare.py

compare-java: test-deps build
	python3 bench/java_compare.py

# The same with the load from Go's client github.com/go-zookeeper/zk
# (bench/go/loadgen, built into bench/work): same variables as compare-java.
compare-go: test-deps build
	python3 bench/go_compare.py

# Single-node Keel, then single-node ZooKeeper 3.8, each filled with SCALE_ZNODES znodes
# (bench/scale.py; results in bench/work/scale.json). Long: run it on a quiet machine.
SCALE_ZNODES ?= 10000000
scale: test-deps build
	SCALE_ZNODES=$(SCALE_ZNODES) python3 bench/scale.py

# Log replay after kill -9 with no snapshot: single-node Keel, then ZooKeeper 3.8
# (bench/replay.py: REPLAY_WORKLOAD, REPLAY_SECONDS, REPLAY_CLIENTS; bench/work/replay.json).
replay: test-deps build
	python3 bench/replay.py

# Jepsen-style campaign on real processes (tests/nemesis/run.py); the same
# code runs in `make test` (tests/nemesis, NEMESIS_SECONDS default 60 there).
# Exits non-zero on any violation; the work dir (history, timeline.svg) is kept.
NEMESIS_SECONDS ?= 180
NEMESIS_NODES   ?= 3
NEMESIS_SEED    ?=
nemesis: test-deps build
	NEMESIS_SECONDS=$(NEMESIS_SECONDS) NEMESIS_NODES=$(NEMESIS_NODES) NEMESIS_SEED=$(NEMESIS_SEED) \
		PYTHONPATH=tests $(PY) -m nemesis.run

# Rolling restart under write load: prints one line per restart and the totals;
# exits non-zero if a target is missed (tests/cluster/test_rolling_restart.py runs the same code).
rolling-restart: test-deps build
	PYTHONPATH=tests $(PY) -m cluster.rolling

# Deterministic simulator: a seed range with every checker (crates/sim/README.md).
sim:
	$(CARGO) test --release -p sim --test seeds seed_batch -- --nocapture

# Fuzzing with cargo-fuzz (nightly): docs/FUZZING.md.
FUZZ_TARGET  ?=
FUZZ_SECONDS ?= 60
fuzz:
	bash scripts/fuzz.sh $(or $(FUZZ_TARGET),all) $(FUZZ_SECONDS)
