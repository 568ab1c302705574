// The steps of the command line's resolution (launcher/cli.cpp), one per group of options, each
// filling its part of the LaunchConfig from the parsed options with torchrun's rules. Internal
// to the launcher: cli.h is the interface.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "agent/launch_config.h"
#include "launcher/cli.h"

namespace dtrun::launcher::steps {

using Env = std::map<std::string, std::string>;

/// `name`'s value in `env`, or nullopt. Pure.
inline std::optional<std::string> envValue(const Env& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
}

/// --rdzv-backend, --rdzv-endpoint, --rdzv-id, --rdzv-conf, --nnodes, --standalone and the static
/// backend's --master-addr/--master-port/--node-rank (cli_rendezvous.cpp).
void resolveRendezvous(agent::LaunchConfig& cfg, const ParsedOptions& t,
                       const InvocationRules& rules);
/// Restarts, monitoring, role, signals and shutdown (cli_workers.cpp).
void resolveWorkers(agent::LaunchConfig& cfg, const ParsedOptions& t, const Env& env);
/// The worker command, as torchrun's config_from_args builds it: the script or module, --no-python,
/// --run-path, --python.
void resolveEntrypoint(agent::LaunchConfig& cfg, const ParsedOptions& t, const Env& env,
                       const InvocationRules& rules);
/// --log-dir, --redirects, --tee, the console filters, the accepted-only --logs-specs and
/// --numa-binding.
void resolveLogs(agent::LaunchConfig& cfg, const ParsedOptions& t);
/// --file-timer (TORCHELASTIC_ENABLE_FILE_TIMER), --stall-timeout, --dump-stacks,
/// --exit-barrier-timeout.
void resolveHangOptions(agent::LaunchConfig& cfg, const ParsedOptions& t, const Env& env);
/// --worker-variables and --exit-code: the other launchers' conventions (launcher/front_end.h).
void resolveConventions(agent::LaunchConfig& cfg, const ParsedOptions& t);
/// --prewarm MODULE[,MODULE...] and --prewarm-timeout: module names checked, and refused where a
/// standby cannot stand in for a worker.
void resolvePrewarm(agent::LaunchConfig& cfg, const ParsedOptions& t);

}  // namespace dtrun::launcher::steps
