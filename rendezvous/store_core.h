// StoreCore: the key-value map and its waiters, with no I/O.
//
// The server drives it from its one thread; InMemoryStore drives it under a mutex. Semantics are
// torch's libuv TCPStore backend (reference/torchrun-spec.md §3.4): ADD keeps decimal text,
// COMPARE_SET on a missing key with non-empty `expected` returns `expected` and stores nothing,
// every write (SET, ADD, APPEND, MULTI_SET, COMPARE_SET, BARRIER) wakes the key's waiters.
//
// Parked operations (WAIT, BARRIER, WAIT_CHANGE) belong to a client id; at most one per client, as
// torch clients are strictly sequential. When one completes the core calls the wake function
// (synchronously, inside the write that completed it); it must not call back into the core.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "rendezvous/store.h"

namespace dtrun::rendezvous {

class StoreCore {
 public:
  using ClientId = std::uint64_t;
  /// Called when the parked operation of `client` completes; the reply is STOP_WAITING.
  using WakeFn = std::function<void(ClientId client)>;

  explicit StoreCore(WakeFn wake = {}) : wake_(std::move(wake)) {}
  StoreCore(const StoreCore&) = delete;
  StoreCore& operator=(const StoreCore&) = delete;

  /// Takes the value's buffer (large values).
  void set(const std::string& key, Bytes&& value);
  /// Copies into the entry's buffer, which a key set again and again reuses (small values).
  void set(const std::string& key, const Bytes& value);
  /// The value, or nullptr when the key is absent. Valid until the next write.
  const Bytes* find(const std::string& key) const;
  /// Throws ProtocolError when the stored value is not a decimal integer or the sum overflows.
  std::int64_t add(const std::string& key, std::int64_t delta);
  Bytes compareSet(const std::string& key, const Bytes& expected, Bytes desired);
  /// Every key exists in the map or names a non-empty queue (libuv's CHECK).
  bool check(const std::vector<std::string>& keys) const;
  bool deleteKey(const std::string& key);
  std::int64_t numKeys() const { return static_cast<std::int64_t>(map_.size()); }
  void append(const std::string& key, const Bytes& value);
  void multiSet(const std::vector<std::string>& keys, std::vector<Bytes> values);
  std::vector<std::string> listKeys() const;

  void queuePush(const std::string& key, Bytes value);
  /// Pops the front element; `lengthBefore` receives the queue length before the pop.
  std::optional<Bytes> queuePop(const std::string& key, std::int64_t* lengthBefore);
  std::int64_t queueLen(const std::string& key) const;

  /// WAIT: true when every key exists now; otherwise parks `client` and returns false.
  bool wait(ClientId client, const std::vector<std::string>& keys);
  /// BARRIER: adds 1 to the counter at `key`; true when it reached `worldSize`, else parks.
  bool barrier(ClientId client, const std::string& key, std::int64_t worldSize);
  /// WAIT_CHANGE: true when `key` exists with a value other than `old`, else parks.
  bool waitChange(ClientId client, const std::string& key, const Bytes& old);
  /// CANCEL_WAIT: drops the parked operation of `client`; true if there was one.
  bool cancelWait(ClientId client);
  bool isParked(ClientId client) const { return parked_.count(client) != 0; }

  /// ADD_ON_CLOSE: `delta` is added to `key` when dropClient(client) runs.
  void addOnClose(ClientId client, const std::string& key, std::int64_t delta);
  /// The client went away: forget its parked operation, run its close actions.
  void dropClient(ClientId client);

 private:
  enum class ParkKind : std::uint8_t { kKeys, kBarrier, kChange };
  struct Parked {
    ParkKind kind = ParkKind::kKeys;
    std::vector<std::string> keys;  // keys this client is listed under in waiters_
    std::size_t remaining = 0;      // kKeys: keys not yet written
    std::int64_t worldSize = 0;     // kBarrier
    Bytes old;                      // kChange
  };

  void park(ClientId client, Parked parked);
  void unlist(ClientId client, const Parked& parked);
  /// A write happened to `key`: let every client parked on it re-evaluate.
  void wakeKey(const std::string& key);
  /// QUEUE_PUSH: only the first client waiting on the key is woken (libuv).
  void wakeOne(const std::string& key);
  /// Re-evaluates one parked client after a write to `key`; true when it completed.
  bool progress(ClientId client, Parked& parked, const std::string& key);
  void complete(ClientId client);

  std::unordered_map<std::string, Bytes> map_;
  std::unordered_map<std::string, std::deque<Bytes>> queues_;
  std::unordered_map<std::string, std::vector<ClientId>> waiters_;
  std::unordered_map<ClientId, Parked> parked_;
  std::unordered_map<ClientId, std::vector<std::pair<std::string, std::int64_t>>> closeActions_;
  WakeFn wake_;
};

/// Parses decimal text as std::stoll does (leading spaces, sign, digits, trailing bytes ignored).
std::optional<std::int64_t> parseDecimal(const Bytes& text);

}  // namespace dtrun::rendezvous
