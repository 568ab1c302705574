// StoreCore: the key-value map and its waiters, with no I/O.
//
// The server drives it from its one thread; InMemoryStore drives it under a mutex. Semantics are
// torch's libuv TCPStore backend (torch/csrc/distributed/c10d/TCPStoreLibUvBackend.cpp): ADD keeps
// decimal text, COMPARE_SET on a missing key with non-empty `expected` returns `expected` and
// stores nothing, every write (SET, ADD, APPEND, MULTI_SET, COMPARE_SET, BARRIER) wakes the key's
// waiters.
//
// Every write is checked before it changes anything: a value past `maxValueSize` (APPEND's result
// included) or a store past its memory quota is refused with StoreRefused and the store is left
// as it was (docs/store.md, "Limits").
//
// Parked operations (WAIT, BARRIER, WAIT_CHANGE) belong to a client id; at most one per client, as
// torch clients are strictly sequential. When one completes the core calls the wake function
// (synchronously, inside the write that completed it); it must not call back into the core.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "rendezvous/store.h"

namespace dtrun::rendezvous {

/// A request the store will not carry out (a value or the store too large); nothing changed.
class StoreRefused : public ProtocolError {
 public:
  using ProtocolError::ProtocolError;
};

struct StoreQuota {
  std::size_t maxValueSize = 64 * 1024 * 1024;  ///< largest value any write may leave
  /// Bytes the store may hold: keys, values, queues (each entry charged kEntryOverhead more),
  /// plus what setExternalBytes() says the connections hold.
  std::size_t maxBytes = std::size_t{2} * 1024 * 1024 * 1024;
};

class StoreCore {
 public:
  using ClientId = std::uint64_t;
  /// Called when the parked operation of `client` completes; the reply is STOP_WAITING.
  using WakeFn = std::function<void(ClientId client)>;
  /// Bytes charged per key or queue element on top of its contents (hash node, string headers).
  static constexpr std::size_t kEntryOverhead = 64;

  explicit StoreCore(WakeFn wake = {}, StoreQuota quota = {})
      : wake_(std::move(wake)), quota_(quota) {}
  StoreCore(const StoreCore&) = delete;
  StoreCore& operator=(const StoreCore&) = delete;

  /// Bytes held now (what StoreQuota::maxBytes bounds, without the external bytes).
  std::size_t bytes() const { return bytes_; }
  /// Bytes held outside the core that count against the quota (requests arriving, replies
  /// waiting to be sent); the server keeps it up to date.
  void setExternalBytes(std::size_t n) { external_ = n; }
  /// Throws StoreRefused unless `more` bytes fit in the quota.
  void admit(std::size_t more, const std::string& what) const;
  const StoreQuota& quota() const { return quota_; }

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
  /// The keys, not copied; valid until the next write.
  std::vector<std::reference_wrapper<const std::string>> keyNames() const;

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

  /// Close actions one client may register (StoreRefused past it).
  static constexpr std::size_t kMaxCloseActions = 1024;
  /// ADD_ON_CLOSE: `delta` is added to `key` when dropClient(client) runs.
  void addOnClose(ClientId client, const std::string& key, std::int64_t delta);
  /// The client went away: forget its parked operation, run its close actions.
  void dropClient(ClientId client);

  using Clock = std::chrono::steady_clock;
  /// `client`, which has close actions, sent something at `now` (what DTRUN_HEARD tells).
  void noteHeard(ClientId client, Clock::time_point now);
  /// DTRUN_HEARD: how long before `now` the connection that last registered a close action on
  /// `key` was heard from; nullopt when no open connection holds one (it closed: the action
  /// ran). An agent's membership connection pings every keep-alive interval, so this is how
  /// long ago the store last heard from that agent.
  std::optional<std::chrono::milliseconds> heardAgo(const std::string& key,
                                                    Clock::time_point now) const;

  /// Records `who` (a client's address) as the last writer of `key`, for error messages
  /// (DTRUN_WRITER). Best effort: skipped when the record would pass the quota. The server
  /// records the protected keys only (docs/store.md, "Shared secret").
  void noteWriter(const std::string& key, const std::string& who);
  /// The last writer noted for `key`, or nullptr.
  const std::string* writerOf(const std::string& key) const;

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
  /// Sets `key` to `value` (moved from an rvalue, else copied into the entry's buffer) once
  /// `op`'s checks pass, and wakes its waiters.
  template <typename Value>
  void replace(const std::string& key, Value&& value, const char* op);
  /// Refuses a value of `size` bytes at `key` when it passes maxValueSize.
  void checkValue(const std::string& key, std::size_t size, const char* op) const;
  /// Admits (StoreRefused) growing the store from `oldBytes` to `newBytes` for one entry; call
  /// before the change, then record() after it.
  void admitChange(std::size_t oldBytes, std::size_t newBytes, const std::string& key,
                   const char* op) const;
  void record(std::size_t oldBytes, std::size_t newBytes) { bytes_ = bytes_ - oldBytes + newBytes; }
  /// What an entry of `key` holding `size` bytes is charged; 0 when `present` is false.
  static std::size_t entryBytes(const std::string& key, std::size_t size, bool present = true) {
    return present ? key.size() + size + kEntryOverhead : 0;
  }

  std::unordered_map<std::string, Bytes> map_;
  std::unordered_map<std::string, std::deque<Bytes>> queues_;
  std::unordered_map<std::string, std::vector<ClientId>> waiters_;
  std::unordered_map<ClientId, Parked> parked_;
  std::unordered_map<ClientId, std::vector<std::pair<std::string, std::int64_t>>> closeActions_;
  // DTRUN_HEARD: the client whose close action on a key came last, and when each client with
  // close actions was last heard from. Bounded as the close actions are.
  std::unordered_map<std::string, ClientId> closeKeyOwner_;
  std::unordered_map<ClientId, Clock::time_point> heard_;
  std::unordered_map<std::string, std::string> writers_;  // charged like entries
  WakeFn wake_;
  StoreQuota quota_;
  std::size_t bytes_ = 0;
  std::size_t external_ = 0;
};

}  // namespace dtrun::rendezvous
