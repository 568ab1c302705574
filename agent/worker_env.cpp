#include "agent/worker_env.h"

#include <map>

#include "common/devices.h"
#include "common/signals.h"

namespace dtrun::agent {

std::vector<std::string> workerArgv(const LaunchConfig& config, int localRank) {
  std::vector<std::string> argv = config.entrypoint;
  for (const auto& a : config.scriptArgs) {
    argv.push_back(safeSubstitute(a, {{"local_rank", std::to_string(localRank)}}));
  }
  return argv;
}

std::vector<std::string> workerEnv(const LaunchConfig& config, const rendezvous::RoundInfo& round,
                                   int localRank, const WorkerStore& store,
                                   const std::string& errorFile,
                                   const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> env = config.baseEnv;
  auto finish = [&] {
    for (const auto& [k, v] : extra) env[k] = v;
    std::vector<std::string> out;
    out.reserve(env.size());
    for (const auto& [k, v] : env) out.push_back(k + "=" + v);
    return out;
  };
  // accelerate's single-process launcher gives its one process no rank at all: the script then
  // runs undistributed (or takes its ranks from an MPI launcher's variables).
  if (config.workerVariables == WorkerVariables::kNone) return finish();
  const int rank = round.rankOffset + localRank;
  // Role ranks: the prefix sum over nodes of the same role, in group rank order. The round
  // carries every node's description only when roles differ; otherwise role ranks are ranks.
  int roleRank = rank;
  int roleWorldSize = round.worldSize;
  bool allKnown = round.mixedRoles && !round.nodes.empty();
  for (const auto& n : round.nodes) allKnown = allKnown && n.pid != 0;
  if (allKnown) {
    roleRank = localRank;
    roleWorldSize = 0;
    for (int g = 0; g < static_cast<int>(round.nodes.size()); ++g) {
      if (round.nodes[g].role != config.role) continue;
      roleWorldSize += round.nodes[g].nproc;
      if (g < round.groupRank) roleRank += round.nodes[g].nproc;
    }
  }
  env["LOCAL_RANK"] = std::to_string(config.virtualLocalRank ? 0 : localRank);
  env["RANK"] = std::to_string(rank);
  env["GROUP_RANK"] = std::to_string(round.groupRank);
  env["ROLE_RANK"] = std::to_string(roleRank);
  env["ROLE_NAME"] = config.role;
  env["LOCAL_WORLD_SIZE"] = std::to_string(config.nprocPerNode);
  env["WORLD_SIZE"] = std::to_string(round.worldSize);
  env["GROUP_WORLD_SIZE"] = std::to_string(round.groupWorldSize);
  env["ROLE_WORLD_SIZE"] = std::to_string(roleWorldSize);
  env["MASTER_ADDR"] = store.addr;
  env["MASTER_PORT"] = std::to_string(store.port);
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(round.round);
  env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(config.maxRestarts);
  env["TORCHELASTIC_RUN_ID"] = config.rdzv.runId;
  env["TORCHELASTIC_USE_AGENT_STORE"] = config.agentStore ? "True" : "False";
  // (TORCH_)NCCL_ASYNC_ERROR_HANDLING: baseEnv holds the name the workers' torch reads, as the
  // launcher chose it (launcher/torch_probe.h).
  env["TORCHELASTIC_ERROR_FILE"] = errorFile;
  std::string signals;
  for (int sig : config.signalsToHandle) {
    if (!signals.empty()) signals += ",";
    signals += signalName(sig);
  }
  env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = signals;
  if (config.virtualLocalRank) {
    // Each worker sees only its own device, as LOCAL_RANK 0 (newest torchrun).
    std::string device = std::to_string(localRank);
    if (auto it = config.baseEnv.find("CUDA_VISIBLE_DEVICES"); it != config.baseEnv.end()) {
      const auto ids = parseVisibleDevices(it->second).entries();
      if (localRank < static_cast<int>(ids.size())) device = ids[localRank];
    }
    env["CUDA_VISIBLE_DEVICES"] = device;
  }
  if (config.workerVariables == WorkerVariables::kDeepSpeed) {
    // DeepSpeed's launch.py: the node's rank and count, and its worker count. Its LOCAL_RANK
    // (RANK modulo the node's count, wrong for nodes of different sizes) is not copied: LOCAL_RANK
    // stays the worker's index on its node.
    env["CROSS_RANK"] = std::to_string(round.groupRank);
    env["CROSS_SIZE"] = std::to_string(round.groupWorldSize);
    env["LOCAL_SIZE"] = std::to_string(config.nprocPerNode);
  }
  return finish();
}

bool streamToFileOnly(const LaunchConfig& config, int localRank, Std stream) {
  const int bit = static_cast<int>(stream);
  return (static_cast<int>(config.redirects.forRank(localRank)) & bit) &&
         !(static_cast<int>(config.tee.forRank(localRank)) & bit);
}

LinePrefixVars linePrefixVars(const LaunchConfig& config, const rendezvous::RoundInfo& round,
                              int localRank, const std::string& hostname) {
  LinePrefixVars vars;
  vars.roleName = config.role;
  vars.rank = round.rankOffset + localRank;
  vars.localRank = localRank;
  vars.host = hostname;
  vars.nodeRank = round.groupRank;
  vars.restart = static_cast<int>(round.round);
  return vars;
}

}  // namespace dtrun::agent
