// dtrun --hostfile: a multi-node job from one shell, as DeepSpeed users start one. This file
// turns the options into a plan: which hosts, how many workers on each (their slots), where the
// rendezvous is, and the exact command every host runs over ssh. launcher/multi_host.h runs it.
//
// Every host runs one ordinary dtrun agent with the static rendezvous backend, so node ranks
// follow the hostfile's order (DeepSpeed's rule) and the first host serves the store:
//
//   ssh [--ssh-command words] HOST 'cd CWD && exec env KEY=VALUE... CUDA_VISIBLE_DEVICES=SLOTS
//       DTRUN [forwarded options] --rdzv-backend=static --nnodes=N --node-rank=I
//       --master-addr=ADDR --master-port=PORT --nproc-per-node=len(SLOTS) --stop-on-stdin-close
//       -- SCRIPT ARGS...'
//
// KEY=VALUE: the launching shell's variables isExportedVariable() accepts, then ~/.dtrun_env,
// then ./.dtrun_env (a later one wins). --master-addr defaults to the first host's name as the
// hostfile writes it, --master-port to 29500 (torch's default port, as DeepSpeed).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "launcher/hostfile.h"
#include "launcher/option_parser.h"

namespace dtrun::launcher {

/// The hostfile options: --hostfile/-H, --include/-i, --exclude/-e, --num-nodes, --num-gpus,
/// --ssh-command, --remote-dtrun. Only full names are accepted (no prefixes), so that torchrun's
/// abbreviations keep their meaning.
std::span<const OptionSpec> hostfileOptions();

/// True when `dest` is one of hostfileOptions().
bool isHostfileOption(std::string_view dest);

/// Refuses what cannot go with --hostfile (the options that say what the hostfile says: --nnodes,
/// --node-rank, --nproc-per-node, --rdzv-*, --standalone) and, without --hostfile, every hostfile
/// option. Throws UsageError naming the option.
void checkHostfileOptions(const ParsedOptions& parsed);

/// What the launching side knows besides the options.
struct MultiHostInputs {
  std::filesystem::path workDir;          ///< every agent's working directory (the launcher's)
  std::string selfExe;                    ///< this dtrun's path, the default remote dtrun
  std::vector<std::string> agentOptions;  ///< options every agent gets ("--max-restarts=3")
  std::vector<std::string> command;       ///< the training script and its arguments
};

struct MultiHostPlan {
  std::vector<HostSlots> hosts;  ///< in node-rank order
  std::string masterAddr;
  std::uint16_t masterPort = 29500;
  std::vector<std::string> sshCommand;  ///< --ssh-command, split into words
  std::string remoteDtrun;
  std::filesystem::path workDir;
  std::map<std::string, std::string> exportedEnv;  ///< what every agent's environment gets
  std::vector<std::string> agentOptions;
  std::vector<std::string> command;
  std::chrono::milliseconds shutdownTimeout{30000};  ///< the agents' SIGTERM-to-SIGKILL grace

  /// The argv of host i's agent as the remote shell runs it (dtrun first). Pure.
  std::vector<std::string> agentArgv(std::size_t i) const;
  /// The command line the remote shell runs for host i (see the file comment). Pure.
  std::string remoteCommand(std::size_t i) const;
  /// The local argv that starts host i's agent: the ssh words, the host, remoteCommand(i). Pure.
  std::vector<std::string> sshArgv(std::size_t i) const;
  /// The local argv that checks host i before anything starts anywhere: ssh reaches it (without
  /// prompting), the working directory exists there (else exit 3) and so does an executable
  /// dtrun (else exit 4). Pure.
  std::vector<std::string> checkArgv(std::size_t i) const;
};

/// The plan for `parsed` (with --hostfile): reads the hostfile, applies --include/--exclude then
/// --num-nodes/--num-gpus, reads ~/.dtrun_env ($HOME of `env`) and <workDir>/.dtrun_env. Throws
/// UsageError naming the option, file or line at fault.
MultiHostPlan planMultiHost(const ParsedOptions& parsed,
                            const std::map<std::string, std::string>& env,
                            const MultiHostInputs& inputs);

/// This process's executable (/proc/self/exe), or "dtrun" when it cannot be read.
std::string selfExecutable();

}  // namespace dtrun::launcher
