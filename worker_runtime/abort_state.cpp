#include "worker_runtime/abort_state.h"

#include <algorithm>

namespace dtrun::worker {

std::optional<std::string> AbortState::reason() const {
  std::lock_guard lock(mutex_);
  if (!requested_.load(std::memory_order_relaxed)) return std::nullopt;
  return reason_;
}

void AbortState::trigger(const std::string& reason) noexcept {
  static constexpr const char* kNoReason = "(no reason given)";
  const std::string& given = reason.empty() ? std::string(kNoReason) : reason;
  std::vector<std::weak_ptr<Abortable>> targets;
  try {
    std::lock_guard lock(mutex_);
    if (requested_.load(std::memory_order_relaxed)) return;
    reason_ = given;
    requested_.store(true, std::memory_order_release);
    targets.swap(targets_);  // each target is aborted once; later watch() calls abort at once
  } catch (...) {
    // Only the string copy can throw (memory exhaustion); the flag must still flip.
    requested_.store(true, std::memory_order_release);
  }
  // Outside the lock: ncclCommAbort may take a while, and an Abortable may call back into us.
  for (auto& weak : targets) {
    if (auto target = weak.lock()) target->abort(given);
  }
}

void AbortState::watch(std::weak_ptr<Abortable> target) {
  {
    std::lock_guard lock(mutex_);
    if (!requested_.load(std::memory_order_relaxed)) {
      std::erase_if(targets_, [](const auto& w) { return w.expired(); });
      targets_.push_back(std::move(target));
      return;
    }
  }
  // Already aborted: the same treatment the others got, on this thread.
  if (auto strong = target.lock()) strong->abort(*reason());
}

}  // namespace dtrun::worker
