#include "launcher/slurm.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <functional>

#include "common/error.h"
#include "common/spawn.h"
#include "launcher/cli.h"
#include "launcher/logging.h"

namespace dtrun::launcher {
namespace {

using Env = std::map<std::string, std::string>;

// Slurm's own limit on one range (hostlist.c MAX_RANGE); past it Slurm reports an error too.
constexpr std::uint64_t kMaxRange = 64 * 1024;
// A bound on a whole expression, so a typo cannot ask for gigabytes of names.
constexpr std::size_t kMaxHosts = 1 << 20;

bool isSeparator(char c) { return c == ',' || c == ' ' || c == '\t'; }

[[noreturn]] void bad(const std::string& expression, const std::string& why) {
  throw ConfigError("Slurm hostlist '" + expression + "': " + why);
}

// Items at the top level: separators inside brackets belong to the bracket.
std::vector<std::string> splitItems(const std::string& expression) {
  std::vector<std::string> items;
  std::string current;
  bool inBracket = false;
  for (char c : expression) {
    if (c == '[') {
      if (inBracket) bad(expression, "'[' inside brackets");
      inBracket = true;
    } else if (c == ']') {
      inBracket = false;  // a ']' outside brackets is part of a name, as in Slurm
    } else if (!inBracket && isSeparator(c)) {
      if (!current.empty()) items.push_back(current);
      current.clear();
      continue;
    }
    current += c;
  }
  if (inBracket) bad(expression, "'[' without a closing ']'");
  if (!current.empty()) items.push_back(current);
  return items;
}

struct Number {
  std::uint64_t value;
  int width;  // digits of the range's low end: Slurm pads every number of the range to it
};

std::uint64_t parseDigits(const std::string& expression, const std::string& text) {
  if (text.empty() || text.size() > 18 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    bad(expression, "invalid range item '" + text + "' (expected N, LO-HI or LO-)");
  }
  std::uint64_t v = 0;
  std::from_chars(text.data(), text.data() + text.size(), v);
  return v;
}

// "1-3,07,9-" -> 1 2 3 07 9, each with its range's width.
std::vector<Number> parseRanges(const std::string& expression, const std::string& body) {
  std::vector<Number> out;
  std::size_t start = 0;
  while (true) {
    std::size_t comma = body.find(',', start);
    std::string item = body.substr(start, comma == std::string::npos ? comma : comma - start);
    std::size_t dash = item.find('-');
    std::string loText = item.substr(0, dash);
    std::uint64_t lo = parseDigits(expression, loText);
    std::uint64_t hi = lo;
    if (dash != std::string::npos && dash + 1 < item.size()) {
      hi = parseDigits(expression, item.substr(dash + 1));
    }
    if (lo > hi) bad(expression, "range '" + item + "' runs backwards");
    if (hi - lo + 1 > kMaxRange) {
      bad(expression, "range '" + item + "' has more than " + std::to_string(kMaxRange) + " hosts");
    }
    for (std::uint64_t v = lo; v <= hi; ++v) {
      out.push_back({v, static_cast<int>(loText.size())});
    }
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

std::string formatNumber(const Number& n) {
  std::string digits = std::to_string(n.value);
  if (static_cast<int>(digits.size()) < n.width) {
    digits.insert(0, static_cast<std::size_t>(n.width) - digits.size(), '0');
  }
  return digits;
}

// One item with brackets: literal0 [g0] literal1 [g1] ... [gN-1], nothing after the last group.
void expandItem(const std::string& expression, const std::string& item,
                std::vector<std::string>& out) {
  std::vector<std::string> literals;
  std::vector<std::vector<Number>> groups;
  std::size_t pos = 0;
  while (pos < item.size()) {
    std::size_t open = item.find('[', pos);
    if (open == std::string::npos) {
      bad(expression, "text '" + item.substr(pos) + "' after the last bracket of '" + item +
                          "' (Slurm allows none)");
    }
    std::size_t close = item.find(']', open);  // splitItems checked it exists
    literals.push_back(item.substr(pos, open - pos));
    groups.push_back(parseRanges(expression, item.substr(open + 1, close - open - 1)));
    pos = close + 1;
  }
  // Slurm's nesting (hostlist.c _push_range_list): the last group varies fastest; the groups
  // before it are peeled off from the right, so the one just before the last varies slowest.
  // rack[1-2]-node[01-02] -> rack1-node01 rack1-node02 rack2-node01 rack2-node02.
  std::vector<std::size_t> order;
  for (std::size_t g = groups.size() - 1; g-- > 0;) order.push_back(g);
  order.push_back(groups.size() - 1);
  std::vector<std::size_t> chosen(groups.size(), 0);
  std::function<void(std::size_t)> walk = [&](std::size_t depth) {
    if (depth == order.size()) {
      if (out.size() >= kMaxHosts) {
        bad(expression, "more than " + std::to_string(kMaxHosts) + " hosts");
      }
      std::string name;
      for (std::size_t g = 0; g < groups.size(); ++g) {
        name += literals[g] + formatNumber(groups[g][chosen[g]]);
      }
      out.push_back(std::move(name));
      return;
    }
    std::size_t g = order[depth];
    for (std::size_t i = 0; i < groups[g].size(); ++i) {
      chosen[g] = i;
      walk(depth + 1);
    }
  };
  walk(0);
}

std::optional<std::string> get(const Env& env, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (auto it = env.find(n); it != env.end() && !it->second.empty()) return it->second;
  }
  return std::nullopt;
}

std::optional<std::uint64_t> number(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
  if (ec != std::errc() || end != text->data() + text->size()) return std::nullopt;
  return v;
}

bool hostResolves(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  ::freeaddrinfo(res);
  return true;
}

std::string firstLine(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  return line.size() > 200 ? line.substr(0, 200) + "..." : line;
}

// The rendezvous host: the first host of the step, or its NodeAddr when the name does not
// resolve here, or loopback when the step has this one host only. `how` says which, for the log.
std::string deriveHost(const std::string& listVar, const std::string& list, const SlurmProbe& probe,
                       std::string& how) {
  std::vector<std::string> hosts;
  try {
    hosts = expandHostlist(list);
  } catch (const ConfigError& e) {
    throw UsageError(std::string("cannot derive --rdzv-endpoint under Slurm: ") + e.what() +
                     "; give --rdzv-endpoint HOST[:PORT]");
  }
  if (hosts.empty()) {
    throw UsageError("cannot derive --rdzv-endpoint under Slurm: " + listVar +
                     " is empty; give --rdzv-endpoint HOST[:PORT]");
  }
  const std::string& first = hosts.front();
  const std::string where = listVar + "=" + list;
  if (probe.resolves(first)) {
    how = "first host of " + where;
    return first;
  }
  // The name may be known to Slurm only (NodeName=n1 NodeAddr=10.0.0.1): ask slurmctld.
  // scontrol reads SLURM_CONF from the environment it inherits.
  CommandResult r = probe.run({"scontrol", "-o", "show", "node", first}, kScontrolTimeout);
  std::optional<std::string> addr;
  if (r.finished && r.exitCode == 0) addr = parseNodeAddr(r.output);
  if (addr && *addr != first) {
    how = "NodeAddr of " + first + ", the first host of " + where + ", whose name does not " +
          "resolve here";
    return *addr;
  }
  if (hosts.size() == 1) {
    // Every agent of the step runs on this very host.
    how = "loopback: " + first + ", the only host of " + where + ", does not resolve here";
    return "127.0.0.1";
  }
  std::string why = !r.finished ? r.error
                    : r.exitCode != 0
                        ? "exit code " + std::to_string(r.exitCode) + ": " + firstLine(r.output)
                    : !addr ? "no NodeAddr in its output"
                            : "its NodeAddr is the same name";
  throw UsageError("cannot derive --rdzv-endpoint under Slurm: " + first + " (first host of " +
                   where + ") does not resolve here, and `scontrol -o show node " + first +
                   "` gave no usable NodeAddr (" + why + "); give --rdzv-endpoint HOST[:PORT]");
}

}  // namespace

std::vector<std::string> expandHostlist(const std::string& expression) {
  std::vector<std::string> out;
  for (const auto& item : splitItems(expression)) {
    if (item.find('[') == std::string::npos) {
      if (out.size() >= kMaxHosts) {
        bad(expression, "more than " + std::to_string(kMaxHosts) + " hosts");
      }
      out.push_back(item);
    } else {
      expandItem(expression, item, out);
    }
  }
  return out;
}

std::uint16_t slurmRendezvousPort(std::uint64_t jobId, std::uint64_t stepId) {
  return static_cast<std::uint16_t>(20000 + (jobId % 1000) * 10 + stepId % 10);
}

std::optional<std::string> parseNodeAddr(const std::string& scontrolOutput) {
  const std::string key = "NodeAddr=";
  for (std::size_t pos = scontrolOutput.find(key); pos != std::string::npos;
       pos = scontrolOutput.find(key, pos + 1)) {
    // A whole key only: not the tail of another key such as "ActiveNodeAddr=".
    if (pos > 0 && !std::isspace(static_cast<unsigned char>(scontrolOutput[pos - 1]))) continue;
    std::size_t start = pos + key.size();
    std::size_t end = start;
    while (end < scontrolOutput.size() &&
           !std::isspace(static_cast<unsigned char>(scontrolOutput[end]))) {
      ++end;
    }
    if (end == start) return std::nullopt;
    return scontrolOutput.substr(start, end - start);
  }
  return std::nullopt;
}

SlurmProbe systemSlurmProbe() {
  return SlurmProbe{hostResolves,
                    [](const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
                      return runCommand(argv, timeout);
                    }};
}

SlurmDerivation deriveSlurmDefaults(const Env& env, const agent::LaunchConfig& parsed,
                                    const SlurmProbe& probe) {
  SlurmDerivation d;
  auto jobId = get(env, {"SLURM_JOB_ID", "SLURM_JOBID"});
  auto stepId = get(env, {"SLURM_STEP_ID", "SLURM_STEPID"});
  if (!jobId) return d;

  // The GPUs Slurm bound. gres/gpu always exports them together with CUDA_VISIBLE_DEVICES
  // (global ids, or 0..n-1 under ConstrainDevices), which --nproc-per-node=gpu already honours.
  // Without it, dtrun cannot tell which numbering CUDA uses, so it says so instead of guessing.
  // A step's SLURM_JOB_GPUS is copied from the batch host and wrong elsewhere: steps read
  // SLURM_STEP_GPUS only.
  const char* gpuVar = stepId ? "SLURM_STEP_GPUS" : "SLURM_JOB_GPUS";
  if (auto gpus = get(env, {gpuVar}); gpus && !env.count("CUDA_VISIBLE_DEVICES")) {
    d.warnings.push_back(
        std::string("Slurm bound GPUs ") + *gpus + " (" + gpuVar +
        ") but CUDA_VISIBLE_DEVICES is not set: --nproc-per-node=gpu/auto count every GPU of "
        "this node and workers may use GPUs of other jobs; keep the CUDA_VISIBLE_DEVICES Slurm "
        "sets, or give --nproc-per-node a number");
  }

  if (!stepId || !get(env, {"SLURM_PROCID"})) return d;  // not a task of a job step
  const auto& given = parsed.givenOptions;
  if (parsed.standalone || parsed.rdzv.backend == agent::RendezvousBackend::kStatic) return d;

  std::vector<std::string> parts;
  int maxNodes = parsed.rdzv.maxNodes;
  if (!given.count("nnodes") && !env.count("PET_NNODES")) {
    const char* tasksVar =
        env.count("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
    auto tasks = number(get(env, {tasksVar}));
    if (tasks && *tasks == 1) {
      maxNodes = 1;  // dtrun's default already: nothing to set or to say
    } else if (tasks && *tasks > 1 && *tasks <= (1u << 24)) {
      maxNodes = static_cast<int>(*tasks);
      d.variables["PET_NNODES"] = std::to_string(*tasks);
      parts.push_back("--nnodes " + std::to_string(*tasks) + " (" + tasksVar + ")");
    } else {
      d.warnings.push_back(std::string(tasksVar) + "='" + get(env, {tasksVar}).value_or("") +
                           "' is not a task count; --nnodes stays " +
                           std::to_string(parsed.rdzv.maxNodes));
    }
  }
  // One agent needs no agreed endpoint: dtrun's single-node mode takes a free port.
  if (maxNodes > 1) {
    if (!given.count("rdzv_endpoint") && !env.count("PET_RDZV_ENDPOINT")) {
      const char* listVar = env.count("SLURM_STEP_NODELIST")  ? "SLURM_STEP_NODELIST"
                            : env.count("SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST"
                                                              : "SLURM_NODELIST";
      std::string how;
      std::string host = deriveHost(listVar, get(env, {listVar}).value_or(""), probe, how);
      auto job = number(jobId);
      auto step = number(stepId);
      std::uint16_t port = job && step ? slurmRendezvousPort(*job, *step) : 29400;
      std::string hostPart = host.find(':') != std::string::npos ? "[" + host + "]" : host;
      std::string endpoint = hostPart + ":" + std::to_string(port);
      d.variables["PET_RDZV_ENDPOINT"] = endpoint;
      parts.push_back("--rdzv-endpoint " + endpoint + " (" + how + ")");
    }
    if (!given.count("rdzv_id") && !env.count("PET_RDZV_ID")) {
      std::string id = *jobId + "." + *stepId;
      d.variables["PET_RDZV_ID"] = id;
      parts.push_back("--rdzv-id " + id + " (SLURM_JOB_ID.SLURM_STEP_ID)");
    }
  }
  if (!parts.empty()) {
    d.summary = "Slurm step " + *jobId + "." + *stepId + ": ";
    for (std::size_t i = 0; i < parts.size(); ++i) d.summary += (i ? ", " : "") + parts[i];
    d.summary += "; options given on the command line or as PET_* win";
  }
  return d;
}

SlurmDerivation applySlurmDefaults(const std::vector<std::string>& args, Env& env,
                                   const SlurmProbe& probe) {
  if (!env.count("SLURM_JOB_ID") && !env.count("SLURM_JOBID")) return {};
  agent::LaunchConfig parsed;
  try {
    parsed = parseCommandLine(args, env);
  } catch (const std::exception&) {
    return {};  // -h, or a bad command line: the real parse reports it
  }
  SlurmDerivation d = deriveSlurmDefaults(env, parsed, probe);
  for (const auto& [name, value] : d.variables) env.emplace(name, value);
  if (!d.summary.empty() || !d.warnings.empty()) {
    auto log = makeLogger("slurm", parsed.logLevel);
    if (!d.summary.empty()) log->warn("{}", d.summary);
    for (const auto& w : d.warnings) log->warn("{}", w);
  }
  return d;
}

void applySlurmDefaults(const std::vector<std::string>& args, Env& env) {
  applySlurmDefaults(args, env, systemSlurmProbe());
}

}  // namespace dtrun::launcher
