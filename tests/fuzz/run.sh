#!/usr/bin/env bash
# run.sh FUZZER WORK SEEDS REGRESSIONS: replays SEEDS and REGRESSIONS, then fuzzes for
# $FUZZ_SECONDS (default 60) seconds from them and WORK (the corpus it grows, kept between
# runs). A failing input is written to WORK/failures/ and named in the output.
set -euo pipefail
fuzzer=$1 work=$2 seeds=$3 regressions=$4
mkdir -p "$work/corpus" "$work/failures"
shopt -s nullglob
inputs=("$seeds"/* "$regressions"/*)
"$fuzzer" "${inputs[@]}"  # files: each run once
exec "$fuzzer" -max_total_time="${FUZZ_SECONDS:-60}" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
  -artifact_prefix="$work/failures/" "$work/corpus" "$seeds" "$regressions"
