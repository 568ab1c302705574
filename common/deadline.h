// Deadlines for blocking calls: a timeout turned into a point in time once, so that the retries
// and partial reads of one call share it. Header-only (the store client and worker_runtime use
// it without linking anything).
#pragma once

#include <chrono>

namespace dtrun {

/// now + `timeout`, or time_point::max() when that would overflow (a wait without a timeout,
/// Store::kNoTimeout). Any thread.
inline std::chrono::steady_clock::time_point deadlineAfter(std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto now = Clock::now();
  if (timeout >=
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now)) {
    return Clock::time_point::max();
  }
  return now + timeout;
}

/// Whole milliseconds since `start`, for messages ("timed out after 1503 ms"). Any thread.
inline long long msSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               start)
      .count();
}

}  // namespace dtrun
