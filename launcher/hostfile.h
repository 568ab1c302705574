// DeepSpeed's resource pool, as its users write it: the hostfile, the --include/--exclude
// filters, --num-nodes/--num-gpus, and the KEY=VALUE environment files. Pure text in, hosts and
// slots out; every error is a UsageError naming the file and line, or the option and the part of
// its value at fault.
//
//   # hostfile: one host per line, its slots being local device ordinals 0..N-1
//   worker-0 slots=4
//   worker-1 slots=4     # anything after slots=N is ignored, as DeepSpeed does
//
//   --include 'worker-0@worker-1:0,2'   all of worker-0, slots 0 and 2 of worker-1
//   --exclude 'worker-1:0'              every slot but slot 0 of worker-1
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "launcher/option_parser.h"

namespace dtrun::launcher {

/// One host of the job and the local device ordinals (DeepSpeed's slots) it uses, which become
/// its worker count and its CUDA_VISIBLE_DEVICES.
struct HostSlots {
  std::string host;
  std::vector<int> slots;
  bool operator==(const HostSlots&) const = default;
};

/// Parses a hostfile: "HOST slots=N" lines (N >= 1), blank lines and '#' comment lines; a host
/// may appear once. `name` (the path) prefixes errors as "name:line: ...". Throws UsageError,
/// also for a file with no host.
std::vector<HostSlots> parseHostfile(const std::string& text, const std::string& name);

/// How an --include's slots are read.
enum class IncludeSlots {
  kChecked,    ///< dtrun --hostfile: each must be one of the host's, kept in the order given
  kDeepSpeed,  ///< DeepSpeed's runner: taken as they are (they become the host's slots), sorted
};

/// DeepSpeed's parse_resource_filter: `include` keeps only the hosts and slots it names,
/// `exclude` removes them; both are NODE_SPEC[@NODE_SPEC...] with NODE_SPEC = HOST[:SLOT[,SLOT...]]
/// (a HOST alone is all its slots). Hosts keep the hostfile's order; a host left without slots
/// is dropped. Unknown hosts or slots, both filters at once, or nothing left are UsageErrors.
/// Null filters leave `pool` as it is.
std::vector<HostSlots> filterHosts(const std::vector<HostSlots>& pool, const GivenValue* include,
                                   const GivenValue* exclude,
                                   IncludeSlots rule = IncludeSlots::kChecked);

/// --num-nodes: the first N hosts (more than there are is an error); --num-gpus: slots
/// 0..min(G, slots)-1 of every host ("max number of GPUs per node"). Null = no limit.
std::vector<HostSlots> limitHosts(std::vector<HostSlots> hosts, const GivenValue* numNodes,
                                  const GivenValue* numGpus);

/// Parses an environment file (.dtrun_env, .deepspeed_env): KEY=VALUE lines, optionally after
/// "export ", blanks around '=' dropped; blank and '#' lines are skipped; a value wrapped in one
/// pair of matching quotes loses them. KEY is a shell variable name. Errors name "name:line".
std::vector<std::pair<std::string, std::string>> parseEnvFile(const std::string& text,
                                                              const std::string& name);

/// True for the launching shell's variables that travel to every host: PATH, LD_LIBRARY_PATH,
/// PYTHON*, NCCL_*, TORCH_*, CUDA_* (but CUDA_VISIBLE_DEVICES), OMP_*, UCX_*, FI_*.
bool isExportedVariable(std::string_view name);

}  // namespace dtrun::launcher
