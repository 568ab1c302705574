#include "agent/orphan_guard.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "common/error.h"
#include "common/signals.h"

namespace dtrun::agent {
namespace {

// One record per message: an opcode and a pgid, written at once (well under PIPE_BUF, so
// records from several threads never interleave).
struct Record {
  char op;  // 'a' add, 'r' remove
  std::int32_t pgid;
} __attribute__((packed));

[[noreturn]] void guardMain(int readFd) {
  ::prctl(PR_SET_NAME, "dtrun-guard");
  // Its own process group: a terminal's Ctrl-C (sent to dtrun's group) does not reach it.
  ::setpgid(0, 0);
  // What is sent to dtrun's processes to stop or warn them is not for the guard, which must
  // outlive the agent; nor is a closed pipe.
  for (int sig : kDefaultHandledSignals) ::signal(sig, SIG_IGN);
  ::signal(SIGPIPE, SIG_IGN);
  // Hold nothing the agent opened: a shell reading dtrun's output must see EOF when dtrun ends.
  int devnull = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3; ++fd) ::dup2(devnull, fd);
  // Keep readFd as 3, then close everything above it at once (close_range, Linux >= 5.9;
  // otherwise a loop over what /proc/self/fd lists, never one over RLIMIT_NOFILE).
  if (readFd != 3) {
    ::dup2(readFd, 3);
    readFd = 3;
  }
  if (::syscall(SYS_close_range, 4u, ~0u, 0u) != 0) {
    if (DIR* d = ::opendir("/proc/self/fd")) {
      std::vector<int> open;
      while (dirent* e = ::readdir(d)) {
        int fd = std::atoi(e->d_name);
        if (fd > 3 && fd != ::dirfd(d)) open.push_back(fd);
      }
      ::closedir(d);
      for (int fd : open) ::close(fd);
    }
  }
  std::set<int> groups;
  Record r{};
  for (;;) {
    ssize_t n = ::read(readFd, &r, sizeof(r));
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof(r))) break;  // EOF: the agent is gone
    // A copy: insert() and erase() take a reference, which a packed member cannot bind
    // (misaligned; UBSan stops the guard there, and then no group is ever killed).
    const int pgid = r.pgid;
    if (r.op == 'a') groups.insert(pgid);
    if (r.op == 'r') groups.erase(pgid);
  }
  for (int g : groups) ::kill(-g, SIGKILL);
  ::_exit(0);
}

void send(int fd, char op, int pgid) {
  if (fd < 0 || pgid <= 0) return;
  Record r{op, pgid};
  while (::write(fd, &r, sizeof(r)) < 0 && errno == EINTR) {
  }
}

}  // namespace

OrphanGuard OrphanGuard::start() {
  int fds[2];
  int pidPipe[2];
  if (::pipe2(fds, O_CLOEXEC) != 0 || ::pipe2(pidPipe, O_CLOEXEC) != 0) {
    throw Error(std::string("orphan guard: pipe failed: ") + std::strerror(errno));
  }
  // Forked twice, so that the guard is not dtrun's child: the agent then learns from one
  // waitid() that it has no children left (and skips the /proc scan for adopted orphans), and
  // the guard is reparented to init, not to the agent, which becomes a subreaper only later.
  pid_t middle = ::fork();
  if (middle < 0) {
    int err = errno;
    for (int fd : {fds[0], fds[1], pidPipe[0], pidPipe[1]}) ::close(fd);
    throw Error(std::string("orphan guard: fork failed: ") + std::strerror(err));
  }
  if (middle == 0) {
    ::close(fds[1]);
    ::close(pidPipe[0]);
    pid_t guard = ::fork();
    if (guard == 0) {
      ::close(pidPipe[1]);
      guardMain(fds[0]);
    }
    std::int32_t pid = guard;
    (void)!::write(pidPipe[1], &pid, sizeof(pid));
    ::_exit(guard < 0 ? 1 : 0);
  }
  ::close(fds[0]);
  ::close(pidPipe[1]);
  std::int32_t guardPid = -1;
  ssize_t n;
  while ((n = ::read(pidPipe[0], &guardPid, sizeof(guardPid))) < 0 && errno == EINTR) {
  }
  ::close(pidPipe[0]);
  while (::waitpid(middle, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(sizeof(guardPid)) || guardPid <= 0) {
    ::close(fds[1]);
    throw Error("orphan guard: the second fork failed");
  }
  OrphanGuard g;
  g.fd_ = fds[1];
  g.pid_ = guardPid;
  return g;
}

OrphanGuard::OrphanGuard(OrphanGuard&& other) noexcept : fd_(other.fd_), pid_(other.pid_) {
  other.fd_ = -1;
  other.pid_ = 0;
}

OrphanGuard& OrphanGuard::operator=(OrphanGuard&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    pid_ = other.pid_;
    other.fd_ = -1;
    other.pid_ = 0;
  }
  return *this;
}

OrphanGuard::~OrphanGuard() {
  if (fd_ >= 0) ::close(fd_);  // the guard exits on its own; init reaps it
}

void OrphanGuard::add(int pgid) const { send(fd_, 'a', pgid); }

void OrphanGuard::remove(int pgid) const { send(fd_, 'r', pgid); }

}  // namespace dtrun::agent
