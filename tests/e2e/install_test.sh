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

# The Debian package (CPack) holds the same dtrun, and depends on the C library only.
pkgdir=$prefix/package
cpack -G DEB --config "$build/CPackConfig.cmake" -B "$pkgdir" >/dev/null
deb=$(ls "$pkgdir"/dtrun_*.deb) || fail "cpack wrote no dtrun_*.deb"
dpkg-deb -c "$deb" | grep -q ' \./usr/bin/dtrun$' || fail "$deb holds no ./usr/bin/dtrun"
depends=$(dpkg-deb -f "$deb" Depends)
echo "$deb: Depends: $depends"
echo "$depends" | grep -q 'libc6' || fail "the package does not depend on libc6"
echo "ok: $deb installs /usr/bin/dtrun"
