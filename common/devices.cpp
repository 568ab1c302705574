#include "common/devices.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <string_view>
#include <system_error>

namespace dtrun {
namespace {

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

std::string trim(std::string_view s) {
  auto blank = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return std::string(s);
}

}  // namespace

std::vector<std::string> VisibleDevices::entries() const {
  if (!uuidPrefix.empty()) return uuids;
  std::vector<std::string> out;
  for (long o : ordinals) out.push_back(std::to_string(o));
  return out;
}

VisibleDevices parseVisibleDevices(const std::string& var) {
  VisibleDevices d;
  const auto items = splitCommas(var);
  for (const char* prefix : {"GPU-", "MIG-"}) {
    if (var.rfind(prefix, 0) != 0) continue;
    d.uuidPrefix = prefix;
    for (const auto& item : items) {
      if (item.rfind(prefix, 0) != 0) break;
      if (std::find(d.uuids.begin(), d.uuids.end(), item) != d.uuids.end()) {
        d.uuids.clear();
        break;
      }
      d.uuids.push_back(item);
    }
    return d;
  }
  for (const auto& item : items) {
    // Like strtoul: the leading digits count ("1gpu" is 1); no digits or a '-' sign stops.
    const std::string s = trim(item);
    std::size_t i = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
    std::size_t digits = i;
    while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
    if (digits == i || digits - i > 9) break;
    const long v = std::stol(s.substr(0, digits));
    if (v < 0) break;
    if (std::find(d.ordinals.begin(), d.ordinals.end(), v) != d.ordinals.end()) {
      d.ordinals.clear();
      break;
    }
    d.ordinals.push_back(v);
  }
  return d;
}

namespace {

// How many of `raw` devices a visibility list leaves, as torch counts them: UUID lists count
// their entries (GPU- ones capped at the devices there are: a GPU has one UUID, but a GPU split
// by MIG shows several devices), ordinal lists are trimmed at the first ordinal with no device.
int countVisible(int raw, const std::string& list) {
  if (raw == 0) return 0;
  const VisibleDevices d = parseVisibleDevices(list);
  if (!d.uuidPrefix.empty()) {
    const int n = static_cast<int>(d.uuids.size());
    return d.uuidPrefix == "GPU-" ? std::min(n, raw) : n;
  }
  int n = 0;
  while (n < static_cast<int>(d.ordinals.size()) && d.ordinals[n] < raw) ++n;
  return n;
}

int nvidiaDeviceFiles(const std::filesystem::path& devDir) {
  int raw = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(devDir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("nvidia", 0) == 0 && allDigits(std::string_view(name).substr(6))) ++raw;
  }
  return raw;
}

const std::string* find(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

// A KFD topology node is a GPU when its properties give it SIMD units.
bool isKfdGpuNode(const std::filesystem::path& properties) {
  std::ifstream in(properties);
  std::string key;
  long long value = 0;
  while (in >> key >> value) {
    if (key == "simd_count") return value > 0;
  }
  return false;
}

}  // namespace

int countVisibleGpus(const std::filesystem::path& devDir,
                     const std::optional<std::string>& cudaVisibleDevices) {
  const int raw = nvidiaDeviceFiles(devDir);
  return cudaVisibleDevices ? countVisible(raw, *cudaVisibleDevices) : raw;
}

int countAmdGpus(const std::filesystem::path& sysDir,
                 const std::map<std::string, std::string>& env) {
  int n = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(sysDir / "class/kfd/kfd/topology/nodes", ec), end;
       !ec && it != end; it.increment(ec)) {
    if (isKfdGpuNode(it->path() / "properties")) ++n;
  }
  if (const auto* rocr = find(env, "ROCR_VISIBLE_DEVICES")) n = countVisible(n, *rocr);
  if (const auto* hip = find(env, "HIP_VISIBLE_DEVICES")) {
    n = countVisible(n, *hip);
  } else if (const auto* cuda = find(env, "CUDA_VISIBLE_DEVICES")) {
    n = countVisible(n, *cuda);
  }
  return n;
}

int countIntelXpus(const std::filesystem::path& sysDir,
                   const std::map<std::string, std::string>& env) {
  int raw = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(sysDir / "class/drm", ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->path().filename().string().rfind("renderD", 0) != 0) continue;
    std::error_code linkEc;
    const auto driver = std::filesystem::read_symlink(it->path() / "device/driver", linkEc);
    const std::string name = driver.filename().string();
    if (!linkEc && (name == "i915" || name == "xe")) ++raw;
  }
  const auto* mask = find(env, "ZE_AFFINITY_MASK");
  if (!mask || raw == 0) return raw;
  // "0,1.0,1.1": root devices, or root.sub-device; a root counts once, unknown ones not at all.
  std::set<long> roots;
  for (const auto& item : splitCommas(*mask)) {
    const std::string root = trim(item.substr(0, item.find('.')));
    if (allDigits(root) && root.size() <= 9 && std::stol(root) < raw) roots.insert(std::stol(root));
  }
  return static_cast<int>(roots.size());
}

int countCudaDevices(const DeviceDirs& dirs, const std::map<std::string, std::string>& env) {
  const int raw = nvidiaDeviceFiles(dirs.dev);
  if (raw > 0) {
    const auto* cvd = find(env, "CUDA_VISIBLE_DEVICES");
    return cvd ? countVisible(raw, *cvd) : raw;
  }
  // No NVIDIA GPU: a ROCm build of torch counts the AMD ones as "cuda".
  return countAmdGpus(dirs.sys, env);
}

}  // namespace dtrun
