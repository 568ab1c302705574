// dtrun: the launcher executable. Its subcommands share one command-line style
// (launcher/option_parser.h: help on stdout with exit code 0, a bad command line as the usage
// line and one error line with exit code 2):
//
//   dtrun [options] script ...         torchrun's command line (launcher/cli.h)
//   dtrun launch [options] script ...  torch.distributed.launch's (launcher/torch_launch.h)
//   dtrun accelerate [launch] ...      accelerate launch's (launcher/accelerate_launch.h)
//   dtrun deepspeed [options] script   the deepspeed launcher's (launcher/deepspeed_launch.h)
//   dtrun store [options]              a standalone store (launcher/store_command.h)
//   dtrun status [options]             a running job as it is now (launcher/status_command.h)
//   dtrun timeline LOG... -o FILE      event logs drawn on one time axis (launcher/timeline.h)
//
// With --hostfile, the first two start one agent per host over ssh (launcher/multi_host.h)
// instead of running this node's agent (launcher/launch.h).
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/spawn.h"
#include "launcher/accelerate_launch.h"
#include "launcher/accelerate_options.h"
#include "launcher/cli.h"
#include "launcher/deepspeed_launch.h"
#include "launcher/launch.h"
#include "launcher/logging.h"
#include "launcher/multi_host.h"
#include "launcher/slurm.h"
#include "launcher/status_command.h"
#include "launcher/store_command.h"
#include "launcher/timeline_command.h"
#include "launcher/torch_launch.h"

extern char** environ;

namespace {

using namespace dtrun::launcher;
using Env = std::map<std::string, std::string>;

Env environment() {
  Env env;
  for (char** e = environ; *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) env.emplace(std::string(*e, static_cast<std::size_t>(eq - *e)), std::string(eq + 1));
  }
  return env;
}

int run(const Invocation& inv, const std::vector<int>& userFds) {
  if (inv.multiHost) return runMultiHost(*inv.multiHost, inv.config.logLevel);
  return runLaunch(inv.config, userFds);
}

int mainCommand(const std::vector<std::string>& args, Env env, const std::vector<int>& userFds) {
  Invocation inv;
  const OptionParser& parser = mainParser();
  if (auto code = handleUsage(parser, [&] {
        ParsedOptions parsed = parser.parse(args);
        // Slurm (docs/slurm.md): under srun, PET_* defaults for what args and env leave out
        // (slurm.h).
        // A --hostfile job is started from one shell, never as a Slurm step's agent.
        if (!parsed.given("hostfile")) {
          applySlurmDefaults(args, env);
        }
        parser.applyEnvironment(parsed, env);
        inv = resolveInvocation(parser, parsed, env, HostProbe{});
      })) {
    return *code;
  }
  return run(inv, userFds);
}

// The subcommands that take another launcher's command line: `parse` returns the run and its
// notice, which is printed once, from the launching dtrun (the agents' workers never print it).
template <typename Parse>
int frontEndCommand(const OptionParser& parser, Parse parse, const std::vector<int>& userFds) {
  Invocation inv;
  std::string notice;
  if (auto code = handleUsage(parser, [&] {
        auto launch = parse();
        inv = std::move(launch.invocation);
        notice = std::move(launch.notice);
      })) {
    return *code;
  }
  makeLogger("launch", inv.config.logLevel)->warn("{}", notice);
  return run(inv, userFds);
}

}  // namespace

int main(int argc, char** argv) {
  // Before dtrun opens anything: what the user handed us is passed on to the workers, and
  // nothing else (common/spawn.h).
  const std::vector<int> userFds = dtrun::inheritedDescriptors();
  // Writes to a closed pipe (a worker's log reader gone) must fail, not kill the agent.
  ::signal(SIGPIPE, SIG_IGN);
  const std::string sub = argc >= 2 ? argv[1] : "";
  if (sub == "store") return runStoreCommand({argv + 2, argv + argc}, environment());
  if (sub == "status") return runStatusCommand({argv + 2, argv + argc}, environment());
  if (sub == "timeline") return runTimelineCommand({argv + 2, argv + argc}, environment());
  const std::vector<std::string> rest(argv + std::min(argc, 2), argv + argc);
  if (sub == "launch") {
    return frontEndCommand(
        torchLaunchParser(), [&] { return parseTorchLaunch(rest, environment(), HostProbe{}); },
        userFds);
  }
  if (sub == "accelerate") {
    return frontEndCommand(
        accelerateParser(), [&] { return parseAccelerateLaunch(rest, environment(), HostProbe{}); },
        userFds);
  }
  if (sub == "deepspeed") {
    return frontEndCommand(
        deepSpeedParser(), [&] { return parseDeepSpeedLaunch(rest, environment(), HostProbe{}); },
        userFds);
  }
  return mainCommand({argv + 1, argv + argc}, environment(), userFds);
}
