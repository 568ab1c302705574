#include "launcher/front_end.h"

#include <algorithm>
#include <array>
#include <string_view>

#include "launcher/multi_host_plan.h"
#include "launcher/shell_words.h"
#include "launcher/slurm.h"

namespace dtrun::launcher {
namespace {

using Env = std::map<std::string, std::string>;

constexpr std::string_view kGroup = "dtrun options (before the script; dtrun -h says more)";

// dtrun's options every front-end takes: what dtrun adds to any launcher.
constexpr std::array<std::string_view, 12> kShared{
    "python",     "no_agent_store",     "event_log",         "log_line_prefix_template",
    "file_timer", "stall_timeout",      "dump_stacks",       "exit_barrier_timeout",
    "redirects",  "local_ranks_filter", "signals_to_handle", "shutdown_timeout"};

std::vector<OptionSpec> copies(std::initializer_list<std::span<const std::string_view>> lists) {
  std::vector<OptionSpec> out;
  for (auto list : lists) {
    for (auto dest : list) {
      for (auto table : {torchrunOptions(), hostfileOptions()}) {
        for (const auto& o : table) {
          if (o.dest != dest) continue;
          // No short name and no prefixes: the other launcher's options keep theirs.
          out.emplace_back(o.dest, "", o.kind, kGroup, o.env, o.help, o.metavar, o.alias, false);
        }
      }
    }
  }
  return out;
}

const std::vector<OptionSpec>& accelerateExtras() {
  static constexpr std::array<std::string_view, 1> kOwn{"log_level"};
  static const std::vector<OptionSpec> v = copies({kShared, kOwn});
  return v;
}

const std::vector<OptionSpec>& deepSpeedExtras() {
  // And how dtrun reaches the hosts of a hostfile (DeepSpeed's pdsh has no such option).
  static constexpr std::array<std::string_view, 6> kOwn{
      "max_restarts", "monitor_interval", "tee", "log_dir", "ssh_command", "remote_dtrun"};
  static const std::vector<OptionSpec> v = copies({kShared, kOwn});
  return v;
}

bool within(const std::vector<OptionSpec>& v, const OptionSpec& o) {
  return !v.empty() && &o >= v.data() && &o < v.data() + v.size();
}

std::string dashedName(const std::string& dest) {
  return dest.rfind("--", 0) == 0 ? dest : OptionParser::dashed(dest);
}

}  // namespace

std::span<const OptionSpec> frontEndDtrunOptions(FrontEnd which) {
  return which == FrontEnd::kAccelerate ? accelerateExtras() : deepSpeedExtras();
}

bool isFrontEndDtrunOption(const OptionSpec& o) {
  return within(accelerateExtras(), o) || within(deepSpeedExtras(), o);
}

void DtrunCommand::option(const std::string& dest, const std::string& value, bool fromVariable) {
  args.push_back(dashedName(dest) + "=" + value);
  if (!fromVariable) noticeArgs.push_back(args.back());
}

void DtrunCommand::flag(const std::string& dest, bool fromVariable) {
  args.push_back(dashedName(dest));
  if (!fromVariable) noticeArgs.push_back(args.back());
}

void DtrunCommand::forward(const OptionParser& parser, const ParsedOptions& parsed,
                           bool (*keep)(const OptionSpec&)) {
  // A value that came from a variable (DTRUN_PYTHON, PET_MAX_RESTARTS) still applies to a plain
  // dtrun started with the same environment, so the notice leaves it out.
  auto viaVariable = [](const std::string& source) { return source.rfind('-', 0) != 0; };
  for (const auto& table : parser.spec().tables) {
    for (const auto& o : table) {
      if (!keep(o)) continue;
      const std::string dest(o.dest);
      if (o.kind == OptionKind::kFlag && parsed.flag(dest)) {
        flag(dest, viaVariable(parsed.flagSource(dest)));
      }
      if (const auto* g = parsed.value(dest)) option(dest, g->value, viaVariable(g->source));
    }
  }
}

void DtrunCommand::script(const std::string& script, const std::vector<std::string>& scriptArgs) {
  if (script.rfind('-', 0) == 0) {
    args.push_back("--");
    noticeArgs.push_back("--");
  }
  args.push_back(script);
  noticeArgs.push_back(script);
  args.insert(args.end(), scriptArgs.begin(), scriptArgs.end());
  noticeArgs.insert(noticeArgs.end(), scriptArgs.begin(), scriptArgs.end());
}

FrontEndLaunch resolveFrontEnd(const FrontEndRun& run, const Env& env, const HostProbe& host) {
  Env all = env;
  for (const auto& [k, v] : run.env) all[k] = v;
  const OptionParser& parser = mainParser();
  ParsedOptions parsed = parser.parse(run.command.args);
  // As `dtrun` does (launcher/main.cpp): Slurm's defaults for a step's agent, then PET_*.
  if (!parsed.given("hostfile")) applySlurmDefaults(run.command.args, all);
  parser.applyEnvironment(parsed, all);

  FrontEndLaunch out;
  out.invocation = resolveInvocation(parser, parsed, all, host, run.rules);
  auto& config = out.invocation.config;
  config.warnings.insert(config.warnings.begin(), run.warnings.begin(), run.warnings.end());
  if (out.invocation.multiHost) {
    for (const auto& [k, v] : run.hostEnv) out.invocation.multiHost->exportedEnv[k] = v;
  }

  // Assignments quote their value only, so that a shell still reads them as assignments.
  std::string line;
  for (const auto& [k, v] : run.env) line += k + "=" + shellQuote(v) + " ";
  line += "dtrun " + shellJoin(run.command.noticeArgs);
  out.notice = run.launcher + "'s command line on dtrun.";
  for (const auto& c : run.caveats) out.notice += " " + c;
  out.notice += " The same run as a plain dtrun command line: " + line;
  return out;
}

}  // namespace dtrun::launcher
