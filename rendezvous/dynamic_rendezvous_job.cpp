// DynamicRendezvous' job-wide rules (rendezvous/dynamic_rendezvous.h): the job's state as a
// round sees it, advancing a round (restart or final, counted job-wide, decided once by a
// compare-and-set claim), the failure records and the nodes done.
#include <nlohmann/json.hpp>

#include "common/decimal.h"
#include "common/error.h"
#include "rendezvous/dynamic_rendezvous.h"
#include "rendezvous/job_record.h"
#include "rendezvous/key_values.h"

namespace dtrun::rendezvous {

using keys::roundKey;

JobState DynamicRendezvous::state(std::int64_t round) {
  JobState s;
  s.round = counter(keys::kRound);
  if (store_->check({keys::kFinal})) s.final = store_->get(keys::kFinal, kSlice);
  s.gone = counter(keys::goneKey(round));
  s.waiting = counter(roundKey(round, keys::kWaiting));
  s.done = counter(roundKey(round, keys::kDone));
  s.restarts = counter(keys::kRestarts);
  if (store_->check({keys::kSucceeded})) {
    s.succeeded = parseDecimal(store_->get(keys::kSucceeded, kSlice)).value_or(-1);
  }
  s.agents = counter(keys::kAgents);
  if (s.round > round && store_->check({roundKey(round, keys::kAdvance)})) {
    // Read only once the round is over, for the restart's cause (the event log, the metrics).
    if (auto claim = keys::parseClaim(store_->get(roundKey(round, keys::kAdvance), kSlice))) {
      s.endedBy = keys::openedValue(claim->reason);
    }
  }
  return s;
}

bool DynamicRendezvous::advance(std::int64_t round, AdvanceReason reason, int maxRestarts) {
  // The first claim decides why the round ends (a failure counts a restart). Every step after it
  // is idempotent, and every node that asks runs them all, claim won or not: a claimant that
  // dies half-way (its connection closing makes the others ask) leaves nothing stuck, and no
  // step happens twice in effect.
  const std::string mine = keys::claimValue(reason, me_.member);
  // A round in which some node's workers all succeeded never restarts: that would run a
  // finished script again. A failure then ends the job; a membership change changes nothing.
  if (const std::int64_t done = counter(roundKey(round, keys::kDone)); done > 0) {
    if (reason != AdvanceReason::kFailure) return false;
    const std::string final =
        nlohmann::json{{"reason", "failed_after_success"}, {"round", round}, {"done", done}}.dump();
    const bool decidedHere = store_->compareSet(keys::kFinal, "", final) == final;
    store_->add(keys::kEpoch, 1);
    if (decidedHere) {
      log_->warn("rendezvous: round {} failed after {} node(s) had finished it; it cannot restart",
                 round, done);
    }
    return decidedHere;
  }
  const Bytes claim = store_->compareSet(roundKey(round, keys::kAdvance), "", mine);
  const bool decidedHere = claim == mine;
  const auto parsed = keys::parseClaim(claim);
  const bool failure = parsed && parsed->reason == AdvanceReason::kFailure;
  // Who will be back: the members still connected plus the nodes that came too late.
  const std::int64_t closed = store_->check({roundKey(round, keys::kClosed)})
                                  ? keyNumber(*store_, roundKey(round, keys::kClosed),
                                              store_->get(roundKey(round, keys::kClosed), kSlice))
                                  : 0;
  const std::int64_t back = joinedNodes(closed) - counter(keys::goneKey(round)) +
                            counter(roundKey(round, keys::kWaiting));
  if (failure) {
    // This round's count is fixed once (r<R>/restarts); the job-wide counter only ever rises to
    // it, so a late helper of an older round cannot lower it.
    const std::int64_t restarts =
        keyNumber(*store_, roundKey(round, keys::kRoundRestarts),
                  store_->compareSet(roundKey(round, keys::kRoundRestarts), "",
                                     std::to_string(counter(keys::kRestarts) + 1)));
    for (std::int64_t now = counter(keys::kRestarts); now < restarts;) {
      const Bytes seen =
          store_->compareSet(keys::kRestarts, std::to_string(now), std::to_string(restarts));
      now = seen == std::to_string(now) ? restarts : keyNumber(*store_, keys::kRestarts, seen);
    }
    if (restarts > maxRestarts) {
      nlohmann::json final = {{"reason", "max_restarts"},
                              {"round", round},
                              {"restarts", restarts - 1},
                              {"max_restarts", maxRestarts}};
      store_->compareSet(keys::kFinal, "", final.dump());
      store_->add(keys::kEpoch, 1);
      if (decidedHere) {
        log_->warn("rendezvous: round {} failed and the {} restart(s) allowed are used up", round,
                   maxRestarts);
      }
      return decidedHere;
    }
  }
  store_->compareSet(roundKey(round + 1, keys::kExpect), "",
                     std::to_string(std::clamp<std::int64_t>(back, 1, settings_.maxNodes)));
  counter(keys::kRound);  // CAS on a missing key stores nothing; "round" exists once anyone joined
  store_->compareSet(keys::kRound, std::to_string(round), std::to_string(round + 1));
  store_->compareSet(roundKey(round + 1, keys::kOpened), "",
                     std::string(keys::openedValue(failure ? AdvanceReason::kFailure
                                                           : AdvanceReason::kMembership)));
  store_->add(keys::kEpoch, 1);
  if (decidedHere) {
    log_->info("rendezvous: round {} ends ({}); round {} is open", round,
               failure ? "worker failure" : "membership change", round + 1);
  } else {
    log_->debug("rendezvous: round {} ends ({}, decided by {}); round {} is open", round,
                failure ? "worker failure" : "membership change", claim.substr(claim.find(' ') + 1),
                round + 1);
  }
  return decidedHere;
}

void DynamicRendezvous::reportFailure(std::int64_t round, const std::string& failureJson) {
  store_->append(roundKey(round, keys::kFailures), failureJson + "\n");
  store_->add(keys::kEpoch, 1);
}

std::vector<std::string> DynamicRendezvous::failuresOf(Store& job, std::int64_t round) {
  std::vector<std::string> out;
  const std::string key = roundKey(round, keys::kFailures);
  if (!job.check({key})) return out;
  const Bytes all = job.get(key, kSlice);
  std::size_t start = 0;
  while (start < all.size()) {
    auto end = all.find('\n', start);
    if (end == std::string::npos) end = all.size();
    if (end > start) out.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::int64_t DynamicRendezvous::markDone(std::int64_t round, int groupWorldSize) {
  std::int64_t done = store_->add(roundKey(round, keys::kDone), 1);
  // Only the last one wakes everybody: N nodes finishing must not cost N x N state reads.
  if (done >= groupWorldSize) {
    store_->set(keys::kSucceeded, std::to_string(round));
    store_->add(keys::kEpoch, 1);
  }
  return done;
}

}  // namespace dtrun::rendezvous
