// dtrun_allreduce_example: an NCCL all-reduce benchmark in the manner of nccl-tests'
// all_reduce_perf, bootstrapped by dtrun_worker instead of MPI.
//
//   dtrun --standalone --nproc-per-node 8 --no-python dtrun_allreduce_example -b 8 -e 256M
//
// For each size it runs warm-up iterations, times `iters` out-of-place float sum all-reduces with
// CUDA events, then checks every element of the result and reports, like nccl-tests:
//   algbw = bytes / time, busbw = algbw * 2(n-1)/n.
// Exit code 0 when no rank saw a wrong value.
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "dtrun/worker/communicator.h"
#include "dtrun/worker/error_file.h"
#include "dtrun/worker/worker.h"

namespace {

using dtrun::worker::Communicator;
using dtrun::worker::Worker;

struct Args {
  std::size_t minBytes = 8;
  std::size_t maxBytes = 256u << 20;
  int factor = 2;
  int iters = 20;
  int warmup = 5;
};

std::size_t parseSize(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  std::string unit = end ? end : "";
  if (unit == "K" || unit == "k")
    v <<= 10;
  else if (unit == "M" || unit == "m")
    v <<= 20;
  else if (unit == "G" || unit == "g")
    v <<= 30;
  else if (!unit.empty() || end == text.c_str()) {
    throw dtrun::ConfigError(flag + ": '" + text + "' is not a size like 8, 64K, 256M or 1G");
  }
  return static_cast<std::size_t>(v);
}

Args parseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw dtrun::ConfigError(flag + ": expected a value");
      return argv[++i];
    };
    if (flag == "-b" || flag == "--min-bytes") {
      a.minBytes = parseSize(flag, value());
    } else if (flag == "-e" || flag == "--max-bytes") {
      a.maxBytes = parseSize(flag, value());
    } else if (flag == "-f" || flag == "--step-factor") {
      a.factor = std::atoi(value().c_str());
    } else if (flag == "-n" || flag == "--iters") {
      a.iters = std::atoi(value().c_str());
    } else if (flag == "-w" || flag == "--warmup-iters") {
      a.warmup = std::atoi(value().c_str());
    } else if (flag == "-h" || flag == "--help") {
      std::printf(
          "usage: %s [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-n ITERS] [-w WARMUP]\n"
          "Runs under dtrun or torchrun (the worker environment is required).\n",
          argv[0]);
      std::exit(0);
    } else {
      throw dtrun::ConfigError("unknown argument '" + flag + "' (see --help)");
    }
  }
  if (a.minBytes < 4 || a.maxBytes < a.minBytes || a.factor < 2 || a.iters < 1 || a.warmup < 0) {
    throw dtrun::ConfigError("need 4 <= min-bytes <= max-bytes, factor >= 2, iters >= 1");
  }
  return a;
}

// Element i of rank r's input is (r + 1) * (i % 13 + 1): small integers, so float sums are exact
// for worlds up to about a thousand ranks, and a misplaced element shows up as a wrong value.
float input(int rank, std::size_t i) { return static_cast<float>((rank + 1) * (i % 13 + 1)); }
float expected(int world, std::size_t i) {
  return static_cast<float>(world * (world + 1) / 2 * (i % 13 + 1));
}

int run(Worker& worker, const Args& args) {
  const int rank = worker.rank();
  const int world = worker.worldSize();
  const auto timeout = worker.options().timeout;
  std::shared_ptr<Communicator> comm = dtrun::worker::createCommunicator(worker);
  const std::string ctx = "rank " + std::to_string(rank);

  // One line per rank, gathered through the store as nccl-tests gathers it through MPI.
  cudaDeviceProp prop{};
  DTRUN_CUDA_CHECK(cudaGetDeviceProperties(&prop, comm->device()), ctx);
  char host[256] = "?";
  ::gethostname(host, sizeof(host) - 1);
  char line[640];  // the longest host name and device name fit (GCC checks it)
  std::snprintf(line, sizeof(line),
                "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x] %s", rank,
                worker.groupRank(), static_cast<int>(::getpid()), host, comm->device(),
                prop.pciDomainID, prop.pciBusID, prop.name);
  worker.store().set("allreduce_example/device/" + std::to_string(rank), line);

  const std::size_t maxCount = args.maxBytes / sizeof(float);
  std::vector<float> hostInput(maxCount);
  for (std::size_t i = 0; i < maxCount; ++i) hostInput[i] = input(rank, i);
  float* send = nullptr;
  float* recv = nullptr;
  long long* wrongDev = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  DTRUN_CUDA_CHECK(cudaMalloc(&send, maxCount * sizeof(float)), ctx);
  DTRUN_CUDA_CHECK(cudaMalloc(&recv, maxCount * sizeof(float)), ctx);
  DTRUN_CUDA_CHECK(cudaMalloc(&wrongDev, sizeof(long long)), ctx);
  DTRUN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), ctx);
  DTRUN_CUDA_CHECK(cudaEventCreate(&start), ctx);
  DTRUN_CUDA_CHECK(cudaEventCreate(&stop), ctx);
  DTRUN_CUDA_CHECK(
      cudaMemcpy(send, hostInput.data(), maxCount * sizeof(float), cudaMemcpyHostToDevice), ctx);

  int ncclRuntime = 0;
  DTRUN_NCCL_CHECK(ncclGetVersion(&ncclRuntime), ctx);
  int cudaDriver = 0;
  DTRUN_CUDA_CHECK(cudaDriverGetVersion(&cudaDriver), ctx);
  if (rank == 0) {
    std::printf("# NCCL %d (built against %d), CUDA driver %d, runtime %d\n", ncclRuntime,
                NCCL_VERSION_CODE, cudaDriver, CUDART_VERSION);
    std::printf(
        "# dtrun_worker all-reduce: %d rank(s), float sum, out-of-place, %d warm-up + %d "
        "timed iterations\n#\n# Using devices\n",
        world, args.warmup, args.iters);
    for (int r = 0; r < world; ++r) {
      std::printf("%s\n",
                  worker.get("allreduce_example/device/" + std::to_string(r), timeout).c_str());
    }
    std::printf("#\n#%12s %14s %7s %6s %10s %8s %8s %7s\n", "size", "count", "type", "redop",
                "time", "algbw", "busbw", "#wrong");
    std::printf("#%12s %14s %7s %6s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "(us)",
                "(GB/s)", "(GB/s)", "");
  }

  long long totalWrong = 0;
  double busbwSum = 0;
  int sizes = 0;
  std::vector<float> result;
  for (std::size_t bytes = args.minBytes; bytes <= args.maxBytes; bytes *= args.factor) {
    const std::size_t count = bytes / sizeof(float);
    DTRUN_CUDA_CHECK(cudaMemsetAsync(recv, 0, count * sizeof(float), stream), ctx);
    for (int i = 0; i < args.warmup; ++i) {
      DTRUN_NCCL_CHECK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm->get(), stream),
                       ctx);
    }
    DTRUN_CUDA_CHECK(cudaEventRecord(start, stream), ctx);
    for (int i = 0; i < args.iters; ++i) {
      DTRUN_NCCL_CHECK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm->get(), stream),
                       ctx);
    }
    DTRUN_CUDA_CHECK(cudaEventRecord(stop, stream), ctx);
    comm->synchronize(stream, timeout);  // returns early with AbortedError if the agent aborts
    float ms = 0;
    DTRUN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop), ctx);
    const double seconds = ms / 1e3 / args.iters;

    result.resize(count);
    DTRUN_CUDA_CHECK(cudaMemcpy(result.data(), recv, count * sizeof(float), cudaMemcpyDeviceToHost),
                     ctx);
    long long wrong = 0;
    for (std::size_t i = 0; i < count; ++i) wrong += result[i] != expected(world, i);
    DTRUN_CUDA_CHECK(cudaMemcpy(wrongDev, &wrong, sizeof(wrong), cudaMemcpyHostToDevice), ctx);
    DTRUN_NCCL_CHECK(ncclAllReduce(wrongDev, wrongDev, 1, ncclInt64, ncclSum, comm->get(), stream),
                     ctx);
    comm->synchronize(stream, timeout);
    DTRUN_CUDA_CHECK(cudaMemcpy(&wrong, wrongDev, sizeof(wrong), cudaMemcpyDeviceToHost), ctx);
    totalWrong += wrong;

    const double algbw = static_cast<double>(count * sizeof(float)) / seconds / 1e9;
    const double busbw = algbw * 2.0 * (world - 1) / world;
    busbwSum += busbw;
    ++sizes;
    if (rank == 0) {
      std::printf(" %12zu %14zu %7s %6s %10.2f %8.2f %8.2f %7lld\n", count * sizeof(float), count,
                  "float", "sum", seconds * 1e6, algbw, busbw, wrong);
      std::fflush(stdout);
    }
  }
  if (rank == 0) {
    std::printf("# Out of bounds values : %lld %s\n", totalWrong,
                totalWrong == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %g\n#\n", sizes ? busbwSum / sizes : 0.0);
    std::fflush(stdout);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  cudaFree(send);
  cudaFree(recv);
  cudaFree(wrongDev);
  return totalWrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string errorFile;
  try {
    Args args = parseArgs(argc, argv);
    dtrun::worker::WorkerEnv env = dtrun::worker::readWorkerEnv();
    errorFile = env.errorFile;
    dtrun::worker::WorkerOptions options;
    options.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    Worker worker(std::move(env), options);
    return run(worker, args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrun_allreduce_example: %s\n", e.what());
    if (const auto* bad = dynamic_cast<const dtrun::worker::WorkerEnvError*>(&e)) {
      errorFile = bad->errorFile();
    }
    dtrun::worker::recordError(errorFile, dtrun::worker::makeErrorRecord(e));
    return 1;
  }
}
