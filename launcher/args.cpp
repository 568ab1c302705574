#include "launcher/args.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <csignal>
#include <string_view>
#include <system_error>

namespace dtrun::launcher {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool allDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Why dtrun refuses to handle (catch and forward) a signal torch would accept by name, or null.
const char* refusal(int signo) {
  switch (signo) {
    case SIGKILL:
    case SIGSTOP:
      return "cannot be caught";
    case SIGILL:
    case SIGTRAP:
    case SIGBUS:
    case SIGFPE:
    case SIGSEGV:
    case SIGSYS:
      return "is a synchronous fault signal, not one to forward";
    case SIGCHLD:
      return "is how dtrun observes its workers";
    default:
      return nullptr;
  }
}

constexpr std::array<std::string_view, 6> kPrefixPlaceholders{
    "role_name", "rank", "local_rank", "host", "node_rank", "restart"};

}  // namespace

std::string trimBlanks(std::string_view s) {
  auto isBlank = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!s.empty() && isBlank(s.front())) s.remove_prefix(1);
  while (!s.empty() && isBlank(s.back())) s.remove_suffix(1);
  return std::string(s);
}

std::vector<std::string> splitOn(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    auto pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
    if (pos == std::string::npos) return out;
    start = pos + 1;
  }
}

std::int64_t parseInteger(const std::string& option, const std::string& text, std::int64_t min,
                          std::int64_t max) {
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < min || v > max) {
    throw UsageError(option + ": invalid value '" + text + "': expected an integer from " +
                     std::to_string(min) + " to " + std::to_string(max));
  }
  return v;
}

std::uint64_t parseSize(const std::string& option, const std::string& text) {
  std::string digits = text;
  std::uint64_t unit = 1;
  if (!digits.empty()) {
    switch (std::toupper(static_cast<unsigned char>(digits.back()))) {
      case 'K':
        unit = 1ull << 10;
        break;
      case 'M':
        unit = 1ull << 20;
        break;
      case 'G':
        unit = 1ull << 30;
        break;
      default:
        break;
    }
    if (unit != 1) digits.pop_back();
  }
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || v == 0 ||
      v > (1ull << 40) / unit) {
    throw UsageError(option + ": invalid size '" + text +
                     "': expected a positive number of bytes, optionally with K, M or G");
  }
  return v * unit;
}

std::chrono::milliseconds parseSeconds(const std::string& option, const std::string& text,
                                       bool allowZero) {
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  bool ok = !text.empty() && ec == std::errc() && end == text.data() + text.size() &&
            std::isfinite(v) && (allowZero ? v >= 0 : v > 0) && v <= 1e9;
  if (!ok) {
    throw UsageError(option + ": invalid value '" + text + "': expected a number of seconds " +
                     (allowZero ? ">= 0" : "> 0") + " such as 30 or 0.5");
  }
  return std::chrono::ceil<std::chrono::milliseconds>(std::chrono::duration<double>(v));
}

bool parseBool(const std::string& option, const std::string& text) {
  std::string v = lower(text);
  if (v == "1" || v == "true" || v == "t" || v == "yes" || v == "y") return true;
  if (v == "0" || v == "false" || v == "f" || v == "no" || v == "n") return false;
  throw UsageError(option + ": invalid value '" + text +
                   "': expected a boolean: 1, true, t, yes, y or 0, false, f, no, n");
}

bool parseEnvFlag(const std::string& variable, const std::string& text) {
  // Python's int() also accepts blanks around the number and a sign.
  std::string v = trimBlanks(text);
  if (!v.empty() && (v.front() == '+' || v.front() == '-')) v.erase(0, 1);
  if (!allDigits(v)) {
    throw UsageError(variable + ": invalid value '" + text +
                     "': expected an integer (1 = on, 0 = off), as torchrun reads it");
  }
  return v.find_first_not_of('0') != std::string::npos;
}

agent::StdSpec parseStdSpec(const std::string& option, const std::string& text) {
  auto fail = [&]() {
    return UsageError(option + ": invalid value '" + text +
                      "': expected 0 (none), 1 (stdout), 2 (stderr), 3 (both) for every local "
                      "rank, or LOCAL_RANK:V,... such as 0:1,1:2");
  };
  auto stdOf = [&](const std::string& v) {
    if (v.size() != 1 || v[0] < '0' || v[0] > '3') throw fail();
    return static_cast<agent::Std>(v[0] - '0');
  };
  agent::StdSpec spec;
  if (text.find(':') == std::string::npos) {
    spec.all = stdOf(text);
    return spec;
  }
  for (const auto& item : splitOn(text, ',')) {
    auto colon = item.find(':');
    if (colon == std::string::npos) throw fail();
    std::string rank = item.substr(0, colon);
    if (!allDigits(rank) || rank.size() > 6) throw fail();
    spec.perLocalRank[std::stoi(rank)] = stdOf(item.substr(colon + 1));
  }
  return spec;
}

std::vector<int> parseSignalList(const std::string& option, const std::string& text) {
  std::vector<int> out;
  for (const auto& item : splitOn(text, ',')) {
    // torch resolves each name with getattr(signal, name): Python's names, which
    // common/signals.h knows (aliases such as SIGIOT included).
    const std::string name = trimBlanks(item);
    const auto signo = name.empty() ? std::nullopt : signalNumber(name);
    if (!signo) {
      throw UsageError(option + ": unknown signal '" + name + "' in '" + text +
                       "': expected a comma list of signal names such as SIGTERM,SIGUSR1");
    }
    if (const char* why = refusal(*signo)) {
      throw UsageError(option + ": " + signalName(*signo) + " " + why +
                       "; expected a comma list of signal names such as SIGTERM,SIGUSR1");
    }
    if (std::find(out.begin(), out.end(), *signo) == out.end()) out.push_back(*signo);
  }
  return out;
}

std::vector<std::string> splitEscapedCommaList(const std::string& text) {
  std::vector<std::string> out;
  std::string current;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') {
      current += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      current += ',';
      ++i;
    } else {
      if (!current.empty()) out.push_back(current);
      current.clear();
    }
  }
  if (!current.empty()) out.push_back(current);
  return out;
}

std::set<int> parseRankSet(const std::string& option, const std::string& text) {
  std::set<int> out;
  for (const auto& item : splitOn(text, ',')) {
    std::string v = trimBlanks(item);
    std::int64_t rank = -1;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), rank);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size() || rank < 0 ||
        rank > (1 << 20)) {
      throw UsageError(option + ": invalid value '" + text +
                       "': expected a comma list of local ranks such as 0,1,2");
    }
    out.insert(static_cast<int>(rank));
  }
  return out;
}

int parseNprocPerNode(const std::string& option, const std::string& text, const DeviceDirs& dirs,
                      const std::map<std::string, std::string>& env, int cpuCount) {
  const std::string& v = text;
  if (allDigits(v)) return static_cast<int>(parseInteger(option, v, 1, 1 << 16));
  if (v == "cpu") return cpuCount;
  if (v == "gpu") {
    int n = countCudaDevices(dirs, env);
    if (n == 0) {
      throw UsageError(option + ": gpu: no GPU found (no " + (dirs.dev / "nvidiaN").string() +
                       " device file nor AMD GPU, or CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES "
                       "hides them); give a number instead");
    }
    return n;
  }
  if (v == "xpu") {
    int n = countIntelXpus(dirs.sys, env);
    if (n == 0) {
      throw UsageError(option +
                       ": xpu: no Intel XPU found (no render node driven by i915 or xe, "
                       "or ZE_AFFINITY_MASK hides them); give a number instead");
    }
    return n;
  }
  if (v == "auto") {
    // torch.accelerator's order: CUDA (or ROCm), then XPU, else the CPUs.
    if (int n = countCudaDevices(dirs, env); n > 0) return n;
    if (int n = countIntelXpus(dirs.sys, env); n > 0) return n;
    return cpuCount;
  }
  throw UsageError(option + ": invalid value '" + v +
                   "': expected a positive integer, auto, cpu, gpu or xpu");
}

std::optional<std::string> normalizeLogLevel(const std::string& text) {
  std::string s = lower(text);
  if (s == "warning") return "warn";
  if (s == "err") return "error";
  if (s == "fatal") return "critical";
  for (const char* ok : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    if (s == ok) return s;
  }
  return std::nullopt;
}

void checkLogLinePrefixTemplate(const std::string& option, const std::string& text) {
  // string.Template syntax: $name, ${name}, and $$ for a dollar. Torch's safe_substitute leaves
  // unknown names as they are; dtrun reports them, since a typo would show up in every line.
  const std::string& t = text;
  auto isIdent = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i] != '$' || i + 1 >= t.size()) continue;
    if (t[i + 1] == '$') {
      ++i;
      continue;
    }
    std::string name;
    if (t[i + 1] == '{') {
      auto close = t.find('}', i + 2);
      if (close == std::string::npos) continue;
      name = t.substr(i + 2, close - i - 2);
    } else {
      std::size_t j = i + 1;
      while (j < t.size() && isIdent(t[j])) ++j;
      name = t.substr(i + 1, j - i - 1);
      if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    }
    if (std::find(kPrefixPlaceholders.begin(), kPrefixPlaceholders.end(), name) ==
        kPrefixPlaceholders.end()) {
      throw UsageError(option + ": unknown placeholder '" + name + "' in '" + t +
                       "': expected ${role_name}, ${rank}, ${local_rank}, ${host}, ${node_rank} "
                       "or ${restart}");
    }
  }
}

}  // namespace dtrun::launcher
