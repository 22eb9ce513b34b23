#!/usr/bin/env bash
# tests/fuzz/run.sh: runs each libFuzzer target for N seconds on a scratch copy of its corpus and
# regression inputs, prints the executions per target, and fails on any crash or sanitizer report.
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: tests/fuzz/run.sh [-t SECONDS] [-b BUILD_DIR] [-o OUT_DIR] [TARGET...]

Runs tests/fuzz's libFuzzer targets (default: all of them) for SECONDS each (default 10), starting
from tests/fuzz/corpus/TARGET and tests/fuzz/regressions/TARGET, which are never modified. The
targets must be built first, with clang:

  CC=clang CXX=clang++ meson setup build-fuzz -Dfuzz=true -Dcuda=disabled -Dnccl=disabled
  ninja -C build-fuzz tests/fuzz/fuzz-datatype tests/fuzz/fuzz-config tests/fuzz/fuzz-topology tests/fuzz/fuzz-model

  -t SECONDS     how long each target runs (libFuzzer's -max_total_time)
  -b BUILD_DIR   the -Dfuzz=true build directory (default build-fuzz)
  -o OUT_DIR     keep each target's grown corpus and any crash input in OUT_DIR/TARGET (for long
                 runs by hand: merge new inputs into the corpus with the target's -merge=1)

A crash input found here is a bug: fix it, then add the input to tests/fuzz/regressions/TARGET,
where the unit suite replays it (the fuzz/TARGET tests).
USAGE
}

seconds=10 build=build-fuzz out=
while getopts "t:b:o:h" opt; do
    case $opt in
        t) seconds=$OPTARG ;;
        b) build=$OPTARG ;;
        o) out=$OPTARG ;;
        h) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
here=$(cd "$(dirname "$0")" && pwd)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(datatype config topology model)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for t in "${targets[@]}"; do
    exe=$(cd "$build" 2>/dev/null && pwd)/tests/fuzz/fuzz-$t
    if [ ! -x "$exe" ]; then
        echo "fuzz $t: no $exe (build it first: tests/fuzz/run.sh -h)" >&2
        status=1
        continue
    fi
    dir=$work/$t
    mkdir -p "$dir/corpus" "$dir/artifacts"
    for seeds in "$here/corpus/$t" "$here/regressions/$t"; do
        [ -d "$seeds" ] && find "$seeds" -maxdepth 1 -type f -exec cp {} "$dir/corpus/" \;
    done
    rc=0
    (cd "$dir" && "$exe" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$dir/artifacts/" corpus >"$dir/log" 2>&1) || rc=$?
    runs=$(awk '/stat::number_of_executed_units/ {print $2}' "$dir/log")
    rate=$(awk '/stat::average_exec_per_sec/ {print $2}' "$dir/log")
    if [ "$rc" -eq 0 ]; then
        echo "fuzz $t: ${runs:-?} executions in $seconds s (${rate:-?}/s), no failure"
    else
        echo "fuzz $t: FAILED (exit $rc) after ${runs:-?} executions; its report:"
        grep -v -E '^#[0-9]+ +(NEW|REDUCE|pulse)' "$dir/log" | tail -n 60
        status=1
    fi
    if [ -n "$out" ]; then
        mkdir -p "$out/$t"
        cp -r "$dir/corpus" "$dir/artifacts" "$dir/log" "$out/$t/"
        echo "fuzz $t: corpus, artifacts and log kept in $out/$t"
    elif [ "$rc" -ne 0 ]; then
        for a in "$dir"/artifacts/*; do
            [ -f "$a" ] && echo "fuzz $t: failing input (base64): $(base64 -w0 "$a")"
        done
    fi
done
exit "$status"
