#include "worker_runtime/abort_watcher.h"

#include <optional>

#include "common/error.h"

namespace dtrun::worker {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The watcher parks a WAIT for this long at a time, then proves the store still answers with a
// PING. A healthy connection costs two small requests per slice; a silently dead one (cut cable,
// frozen host: no FIN ever arrives) is noticed within a slice plus the reply deadline.
constexpr milliseconds kWaitSlice = std::chrono::seconds(30);

rendezvous::TcpStoreOptions watcherOptions(const std::string& host, std::uint16_t port,
                                           milliseconds grace) {
  rendezvous::TcpStoreOptions o;
  o.host = host;
  o.port = port;
  // Both bounds are the grace: a reconnect that takes longer, or a reply that does not come
  // within it, means the store is gone as far as this round is concerned.
  o.connectTimeout = grace;
  o.timeout = std::max(grace, milliseconds(1000));
  return o;
}

}  // namespace

AbortWatcher::AbortWatcher(const std::string& host, std::uint16_t port, std::string key,
                           milliseconds storeLossGrace, std::shared_ptr<AbortState> state,
                           std::function<void(const std::string&)> log)
    : key_(std::move(key)),
      grace_(storeLossGrace),
      state_(std::move(state)),
      log_(std::move(log)),
      store_(watcherOptions(host, port, storeLossGrace)),
      thread_([this] { run(); }) {}

AbortWatcher::~AbortWatcher() {
  stopping_ = true;
  store_.interrupt();  // shutdown(2) on the socket: the parked WAIT fails at once
  thread_.join();
}

void AbortWatcher::run() noexcept {
  std::optional<Clock::time_point> lostSince;  // set while the store does not answer
  bool mustPing = false;
  std::string lastError;
  for (;;) {
    try {
      if (lostSince || mustPing) {
        store_.ping();  // reconnects (up to the grace) and proves the store answers
        if (lostSince && log_)
          log_("abort watcher: reconnected to the store at " + store_.address());
        lostSince.reset();
        mustPing = false;
      }
      try {
        store_.wait({key_}, kWaitSlice);
      } catch (const TimeoutError&) {
        // Either the slice ended (the connection is fine) or a reply was late (it was dropped);
        // the PING on the next pass tells which.
        mustPing = true;
        continue;
      }
      Bytes reason = store_.get(key_, grace_);
      if (reason.size() > kMaxAbortReasonBytes) reason.resize(kMaxAbortReasonBytes);
      if (log_) log_("abort watcher: the agent stopped this round: " + reason);
      state_->trigger(reason);
      return;
    } catch (const std::exception& e) {
      if (stopping_) return;
      lastError = e.what();
      if (!lostSince) {
        lostSince = Clock::now();
        if (log_)
          log_("abort watcher: lost the store connection (" + lastError + "); reconnecting");
      }
      if (Clock::now() - *lostSince >= grace_) {
        state_->trigger("lost the connection to the store at " + store_.address() + " for " +
                        std::to_string(grace_.count()) + " ms: " + lastError);
        return;
      }
      // Errors that come back at once (not a refused connect, which backs off inside the
      // TcpStore) must not spin the CPU for the whole grace.
      std::this_thread::sleep_for(milliseconds(10));
    }
  }
}

}  // namespace dtrun::worker
