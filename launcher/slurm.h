// dtrun under Slurm: hostlist expressions, and the defaults dtrun derives inside a job step.
//
// Under srun (SLURM_JOB_ID, SLURM_PROCID and SLURM_STEP_ID set), one dtrun runs per task, and
// main() calls applySlurmDefaults() before parsing the command line. For each of --rdzv-endpoint,
// --nnodes and --rdzv-id that neither the command line nor a PET_* variable gives, it adds the
// PET_* variable Slurm implies; the command line still wins over PET_*, so explicit options win.
//
//   --rdzv-endpoint  the first host of the step's node list (SLURM_STEP_NODELIST, else
//                    SLURM_JOB_NODELIST): every host of a step runs at least one task, so one of
//                    its agents hosts the store. When that name does not resolve here, the node's
//                    NodeAddr as Slurm knows it (`scontrol -o show node NAME`). The port is
//                    slurmRendezvousPort(): distinct for nearby jobs and for a job's steps.
//   --nnodes         the step's task count (SLURM_STEP_NUM_TASKS, else SLURM_NTASKS), not its
//                    node count: several agents may run per node.
//   --rdzv-id        "<SLURM_JOB_ID>.<SLURM_STEP_ID>": agents of one step meet, two steps never.
//
// Nothing is derived outside a step (the batch script itself has SLURM_PROCID=0 and
// SLURM_NTASKS, but a dtrun there is one agent, not SLURM_NTASKS of them), with --standalone,
// with the static backend (its endpoint is --master-addr/--master-port), or when the agent count
// is 1 (dtrun's single-node mode then picks a free port). One line at warning level says what was
// derived and from what.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/launch_config.h"
#include "launcher/child_process.h"

namespace dtrun::launcher {

/// Expands a Slurm hostlist expression into host names, in Slurm's order (as `scontrol show
/// hostnames`): items separated by commas, blanks or tabs outside brackets; "prefix[ranges]" with
/// ranges "N", "LO-HI" (zero padded to LO's width: [08-10] gives 08 09 10) and "LO-" (= LO),
/// comma-separated; several bracket groups per name (rack[1-2]-node[01-02]), the last one ending
/// the name. Slurm has no range steps. Throws ConfigError for what Slurm rejects (LO > HI, more
/// than 65536 hosts in a range, text after the last bracket, empty ranges) and for malformed
/// brackets Slurm would misread. Pure; does not block.
std::vector<std::string> expandHostlist(const std::string& expression);

/// The store port dtrun uses under Slurm when --rdzv-endpoint is not given:
/// 20000 + (jobId % 1000) * 10 + stepId % 10. Jobs whose ids differ by less than 1000 (those
/// likely to share a node) and steps 0-9 of one job never get the same port; all ports lie in
/// 20000-29999, below Linux's ephemeral range (32768-60999) so no outgoing connection holds one.
std::uint16_t slurmRendezvousPort(std::uint64_t jobId, std::uint64_t stepId);

/// The NodeAddr value in `scontrol show node` output (one-line or multi-line form); nullopt
/// when there is none.
std::optional<std::string> parseNodeAddr(const std::string& scontrolOutput);

/// What deriving needs from the machine; tests replace both.
struct SlurmProbe {
  /// True when `host` resolves on this machine (getaddrinfo). May block on DNS.
  std::function<bool(const std::string& host)> resolves;
  /// Runs a command (scontrol) with a timeout, as runCommand (launcher/child_process.h) does.
  std::function<CommandResult(const std::vector<std::string>& argv,
                              std::chrono::milliseconds timeout)>
      run;
};

/// The real machine: getaddrinfo and runCommand.
SlurmProbe systemSlurmProbe();

/// What applySlurmDefaults adds and says.
struct SlurmDerivation {
  std::map<std::string, std::string> variables;  ///< PET_* name -> value, to add to the env
  std::string summary;                           ///< one line; "" when nothing was derived
  std::vector<std::string> warnings;             ///< one line each (GPU binding lost, ...)
};

/// How long scontrol may take to answer before dtrun gives up on NodeAddr.
inline constexpr std::chrono::milliseconds kScontrolTimeout{10000};

/// Derives the PET_* defaults from `env` (the launcher's environment) for the options `parsed`
/// (the command line parsed without them) did not get: parsed.givenOptions, parsed.standalone,
/// parsed.rdzv.backend and parsed.rdzv.maxNodes are read. Runs probe.run(scontrol) only when the
/// first host does not resolve (kScontrolTimeout). Throws UsageError when an endpoint is needed
/// but neither the host name nor its NodeAddr can be used.
SlurmDerivation deriveSlurmDefaults(const std::map<std::string, std::string>& env,
                                    const agent::LaunchConfig& parsed, const SlurmProbe& probe);

/// main()'s hook, before parseCommandLine(args, env): parses `args` once as they are, derives
/// (deriveSlurmDefaults), adds the variables to `env` where absent, and logs the summary and
/// warnings at warning level on stderr. Does nothing when `args` do not parse (parseCommandLine
/// reports that) or outside a Slurm step. Throws UsageError as deriveSlurmDefaults does. May
/// block on DNS and on scontrol (kScontrolTimeout at most).
void applySlurmDefaults(const std::vector<std::string>& args,
                        std::map<std::string, std::string>& env);

/// applySlurmDefaults with an injected probe; returns what it derived (tests).
SlurmDerivation applySlurmDefaults(const std::vector<std::string>& args,
                                   std::map<std::string, std::string>& env,
                                   const SlurmProbe& probe);

}  // namespace dtrun::launcher
