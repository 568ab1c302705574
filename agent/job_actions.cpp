#include "agent/job_actions.h"

#include "common/error.h"
#include "rendezvous/job_record.h"

namespace dtrun::agent {

JobActions::JobActions(JobLink& job, const FailureCollector& failures, EventLog& events,
                       int maxRestarts, std::shared_ptr<spdlog::logger> log, Dispatch dispatch)
    : job_(job),
      failures_(failures),
      events_(events),
      maxRestarts_(maxRestarts),
      log_(std::move(log)),
      dispatch_(std::move(dispatch)) {}

template <typename T>
std::function<void(Result<T>)> JobActions::guarded(std::function<void(Result<T>)> done) {
  return [this, done = std::move(done)](Result<T> r) {
    if (!stopped_) done(std::move(r));
  };
}

void JobActions::join() {
  events_.record("rendezvous_started");
  job_.join(guarded<rendezvous::RoundInfo>([this](Result<rendezvous::RoundInfo> r) {
    if (r.ok()) {
      dispatch_(event::Joined{*r.value});
      return;
    }
    event::JoinFailed failed{r.message(), std::nullopt, {}};
    try {
      std::rethrow_exception(r.error);
    } catch (const rendezvous::JobOverError& over) {
      failed.over = over.record();
      failed.failures = failures_.parse(over.record().failures);
    } catch (const TimeoutError&) {
    } catch (const ConnectionError&) {
      failed.lost = true;  // the store or etcd went away: the job was lost
    } catch (...) {
    }
    dispatch_(std::move(failed));
  }));
}

bool JobActions::run(Action& action, const rendezvous::RoundInfo& currentRound) {
  if (std::holds_alternative<action::Join>(action)) {
    join();
  } else if (std::holds_alternative<action::GetWorkerStore>(action)) {
    job_.workerStore(currentRound, guarded<WorkerStore>([this](Result<WorkerStore> r) {
                       if (r.ok()) {
                         dispatch_(event::WorkerStoreReady{*r.value});
                       } else {
                         dispatch_(event::WorkerStoreFailed{r.message()});
                       }
                     }));
  } else if (auto* report = std::get_if<action::ReportFailure>(&action)) {
    const std::int64_t round = report->round;
    job_.reportFailure(round, nlohmann::json(report->failure).dump(), maxRestarts_,
                       guarded<bool>([this, round](Result<bool> r) {
                         if (!r.ok()) {
                           log_->error("could not report the failure: {}", r.message());
                           return;
                         }
                         events_.record("restart_decided", {{"round", round},
                                                            {"reason", "worker_failure"},
                                                            {"decided_here", *r.value}});
                       }));
  } else if (auto* done = std::get_if<action::MarkDone>(&action)) {
    job_.markDone(done->round, done->groupWorldSize,
                  guarded<std::int64_t>([this](Result<std::int64_t> r) {
                    if (!r.ok()) log_->warn("could not report success: {}", r.message());
                    dispatch_(event::DoneReported{r.ok()});
                  }));
  } else if (auto* query = std::get_if<action::QueryState>(&action)) {
    job_.state(query->round, guarded<rendezvous::JobState>([this](Result<rendezvous::JobState> r) {
                 if (r.ok()) {
                   dispatch_(event::StateRead{*r.value});
                 } else {
                   dispatch_(event::JobLost{job_.describe() + ": " + r.message()});
                 }
               }));
  } else if (auto* advance = std::get_if<action::Advance>(&action)) {
    job_.advance(advance->round, guarded<bool>([this](Result<bool> r) {
                   if (!r.ok()) log_->warn("could not start a new round: {}", r.message());
                 }));
  } else if (auto* read = std::get_if<action::ReadFailures>(&action)) {
    job_.failures(
        read->round, guarded<std::vector<std::string>>([this](Result<std::vector<std::string>> r) {
          if (!r.ok()) {
            log_->warn("could not read the job's failures: {}", r.message());
          }
          dispatch_(
              event::FailuresRead{failures_.parse(r.ok() ? *r.value : std::vector<std::string>{})});
        }));
  } else if (std::holds_alternative<action::ReadJobRecord>(action)) {
    job_.readRecord(guarded<rendezvous::JobRecord>([this](Result<rendezvous::JobRecord> r) {
      event::JobRecordRead read;
      if (r.ok()) {
        read.failures = failures_.parse(r.value->failures);
        read.record = std::move(*r.value);
      } else {
        read.error = r.message();
      }
      dispatch_(std::move(read));
    }));
  } else if (std::holds_alternative<action::CloseJob>(action)) {
    job_.close();
  } else {
    return false;
  }
  return true;
}

}  // namespace dtrun::agent
