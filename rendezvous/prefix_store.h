// PrefixStore: every key becomes prefix + "/" + key before it reaches the wrapped store
// (torch's PrefixStore::joinKey). numKeys() counts the whole store, as torch's does.
// Each rendezvous round gets its own PrefixStore instead of pasting strings together.
#pragma once

#include <memory>

#include "rendezvous/store.h"

namespace dtrun::rendezvous {

class PrefixStore : public Store {
 public:
  /// Thread-safety is that of `base`.
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

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
  std::string writerOf(const std::string& key) override { return base_->writerOf(joinKey(key)); }

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& base() const { return base_; }
  /// prefix + "/" + key.
  std::string joinKey(const std::string& key) const { return prefix_ + "/" + key; }

 private:
  std::vector<std::string> joinKeys(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace dtrun::rendezvous
