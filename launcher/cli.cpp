// The command line resolved in steps: OptionParser reads argv the way argparse does (the option
// table of cli_options.cpp, prefixes, glued short options, the remainder) and fills in PET_* and
// dtrun's variables for what argv left out; the resolve*() steps turn the strings into a
// LaunchConfig with torchrun's rules (run.py: run() and config_from_args()): the rendezvous in
// cli_rendezvous.cpp, the workers and their logs in cli_workers.cpp, dtrun's own options here.
// Values are checked by launcher/args.h helpers, each error naming the option or variable the
// value came from.
#include "launcher/cli.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <optional>
#include <random>

#include "launcher/cli_steps.h"
#include "launcher/rdzv_args.h"
#include "launcher/rendezvous_access.h"
#include "launcher/store_command.h"

namespace dtrun::launcher {

using steps::envValue;
using steps::resolveConventions;
using steps::resolveEntrypoint;
using steps::resolveHangOptions;
using steps::resolveLogs;
using steps::resolvePrewarm;
using steps::resolveRendezvous;
using steps::resolveWorkers;

namespace {

using agent::LaunchConfig;
using Env = std::map<std::string, std::string>;

int onlineCpus(const HostProbe& host) {
  if (host.cpuCount > 0) return host.cpuCount;
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

// Is `text` an IPv4 or IPv6 address (the metrics endpoint binds one, never a name)?
bool isIpAddress(const std::string& text) {
  unsigned char buf[16];
  return ::inet_pton(AF_INET, text.c_str(), buf) == 1 ||
         ::inet_pton(AF_INET6, text.c_str(), buf) == 1;
}

// --event-log, --log-line-prefix-template, --no-agent-store, --log-level, and what the job shows
// of itself: --exit-codes, --termination-log, --metrics-port, --metrics-host.
void resolveDtrunOptions(LaunchConfig& cfg, const ParsedOptions& t, const Env& env) {
  cfg.stopOnStdinClose = t.flag("stop_on_stdin_close");
  if (const auto* g = t.value("exit_codes")) {
    auto scheme = agent::parseExitCodeScheme(g->value);
    if (!scheme) {
      throw UsageError(g->source + ": invalid value '" + g->value +
                       "': expected torchrun or detailed");
    }
    cfg.exitCodes = *scheme;
  }
  if (const auto* g = t.value("termination_log")) {
    if (g->value.empty()) throw UsageError(g->source + ": expected a file path");
    cfg.terminationLog = g->value;
  }
  if (const auto* g = t.value("metrics_port")) {
    cfg.metricsPort = static_cast<std::uint16_t>(parseInteger(g->source, g->value, 0, 65535));
  }
  if (const auto* g = t.value("metrics_host")) {
    if (!isIpAddress(g->value)) {
      throw UsageError(g->source + ": invalid value '" + g->value + "': expected an IP address");
    }
    cfg.metricsHost = g->value;
  }
  if (const auto* g = t.value("event_log")) cfg.eventLog = g->value;
  if (const auto* g = t.value("log_line_prefix_template")) {
    checkLogLinePrefixTemplate(g->source, g->value);
    cfg.logLinePrefixTemplate = g->value;
  }
  cfg.agentStore = !t.flag("no_agent_store") &&
                   envValue(env, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE").value_or("") != "1";
  if (const auto* g = t.value("log_level")) {
    auto level = normalizeLogLevel(g->value);
    if (!level) {
      throw UsageError(g->source + ": invalid value '" + g->value +
                       "': expected trace, debug, info, warn, error, critical or off");
    }
    cfg.logLevel = *level;
  } else if (auto v = envValue(env, "LOGLEVEL")) {
    // torch's variable, set for torch's own Python logging: a value dtrun does not know is
    // not dtrun's business, so it is ignored rather than an error.
    if (auto level = normalizeLogLevel(*v)) {
      cfg.logLevel = *level;
    } else {
      cfg.warnings.push_back("LOGLEVEL=" + *v + " is not a log level dtrun knows; using warn");
    }
  }
}

// torchrun maps each local rank through the launcher's CUDA_VISIBLE_DEVICES and refuses a rank
// without an entry (local_elastic_agent.py); dtrun refuses before anything starts. The entries
// are those the agent maps with (common/devices.h), so every worker gets one of the job's own.
void checkVirtualLocalRank(const LaunchConfig& cfg, const ParsedOptions& t, const Env& env) {
  if (!cfg.virtualLocalRank) return;
  auto cvd = envValue(env, "CUDA_VISIBLE_DEVICES");
  if (!cvd) return;
  const auto entries = static_cast<int>(parseVisibleDevices(*cvd).entries().size());
  if (cfg.nprocPerNode > entries) {
    throw UsageError(t.flagSource("virtual_local_rank") + ": " + std::to_string(cfg.nprocPerNode) +
                     " workers per node but "
                     "CUDA_VISIBLE_DEVICES=" +
                     *cvd + " lists " + std::to_string(entries) +
                     " device(s): each worker needs an entry of its own");
  }
}

// The options a --hostfile launch passes on to every host's agent: torchrun's and dtrun's own,
// but those the plan sets for each host (and the launch-only ones such as --use-env).
bool isForwarded(const OptionSpec& o) {
  auto table = torchrunOptions();
  if (&o < table.data() || &o >= table.data() + table.size()) return false;
  for (std::string_view dest :
       {"help", "nnodes", "node_rank", "nproc_per_node", "master_addr", "master_port",
        "rdzv_backend", "rdzv_endpoint", "rdzv_id", "standalone", "stop_on_stdin_close"}) {
    if (o.dest == dest) return false;
  }
  return true;
}

}  // namespace

std::string randomUuid4() {
  std::random_device rd;
  std::array<std::uint8_t, 16> b{};
  for (std::size_t i = 0; i < b.size(); i += 4) {
    std::uint32_t v = rd();
    for (std::size_t k = 0; k < 4; ++k) b[i + k] = static_cast<std::uint8_t>(v >> (8 * k));
  }
  b[6] = static_cast<std::uint8_t>((b[6] & 0x0f) | 0x40);
  b[8] = static_cast<std::uint8_t>((b[8] & 0x3f) | 0x80);
  std::string s;
  char hex[3];
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    std::snprintf(hex, sizeof hex, "%02x", b[i]);
    s += hex;
  }
  return s;
}

const OptionParser& mainParser() {
  static const OptionParser parser(CommandSpec{
      "dtrun",
      "[-h] [options] training_script [training_script_args ...]",
      {torchrunOptions(), hostfileOptions()},
      true,
      {"Launches training_script once per local rank on every node and supervises the workers: "
       "an elastic, torchrun-compatible launcher (Torch Distributed Elastic Training Launcher).",
       "Every multi-word option also has an underscore spelling (--nproc_per_node), a unique "
       "prefix of a torchrun option works (--nproc), and --option=value works as well as "
       "--option value. A torchrun option missing from the command line is read from PET_<NAME> "
       "(PET_NPROC_PER_NODE=2; flags take 1 or 0: PET_STANDALONE=1).",
       "Subcommands: `dtrun launch` takes torch.distributed.launch's command line (scripts that "
       "read --local_rank); `dtrun accelerate` (or `dtrun accelerate launch`) takes `accelerate "
       "launch`'s, with its config file; `dtrun deepspeed` takes the deepspeed launcher's; "
       "`dtrun store` runs a standalone store. Each has its own -h."},
      {{"training_script",
        "Path of the training program or script (a module name with -m), launched on every "
        "local rank."},
       {"training_script_args",
        "Arguments for the training script, passed on untouched; ${local_rank} becomes the "
        "worker's local rank."}},
      {"Exit codes (--exit-codes torchrun, the default): 0 when every worker of this node "
       "succeeded, or the job finished without this node (with --hostfile: of every host), 1 "
       "for any failure, 2 for a bad command line. --exit-codes detailed tells failures apart "
       "(see there). The last line on stderr sums the run up: the outcome, the world size of "
       "each round, the restarts and their causes, the wall time.",
       "Subcommands for a running job: `dtrun status` shows it (-h there); `dtrun timeline "
       "EVENT_LOG... -o FILE.html` draws --event-log files on one time axis."}});
  return parser;
}

LaunchConfig resolveLaunchConfig(const ParsedOptions& t, const Env& env, const HostProbe& host,
                                 const InvocationRules& rules) {
  LaunchConfig cfg;
  for (const auto& dest : t.givenDests()) cfg.givenOptions.insert(dest);
  if (const auto* g = t.value("nproc_per_node")) {
    cfg.nprocPerNode = parseNprocPerNode(g->source, g->value, DeviceDirs{host.devDir, host.sysDir},
                                         env, onlineCpus(host));
  }
  resolveRendezvous(cfg, t, rules);
  cfg.rdzv.token = resolveStoreToken(cfg.rdzv, env, cfg.warnings);
  resolveWorkers(cfg, t, env);
  resolveEntrypoint(cfg, t, env, rules);
  cfg.scriptArgs.insert(cfg.scriptArgs.begin(), rules.scriptArgsPrefix.begin(),
                        rules.scriptArgsPrefix.end());
  resolveLogs(cfg, t);
  resolveDtrunOptions(cfg, t, env);
  resolveConventions(cfg, t);
  checkVirtualLocalRank(cfg, t, env);
  resolveHangOptions(cfg, t, env);
  resolvePrewarm(cfg, t);

  // The workers' environment: the launcher's own, plus what torchrun adds to its own (not for
  // workers that get no launcher's variables at all).
  cfg.baseEnv = env;
  if (cfg.workerVariables == agent::WorkerVariables::kNone) return cfg;
  // DeepSpeed's launcher leaves the workers' thread count alone.
  if (!env.count("OMP_NUM_THREADS") && cfg.nprocPerNode > 1 &&
      cfg.workerVariables == agent::WorkerVariables::kTorchrun) {
    cfg.baseEnv["OMP_NUM_THREADS"] = "1";
    cfg.ompNumThreadsSet = true;
  }
  std::string names;
  for (int s : cfg.signalsToHandle) names += (names.empty() ? "" : ",") + signalName(s);
  cfg.baseEnv["TORCHELASTIC_SIGNALS_TO_HANDLE"] = names;
  return cfg;
}

Invocation resolveInvocation(const OptionParser& parser, const ParsedOptions& parsed,
                             const Env& env, const HostProbe& host, const InvocationRules& rules) {
  checkHostfileOptions(parsed);
  Invocation inv;
  inv.config = resolveLaunchConfig(parsed, env, host, rules);
  if (!parsed.given("hostfile")) return inv;
  MultiHostInputs in;
  in.workDir = host.workDir.empty() ? std::filesystem::current_path() : host.workDir;
  in.selfExe = host.selfExe.empty() ? selfExecutable() : host.selfExe;
  // Every option the hosts' agents need again, but those the plan sets for each host.
  in.agentOptions = parser.toArgs(parsed, isForwarded);
  in.command.push_back(inv.config.script);
  in.command.insert(in.command.end(), inv.config.scriptArgs.begin(), inv.config.scriptArgs.end());
  inv.multiHost = planMultiHost(parsed, env, in);
  inv.multiHost->shutdownTimeout = inv.config.shutdownTimeout;
  return inv;
}

LaunchConfig parseCommandLine(const std::vector<std::string>& args, const Env& env) {
  return parseCommandLine(args, env, HostProbe{});
}

LaunchConfig parseCommandLine(const std::vector<std::string>& args, const Env& env,
                              const HostProbe& host) {
  ParsedOptions parsed = mainParser().parse(args);
  mainParser().applyEnvironment(parsed, env);
  return resolveLaunchConfig(parsed, env, host);
}

std::string usageText() { return mainParser().usageLine(); }

std::string helpText() { return mainParser().helpText(); }

}  // namespace dtrun::launcher
