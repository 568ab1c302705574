#!/usr/bin/env bash
# Installs the Debian packages dtrun's build and tests need (only those missing), then configures
# and builds into build/. Idempotent: a second run installs nothing and rebuilds only what changed.
#
#   ./scripts/setup.sh            packages + build
#   DTRUN_SKIP_INSTALL=1 ...      build only
#   DTRUN_BUILD_DIR=dir ...       build somewhere else than build/
#   DTRUN_WERROR=ON ...           warnings are errors (scripts/test.sh and CI set it)
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  g++ cmake ninja-build pkg-config ccache
  libboost1.81-all-dev libspdlog-dev libfmt-dev nlohmann-json3-dev catch2
  clang libclang-rt-14-dev          # libFuzzer for the wire decoder; the sanitizer builds
  python3-torch                     # interop tests and the torchrun comparison (/usr/bin/python3)
  iproute2 procps psmisc util-linux # fault-injection tools and process checks in the tests
  slurmctld slurmd slurm-client munge # the Slurm integration tests
  openssh-server openssh-client     # dtrun --hostfile: the multi-host tests run their own sshd
  libssl-dev                        # TLS to etcd (rendezvous/etcd)
  etcd-server etcd-client python3-etcd # the etcd backend's tests and torchrun's etcd-v2 in the bench
)

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
cmake --build "$BUILD_DIR" -j "$(nproc)"
echo "setup: built $BUILD_DIR/bin/dtrun"
