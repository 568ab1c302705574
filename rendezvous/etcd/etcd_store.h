// EtcdStore: dtrun's Store interface (rendezvous/store.h) on etcd, so that the rendezvous protocol
// (rendezvous/dynamic_rendezvous.h) runs unchanged on a replicated store.
//
// Every read-modify-write is one etcd transaction guarded by the key's revision (ADD, APPEND) or
// value (COMPARE_SET), retried when another client wrote first: etcd serialises them, so they
// are as atomic as on dtrun's store server. Waits (GET, WAIT, WAIT_CHANGE) read once and then
// watch the key from the revision after that read: no polling, and no event lost in between.
// Blocking; one thread at a time (it owns its EtcdClient).
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

 private:
  /// Waits until `key` exists with a value `accept` takes, at most `timeout`.
  Bytes waitFor(const std::string& key, std::chrono::milliseconds timeout,
                const std::function<bool(const Bytes&)>& accept, const char* what);
  /// Read-modify-write of one key: `change(old value or nullopt)` gives the new value.
  Bytes update(const std::string& key,
               const std::function<Bytes(const std::optional<Bytes>&)>& change);

  std::shared_ptr<EtcdClient> client_;
};

}  // namespace dtrun::rendezvous::etcd
