// dtrun_store_example: a CPU-only worker that uses only the store. Run it under dtrun or torchrun:
//
//   dtrun --standalone --nproc-per-node 8 --no-python dtrun_store_example
//
// Every rank meets at a barrier, rank 0 broadcasts a greeting, every rank publishes its host and
// pid, and rank 0 prints the table. Exit code 0 when every check passed.
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "dtrun/worker/error_file.h"
#include "dtrun/worker/worker.h"

namespace {

int run(dtrun::worker::WorkerEnv env) {
  dtrun::worker::Worker worker(std::move(env));
  const int rank = worker.rank();
  const int world = worker.worldSize();

  worker.barrier();
  std::string greeting = "hello from rank 0 of " + std::to_string(world) + " (round " +
                         std::to_string(worker.restartCount()) + ")";
  std::string got = worker.broadcast(rank == 0 ? greeting : std::string(), 0);
  if (got != greeting) {
    std::fprintf(stderr, "rank %d: broadcast delivered '%s', expected '%s'\n", rank, got.c_str(),
                 greeting.c_str());
    return 1;
  }

  char host[256] = "?";
  ::gethostname(host, sizeof(host) - 1);
  worker.store().set("store_example/rank/" + std::to_string(rank),
                     std::string(host) + " pid " + std::to_string(::getpid()) + " local_rank " +
                         std::to_string(worker.localRank()));
  worker.barrier();
  if (rank == 0) {
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r) keys.push_back("store_example/rank/" + std::to_string(r));
    auto values = worker.store().multiGet(keys, worker.options().timeout);
    for (int r = 0; r < world; ++r) std::printf("rank %d: %s\n", r, values[r].c_str());
  }
  std::printf("rank %d/%d: barrier and broadcast ok: %s\n", rank, world, got.c_str());
  std::fflush(stdout);
  worker.barrier();  // nobody leaves (and drops its connection) before rank 0 has read
  return 0;
}

}  // namespace

int main() {
  std::string errorFile;  // TORCHELASTIC_ERROR_FILE, once known
  try {
    dtrun::worker::WorkerEnv env = dtrun::worker::readWorkerEnv();
    errorFile = env.errorFile;
    return run(std::move(env));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrun_store_example: %s\n", e.what());
    if (const auto* bad = dynamic_cast<const dtrun::worker::WorkerEnvError*>(&e)) {
      errorFile = bad->errorFile();
    }
    // torch's error file, for the agent's failure report (no-op when the variable is unset).
    dtrun::worker::recordError(errorFile, dtrun::worker::makeErrorRecord(e));
    return 1;
  }
}
