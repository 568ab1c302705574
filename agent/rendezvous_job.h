// RendezvousJob: the one job object under every JobLink. The protocol is DynamicRendezvous
// (rendezvous/dynamic_rendezvous.h) over a Store; what differs by backend is only
//   the store      dtrun's TCP store (C10dJob), etcd (EtcdJob), an in-process one (LocalJob);
//   where the protocol's calls run   one work thread in order (WorkQueue), or the io thread
//                  itself where the store never waits (LocalJob);
//   liveness       how this node is counted in a round (registerMember), how it learns that
//                  the job changed (the backend's watch calls changed()) and that it lost the
//                  job (lost(), once): a store connection plus heartbeat, an etcd lease plus
//                  watch, or nothing.
// The six protocol calls (join, state, reportFailure, advance, markDone, failures), the
// delivery of results and notifications to the io thread, and the end of both at close() are
// here, once.
#pragma once

#include <spdlog/logger.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "agent/job_link.h"
#include "agent/work_queue.h"
#include "rendezvous/dynamic_rendezvous.h"
#include "rendezvous/store.h"

namespace dtrun::agent {

class RendezvousJob : public JobLink {
 public:
  ~RendezvousJob() override = default;
  RendezvousJob(const RendezvousJob&) = delete;
  RendezvousJob& operator=(const RendezvousJob&) = delete;

  /// Keeps the two notifications (delivered on the io thread, never after close()) and starts
  /// the backend's watch, once.
  void watch(std::function<void()> onChange, std::function<void(std::string)> onLost) final;
  void join(std::function<void(Result<rendezvous::RoundInfo>)> done) final;
  void state(std::int64_t round, std::function<void(Result<rendezvous::JobState>)> done) final;
  void reportFailure(std::int64_t round, std::string failureJson, int maxRestarts,
                     std::function<void(Result<bool>)> done) final;
  void advance(std::int64_t round, std::function<void(Result<bool>)> done) final;
  void markDone(std::int64_t round, int groupWorldSize,
                std::function<void(Result<std::int64_t>)> done) final;
  void failures(std::int64_t round,
                std::function<void(Result<std::vector<std::string>>)> done) final;

 protected:
  /// Where the protocol's calls run.
  enum class Runner {
    kWorkThread,  ///< a thread of its own, one call at a time, in order (a store that waits)
    kIoThread,    ///< at once, on the caller's (io) thread: a store that never waits
  };

  RendezvousJob(boost::asio::io_context& io, std::shared_ptr<spdlog::logger> log);

  /// The second half of construction, last in the backend's constructor: the rendezvous of
  /// node `me` over `job` (a store already under the job's prefix) and where its calls run.
  /// Before a round is joined the rendezvous calls registerMember on the runner.
  void startRendezvous(std::shared_ptr<rendezvous::Store> job, rendezvous::NodeInfo me,
                       rendezvous::RendezvousSettings settings, Runner runner);

  /// Runs `work` (returns T or throws) on the runner and hands its Result to `done` on the io
  /// thread, unless the job was closed meanwhile. What it threw goes through explain() first.
  template <typename T, typename F>
  void run(F work, std::function<void(Result<T>)> done) {
    auto job = [this, work = std::move(work), done = std::move(done)]() mutable {
      Result<T> r;
      try {
        r.value = work();
      } catch (...) {
        r.error = explain(std::current_exception());
      }
      deliver([done = std::move(done), r = std::move(r)] { done(r); });
    };
    if (queue_) {
      queue_->post(std::move(job));
    } else if (!stopping_) {
      job();
    }
  }

  /// Runs `f` later on the io thread unless the job was closed first. Any thread.
  void deliver(std::function<void()> f);
  /// The job changed: onChange, later, on the io thread. Any thread.
  void changed();
  /// The job cannot be reached any more: onLost(why), once, later, on the io thread. Any thread.
  void lost(const std::string& why);
  /// close()'s first step: true the first time (then nothing is delivered any more, and the
  /// work thread takes no new call), false when the job is closing already.
  bool beginClose();
  /// Joins the work thread once its call in progress returns (the backend interrupted whatever
  /// that call waits on first).
  void stopRunner();

  bool stopping() const { return stopping_.load(); }
  bool lostReported() const { return lostReported_.load(); }
  rendezvous::DynamicRendezvous& rendezvous() { return *rdzv_; }
  /// Queues `job` as it is on the work thread (nothing when the calls run on the io thread).
  void post(std::function<void()> job);

  // What a backend supplies.
  /// Counts this node in `round` before it joins (the runner's thread).
  virtual void registerMember(std::int64_t round) = 0;
  /// Starts the watch that calls changed() and lost() (io thread, once).
  virtual void startWatching() = 0;
  /// state()'s read; by default the rendezvous' own.
  virtual rendezvous::JobState readState(std::int64_t round);
  /// join()'s first step on the io thread (the etcd backend leaves the last round's worker
  /// store there); by default nothing.
  virtual void beforeJoin() {}
  /// What a failed call becomes (the etcd backend turns "no member answered" into its one line
  /// about quorum); by default the error as it is.
  virtual std::exception_ptr explain(std::exception_ptr error) const { return error; }
  /// After reportFailure, advance and markDone: a store whose changes nobody watches (LocalJob)
  /// says changed() here; by default nothing (the backend's watch sees the epoch move).
  virtual void afterWrite() {}

  boost::asio::io_context& io_;
  std::shared_ptr<spdlog::logger> log_;

 private:
  std::unique_ptr<rendezvous::DynamicRendezvous> rdzv_;
  std::unique_ptr<WorkQueue> queue_;  // the work thread (Runner::kWorkThread)
  std::atomic<bool> stopping_{false};
  std::atomic<bool> lostReported_{false};
  // Io thread only:
  bool watching_ = false;
  std::function<void()> onChange_;
  std::function<void(std::string)> onLost_;
};

}  // namespace dtrun::agent
