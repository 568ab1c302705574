#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (ctest runs the Catch2 suites, the
# end-to-end and interop tests, and the bounded fuzzing run), then the C++ unit tests again under
# AddressSanitizer+UBSan and ThreadSanitizer (scripts/sanitize.sh). Extra arguments go to ctest
# and leave the sanitizer runs out, e.g. ./scripts/test.sh -R store -V
#
#   DTRUN_SANITIZE_TESTS=0 ...   no sanitizer runs; =1: them too, even with ctest arguments
set -euo pipefail
cd "$(dirname "$0")/.."
# Developers and CI build with warnings as errors; a user's build (demo.sh, setup.sh) does not.
DTRUN_WERROR=${DTRUN_WERROR:-ON} ./scripts/setup.sh
BUILD_DIR=${DTRUN_BUILD_DIR:-build}
start=$(date +%s)
ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 900 -j "${DTRUN_TEST_JOBS:-2}" "$@"
echo "test: all tests passed in $(( $(date +%s) - start )) s"
if [[ ${DTRUN_SANITIZE_TESTS:-$([[ $# -eq 0 ]] && echo 1 || echo 0)} == 1 ]]; then
  start=$(date +%s)
  ./scripts/sanitize.sh
  echo "test: the sanitizer runs passed in $(( $(date +%s) - start )) s"
fi
