#include "common/exit_status.h"

#include <sys/wait.h>

#include "common/signals.h"

namespace dtrun {

std::string ExitStatus::describe() const {
  if (!signal) return "exit code " + std::to_string(code);
  return "signal " + std::to_string(*signal) + " (" + signalName(*signal) + ")";
}

ExitStatus ExitStatus::fromWaitStatus(int status) {
  ExitStatus s;
  if (WIFSIGNALED(status)) {
    s.signal = WTERMSIG(status);
  } else {
    s.code = WEXITSTATUS(status);
  }
  return s;
}

}  // namespace dtrun
