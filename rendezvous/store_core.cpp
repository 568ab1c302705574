#include "rendezvous/store_core.h"

#include <algorithm>
#include <cctype>
#include <type_traits>
#include <unordered_set>

#include "common/decimal.h"
#include "common/error.h"
#include "common/log_text.h"

namespace dtrun::rendezvous {

void StoreCore::admit(std::size_t more, const std::string& what) const {
  const std::size_t held = bytes_ + external_;
  if (more > quota_.maxBytes || held > quota_.maxBytes - more) {
    throw StoreRefused(what + " refused: " + std::to_string(more) +
                       " more bytes would pass the store's memory quota of " +
                       std::to_string(quota_.maxBytes) + " (" + std::to_string(held) + " held)");
  }
}

void StoreCore::checkValue(const std::string& key, std::size_t size, const char* op) const {
  if (size > quota_.maxValueSize) {
    throw StoreRefused(std::string(op) + " refused: the value of " + escapeForLog(key) +
                       " would be " + std::to_string(size) + " bytes, past the limit of " +
                       std::to_string(quota_.maxValueSize));
  }
}

void StoreCore::admitChange(std::size_t oldBytes, std::size_t newBytes, const std::string& key,
                            const char* op) const {
  if (newBytes > oldBytes) admit(newBytes - oldBytes, std::string(op) + " " + escapeForLog(key));
}

template <typename Value>
void StoreCore::replace(const std::string& key, Value&& value, const char* op) {
  checkValue(key, value.size(), op);
  auto it = map_.find(key);
  const std::size_t before = it == map_.end() ? 0 : entryBytes(key, it->second.size());
  const std::size_t after = entryBytes(key, value.size());
  admitChange(before, after, key, op);
  if constexpr (std::is_rvalue_reference_v<Value&&>) {
    map_[key] = std::move(value);
  } else {
    map_[key].assign(value);  // into the entry's own buffer: no allocation for a key set again
  }
  record(before, after);
  wakeKey(key);
}

void StoreCore::set(const std::string& key, Bytes&& value) {
  replace(key, std::move(value), "SET");
}

void StoreCore::set(const std::string& key, const Bytes& value) { replace(key, value, "SET"); }

const Bytes* StoreCore::find(const std::string& key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

std::int64_t StoreCore::add(const std::string& key, std::int64_t delta) {
  std::int64_t current = 0;
  auto it = map_.find(key);
  if (it != map_.end()) {
    auto parsed = parseLeadingDecimal(it->second);
    if (!parsed) {
      throw StoreRefused("ADD on key " + escapeForLog(key) + " whose value is not an integer");
    }
    current = *parsed;
  }
  std::int64_t sum = 0;
  if (__builtin_add_overflow(current, delta, &sum)) {
    throw StoreRefused("ADD on key " + escapeForLog(key) + " overflows 64 bits");
  }
  replace(key, std::to_string(sum), "ADD");
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
    checkValue(key, desired.size(), "COMPARE_SET");
    const std::size_t after = entryBytes(key, desired.size());
    admitChange(0, after, key, "COMPARE_SET");
    it = map_.emplace(key, std::move(desired)).first;
    record(0, after);
  } else if (it->second == expected) {
    checkValue(key, desired.size(), "COMPARE_SET");
    const std::size_t before = entryBytes(key, it->second.size());
    const std::size_t after = entryBytes(key, desired.size());
    admitChange(before, after, key, "COMPARE_SET");
    it->second = std::move(desired);
    record(before, after);
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

bool StoreCore::deleteKey(const std::string& key) {
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  record(entryBytes(key, it->second.size()), 0);
  map_.erase(it);
  if (auto w = writers_.find(key); w != writers_.end()) {
    record(entryBytes(key, w->second.size()), 0);
    writers_.erase(w);
  }
  return true;
}

void StoreCore::noteWriter(const std::string& key, const std::string& who) {
  auto it = writers_.find(key);
  const std::size_t before = it == writers_.end() ? 0 : entryBytes(key, it->second.size());
  const std::size_t after = entryBytes(key, who.size());
  if (after > before && (bytes_ + external_ > quota_.maxBytes ||
                         after - before > quota_.maxBytes - bytes_ - external_)) {
    return;  // a name for an error message is not worth refusing a write
  }
  if (it == writers_.end()) {
    writers_.emplace(key, who);
  } else {
    it->second = who;
  }
  record(before, after);
}

const std::string* StoreCore::writerOf(const std::string& key) const {
  auto it = writers_.find(key);
  return it == writers_.end() ? nullptr : &it->second;
}

void StoreCore::append(const std::string& key, const Bytes& value) {
  auto it = map_.find(key);
  const std::size_t old = it == map_.end() ? 0 : it->second.size();
  checkValue(key, old + value.size(), "APPEND");
  const std::size_t before = it == map_.end() ? 0 : entryBytes(key, old);
  const std::size_t after = entryBytes(key, old + value.size());
  admitChange(before, after, key, "APPEND");
  map_[key] += value;
  record(before, after);
  wakeKey(key);
}

void StoreCore::multiSet(const std::vector<std::string>& keys, std::vector<Bytes> values) {
  const std::size_t n = std::min(keys.size(), values.size());
  // All or nothing: the whole request is checked before the first key changes. A key named
  // twice is charged twice, which only errs on the safe side.
  std::size_t grow = 0;
  for (std::size_t i = 0; i < n; ++i) {
    checkValue(keys[i], values[i].size(), "MULTI_SET");
    auto it = map_.find(keys[i]);
    const std::size_t before = it == map_.end() ? 0 : entryBytes(keys[i], it->second.size());
    const std::size_t after = entryBytes(keys[i], values[i].size());
    if (after > before) grow += after - before;
  }
  admit(grow, "MULTI_SET of " + std::to_string(n) + " keys");
  for (std::size_t i = 0; i < n; ++i) {
    auto& slot = map_[keys[i]];
    const std::size_t before = entryBytes(keys[i], slot.size());
    slot = std::move(values[i]);
    record(before, entryBytes(keys[i], slot.size()));
  }
  for (std::size_t i = 0; i < n; ++i) wakeKey(keys[i]);
}

std::vector<std::string> StoreCore::listKeys() const {
  std::vector<std::string> keys;
  keys.reserve(map_.size());
  for (const auto& kv : map_) keys.push_back(kv.first);
  return keys;
}

std::vector<std::reference_wrapper<const std::string>> StoreCore::keyNames() const {
  std::vector<std::reference_wrapper<const std::string>> keys;
  keys.reserve(map_.size());
  for (const auto& kv : map_) keys.emplace_back(kv.first);
  return keys;
}

void StoreCore::queuePush(const std::string& key, Bytes value) {
  checkValue(key, value.size(), "QUEUE_PUSH");
  const std::size_t grow = entryBytes(key, value.size());
  admitChange(0, grow, key, "QUEUE_PUSH");
  queues_[key].push_back(std::move(value));
  record(0, grow);
  wakeOne(key);
}

std::optional<Bytes> StoreCore::queuePop(const std::string& key, std::int64_t* lengthBefore) {
  auto it = queues_.find(key);
  *lengthBefore = it == queues_.end() ? 0 : static_cast<std::int64_t>(it->second.size());
  if (*lengthBefore == 0) return std::nullopt;
  Bytes front = std::move(it->second.front());
  it->second.pop_front();
  record(entryBytes(key, front.size()), 0);
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
  // A hash set removes repeated keys in linear time (a WAIT may name 128K keys).
  std::unordered_set<std::string_view> seen;
  for (const auto& k : keys) {
    if (map_.count(k)) continue;
    if (auto q = queues_.find(k); q != queues_.end() && !q->second.empty()) continue;
    if (seen.insert(k).second) p.keys.push_back(k);
  }
  if (p.keys.empty()) return true;
  p.remaining = p.keys.size();
  park(client, std::move(p));
  return false;
}

bool StoreCore::barrier(ClientId client, const std::string& key, std::int64_t worldSize) {
  if (add(key, 1) >= worldSize) return true;
  park(client, Parked{ParkKind::kBarrier, {key}, 0, worldSize, {}});
  return false;
}

bool StoreCore::waitChange(ClientId client, const std::string& key, const Bytes& old) {
  const Bytes* v = find(key);
  if (v && *v != old) return true;
  park(client, Parked{ParkKind::kChange, {key}, 0, 0, old});
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
  auto& actions = closeActions_[client];
  if (actions.size() >= kMaxCloseActions) {
    throw StoreRefused("ADD_ON_CLOSE refused: a connection may register " +
                       std::to_string(kMaxCloseActions) + " close actions");
  }
  actions.emplace_back(key, delta);
  closeKeyOwner_[key] = client;
}

void StoreCore::noteHeard(ClientId client, Clock::time_point now) {
  if (closeActions_.count(client)) heard_[client] = now;
}

std::optional<std::chrono::milliseconds> StoreCore::heardAgo(const std::string& key,
                                                             Clock::time_point now) const {
  auto owner = closeKeyOwner_.find(key);
  if (owner == closeKeyOwner_.end()) return std::nullopt;
  auto when = heard_.find(owner->second);
  if (when == heard_.end()) return std::nullopt;
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(now - when->second));
}

void StoreCore::dropClient(ClientId client) {
  cancelWait(client);
  auto it = closeActions_.find(client);
  if (it == closeActions_.end()) return;
  auto actions = std::move(it->second);
  closeActions_.erase(it);
  heard_.erase(client);
  for (const auto& [key, delta] : actions) {
    if (auto owner = closeKeyOwner_.find(key);
        owner != closeKeyOwner_.end() && owner->second == client) {
      closeKeyOwner_.erase(owner);
    }
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
      auto count = v ? parseLeadingDecimal(*v) : std::nullopt;
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
