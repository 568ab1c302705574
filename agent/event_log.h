// EventLog: --event-log FILE, one JSON object per line per lifecycle event.
//
//   {"event": "worker_exited", "time": "2026-11-30T04:14:28.123Z", "ts": 1796012068.123, ...}
//
// "event", "time" (UTC, ISO 8601, milliseconds) and "ts" (epoch seconds) come first, then the
// agent's "host" and "agent_pid" (when it set them), then the caller's fields. Each line is
// appended with a single write(2) on an O_APPEND descriptor, so several agents (or restarts) may
// share one file and lines never interleave. Event names in use: rendezvous_started,
// rendezvous_done, worker_started, worker_exited, restart_decided, shutdown, worker_hung,
// timer_expired, worker_group_stalled, metrics_listening, job_ended; with --prewarm also
// standby_started, standby_ready, prewarm_cost, standby_exited, standby_stopped,
// prewarm_fallback, prewarm_disabled (docs/agent.md, "Warm starts").
//
// With a console descriptor (--event-log-handler console, torchrun's console handler), every
// line also goes there, one write(2) each, so lines from several processes never interleave.
#pragma once

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace dtrun::agent {

class EventLog {
 public:
  /// A disabled log: record() does nothing and costs nothing.
  EventLog() = default;
  /// Opens `path` for appending (created 0644 if missing); "" = no file. Every line also goes to
  /// `consoleFd` when it is >= 0 (not owned). Blocking; throws ConfigError naming the file when
  /// it cannot be opened.
  explicit EventLog(const std::string& path, int consoleFd = -1);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;
  EventLog(EventLog&& other) noexcept;
  EventLog& operator=(EventLog&& other) noexcept;

  /// True when a file is open or a console is given.
  bool enabled() const { return fd_ >= 0 || consoleFd_ >= 0; }
  /// Every record, written or not, is also handed to `observer` first (the agent's metrics and
  /// summary are folded from the records, so they cannot drift from the log).
  using Observer = std::function<void(std::string_view event, const nlohmann::json& fields,
                                      std::chrono::system_clock::time_point when)>;
  void setObserver(Observer observer) { observer_ = std::move(observer); }
  /// Fields every line carries after "ts" (the agent's host and pid, so that the lines of
  /// several agents sharing one file can be told apart); an object, or null for none.
  void setSource(nlohmann::json source) { source_ = std::move(source); }
  /// Appends one line for `event` now. `fields` must be an object (anything else is recorded
  /// under "value"); its keys "event", "time" and "ts" are ignored. One write(2) to a local file
  /// (blocking); owner's thread only. Never throws: returns false when the line was not
  /// written (disabled, or the write to the file, else to the console, failed).
  bool record(std::string_view event, const nlohmann::json& fields = nlohmann::json::object());
  /// The same at a given time (tests, replays).
  bool record(std::string_view event, const nlohmann::json& fields,
              std::chrono::system_clock::time_point when);

  /// The line record() would write for this event, without the trailing newline. Pure.
  static std::string formatLine(std::string_view event, const nlohmann::json& fields,
                                std::chrono::system_clock::time_point when,
                                const nlohmann::json& source = nullptr);

 private:
  int fd_ = -1;
  int consoleFd_ = -1;
  std::string path_;
  Observer observer_;
  nlohmann::json source_;
};

/// "2026-11-30T04:14:28.123Z": UTC, millisecond precision. Pure.
std::string formatUtcIso8601Ms(std::chrono::system_clock::time_point when);

}  // namespace dtrun::agent
