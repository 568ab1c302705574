// The front-ends for the other launchers the tutorials teach (docs/design.md, decision 12):
// `dtrun accelerate` (launcher/accelerate_launch.h) and `dtrun deepspeed`
// (launcher/deepspeed_launch.h). Each translates its launcher's command line, config file and
// environment into what that launcher would run, written as a plain dtrun command line
// (FrontEndRun): the options, the variables the launcher adds for its workers, the script and its
// arguments. This file turns that into the ordinary Invocation through the same steps `dtrun`
// takes (Slurm defaults, PET_* variables, resolveInvocation), so everything dtrun adds stays on,
// and writes the one notice that shows the plain dtrun command line.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "launcher/cli.h"
#include "launcher/option_parser.h"

namespace dtrun::launcher {

/// Which front-end asks (their own options differ).
enum class FrontEnd { kAccelerate, kDeepSpeed };

/// dtrun's own options a front-end accepts before the script (--python, --event-log,
/// --file-timer, --stall-timeout, ...), exact names only so that the other launcher's own
/// abbreviations keep their meaning. accelerate has --max-restarts, --monitor-interval, --tee and
/// --log-dir of its own and gets --log-level; DeepSpeed has --log_level of its own and gets the
/// four others, and --ssh-command and --remote-dtrun for a hostfile's hosts.
std::span<const OptionSpec> frontEndDtrunOptions(FrontEnd which);

/// True when `o` is an entry of frontEndDtrunOptions() (either front-end's).
bool isFrontEndDtrunOption(const OptionSpec& o);

/// A plain dtrun command line being written: what runs, and what the notice shows.
struct DtrunCommand {
  std::vector<std::string> args;        ///< argv after "dtrun"
  std::vector<std::string> noticeArgs;  ///< the same without what came from variables

  /// "--name=value" (`name` an option dest or a dashed name).
  void option(const std::string& dest, const std::string& value, bool fromVariable = false);
  /// "--name".
  void flag(const std::string& dest, bool fromVariable = false);
  /// The options of `parsed` that `parser` has and `keep` accepts, as given.
  void forward(const OptionParser& parser, const ParsedOptions& parsed,
               bool (*keep)(const OptionSpec&));
  /// The script ("--" first when it looks like an option) and its arguments.
  void script(const std::string& script, const std::vector<std::string>& args);
};

/// What a front-end's launcher would run, as plain dtrun.
struct FrontEndRun {
  std::string launcher;  ///< "accelerate launch", "deepspeed": how the notice names it
  DtrunCommand command;
  /// Variables set over the launcher's environment, hence every worker's (ACCELERATE_*,
  /// CUDA_VISIBLE_DEVICES of the slots, ...).
  std::map<std::string, std::string> env;
  /// What plain dtrun cannot say on its command line (accelerate's single process without -u).
  InvocationRules rules;
  /// Sentences for the notice: what the plain command line would do differently.
  std::vector<std::string> caveats;
  /// One line each, logged at warning level before the run.
  std::vector<std::string> warnings;
  /// --hostfile: variables for every host's agent, over dtrun's own exports.
  std::map<std::string, std::string> hostEnv;
};

/// The run resolved, and its notice.
struct FrontEndLaunch {
  Invocation invocation;
  std::string notice;  ///< one paragraph: the plain dtrun command line (see the file comment)
};

/// Resolves `run` as `dtrun` resolves its own command line: `env` (the launcher's environment)
/// with run.env over it, Slurm's defaults without --hostfile, PET_* variables, then
/// resolveInvocation with run.rules. Throws UsageError as parseCommandLine does. Pure but for the
/// device trees and the files a --hostfile run reads, and inside a Slurm step the Slurm probe.
FrontEndLaunch resolveFrontEnd(const FrontEndRun& run,
                               const std::map<std::string, std::string>& env,
                               const HostProbe& host);

}  // namespace dtrun::launcher
