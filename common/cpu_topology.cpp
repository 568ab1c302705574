#include "common/cpu_topology.h"

#include <cctype>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <system_error>

namespace dtrun {
namespace {

namespace fs = std::filesystem;

// `prefix` followed by digits only ("cpu12", "node3").
bool isNumbered(const std::string& name, const std::string& prefix) {
  if (name.size() <= prefix.size() || name.rfind(prefix, 0) != 0) return false;
  for (std::size_t i = prefix.size(); i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return false;
  }
  return true;
}

// The text of `p` without blanks at either end; `ok` says whether it could be read.
std::string readTrimmed(const fs::path& p, bool& ok) {
  std::ifstream in(p);
  ok = static_cast<bool>(in);
  if (!ok) return "";
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t start = 0;
  while (start < s.size() && std::isspace(static_cast<unsigned char>(s[start]))) ++start;
  return s.substr(start);
}

// The distinct contents of `file` in every numbered entry of `dir`.
std::set<std::string> distinctContents(const fs::path& dir, const std::string& prefix,
                                       const std::string& file) {
  std::set<std::string> seen;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!isNumbered(it->path().filename().string(), prefix)) continue;
    bool ok = false;
    std::string text = readTrimmed(it->path() / file, ok);
    if (ok) seen.insert(text);
  }
  return seen;
}

}  // namespace

int countPhysicalCores(const fs::path& sysDir) {
  const fs::path cpus = sysDir / "devices/system/cpu";
  // psutil reads the newer name when any CPU has it, else the deprecated one.
  auto cores = distinctContents(cpus, "cpu", "topology/core_cpus_list");
  if (cores.empty()) cores = distinctContents(cpus, "cpu", "topology/thread_siblings_list");
  return static_cast<int>(cores.size());
}

int countNumaNodesWithCpus(const fs::path& sysDir) {
  int n = 0;
  std::error_code ec;
  const fs::path nodes = sysDir / "devices/system/node";
  for (fs::directory_iterator it(nodes, ec), end; !ec && it != end; it.increment(ec)) {
    if (!isNumbered(it->path().filename().string(), "node")) continue;
    bool ok = false;
    if (!readTrimmed(it->path() / "cpulist", ok).empty()) ++n;
  }
  return n;
}

}  // namespace dtrun
