#include "launcher/torch_launch.h"

#include <array>

#include "launcher/shell_words.h"

namespace dtrun::launcher {
namespace {

constexpr std::array<OptionSpec, 1> kLaunchOptions{{
    {"use_env", "", OptionKind::kFlag, "torch.distributed.launch options", "",
     "Pass the local rank only as the LOCAL_RANK variable: no --local_rank=N argument for the "
     "script (torch.distributed.launch's default is to add one, before the script's own "
     "arguments). --no-local-rank is DeepSpeed's name for it.",
     "", "no_local_rank"},
}};

// The command line that does the same under plain dtrun: the options given on the command line
// (not the PET_* ones: they still apply), the script and its own arguments.
std::string plainDtrunCommand(const ParsedOptions& parsed, const agent::LaunchConfig& config) {
  std::vector<std::string> words{"dtrun"};
  auto fromArgv = [](const std::string& source) { return source.rfind('-', 0) == 0; };
  for (const auto& spec : {torchrunOptions(), hostfileOptions()}) {
    for (const auto& o : spec) {
      if (o.kind == OptionKind::kFlag && parsed.flag(o.dest) &&
          fromArgv(parsed.flagSource(o.dest))) {
        words.push_back(OptionParser::dashed(o.dest));
      }
      const auto* g = parsed.value(o.dest);
      if (g && fromArgv(g->source)) words.push_back(OptionParser::dashed(o.dest) + "=" + g->value);
    }
  }
  // Plain dtrun chooses static only for --master-addr/--master-port/--node-rank without an
  // endpoint; a multi-node job that relied on launch's static default says so.
  if (config.rdzv.backend == agent::RendezvousBackend::kStatic && config.rdzv.maxNodes > 1 &&
      !parsed.given("rdzv_backend") && parsed.given("rdzv_endpoint")) {
    words.push_back("--rdzv-backend=static");
  }
  words.push_back(*parsed.script());
  words.insert(words.end(), parsed.scriptArgs().begin(), parsed.scriptArgs().end());
  return shellJoin(words);
}

}  // namespace

const OptionParser& torchLaunchParser() {
  static const OptionParser parser(CommandSpec{
      "dtrun launch",
      "[-h] [options] training_script [training_script_args ...]",
      {torchrunOptions(), kLaunchOptions, hostfileOptions()},
      true,
      {"torch.distributed.launch's command line on dtrun, for scripts that read their local rank "
       "from a --local_rank argument: python -m torch.distributed.launch ARGS becomes dtrun "
       "launch ARGS. Every worker gets --local_rank=N before the script's own arguments (unless "
       "--use-env), the rendezvous is static by default (--master-addr, --master-port, "
       "--node-rank, --nnodes), and every other option is torchrun's, as in plain dtrun (dtrun "
       "-h says more about each)."},
      {{"training_script", "Path of the training script (a module name with -m)."},
       {"training_script_args",
        "Arguments for the training script, after --local_rank=N; ${local_rank} becomes the "
        "worker's local rank."}},
      {"Exit codes: 0 when every worker succeeded, 1 for any failure, 2 for a bad command "
       "line."}});
  return parser;
}

TorchLaunch parseTorchLaunch(const std::vector<std::string>& args,
                             const std::map<std::string, std::string>& env, const HostProbe& host) {
  const OptionParser& parser = torchLaunchParser();
  ParsedOptions parsed = parser.parse(args);
  parser.applyEnvironment(parsed, env);
  const bool useEnv = parsed.flag("use_env");
  if (parsed.flag("no_python") && !useEnv) {
    throw UsageError(parsed.flagSource("no_python") +
                     ": needs --use-env (a program that is not Python cannot be given "
                     "--local_rank; with --use-env it reads LOCAL_RANK)");
  }
  InvocationRules rules;
  rules.staticByDefault = true;
  if (!useEnv) rules.scriptArgsPrefix.push_back("--local_rank=${local_rank}");

  TorchLaunch out;
  out.invocation = resolveInvocation(parser, parsed, env, host, rules);
  out.notice =
      std::string(
          "torch.distributed.launch is deprecated in favour of torchrun, whose command "
          "line plain dtrun takes. To move: ") +
      (useEnv ? "drop --use-env (the script already reads LOCAL_RANK)"
              : "make the script read its local rank from os.environ[\"LOCAL_RANK\"] instead of "
                "a --local_rank argument") +
      ", then run: " + plainDtrunCommand(parsed, out.invocation.config);
  return out;
}

}  // namespace dtrun::launcher
