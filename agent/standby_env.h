// What a standby interpreter (--prewarm, agent/standby_pool.h) is started with, decided before
// any round exists. Pure functions of the launch configuration, tested for every local rank.
//
// The rule (docs/agent.md, "Warm starts"): a standby gets exactly those variables of its local
// rank's worker environment whose value is the same in every round (the launcher's environment,
// LOCAL_RANK, LOCAL_WORLD_SIZE, CUDA_VISIBLE_DEVICES with --virtual-local-rank, the file timer's
// FIFO, ...). A variable that can change from round to round (RANK, WORLD_SIZE, MASTER_ADDR,
// TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_ERROR_FILE, ...) is not set at all until the
// hand-over, never set to a guess. The split is computed, not listed: workerEnv() is evaluated
// for two rounds that differ in everything a round can differ in, and a variable is per-round
// when its two values differ, so a variable added to workerEnv() later falls on the right side.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "agent/launch_config.h"

namespace dtrun::agent {

/// The split of one local rank's worker environment.
struct StandbyEnvironment {
  std::map<std::string, std::string> known;  ///< the same in every round: the standby's
  std::vector<std::string> perRound;         ///< names set only at the hand-over, sorted
};

/// The split for local rank `localRank`; `extra` is what the agent adds to every worker's
/// environment (HangWatch::workerEnv()). Pure.
StandbyEnvironment standbyEnvironment(const LaunchConfig& config, int localRank,
                                      const std::map<std::string, std::string>& extra);

/// Where a standby's stdout or stderr goes while it imports, chosen so that Python's stream
/// objects, made at interpreter start, are those a cold worker gets: a pipe where the worker's
/// stream will be the forwarder's pipe, a regular file where it will be its log file, and the
/// agent's own descriptor where the worker gets that too.
enum class PreloadStream { kPipe, kFile, kInherit };

/// torchrun's rule as WorkerStreams::route() applies it: a redirected, not tee'd stream goes to
/// its file only (to the agent's own descriptor when there is no log directory). Pure.
PreloadStream preloadStream(const LaunchConfig& config, bool logsDisabled, int localRank,
                            Std stream);

}  // namespace dtrun::agent
