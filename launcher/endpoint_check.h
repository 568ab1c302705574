// The check before joining: does the rendezvous endpoint resolve to a loopback address while the
// job spans several hosts? Then agents on other hosts cannot reach the store, and an agent whose
// resolver maps the name to itself (matchesThisMachine says yes for loopback) starts a store of
// its own and waits alone until the join timeout: the commonest multi-node hang (user pains A4:
// `hostname --ip-address` giving 127.0.0.1, /etc/hosts mapping a node's name to 127.0.1.1).
//
// Several hosts means: --nnodes allows more than one agent and, under Slurm (SLURM_JOB_ID in the
// launcher's environment), the step or job has more than one node (SLURM_STEP_NUM_NODES,
// SLURM_NNODES, or the node list). Outside Slurm dtrun cannot know where the other agents run,
// so the warning says it is harmless when they all run on this machine.
#pragma once

#include <spdlog/logger.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/launch_config.h"

namespace dtrun::launcher {

/// The host agents connect to for the store: the static backend's --master-addr, else the
/// --rdzv-endpoint host ("localhost" when empty), as runLaunch uses them.
std::string rendezvousHost(const agent::LaunchConfig& config);

/// The number of hosts the Slurm job step spans according to `env` (SLURM_STEP_NUM_NODES, else
/// SLURM_NNODES, else the length of SLURM_STEP_NODELIST / SLURM_JOB_NODELIST); nullopt outside
/// Slurm (no SLURM_JOB_ID) or when none of them can be read. Pure.
std::optional<int> slurmHostCount(const std::map<std::string, std::string>& env);

/// The warning for `config` when its rendezvous host, which resolved to `addresses` on this
/// host, is loopback while the job spans several hosts; nullopt otherwise (also with
/// --standalone, with --nnodes max 1, when `addresses` is empty, and outside Slurm when the host
/// is itself "localhost" or a loopback address). Reads config.baseEnv. Pure.
std::optional<std::string> loopbackEndpointWarning(const agent::LaunchConfig& config,
                                                   const std::vector<std::string>& addresses);

/// True for 127.0.0.0/8, ::1 and IPv4 loopback mapped into IPv6 (textual addresses). Pure.
bool isLoopbackAddress(const std::string& addr);

/// Every address `host` resolves to on this machine, as text (empty when it does not resolve).
/// Blocks on the resolver (DNS).
std::vector<std::string> resolveHost(const std::string& host);

/// Before an agent connects to a store it does not serve: when `host` does not resolve here, logs
/// one warning naming the host, the resolver's answer, and what dtrun keeps trying until
/// `timeout` (the join timeout), so the wait is not silent. Blocks on the resolver.
void warnIfEndpointDoesNotResolve(const std::string& host, std::uint16_t port,
                                  std::chrono::milliseconds timeout, spdlog::logger& log);

/// Resolves the rendezvous host of `config` and logs loopbackEndpointWarning at warning level.
/// Call once before joining, on the launcher's thread; blocks on the resolver.
void warnIfEndpointIsLoopback(const agent::LaunchConfig& config, spdlog::logger& log);

}  // namespace dtrun::launcher
