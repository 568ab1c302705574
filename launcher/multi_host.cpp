#include "launcher/multi_host.h"

#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "agent/log_forwarder.h"
#include "agent/worker_process.h"
#include "common/exit_status.h"
#include "common/fd.h"
#include "common/signals.h"
#include "launcher/logging.h"

namespace dtrun::launcher {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;

constexpr auto kCheckTimeout = 60s;  // ssh's ConnectTimeout is 20 s; a login may be slow
constexpr auto kFailureGrace = 30s;  // after one host fails, for the others to end on their own
constexpr auto kStopSlack = 30s;     // beyond the agents' shutdown timeout, before ssh is ended
constexpr auto kKillAfter = 10s;     // an ssh that outlives SIGTERM by this gets SIGKILL

// The last line of `lines` with something on it, without trailing blanks (ssh ends its own
// messages with "\r\n"); "" when there is none.
std::string lastWords(const std::vector<std::string>& lines) {
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    const auto end = it->find_last_not_of(" \t\r");
    if (end != std::string::npos) return it->substr(0, end + 1);
  }
  return "";
}

// One ssh process, supervised as the agent supervises a worker: agent::WorkerProcess watches its
// exit and stops its process group, and its two output streams go through the agent's
// LogForwarder (prefixed with "HOST: ", whole lines, one write each).
struct Remote {
  std::string host;
  std::unique_ptr<agent::WorkerProcess> ssh;
  UniqueFd stdinWrite;
  agent::LogForwarder::StreamId out = 0;
  agent::LogForwarder::StreamId err = 0;
  int openStreams = 0;
  std::optional<ExitStatus> status;  // once it exited
  std::string lastErrorLine;         // the last non-empty stderr line, for the check's message
  bool running() const { return ssh && ssh->running(); }
  bool finished() const { return status && openStreams == 0; }
};

class MultiHostJob {
 public:
  MultiHostJob(const MultiHostPlan& plan, std::shared_ptr<spdlog::logger> log)
      : plan_(plan), log_(std::move(log)), forwarder_(io_), signals_(io_), timer_(io_) {
    for (int s : kTerminatingSignals) signals_.add(s);
  }

  int run() {
    if (!check()) return 1;
    return runAgents();
  }

 private:
  // Starts `argv` for host i with its output relayed (prefixed) or only kept for the check's
  // message. Throws dtrun::Error when ssh cannot be started.
  void start(std::size_t i, const std::vector<std::string>& argv, bool relay) {
    Remote& r = remotes_[i];
    r.host = plan_.hosts[i].host;
    agent::StreamOptions out;
    out.consoleFd = relay ? STDOUT_FILENO : -1;
    out.prefix = r.host + ": ";
    out.tailLines = 0;
    agent::StreamOptions err = out;
    err.consoleFd = relay ? STDERR_FILENO : -1;
    err.tailLines = agent::kDefaultTailLines;
    auto outStream = forwarder_.open(std::move(out));
    auto errStream = forwarder_.open(std::move(err));
    r.out = outStream.id;
    r.err = errStream.id;
    r.openStreams = 2;
    Pipe in = makePipe("cannot start " + argv.front());
    SpawnSpec spec;
    spec.argv = argv;
    spec.stdinFd = in.read.get();
    spec.stdoutFd = outStream.writeEnd.get();
    spec.stderrFd = errStream.writeEnd.get();
    r.ssh = std::make_unique<agent::WorkerProcess>(io_, spec,
                                                   [this, &r](ExitStatus s) { exited(r, s); });
    if (!r.ssh->execError().empty()) throw Error(r.ssh->execError());
    r.stdinWrite = std::move(in.write);
  }  // the child's ends close here, so the streams end with ssh

  // Phase 1: every host checked at once; false (after one line per bad host) if any is bad.
  bool check() {
    remotes_.clear();
    remotes_.resize(plan_.hosts.size());
    for (std::size_t i = 0; i < plan_.hosts.size(); ++i) start(i, plan_.checkArgv(i), false);
    for (auto& r : remotes_) r.stdinWrite.reset();  // the check reads nothing
    bool timedOut = false;
    bool interrupted = false;
    timer_.expires_after(kCheckTimeout);
    timer_.async_wait([this, &timedOut](boost::system::error_code ec) {
      if (ec) return;
      timedOut = true;
      endConnections(SIGKILL);
    });
    signals_.async_wait([this, &interrupted](boost::system::error_code ec, int signo) {
      if (ec) return;
      log_->warn("{} received while checking the hosts: nothing was started", signalName(signo));
      interrupted = true;
      endConnections(SIGKILL);
    });
    onProgress_ = [this] {
      if (allFinished()) cancelWaits();
    };
    io_.run();
    io_.restart();
    if (interrupted) return false;

    bool ok = true;
    for (const auto& r : remotes_) {
      int code = r.status ? r.status->shellExitCode() : -1;
      if (code == 0) continue;
      ok = false;
      std::string why = r.lastErrorLine.empty() ? "" : ": " + r.lastErrorLine;
      if (timedOut && r.status && r.status->signal) {
        log_->error("host {} did not answer over ssh within {} s; nothing was started", r.host,
                    kCheckTimeout.count());
      } else if (code == 3) {
        log_->error(
            "host {}: no directory {} there (every agent runs in the launching shell's "
            "working directory); nothing was started",
            r.host, plan_.workDir.string());
      } else if (code == 4) {
        log_->error(
            "host {}: no executable dtrun at {} there (give --remote-dtrun PATH); "
            "nothing was started",
            r.host, plan_.remoteDtrun);
      } else if (code == 255) {
        log_->error("host {} cannot be reached with ssh{}; nothing was started", r.host, why);
      } else {
        log_->error("host {}: the check over ssh failed with exit code {}{}; nothing was started",
                    r.host, code, why);
      }
    }
    return ok;
  }

  // Phases 2 and 3: every agent, until all ended; the job's exit code.
  int runAgents() {
    remotes_.clear();
    remotes_.resize(plan_.hosts.size());
    for (std::size_t i = 0; i < plan_.hosts.size(); ++i) {
      log_->info("host {}: node {} of {}, {} worker(s): {}", plan_.hosts[i].host, i,
                 plan_.hosts.size(), plan_.hosts[i].slots.size(), plan_.remoteCommand(i));
      start(i, plan_.sshArgv(i), true);
    }
    onProgress_ = [this] {
      if (allFinished()) cancelWaits();
    };
    phaseOver_ = false;
    running_ = true;
    waitSignal();
    io_.run();
    return jobCode_.value_or(0);
  }

  // Ends a phase: nothing is waited for any more, so io_.run() returns.
  void cancelWaits() {
    phaseOver_ = true;
    timer_.cancel();
    signals_.cancel();
  }

  void waitSignal() {
    signals_.async_wait([this](boost::system::error_code ec, int signo) {
      if (ec) return;
      if (phaseOver_) return;
      if (++signalsSeen_ == 1) {
        log_->warn("{} received: stopping the job on every host", signalName(signo));
        stopAll(plan_.shutdownTimeout + kStopSlack);
      } else {
        log_->warn("{} received again: ending the ssh connections now", signalName(signo));
        endConnections(SIGTERM);
      }
      waitSignal();
    });
  }

  // Closes every ssh's standard input: each agent stops as on SIGTERM. If they are not all gone
  // after `patience`, the connections are ended: SIGTERM, and SIGKILL kKillAfter later.
  void stopAll(std::chrono::milliseconds patience) {
    stopping_ = true;
    for (auto& r : remotes_) r.stdinWrite.reset();
    timer_.expires_after(patience);
    timer_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      log_->warn(
          "agents still running {} s after the stop: ending the ssh connections",
          std::chrono::ceil<std::chrono::seconds>(plan_.shutdownTimeout + kStopSlack).count());
      for (auto& r : remotes_) {
        if (r.running()) r.ssh->stop(SIGTERM, kKillAfter, nullptr);
      }
    });
  }

  // Signals every ssh still running (its whole process group).
  void endConnections(int signo) {
    for (auto& r : remotes_) {
      if (r.running()) r.ssh->signalGroup(signo);
    }
  }

  // ssh ended: what its streams hold is read (never waiting for EOF, which a process ssh left
  // behind could hold off), and the job's exit code is decided.
  void exited(Remote& r, ExitStatus status) {
    r.status = status;
    auto ended = [this, &r] {
      --r.openStreams;
      progress();
    };
    forwarder_.drainAndClose(r.out, [ended](std::vector<std::string>) { ended(); });
    forwarder_.drainAndClose(r.err, [&r, ended](std::vector<std::string> tail) {
      r.lastErrorLine = lastWords(tail);
      ended();
    });
    const int code = status.shellExitCode();
    if (running_ && code != 0 && !jobCode_) {
      jobCode_ = (code == 255 || status.signal) ? 1 : code;
      if (code == 255) log_->error("host {}: ssh failed (exit code 255)", r.host);
      if (!stopping_ && !allExited()) {
        log_->warn(
            "host {} failed (exit code {}); the other hosts are stopped unless they end "
            "within {} s",
            r.host, code, kFailureGrace.count());
        stopping_ = true;  // one stop at a time; a signal still ends the connections
        timer_.expires_after(kFailureGrace);
        timer_.async_wait([this](boost::system::error_code ec) {
          if (!ec) stopAll(plan_.shutdownTimeout + kStopSlack);
        });
      }
    }
    progress();
  }

  bool allExited() const {
    for (const auto& r : remotes_) {
      if (!r.status) return false;
    }
    return true;
  }
  bool allFinished() const {
    for (const auto& r : remotes_) {
      if (!r.finished()) return false;
    }
    return true;
  }
  void progress() {
    if (onProgress_) onProgress_();
  }

  const MultiHostPlan& plan_;
  std::shared_ptr<spdlog::logger> log_;
  asio::io_context io_{1};
  agent::LogForwarder forwarder_;
  asio::signal_set signals_;
  asio::steady_timer timer_;
  std::vector<Remote> remotes_;
  std::function<void()> onProgress_;
  std::optional<int> jobCode_;
  bool stopping_ = false;
  int signalsSeen_ = 0;
  bool phaseOver_ = false;
  bool running_ = false;  // the agents run (not the check)
};

}  // namespace

int runMultiHost(const MultiHostPlan& plan, const std::string& logLevel) {
  auto log = makeLogger("hosts", logLevel);
  try {
    MultiHostJob job(plan, log);
    return job.run();
  } catch (const std::exception& e) {
    log->error("{}", e.what());
    return 1;
  }
}

}  // namespace dtrun::launcher
