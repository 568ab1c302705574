#include "launcher/child_process.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "common/exit_status.h"
#include "common/fd.h"
#include "common/spawn.h"

namespace dtrun::launcher {
namespace {

constexpr std::size_t kMaxOutput = 64 * 1024;

}  // namespace

CommandResult runCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                         const std::optional<std::vector<std::string>>& env) {
  CommandResult result;
  if (argv.empty()) {
    result.error = "no command";
    return result;
  }
  Pipe output;
  pid_t pid = -1;
  try {
    output = makePipe("cannot run " + argv[0]);
  } catch (const Error& e) {
    result.error = e.what();
    return result;
  }
  SpawnSpec spec;
  spec.argv = argv;
  spec.env = env;
  spec.stdinFd = kSpawnDevNull;
  spec.stdoutFd = output.write.get();
  spec.stderrFd = output.write.get();
  try {
    pid = spawnProcess(spec);
  } catch (const Error& e) {
    result.error = "cannot run " + argv[0] + ": " + e.what();
    return result;
  }
  output.write.reset();
  // Read until EOF or the deadline. A grandchild holding the pipe open past the child's exit
  // ends the read at the deadline, like a hung child.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timedOut = false;
  char buf[4096];
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timedOut = true;
      break;
    }
    pollfd p{output.read.get(), POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 1000)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    ssize_t got = ::read(output.read.get(), buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    if (result.output.size() < kMaxOutput) {
      result.output.append(buf, static_cast<std::size_t>(got));
    }
  }
  output.read.reset();
  if (timedOut) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timedOut) {
    result.error = argv[0] + " did not finish within " + std::to_string(timeout.count()) + " ms";
    return result;
  }
  result.finished = true;
  result.exitCode = ExitStatus::fromWaitStatus(status).shellExitCode();
  return result;
}

}  // namespace dtrun::launcher
