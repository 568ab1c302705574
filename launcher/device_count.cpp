#include "launcher/device_count.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <string_view>
#include <system_error>
#include <vector>

namespace dtrun::launcher {
namespace {

namespace fs = std::filesystem;
using Env = std::map<std::string, std::string>;

bool allDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::vector<std::string> splitCommas(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    auto comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// The devices of `raw` that a visibility list leaves, as torch.cuda._parse_visible_devices and
// the trim to existing devices count them (HIP parses its lists the same way).
int restrictByList(int raw, const std::string& var) {
  if (raw == 0) return 0;
  auto items = splitCommas(var);
  for (const char* prefix : {"GPU-", "MIG-"}) {
    if (var.rfind(prefix, 0) != 0) continue;
    std::vector<std::string> seen;
    for (const auto& item : items) {
      if (std::find(seen.begin(), seen.end(), item) != seen.end()) return 0;
      if (item.rfind(prefix, 0) != 0) break;
      seen.push_back(item);
    }
    // UUIDs cannot be checked without the driver. A GPU has one UUID, but a GPU split by MIG
    // shows several devices, so only GPU- lists are capped at the number of devices.
    int n = static_cast<int>(seen.size());
    return std::string(prefix) == "GPU-" ? std::min(n, raw) : n;
  }
  std::vector<long> ordinals;
  for (const auto& item : items) {
    // Like strtoul: the leading digits count ("1gpu" is 1); no digits or a '-' sign stops.
    std::string s = trim(item);
    std::size_t i = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
    std::size_t digits = i;
    while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
    if (digits == i || digits - i > 9) break;
    long v = std::stol(s.substr(0, digits));
    if (v < 0) break;
    if (std::find(ordinals.begin(), ordinals.end(), v) != ordinals.end()) return 0;
    ordinals.push_back(v);
  }
  int n = 0;
  while (n < static_cast<int>(ordinals.size()) && ordinals[n] < raw) ++n;
  return n;
}

const std::string* find(const Env& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

// A KFD topology node is a GPU when its properties give it SIMD units.
bool isKfdGpuNode(const fs::path& properties) {
  std::ifstream in(properties);
  std::string key;
  long long value = 0;
  while (in >> key >> value) {
    if (key == "simd_count") return value > 0;
  }
  return false;
}

}  // namespace

int countVisibleGpus(const fs::path& devDir, const std::optional<std::string>& cudaVisibleDevices) {
  int raw = 0;
  std::error_code ec;
  for (fs::directory_iterator it(devDir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.rfind("nvidia", 0) == 0 && allDigits(std::string_view(name).substr(6))) ++raw;
  }
  return cudaVisibleDevices ? restrictByList(raw, *cudaVisibleDevices) : raw;
}

int countAmdGpus(const fs::path& sysDir, const Env& env) {
  int raw = 0;
  std::error_code ec;
  const fs::path nodes = sysDir / "class/kfd/kfd/topology/nodes";
  for (fs::directory_iterator it(nodes, ec), end; !ec && it != end; it.increment(ec)) {
    if (isKfdGpuNode(it->path() / "properties")) ++raw;
  }
  int n = raw;
  if (const auto* rocr = find(env, "ROCR_VISIBLE_DEVICES")) n = restrictByList(n, *rocr);
  if (const auto* hip = find(env, "HIP_VISIBLE_DEVICES")) {
    n = restrictByList(n, *hip);
  } else if (const auto* cuda = find(env, "CUDA_VISIBLE_DEVICES")) {
    n = restrictByList(n, *cuda);
  }
  return n;
}

int countIntelXpus(const fs::path& sysDir, const Env& env) {
  int raw = 0;
  std::error_code ec;
  for (fs::directory_iterator it(sysDir / "class/drm", ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->path().filename().string().rfind("renderD", 0) != 0) continue;
    std::error_code linkEc;
    fs::path driver = fs::read_symlink(it->path() / "device/driver", linkEc);
    std::string name = driver.filename().string();
    if (!linkEc && (name == "i915" || name == "xe")) ++raw;
  }
  const auto* mask = find(env, "ZE_AFFINITY_MASK");
  if (!mask || raw == 0) return raw;
  // "0,1.0,1.1": root devices, or root.sub-device; a root counts once, unknown ones not at all.
  std::set<long> roots;
  for (const auto& item : splitCommas(*mask)) {
    std::string root = trim(item.substr(0, item.find('.')));
    if (allDigits(root) && root.size() <= 9 && std::stol(root) < raw) roots.insert(std::stol(root));
  }
  return static_cast<int>(roots.size());
}

int countCudaDevices(const DeviceDirs& dirs, const Env& env) {
  auto cvd = find(env, "CUDA_VISIBLE_DEVICES");
  int nvidia = countVisibleGpus(dirs.dev, cvd ? std::optional<std::string>(*cvd) : std::nullopt);
  if (nvidia > 0) return nvidia;
  // A machine without NVIDIA GPUs: a ROCm build of torch counts the AMD ones as "cuda".
  std::error_code ec;
  bool anyNvidia = false;
  for (fs::directory_iterator it(dirs.dev, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.rfind("nvidia", 0) == 0 && allDigits(std::string_view(name).substr(6))) {
      anyNvidia = true;
      break;
    }
  }
  return anyNvidia ? 0 : countAmdGpus(dirs.sys, env);
}

}  // namespace dtrun::launcher
