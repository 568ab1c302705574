// AbortWatcher: one thread and one store connection that wait for the agent's abort key
// (abort_key.h) and flip the shared AbortState when it appears or when the store is lost.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "rendezvous/tcp_store.h"
#include "worker_runtime/abort_state.h"

namespace dtrun::worker {

class AbortWatcher {
 public:
  /// Connects its own TcpStore (blocking, up to `storeLossGrace`; ConnectionError) and starts
  /// the thread, which waits for `key` (a key before the TcpStore's "/" prefix).
  AbortWatcher(const std::string& host, std::uint16_t port, std::string key,
               std::chrono::milliseconds storeLossGrace, std::shared_ptr<AbortState> state,
               std::function<void(const std::string&)> log);
  /// Interrupts the connection and joins the thread. Returns promptly unless the thread is in the
  /// middle of reconnecting to an unreachable host (then at most storeLossGrace).
  ~AbortWatcher();
  AbortWatcher(const AbortWatcher&) = delete;
  AbortWatcher& operator=(const AbortWatcher&) = delete;

 private:
  void run() noexcept;

  std::string key_;
  std::chrono::milliseconds grace_;
  std::shared_ptr<AbortState> state_;
  std::function<void(const std::string&)> log_;
  rendezvous::TcpStore store_;  // used only by thread_, except interrupt() from the destructor
  std::atomic<bool> stopping_{false};
  std::thread thread_;  // last: started after every member it reads is ready
};

}  // namespace dtrun::worker
