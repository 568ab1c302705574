#include "common/devices.h"

#include <algorithm>
#include <cctype>
#include <string_view>

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

int countVisibleGpus(const std::filesystem::path& devDir,
                     const std::optional<std::string>& cudaVisibleDevices) {
  int raw = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(devDir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("nvidia", 0) == 0 && allDigits(std::string_view(name).substr(6))) ++raw;
  }
  if (!cudaVisibleDevices || raw == 0) return raw;
  const VisibleDevices d = parseVisibleDevices(*cudaVisibleDevices);
  if (!d.uuidPrefix.empty()) {
    // UUIDs cannot be checked without NVML. A GPU has one UUID, but a GPU split by MIG shows
    // several devices, so only GPU- lists are capped at the number of device files.
    const int n = static_cast<int>(d.uuids.size());
    return d.uuidPrefix == "GPU-" ? std::min(n, raw) : n;
  }
  // torch trims the list at the first ordinal that has no device.
  int n = 0;
  while (n < static_cast<int>(d.ordinals.size()) && d.ordinals[n] < raw) ++n;
  return n;
}

}  // namespace dtrun
