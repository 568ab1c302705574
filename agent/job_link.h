// JobLink: the agent's one way to the job, whatever the rendezvous backend: joining rounds, the
// job-wide state every agent shares (round, restarts, failures, who is done or gone), and where a
// round's workers find their store.
//
// Implementations: C10dJob (agent/c10d_job.h: dtrun's store, c10d and static backends),
// EtcdJob (agent/etcd_job.h: the etcd backend) and LocalJob (agent/local_job.h: a job that is
// this node alone). Every call returns at once; its `done` runs later on the agent's io thread, the
// only thread that touches the agent's state. A backend that does blocking work keeps it off that
// thread and posts the result back.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/host_port.h"
#include "rendezvous/dynamic_rendezvous.h"
#include "rendezvous/job_record.h"

namespace dtrun::agent {

/// A value or the exception the work behind it threw.
template <typename T>
struct Result {
  std::optional<T> value;
  std::exception_ptr error;
  bool ok() const { return !error; }
  /// The error's what(), or "".
  std::string message() const {
    if (!error) return "";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "unknown error";
    }
  }
  static Result success(T v) {
    Result r;
    r.value = std::move(v);
    return r;
  }
  static Result failure(std::exception_ptr e) {
    Result r;
    r.error = std::move(e);
    return r;
  }
};

/// Where a round's workers find their store: MASTER_ADDR and MASTER_PORT.
struct WorkerStore {
  std::string addr;
  std::uint16_t port = 0;
};

/// The WorkerStore an agent wrote for the others as hostPortText(addr, port). Throws
/// ProtocolError(`what`) when `text` is not that with a port from 1 to 65535. Pure.
inline WorkerStore workerStoreOf(std::string_view text, const std::string& what) {
  try {
    const HostPort hp = splitHostPort(text);
    if (hp.port && *hp.port > 0) return WorkerStore{hp.host, *hp.port};
  } catch (const HostPortError&) {
  }
  throw ProtocolError(what);
}

/// How long a stop waits for JobLink::abortWorkers before it signals the workers anyway.
inline constexpr std::chrono::milliseconds kAbortBound{200};

class JobLink {
 public:
  virtual ~JobLink() = default;

  /// Starts watching the job (once): `onChange` runs after every change an agent must look at
  /// (then call state()); `onLost(why)` runs once when the job can no longer be reached.
  virtual void watch(std::function<void()> onChange, std::function<void(std::string)> onLost) = 0;

  /// Rendezvous until this node is in a closed round.
  virtual void join(std::function<void(Result<rendezvous::RoundInfo>)> done) = 0;
  /// Where the workers of `round` (which this node joined) find their store.
  virtual void workerStore(const rendezvous::RoundInfo& round,
                           std::function<void(Result<WorkerStore>)> done) = 0;
  /// The job's state as seen from `round`.
  virtual void state(std::int64_t round,
                     std::function<void(Result<rendezvous::JobState>)> done) = 0;
  /// Records a failure of `round` (one JSON document) and ends the round, counted as a failure
  /// restart job-wide; past `maxRestarts` the job is final instead. True for the node whose call
  /// decided it.
  virtual void reportFailure(std::int64_t round, std::string failureJson, int maxRestarts,
                             std::function<void(Result<bool>)> done) = 0;
  /// Ends `round` because membership changed (not counted as a failure).
  virtual void advance(std::int64_t round, std::function<void(Result<bool>)> done) = 0;
  /// This node's workers all succeeded in `round` of `groupWorldSize` nodes; the result is how
  /// many nodes have so far.
  virtual void markDone(std::int64_t round, int groupWorldSize,
                        std::function<void(Result<std::int64_t>)> done) = 0;
  /// Every failure recorded for `round`, oldest first (JSON documents).
  virtual void failures(std::int64_t round,
                        std::function<void(Result<std::vector<std::string>>)> done) = 0;
  /// For an agent that lost the job: what the job left on record (JobRecord: succeeded, failed
  /// for good, or neither yet), read afresh, not through the connections that failed, and
  /// bounded (the heartbeat or request timeout). An error when it cannot be read.
  virtual void readRecord(std::function<void(Result<rendezvous::JobRecord>)> done) = 0;
  /// Tells native workers (worker_runtime) of `round` to abort their collectives; `done` runs
  /// once that is done or failed (never throws, never reports an error: best effort). A stop
  /// waits for it at most kAbortBound, and an implementation bounds its own work by it too, so
  /// that a store that cannot be reached does not hold up what the job link does next.
  virtual void abortWorkers(std::int64_t round, std::string reason, std::function<void()> done) = 0;

  /// Publishes this agent's status (an AgentStatus JSON, rendezvous/job_status.h) at
  /// agent/<member>/status for `dtrun status`: best effort, no answer; the last one given before
  /// close() is written by close(). Io thread. A job nobody else can see publishes nothing.
  virtual void publishStatus(std::string statusJson) { (void)statusJson; }

  /// True when this node serves something the other nodes still read after their workers
  /// finished (the c10d store's host): it then leaves only after the others have.
  virtual bool servesOthers() const = 0;
  /// Cancels what is in progress and releases the job (the other nodes see this node leave).
  /// Io thread; no `done` runs afterwards.
  virtual void close() = 0;
  /// Where the job lives, for messages: "store at host:port", "etcd at a:2379,b:2379".
  virtual std::string describe() const = 0;
};

}  // namespace dtrun::agent
