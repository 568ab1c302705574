// EtcdStore: dtrun's Store interface (rendezvous/store.h) on etcd, so that the rendezvous protocol
// (rendezvous/dynamic_rendezvous.h) runs unchanged on a replicated store.
//
// COMPARE_SET and APPEND are one etcd transaction guarded by the key's value or revision, retried
// when another client wrote first: etcd serialises them, so they are as atomic as on dtrun's
// store server. ADD is not a compare-and-set (N nodes adding at once would cost N x N/2 failed
// writes, each a raft round): a non-zero delta is a key of its own, K\x01<writer>-<n>, and the
// counter's value is K's value plus every such delta, read at one revision. So an ADD is one
// write and one read, whoever else adds, and the value it returns counts exactly the ADDs at or
// before its own revision (join indices stay unique and dense). A counter is therefore read with
// ADD 0 (as the rendezvous does); GET, SET and COMPARE_SET see only K itself, so a key that is
// ADDed with a non-zero delta must not be used with them (none is, in the rendezvous protocol).
// Waits (GET, WAIT, WAIT_CHANGE) read once and then watch the key from the revision after that
// read: no polling, and no event lost in between. Blocking; one thread at a time (it owns its
// EtcdClient).
#pragma once

#include <memory>

#include "rendezvous/etcd/etcd_client.h"
#include "rendezvous/store.h"

namespace dtrun::rendezvous::etcd {

class EtcdStore : public Store {
 public:
  explicit EtcdStore(std::shared_ptr<EtcdClient> client);

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

  EtcdClient& client() { return *client_; }

  /// The end of a counter's range: [key, counterEnd(key)) holds K and its increments.
  static std::string counterEnd(const std::string& key) { return key + '\x02'; }
  /// A counter's value from a range over [key, counterEnd(key)): K's value plus its increments,
  /// each read as ADD reads a value (std::stoll's way). Throws ProtocolError naming `key` when
  /// one is not a number. Pure.
  static std::int64_t counterValue(const std::string& key, const RangeResponse& r);

 private:
  /// Waits until `key` exists with a value `accept` takes, at most `timeout`.
  Bytes waitFor(const std::string& key, std::chrono::milliseconds timeout,
                const std::function<bool(const Bytes&)>& accept, const char* what);
  /// Read-modify-write of one key: `change(old value or nullopt)` gives the new value.
  Bytes update(const std::string& key,
               const std::function<Bytes(const std::optional<Bytes>&)>& change);

  std::shared_ptr<EtcdClient> client_;
  std::string writer_;       // this store's part of its increments' keys
  std::uint64_t added_ = 0;  // increments written so far
};

}  // namespace dtrun::rendezvous::etcd
