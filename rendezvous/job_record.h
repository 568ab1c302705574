// JobRecord: what a job that is over leaves on record, for the agents that were not there at
// its end: a node that was stopped, cut off or slow to stop while the others finished without
// it, or one that arrives late. It reads the record instead of guessing, so that its exit code
// and its last line agree with the job's: "the job finished without this node" for a job that
// succeeded, the job's failure report for one that failed (docs/rendezvous.md, "Late nodes").
//
// The keys are DynamicRendezvous's, under the job's prefix: `succeeded` (the round in which
// every node's workers succeeded) and `final` (JSON, once the job failed for good), with the
// failures of the final round in r<R>/failures.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "rendezvous/store.h"

namespace dtrun::rendezvous {

/// The job's final outcome as its store holds it; neither field set: not over (or unknown).
struct JobRecord {
  std::optional<std::int64_t> succeeded;  ///< the round in which every node's workers succeeded
  std::optional<std::string> final;       ///< the job failed for good (JSON: reason, round, ...)
  std::vector<std::string> failures;      ///< the final round's failure records (JSON each)
  bool over() const { return succeeded.has_value() || final.has_value(); }
  /// The round `final` names (-1 when there is none or it is not JSON).
  std::int64_t finalRound() const;
};

/// The rendezvous found the job already over: nothing is left to join.
class JobOverError : public Error {
 public:
  JobOverError(const std::string& what, JobRecord record)
      : Error(what), record_(std::move(record)) {}
  const JobRecord& record() const { return record_; }

 private:
  JobRecord record_;
};

/// Reads the outcome from `job` (the job's store, under its prefix). Blocking: a few round
/// trips, each bounded by the store's own deadline; throws what the store throws.
JobRecord readJobRecord(Store& job);

}  // namespace dtrun::rendezvous
