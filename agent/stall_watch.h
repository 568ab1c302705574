// StallWatch: --stall-timeout. A worker group that shows no sign of life for that long (no
// output, no file-timer request, no write to its redirected log files) is reported once as
// stalled; the policy decides what that means in the state it is in (agent/policy.h).
//
// The watch wakes only when the timeout could have passed: at the group's start plus the
// timeout, then at the latest sign of life plus the timeout, so a busy group costs one timer.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>

namespace dtrun::agent {

class StallWatch {
 public:
  using Clock = std::chrono::steady_clock;
  /// The latest sign of life of the running group apart from its start (nullopt: none yet).
  using LastSign = std::function<std::optional<Clock::time_point>()>;
  /// The group stalled: the wall-clock epoch ms of its last sign of life, and how long it has
  /// been quiet (at least the timeout).
  using StalledHandler = std::function<void(std::int64_t lastSignMs, std::chrono::milliseconds)>;

  /// Without a timeout the watch never fires, but still tells secondsQuiet() (the metrics).
  StallWatch(boost::asio::io_context& io, std::optional<std::chrono::milliseconds> timeout,
             LastSign lastSign, StalledHandler onStalled);
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

  /// A group started now: the quiet time counts from here. Replaces any earlier arming.
  void arm();
  /// The group is gone (or the agent finished): no report, and no quiet time, until the next
  /// arm().
  void cancel();
  bool armed() const { return armed_; }
  /// Seconds since the group's start or its latest sign of life; nullopt while not armed. A
  /// group reported stalled stays armed (it is still quiet) but is not reported again.
  std::optional<double> secondsQuiet() const;

 private:
  Clock::time_point lastSign() const;
  void wait(Clock::time_point until);
  void check();

  std::optional<std::chrono::milliseconds> timeout_;
  LastSign lastSign_;
  StalledHandler onStalled_;
  boost::asio::steady_timer timer_;
  Clock::time_point started_{};
  bool armed_ = false;
};

}  // namespace dtrun::agent
