// The worker environment that torchrun and dtrun give every worker (_start_workers in
// torch/distributed/elastic/agent/server/local_elastic_agent.py), read once into a WorkerEnv.
// parseWorkerEnv is the one function that knows the variable names.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/error.h"

namespace dtrun::worker {

/// What a worker learns from its environment. Ranks are validated against the sizes.
struct WorkerEnv {
  int rank = 0;                       ///< RANK: global rank, 0 <= rank < worldSize
  int localRank = 0;                  ///< LOCAL_RANK: rank on this node
  int worldSize = 1;                  ///< WORLD_SIZE: workers in the job
  int localWorldSize = 1;             ///< LOCAL_WORLD_SIZE: workers on this node
  int groupRank = 0;                  ///< GROUP_RANK: this node's (agent's) rank
  std::optional<int> groupWorldSize;  ///< GROUP_WORLD_SIZE: nodes, when set
  std::string roleName = "default";   ///< ROLE_NAME
  std::string masterAddr;             ///< MASTER_ADDR: host of the store
  std::uint16_t masterPort = 0;       ///< MASTER_PORT: port of the store
  int restartCount = 0;               ///< TORCHELASTIC_RESTART_COUNT: the round number
  int maxRestarts = 0;                ///< TORCHELASTIC_MAX_RESTARTS
  bool useAgentStore = false;         ///< TORCHELASTIC_USE_AGENT_STORE == "True"
  std::string runId;                  ///< TORCHELASTIC_RUN_ID ("" when unset)
  std::string errorFile;              ///< TORCHELASTIC_ERROR_FILE ("" when unset or empty)

  /// "/worker/attempt_<restartCount>": the prefix torch's workers put on their store keys.
  std::string storePrefix() const { return "/worker/attempt_" + std::to_string(restartCount); }
};

/// A bad or missing worker variable. Carries TORCHELASTIC_ERROR_FILE when that one was readable,
/// so a failing worker can still leave an error file (see error_file.h).
class WorkerEnvError : public ConfigError {
 public:
  /// `errorFile` is "" when unknown.
  WorkerEnvError(const std::string& what, std::string errorFile)
      : ConfigError(what), errorFile_(std::move(errorFile)) {}
  /// TORCHELASTIC_ERROR_FILE of the environment that failed to parse, or "".
  const std::string& errorFile() const { return errorFile_; }

 private:
  std::string errorFile_;
};

/// Returns a variable's value, or nullopt when it is unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

/// Builds a WorkerEnv from what `lookup` returns. Throws WorkerEnvError naming the variable, the
/// value and what was expected. Required: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
/// GROUP_RANK, MASTER_ADDR, MASTER_PORT (and TORCHELASTIC_RESTART_COUNT in agent-store mode).
WorkerEnv parseWorkerEnv(const EnvLookup& lookup);

/// parseWorkerEnv over this process's environment (getenv). Call it once, early, on one thread.
WorkerEnv readWorkerEnv();

/// Throws WorkerEnvError when the fields contradict each other (rank >= worldSize, ...).
void validateWorkerEnv(const WorkerEnv& env);

}  // namespace dtrun::worker
