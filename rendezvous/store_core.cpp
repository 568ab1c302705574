#include "rendezvous/store_core.h"

#include <algorithm>
#include <cctype>

#include "common/error.h"

namespace dtrun::rendezvous {

std::optional<std::int64_t> parseDecimal(const Bytes& text) {
  std::size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  std::int64_t value = 0;
  std::size_t digits = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++digits) {
    // Accumulate negatively so that INT64_MIN parses, as std::stoll does.
    if (__builtin_mul_overflow(value, 10, &value) ||
        __builtin_sub_overflow(value, text[i] - '0', &value)) {
      return std::nullopt;
    }
  }
  if (digits == 0) return std::nullopt;
  if (!negative && __builtin_mul_overflow(value, -1, &value)) return std::nullopt;
  return value;
}

void StoreCore::set(const std::string& key, Bytes&& value) {
  map_[key] = std::move(value);
  wakeKey(key);
}

void StoreCore::set(const std::string& key, const Bytes& value) {
  map_[key].assign(value);  // into the entry's own buffer: no allocation for a key set again
  wakeKey(key);
}

const Bytes* StoreCore::find(const std::string& key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

std::int64_t StoreCore::add(const std::string& key, std::int64_t delta) {
  std::int64_t current = 0;
  auto it = map_.find(key);
  if (it != map_.end()) {
    auto parsed = parseDecimal(it->second);
    if (!parsed) throw ProtocolError("ADD on key '" + key + "' whose value is not an integer");
    current = *parsed;
  }
  std::int64_t sum = 0;
  if (__builtin_add_overflow(current, delta, &sum)) {
    throw ProtocolError("ADD on key '" + key + "' overflows 64 bits");
  }
  map_[key] = std::to_string(sum);
  wakeKey(key);
  return sum;
}

Bytes StoreCore::compareSet(const std::string& key, const Bytes& expected, Bytes desired) {
  auto it = map_.find(key);
  if (it == map_.end()) {
    if (!expected.empty()) {
      // torch answers `expected` without storing anything (checked against 1.13). libuv also
      // wakes the key's waiters here, which lets a WAIT return for a key that does not exist;
      // dtrun does not copy that.
      return expected;
    }
    it = map_.emplace(key, std::move(desired)).first;
  } else if (it->second == expected) {
    it->second = std::move(desired);
  }
  Bytes current = it->second;
  wakeKey(key);  // libuv wakes waiters in every branch
  return current;
}

bool StoreCore::check(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [this](const std::string& k) {
    if (map_.count(k)) return true;
    auto q = queues_.find(k);
    return q != queues_.end() && !q->second.empty();
  });
}

bool StoreCore::deleteKey(const std::string& key) { return map_.erase(key) != 0; }

void StoreCore::append(const std::string& key, const Bytes& value) {
  map_[key] += value;
  wakeKey(key);
}

void StoreCore::multiSet(const std::vector<std::string>& keys, std::vector<Bytes> values) {
  for (std::size_t i = 0; i < keys.size() && i < values.size(); ++i) {
    map_[keys[i]] = std::move(values[i]);
  }
  for (const auto& k : keys) wakeKey(k);
}

std::vector<std::string> StoreCore::listKeys() const {
  std::vector<std::string> keys;
  keys.reserve(map_.size());
  for (const auto& kv : map_) keys.push_back(kv.first);
  return keys;
}

void StoreCore::queuePush(const std::string& key, Bytes value) {
  queues_[key].push_back(std::move(value));
  wakeOne(key);
}

std::optional<Bytes> StoreCore::queuePop(const std::string& key, std::int64_t* lengthBefore) {
  auto it = queues_.find(key);
  *lengthBefore = it == queues_.end() ? 0 : static_cast<std::int64_t>(it->second.size());
  if (*lengthBefore == 0) return std::nullopt;
  Bytes front = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) queues_.erase(it);
  return front;
}

std::int64_t StoreCore::queueLen(const std::string& key) const {
  auto it = queues_.find(key);
  return it == queues_.end() ? 0 : static_cast<std::int64_t>(it->second.size());
}

bool StoreCore::wait(ClientId client, const std::vector<std::string>& keys) {
  Parked p;
  p.kind = ParkKind::kKeys;
  for (const auto& k : keys) {
    if (check({k})) continue;
    if (std::find(p.keys.begin(), p.keys.end(), k) == p.keys.end()) p.keys.push_back(k);
  }
  if (p.keys.empty()) return true;
  p.remaining = p.keys.size();
  park(client, std::move(p));
  return false;
}

bool StoreCore::barrier(ClientId client, const std::string& key, std::int64_t worldSize) {
  if (add(key, 1) >= worldSize) return true;
  Parked p;
  p.kind = ParkKind::kBarrier;
  p.keys = {key};
  p.worldSize = worldSize;
  park(client, std::move(p));
  return false;
}

bool StoreCore::waitChange(ClientId client, const std::string& key, const Bytes& old) {
  const Bytes* v = find(key);
  if (v && *v != old) return true;
  Parked p;
  p.kind = ParkKind::kChange;
  p.keys = {key};
  p.old = old;
  park(client, std::move(p));
  return false;
}

bool StoreCore::cancelWait(ClientId client) {
  auto it = parked_.find(client);
  if (it == parked_.end()) return false;
  unlist(client, it->second);
  parked_.erase(it);
  return true;
}

void StoreCore::addOnClose(ClientId client, const std::string& key, std::int64_t delta) {
  closeActions_[client].emplace_back(key, delta);
}

void StoreCore::dropClient(ClientId client) {
  cancelWait(client);
  auto it = closeActions_.find(client);
  if (it == closeActions_.end()) return;
  auto actions = std::move(it->second);
  closeActions_.erase(it);
  for (const auto& [key, delta] : actions) {
    try {
      add(key, delta);
    } catch (const Error&) {
      // Somebody overwrote the counter with a non-number; there is no client left to tell.
    }
  }
}

void StoreCore::park(ClientId client, Parked parked) {
  cancelWait(client);  // a sequential client has at most one parked operation
  for (const auto& k : parked.keys) waiters_[k].push_back(client);
  parked_[client] = std::move(parked);
}

void StoreCore::unlist(ClientId client, const Parked& parked) {
  for (const auto& k : parked.keys) {
    auto w = waiters_.find(k);
    if (w == waiters_.end()) continue;
    auto& v = w->second;
    v.erase(std::remove(v.begin(), v.end(), client), v.end());
    if (v.empty()) waiters_.erase(w);
  }
}

bool StoreCore::progress(ClientId, Parked& parked, const std::string& key) {
  switch (parked.kind) {
    case ParkKind::kKeys:
      // Torch counts writes per awaited key, each key once (its waiter list is consumed).
      return --parked.remaining == 0;
    case ParkKind::kBarrier: {
      const Bytes* v = find(key);
      auto count = v ? parseDecimal(*v) : std::nullopt;
      return count && *count >= parked.worldSize;
    }
    case ParkKind::kChange: {
      const Bytes* v = find(key);
      return v && *v != parked.old;
    }
  }
  return false;
}

void StoreCore::complete(ClientId client) {
  auto it = parked_.find(client);
  if (it == parked_.end()) return;
  unlist(client, it->second);
  parked_.erase(it);
  if (wake_) wake_(client);
}

void StoreCore::wakeKey(const std::string& key) {
  if (waiters_.empty()) return;  // the common case: nobody waits, no second hash
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  std::vector<ClientId> clients = std::move(it->second);
  waiters_.erase(it);
  std::vector<ClientId> still;
  for (ClientId c : clients) {
    auto p = parked_.find(c);
    if (p == parked_.end()) continue;
    if (progress(c, p->second, key)) {
      complete(c);
    } else if (p->second.kind != ParkKind::kKeys) {
      still.push_back(c);  // conditions that are re-checked stay listed under the key
    }
  }
  if (!still.empty()) {
    auto& v = waiters_[key];
    v.insert(v.end(), still.begin(), still.end());
  }
}

void StoreCore::wakeOne(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  auto& v = it->second;
  for (std::size_t i = 0; i < v.size(); ++i) {
    ClientId c = v[i];
    auto p = parked_.find(c);
    if (p == parked_.end()) continue;
    if (p->second.kind == ParkKind::kKeys) {
      v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
      if (v.empty()) waiters_.erase(it);
      if (progress(c, p->second, key)) complete(c);
      return;
    }
  }
}

}  // namespace dtrun::rendezvous
