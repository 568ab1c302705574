#!/usr/bin/env bash
# Installs the Debian packages dtrun needs (only those missing), then configures and builds into
# build/. Idempotent: a second run installs nothing and rebuilds only what changed.
#
#   ./scripts/setup.sh            everything the tests need, and every target (scripts/test.sh)
#   ./scripts/setup.sh demo       only what the demo needs (scripts/demo.sh): the build's own
#                                 packages and torch, and only the dtrun target
#   DTRUN_SKIP_INSTALL=1 ...      build only
#   DTRUN_BUILD_DIR=dir ...       build somewhere else than build/
#   DTRUN_WERROR=ON ...           warnings are errors (scripts/test.sh and CI set it)
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-test}
case "$mode" in
  demo|test) ;;
  *) echo "setup: unknown mode '$mode' (expected demo or test)" >&2; exit 2 ;;
esac

# What building dtrun needs. Boost is used for its headers only (Asio, Process), so the headers
# package is enough: the -all-dev one drags in every compiled Boost library and MPI.
BUILD_PACKAGES=(
  g++ cmake ninja-build pkg-config ccache
  libboost1.81-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libssl-dev                        # TLS to etcd (rendezvous/etcd)
  libyaml-cpp-dev                   # accelerate's config files (dtrun accelerate), linked statically
)
# What the demo runs besides dtrun: its main job is a torch DDP training (/usr/bin/python3).
DEMO_PACKAGES=(python3-torch)
# What the tests use: the test framework, sanitizers and fuzzing, and the real services and tools
# the end-to-end tests start themselves.
TEST_PACKAGES=(
  catch2
  clang libclang-rt-14-dev          # libFuzzer for the wire decoder; the sanitizer builds
  iproute2 procps psmisc util-linux # fault-injection tools and process checks in the tests
  slurmctld slurmd slurm-client munge # the Slurm integration tests
  openssh-server openssh-client     # dtrun --hostfile: the multi-host tests run their own sshd
  etcd-server etcd-client python3-etcd # the etcd backend's tests and torchrun's etcd-v2 in the bench
  dpkg-dev                          # dpkg-shlibdeps: the .deb package test (cpack)
  prometheus chromium tmux          # observability tests: metrics scraped, timeline drawn, status --watch
)
PACKAGES=("${BUILD_PACKAGES[@]}" "${DEMO_PACKAGES[@]}")
if [[ $mode == test ]]; then PACKAGES+=("${TEST_PACKAGES[@]}"); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -gt 0 && -z "${DTRUN_SKIP_INSTALL:-}" ]]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  # Slurm's and munge's postinst try to start services; policy-rc.d refusing that is harmless.
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

BUILD_DIR=${DTRUN_BUILD_DIR:-build}
GEN=()
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]] && command -v ninja >/dev/null; then GEN=(-G Ninja); fi
if command -v ccache >/dev/null; then GEN+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE="${DTRUN_BUILD_TYPE:-RelWithDebInfo}" \
  -DDTRUN_WERROR="${DTRUN_WERROR:-OFF}" >/dev/null
if [[ $mode == demo ]]; then
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target dtrun
else
  cmake --build "$BUILD_DIR" -j "$(nproc)"
fi
echo "setup: built $BUILD_DIR/bin/dtrun"
