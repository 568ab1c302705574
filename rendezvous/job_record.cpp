#include "rendezvous/job_record.h"

#include <chrono>
#include <nlohmann/json.hpp>

#include "common/decimal.h"
#include "rendezvous/dynamic_rendezvous.h"

namespace dtrun::rendezvous {
namespace {

// The keys were checked to exist: a GET of one returns at once; the bound covers a store that
// stops answering between the two calls.
constexpr std::chrono::milliseconds kRead(1000);

}  // namespace

std::int64_t JobRecord::finalRound() const {
  if (!final) return -1;
  try {
    return nlohmann::json::parse(*final).value("round", std::int64_t{-1});
  } catch (const nlohmann::json::exception&) {
    return -1;
  }
}

JobRecord readJobRecord(Store& job) {
  JobRecord o;
  if (job.check({keys::kSucceeded})) {
    o.succeeded = parseDecimal(job.get(keys::kSucceeded, kRead));
    if (!o.succeeded) o.succeeded = -1;  // on record, but not a round number: still over
  }
  if (job.check({keys::kFinal})) {
    o.final = job.get(keys::kFinal, kRead);
    if (const std::int64_t round = o.finalRound(); round >= 0) {
      o.failures = DynamicRendezvous::failuresOf(job, round);
    }
  }
  return o;
}

}  // namespace dtrun::rendezvous
