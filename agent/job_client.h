// JobClient: the agent's only way to the store, so that the agent's io thread never blocks.
//
// Three connections to the job's store, each owned by one thread:
//   ops         the store thread runs queued jobs (rendezvous, reports, state reads) one by one
//   membership  registered with ADD_ON_CLOSE per round and a DTRUN_LEASE; the heartbeat thread
//               pings it every keep_alive_interval. Its closing (agent killed, or silent for
//               interval x max_attempt) is how the other nodes learn this node is gone.
//   watch       the watch thread parks in WAIT_CHANGE on the job's epoch
// Results and events are posted back to the agent's io_context; the agent's state is touched
// only there (STYLE.md: other threads hand work over with post()).
#pragma once

#include <spdlog/logger.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>

#include "rendezvous/dynamic_rendezvous.h"
#include "rendezvous/prefix_store.h"
#include "rendezvous/tcp_store.h"

namespace dtrun::agent {

/// A value or the exception a store job threw.
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
};

struct JobClientOptions {
  rendezvous::TcpStoreOptions store;  ///< where the store is; timeout = read_timeout
  std::string runId;
  rendezvous::NodeInfo me;
  rendezvous::RendezvousSettings rendezvous;
  std::chrono::milliseconds keepAliveInterval = std::chrono::seconds(5);
  int keepAliveMaxAttempt = 3;
  std::chrono::milliseconds heartbeatTimeout = std::chrono::seconds(5);
};

class JobClient {
 public:
  /// Connects all three connections (blocking, up to the store's connect timeout; throws
  /// ConnectionError naming the store) and starts the store and heartbeat threads.
  JobClient(boost::asio::io_context& io, JobClientOptions options,
            std::shared_ptr<spdlog::logger> log);
  /// Interrupts the connections and joins the threads.
  ~JobClient();
  JobClient(const JobClient&) = delete;
  JobClient& operator=(const JobClient&) = delete;

  // Each call queues a job for the store thread; `done` runs later on the io thread.
  /// Rendezvous until this node is in a closed round.
  void join(std::function<void(Result<rendezvous::RoundInfo>)> done);
  /// The job's state as seen from `round`.
  void state(std::int64_t round, std::function<void(Result<rendezvous::JobState>)> done);
  /// Records a failure of `round` (JSON) and ends the round (counted as a failure restart).
  void reportFailure(std::int64_t round, std::string failureJson, int maxRestarts,
                     std::function<void(Result<bool>)> done);
  /// Ends `round` because membership changed (not counted as a failure).
  void advance(std::int64_t round, std::function<void(Result<bool>)> done);
  /// This node's workers all succeeded in `round` of `groupWorldSize` nodes.
  void markDone(std::int64_t round, int groupWorldSize,
                std::function<void(Result<std::int64_t>)> done);
  /// Every failure recorded for `round`.
  void failures(std::int64_t round, std::function<void(Result<std::vector<std::string>>)> done);
  /// Tells native workers (worker_runtime) of `round` to abort their collectives: `reason`.
  /// `done` runs on the io thread once the key is set (or setting it failed).
  void abortWorkers(std::int64_t round, std::string reason, std::function<void()> done);
  /// --no-agent-store: group rank 0 publishes "addr:port", the others read it.
  void exchangeMaster(std::int64_t round, std::optional<std::string> mine,
                      std::function<void(Result<std::string>)> done);

  /// Starts the watch thread (once): `onChange` runs on the io thread after every change of the
  /// job's epoch; `onLost(why)` once when the store is unreachable (watch or heartbeat failed).
  void watch(std::function<void()> onChange, std::function<void(std::string)> onLost);

  /// Cancels a join in progress and stops every thread (the connections close, so the other
  /// nodes see this node leave). Io thread.
  void close();

  /// "host:port" of the store.
  const std::string& storeAddress() const { return address_; }

 private:
  using Job = std::function<void()>;
  void enqueue(Job job);
  template <typename T, typename F>
  void run(F work, std::function<void(Result<T>)> done);
  void storeLoop();
  void heartbeatLoop();
  void watchLoop();
  void lost(const std::string& why);
  /// Why the heartbeat failed: the store is gone, or it dropped this agent. Heartbeat thread.
  std::string classifyHeartbeatFailure(const std::string& error);

  boost::asio::io_context& io_;
  JobClientOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  std::string address_;
  std::string jobPrefix_;
  std::shared_ptr<rendezvous::TcpStore> ops_;
  std::shared_ptr<rendezvous::TcpStore> membership_;
  std::shared_ptr<rendezvous::TcpStore> watcher_;
  std::shared_ptr<rendezvous::PrefixStore> job_;
  std::unique_ptr<rendezvous::DynamicRendezvous> rdzv_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::atomic<bool> stopping_{false};
  bool epochRegistered_ = false;  // store thread only
  std::function<void()> onChange_;
  std::function<void(std::string)> onLost_;
  std::atomic<bool> lostReported_{false};
  std::thread storeThread_;
  std::thread heartbeatThread_;
  std::thread watchThread_;
};

}  // namespace dtrun::agent
