#!/bin/sh
# Runs a libFuzzer binary for a bounded time: run_fuzz.sh FUZZER SECONDS WORKDIR SEED_CORPUS
# New inputs go to WORKDIR/corpus (the committed seed corpus stays read-only); a crashing input
# is saved under WORKDIR/artifacts/ and the fuzzer exits non-zero, failing the test.
set -eu
fuzzer=$1 seconds=$2 work=$3 seeds=$4
mkdir -p "$work/corpus" "$work/artifacts"
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/corpus" "$seeds"
