// InMemoryStore: a Store inside one process (gloo's HashStore role): for tests, for ranks run
// as threads, and for the rendezvous unit tests with many simulated nodes.
//
// It is StoreCore (the server's own map and semantics) behind a mutex, with a condition variable
// standing in for the server's waiter lists. Thread-safe; blocking calls block the caller only.
#pragma once

#include <condition_variable>
#include <mutex>

#include "rendezvous/store.h"
#include "rendezvous/store_core.h"

namespace dtrun::rendezvous {

class InMemoryStore : public Store {
 public:
  InMemoryStore() = default;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool deleteKey(const std::string& key) override;
  std::int64_t numKeys() override;
  void append(const std::string& key, const Bytes& value) override;
  std::vector<Bytes> multiGet(const std::vector<std::string>& keys,
                              std::chrono::milliseconds timeout) override;
  void multiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  Bytes waitChange(const std::string& key, const Bytes& old,
                   std::chrono::milliseconds timeout) override;

  /// How many calls (get, wait, multiGet, waitChange) are blocked now, waiting for a key: a
  /// test that must write only once its waiter is in place polls this. Thread-safe.
  int blockedWaiters();

 private:
  /// Waits on changed_ until `ready()`, counted in blocked_ meanwhile; false on timeout.
  template <typename Ready>
  bool block(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds timeout, Ready ready);

  /// Blocks with the lock held until every key exists or the timeout passes (TimeoutError).
  void waitLocked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                  std::chrono::milliseconds timeout);

  std::mutex mutex_;
  std::condition_variable changed_;
  StoreCore core_;
  int blocked_ = 0;
};

}  // namespace dtrun::rendezvous
