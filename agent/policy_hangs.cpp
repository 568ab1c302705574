// The policy's answers to a hung worker (agent/policy.h, docs/hangs.md): a file-timer deadline
// that passed, a group that stalled, the stacks collected before the kill. The hang watch
// (agent/hang_watch.h) only reports; what happens is decided here, and only while the group runs.
#include <signal.h>

#include "agent/policy.h"

namespace dtrun::agent {

void Policy::on(const event::TimerExpired& e) {
  if (state_ != State::kRunning) return;  // the group is already being stopped
  const int rank = round_.rankOffset + e.localRank;
  nlohmann::json fields = {{"round", round_.round},
                           {"rank", rank},
                           {"local_rank", e.localRank},
                           {"pid", e.hang.pid},
                           {"scope_id", e.hang.scopeId},
                           {"deadline_ms", e.hang.deadlineMs},
                           {"overstay_ms", e.hang.overstayMs},
                           {"signal", e.hang.signal}};
  if (e.hang.signal <= 0) {
    // torch's rule: a timer armed without a signal is watched, never reaped.
    log_->warn("agent: [{}] rank {} (local_rank {}): {}", settings_.role, rank, e.localRank,
               describeHang(e.hang));
    emit(action::Record{"timer_expired", std::move(fields)});
    return;
  }
  log_->error("agent: [{}] rank {} (local_rank {}) {}", settings_.role, rank, e.localRank,
              describeHang(e.hang));
  hung_[e.localRank] = e.hang;
  emit(action::Record{"worker_hung", std::move(fields)});
  emit(action::KillHung{{e.localRank}, e.hang.signal, settings_.dumpStacks, {e.hang.pid}});
}

void Policy::on(const event::Stalled& e) {
  if (state_ != State::kRunning) return;
  Hang hang;
  hang.kind = "stall";
  hang.deadlineMs = e.lastSignMs;
  hang.overstayMs = e.quiet.count();
  hang.signal = SIGKILL;
  log_->error("agent: [{}] worker group {}", settings_.role, describeHang(hang));
  std::vector<int> ranks;
  for (int lr = 0; lr < settings_.nprocPerNode; ++lr) {
    hung_[lr] = hang;
    ranks.push_back(lr);
  }
  emit(action::Record{
      "worker_group_stalled",
      {{"round", round_.round}, {"last_output_ms", e.lastSignMs}, {"quiet_ms", e.quiet.count()}}});
  emit(action::KillHung{std::move(ranks), SIGKILL, settings_.dumpStacks, {}});
}

void Policy::on(const event::StacksCollected& e) {
  for (int lr : e.localRanks) {
    if (auto it = hung_.find(lr); it != hung_.end()) it->second.stacks = e.stacks;
  }
}

}  // namespace dtrun::agent
