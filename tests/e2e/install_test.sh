#!/bin/sh
# `cmake --install` puts dtrun in <prefix>/bin (beside the worker library), and the installed
# dtrun runs: --version prints the version and the commit.
#   install_test.sh BUILD_DIR VERSION
set -eu
build=$1
version=$2
prefix=$(mktemp -d "${TMPDIR:-/tmp}/dtrun-install-XXXXXX")
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
fail() { echo "FAIL $*"; exit 1; }
[ -x "$prefix/bin/dtrun" ] || fail "no executable $prefix/bin/dtrun"
out=$("$prefix/bin/dtrun" --version) || fail "dtrun --version exited $?"
echo "$out"
echo "$out" | grep -Eq "^dtrun $version \(commit ([0-9a-f]{7,}(-dirty)?|unknown)\)$" ||
  fail "--version printed '$out'"
ls "$prefix"/lib*/libdtrun_worker* >/dev/null 2>&1 || ls "$prefix"/lib/*/libdtrun_worker* \
  >/dev/null 2>&1 || fail "the worker library is not installed"
echo "ok: $prefix/bin/dtrun installed and runs"
