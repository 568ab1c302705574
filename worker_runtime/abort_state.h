// AbortState: the "this round is over" flag that the abort watcher sets and every thread reads,
// plus the Abortables to stop when it flips. Shared between a Worker and its watcher thread.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dtrun/worker/worker.h"

namespace dtrun::worker {

class AbortState {
 public:
  AbortState() = default;
  AbortState(const AbortState&) = delete;
  AbortState& operator=(const AbortState&) = delete;

  /// True once trigger() ran. Lock-free; any thread.
  bool requested() const noexcept { return requested_.load(std::memory_order_acquire); }
  /// The first trigger()'s reason, or nullopt. Any thread.
  std::optional<std::string> reason() const;
  /// Records `reason` (the first call wins) and aborts every live target on the calling thread.
  void trigger(const std::string& reason) noexcept;
  /// Adds `target`; aborts it at once, on the calling thread, when trigger() already ran.
  void watch(std::weak_ptr<Abortable> target);

 private:
  mutable std::mutex mutex_;
  std::atomic<bool> requested_{false};
  std::string reason_;                             // written once, under mutex_, before requested_
  std::vector<std::weak_ptr<Abortable>> targets_;  // pruned of expired entries on watch()
};

}  // namespace dtrun::worker
