#!/usr/bin/env bash
# The GPU check for worker_runtime, in two halves:
#
#   scripts/gpu-check.sh build   here: a static Release build in build-gpu/ (-DDTRUN_STATIC=ON:
#                                libstdc++, Boost and the CUDA runtime linked in, header-only
#                                spdlog/fmt), so the binaries need only glibc, the CUDA driver and
#                                libnccl.so.2 where they run.
#   scripts/gpu-check.sh run     on the GPU machine, from the repo root of a copy of the tree with
#                                build-gpu/bin carried (it has CUDA, NCCL and torch 2.x but no
#                                Boost, and installs nothing). Runs and prints:
#                                1. dtrun_allreduce_example against a standalone `dtrun store`
#                                   with a hand-made worker environment (the runtime alone);
#                                2. the same under `dtrun --standalone --nproc-per-node 1`
#                                   (ncclCommInitRank, all-reduce correctness and bus bandwidth);
#                                   and over every GPU when there are several;
#                                3. a torch 2.x DDP script with the nccl backend under dtrun in
#                                   agent-store mode (torch's 2.x TCPStore client against dtrun's
#                                   store).
#                                Everything is printed, and copied to $OUT/gpu-check.log when $OUT
#                                is set (the device tool's output folder), else to
#                                build-gpu/gpu-check.log. Exit code 0 when every step passed.
#
# Environment: GPU_CHECK_BUILD_DIR (default build-gpu), JOBS (build parallelism, default 2),
# PYTHON (an interpreter with torch 2.x; default: the first of python3, python that has it),
# GPU_CHECK_MAX_BYTES (largest all-reduce, default 256M).
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${GPU_CHECK_BUILD_DIR:-$ROOT/build-gpu}
BIN=$BUILD/bin

build() {
  set -e
  # -O2 as in the default RelWithDebInfo build, without -g (smaller to carry): GCC 12 at -O3
  # raises a false -Wrestrict inside std::string (GCC bug 105329) and -Werror stops the build.
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" -DDTRUN_STATIC=ON -DDTRUN_WITH_NCCL=ON \
    -DDTRUN_BUILD_TESTS=OFF
  cmake --build "$BUILD" -j"${JOBS:-2}" --target dtrun dtrun_allreduce_example dtrun_store_example
  local bad=0
  for exe in dtrun dtrun_allreduce_example dtrun_store_example; do
    local needed
    needed=$(readelf -d "$BIN/$exe" | awk '/NEEDED/ {print $5}' | tr -d '[]' | tr '\n' ' ')
    echo "$exe needs: $needed"
    if echo "$needed" | grep -qE 'libstdc\+\+|libboost|libspdlog|libfmt|libcudart'; then
      echo "ERROR: $exe still needs a library the GPU machine may lack"
      bad=1
    fi
  done
  [ "$bad" -eq 0 ]
  du -sh "$BIN"
  echo "built; carry build-gpu/bin (relative to the repo root) and run: scripts/gpu-check.sh run"
}

# --- run ------------------------------------------------------------------------------------

results=()
failed=0
record() {  # record NAME STATUS
  results+=("$(printf '%-58s %s' "$1" "$([ "$2" -eq 0 ] && echo PASSED || echo "FAILED ($2)")")")
  [ "$2" -eq 0 ] || failed=1
}

section() { printf '\n==== %s ====\n' "$*"; }

# Finds libnccl.so.2 when the loader would not (the binaries carry a run path to the build
# machine's /usr/local/cuda; torch wheels bring their own copy under nvidia/nccl/lib).
find_nccl() {
  if ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2'; then return; fi
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu; do
    if [ -e "$d/libnccl.so.2" ]; then export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; return; fi
  done
  if [ -n "${PY:-}" ]; then
    d=$("$PY" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
    if [ -n "$d" ] && [ -e "$d/libnccl.so.2" ]; then
      export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
  fi
}

find_python() {
  local c
  for c in ${PYTHON:-} python3 python /usr/bin/python3; do
    command -v "$c" >/dev/null 2>&1 || continue
    if "$c" -c 'import sys, torch; sys.exit(0 if int(torch.__version__.split(".")[0]) >= 2 and torch.cuda.is_available() else 1)' 2>/dev/null; then
      PY=$(command -v "$c")
      return 0
    fi
  done
  return 1
}

run_allreduce_standalone() {
  # The runtime alone: a store and a hand-made torchrun environment, world size 1.
  local out port pid rc
  out=$(mktemp)
  "$BIN/dtrun" store --host 127.0.0.1 --port 0 >"$out" 2>&1 &
  pid=$!
  for _ in $(seq 100); do [ -s "$out" ] && break; sleep 0.1; done
  port=$(head -1 "$out" | sed 's/.*://')
  echo "standalone store at 127.0.0.1:$port (pid $pid)"
  env RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 GROUP_RANK=0 GROUP_WORLD_SIZE=1 \
    MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" TORCHELASTIC_USE_AGENT_STORE=True \
    TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_RUN_ID=gpu-check \
    timeout -k 10 180 "$BIN/dtrun_allreduce_example" -b 8 -e "${GPU_CHECK_MAX_BYTES:-256M}"
  rc=$?
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  rm -f "$out"
  return $rc
}

run() {
  local log=${OUT:+$OUT/gpu-check.log}
  log=${log:-$BUILD/gpu-check.log}
  mkdir -p "$(dirname "$log")"
  exec > >(tee "$log") 2>&1
  TEE_PID=$!

  section "machine"
  date -u
  uname -a
  nvidia-smi || echo "nvidia-smi failed"
  local ngpu
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  echo "GPUs: $ngpu"
  find_python && echo "python with torch 2.x and CUDA: $PY" || echo "no python with torch 2.x and CUDA found"
  find_nccl
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  for exe in dtrun dtrun_allreduce_example; do
    [ -x "$BIN/$exe" ] || { echo "missing $BIN/$exe: run 'scripts/gpu-check.sh build' and carry build-gpu/bin"; exit 2; }
    echo "--- ldd $exe"
    ldd "$BIN/$exe"
  done

  section "1. all-reduce against a standalone dtrun store (world size 1)"
  run_allreduce_standalone
  record "all-reduce, standalone store, 1 GPU" $?

  section "2. all-reduce under dtrun --standalone --nproc-per-node 1"
  timeout -k 10 240 "$BIN/dtrun" --standalone --nproc-per-node 1 --no-python \
    "$BIN/dtrun_allreduce_example" -b 8 -e "${GPU_CHECK_MAX_BYTES:-256M}"
  record "all-reduce under dtrun, 1 GPU" $?
  if [ "$ngpu" -gt 1 ]; then
    section "2b. all-reduce under dtrun --nproc-per-node $ngpu"
    timeout -k 10 240 "$BIN/dtrun" --standalone --nproc-per-node "$ngpu" --no-python \
      "$BIN/dtrun_allreduce_example" -b 8 -e "${GPU_CHECK_MAX_BYTES:-256M}"
    record "all-reduce under dtrun, $ngpu GPUs" $?
  fi

  section "3. torch DDP (nccl) under dtrun in agent-store mode"
  if [ -n "${PY:-}" ]; then
    timeout -k 10 300 "$BIN/dtrun" --standalone --nproc-per-node 1 --no-python \
      "$PY" "$ROOT/tests/worker_runtime/gpu/ddp_check.py"
    record "torch DDP nccl under dtrun (agent store)" $?
  else
    echo "SKIPPED: no interpreter with torch >= 2 and a usable GPU (set PYTHON=...)"
    record "torch DDP nccl under dtrun (agent store): no torch 2.x" 1
  fi

  section "summary"
  printf '%s\n' "${results[@]}"
  echo "log: $log"
  # Let tee write the last lines before the caller collects the log.
  exec >&- 2>&-
  wait "$TEE_PID" 2>/dev/null
  exit $failed
}

case "${1:-}" in
  build) build ;;
  run) run ;;
  *)
    echo "usage: scripts/gpu-check.sh build|run" >&2
    exit 2
    ;;
esac
