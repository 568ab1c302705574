#include "agent/worker_process.h"

#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/process/v2/environment.hpp>
// Boost 1.81's header-only mode leaves process_environment::on_setup undefined; its definition
// lives here (inline in header-only mode).
#include <boost/process/v2/impl/environment.ipp>
#include <boost/process/v2/posix/default_launcher.hpp>
#include <boost/process/v2/process.hpp>
#include <boost/process/v2/stdio.hpp>

namespace bp = boost::process::v2;

namespace dtrun::agent {

std::string ExitStatus::describe() const {
  if (!signal) return "exit code " + std::to_string(code);
  const char* name = sigabbrev_np(*signal);
  return "signal " + std::to_string(*signal) + (name ? std::string(" (SIG") + name + ")" : "");
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

namespace {

// Runs in the child between fork and exec (async-signal-safe calls only).
struct Fence {
  pid_t parent;

  template <typename Launcher>
  bp::error_code on_exec_setup(Launcher&, const bp::filesystem::path&, const char* const*&) {
    // Its own process group: stop() and forwarded signals reach the worker's whole tree, and a
    // terminal's Ctrl-C reaches only the agent, which forwards it (newest torchrun's behaviour).
    if (::setpgid(0, 0) != 0) return bp::error_code(errno, bp::system_category());
    // Die with the agent. The check after prctl closes the race with an agent that died before.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
      return bp::error_code(errno, bp::system_category());
    if (::getppid() != parent) ::_exit(128 + SIGKILL);
    // The agent ignores SIGPIPE and Asio installs handlers; an ignored disposition and a blocked
    // mask would survive exec, so give the worker a clean slate.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; ++s) {
      if (s != SIGKILL && s != SIGSTOP) ::sigaction(s, &dfl, nullptr);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    return {};
  }
};

}  // namespace

// The exit is watched here rather than with bp::process::async_wait. Boost 1.81's wait does a
// blocking waitpid() once the pidfd looks readable, and epoll can report a stale readiness for a
// reused descriptor number (a closed pidfd still open in a child mid-fork): the agent's only
// thread then blocked until the worker really exited, and an interrupting SIGCHLD turned a clean
// exit into an error. Here readiness is only a hint: waitpid(WNOHANG) decides, and a worker that
// has not exited is simply watched again. Kernels without pidfd_open (< 5.3) fall back to SIGCHLD.
struct WorkerProcess::State : std::enable_shared_from_this<WorkerProcess::State> {
  explicit State(boost::asio::io_context& io) : io(io), killTimer(io) {}

  boost::asio::io_context& io;
  bool spawned = false;
  std::optional<boost::asio::posix::stream_descriptor> pidfd;
  std::optional<boost::asio::signal_set> sigchld;
  int pid = 0;
  std::optional<ExitStatus> exit;
  std::string execError;
  ExitHandler onExit;
  boost::asio::steady_timer killTimer;
  std::vector<std::function<void()>> stopWaiters;
  bool stopping = false;

  void watch() {
    if (exit) return;
    auto self = shared_from_this();
    if (pidfd) {
      pidfd->async_wait(boost::asio::posix::stream_descriptor::wait_read,
                        [self](boost::system::error_code ec) {
                          if (ec != boost::asio::error::operation_aborted) self->poll();
                        });
    } else {
      sigchld->async_wait([self](boost::system::error_code ec, int) {
        if (ec != boost::asio::error::operation_aborted) self->poll();
      });
    }
  }

  void poll() {
    if (exit) return;
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      exited(ExitStatus::fromWaitStatus(status));
    } else if (r == 0 || (r < 0 && errno == EINTR)) {
      watch();  // not yet: a spurious wake-up, or another child's SIGCHLD
    } else {
      // ECHILD: somebody else reaped it. Say so rather than hang the group.
      ExitStatus unknown;
      unknown.code = 255;
      exited(unknown);
    }
  }

  void exited(ExitStatus status) {
    exit = status;
    killTimer.cancel();
    if (onExit) {
      auto handler = std::move(onExit);
      onExit = nullptr;
      handler(status);
    }
    auto waiters = std::move(stopWaiters);
    stopWaiters.clear();
    for (auto& w : waiters) w();
  }
};

WorkerProcess::WorkerProcess(boost::asio::io_context& io, const SpawnSpec& spec, ExitHandler onExit)
    : state_(std::make_shared<State>(io)) {
  state_->onExit = std::move(onExit);
  auto failExec = [this](int code, std::string why) {
    state_->execError = std::move(why);
    ExitStatus s;
    s.code = code;
    boost::asio::post(state_->io, [st = state_, s] { st->exited(s); });
  };
  if (spec.argv.empty()) {
    failExec(127, "empty command");
    return;
  }
  bp::filesystem::path exe = spec.argv[0];
  if (spec.argv[0].find('/') == std::string::npos) {
    exe = bp::environment::find_executable(spec.argv[0]);
    if (exe.empty()) {
      failExec(127, "'" + spec.argv[0] + "' not found in PATH");
      return;
    }
  }
  std::vector<std::string> args(spec.argv.begin() + 1, spec.argv.end());
  bp::error_code ec;
  bp::posix::default_launcher launcher;
  bp::process proc = launcher(
      io.get_executor(), ec, exe, args, bp::process_environment(spec.env),
      bp::process_stdio{
          {}, spec.stdoutFd == -1 ? 1 : spec.stdoutFd, spec.stderrFd == -1 ? 2 : spec.stderrFd},
      Fence{::getpid()});
  if (ec) {
    // tini's convention: 127 for "not found", 126 for "found but cannot be executed".
    failExec(ec.value() == ENOENT ? 127 : 126,
             "cannot execute '" + exe.string() + "': " + ec.message());
    return;
  }
  state_->pid = proc.id();
  state_->spawned = true;
  proc.detach();  // from here on this class waits for, signals and reaps the worker
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, state_->pid, 0));
  if (fd >= 0) {
    state_->pidfd.emplace(io, fd);
  } else {
    state_->sigchld.emplace(io, SIGCHLD);
  }
  // It may have exited already; poll from the io thread, never from inside this constructor
  // (the exit handler must see the WorkerProcess fully built and owned).
  boost::asio::post(io, [st = state_] { st->poll(); });
}

WorkerProcess::~WorkerProcess() {
  if (!state_) return;
  state_->onExit = nullptr;
  state_->stopWaiters.clear();
  if (state_->spawned && !state_->exit) {
    // Last resort (the agent stops workers explicitly before this): kill and reap, so that no
    // zombie is left and the pid is not signalled again after it could be reused.
    ::kill(-state_->pid, SIGKILL);
    ::kill(state_->pid, SIGKILL);
    while (::waitpid(state_->pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    state_->exit = ExitStatus{0, SIGKILL};
  }
  state_->killTimer.cancel();
  if (state_->pidfd) state_->pidfd->close();
  if (state_->sigchld) state_->sigchld->cancel();
}

int WorkerProcess::pid() const { return state_->pid; }

bool WorkerProcess::running() const { return !state_->exit.has_value(); }

const std::optional<ExitStatus>& WorkerProcess::exitStatus() const { return state_->exit; }

const std::string& WorkerProcess::execError() const { return state_->execError; }

void WorkerProcess::signalGroup(int signo) {
  if (state_->exit || state_->pid <= 0) return;
  // The group may outlive its leader (grandchildren); the leader being gone means we stop here,
  // since its pid could be reused once reaped.
  ::kill(-state_->pid, signo);
}

void WorkerProcess::stop(int first, std::chrono::milliseconds grace, std::function<void()> done) {
  if (state_->exit) {
    if (done) boost::asio::post(state_->io, std::move(done));
    return;
  }
  if (done) state_->stopWaiters.push_back(std::move(done));
  // A stop already under way keeps its signal and its deadline: a second SIGTERM would reach a
  // worker that is busy shutting down, and a new timer would stretch its grace.
  if (state_->stopping) return;
  state_->stopping = true;
  signalGroup(first);
  state_->killTimer.expires_after(grace);
  state_->killTimer.async_wait([st = state_](boost::system::error_code ec) {
    if (ec || st->exit) return;
    ::kill(-st->pid, SIGKILL);
  });
}

}  // namespace dtrun::agent
