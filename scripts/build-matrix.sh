#!/usr/bin/env bash
# Builds dtrun (every target, tests included) with each compiler and build type, warnings as
# errors, each in a directory of its own, and prints one line per build. It shows that Debug,
# Release and RelWithDebInfo build with GCC and Clang (docs/design.md, "Builds"); it is not part
# of scripts/test.sh, whose one build is CI's time.
#
#   ./scripts/build-matrix.sh                         all six
#   DTRUN_MATRIX_CXX="clang++" DTRUN_MATRIX_TYPES="Release" ./scripts/build-matrix.sh
#   DTRUN_MATRIX_DIR=dir ...                          where the build directories go
set -euo pipefail
cd "$(dirname "$0")/.."

ROOT=${DTRUN_MATRIX_DIR:-build-matrix}
JOBS=${DTRUN_MATRIX_JOBS:-2}
read -r -a COMPILERS <<<"${DTRUN_MATRIX_CXX:-g++ clang++}"
read -r -a TYPES <<<"${DTRUN_MATRIX_TYPES:-Debug Release RelWithDebInfo}"
LAUNCHER=()
if command -v ccache >/dev/null; then LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi

mkdir -p "$ROOT"
failed=0
summary=()
for cxx in "${COMPILERS[@]}"; do
  if ! command -v "$cxx" >/dev/null; then
    echo "build-matrix: $cxx is not installed (scripts/setup.sh installs g++ and clang)" >&2
    exit 2
  fi
  for type in "${TYPES[@]}"; do
    dir=$ROOT/$cxx-$type
    start=$(date +%s)
    if cmake -S . -B "$dir" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE="$type" \
      "${LAUNCHER[@]}" -DDTRUN_WERROR=ON >"$dir.log" 2>&1 &&
      cmake --build "$dir" -j "$JOBS" >>"$dir.log" 2>&1; then
      line="build-matrix: $($cxx --version | head -1), $type: built in $(($(date +%s) - start)) s"
    else
      failed=1
      line="build-matrix: $cxx $type: FAILED (see $dir.log)"
      tail -30 "$dir.log" >&2
    fi
    echo "$line"
    summary+=("$line")
  done
done
printf '%s\n' "${summary[@]}"
exit $failed
