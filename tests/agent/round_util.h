// The round an agent's tests hand to the policy and to the worker environment.
#pragma once

#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "agent/launch_config.h"
#include "rendezvous/dynamic_rendezvous.h"

namespace dtrun::agent::testing {

/// Round `round` as node `groupRank` of `groupWorldSize` nodes sees it, every node running
/// `nproc` workers.
inline rendezvous::RoundInfo roundOf(std::int64_t round, int groupRank = 0, int groupWorldSize = 1,
                                     int nproc = 2) {
  rendezvous::RoundInfo r;
  r.round = round;
  r.groupRank = groupRank;
  r.groupWorldSize = groupWorldSize;
  r.rankOffset = groupRank * nproc;
  r.worldSize = groupWorldSize * nproc;
  return r;
}

/// The launch configuration the worker-environment tests start from: `nproc` Python workers
/// of job42, three restarts, two signals, a launcher environment of PATH and NCCL's variable.
inline LaunchConfig envTestConfig(int nproc) {
  LaunchConfig c;
  c.nprocPerNode = nproc;
  c.maxRestarts = 3;
  c.rdzv.runId = "job42";
  c.signalsToHandle = {SIGTERM, SIGUSR1};
  c.entrypoint = {"python3", "-u", "train.py"};
  c.scriptArgs = {"--local-rank=${local_rank}", "--lr", "0.1"};
  c.baseEnv = {{"PATH", "/usr/bin"}, {"NCCL_ASYNC_ERROR_HANDLING", "0"}};
  return c;
}

/// A child's "KEY=value" environment entries as a map; each key must come once.
inline std::map<std::string, std::string> envMap(const std::vector<std::string>& entries) {
  std::map<std::string, std::string> env;
  for (const auto& e : entries) {
    auto eq = e.find('=');
    REQUIRE(eq != std::string::npos);
    REQUIRE(env.emplace(e.substr(0, eq), e.substr(eq + 1)).second);  // no key twice
  }
  return env;
}

}  // namespace dtrun::agent::testing
