#include "agent/standby.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "agent/process_tree.h"
#include "common/error.h"

namespace dtrun::agent {
namespace {

// A capture pipe this large lets the imports print a megabyte before they would block (and the
// standby then never gets ready: it starts cold). The kernel may allow less (pipe-max-size).
constexpr int kCapturePipeBytes = 1 << 20;
// The lowest descriptor number the control socket takes in the standby.
constexpr int kControlFdFloor = 200;

std::string errnoText(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// The descriptor the standby gets as its stdout or stderr while it imports; `keep` receives the
// end the agent keeps (and passes back at the hand-over). -1: the agent's own.
UniqueFd captureStream(PreloadStream kind, UniqueFd& keep, const char* name) {
  if (kind == PreloadStream::kInherit) return UniqueFd();
  if (kind == PreloadStream::kFile) {
    UniqueFd memfd(::memfd_create(name, MFD_CLOEXEC));
    if (!memfd) throw Error("prewarm: " + errnoText("memfd_create"));
    keep.reset(::fcntl(memfd.get(), F_DUPFD_CLOEXEC, 3));
    if (!keep) throw Error("prewarm: " + errnoText("fcntl"));
    return memfd;
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error("prewarm: " + errnoText("pipe2"));
  keep.reset(fds[0]);
  UniqueFd write(fds[1]);
  ::fcntl(write.get(), F_SETPIPE_SZ, kCapturePipeBytes);  // best effort
  // The standby drains it at the hand-over without waiting: a child of the imports may hold the
  // write end open.
  ::fcntl(keep.get(), F_SETFL, ::fcntl(keep.get(), F_GETFL) | O_NONBLOCK);
  return write;
}

bool writeFully(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

MemoryUse memoryOf(int pid) {
  MemoryUse m;
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string line;  // the first names the range; then "Rss:   184360 kB" and the like
  while (std::getline(in, line)) {
    const auto value = [&] { return std::strtoull(line.c_str() + 4, nullptr, 10); };
    if (line.rfind("Rss:", 0) == 0) m.rssKib = value();
    if (line.rfind("Pss:", 0) == 0) m.pssKib = value();
  }
  return m;
}

Standby::Standby(boost::asio::io_context& io, SpawnSpec spec, PreloadStream out, PreloadStream err,
                 MessageHandler onMessage, WorkerProcess::ExitHandler onExit)
    : spec_(std::move(spec)), control_(io), onMessage_(std::move(onMessage)) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    throw Error("prewarm: " + errnoText("socketpair"));
  }
  UniqueFd mine(sv[0]);
  // A high number in the standby, kept clear of the low ones the imports open, so that the
  // worker's descriptors get the numbers they would get in a cold start.
  UniqueFd theirs(::fcntl(sv[1], F_DUPFD_CLOEXEC, kControlFdFloor));
  ::close(sv[1]);
  if (!theirs) throw Error("prewarm: " + errnoText("fcntl"));
  SpawnSpec launch = spec_;
  launch.keepFds.push_back(theirs.get());
  if (!launch.env) launch.env.emplace();
  launch.env->push_back("DTRUN_STANDBY_FD=" + std::to_string(theirs.get()));
  UniqueFd outChild = captureStream(out, outCapture_, "dtrun-standby-stdout");
  UniqueFd errChild = captureStream(err, errCapture_, "dtrun-standby-stderr");
  if (outChild) launch.stdoutFd = outChild.get();
  if (errChild) launch.stderrFd = errChild.get();
  started_ = std::chrono::steady_clock::now();
  process_ = std::make_unique<WorkerProcess>(io, launch, std::move(onExit));
  pid_ = process_->pid();
  ::fcntl(mine.get(), F_SETFL, ::fcntl(mine.get(), F_GETFL) | O_NONBLOCK);
  control_.assign(mine.release());
  read();
}

Standby::~Standby() {
  *alive_ = false;
  boost::system::error_code ignored;
  control_.close(ignored);
}

const std::string& Standby::execError() const {
  static const std::string none;
  return process_ ? process_->execError() : none;
}

void Standby::read() {
  control_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                      [this, alive = alive_](boost::system::error_code ec) {
                        if (!*alive || ec == boost::asio::error::operation_aborted) return;
                        if (receive()) read();
                      });
}

bool Standby::receive() {
  const std::shared_ptr<bool> alive = alive_;
  char buf[4096];
  while (control_.is_open()) {
    ssize_t n = ::recv(control_.native_handle(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) {  // end-of-file (or a reset, which means the same here)
      boost::system::error_code ignored;
      control_.close(ignored);
      onMessage_(StandbyMessage{});
      return false;
    }
    StandbyMessage m;
    m.kind = buf[0];
    const std::size_t from = n > 1 && buf[1] == ' ' ? 2 : 1;
    if (static_cast<std::size_t>(n) > from) m.text.assign(buf + from, buf + n);
    onMessage_(m);
    if (!*alive) return false;  // the handler dropped this standby
  }
  return false;
}

std::string Standby::unusable(const SpawnSpec& worker) const {
  if (!process_) return "it was handed over already";
  if (!process_->running()) return "it exited";
  if (!ready_) return "it is still importing";
  if (worker.argv != spec_.argv) return "it was started for another command line";
  if (worker.cwd != spec_.cwd) return "it was started in another working directory";
  if (worker.keepFds != spec_.keepFds) return "it was started with other descriptors";
  const auto stat = readProcStat(pid_);
  if (!stat || stat->state == 'Z' || stat->state == 'X') return "it died";
  if (stat->state == 'T') return "it is stopped (SIGSTOP)";
  if (stat->state == 't') return "it is being traced";
  return "";
}

std::unique_ptr<WorkerProcess> Standby::handOver(const SpawnSpec& worker,
                                                 WorkerProcess::ExitHandler onExit,
                                                 std::string& why) {
  why = unusable(worker);
  if (!why.empty()) return nullptr;
  if (!worker.env) {
    why = "the worker has no environment of its own";
    return nullptr;
  }
  UniqueFd env(::memfd_create("dtrun-worker-env", MFD_CLOEXEC));
  std::string block;
  for (const auto& e : *worker.env) {
    block += e;
    block.push_back('\0');
  }
  if (!env || !writeFully(env.get(), block)) {
    why = "the hand-over failed: " + errnoText("the environment's memfd");
    return nullptr;
  }
  // The streams as spawnProcess gives them: -1 is this process's own (unless it has none open:
  // then the standby keeps its own, which is the same), kSpawnDevNull is /dev/null.
  UniqueFd devNull;
  std::string roles = "H";
  std::vector<int> fds;
  const int sources[3] = {worker.stdinFd, worker.stdoutFd, worker.stderrFd};
  for (int target = 0; target < 3; ++target) {
    int fd = sources[target];
    if (fd == kSpawnDevNull) {
      if (!devNull) devNull.reset(::open("/dev/null", O_RDWR | O_CLOEXEC));
      fd = devNull.get();
    } else if (fd == -1) {
      fd = ::fcntl(target, F_GETFD) >= 0 ? target : -1;
    }
    if (fd < 0) continue;
    fds.push_back(fd);
    roles += static_cast<char>('0' + target);
  }
  fds.push_back(env.get());
  roles += 'e';
  if (outCapture_) {
    fds.push_back(outCapture_.get());
    roles += 'o';
  }
  if (errCapture_) {
    fds.push_back(errCapture_.get());
    roles += 'r';
  }
  iovec iov{roles.data(), roles.size()};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()), 0);
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  ssize_t n;
  do {
    n = ::sendmsg(control_.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(roles.size())) {
    why = "the hand-over failed: " + errnoText("sendmsg");
    return nullptr;
  }
  outCapture_.reset();
  errCapture_.reset();
  process_->setExitHandler(std::move(onExit));
  return std::move(process_);
}

}  // namespace dtrun::agent
