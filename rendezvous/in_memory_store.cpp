#include "rendezvous/in_memory_store.h"

#include "common/error.h"

namespace dtrun::rendezvous {

using std::chrono::milliseconds;

template <typename Ready>
bool InMemoryStore::block(std::unique_lock<std::mutex>& lock, milliseconds timeout, Ready ready) {
  if (ready()) return true;
  ++blocked_;
  bool ok = true;
  if (timeout == kNoTimeout) {
    changed_.wait(lock, ready);
  } else {
    ok = changed_.wait_for(lock, timeout, ready);
  }
  --blocked_;
  return ok;
}

int InMemoryStore::blockedWaiters() {
  std::lock_guard lock(mutex_);
  return blocked_;
}

void InMemoryStore::waitLocked(std::unique_lock<std::mutex>& lock,
                               const std::vector<std::string>& keys, milliseconds timeout) {
  if (!block(lock, timeout, [&] { return core_.check(keys); })) {
    throw TimeoutError("in-memory store: wait timeout after " + std::to_string(timeout.count()) +
                       " ms, keys: " + joinKeys(keys));
  }
}

void InMemoryStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard lock(mutex_);
    core_.set(key, value);
  }
  changed_.notify_all();
}

Bytes InMemoryStore::get(const std::string& key, milliseconds timeout) {
  std::unique_lock lock(mutex_);
  waitLocked(lock, {key}, timeout);
  return *core_.find(key);
}

std::int64_t InMemoryStore::add(const std::string& key, std::int64_t delta) {
  std::int64_t v = 0;
  {
    std::lock_guard lock(mutex_);
    v = core_.add(key, delta);
  }
  changed_.notify_all();
  return v;
}

Bytes InMemoryStore::compareSet(const std::string& key, const Bytes& expected,
                                const Bytes& desired) {
  Bytes v;
  {
    std::lock_guard lock(mutex_);
    v = core_.compareSet(key, expected, desired);
  }
  changed_.notify_all();
  return v;
}

bool InMemoryStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mutex_);
  return core_.check(keys);
}

void InMemoryStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  std::unique_lock lock(mutex_);
  waitLocked(lock, keys, timeout);
}

bool InMemoryStore::deleteKey(const std::string& key) {
  std::lock_guard lock(mutex_);
  return core_.deleteKey(key);
}

std::int64_t InMemoryStore::numKeys() {
  std::lock_guard lock(mutex_);
  return core_.numKeys();
}

void InMemoryStore::append(const std::string& key, const Bytes& value) {
  {
    std::lock_guard lock(mutex_);
    core_.append(key, value);
  }
  changed_.notify_all();
}

std::vector<Bytes> InMemoryStore::multiGet(const std::vector<std::string>& keys,
                                           milliseconds timeout) {
  std::unique_lock lock(mutex_);
  waitLocked(lock, keys, timeout);
  std::vector<Bytes> values;
  values.reserve(keys.size());
  for (const auto& k : keys) values.push_back(*core_.find(k));
  return values;
}

void InMemoryStore::multiSet(const std::vector<std::string>& keys,
                             const std::vector<Bytes>& values) {
  if (keys.size() != values.size()) {
    throw ConfigError("multiSet: " + std::to_string(keys.size()) + " keys but " +
                      std::to_string(values.size()) + " values");
  }
  {
    std::lock_guard lock(mutex_);
    core_.multiSet(keys, values);
  }
  changed_.notify_all();
}

Bytes InMemoryStore::waitChange(const std::string& key, const Bytes& old, milliseconds timeout) {
  std::unique_lock lock(mutex_);
  auto changed = [&] {
    const Bytes* v = core_.find(key);
    return v && *v != old;
  };
  if (!block(lock, timeout, changed)) {
    throw TimeoutError("in-memory store: no change of '" + key + "' after " +
                       std::to_string(timeout.count()) + " ms");
  }
  return *core_.find(key);
}

}  // namespace dtrun::rendezvous
