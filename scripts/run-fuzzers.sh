#!/usr/bin/env bash
# Runs every fuzz target in BUILD_DIR for SECONDS each on its seed corpus
# (tests/fuzz/corpus/<name>), in a scratch copy so the committed corpus stays small,
# JOBS targets at a time (default: the number of cores; libFuzzer runs one thread each).
# Any crash, leak or sanitizer report fails the run.
set -euo pipefail
build=${1:?usage: run-fuzzers.sh BUILD_DIR SECONDS [JOBS]}
seconds=${2:-30}
jobs=${3:-$(nproc)}

# One target: its log in $build/fuzz-NAME.log, its exit status in $build/fuzz-NAME.status.
fuzz_one() {
    local target=$1 name work rc=0
    name=$(basename "$target"); name=${name#fuzz_}
    work=$(mktemp -d)
    [ -d "tests/fuzz/corpus/$name" ] && cp -r "tests/fuzz/corpus/$name/." "$work/"
    "$target" -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$build/crash-$name-" "$work" 2>"$build/fuzz-$name.log" || rc=$?
    echo "$rc" >"$build/fuzz-$name.status"
    rm -rf "$work"
}

targets=()
for target in "$build"/fuzz_*; do
    [ -x "$target" ] && [ -f "$target" ] && targets+=("$target")
done
echo "fuzz: ${#targets[@]} targets for ${seconds}s each, $jobs at a time"
running=0
for target in "${targets[@]}"; do
    if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
    fuzz_one "$target" &
    running=$((running + 1))
done
wait

status=0
for target in "${targets[@]}"; do
    name=$(basename "$target"); name=${name#fuzz_}
    echo "fuzz: $name"
    if [ "$(cat "$build/fuzz-$name.status")" != 0 ]; then
        tail -n 40 "$build/fuzz-$name.log"
        status=1
    else
        grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$build/fuzz-$name.log" | sed "s/^/  /"
    fi
done
exit $status
