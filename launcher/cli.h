// dtrun's command line: torchrun's options, both spellings, unique-prefix abbreviations, PET_*
// fallbacks, plus dtrun's own options and the hostfile options (launcher/hostfile.h), read by
// the table-driven parser (launcher/option_parser.h) and resolved once into a LaunchConfig.
//
// The resolution reads nothing but its arguments: the parsed options, the environment as a map,
// and a HostProbe for the facts it needs from the machine (device trees, CPU count, and for
// --hostfile the working directory and dtrun's own path), so tests inject all of them. Errors
// are UsageErrors (launcher/args.h) with one line naming the option or variable.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agent/launch_config.h"
#include "launcher/args.h"
#include "launcher/multi_host_plan.h"
#include "launcher/option_parser.h"

namespace dtrun::launcher {

/// What the resolution asks the machine; tests point it at fake trees and fixed values.
struct HostProbe {
  std::filesystem::path devDir = "/dev";  ///< where /dev/nvidiaN device files are counted
  std::filesystem::path sysDir = "/sys";  ///< where AMD (KFD) and Intel (DRM) GPUs are counted
  int cpuCount = 0;                       ///< 0: ask the OS (online CPUs, as os.cpu_count())
  std::filesystem::path workDir;          ///< --hostfile: the remote working directory; "" = cwd
  /// dtrun deepspeed: the hostfile DeepSpeed reads when -H is not given.
  std::filesystem::path deepspeedHostfile = "/job/hostfile";
  std::string selfExe;  ///< --hostfile: this dtrun's path on every host; "" = /proc/self/exe
};

/// torchrun's notice, logged once at warning level when LaunchConfig::ompNumThreadsSet is true.
inline constexpr std::string_view kOmpNumThreadsNotice =
    "\n*****************************************\n"
    "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid "
    "your system being overloaded, please further tune the variable for optimal performance in "
    "your application as needed. \n"
    "*****************************************";

/// torchrun's options and dtrun's own, in the order of torchrun's help (also `dtrun launch`'s).
std::span<const OptionSpec> torchrunOptions();

/// The parser of dtrun's main command line: torchrunOptions() then hostfileOptions().
const OptionParser& mainParser();

/// How a command's defaults differ from the main command's.
struct InvocationRules {
  /// torch.distributed.launch: the static rendezvous unless --rdzv-backend or --standalone says
  /// otherwise, and a free port on a single node when --master-port is not given.
  bool staticByDefault = false;
  /// Inserted before the script's own arguments ("--local_rank=${local_rank}").
  std::vector<std::string> scriptArgsPrefix;
  /// python -u, as torchrun runs a script; false: plain python (accelerate's single-process
  /// launcher).
  bool unbuffered = true;
};

/// What dtrun runs: this node's agent, or with --hostfile one agent per host over ssh.
struct Invocation {
  agent::LaunchConfig config;
  std::optional<MultiHostPlan> multiHost;  ///< set with --hostfile
};

/// Resolves `parsed` (the environment already applied) into a LaunchConfig with torchrun's
/// rules (run.py: run() and config_from_args()). Pure but for the device trees of `host`.
agent::LaunchConfig resolveLaunchConfig(const ParsedOptions& parsed,
                                        const std::map<std::string, std::string>& env,
                                        const HostProbe& host, const InvocationRules& rules = {});

/// resolveLaunchConfig, then with --hostfile the plan for every host (reads the hostfile and the
/// .dtrun_env files). `parser` is the command's own, whose options are forwarded to the hosts.
Invocation resolveInvocation(const OptionParser& parser, const ParsedOptions& parsed,
                             const std::map<std::string, std::string>& env, const HostProbe& host,
                             const InvocationRules& rules = {});

/// Parses `args` (argv without argv[0]) and `env` (the launcher's environment) into a
/// LaunchConfig. Does not block; throws UsageError for any bad option or value, HelpRequested
/// for -h/--help. Everything after the training script is kept untouched in scriptArgs.
agent::LaunchConfig parseCommandLine(const std::vector<std::string>& args,
                                     const std::map<std::string, std::string>& env,
                                     const HostProbe& host);

/// parseCommandLine with the real machine (/dev, /sys, the online CPU count).
agent::LaunchConfig parseCommandLine(const std::vector<std::string>& args,
                                     const std::map<std::string, std::string>& env);

/// The -h text: torchrun's option groups, then dtrun's own options, with defaults and variables.
std::string helpText();

/// The one usage line printed above a usage error ("usage: dtrun [-h] [options] ...").
std::string usageText();

/// A random version-4 UUID as text, "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx" (torchrun's run id for
/// --standalone). Reads std::random_device.
std::string randomUuid4();

}  // namespace dtrun::launcher
