#include "tests/worker_runtime/process_harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "tests/support/test_support.h"

#ifndef DTRUN_BIN
#error "DTRUN_BIN must name the dtrun executable"
#endif

namespace dtrun::test {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::vector<char*> cStrings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

Child::Child(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  auto args = cStrings(argv);
  auto envp = cStrings(env);
  int rc = ::posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw std::runtime_error("posix_spawn " + argv[0] + ": " + std::strerror(rc));
  }
  fd_ = fds[0];
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
}

Child::~Child() {
  if (!status_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }
  if (fd_ >= 0) ::close(fd_);
}

void Child::pump() {
  if (fd_ < 0) return;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd_, buf, sizeof(buf));
    if (n > 0) {
      output_.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0) {
      ::close(fd_);
      fd_ = -1;
      return;
    } else if (errno != EINTR) {
      return;  // EAGAIN: nothing more for now
    }
  }
}

bool Child::step() {
  pump();
  if (status_) return true;
  int st = 0;
  if (::waitpid(pid_, &st, WNOHANG) != pid_) return false;
  status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  pump();  // what it wrote just before exiting is still in the pipe
  return true;
}

const std::string& Child::output() {
  pump();
  return output_;
}

bool Child::waitForOutput(const std::string& text, milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  for (;;) {
    pump();
    if (output_.find(text) != std::string::npos) return true;
    if (Clock::now() >= until || step()) return output_.find(text) != std::string::npos;
    pollfd p{fd_, POLLIN, 0};
    ::poll(&p, fd_ >= 0 ? 1 : 0, 10);
  }
}

std::optional<int> Child::wait(milliseconds timeout) {
  if (!waitAll({this}, timeout)) return std::nullopt;
  return status_;
}

void Child::signal(int sig) {
  if (!status_) ::kill(pid_, sig);
}

bool waitAll(const std::vector<Child*>& children, milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  for (;;) {
    bool all = true;
    for (Child* c : children) all = c->step() && all;
    if (all) return true;
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
}

namespace {

std::vector<std::string> storeArgv(std::uint16_t port) {
  return {DTRUN_BIN,     "store", "--host", "127.0.0.1", "--port", std::to_string(port),
          "--log-level", "warn"};
}

// The first line of `dtrun store` is host:port.
std::uint16_t readPort(Child& child) {
  if (!child.waitForOutput("\n", std::chrono::seconds(20))) {
    throw std::runtime_error("dtrun store printed no address: " + child.output());
  }
  const std::string& out = child.output();
  std::string first = out.substr(0, out.find('\n'));
  auto colon = first.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error("dtrun store printed: " + out);
  return static_cast<std::uint16_t>(std::stoi(first.substr(colon + 1)));
}

}  // namespace

StoreProcess::StoreProcess() : StoreProcess(0) {}

StoreProcess::StoreProcess(std::uint16_t port) : child_(storeArgv(port), {}) {
  port_ = readPort(child_);
}

void StoreProcess::kill() {
  child_.signal(SIGKILL);
  child_.wait(std::chrono::seconds(20));
}

std::vector<std::string> workerEnv(int rank, int world, int perNode, std::uint16_t port, int round,
                                   const std::map<std::string, std::optional<std::string>>& extra) {
  return envEntries(
      {
          {"RANK", std::to_string(rank)},
          {"LOCAL_RANK", std::to_string(rank % perNode)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_WORLD_SIZE", std::to_string(perNode)},
          {"GROUP_RANK", std::to_string(rank / perNode)},
          {"GROUP_WORLD_SIZE", std::to_string((world + perNode - 1) / perNode)},
          {"ROLE_NAME", "default"},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)},
          {"TORCHELASTIC_USE_AGENT_STORE", "True"},
          {"TORCHELASTIC_RESTART_COUNT", std::to_string(round)},
          {"TORCHELASTIC_MAX_RESTARTS", "3"},
          {"TORCHELASTIC_RUN_ID", "worker-runtime-test"},
      },
      extra);
}

}  // namespace dtrun::test
