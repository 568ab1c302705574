#include "agent/standby_env.h"

#include <set>

#include "agent/worker_env.h"

namespace dtrun::agent {
namespace {

// Two rounds that share nothing a round can vary: round number, node count, this node's group
// rank and rank offset, world size, roles mixed or not, where the workers' store is, the error
// file. Whatever workerEnv() derives from a round differs between them.
struct SyntheticRound {
  rendezvous::RoundInfo round;
  WorkerStore store;
  std::string errorFile;
};

SyntheticRound firstRound(const LaunchConfig& config) {
  SyntheticRound r;
  r.round.round = 0;
  r.round.groupRank = 0;
  r.round.groupWorldSize = 1;
  r.round.rankOffset = 0;
  r.round.worldSize = config.nprocPerNode;
  r.store = {"standby-a.invalid", 1};
  r.errorFile = "/standby-a/error.json";
  return r;
}

SyntheticRound secondRound(const LaunchConfig& config) {
  SyntheticRound r;
  r.round.round = 7;
  r.round.groupRank = 2;
  r.round.groupWorldSize = 3;
  r.round.rankOffset = 2 * config.nprocPerNode + 5;
  r.round.worldSize = 3 * config.nprocPerNode + 5;
  r.round.mixedRoles = true;
  rendezvous::NodeInfo other;
  other.pid = 1;
  other.nproc = config.nprocPerNode + 5;
  other.role = config.role + "-other";
  rendezvous::NodeInfo self = other;
  self.nproc = config.nprocPerNode;
  self.role = config.role;
  r.round.nodes = {other, self, self};
  r.store = {"standby-b.invalid", 2};
  r.errorFile = "/standby-b/error.json";
  return r;
}

std::map<std::string, std::string> asMap(const std::vector<std::string>& entries) {
  std::map<std::string, std::string> out;
  for (const auto& e : entries) {
    const auto eq = e.find('=');
    out[e.substr(0, eq)] = eq == std::string::npos ? "" : e.substr(eq + 1);
  }
  return out;
}

}  // namespace

StandbyEnvironment standbyEnvironment(const LaunchConfig& config, int localRank,
                                      const std::map<std::string, std::string>& extra) {
  auto envOf = [&](const SyntheticRound& r) {
    return asMap(workerEnv(config, r.round, localRank, r.store, r.errorFile, extra));
  };
  const auto a = envOf(firstRound(config));
  const auto b = envOf(secondRound(config));
  StandbyEnvironment out;
  std::set<std::string> perRound;
  for (const auto& [key, value] : a) {
    auto it = b.find(key);
    if (it != b.end() && it->second == value) {
      out.known[key] = value;
    } else {
      perRound.insert(key);
    }
  }
  for (const auto& [key, value] : b) {
    if (!a.count(key)) perRound.insert(key);
  }
  out.perRound.assign(perRound.begin(), perRound.end());
  return out;
}

PreloadStream preloadStream(const LaunchConfig& config, bool logsDisabled, int localRank,
                            Std stream) {
  if (!streamToFileOnly(config, localRank, stream)) return PreloadStream::kPipe;
  return logsDisabled ? PreloadStream::kInherit : PreloadStream::kFile;
}

}  // namespace dtrun::agent
