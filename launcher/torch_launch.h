// `dtrun launch`: torch.distributed.launch's command line, for the tutorials' scripts that parse
// --local_rank. It is torchrun's command line (torch's launch.py is a thin layer over run.py)
// with torch.distributed.launch's differences:
//
//   * every worker gets --local_rank=LOCAL_RANK before the script's own arguments, unless
//     --use-env (or --use_env, or DeepSpeed's --no-local-rank) is given;
//   * --no-python needs --use-env (a program that is not Python cannot take --local_rank);
//   * the rendezvous is static by default (--master-addr, --master-port, --node-rank, --nnodes),
//     with a free port instead of 29500 when the job is one node and no port is given;
//   * one notice, printed once by the launching dtrun, says what to change to move to plain
//     dtrun, with the equivalent command line.
//
// dtrun passes --local_rank=N as torch 1.x does and as the tutorials' scripts declare it; torch
// 2.x passes --local-rank=N, which a script declaring only --local_rank rejects.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/cli.h"

namespace dtrun::launcher {

/// The parser of `dtrun launch`: torchrun's options, --use-env, and the hostfile options.
const OptionParser& torchLaunchParser();

/// `dtrun launch ARGS` resolved (see the file comment); the notice is in `notice`. Throws
/// UsageError and HelpRequested like parseCommandLine. Pure but for the device trees and, with
/// --hostfile, the files it reads.
struct TorchLaunch {
  Invocation invocation;
  std::string notice;  ///< what to change to move to plain dtrun, one paragraph
};
TorchLaunch parseTorchLaunch(const std::vector<std::string>& args,
                             const std::map<std::string, std::string>& env, const HostProbe& host);

}  // namespace dtrun::launcher
