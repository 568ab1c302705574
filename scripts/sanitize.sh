#!/usr/bin/env bash
# The C++ unit tests under sanitizers (scripts/test.sh runs this, so CI does): the Catch2 suites
# of common/, rendezvous/, agent/ and launcher/ built with AddressSanitizer +
# UndefinedBehaviorSanitizer, and the threaded one (rendezvous/: the store server's thread,
# client threads, simulated nodes as threads) with ThreadSanitizer.
# Each sanitizer has a build directory of its own and builds only the unit-test targets; any
# finding fails the test that made it, with the report in ctest's output.
#
#   ./scripts/sanitize.sh                 both
#   ./scripts/sanitize.sh address         ASan + UBSan only (or: thread)
#   DTRUN_SANITIZE_CXX=g++ ...            another compiler (default clang++, for the clang build)
#   DTRUN_SANITIZE_DIR=dir ...            where the build directories go (default build-sanitize)
set -euo pipefail
cd "$(dirname "$0")/.."

CXX=${DTRUN_SANITIZE_CXX:-clang++}
ROOT=${DTRUN_SANITIZE_DIR:-build-sanitize}
JOBS=${DTRUN_TEST_JOBS:-2}
LAUNCHER=()
if command -v ccache >/dev/null; then LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi

# sanitize NAME LIST INCLUDE EXCLUDE TARGETS...: configure, build TARGETS, run the ctest tests
# whose names match the regex INCLUDE and not EXCLUDE.
sanitize() {
  local name=$1 list=$2 include=$3 exclude=$4
  shift 4
  local dir=$ROOT/$name start
  start=$(date +%s)
  # -O1: fast enough to run, still precise stacks. No static linking (nothing to copy to other
  # nodes) and no NCCL (CUDA's libraries are not instrumented).
  cmake -S . -B "$dir" -G Ninja -DCMAKE_CXX_COMPILER="$CXX" "${LAUNCHER[@]}" \
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DDTRUN_SANITIZE="$list" \
    -DDTRUN_STATIC=OFF -DDTRUN_WITH_NCCL=OFF -DDTRUN_WERROR="${DTRUN_WERROR:-ON}" >/dev/null
  cmake --build "$dir" -j "$JOBS" --target "$@"
  ctest --test-dir "$dir" --output-on-failure --timeout 600 -j "$JOBS" -R "$include" -E "$exclude"
  echo "sanitize: $name ($list) passed in $(($(date +%s) - start)) s"
}

# Any finding is an error that stops the process (-fno-sanitize-recover=all); leaks count too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

what=${1:-all}
if [[ $what == all || $what == address ]]; then
  # The libraries' own suites. worker_runtime's would build the whole dtrun executable too, and
  # its multi-process cases mostly exercise the same store client: left out to keep CI's time.
  sanitize asan address,undefined '^(common|rendezvous|agent|launcher):' '^$' \
    common_tests rendezvous_tests agent_tests launcher_tests
fi
if [[ $what == all || $what == thread ]]; then
  # The threaded part: the store server's thread, client threads, simulated nodes as threads.
  sanitize tsan thread '^rendezvous:' '^$' rendezvous_tests
fi
