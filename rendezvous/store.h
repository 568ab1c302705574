// The Store interface every rendezvous and worker component talks to.
//
// Implementations: TcpStore (client of a StoreServer or of torch's TCPStore), InMemoryStore (one
// process, for tests and the rendezvous unit tests), EtcdStore (rendezvous/etcd/etcd_store.h:
// the keys in etcd, for the etcd backend) and PrefixStore (a decorator). Semantics follow
// PyTorch's c10d Store: ADD keeps decimal text, COMPARE_SET on a missing key with a non-empty
// `expected` stores nothing and returns `expected`, and "absent" is never the same as "empty".
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace dtrun::rendezvous {

/// Values are arbitrary bytes; std::string holds them, embedded NULs included.
using Bytes = std::string;

class Store {
 public:
  /// Passed as a timeout: wait for ever.
  static constexpr std::chrono::milliseconds kNoTimeout = std::chrono::milliseconds::max();

  virtual ~Store() = default;

  /// Stores `value` under `key` and wakes its waiters. Does not wait for the key.
  virtual void set(const std::string& key, const Bytes& value) = 0;
  /// Blocks until `key` exists (at most `timeout`, else TimeoutError) and returns its value.
  virtual Bytes get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  /// Adds `delta` to the decimal counter at `key` (missing = 0) and returns the new value.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  /// Replaces the value when it equals `expected` (or, for a missing key, when `expected` is
  /// empty); returns the value now stored, or `expected` for a missing key that was not set.
  virtual Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) = 0;
  /// True when every key exists. Never blocks on the keys.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  /// Blocks until every key exists, at most `timeout` (then TimeoutError naming the keys).
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  /// Deletes `key`; true when it existed.
  virtual bool deleteKey(const std::string& key) = 0;
  /// Number of keys in the whole store (not only under a prefix, as in torch).
  virtual std::int64_t numKeys() = 0;
  /// Appends `value` to the bytes at `key` (creating it) and wakes its waiters.
  virtual void append(const std::string& key, const Bytes& value) = 0;
  /// Waits for every key as wait() does, then returns their values in order.
  virtual std::vector<Bytes> multiGet(const std::vector<std::string>& keys,
                                      std::chrono::milliseconds timeout) = 0;
  /// Sets every key to its value (same length vectors, else ConfigError).
  virtual void multiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) = 0;
  /// Blocks until `key` exists with a value other than `old` (at most `timeout`, else
  /// TimeoutError) and returns that value. Watches counters without polling.
  virtual Bytes waitChange(const std::string& key, const Bytes& old,
                           std::chrono::milliseconds timeout) = 0;
  /// Who last wrote `key` ("host:port"), for error messages about what it holds; "" when the
  /// store does not know. Never throws.
  virtual std::string writerOf(const std::string& key) {
    (void)key;
    return {};
  }
};

/// "a, b, c": for error messages that name keys.
std::string joinKeys(const std::vector<std::string>& keys);

}  // namespace dtrun::rendezvous
