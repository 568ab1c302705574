#include "agent/termination_log.h"

#include <unistd.h>

#include "common/file_util.h"

namespace dtrun::agent {

namespace {
constexpr char kKubernetesDefault[] = "/dev/termination-log";
}  // namespace

std::string terminationLogPath(const std::string& configured) {
  if (!configured.empty()) return configured;
  // Outside a container the file does not exist, and dtrun creates nothing in /dev.
  return ::access(kKubernetesDefault, W_OK) == 0 ? kKubernetesDefault : "";
}

std::string writeTerminationLog(const std::string& path, const std::string& message) {
  try {
    writeWholeFile(path, message, 0644, "the termination message");
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

}  // namespace dtrun::agent
