#include "agent/orphan_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <set>

#include "rendezvous/error.h"

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
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) {
    ::signal(sig, SIG_IGN);
  }
  // Hold nothing the agent opened: a shell reading dtrun's output must see EOF when dtrun ends.
  int devnull = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3; ++fd) ::dup2(devnull, fd);
  long maxFd = ::sysconf(_SC_OPEN_MAX);
  for (int fd = 3; fd < maxFd && fd < 65536; ++fd) {
    if (fd != readFd) ::close(fd);
  }
  std::set<int> groups;
  Record r{};
  for (;;) {
    ssize_t n = ::read(readFd, &r, sizeof(r));
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof(r))) break;  // EOF: the agent is gone
    if (r.op == 'a') groups.insert(r.pgid);
    if (r.op == 'r') groups.erase(r.pgid);
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
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw Error(std::string("orphan guard: pipe failed: ") + std::strerror(errno));
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(std::string("orphan guard: fork failed: ") + std::strerror(err));
  }
  if (pid == 0) {
    ::close(fds[1]);
    guardMain(fds[0]);
  }
  ::close(fds[0]);
  OrphanGuard g;
  g.fd_ = fds[1];
  g.pid_ = pid;
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
  if (fd_ >= 0) ::close(fd_);
  // The guard exits on its own; it was forked before the agent became a child subreaper, so
  // init (or whoever reaps dtrun's children) collects it.
}

void OrphanGuard::add(int pgid) const { send(fd_, 'a', pgid); }

void OrphanGuard::remove(int pgid) const { send(fd_, 'r', pgid); }

}  // namespace dtrun::agent
