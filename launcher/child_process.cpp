#include "launcher/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "common/spawn.h"

namespace dtrun::launcher {
namespace {

constexpr std::size_t kMaxOutput = 64 * 1024;

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

Pipe makePipe(const std::string& what) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw Error("cannot start " + what + ": pipe: " + std::strerror(errno));
  }
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

}  // namespace

ChildPipes startWithPipes(const std::vector<std::string>& argv) {
  const std::string what = argv.empty() ? std::string("a process") : argv[0];
  Pipe in = makePipe(what), out = makePipe(what), err = makePipe(what);
  SpawnSpec spec;
  spec.argv = argv;
  spec.stdinFd = in.read.get();
  spec.stdoutFd = out.write.get();
  spec.stderrFd = err.write.get();
  spec.ownProcessGroup = true;
  ChildPipes c;
  c.pid = spawnProcess(spec);
  c.stdinWrite = std::move(in.write);
  c.stdoutRead = std::move(out.read);
  c.stderrRead = std::move(err.read);
  return c;  // the child's ends close here, so EOF follows the child's exit
}

CommandResult runCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                         const std::optional<std::vector<std::string>>& env) {
  CommandResult result;
  if (argv.empty()) {
    result.error = "no command";
    return result;
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    result.error = std::string("pipe2: ") + std::strerror(errno);
    return result;
  }
  SpawnSpec spec;
  spec.argv = argv;
  spec.env = env;
  spec.stdinFd = kSpawnDevNull;
  spec.stdoutFd = fds[1];
  spec.stderrFd = fds[1];
  pid_t pid = -1;
  try {
    pid = spawnProcess(spec);
  } catch (const Error& e) {
    ::close(fds[0]);
    ::close(fds[1]);
    result.error = "cannot run " + argv[0] + ": " + e.what();
    return result;
  }
  ::close(fds[1]);
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
    pollfd p{fds[0], POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 1000)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    ssize_t got = ::read(fds[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    if (result.output.size() < kMaxOutput) {
      result.output.append(buf, static_cast<std::size_t>(got));
    }
  }
  ::close(fds[0]);
  if (timedOut) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timedOut) {
    result.error = argv[0] + " did not finish within " + std::to_string(timeout.count()) + " ms";
    return result;
  }
  result.finished = true;
  result.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace dtrun::launcher
