#include "agent/reaper.h"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "agent/process_tree.h"

namespace dtrun::agent {

std::vector<int> adoptedChildren(const std::set<int>& owned) {
  std::vector<int> found;
  const int self = ::getpid();
  DIR* proc = ::opendir("/proc");
  if (!proc) return found;
  while (dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || owned.count(static_cast<int>(pid))) continue;
    auto stat = readProcStat(static_cast<int>(pid));
    if (!stat || stat->ppid != self || stat->state == 'Z') continue;
    found.push_back(static_cast<int>(pid));
  }
  ::closedir(proc);
  return found;
}

Reaper::Reaper(boost::asio::io_context& io, Owned owned)
    : owned_(std::move(owned)), sigchld_(io, SIGCHLD) {}

void Reaper::start() {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  running_ = true;
  arm();
}

void Reaper::stop() {
  running_ = false;
  boost::system::error_code ignored;
  sigchld_.cancel(ignored);
}

void Reaper::arm() {
  sigchld_.async_wait([this](boost::system::error_code ec, int) {
    if (ec || !running_) return;
    reap();
    arm();
  });
}

void Reaper::reap() {
  // A stray waitpid(-1) would steal a worker's status from its WorkerProcess: peek first.
  const std::set<int> owned = owned_();
  for (;;) {
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    if (owned.count(info.si_pid)) return;
    ::waitpid(info.si_pid, nullptr, WNOHANG);
  }
}

std::size_t Reaper::sweep() {
  const std::set<int> owned = owned_();
  siginfo_t info{};
  const bool noChildren = owned.empty() &&
                          ::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 &&
                          errno == ECHILD;
  if (noChildren) return 0;
  std::size_t killed = 0;
  for (int pid : adoptedChildren(owned)) {
    if (::kill(pid, SIGKILL) == 0) ++killed;
  }
  reap();
  return killed;
}

}  // namespace dtrun::agent
