// `dtrun accelerate ARGS` (also `dtrun accelerate launch ARGS`): `accelerate launch`'s command
// line and config file, run by dtrun's agent (docs/migration.md). The steps are accelerate's
// (commands/launch.py), each on accelerate's objects (launcher/py_value.h):
//
//   1. parse    accelerate's options (launcher/accelerate_options.h); everything after the script
//               is the script's
//   2. config   the file found and read as accelerate does (launcher/accelerate_config.h)
//   3. merge    the command line wins: a mode flag over distributed_type; a scalar key only fills
//               an option left at None (so rdzv_backend, same_network, enable_cpu_affinity and
//               downcast_bf16 from the file are ignored, as by accelerate); a section's keys
//               (deepspeed_config, fsdp_config with fsdp_, dynamo_config with dynamo_, fp8_config
//               with fp8_, ...) fill every option not given. Without a file the GPUs are counted
//               (common/devices.h): several make it a multi-GPU run, as in accelerate
//   4. dispatch DEEPSPEED: torchrun's agent with DeepSpeed's variables; MULTI_GPU, FSDP,
//               MEGATRON_LM: torchrun's agent; NO, MULTI_CPU and --cpu: one process, plain
//               python, no rank variables; TPU, SageMaker and mpirun are refused
//   5. run      the processes as a plain dtrun command line (launcher/front_end.h): the processes
//               per machine (num_processes / num_machines), the rendezvous (one machine: on a
//               free port of 127.0.0.1; several: --rdzv-endpoint main_process_ip:port, or
//               --master-addr/--master-port with --same_network), accelerate's variables for the
//               workers (launcher/accelerate_env.h)
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/front_end.h"

namespace dtrun::launcher {

/// `dtrun accelerate ARGS` translated (see the file comment); a first word "launch" is
/// accelerate's subcommand and skipped. `env` is the launcher's environment. Reads the config file
/// and, without one, the device trees of `host` (and its sysfs for the CPU cores). Throws
/// UsageError (one line naming the option, file or key) and HelpRequested.
FrontEndRun translateAccelerate(const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& env,
                                const HostProbe& host);

/// translateAccelerate, then resolveFrontEnd.
FrontEndLaunch parseAccelerateLaunch(const std::vector<std::string>& args,
                                     const std::map<std::string, std::string>& env,
                                     const HostProbe& host);

}  // namespace dtrun::launcher
