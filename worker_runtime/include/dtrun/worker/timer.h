// Deadlines for native workers on the launcher's file-timer watchdog: the protocol of torch's
// FileTimerClient (torch.distributed.elastic.timer), so the same worker runs under dtrun
// (--file-timer, or TORCHELASTIC_ENABLE_FILE_TIMER=1) and under torchrun.
//
//   dtrun::worker::TimerScope scope("step", std::chrono::seconds(60));   // RAII
//   train_step();                                 // killed (SIGKILL) if still here after 60 s
//
// The launcher serves a FIFO named by TORCHELASTIC_TIMER_FILE. Each acquire or release opens it
// without blocking, writes one JSON line of at most PIPE_BUF bytes (atomic among writers) and
// closes it:
//
//   {"version": 1, "pid": 4242, "scope_id": "step", "expiration_time": 1700000060.5,
//    "signal": 9}
//
// expiration_time is wall-clock seconds since the epoch; -1 releases the scope. A process that
// overstays a deadline gets the signal it asked for (SIGKILL by default, as torch; <= 0 only
// reports the hang), and dtrun signals the worker's whole process group and restarts the round.
#pragma once

#include <signal.h>

#include <chrono>
#include <string>
#include <string_view>

namespace dtrun::worker {

/// The variable that names the FIFO.
inline constexpr const char* kTimerFileVariable = "TORCHELASTIC_TIMER_FILE";

/// torch's FileTimerRequest.to_json() for `pid` (no trailing newline): json.dumps's spacing,
/// floats as Python's repr, non-ASCII escaped. A release is expiration -1 with signal 0. Pure.
std::string formatTimerRequest(int pid, std::string_view scopeId, double expirationTime,
                               int signal);

class TimerClient {
 public:
  /// A client of the FIFO at `path`. `signal` is what the launcher sends the process when one of
  /// its deadlines passes (SIGKILL, torch's default; <= 0: report the hang, do not signal).
  explicit TimerClient(std::string path, int signal = SIGKILL);
  /// The FIFO named by TORCHELASTIC_TIMER_FILE. Throws ConfigError when it is unset or empty
  /// (the launcher runs no file timer).
  static TimerClient fromEnvironment(int signal = SIGKILL);

  /// Arms `scope` of this process to expire at `expiration` (re-arming replaces the deadline).
  /// Never waits for the server: ConnectionError when no server reads the FIFO (torch's
  /// BrokenPipeError), TimeoutError when its buffer stayed full for a second, ConfigError when
  /// the request would exceed PIPE_BUF. Any thread.
  void acquire(std::string_view scope, std::chrono::system_clock::time_point expiration) const;
  /// Releases `scope` (nothing happens when it is not armed). Errors as acquire().
  void release(std::string_view scope) const;

  const std::string& path() const { return path_; }
  int signal() const { return signal_; }

 private:
  void send(const std::string& line) const;

  std::string path_;
  int signal_;
};

/// A deadline over a block (torch's `with expires(after=...)`): armed by the constructor,
/// released by the destructor. Move-only.
class TimerScope {
 public:
  /// Arms `scope` to expire `after` from now, on the client of TORCHELASTIC_TIMER_FILE with
  /// SIGKILL (made once per process). Throws as TimerClient::fromEnvironment and acquire().
  TimerScope(std::string scope, std::chrono::duration<double> after);
  /// The same, named "<file>#<line>" after the caller, as torch names a scope it is not given.
  /// (The caller's place comes from __builtin_FILE/__builtin_LINE, which GCC and Clang both
  /// have: Clang 14 with libstdc++ 12 has no std::source_location.)
  explicit TimerScope(std::chrono::duration<double> after, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE());
  /// Arms `scope` on `client`, which must outlive this object.
  TimerScope(const TimerClient& client, std::string scope, std::chrono::duration<double> after);
  /// Releases the scope. Never throws: a release that fails (the launcher is gone) is reported
  /// on stderr, and the deadline then stays armed where a launcher still serves it.
  ~TimerScope();
  TimerScope(TimerScope&& other) noexcept;
  TimerScope& operator=(TimerScope&&) = delete;
  TimerScope(const TimerScope&) = delete;
  TimerScope& operator=(const TimerScope&) = delete;

  const std::string& scope() const { return scope_; }

 private:
  const TimerClient* client_;
  std::string scope_;
};

}  // namespace dtrun::worker
