// FileTimerServer: torch's file-based watchdog (torch.distributed.elastic.timer.FileTimerServer)
// served on the agent's io_context, for workers that arm deadlines with FileTimerClient
// (`with timer.expires(after=60): step()`) or dtrun's worker_runtime client.
//
// Wire format (torch 1.13 and later): a FIFO at TORCHELASTIC_TIMER_FILE; a client opens it
// O_WRONLY|O_NONBLOCK, writes one JSON object and '\n' in one write(2) (at most PIPE_BUF bytes,
// so atomic), and closes it:
//
//   {"version": 1, "pid": 4242, "scope_id": "train.py#12", "expiration_time": 1700000060.5,
//    "signal": 9}
//
// expiration_time is wall-clock seconds since the epoch (time.time() + after); a negative one
// releases the scope. The timers are keyed by (pid, scope_id): a second acquire of a scope
// replaces its deadline. When deadlines pass, the timers of each pid are taken in deadline order
// and the first with a signal > 0 is the one acted on (none: the pid is not reaped); every timer
// of an expired pid is then dropped, as torch does.
//
// Differences from torch's server, on purpose:
//   - no watchdog thread and no polling: the FIFO is read asynchronously (opened O_RDWR, so the
//     last writer closing never gives EOF) and one steady_timer waits for the earliest deadline;
//     an expired deadline is acted on at once instead of within max_interval;
//   - deadlines are converted to the steady clock when they arrive: a wall-clock step later on
//     neither fires nor delays them;
//   - only the job's processes count: `lookup` says which worker a pid belongs to (the worker,
//     a descendant, or a member of its process group); other requests are ignored and counted;
//   - a malformed line is counted and logged (the first at once, then a count at most every
//     10 s), never stops the server and never costs the other requests, as a torch batch with
//     one bad line does; a request glued to garbage a writer left without '\n' is still read;
//   - the server does not kill: it reports each expiry to `onExpired`, and the agent signals the
//     worker's whole process group and records the hang.
//
//   start() --> serving --(line)--> acquire/release --> deadline timer re-armed
//                  |--(earliest deadline passes)--> onExpired(pid's first timer with a signal)
//                  +--stop() / destructor: FIFO closed and removed
#pragma once

#include <spdlog/logger.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtrun::agent {

/// One request line, as torch's FileTimerRequest holds it.
struct FileTimerRequest {
  int version = 1;
  int pid = 0;
  std::string scopeId;
  double expirationTime = 0;  ///< seconds since the epoch; negative releases the scope
  int signal = 0;             ///< <= 0: the scope expires without a kill

  bool release() const { return expirationTime < 0; }
};

/// Parses one line (without its '\n'): a JSON object with pid (integer > 0), scope_id (string),
/// expiration_time (number), signal (integer, at most SIGRTMAX) and an optional version (1).
/// Throws ProtocolError saying what is wrong. Pure.
FileTimerRequest parseFileTimerRequest(std::string_view line);

/// A deadline that passed, as the agent needs it for the kill and the hang report.
struct TimerExpiry {
  int pid = 0;    ///< the process that armed the timer
  int owner = 0;  ///< what the lookup said it belongs to (the worker's local rank)
  std::string scopeId;
  std::chrono::system_clock::time_point deadline;  ///< the expiration_time it asked for
  std::chrono::milliseconds overstay{0};           ///< how far past the deadline it was seen
  int signal = 0;  ///< the signal it asked for; <= 0 when none of its expired timers had one
};

class FileTimerServer {
 public:
  /// Which worker `pid` belongs to (see process_tree.h), or nullopt for a stranger. Called on
  /// the io thread for every request and again before an expiry is reported.
  using OwnerLookup = std::function<std::optional<int>(int pid)>;
  /// Runs on the io thread once per expired pid; may call clear() and clearOwner().
  using ExpiryHandler = std::function<void(const TimerExpiry&)>;

  struct Stats {
    std::uint64_t requests = 0;   ///< well-formed lines from the job's processes
    std::uint64_t malformed = 0;  ///< lines that were not a request (salvaged ones included)
    std::uint64_t ignored = 0;    ///< requests from processes outside the job
    std::uint64_t expired = 0;    ///< expiries reported to the handler
  };

  /// `path`: the FIFO to serve ("" = a private one in a fresh 0700 directory under $TMPDIR).
  /// Nothing happens until start(). `io` must be run by one thread; every method is for it.
  FileTimerServer(boost::asio::io_context& io, std::string path, OwnerLookup lookup,
                  ExpiryHandler onExpired, std::shared_ptr<spdlog::logger> log);
  /// stop().
  ~FileTimerServer();
  FileTimerServer(const FileTimerServer&) = delete;
  FileTimerServer& operator=(const FileTimerServer&) = delete;

  /// Creates the FIFO (0600) and starts reading it. An existing FIFO nobody reads (a killed
  /// agent's) is replaced; a FIFO another process serves, or a path that is not a FIFO, is
  /// refused with ConfigError naming the path (torch would delete whatever is there). Blocking
  /// (local file system).
  void start();
  /// Stops reading, drops every timer, closes and removes the FIFO (and the private directory).
  /// Idempotent.
  void stop();

  /// The FIFO's path (for TORCHELASTIC_TIMER_FILE); valid after start().
  const std::string& path() const { return path_; }
  /// Drops every timer (the worker group is gone).
  void clear();
  /// Drops the timers of every process of worker `owner` (it exited).
  void clearOwner(int owner);
  /// Timers armed now.
  std::size_t armed() const { return timers_.size(); }
  const Stats& stats() const { return stats_; }
  /// When the last request from the job arrived (stall detection counts it as activity).
  std::optional<std::chrono::steady_clock::time_point> lastRequest() const { return lastRequest_; }

 private:
  struct Timer {
    FileTimerRequest request;
    int owner = 0;
    std::chrono::system_clock::time_point deadline;
    std::chrono::steady_clock::time_point due;
  };
  using Key = std::pair<int, std::string>;  // (pid, scope_id), torch's key

  void createFifo();
  void startRead();
  void onRead(const boost::system::error_code& ec, std::size_t n);
  void onLine(std::string_view line);
  void apply(const FileTimerRequest& request);
  void rearm();
  void onDeadline();
  void malformed(std::string_view line, const std::string& why);
  void ignored(int pid);

  boost::asio::io_context& io_;
  std::string path_;
  std::string privateDir_;  // set when path_ is our own
  OwnerLookup lookup_;
  ExpiryHandler onExpired_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> fifo_;
  boost::asio::steady_timer deadline_;
  boost::asio::steady_timer retry_;
  std::vector<char> buffer_;
  std::string pending_;      // the current line's bytes so far
  bool discarding_ = false;  // the current line outgrew the limit: skip to its '\n'
  std::map<Key, Timer> timers_;
  std::optional<std::chrono::steady_clock::time_point> armedFor_;
  std::optional<std::chrono::steady_clock::time_point> lastRequest_;
  Stats stats_;
  // Rate-limited warnings: counts not yet logged, and when the last line was logged.
  std::uint64_t malformedUnlogged_ = 0;
  std::uint64_t ignoredUnlogged_ = 0;
  std::optional<std::chrono::steady_clock::time_point> malformedLogged_;
  std::optional<std::chrono::steady_clock::time_point> ignoredLogged_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace dtrun::agent
