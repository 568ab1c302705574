#include "launcher/hostfile.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <sstream>

namespace dtrun::launcher {
namespace {

std::optional<int> smallNumber(std::string_view s) {
  int v = -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 0 || v > 65535) {
    return std::nullopt;
  }
  return v;
}

// Lines of `text` with their numbers, blank and '#' lines skipped, each trimmed.
std::vector<std::pair<int, std::string>> meaningfulLines(const std::string& text) {
  std::vector<std::pair<int, std::string>> out;
  std::istringstream in(text);
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    std::string t = trimBlanks(line);
    if (!t.empty() && t[0] != '#') out.emplace_back(number, t);
  }
  return out;
}

void appendUnique(std::vector<int>& to, int slot) {
  if (std::find(to.begin(), to.end(), slot) == to.end()) to.push_back(slot);
}

}  // namespace

std::vector<HostSlots> parseHostfile(const std::string& text, const std::string& name) {
  std::vector<HostSlots> hosts;
  for (const auto& [number, line] : meaningfulLines(text)) {
    const std::string where = name + ":" + std::to_string(number) + ": ";
    std::istringstream words(line);
    std::string host, slots;
    words >> host >> slots;
    if (slots.rfind("slots=", 0) != 0) {
      throw UsageError(where + "expected 'HOST slots=N', got '" + line + "'");
    }
    auto n = smallNumber(std::string_view(slots).substr(6));
    if (!n || *n < 1) {
      throw UsageError(where + "invalid slot count in '" + line +
                       "': expected slots=N with N >= 1");
    }
    if (host[0] == '-' || host.find('@') != std::string::npos) {
      throw UsageError(where + "invalid host name '" + host +
                       "': it may not start with '-' or contain '@'");
    }
    auto same = [&](const HostSlots& h) { return h.host == host; };
    if (std::any_of(hosts.begin(), hosts.end(), same)) {
      throw UsageError(where + "host '" + host + "' appears twice; give each host one line");
    }
    HostSlots h{host, {}};
    for (int i = 0; i < *n; ++i) h.slots.push_back(i);
    hosts.push_back(std::move(h));
  }
  if (hosts.empty()) throw UsageError(name + ": no host in the hostfile (lines 'HOST slots=N')");
  return hosts;
}

std::vector<HostSlots> filterHosts(const std::vector<HostSlots>& pool, const GivenValue* include,
                                   const GivenValue* exclude, IncludeSlots rule) {
  if (include && exclude) {
    throw UsageError(include->source + " and " + exclude->source +
                     " exclude each other: give one of them");
  }
  const GivenValue* filter = include ? include : exclude;
  if (!filter) return pool;
  const std::string& spec = filter->value;
  auto poolHost = [&](const std::string& host) -> const HostSlots& {
    for (const auto& h : pool) {
      if (h.host == host) return h;
    }
    throw UsageError(filter->source + ": host '" + host + "' of '" + spec +
                     "' is not in the hostfile");
  };

  // Include builds the selection from nothing; exclude removes from everything.
  std::vector<HostSlots> chosen = include ? std::vector<HostSlots>{} : pool;
  auto entry = [&](const std::string& host) -> HostSlots& {
    for (auto& h : chosen) {
      if (h.host == host) return h;
    }
    chosen.push_back({host, {}});
    return chosen.back();
  };
  for (const auto& nodeSpec : splitOn(spec, '@')) {
    if (nodeSpec.empty()) {
      throw UsageError(filter->source + ": empty host in '" + spec +
                       "': expected HOST[:SLOT,...][@HOST[:SLOT,...]...]");
    }
    // A host alone, or HOST:SLOT,SLOT (the last ':' splits, so a host name may hold one).
    std::string host = nodeSpec;
    std::optional<std::vector<int>> slots;
    bool wholeHost = std::any_of(pool.begin(), pool.end(),
                                 [&](const HostSlots& h) { return h.host == nodeSpec; });
    if (auto colon = nodeSpec.rfind(':'); !wholeHost && colon != std::string::npos) {
      host = nodeSpec.substr(0, colon);
      slots.emplace();
      for (const auto& s : splitOn(nodeSpec.substr(colon + 1), ',')) {
        auto n = smallNumber(trimBlanks(s));
        if (!n) {
          throw UsageError(filter->source + ": invalid slot '" + s + "' in '" + nodeSpec +
                           "': expected HOST:SLOT[,SLOT...] with slot numbers");
        }
        slots->push_back(*n);
      }
    }
    const HostSlots& known = poolHost(host);
    // DeepSpeed makes an include's slots the host's own before it checks them against the host.
    if (slots && !(include && rule == IncludeSlots::kDeepSpeed)) {
      for (int s : *slots) {
        if (std::find(known.slots.begin(), known.slots.end(), s) == known.slots.end()) {
          throw UsageError(filter->source + ": host '" + host + "' has no slot " +
                           std::to_string(s) + " (the hostfile gives it slots 0 to " +
                           std::to_string(known.slots.size() - 1) + ")");
        }
      }
    }
    HostSlots& h = entry(host);
    if (include) {
      for (int s : slots ? *slots : known.slots) appendUnique(h.slots, s);
    } else if (slots) {
      for (int s : *slots)
        h.slots.erase(std::remove(h.slots.begin(), h.slots.end(), s), h.slots.end());
    } else {
      h.slots.clear();
    }
  }
  if (include && rule == IncludeSlots::kDeepSpeed) {
    for (auto& h : chosen) std::sort(h.slots.begin(), h.slots.end());
  }
  // The hostfile's order (it decides the node ranks), hosts without slots dropped.
  std::vector<HostSlots> out;
  for (const auto& p : pool) {
    for (auto& c : chosen) {
      if (c.host == p.host && !c.slots.empty()) out.push_back(std::move(c));
    }
  }
  if (out.empty()) throw UsageError(filter->source + " " + spec + ": leaves no host to run on");
  return out;
}

std::vector<HostSlots> limitHosts(std::vector<HostSlots> hosts, const GivenValue* numNodes,
                                  const GivenValue* numGpus) {
  if (numNodes) {
    auto n = static_cast<std::size_t>(parseInteger(numNodes->source, numNodes->value, 1, 1 << 20));
    if (n > hosts.size()) {
      throw UsageError(numNodes->source + " " + numNodes->value + ": only " +
                       std::to_string(hosts.size()) + " host(s) to choose from");
    }
    hosts.resize(n);
  }
  if (numGpus) {
    auto g = static_cast<int>(parseInteger(numGpus->source, numGpus->value, 1, 1 << 16));
    for (auto& h : hosts) {
      int n = std::min(g, static_cast<int>(h.slots.size()));
      h.slots.clear();
      for (int i = 0; i < n; ++i) h.slots.push_back(i);
    }
  }
  return hosts;
}

std::vector<std::pair<std::string, std::string>> parseEnvFile(const std::string& text,
                                                              const std::string& name) {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto [number, line] : meaningfulLines(text)) {
    const std::string where = name + ":" + std::to_string(number) + ": ";
    if (line.rfind("export ", 0) == 0) line = trimBlanks(line.substr(7));
    auto eq = line.find('=');
    // Blanks around '=' are dropped, as DeepSpeed's runner strips both sides.
    std::string key = trimBlanks(line.substr(0, eq));
    bool keyOk = !key.empty() && !std::isdigit(static_cast<unsigned char>(key[0])) &&
                 std::all_of(key.begin(), key.end(), [](char c) {
                   return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                 });
    if (eq == std::string::npos || !keyOk) {
      throw UsageError(where + "expected KEY=VALUE with KEY a variable name, got '" + line + "'");
    }
    std::string value = trimBlanks(line.substr(eq + 1));
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
        value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    }
    out.emplace_back(key, value);
  }
  return out;
}

bool isExportedVariable(std::string_view name) {
  if (name == "PATH" || name == "LD_LIBRARY_PATH") return true;
  if (name == "CUDA_VISIBLE_DEVICES") return false;  // each host's slots decide it
  for (std::string_view prefix : {"PYTHON", "NCCL_", "TORCH_", "CUDA_", "OMP_", "UCX_", "FI_"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

}  // namespace dtrun::launcher
