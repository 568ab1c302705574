#include "agent/worker_process.h"

#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>

#include "agent/process_tree.h"
#include "common/duration_text.h"
#include "common/signals.h"

namespace dtrun::agent {
namespace {

std::string stateOf(int pid) {
  auto st = readProcStat(pid);
  return st ? describeProcState(st->state) : "gone";
}

}  // namespace

// Readiness of the pidfd is only a hint: epoll can report a stale readiness for a reused
// descriptor number (a closed pidfd still open in a child mid-fork), so waitpid(WNOHANG) decides,
// and a worker that has not exited is simply watched again; a blocking waitpid() here would stall
// the agent's only thread. Kernels without pidfd_open (< 5.3) fall back to SIGCHLD.
//
// A worker given up on (abandoned) counts as exited, but its pidfd stays watched: when it does
// exit, it is reaped here (or by the agent's sweep of adopted children, whichever comes first).
struct WorkerProcess::State : std::enable_shared_from_this<WorkerProcess::State> {
  State(boost::asio::io_context& io, std::shared_ptr<spdlog::logger> log, std::string name)
      : io(io), log(std::move(log)), name(std::move(name)), killTimer(io) {}

  boost::asio::io_context& io;
  std::shared_ptr<spdlog::logger> log;
  std::string name;
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
  bool abandoned = false;
  bool reaped = false;

  void watch() {
    if (reaped) return;
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
    if (reaped) return;
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR)) {
      watch();  // not yet: a spurious wake-up, or another child's SIGCHLD
      return;
    }
    reaped = true;
    if (abandoned) {
      if (log) log->info("agent: {} (pid {}), given up on earlier, has exited", name, pid);
      return;
    }
    if (r == pid) {
      exited(ExitStatus::fromWaitStatus(status));
    } else {
      // ECHILD: somebody else reaped it. Say so rather than hang the group.
      ExitStatus unknown;
      unknown.code = 255;
      exited(unknown);
    }
  }

  // The stop's deadlines: `first` was sent; SIGKILL after `grace`, given up on `grace` later.
  void escalate(int first, std::chrono::milliseconds grace) {
    if (first == SIGKILL) {
      giveUpAfter(grace);
      return;
    }
    killTimer.expires_after(grace);
    killTimer.async_wait([self = shared_from_this(), first, grace](boost::system::error_code ec) {
      if (ec || self->exit) return;
      if (self->log) {
        self->log->warn(
            "agent: {} (pid {}, {}) did not exit within the {} grace after {}; "
            "sending SIGKILL",
            self->name, self->pid, stateOf(self->pid), secondsText(grace), signalName(first));
      }
      // The leader too: a worker that left its process group (setsid) is not reached by -pid.
      ::kill(-self->pid, SIGKILL);
      ::kill(self->pid, SIGKILL);
      self->giveUpAfter(grace);
    });
  }

  void giveUpAfter(std::chrono::milliseconds grace) {
    killTimer.expires_after(grace);
    killTimer.async_wait([self = shared_from_this(), grace](boost::system::error_code ec) {
      if (ec || self->exit) return;
      if (self->log) {
        self->log->error(
            "agent: {} (pid {}, {}) has not exited {} after SIGKILL; going on "
            "without it (it is reaped if it ever exits)",
            self->name, self->pid, stateOf(self->pid), secondsText(grace));
      }
      self->abandoned = true;
      self->exited(ExitStatus{0, SIGKILL});
    });
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

WorkerProcess::WorkerProcess(boost::asio::io_context& io, const SpawnSpec& spec, ExitHandler onExit,
                             std::shared_ptr<spdlog::logger> log, std::string name)
    : state_(std::make_shared<State>(io, std::move(log), std::move(name))) {
  state_->onExit = std::move(onExit);
  auto failExec = [this](int code, std::string why) {
    state_->execError = std::move(why);
    ExitStatus s;
    s.code = code;
    boost::asio::post(state_->io, [st = state_, s] { st->exited(s); });
  };
  SpawnSpec fenced = spec;
  fenced.ownProcessGroup = true;
  fenced.parentDeathSignal = SIGKILL;
  try {
    state_->pid = spawnProcess(fenced);
  } catch (const SpawnError& e) {
    failExec(e.exitCode(), e.what());
    return;
  }
  state_->spawned = true;
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
    // zombie is left and the pid is not signalled again after it could be reused. Bounded: a
    // process SIGKILL cannot end (state D) must not hang the agent's exit.
    ::kill(-state_->pid, SIGKILL);
    ::kill(state_->pid, SIGKILL);
    state_->exit = ExitStatus{0, SIGKILL};
    const auto deadline = std::chrono::steady_clock::now() + kDestroyBound;
    for (;;) {
      const pid_t r = ::waitpid(state_->pid, nullptr, WNOHANG);
      if (r == state_->pid || (r < 0 && errno != EINTR)) break;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        if (state_->log) {
          state_->log->error("agent: {} (pid {}, {}) has not exited {} after SIGKILL; leaving it",
                             state_->name, state_->pid, stateOf(state_->pid),
                             secondsText(kDestroyBound));
        }
        break;
      }
      if (state_->pidfd) {
        pollfd p{state_->pidfd->native_handle(), POLLIN, 0};
        ::poll(&p, 1, static_cast<int>(std::min<long>(left.count(), 100)));
      } else {
        ::usleep(10000);  // no pidfd (kernel < 5.3): nothing to wait on but time
      }
    }
  }
  state_->killTimer.cancel();
  if (state_->pidfd) state_->pidfd->close();
  if (state_->sigchld) state_->sigchld->cancel();
}

int WorkerProcess::pid() const { return state_->pid; }

bool WorkerProcess::running() const { return !state_->exit.has_value(); }

const std::optional<ExitStatus>& WorkerProcess::exitStatus() const { return state_->exit; }

const std::string& WorkerProcess::execError() const { return state_->execError; }

void WorkerProcess::setExitHandler(ExitHandler onExit) {
  if (!state_->exit) state_->onExit = std::move(onExit);
}

bool WorkerProcess::abandoned() const { return state_->abandoned; }

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
  // A stopped process acts on nothing but SIGKILL and SIGCONT: without this a SIGSTOPped worker
  // (a debugger, a scheduler's pause) would hold the stop for the whole grace.
  if (first != SIGKILL && first != SIGCONT) signalGroup(SIGCONT);
  state_->escalate(first, grace);
}

}  // namespace dtrun::agent
