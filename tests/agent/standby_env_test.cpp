// What a standby interpreter (--prewarm) is started with: every variable of its worker that is
// the same in every round, none that a round decides, for every local rank; and where its
// streams go while it imports.
#include "agent/standby_env.h"

#include <signal.h>

#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "agent/worker_env.h"
#include "tests/agent/round_util.h"

using namespace dtrun::agent;
using dtrun::agent::testing::envMap;
using dtrun::agent::testing::roundOf;
using Env = std::map<std::string, std::string>;

namespace {

LaunchConfig config(int nproc) {
  LaunchConfig c = testing::envTestConfig(nproc);
  c.baseEnv = {{"PATH", "/usr/bin"}, {"OMP_NUM_THREADS", "1"}, {"PYTHONPATH", "/src"}};
  return c;
}

const std::vector<std::string> kPerRound = {"GROUP_RANK",
                                            "GROUP_WORLD_SIZE",
                                            "MASTER_ADDR",
                                            "MASTER_PORT",
                                            "RANK",
                                            "ROLE_RANK",
                                            "ROLE_WORLD_SIZE",
                                            "TORCHELASTIC_ERROR_FILE",
                                            "TORCHELASTIC_RESTART_COUNT",
                                            "WORLD_SIZE"};

}  // namespace

TEST_CASE("a standby has every round-independent variable and no per-round one",
          "[agent][prewarm]") {
  for (int nproc : {1, 3}) {
    const auto c = config(nproc);
    const Env extra = {{"TORCHELASTIC_TIMER_FILE", "/run/timer"}};
    for (int lr = 0; lr < nproc; ++lr) {
      INFO("nproc " << nproc << ", local rank " << lr);
      const StandbyEnvironment split = standbyEnvironment(c, lr, extra);
      CHECK(split.perRound == kPerRound);
      CHECK(split.known.at("LOCAL_RANK") == std::to_string(lr));
      CHECK(split.known.at("LOCAL_WORLD_SIZE") == std::to_string(nproc));
      CHECK(split.known.at("TORCHELASTIC_RUN_ID") == "job42");
      CHECK(split.known.at("TORCHELASTIC_MAX_RESTARTS") == "3");
      CHECK(split.known.at("TORCHELASTIC_TIMER_FILE") == "/run/timer");
      CHECK(split.known.at("OMP_NUM_THREADS") == "1");
      // Any real round: the worker's environment is the standby's plus the per-round
      // variables, value for value.
      for (int node : {0, 4}) {
        const Env worker = envMap(workerEnv(c, roundOf(9, node, 5, nproc), lr,
                                            WorkerStore{"head", 29400}, "/logs/e.json", extra));
        std::set<std::string> keys;
        for (const auto& [k, v] : split.known) {
          keys.insert(k);
          CHECK(worker.at(k) == v);
        }
        for (const auto& k : split.perRound) {
          CHECK(worker.count(k) == 1);
          CHECK(keys.insert(k).second);
        }
        CHECK(keys.size() == worker.size());
      }
    }
  }
}

TEST_CASE("what the launcher sets per rank itself stays per-round", "[agent][prewarm]") {
  // A launcher environment that already holds RANK (a job started from inside another): the
  // worker gets the round's value, so the standby gets none.
  auto c = config(2);
  c.baseEnv["RANK"] = "17";
  c.baseEnv["MASTER_PORT"] = "1";
  const auto split = standbyEnvironment(c, 1, {});
  CHECK(split.known.count("RANK") == 0);
  CHECK(split.known.count("MASTER_PORT") == 0);
  CHECK(split.perRound == kPerRound);
}

TEST_CASE("with --virtual-local-rank each standby knows its own device", "[agent][prewarm]") {
  auto c = config(2);
  c.virtualLocalRank = true;
  c.baseEnv["CUDA_VISIBLE_DEVICES"] = "4,6";
  CHECK(standbyEnvironment(c, 0, {}).known.at("CUDA_VISIBLE_DEVICES") == "4");
  CHECK(standbyEnvironment(c, 1, {}).known.at("CUDA_VISIBLE_DEVICES") == "6");
  CHECK(standbyEnvironment(c, 1, {}).known.at("LOCAL_RANK") == "0");
}

TEST_CASE("a standby's streams while it imports are of the kind its worker's will be",
          "[agent][prewarm]") {
  auto c = config(2);
  CHECK(preloadStream(c, false, 0, Std::kOut) == PreloadStream::kPipe);
  c.redirects.all = Std::kAll;
  CHECK(preloadStream(c, false, 0, Std::kOut) == PreloadStream::kFile);
  CHECK(preloadStream(c, false, 1, Std::kErr) == PreloadStream::kFile);
  CHECK(preloadStream(c, true, 1, Std::kErr) == PreloadStream::kInherit);  // --log-dir /dev/null
  c.tee.perLocalRank = {{1, Std::kOut}};
  CHECK(preloadStream(c, false, 1, Std::kOut) == PreloadStream::kPipe);  // tee'd: forwarded
  CHECK(preloadStream(c, false, 1, Std::kErr) == PreloadStream::kFile);
  CHECK(preloadStream(c, false, 0, Std::kOut) == PreloadStream::kFile);
}
