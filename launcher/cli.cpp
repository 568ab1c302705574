// The command line resolved in steps: OptionParser reads argv the way argparse does (the option
// table below, prefixes, glued short options, the remainder) and fills in PET_* and dtrun's
// variables for what argv left out; the resolve*() steps turn the strings into a LaunchConfig
// with torchrun's rules (run.py: run() and config_from_args()). Values are checked by
// launcher/args.h helpers, each error naming the option or variable the value came from.
#include "launcher/cli.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <optional>
#include <random>

#include "launcher/rdzv_args.h"
#include "launcher/rendezvous_access.h"
#include "launcher/store_command.h"

namespace dtrun::launcher {
namespace {

using agent::LaunchConfig;
using Env = std::map<std::string, std::string>;

std::optional<std::string> envValue(const Env& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
}

int onlineCpus(const HostProbe& host) {
  if (host.cpuCount > 0) return host.cpuCount;
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

std::string uuidIntString() {
  // torch's LaunchConfig fills an empty run id with str(uuid4().int).
  std::random_device rd;
  unsigned __int128 v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 32) | rd();
  v &= ~(static_cast<unsigned __int128>(0xf000) << 64);  // version nibble
  v |= static_cast<unsigned __int128>(0x4000) << 64;
  v &= ~(static_cast<unsigned __int128>(0xc000000000000000ull));  // variant bits
  v |= static_cast<unsigned __int128>(0x8000000000000000ull);
  std::string s;
  do {
    s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  } while (v != 0);
  return s;
}

// --rdzv-backend. dtrun defaults to c10d; a command line in torchrun's legacy static form
// (--master-addr/--master-port/--node-rank without --rdzv-endpoint) keeps running static, as it
// does under newest torchrun, whose auto single-node switch needs none of them.
agent::RendezvousBackend chooseBackend(const ParsedOptions& t, bool haveEndpoint,
                                       bool staticByDefault) {
  using agent::RendezvousBackend;
  if (const auto* g = t.value("rdzv_backend")) {
    // torchrun's two etcd backends (etcd: v2 API, etcd-v2: the newer one, also v2) are one
    // here, speaking etcd's v3 API (docs/rendezvous.md, "The etcd backend").
    if (g->value == "etcd" || g->value == "etcd-v2") return RendezvousBackend::kEtcd;
    if (g->value == "c10d") return RendezvousBackend::kC10d;
    if (g->value == "static") return RendezvousBackend::kStatic;
    throw UsageError(g->source + ": invalid value '" + g->value +
                     "': expected c10d, static or etcd (etcd-v2)");
  }
  // torch.distributed.launch: get_args_parser's default
  if (staticByDefault) return RendezvousBackend::kStatic;
  bool legacy = t.given("master_addr") || t.given("master_port") || t.given("node_rank");
  return !haveEndpoint && legacy ? RendezvousBackend::kStatic : RendezvousBackend::kC10d;
}

// Port 0 asks the OS for a free port, which only the agent that binds it learns.
void rejectPortZeroForSeveralNodes(const Endpoint& ep, int maxNodes, const std::string& source) {
  if (ep.port == 0 && maxNodes > 1) {
    throw UsageError(source +
                     ": port 0 with several nodes: the other nodes cannot find it; expected a "
                     "port from 1 to 65535");
  }
}

// The static backend's endpoint and checks (torchrun's get_rdzv_endpoint and the static
// handler's): --rdzv-endpoint with a port, else master_addr:master_port.
void resolveStaticEndpoint(LaunchConfig& cfg, const ParsedOptions& t, const GivenValue* endpoint,
                           const InvocationRules& rules) {
  auto& r = cfg.rdzv;
  Endpoint ep;
  if (endpoint) {
    ep = parseEndpoint(endpoint->source, endpoint->value, std::nullopt);
  } else {
    // A single node needs no port that others know: torch.distributed.launch's 29500 becomes a
    // free one, so that two such jobs on one machine do not collide.
    const bool freePort = rules.staticByDefault && r.maxNodes == 1 && !r.masterPort;
    std::string port = std::to_string(freePort ? 0 : r.masterPort.value_or(29500));
    ep = parseEndpoint("--master-addr/--master-port", r.masterAddr + ":" + port, std::nullopt);
  }
  r.host = ep.host;
  r.port = ep.port;
  std::string nodes = std::to_string(r.minNodes) + ":" + std::to_string(r.maxNodes);
  if (r.nodeRank >= r.maxNodes) {
    const GivenValue* g = t.value("node_rank");
    throw UsageError((g ? g->source : std::string("--node-rank")) + ": invalid value '" +
                     std::to_string(r.nodeRank) + "': expected an integer from 0 to " +
                     std::to_string(r.maxNodes - 1) + " (below --nnodes, static backend)");
  }
  rejectPortZeroForSeveralNodes(ep, r.maxNodes,
                                endpoint ? endpoint->source : std::string("--master-port"));
  // torch uses max_nodes as the world size and never checks the rest; say what happens.
  if (r.minNodes != r.maxNodes) {
    cfg.warnings.push_back("the static rendezvous backend waits for all " +
                           std::to_string(r.maxNodes) + " nodes of --nnodes " + nodes);
  }
  if (r.maxNodes > 1 && !t.given("node_rank")) {
    cfg.warnings.push_back("--node-rank not given: this node is node 0 of " +
                           std::to_string(r.maxNodes) + " (static rendezvous backend)");
  }
}

// --nnodes, the rendezvous options, --standalone and the static backend's legacy options.
void resolveRendezvous(LaunchConfig& cfg, const ParsedOptions& t, const InvocationRules& rules) {
  auto& r = cfg.rdzv;
  if (const auto* g = t.value("nnodes")) {
    NodeRange nodes = parseNodeRange(g->source, g->value);
    r.minNodes = nodes.min;
    r.maxNodes = nodes.max;
  }
  if (const auto* g = t.value("node_rank")) {
    r.nodeRank = static_cast<int>(parseInteger(g->source, g->value, 0, 1 << 24));
  }
  if (const auto* g = t.value("master_addr")) {
    if (g->value.empty()) throw UsageError(g->source + ": expected a host name or IP address");
    r.masterAddr = g->value;
  }
  if (const auto* g = t.value("master_port")) {
    r.masterPort = static_cast<std::uint16_t>(parseInteger(g->source, g->value, 0, 65535));
  }
  if (const auto* g = t.value("local_addr")) r.localAddr = g->value;
  if (const auto* g = t.value("rdzv_id")) {
    if (g->value.find('/') != std::string::npos) {
      throw UsageError(g->source + ": invalid value '" + g->value +
                       "': expected an id without '/' (it names the log directory)");
    }
    r.runId = g->value.empty() ? uuidIntString() : g->value;
  }
  if (const auto* g = t.value("rdzv_conf")) applyRendezvousConf(r, g->source, g->value);

  const GivenValue* endpoint = t.value("rdzv_endpoint");
  if (endpoint && endpoint->value.empty()) endpoint = nullptr;  // torch: "" = not given
  r.backend = chooseBackend(t, endpoint != nullptr, rules.staticByDefault);
  cfg.standalone = t.flag("standalone");
  if (cfg.standalone) {
    // torchrun's run(): standalone overrides whatever was given.
    if (t.given("rdzv_backend") || t.given("rdzv_endpoint") || t.given("rdzv_id")) {
      cfg.warnings.push_back("--standalone ignores --rdzv-backend, --rdzv-endpoint and --rdzv-id");
    }
    // The rendezvous listens on a free port that only this agent knows: nobody else can join.
    const std::string nnodes = std::to_string(r.minNodes) + ":" + std::to_string(r.maxNodes);
    if (r.minNodes > 1) {
      throw UsageError("--standalone with --nnodes " + nnodes +
                       ": a standalone job is one node (its rendezvous is on a free local port "
                       "no other agent can know), so it would wait for nodes that can never "
                       "join; give --rdzv-endpoint instead of --standalone");
    }
    if (r.maxNodes > 1) {
      cfg.warnings.push_back("--standalone with --nnodes " + nnodes +
                             ": the rendezvous listens on a free local port that no other agent "
                             "can know, so the job runs on this node alone");
    }
    r.backend = agent::RendezvousBackend::kC10d;
    r.host = "localhost";
    r.port = 0;
    r.runId = randomUuid4();
    return;
  }
  if (r.backend == agent::RendezvousBackend::kStatic) {
    resolveStaticEndpoint(cfg, t, endpoint, rules);
    return;
  }
  if (t.given("master_addr") || t.given("master_port") || t.given("node_rank")) {
    cfg.warnings.push_back(
        "--master-addr, --master-port and --node-rank are only used by the static rendezvous "
        "backend; ignored with " +
        std::string(agent::backendName(r.backend)));
  }
  if (r.backend == agent::RendezvousBackend::kEtcd) {
    if (!endpoint) {
      throw UsageError(
          "--rdzv-backend etcd needs --rdzv-endpoint: the etcd members, comma-separated "
          "(host:port or URLs), e.g. --rdzv-endpoint=etcd1:2379,etcd2:2379,etcd3:2379");
    }
    const auto eps = parseEtcdEndpoints(endpoint->source, endpoint->value, r.conf);
    r.etcdEndpoints = endpoint->value;
    r.host = eps.front().host;
    r.port = eps.front().port;
    return;
  }
  if (endpoint) {
    Endpoint ep = parseEndpoint(endpoint->source, endpoint->value, 29400);
    rejectPortZeroForSeveralNodes(ep, r.maxNodes, endpoint->source);
    r.host = ep.host;
    r.port = ep.port;
  } else if (r.maxNodes == 1) {
    // Newest torchrun's single-node mode: nobody else joins, so a free port and a fresh id.
    r.host = "localhost";
    r.port = 0;
    if (!t.given("rdzv_id")) r.runId = randomUuid4();
  } else {
    r.host = "localhost";  // torch's default for an empty endpoint; Slurm may fill it in
    r.port = 29400;
  }
}

// Restarts, monitoring, role, signals and shutdown.
void resolveWorkers(LaunchConfig& cfg, const ParsedOptions& t, const Env& env) {
  if (const auto* g = t.value("max_restarts")) {
    cfg.maxRestarts = static_cast<int>(parseInteger(g->source, g->value, 0, 1 << 30));
  }
  if (const auto* g = t.value("monitor_interval")) {
    cfg.monitorInterval = parseSeconds(g->source, g->value);
  }
  if (const auto* g = t.value("start_method")) {
    if (g->value != "spawn" && g->value != "fork" && g->value != "forkserver") {
      throw UsageError(g->source + ": invalid choice '" + g->value +
                       "': expected spawn, fork or forkserver");
    }
    cfg.startMethod = g->value;
  }
  if (const auto* g = t.value("event_log_handler")) {
    if (g->value != "null" && g->value != "console" && g->value != "dynamic_rendezvous") {
      throw UsageError(g->source + ": invalid value '" + g->value +
                       "': expected null, console or dynamic_rendezvous");
    }
    cfg.eventLogHandler = g->value;
  }
  if (const auto* g = t.value("role")) cfg.role = g->value;

  // dtrun's default adds SIGUSR1/SIGUSR2 to torchrun's: Slurm's preemption warning.
  cfg.signalsToHandle.assign(kDefaultHandledSignals.begin(), kDefaultHandledSignals.end());
  if (const auto* g = t.value("signals_to_handle")) {
    cfg.signalsToHandle = parseSignalList(g->source, g->value);
  }
  if (const auto* g = t.value("shutdown_timeout")) {
    cfg.shutdownTimeout = parseSeconds(g->source, g->value, true);
  } else if (auto v = envValue(env, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT")) {
    cfg.shutdownTimeout = parseSeconds("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", *v, true);
  }
  cfg.virtualLocalRank = t.flag("virtual_local_rank");
}

// The worker command, as torchrun's config_from_args builds it.
void resolveEntrypoint(LaunchConfig& cfg, const ParsedOptions& t, const Env& env,
                       const InvocationRules& rules) {
  cfg.script = *t.script();
  cfg.scriptArgs = t.scriptArgs();
  cfg.module = t.flag("module");
  cfg.noPython = t.flag("no_python");
  cfg.runPath = t.flag("run_path");
  if (const auto* g = t.value("python")) {
    if (g->value.empty()) throw UsageError(g->source + ": expected an interpreter path or name");
    cfg.python = g->value;
  } else if (auto exec = envValue(env, "PYTHON_EXEC"); exec && !exec->empty()) {
    cfg.python = *exec;  // torchrun's os.getenv("PYTHON_EXEC", sys.executable)
  }
  if (cfg.runPath) {
    // torchrun runs its run_script_path function, which is also the name in its failure report.
    cfg.entrypoint = {cfg.python, "-u", cfg.script};
    cfg.entrypointName = "run_script_path";
  } else if (cfg.noPython) {
    if (cfg.module) {
      throw UsageError(
          "Don't use both the '--no-python' flag and the '--module' flag at the same time.");
    }
    cfg.entrypoint = {cfg.script};
    cfg.entrypointName = cfg.script;
  } else {
    cfg.entrypoint = {cfg.python};
    if (rules.unbuffered) cfg.entrypoint.push_back("-u");
    if (cfg.module) cfg.entrypoint.push_back("-m");
    cfg.entrypoint.push_back(cfg.script);
    cfg.entrypointName = cfg.script;  // torch: the first argument not starting with '-'
  }
}

// --log-dir, -r, -t, the console filters, and the accepted-only --logs-specs/--numa-binding.
void resolveLogs(LaunchConfig& cfg, const ParsedOptions& t) {
  if (const auto* g = t.value("log_dir"); g && !g->value.empty()) cfg.logDir = g->value;
  if (const auto* g = t.value("redirects")) cfg.redirects = parseStdSpec(g->source, g->value);
  if (const auto* g = t.value("tee")) cfg.tee = parseStdSpec(g->source, g->value);
  if (const auto* g = t.value("local_ranks_filter"); g && !g->value.empty()) {
    cfg.localRanksFilter = parseRankSet(g->source, g->value);
  }
  if (const auto* g = t.value("duplicate_stdout_filters")) {
    cfg.duplicateStdoutFilters = splitEscapedCommaList(g->value);
  }
  if (const auto* g = t.value("duplicate_stderr_filters")) {
    cfg.duplicateStderrFilters = splitEscapedCommaList(g->value);
  }
  if (const auto* g = t.value("logs_specs")) {
    cfg.logsSpecs = g->value;
    cfg.warnings.push_back(g->source + " " + g->value +
                           ": dtrun has no torchrun.logs_specs plugins; using its default logs "
                           "layout");
  }
  if (const auto* g = t.value("numa_binding")) {
    if (g->value != "node" && g->value != "socket" && g->value != "exclusive" &&
        g->value != "core-complex") {
      throw UsageError(g->source + ": invalid choice '" + g->value +
                       "': expected node, socket, exclusive or core-complex");
    }
    cfg.numaBinding = g->value;
  }
}

// --file-timer (TORCHELASTIC_ENABLE_FILE_TIMER), --stall-timeout, --dump-stacks,
// --exit-barrier-timeout.
void resolveHangOptions(LaunchConfig& cfg, const ParsedOptions& t, const Env& env) {
  // torchrun's rule: exactly "1" enables it; anything else leaves it off, silently.
  cfg.fileTimer =
      t.flag("file_timer") || envValue(env, "TORCHELASTIC_ENABLE_FILE_TIMER").value_or("") == "1";
  cfg.timerFile = envValue(env, "TORCHELASTIC_TIMER_FILE").value_or("");
  if (const auto* g = t.value("stall_timeout")) {
    cfg.stallTimeout = parseSeconds(g->source, g->value);
  }
  cfg.dumpStacks = t.flag("dump_stacks");
  if (cfg.dumpStacks && !cfg.fileTimer && !cfg.stallTimeout) {
    cfg.warnings.push_back(
        "--dump-stacks does nothing without --file-timer or --stall-timeout: nothing is "
        "watched for hangs");
  }
  if (const auto* g = t.value("exit_barrier_timeout")) {
    cfg.exitBarrierTimeout = parseSeconds(g->source, g->value, true);
  }
}

// --worker-variables and --exit-code: the other launchers' conventions (launcher/front_end.h).
void resolveConventions(LaunchConfig& cfg, const ParsedOptions& t) {
  if (const auto* g = t.value("worker_variables")) {
    if (g->value == "torchrun") {
      cfg.workerVariables = agent::WorkerVariables::kTorchrun;
    } else if (g->value == "deepspeed") {
      cfg.workerVariables = agent::WorkerVariables::kDeepSpeed;
    } else if (g->value == "none") {
      cfg.workerVariables = agent::WorkerVariables::kNone;
    } else {
      throw UsageError(g->source + ": invalid value '" + g->value +
                       "': expected torchrun, deepspeed or none");
    }
    if (cfg.workerVariables == agent::WorkerVariables::kNone && cfg.nprocPerNode != 1) {
      throw UsageError(g->source +
                       " none: workers without a rank cannot tell each other "
                       "apart; it starts one process (--nproc-per-node 1)");
    }
  }
  if (const auto* g = t.value("exit_code")) {
    if (g->value == "worker") {
      // One scheme decides the code (agent/outcome.h): this one and --exit-codes detailed
      // would both claim it.
      if (cfg.exitCodes == agent::ExitCodeScheme::kDetailed) {
        throw UsageError(g->source + " worker and --exit-codes detailed choose two exit-code " +
                         "schemes: give one");
      }
      cfg.exitCodes = agent::ExitCodeScheme::kWorker;
    } else if (g->value != "torchrun") {
      throw UsageError(g->source + ": invalid value '" + g->value +
                       "': expected torchrun or worker");
    }
  }
}

// --prewarm MODULE[,MODULE...] and --prewarm-timeout: module names checked, and refused where a
// standby cannot stand in for a worker.
void resolvePrewarm(LaunchConfig& cfg, const ParsedOptions& t) {
  const auto* g = t.value("prewarm");
  if (g && !g->value.empty()) {
    for (const std::string& name : splitOn(g->value, ',')) {
      bool ok = !name.empty();
      for (const std::string& part : splitOn(name, '.')) {
        ok = ok && !part.empty() && !std::isdigit(static_cast<unsigned char>(part[0]));
        for (char c : part) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
      }
      if (!ok) {
        throw UsageError(g->source + ": invalid value '" + g->value + "': '" + name +
                         "' is not a module name; expected MODULE[,MODULE...], e.g. torch");
      }
      if (cfg.module && name == cfg.script) {
        throw UsageError(g->source + ": '" + name +
                         "' is the -m module, which runs as __main__: it cannot be imported "
                         "ahead");
      }
      cfg.prewarm.push_back(name);
    }
    if (cfg.noPython && !cfg.runPath) {
      throw UsageError(g->source +
                       " with --no-python: the workers are not Python interpreters, so there "
                       "is nothing to import ahead");
    }
  }
  if (const auto* timeout = t.value("prewarm_timeout")) {
    cfg.prewarmTimeout = parseSeconds(timeout->source, timeout->value);
    if (cfg.prewarm.empty()) {
      cfg.warnings.push_back(timeout->source + " does nothing without --prewarm");
    }
  }
}

// --event-log, --log-line-prefix-template, --no-agent-store, --log-level.
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
