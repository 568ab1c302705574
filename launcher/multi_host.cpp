#include "launcher/multi_host.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "launcher/child_process.h"
#include "launcher/logging.h"

namespace dtrun::launcher {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;

constexpr auto kCheckTimeout = 60s;  // ssh's ConnectTimeout is 20 s; a login may be slow
constexpr auto kFailureGrace = 30s;  // after one host fails, for the others to end on their own
constexpr auto kStopSlack = 30s;     // beyond the agents' shutdown timeout, before ssh is ended
constexpr auto kKillAfter = 10s;     // an ssh that outlives SIGTERM by this gets SIGKILL
constexpr std::size_t kMaxLine = 64 * 1024;  // a longer line is cut, not buffered forever

void writeAll(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a closed terminal or pipe: the job goes on without its output
    done += static_cast<std::size_t>(n);
  }
}

// One pipe from ssh, read to its end: every whole line is written to `outFd` as one write of
// "PREFIX: line\n" (or kept in `capture` when there is no outFd); a last line without a newline
// is completed at the end.
class LineRelay {
 public:
  LineRelay(asio::io_context& io, UniqueFd fd, std::string prefix, int outFd,
            std::function<void(const std::string&)> onLine, std::function<void()> onEnd)
      : pipe_(io, fd.release()),
        prefix_(std::move(prefix)),
        outFd_(outFd),
        onLine_(std::move(onLine)),
        onEnd_(std::move(onEnd)) {
    read();
  }

 private:
  void read() {
    pipe_.async_read_some(asio::buffer(buf_), [this](boost::system::error_code ec, std::size_t n) {
      pending_.append(buf_.data(), n);
      for (std::size_t nl; (nl = pending_.find('\n')) != std::string::npos;) {
        emit(pending_.substr(0, nl));
        pending_.erase(0, nl + 1);
      }
      if (pending_.size() >= kMaxLine) emit(std::exchange(pending_, {}));
      if (!ec) return read();
      if (!pending_.empty()) emit(std::exchange(pending_, {}));
      pipe_.close();
      onEnd_();
    });
  }

  void emit(const std::string& line) {
    if (outFd_ >= 0) writeAll(outFd_, prefix_ + line + "\n");
    if (onLine_) onLine_(line);
  }

  asio::posix::stream_descriptor pipe_;
  std::string prefix_;
  int outFd_;
  std::function<void(const std::string&)> onLine_;
  std::function<void()> onEnd_;
  std::array<char, 4096> buf_{};
  std::string pending_;
};

// One ssh process and its three pipes.
struct Remote {
  std::string host;
  int pid = 0;
  UniqueFd stdinWrite;
  std::unique_ptr<LineRelay> out;
  std::unique_ptr<LineRelay> err;
  int openStreams = 0;
  std::optional<int> status;  // waitpid status once it exited
  std::string lastErrorLine;  // the last non-empty stderr line, for the check's message
  bool finished() const { return status && openStreams == 0; }
};

class MultiHostJob {
 public:
  MultiHostJob(const MultiHostPlan& plan, std::shared_ptr<spdlog::logger> log)
      : plan_(plan), log_(std::move(log)), sigchld_(io_, SIGCHLD), signals_(io_), timer_(io_) {
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) signals_.add(s);
    watchChildren();
  }

  int run() {
    if (!check()) return 1;
    return runAgents();
  }

 private:
  // Starts `argv` for host i with its output relayed (prefixed) or only captured.
  void start(std::size_t i, const std::vector<std::string>& argv, bool relay) {
    Remote& r = remotes_[i];
    r.host = plan_.hosts[i].host;
    ChildPipes pipes = startWithPipes(argv);
    r.pid = pipes.pid;
    r.stdinWrite = std::move(pipes.stdinWrite);
    r.openStreams = 2;
    const std::string prefix = r.host + ": ";
    auto ended = [this, &r] {
      --r.openStreams;
      progress();
    };
    r.out = std::make_unique<LineRelay>(io_, std::move(pipes.stdoutRead), prefix,
                                        relay ? STDOUT_FILENO : -1, nullptr, ended);
    r.err = std::make_unique<LineRelay>(
        io_, std::move(pipes.stderrRead), prefix, relay ? STDERR_FILENO : -1,
        [&r](const std::string& line) {
          // ssh ends its own messages with "\r\n".
          auto end = line.find_last_not_of(" \t\r");
          if (end != std::string::npos) r.lastErrorLine = line.substr(0, end + 1);
        },
        ended);
  }

  void watchChildren() {
    sigchld_.async_wait([this](boost::system::error_code ec, int) {
      if (ec) return;
      for (auto& r : remotes_) {
        int status = 0;
        if (r.pid > 0 && !r.status && ::waitpid(r.pid, &status, WNOHANG) == r.pid) {
          r.status = status;
          exited(r);
        }
      }
      if (!phaseOver_) watchChildren();  // exited() may just have ended the phase
    });
  }

  static int exitCode(int status) {
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

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
      log_->warn("{} received while checking the hosts: nothing was started", sigabbrev(signo));
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
      int code = r.status ? exitCode(*r.status) : -1;
      if (code == 0) continue;
      ok = false;
      std::string why = r.lastErrorLine.empty() ? "" : ": " + r.lastErrorLine;
      if (timedOut && WIFSIGNALED(r.status.value_or(0))) {
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
    watchChildren();
    waitSignal();
    io_.run();
    return jobCode_.value_or(0);
  }

  // Ends a phase: nothing is waited for any more, so io_.run() returns.
  void cancelWaits() {
    phaseOver_ = true;
    timer_.cancel();
    signals_.cancel();
    sigchld_.cancel();
  }

  void waitSignal() {
    signals_.async_wait([this](boost::system::error_code ec, int signo) {
      if (ec) return;
      if (phaseOver_) return;
      if (++signalsSeen_ == 1) {
        log_->warn("{} received: stopping the job on every host", sigabbrev(signo));
        stopAll(plan_.shutdownTimeout + kStopSlack);
      } else {
        log_->warn("{} received again: ending the ssh connections now", sigabbrev(signo));
        endConnections(SIGTERM);
      }
      waitSignal();
    });
  }

  static std::string sigabbrev(int signo) {
    const char* name = ::sigabbrev_np(signo);
    return name ? std::string("SIG") + name : "signal " + std::to_string(signo);
  }

  // Closes every ssh's standard input: each agent stops as on SIGTERM. If they are not all gone
  // after `patience`, the connections are ended.
  void stopAll(std::chrono::milliseconds patience) {
    stopping_ = true;
    for (auto& r : remotes_) r.stdinWrite.reset();
    timer_.expires_after(patience);
    timer_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      log_->warn(
          "agents still running {} s after the stop: ending the ssh connections",
          std::chrono::ceil<std::chrono::seconds>(plan_.shutdownTimeout + kStopSlack).count());
      endConnections(SIGTERM);
      timer_.expires_after(kKillAfter);
      timer_.async_wait([this](boost::system::error_code ec) {
        if (!ec) endConnections(SIGKILL);
      });
    });
  }

  // Signals every ssh still running (its whole process group).
  void endConnections(int signo) {
    for (auto& r : remotes_) {
      if (!r.status && r.pid > 0) ::kill(-r.pid, signo);
    }
  }

  void exited(Remote& r) {
    int code = exitCode(*r.status);
    if (running_ && code != 0 && !jobCode_) {
      jobCode_ = (code == 255 || WIFSIGNALED(*r.status)) ? 1 : code;
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
  asio::signal_set sigchld_;
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
