#include "launcher/torch_probe.h"

#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "launcher/child_process.h"

namespace dtrun::launcher {
namespace {

// The number at the start of `s` (advancing it), at most 4 digits.
std::optional<int> leadingNumber(std::string_view& s) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  auto len = static_cast<std::size_t>(end - s.data());
  if (ec != std::errc() || len == 0 || len > 4) return std::nullopt;
  s.remove_prefix(len);
  return v;
}

}  // namespace

std::optional<std::pair<int, int>> torchMajorMinor(const std::string& version) {
  std::string_view s = version;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  auto major = leadingNumber(s);
  if (!major || s.empty() || s.front() != '.') return std::nullopt;
  s.remove_prefix(1);
  auto minor = leadingNumber(s);
  if (!minor) return std::nullopt;
  return std::make_pair(*major, *minor);
}

std::optional<std::string> versionFromVersionPy(const std::string& text) {
  // torch's generated file: __version__ = '2.3.1+cu121' (newer ones annotate: `: str`).
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("__version__", 0) != 0) continue;
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    auto open = line.find_first_of("'\"", eq);
    if (open == std::string::npos) continue;
    auto close = line.find(line[open], open + 1);
    if (close == std::string::npos || close == open + 1) continue;
    return line.substr(open + 1, close - open - 1);
  }
  return std::nullopt;
}

std::optional<std::string> probeTorchVersion(const std::string& python,
                                             const std::map<std::string, std::string>& env) {
  std::vector<std::string> envp;
  for (const auto& [k, v] : env) envp.push_back(k + "=" + v);
  auto run = runCommand(
      {python, "-c",
       "import importlib.util as u\ns = u.find_spec('torch')\nprint(s.origin if s and s.origin "
       "else '')"},
      std::chrono::seconds(10), envp);
  if (!run.finished || run.exitCode != 0) return std::nullopt;
  // The last line is the answer (anything python said on stderr comes before it).
  std::string origin = run.output;
  while (!origin.empty() && std::isspace(static_cast<unsigned char>(origin.back()))) {
    origin.pop_back();
  }
  origin = origin.substr(origin.rfind('\n') == std::string::npos ? 0 : origin.rfind('\n') + 1);
  if (origin.empty()) return std::nullopt;
  std::ifstream in(std::filesystem::path(origin).parent_path() / "version.py");
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return versionFromVersionPy(text.str());
}

void addNcclAsyncErrorHandling(std::map<std::string, std::string>& env,
                               const std::optional<std::string>& torchVersion) {
  auto mm = torchVersion ? torchMajorMinor(*torchVersion) : std::nullopt;
  const auto renamed = std::make_pair(2, 2);
  if (!mm || *mm >= renamed) env.emplace("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  if (!mm || *mm < renamed) env.emplace("NCCL_ASYNC_ERROR_HANDLING", "1");
}

}  // namespace dtrun::launcher
