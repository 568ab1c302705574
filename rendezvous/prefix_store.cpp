#include "rendezvous/prefix_store.h"

namespace dtrun::rendezvous {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {}

std::vector<std::string> PrefixStore::joinKeys(const std::vector<std::string>& keys) const {
  std::vector<std::string> joined;
  joined.reserve(keys.size());
  for (const auto& k : keys) joined.push_back(joinKey(k));
  return joined;
}

void PrefixStore::set(const std::string& key, const Bytes& value) {
  base_->set(joinKey(key), value);
}

Bytes PrefixStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return base_->get(joinKey(key), timeout);
}

std::int64_t PrefixStore::add(const std::string& key, std::int64_t delta) {
  return base_->add(joinKey(key), delta);
}

Bytes PrefixStore::compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  return base_->compareSet(joinKey(key), expected, desired);
}

bool PrefixStore::check(const std::vector<std::string>& keys) {
  return base_->check(joinKeys(keys));
}

void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  base_->wait(joinKeys(keys), timeout);
}

bool PrefixStore::deleteKey(const std::string& key) { return base_->deleteKey(joinKey(key)); }

std::int64_t PrefixStore::numKeys() { return base_->numKeys(); }

void PrefixStore::append(const std::string& key, const Bytes& value) {
  base_->append(joinKey(key), value);
}

std::vector<Bytes> PrefixStore::multiGet(const std::vector<std::string>& keys,
                                         std::chrono::milliseconds timeout) {
  return base_->multiGet(joinKeys(keys), timeout);
}

void PrefixStore::multiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  base_->multiSet(joinKeys(keys), values);
}

Bytes PrefixStore::waitChange(const std::string& key, const Bytes& old,
                              std::chrono::milliseconds timeout) {
  return base_->waitChange(joinKey(key), old, timeout);
}

}  // namespace dtrun::rendezvous
