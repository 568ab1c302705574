// Log text from untrusted bytes, and warnings that a flood cannot multiply.
//
// escapeForLog() makes a key or value safe to put in one log line: quoted, control characters
// and non-ASCII bytes as \xNN, long ones cut with their length said. WarningLimiter lets a few
// lines of each kind through per window and counts the rest, so a client sending a million bad
// requests costs a few lines and one count ("... 31412 more in the last 5 s"); docs/store.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrun {

/// A steady-clock deadline as this machine's wall clock, for people: "12:34:56 (in 42 s)".
std::string wallClockText(std::chrono::steady_clock::time_point t);

/// `bytes` quoted for a log line: printable ASCII as is, \" \\ \n \r \t, other bytes \xNN; past
/// `maxBytes` the rest is cut and the total length said.
std::string escapeForLog(std::string_view bytes, std::size_t maxBytes = 120);

class WarningLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  /// Up to `burst` lines of one kind per `window`.
  explicit WarningLimiter(std::size_t burst = 5,
                          std::chrono::milliseconds window = std::chrono::seconds(5))
      : burst_(burst), window_(window) {}

  /// Whether a line of `kind` may be written at `now`; false counts it as suppressed. When this
  /// starts a new window after one with lines suppressed, `summary` (if given) receives the
  /// line that counts them, to be written first.
  bool allow(const std::string& kind, Clock::time_point now = Clock::now(),
             std::string* summary = nullptr);
  /// For each kind whose window ended with lines suppressed: "<kind>: ... N more in the last
  /// 5 s", and the count starts again. Call from a timer (nextFlush() says when).
  std::vector<std::string> flush(Clock::time_point now = Clock::now());
  /// When flush() next has something to say, if ever.
  std::optional<Clock::time_point> nextFlush() const;

 private:
  struct Kind {
    Clock::time_point windowStart;
    std::size_t lines = 0;
    std::uint64_t suppressed = 0;
  };
  std::size_t burst_;
  std::chrono::milliseconds window_;
  std::map<std::string, Kind> kinds_;
};

}  // namespace dtrun
