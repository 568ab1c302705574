// What one worker is started with: its command line, its whole environment (torchrun's worker
// environment, key by key) and the values of its log line prefix. Pure functions of the launch
// configuration and the round this node joined, so that every rank of every node can be checked
// without starting anything.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "agent/job_link.h"
#include "agent/launch_config.h"
#include "agent/line_prefix.h"
#include "rendezvous/dynamic_rendezvous.h"

namespace dtrun::agent {

/// The worker's argv: the entrypoint, then the script's arguments with ${local_rank}
/// substituted.
std::vector<std::string> workerArgv(const LaunchConfig& config, int localRank);

/// The worker's whole environment as "KEY=value" entries: config.baseEnv plus RANK,
/// LOCAL_RANK, WORLD_SIZE, GROUP_RANK, ROLE_RANK, MASTER_ADDR/PORT, TORCHELASTIC_* and the rest,
/// for local rank `localRank` of this node in `round`; with config.workerVariables kDeepSpeed
/// also CROSS_RANK, CROSS_SIZE and LOCAL_SIZE, with kNone none of them. `errorFile` is its
/// TORCHELASTIC_ERROR_FILE ("" = none). `extra` is set last, over everything else (the file
/// timer's TORCHELASTIC_TIMER_FILE, the stack-dump PYTHONPATH).
std::vector<std::string> workerEnv(const LaunchConfig& config, const rendezvous::RoundInfo& round,
                                   int localRank, const WorkerStore& store,
                                   const std::string& errorFile,
                                   const std::map<std::string, std::string>& extra = {});

/// torchrun's rule for one of a worker's streams: redirected and not tee'd, it goes to its log
/// file only; otherwise through the agent (LogForwarder). Pure.
bool streamToFileOnly(const LaunchConfig& config, int localRank, Std stream);

/// ${rank}, ${local_rank}, ${node_rank}, ... for the console prefix of one worker's lines.
LinePrefixVars linePrefixVars(const LaunchConfig& config, const rendezvous::RoundInfo& round,
                              int localRank, const std::string& hostname);

}  // namespace dtrun::agent
