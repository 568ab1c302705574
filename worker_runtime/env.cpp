#include "dtrun/worker/env.h"

#include <cstdlib>
#include <limits>

namespace dtrun::worker {
namespace {

// Reads and checks the variables one at a time; every error names the variable and its value and
// carries the error file path once that variable has been read.
class EnvReader {
 public:
  explicit EnvReader(const EnvLookup& lookup) : lookup_(lookup) {}

  std::optional<std::string> optional(const std::string& name) const { return lookup_(name); }

  std::string required(const std::string& name) const {
    auto value = lookup_(name);
    if (!value) fail(name + " is not set; dtrun and torchrun set it for every worker");
    if (value->empty()) fail(name + " is set but empty");
    return *value;
  }

  // A decimal integer in [min, max]: digits only, no sign, no spaces (torch writes str(int)).
  long long integer(const std::string& name, const std::string& value, long long min,
                    long long max) const {
    bool digits = !value.empty() && value.size() <= 18;
    for (char c : value) digits = digits && c >= '0' && c <= '9';
    if (!digits) {
      fail(name + "='" + value + "' is not a non-negative decimal integer");
    }
    long long v = std::stoll(value);
    if (v < min || v > max) {
      fail(name + "=" + value + " is out of range [" + std::to_string(min) + ", " +
           std::to_string(max) + "]");
    }
    return v;
  }

  int requiredInt(const std::string& name, long long min,
                  long long max = std::numeric_limits<int>::max()) const {
    return static_cast<int>(integer(name, required(name), min, max));
  }

  std::optional<int> optionalInt(const std::string& name, long long min) const {
    auto value = lookup_(name);
    if (!value) return std::nullopt;
    return static_cast<int>(integer(name, *value, min, std::numeric_limits<int>::max()));
  }

  [[noreturn]] void fail(const std::string& why) const {
    throw WorkerEnvError("worker environment: " + why, errorFile);
  }

  std::string errorFile;

 private:
  const EnvLookup& lookup_;
};

}  // namespace

void validateWorkerEnv(const WorkerEnv& env) {
  auto fail = [&](const std::string& why) {
    throw WorkerEnvError("worker environment: " + why, env.errorFile);
  };
  if (env.worldSize < 1) fail("WORLD_SIZE=" + std::to_string(env.worldSize) + " must be >= 1");
  if (env.rank < 0 || env.rank >= env.worldSize) {
    fail("RANK=" + std::to_string(env.rank) +
         " is not below WORLD_SIZE=" + std::to_string(env.worldSize));
  }
  if (env.localWorldSize < 1 || env.localWorldSize > env.worldSize) {
    fail("LOCAL_WORLD_SIZE=" + std::to_string(env.localWorldSize) +
         " must be in [1, WORLD_SIZE=" + std::to_string(env.worldSize) + "]");
  }
  if (env.localRank < 0 || env.localRank >= env.localWorldSize) {
    fail("LOCAL_RANK=" + std::to_string(env.localRank) +
         " is not below LOCAL_WORLD_SIZE=" + std::to_string(env.localWorldSize));
  }
  if (env.groupRank < 0) fail("GROUP_RANK=" + std::to_string(env.groupRank) + " is negative");
  if (env.groupWorldSize && (*env.groupWorldSize < 1 || env.groupRank >= *env.groupWorldSize)) {
    fail("GROUP_RANK=" + std::to_string(env.groupRank) +
         " is not below GROUP_WORLD_SIZE=" + std::to_string(*env.groupWorldSize));
  }
  if (env.masterAddr.empty()) fail("MASTER_ADDR is empty");
  if (env.masterPort == 0) fail("MASTER_PORT is 0; the store's port is needed");
  if (env.restartCount < 0) fail("TORCHELASTIC_RESTART_COUNT is negative");
}

WorkerEnv parseWorkerEnv(const EnvLookup& lookup) {
  EnvReader r(lookup);
  WorkerEnv env;
  // The error file first: every later error can then still be recorded in it.
  if (auto v = r.optional("TORCHELASTIC_ERROR_FILE")) env.errorFile = *v;
  r.errorFile = env.errorFile;

  env.worldSize = r.requiredInt("WORLD_SIZE", 1);
  env.rank = r.requiredInt("RANK", 0);
  env.localWorldSize = r.requiredInt("LOCAL_WORLD_SIZE", 1);
  env.localRank = r.requiredInt("LOCAL_RANK", 0);
  env.groupRank = r.requiredInt("GROUP_RANK", 0);
  env.groupWorldSize = r.optionalInt("GROUP_WORLD_SIZE", 1);
  env.masterAddr = r.required("MASTER_ADDR");
  env.masterPort = static_cast<std::uint16_t>(r.requiredInt("MASTER_PORT", 1, 65535));

  // torch compares with str(True) exactly; anything but the two spellings torch writes is a
  // mistake worth reporting rather than silently reading as False.
  if (auto v = r.optional("TORCHELASTIC_USE_AGENT_STORE")) {
    if (*v == "True") {
      env.useAgentStore = true;
    } else if (*v != "False") {
      r.fail("TORCHELASTIC_USE_AGENT_STORE='" + *v + "' must be exactly 'True' or 'False'");
    }
  }
  if (env.useAgentStore) {
    // torch's worker reads it unconditionally in agent-store mode: the store prefix needs it.
    env.restartCount = r.requiredInt("TORCHELASTIC_RESTART_COUNT", 0);
  } else {
    env.restartCount = r.optionalInt("TORCHELASTIC_RESTART_COUNT", 0).value_or(0);
  }
  env.maxRestarts = r.optionalInt("TORCHELASTIC_MAX_RESTARTS", 0).value_or(0);
  if (auto v = r.optional("TORCHELASTIC_RUN_ID")) env.runId = *v;
  if (auto v = r.optional("ROLE_NAME"); v && !v->empty()) env.roleName = *v;

  validateWorkerEnv(env);
  return env;
}

WorkerEnv readWorkerEnv() {
  return parseWorkerEnv([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  });
}

}  // namespace dtrun::worker
