#!/usr/bin/env bash
# Fuzz keel-jute and keel-tree with cargo-fuzz (libFuzzer). See docs/FUZZING.md.
#
#   scripts/fuzz.sh [target|all] [seconds]
#
# target: jute_request | jute_handshake | tree_apply | tree_batch_decode |
#         snapshot_decode | kv_resp | kv_snapshot_decode | all (default: all,
#         one after another)
# seconds: -max_total_time per target (default 60)
#
# Installs cargo-fuzz if missing (needs the nightly toolchain), writes the
# seed corpus (fuzz/corpus/<target>/seed-*, from the golden frames and
# keel_tree::fuzzing::seeds), runs each target in a single process and prints
# its executions. Crashes land in fuzz/artifacts/<target>/; logs in
# fuzz/artifacts/<target>/last-run.log.
#
# Environment: FUZZ_SANITIZER overrides the sanitizer. By default the
# decoder targets run under AddressSanitizer, whose malloc hooks let
# -malloc_limit_mb flag any single huge allocation; tree_apply runs without
# one (its persistent maps make ASan ~9x slower; the code is safe Rust).
# FUZZ_ARGS adds libFuzzer flags.
set -euo pipefail

ALL_TARGETS=(jute_request jute_handshake tree_apply tree_batch_decode snapshot_decode kv_resp kv_snapshot_decode)
target=${1:-all}
seconds=${2:-60}

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/fuzz"

if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz.sh: the nightly toolchain is required: rustup toolchain install nightly" >&2
    exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

if [[ $target == all ]]; then
    targets=("${ALL_TARGETS[@]}")
else
    if [[ " ${ALL_TARGETS[*]} " != *" $target "* ]]; then
        echo "fuzz.sh: unknown target '$target' (one of: ${ALL_TARGETS[*]} all)" >&2
        exit 2
    fi
    targets=("$target")
fi

echo "== seed corpus"
cargo +nightly run --quiet --example make_seeds -- corpus

status=0
summary=()
for t in "${targets[@]}"; do
    mkdir -p "artifacts/$t" "corpus/$t"
    case $t in
        tree_apply) sanitizer=${FUZZ_SANITIZER:-none} ;;
        *) sanitizer=${FUZZ_SANITIZER:-address} ;;
    esac
    # Each sanitizer gets its own build dir, so switching does not rebuild.
    target_dir=()
    [[ $sanitizer == address ]] || target_dir=(--target-dir "target/sanitizer-$sanitizer")
    log="artifacts/$t/last-run.log"
    echo "== $t for ${seconds}s, sanitizer $sanitizer (log: fuzz/$log)"
    # One process (no -jobs/-workers): the machine is shared. A single
    # allocation over 64 MB is a finding (no input here justifies one), as
    # is an input that runs longer than 10 s.
    # shellcheck disable=SC2086
    if cargo +nightly fuzz run --sanitizer "$sanitizer" "${target_dir[@]}" "$t" "corpus/$t" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -malloc_limit_mb=64 -print_final_stats=1 ${FUZZ_ARGS:-} >"$log" 2>&1; then
        result=ok
    else
        result="FAILED (see fuzz/$log and fuzz/artifacts/$t/)"
        status=1
    fi
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    corpus=$(grep -o 'corp: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
    line="$t: ${seconds}s, ${execs:-?} executions, corpus ${corpus:-?}, $result"
    echo "$line"
    summary+=("$line")
done

echo "== summary"
printf '%s\n' "${summary[@]}"
exit $status
