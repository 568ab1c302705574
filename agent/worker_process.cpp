#include "agent/worker_process.h"

#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
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

struct WorkerProcess::State {
  explicit State(boost::asio::io_context& io) : io(io), killTimer(io) {}

  boost::asio::io_context& io;
  std::optional<bp::process> proc;
  int pid = 0;
  std::optional<ExitStatus> exit;
  std::string execError;
  ExitHandler onExit;
  boost::asio::steady_timer killTimer;
  std::vector<std::function<void()>> stopWaiters;
  bool stopping = false;

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
  state_->proc.emplace(std::move(proc));
  state_->proc->async_wait([st = state_](bp::error_code e, int) {
    ExitStatus s;
    if (e) {
      // The pidfd wait failed (should not happen); report it rather than hang the group.
      s.code = 255;
    } else {
      s = ExitStatus::fromWaitStatus(st->proc->native_exit_code());
    }
    st->exited(s);
  });
}

WorkerProcess::~WorkerProcess() {
  if (!state_) return;
  state_->onExit = nullptr;
  if (state_->proc && !state_->exit) {
    ::kill(-state_->pid, SIGKILL);
    // bp::process's destructor then reaps it (terminate_if_running waits for the pid).
  }
  state_->killTimer.cancel();
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
