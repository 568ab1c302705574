// The command line in three steps: tokenize() reads argv the way argparse does (the option table
// below, prefixes, glued short options, the remainder); applyEnvironment() fills in PET_* and
// dtrun's variables for what argv left out; the resolve*() steps turn the strings into a
// LaunchConfig with torchrun's rules (run.py: run() and config_from_args()). Values are checked
// by launcher/args.h helpers, each error naming the option or variable the value came from.
#include "launcher/cli.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <optional>
#include <random>

namespace dtrun::launcher {
namespace {

using agent::LaunchConfig;
using Env = std::map<std::string, std::string>;

// Help groups. The first four are the sections of torchrun's get_args_parser (its comments; its
// help prints one flat list). Options torchrun appended later under "Backwards compatible" sit
// where they belong instead: --local-addr with the rendezvous, the worker and log options with
// the launch options.
enum class Group { kSize, kRdzv, kLaunch, kLegacy, kDtrun };
enum class Kind { kValue, kFlag, kHelp };

struct OptionSpec {
  std::string_view dest;       // argparse dest; the long names are derived from it
  std::string_view shortName;  // "-m", or "" for none
  Kind kind;
  Group group;
  std::string_view env;  // "PET" = PET_<DEST>, "" = none, else the variable's name
  std::string_view help;
};

constexpr std::string_view kPet = "PET";

// In torchrun's order, so the help reads like torchrun's. Order matters for nothing else.
constexpr std::array<OptionSpec, 36> kOptions{{
    {"help", "-h", Kind::kHelp, Group::kSize, "", "show this help message and exit"},
    // Worker/node size.
    {"nnodes", "", Kind::kValue, Group::kSize, kPet,
     "Number of nodes, or the range of nodes in form MIN:MAX. (default: 1:1)"},
    {"nproc_per_node", "", Kind::kValue, Group::kSize, kPet,
     "Number of workers per node: an integer, gpu (the GPUs this node shows: /dev/nvidiaN "
     "restricted by CUDA_VISIBLE_DEVICES), cpu (the online CPUs) or auto (gpu when there is one, "
     "else cpu). (default: 1)"},
    // Rendezvous.
    {"rdzv_backend", "", Kind::kValue, Group::kRdzv, kPet,
     "Rendezvous backend: c10d (elastic, dtrun's store) or static (fixed --nnodes N, "
     "--node-rank, --master-addr, --master-port). (default: c10d; static when --master-addr, "
     "--master-port or --node-rank is given without --rdzv-endpoint, as torchrun)"},
    {"rdzv_endpoint", "", Kind::kValue, Group::kRdzv, kPet,
     "Rendezvous endpoint HOST[:PORT] or [IPV6][:PORT]; the default port is 29400. (default: a "
     "free localhost port with --nnodes 1, else localhost:29400)"},
    {"rdzv_id", "", Kind::kValue, Group::kRdzv, kPet,
     "User-defined group id, the same on every node. (default: none; a random UUID with "
     "--standalone or a single-node c10d run)"},
    {"rdzv_conf", "", Kind::kValue, Group::kRdzv, kPet,
     "Additional rendezvous configuration KEY=VALUE,...: join_timeout (600), last_call_timeout "
     "(30), close_timeout (30), heartbeat_timeout (5), keep_alive_interval (5), "
     "keep_alive_max_attempt (3), read_timeout (60), timeout (900, static) in seconds, is_host "
     "(true/false)."},
    {"standalone", "", Kind::kFlag, Group::kRdzv, kPet,
     "Start a local standalone rendezvous (a c10d store on a free port). Useful for single-node, "
     "multi-worker jobs. --rdzv-backend, --rdzv-endpoint and --rdzv-id are then auto-assigned "
     "and any explicitly set values are ignored."},
    {"local_addr", "", Kind::kValue, Group::kRdzv, kPet,
     "Address other nodes use to reach this one. (default: this machine's FQDN)"},
    // User-code launch.
    {"max_restarts", "", Kind::kValue, Group::kLaunch, kPet,
     "Maximum number of worker group restarts before failing. (default: 0)"},
    {"monitor_interval", "", Kind::kValue, Group::kLaunch, kPet,
     "Interval, in seconds, to poll what cannot be watched (dtrun sees worker exits at once). "
     "(default: 0.1)"},
    {"start_method", "", Kind::kValue, Group::kLaunch, kPet,
     "spawn, fork or forkserver; accepted for compatibility (workers are always new processes). "
     "(default: spawn)"},
    {"event_log_handler", "", Kind::kValue, Group::kLaunch, kPet,
     "torchrun's event handler: null, console or dynamic_rendezvous; accepted for "
     "compatibility (see --event-log). (default: null)"},
    {"role", "", Kind::kValue, Group::kLaunch, kPet,
     "User-defined role for the workers. (default: default)"},
    {"module", "-m", Kind::kFlag, Group::kLaunch, kPet,
     "Run the training script as a Python module, like 'python -m'."},
    {"no_python", "", Kind::kFlag, Group::kLaunch, kPet,
     "Execute the training script directly instead of through python; for programs that are not "
     "Python scripts."},
    {"run_path", "", Kind::kFlag, Group::kLaunch, kPet,
     "Run the training script as a path with the Python interpreter (torchrun: runpy.run_path). "
     "Takes precedence over --no-python and -m."},
    {"log_dir", "", Kind::kValue, Group::kLaunch, kPet,
     "Base directory for log files; a job sub-directory named after the run id is made in it. "
     "/dev/null writes none. (default: a new torchelastic_* temporary directory)"},
    {"redirects", "-r", Kind::kValue, Group::kLaunch, kPet,
     "Redirect std streams into log files in the log directory: 0 none, 1 stdout, 2 stderr, 3 "
     "both, for all workers (-r 3), or per local rank (-r 0:1,1:2). (default: 0)"},
    {"tee", "-t", Kind::kValue, Group::kLaunch, kPet,
     "Tee std streams into log files and also to the console (format as --redirects). "
     "(default: 0)"},
    {"local_ranks_filter", "", Kind::kValue, Group::kLaunch, kPet,
     "Only show the console output of these local ranks, e.g. 0,1,2; log files keep everything."},
    {"duplicate_stdout_filters", "", Kind::kValue, Group::kLaunch, kPet,
     "Copy stdout lines containing any of these comma-separated strings to another file (,, is "
     "a literal comma)."},
    {"duplicate_stderr_filters", "", Kind::kValue, Group::kLaunch, kPet,
     "Copy stderr lines containing any of these strings to another file (as above)."},
    {"logs_specs", "", Kind::kValue, Group::kLaunch, "",
     "torchrun.logs_specs entry-point name; accepted for compatibility, dtrun has no Python "
     "plugins and keeps its default log layout."},
    {"numa_binding", "", Kind::kValue, Group::kLaunch, "",
     "Bind workers to the CPUs near their GPU: node, socket, exclusive or core-complex."},
    {"signals_to_handle", "", Kind::kValue, Group::kLaunch, kPet,
     "Comma-separated signals forwarded to every worker group. (default: "
     "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2; torchrun's lacks SIGUSR1,SIGUSR2)"},
    {"shutdown_timeout", "", Kind::kValue, Group::kLaunch, kPet,
     "Seconds between SIGTERM and SIGKILL when stopping workers. (default: "
     "$TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30)"},
    {"virtual_local_rank", "", Kind::kFlag, Group::kLaunch, kPet,
     "Give every worker LOCAL_RANK=0 and a CUDA_VISIBLE_DEVICES holding only its own GPU."},
    // Backwards compatible with caffe2.distributed.launch (static rendezvous).
    {"node_rank", "", Kind::kValue, Group::kLegacy, kPet,
     "Rank of this node, 0 to N-1, with the static backend. (default: 0)"},
    {"master_addr", "", Kind::kValue, Group::kLegacy, kPet,
     "Address of node rank 0 for the static backend: a host name or IP address; IPv6 as "
     "[0:0:0:0:0:0:0:1]. (default: 127.0.0.1)"},
    {"master_port", "", Kind::kValue, Group::kLegacy, kPet,
     "Port on node rank 0 for the static backend. (default: 29500)"},
    // dtrun's own.
    {"python", "", Kind::kValue, Group::kDtrun, "DTRUN_PYTHON",
     "Interpreter that runs the training script. (default: $DTRUN_PYTHON, else $PYTHON_EXEC, "
     "else python3 on PATH)"},
    {"no_agent_store", "", Kind::kFlag, Group::kDtrun, "DTRUN_NO_AGENT_STORE",
     "Let worker rank 0 host the store at MASTER_PORT, as torchrun 1.13, instead of dtrun's "
     "store (TORCHELASTIC_USE_AGENT_STORE=False). Also set by "
     "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1. [env DTRUN_NO_AGENT_STORE=1]"},
    {"event_log", "", Kind::kValue, Group::kDtrun, "DTRUN_EVENT_LOG",
     "Append one JSON object per lifecycle event (rendezvous, worker start and exit, restart, "
     "shutdown) to FILE. [env DTRUN_EVENT_LOG]"},
    {"log_line_prefix_template", "", Kind::kValue, Group::kDtrun,
     "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE",
     "Prefix of teed console lines, with ${role_name}, ${rank}, ${local_rank}, ${host}, "
     "${node_rank}, ${restart}. (default: $TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, else "
     "[${role_name}${local_rank}]:)"},
    {"log_level", "", Kind::kValue, Group::kDtrun, "DTRUN_LOG_LEVEL",
     "dtrun's own log level: trace, debug, info, warn, error, critical or off. (default: "
     "$DTRUN_LOG_LEVEL, else torch's $LOGLEVEL, else warn)"},
}};

std::string dashed(std::string_view dest) {
  std::string s(dest);
  std::replace(s.begin(), s.end(), '_', '-');
  return "--" + s;
}

// Every long spelling of an option: --a-b, and --a_b for multi-word options.
std::vector<std::string> longNames(const OptionSpec& o) {
  std::vector<std::string> names{dashed(o.dest)};
  if (o.dest.find('_') != std::string_view::npos) names.push_back("--" + std::string(o.dest));
  return names;
}

std::string displayName(const OptionSpec& o) {
  return o.shortName.empty() ? dashed(o.dest) : std::string(o.shortName) + "/" + dashed(o.dest);
}

std::string envName(const OptionSpec& o) {
  if (o.env != kPet) return std::string(o.env);
  std::string s = "PET_" + std::string(o.dest);
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string metavar(const OptionSpec& o) {
  std::string s(o.dest);
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (o.dest == "event_log") return "FILE";
  if (o.dest == "python") return "PATH";
  return s;
}

const OptionSpec* findShort(std::string_view name) {
  for (const auto& o : kOptions) {
    if (!o.shortName.empty() && o.shortName == name) return &o;
  }
  return nullptr;
}

bool isNegativeNumber(const std::string& a) {
  // argparse's _negative_number_matcher: ^-\d+$|^-\d*\.\d+$
  if (a.size() < 2 || a[0] != '-') return false;
  auto dot = a.find('.');
  auto digits = [](std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (dot == std::string::npos) return digits(std::string_view(a).substr(1));
  return digits(std::string_view(a).substr(1, dot - 1)) && dot + 1 < a.size() &&
         digits(std::string_view(a).substr(dot + 1));
}

// How one argument reads, following argparse's _parse_optional.
struct Classified {
  enum { kPositional, kOption, kUnknown } what = kPositional;
  const OptionSpec* spec = nullptr;
  std::string name;                          // the option as resolved, for messages
  std::optional<std::string> explicitValue;  // after '=' or glued to a short option
  bool isShort = false;
};

// Resolves a long option or a unique prefix of one. A prefix that matches both spellings of one
// option is unique (argparse calls it ambiguous; torchrun 1.13 had one spelling, so `--nproc`
// worked there). Throws for a prefix of several options.
const OptionSpec* resolveLong(const std::string& arg, const std::string& name, bool allowAmbiguous,
                              std::string& matched) {
  for (const auto& o : kOptions) {
    for (const auto& n : longNames(o)) {
      if (n == name) {
        matched = n;
        return &o;
      }
    }
  }
  std::vector<const OptionSpec*> hits;
  std::string firstName;
  for (const auto& o : kOptions) {
    for (const auto& n : longNames(o)) {
      if (n.rfind(name, 0) == 0) {
        if (hits.empty()) firstName = n;
        hits.push_back(&o);
        break;
      }
    }
  }
  if (hits.size() == 1) {
    matched = firstName;
    return hits[0];
  }
  if (hits.size() > 1 && !allowAmbiguous) {
    std::string candidates;
    for (const auto* o : hits) candidates += (candidates.empty() ? "" : ", ") + dashed(o->dest);
    throw UsageError("ambiguous option: " + arg + " could match " + candidates);
  }
  return nullptr;
}

Classified classify(const std::string& arg, bool forValue = false) {
  Classified c;
  if (arg.size() < 2 || arg[0] != '-') return c;
  if (arg.rfind("--", 0) == 0) {
    auto eq = arg.find('=');
    std::string name = arg.substr(0, eq);
    if (name.size() > 2 || eq != std::string::npos) {
      c.spec = resolveLong(arg, name, forValue, c.name);
      if (c.spec) {
        c.what = Classified::kOption;
        if (eq != std::string::npos) c.explicitValue = arg.substr(eq + 1);
        return c;
      }
    }
  } else {
    // "-r", "-r=3", "-r3" (argparse glues a short option's value or further short flags).
    if (const auto* o = findShort(std::string_view(arg).substr(0, 2))) {
      c.what = Classified::kOption;
      c.spec = o;
      c.isShort = true;
      c.name = displayName(*o);
      if (arg.size() > 2) c.explicitValue = arg.substr(arg[2] == '=' ? 3 : 2);
      return c;
    }
  }
  // Not an option: argparse reads negative numbers and words with blanks as positionals.
  if (isNegativeNumber(arg) || arg.find(' ') != std::string::npos) return c;
  c.what = Classified::kUnknown;
  return c;
}

struct Given {
  std::string value;
  std::string source;  // the option or variable it came from, for messages
};

struct Tokens {
  std::map<std::string, Given> values;       // by dest; the last one given wins
  std::map<std::string, std::string> flags;  // dest -> source, for flags that are on
  std::optional<std::string> script;
  std::vector<std::string> scriptArgs;

  const Given* value(const std::string& dest) const {
    auto it = values.find(dest);
    return it == values.end() ? nullptr : &it->second;
  }
  bool flag(const std::string& dest) const { return flags.count(dest) > 0; }
  bool given(const std::string& dest) const { return value(dest) || flag(dest); }
};

Tokens tokenize(const std::vector<std::string>& args) {
  Tokens t;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--" || classify(arg).what == Classified::kPositional) {
      // The first positional is the script; all after it is the script's, untouched.
      std::size_t first = arg == "--" ? i + 1 : i;
      if (first < args.size()) {
        t.script = args[first];
        t.scriptArgs.assign(args.begin() + static_cast<std::ptrdiff_t>(first) + 1, args.end());
      }
      return t;
    }
    Classified c = classify(arg);
    if (c.what == Classified::kUnknown) {
      throw UsageError("unrecognized arguments: " + arg + " (see dtrun --help)");
    }
    // A cluster of short flags ("-mr3") is walked one option at a time.
    while (true) {
      const OptionSpec& o = *c.spec;
      if (o.kind == Kind::kHelp) throw HelpRequested(helpText());
      if (o.kind == Kind::kFlag) {
        t.flags[std::string(o.dest)] = c.name;
        if (!c.explicitValue) break;
        const OptionSpec* next = c.isShort && !c.explicitValue->empty()
                                     ? findShort(std::string("-") + c.explicitValue->front())
                                     : nullptr;
        if (!next) {
          throw UsageError(c.name + ": takes no value, got '" + *c.explicitValue +
                           "' (a flag: " + dashed(o.dest) + ")");
        }
        std::string rest = c.explicitValue->substr(1);
        c.spec = next;
        c.name = displayName(*next);
        c.explicitValue = rest.empty() ? std::nullopt : std::optional<std::string>(rest);
        continue;
      }
      std::string value;
      if (c.explicitValue) {
        value = *c.explicitValue;
      } else if (i + 1 < args.size() && args[i + 1] != "--" &&
                 classify(args[i + 1], true).what == Classified::kPositional) {
        value = args[++i];
      } else {
        std::string mv = metavar(o);
        throw UsageError(c.name + ": expected a value: " + dashed(o.dest) + " " + mv + " or " +
                         dashed(o.dest) + "=" + mv);
      }
      t.values[std::string(o.dest)] = {value, c.name};
      break;
    }
  }
  return t;
}

// PET_* (and dtrun's variables) for everything the command line left out.
void applyEnvironment(Tokens& t, const Env& env) {
  for (const auto& o : kOptions) {
    if (o.env.empty()) continue;
    std::string dest(o.dest);
    if (t.values.count(dest) || t.flags.count(dest)) continue;
    auto it = env.find(envName(o));
    if (it == env.end()) continue;
    if (o.kind == Kind::kFlag) {
      if (parseEnvFlag(it->first, it->second)) t.flags[dest] = it->first;
    } else {
      t.values[dest] = {it->second, it->first};
    }
  }
}

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
std::string chooseBackend(const Tokens& t, bool haveEndpoint) {
  if (const auto* g = t.value("rdzv_backend")) {
    if (g->value == "etcd" || g->value == "etcd-v2") {
      throw UsageError(g->source + ": " + g->value +
                       " is not supported by dtrun: expected c10d or static");
    }
    if (g->value != "c10d" && g->value != "static") {
      throw UsageError(g->source + ": invalid value '" + g->value + "': expected c10d or static");
    }
    return g->value;
  }
  bool legacy = t.given("master_addr") || t.given("master_port") || t.given("node_rank");
  return !haveEndpoint && legacy ? "static" : "c10d";
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
void resolveStaticEndpoint(LaunchConfig& cfg, const Tokens& t, const Given* endpoint) {
  auto& r = cfg.rdzv;
  Endpoint ep;
  if (endpoint) {
    ep = parseEndpoint(endpoint->source, endpoint->value, std::nullopt);
  } else {
    std::string port = std::to_string(r.masterPort.value_or(29500));
    ep = parseEndpoint("--master-addr/--master-port", r.masterAddr + ":" + port, std::nullopt);
  }
  r.host = ep.host;
  r.port = ep.port;
  std::string nodes = std::to_string(r.minNodes) + ":" + std::to_string(r.maxNodes);
  if (r.nodeRank >= r.maxNodes) {
    const Given* g = t.value("node_rank");
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
void resolveRendezvous(LaunchConfig& cfg, const Tokens& t) {
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

  const Given* endpoint = t.value("rdzv_endpoint");
  if (endpoint && endpoint->value.empty()) endpoint = nullptr;  // torch: "" = not given
  r.backend = chooseBackend(t, endpoint != nullptr);
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
    r.backend = "c10d";
    r.host = "localhost";
    r.port = 0;
    r.runId = randomUuid4();
    return;
  }
  if (r.backend == "static") {
    resolveStaticEndpoint(cfg, t, endpoint);
    return;
  }
  if (t.given("master_addr") || t.given("master_port") || t.given("node_rank")) {
    cfg.warnings.push_back(
        "--master-addr, --master-port and --node-rank are only used by the static rendezvous "
        "backend; ignored with c10d");
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
void resolveWorkers(LaunchConfig& cfg, const Tokens& t, const Env& env) {
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
  std::string signals = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2";
  std::string signalsSource = "--signals-to-handle";
  if (const auto* g = t.value("signals_to_handle")) {
    signals = g->value;
    signalsSource = g->source;
  }
  cfg.signalsToHandle = parseSignalList(signalsSource, signals);
  if (const auto* g = t.value("shutdown_timeout")) {
    cfg.shutdownTimeout = parseSeconds(g->source, g->value, true);
  } else if (auto v = envValue(env, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT")) {
    cfg.shutdownTimeout = parseSeconds("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", *v, true);
  }
  cfg.virtualLocalRank = t.flag("virtual_local_rank");
}

// The worker command, as torchrun's config_from_args builds it.
void resolveEntrypoint(LaunchConfig& cfg, const Tokens& t, const Env& env) {
  cfg.script = *t.script;
  cfg.scriptArgs = t.scriptArgs;
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
    cfg.entrypoint = {cfg.python, "-u"};
    if (cfg.module) cfg.entrypoint.push_back("-m");
    cfg.entrypoint.push_back(cfg.script);
    cfg.entrypointName = cfg.script;  // torch: the first argument not starting with '-'
  }
}

// --log-dir, -r, -t, the console filters, and the accepted-only --logs-specs/--numa-binding.
void resolveLogs(LaunchConfig& cfg, const Tokens& t) {
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

// --event-log, --log-line-prefix-template, --no-agent-store, --log-level.
void resolveDtrunOptions(LaunchConfig& cfg, const Tokens& t, const Env& env) {
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

LaunchConfig parseCommandLine(const std::vector<std::string>& args, const Env& env) {
  return parseCommandLine(args, env, HostProbe{});
}

LaunchConfig parseCommandLine(const std::vector<std::string>& args, const Env& env,
                              const HostProbe& host) {
  Tokens t = tokenize(args);
  if (!t.script) {
    throw UsageError("the following arguments are required: training_script (see dtrun --help)");
  }
  applyEnvironment(t, env);

  LaunchConfig cfg;
  for (const auto& [dest, g] : t.values) cfg.givenOptions.insert(dest);
  for (const auto& [dest, src] : t.flags) cfg.givenOptions.insert(dest);
  if (const auto* g = t.value("nproc_per_node")) {
    cfg.nprocPerNode = parseNprocPerNode(g->source, g->value, host.devDir,
                                         envValue(env, "CUDA_VISIBLE_DEVICES"), onlineCpus(host));
  }
  resolveRendezvous(cfg, t);
  resolveWorkers(cfg, t, env);
  resolveEntrypoint(cfg, t, env);
  resolveLogs(cfg, t);
  resolveDtrunOptions(cfg, t, env);

  // The workers' environment: the launcher's own, plus what torchrun adds to its own.
  cfg.baseEnv = env;
  if (!env.count("OMP_NUM_THREADS") && cfg.nprocPerNode > 1) {
    cfg.baseEnv["OMP_NUM_THREADS"] = "1";
    cfg.ompNumThreadsSet = true;
  }
  std::string names;
  for (int s : cfg.signalsToHandle) names += (names.empty() ? "" : ",") + signalName(s);
  cfg.baseEnv["TORCHELASTIC_SIGNALS_TO_HANDLE"] = names;
  return cfg;
}

std::string usageText() {
  return "usage: dtrun [-h] [options] training_script [training_script_args ...]";
}

std::string helpText() {
  constexpr std::size_t kWidth = 100;
  constexpr std::size_t kHelpColumn = 24;
  std::string out = usageText() + "\n\n";
  auto wrap = [&](const std::string& text, std::size_t indent, std::size_t firstUsed) {
    // Greedy word wrap; the first line starts at column firstUsed.
    std::string result;
    std::size_t col = firstUsed;
    std::size_t i = 0;
    while (i < text.size()) {
      auto sp = text.find(' ', i);
      std::string word = text.substr(i, sp == std::string::npos ? std::string::npos : sp - i);
      i = sp == std::string::npos ? text.size() : sp + 1;
      if (col > indent && col + 1 + word.size() > kWidth) {
        result += "\n" + std::string(indent, ' ');
        col = indent;
      } else if (col > indent) {
        result += ' ';
        ++col;
      }
      result += word;
      col += word.size();
    }
    return result + "\n";
  };
  auto paragraph = [&](const std::string& text) { out += wrap(text, 0, 0) + "\n"; };
  auto entry = [&](const std::string& names, const std::string& help) {
    std::string line = "  " + names;
    if (line.size() + 2 <= kHelpColumn) {
      out += line + std::string(kHelpColumn - line.size(), ' ');
    } else {
      out += line + "\n" + std::string(kHelpColumn, ' ');
    }
    out += wrap(help, kHelpColumn, kHelpColumn);
  };

  paragraph(
      "Launches training_script once per local rank on every node and supervises the workers: "
      "an elastic, torchrun-compatible launcher (Torch Distributed Elastic Training Launcher).");
  paragraph(
      "Every multi-word option also has an underscore spelling (--nproc_per_node), a unique "
      "prefix of an option works (--nproc), and --option=value works as well as --option value. "
      "A torchrun option missing from the command line is read from PET_<NAME> "
      "(PET_NPROC_PER_NODE=2; flags take 1 or 0: PET_STANDALONE=1).");
  out += "positional arguments:\n";
  entry("training_script",
        "Path of the training program or script (a module name with -m), launched on every "
        "local rank.");
  entry("training_script_args",
        "Arguments for the training script, passed on untouched; ${local_rank} becomes the "
        "worker's local rank.");
  out += "\noptions:\n";
  entry("-h, --help", std::string(kOptions[0].help));

  struct Section {
    Group group;
    const char* title;
  };
  for (Section s :
       {Section{Group::kSize, "Worker/node size related arguments"},
        Section{Group::kRdzv, "Rendezvous related arguments"},
        Section{Group::kLaunch, "User-code launch related arguments"},
        Section{Group::kLegacy, "Backwards compatible parameters with caffe2.distributed.launch"},
        Section{Group::kDtrun, "dtrun options"}}) {
    out += std::string("\n") + s.title + ":\n";
    for (const auto& o : kOptions) {
      if (o.group != s.group || o.kind == Kind::kHelp) continue;
      std::string names = o.shortName.empty() ? "" : std::string(o.shortName) + ", ";
      names += dashed(o.dest);
      if (o.kind == Kind::kValue) names += " " + metavar(o);
      entry(names, std::string(o.help));
    }
  }
  out += "\n";
  paragraph(
      "Exit codes: 0 when every worker of this node succeeded, 1 for any failure, 2 for a bad "
      "command line.");
  out.pop_back();
  return out;
}

}  // namespace dtrun::launcher
