#include "dtrun/worker/worker.h"

#include <map>
#include <mutex>

#include "common/deadline.h"
#include "rendezvous/prefix_store.h"
#include "rendezvous/tcp_store.h"
#include "worker_runtime/abort_state.h"
#include "worker_runtime/abort_watcher.h"

namespace dtrun::worker {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string describe(const WorkerEnv& env) {
  return "dtrun_worker rank " + std::to_string(env.rank) + "/" + std::to_string(env.worldSize) +
         " (round " + std::to_string(env.restartCount) + ")";
}

}  // namespace

struct Worker::Impl {
  WorkerEnv env;
  WorkerOptions options;
  std::string who;  // "dtrun_worker rank 3/8 (round 0)", for messages and log lines
  std::shared_ptr<rendezvous::TcpStore> tcp;
  std::unique_ptr<rendezvous::PrefixStore> round;
  std::shared_ptr<AbortState> abort = std::make_shared<AbortState>();
  std::unique_ptr<AbortWatcher> watcher;  // destroyed first: it must not outlive `abort`'s users
  std::mutex sequenceMutex;
  std::map<std::string, std::uint64_t> sequences;

  ~Impl() { watcher.reset(); }
};

Worker::Worker(WorkerEnv env, WorkerOptions options) : impl_(std::make_unique<Impl>()) {
  validateWorkerEnv(env);
  impl_->env = std::move(env);
  impl_->options = std::move(options);
  impl_->who = describe(impl_->env);
  const WorkerEnv& e = impl_->env;

  rendezvous::TcpStoreOptions o;
  o.host = e.masterAddr;
  o.port = e.masterPort;
  o.connectTimeout = impl_->options.connectTimeout;
  o.timeout = impl_->options.timeout;
  try {
    impl_->tcp = std::make_shared<rendezvous::TcpStore>(o);
  } catch (const ConnectionError& err) {
    std::string hint =
        e.useAgentStore
            ? ""
            : " (TORCHELASTIC_USE_AGENT_STORE is not True: dtrun_worker does not host a "
              "store itself, so one must already serve MASTER_ADDR:MASTER_PORT, e.g. "
              "`dtrun store`)";
    throw ConnectionError(impl_->who +
                          ": cannot reach the store at MASTER_ADDR:MASTER_PORT=" + e.masterAddr +
                          ":" + std::to_string(e.masterPort) + hint + ": " + err.what());
  }
  impl_->round = std::make_unique<rendezvous::PrefixStore>(e.storePrefix(), impl_->tcp);
  log("connected to the store at " + impl_->tcp->address() + ", keys under " + e.storePrefix());

  if (impl_->options.watchAbort) {
    std::function<void(const std::string&)> logFn;
    if (impl_->options.log) {
      logFn = [sink = impl_->options.log, who = impl_->who](const std::string& line) {
        sink(who + ": " + line);
      };
    }
    impl_->watcher = std::make_unique<AbortWatcher>(
        e.masterAddr, e.masterPort, abortKey(e.restartCount), impl_->options.storeLossGrace,
        impl_->abort, std::move(logFn));
  }
}

Worker Worker::fromEnvironment(WorkerOptions options) {
  return Worker(readWorkerEnv(), std::move(options));
}

Worker::~Worker() = default;
Worker::Worker(Worker&&) noexcept = default;
Worker& Worker::operator=(Worker&&) noexcept = default;

const WorkerEnv& Worker::env() const { return impl_->env; }
const WorkerOptions& Worker::options() const { return impl_->options; }
rendezvous::Store& Worker::store() { return *impl_->round; }

std::uint64_t Worker::nextSequence(const std::string& name) {
  std::lock_guard lock(impl_->sequenceMutex);
  return impl_->sequences[name]++;
}

void Worker::log(const std::string& line) const {
  if (impl_->options.log) impl_->options.log(impl_->who + ": " + line);
}

bool Worker::abortRequested() const noexcept { return impl_->abort->requested(); }

std::optional<std::string> Worker::abortReason() const { return impl_->abort->reason(); }

void Worker::throwIfAborted() const {
  if (!impl_->abort->requested()) return;
  throw AbortedError(impl_->who + ": the round was aborted: " +
                     impl_->abort->reason().value_or("(no reason given)"));
}

void Worker::watch(std::weak_ptr<Abortable> target) { impl_->abort->watch(std::move(target)); }

void Worker::abortLocally(const std::string& reason) {
  log("aborting locally: " + reason);
  impl_->abort->trigger(reason);
}

void Worker::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  // The store connection cannot be interrupted from the watcher thread without breaking it for
  // everyone, so long waits are cut into slices and the abort flag is read between them.
  const auto start = Clock::now();
  const auto until = deadlineAfter(timeout);
  const milliseconds slice = std::max(impl_->options.abortPollInterval, milliseconds(1));
  for (;;) {
    throwIfAborted();
    auto now = Clock::now();
    if (now >= until) {
      throw TimeoutError(impl_->who + ": waited " + std::to_string(msSince(start)) +
                         " ms for store keys " + rendezvous::joinKeys(keys) + " under " +
                         impl_->env.storePrefix());
    }
    auto left =
        until == Clock::time_point::max() ? slice : std::chrono::ceil<milliseconds>(until - now);
    try {
      impl_->round->wait(keys, std::min(left, slice));
      return;
    } catch (const TimeoutError&) {
      // The slice ended; look at the abort flag and the deadline again.
    }
  }
}

Bytes Worker::get(const std::string& key, milliseconds timeout) {
  wait({key}, timeout);
  return impl_->round->get(key, impl_->options.timeout);
}

void Worker::barrier() { barrier(impl_->options.timeout); }

void Worker::barrier(milliseconds timeout) {
  throwIfAborted();
  // Counter plus flag: the last rank to arrive sets `done`, everyone waits for it. Each call has
  // its own keys, so a barrier is never confused with an earlier one.
  const std::string base = "dtrun_worker/barrier/" + std::to_string(nextSequence("barrier"));
  const std::string done = base + "/done";
  const std::int64_t arrived = impl_->round->add(base + "/arrived", 1);
  if (arrived == impl_->env.worldSize) impl_->round->set(done, "1");
  try {
    wait({done}, timeout);
  } catch (const TimeoutError& e) {
    std::int64_t now = impl_->round->add(base + "/arrived", 0);
    throw TimeoutError(std::string(e.what()) + ": barrier " + base + " saw " + std::to_string(now) +
                       " of " + std::to_string(impl_->env.worldSize) + " ranks arrive");
  }
}

Bytes Worker::broadcast(const Bytes& data, int root) {
  if (root < 0 || root >= impl_->env.worldSize) {
    throw ConfigError(impl_->who + ": broadcast root " + std::to_string(root) +
                      " is not a rank of WORLD_SIZE=" + std::to_string(impl_->env.worldSize));
  }
  throwIfAborted();
  const std::string key = "dtrun_worker/broadcast/" + std::to_string(nextSequence("broadcast"));
  if (impl_->env.rank == root) {
    impl_->round->set(key, data);
    return data;
  }
  return get(key, impl_->options.timeout);
}

}  // namespace dtrun::worker
