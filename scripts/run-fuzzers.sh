#!/usr/bin/env bash
# Runs every fuzz target in BUILD_DIR for SECONDS each on its seed corpus
# (tests/fuzz/corpus/<name>), in a scratch copy so the committed corpus stays small.
# Any crash, leak or sanitizer report fails the run.
set -euo pipefail
build=${1:?usage: run-fuzzers.sh BUILD_DIR SECONDS}
seconds=${2:-30}
status=0
for target in "$build"/fuzz_*; do
    [ -x "$target" ] || continue
    name=$(basename "$target"); name=${name#fuzz_}
    work=$(mktemp -d)
    [ -d "tests/fuzz/corpus/$name" ] && cp -r "tests/fuzz/corpus/$name/." "$work/"
    echo "fuzz: $name for ${seconds}s"
    if ! "$target" -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 \
            -artifact_prefix="$build/crash-$name-" "$work" 2>"$build/fuzz-$name.log"; then
        tail -n 40 "$build/fuzz-$name.log"
        status=1
    else
        grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$build/fuzz-$name.log" | sed "s/^/  /"
    fi
    rm -rf "$work"
done
exit $status
