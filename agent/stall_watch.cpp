#include "agent/stall_watch.h"

#include <algorithm>

namespace dtrun::agent {

StallWatch::StallWatch(boost::asio::io_context& io,
                       std::optional<std::chrono::milliseconds> timeout, LastSign lastSign,
                       StalledHandler onStalled)
    : timeout_(timeout),
      lastSign_(std::move(lastSign)),
      onStalled_(std::move(onStalled)),
      timer_(io) {}

void StallWatch::arm() {
  started_ = Clock::now();
  armed_ = true;
  if (timeout_) wait(started_ + *timeout_);
}

void StallWatch::cancel() {
  armed_ = false;
  timer_.cancel();
}

std::optional<double> StallWatch::secondsQuiet() const {
  if (!armed_) return std::nullopt;
  return std::chrono::duration<double>(Clock::now() - lastSign()).count();
}

StallWatch::Clock::time_point StallWatch::lastSign() const {
  auto last = started_;
  if (lastSign_) {
    if (auto t = lastSign_()) last = std::max(last, *t);
  }
  return last;
}

void StallWatch::wait(Clock::time_point until) {
  timer_.expires_at(until);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec && armed_) check();
  });
}

void StallWatch::check() {
  const auto now = Clock::now();
  const auto last = lastSign();
  const auto quiet = now - last;
  if (quiet < *timeout_) {
    wait(last + *timeout_);
    return;
  }
  // Reported once per group: no new wait until the next arm().
  const auto sysNow = std::chrono::system_clock::now();
  const auto lastSys =
      sysNow - std::chrono::duration_cast<std::chrono::system_clock::duration>(quiet);
  onStalled_(
      std::chrono::duration_cast<std::chrono::milliseconds>(lastSys.time_since_epoch()).count(),
      std::chrono::duration_cast<std::chrono::milliseconds>(quiet));
}

}  // namespace dtrun::agent
