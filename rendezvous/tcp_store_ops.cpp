// TcpStore's Store operations (rendezvous/tcp_store.h): each is one request through call() or,
// for the waits, parkedCall(), whose connection handling is rendezvous/tcp_store.cpp's.
#include <algorithm>
#include <mutex>

#include "common/decimal.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/wire.h"

namespace dtrun::rendezvous {

using std::chrono::milliseconds;
using wire::makeRequest;
using wire::Op;

void TcpStore::waitLocked(const std::vector<std::string>& keys, milliseconds timeout) {
  wire::Request req = makeRequest(Op::kWait);
  for (const auto& k : keys) req.keys.push_back(key(k));
  parkedCall(req, timeout, "wait for keys " + joinKeys(req.keys));
}

void TcpStore::set(const std::string& k, const Bytes& value) {
  std::lock_guard lock(mutex_);
  call(makeRequest(Op::kSet, {key(k)}, {value}), "set " + key(k));
}

Bytes TcpStore::get(const std::string& k, milliseconds timeout) {
  std::lock_guard lock(mutex_);
  waitLocked({k}, timeout);
  return std::move(call(makeRequest(Op::kGet, {key(k)}), "get " + key(k)).values.at(0));
}

std::int64_t TcpStore::add(const std::string& k, std::int64_t delta) {
  std::lock_guard lock(mutex_);
  return call(makeRequest(Op::kAdd, {key(k)}, {}, delta), "add " + key(k)).number;
}

Bytes TcpStore::compareSet(const std::string& k, const Bytes& expected, const Bytes& desired) {
  std::lock_guard lock(mutex_);
  return std::move(
      call(makeRequest(Op::kCompareSet, {key(k)}, {expected, desired}), "compare_set " + key(k))
          .values.at(0));
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mutex_);
  wire::Request req = makeRequest(Op::kCheck);
  for (const auto& k : keys) req.keys.push_back(key(k));
  return call(req, "check " + joinKeys(req.keys)).status == wire::kCheckReady;
}

void TcpStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  std::lock_guard lock(mutex_);
  waitLocked(keys, timeout);
}

bool TcpStore::deleteKey(const std::string& k) {
  std::lock_guard lock(mutex_);
  return call(makeRequest(Op::kDeleteKey, {key(k)}), "delete_key " + key(k)).number == 1;
}

std::int64_t TcpStore::numKeys() {
  std::lock_guard lock(mutex_);
  return call(makeRequest(Op::kNumKeys), "num_keys").number;
}

void TcpStore::append(const std::string& k, const Bytes& value) {
  requireTorch2("APPEND");
  std::lock_guard lock(mutex_);
  call(makeRequest(Op::kAppend, {key(k)}, {value}), "append " + key(k));
}

std::vector<Bytes> TcpStore::multiGet(const std::vector<std::string>& keys, milliseconds timeout) {
  std::lock_guard lock(mutex_);
  waitLocked(keys, timeout);
  if (options_.dialect == wire::Dialect::kTorch113) {
    std::vector<Bytes> values;  // 1.13 has no MULTI_GET: one GET each, keys already present
    values.reserve(keys.size());
    for (const auto& k : keys) {
      values.push_back(
          std::move(call(makeRequest(Op::kGet, {key(k)}), "get " + key(k)).values.at(0)));
    }
    return values;
  }
  wire::Request req = makeRequest(Op::kMultiGet);
  for (const auto& k : keys) req.keys.push_back(key(k));
  return std::move(call(req, "multi_get " + joinKeys(req.keys)).values);
}

void TcpStore::multiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  if (keys.size() != values.size()) {
    throw ConfigError("multiSet: " + std::to_string(keys.size()) + " keys but " +
                      std::to_string(values.size()) + " values");
  }
  std::lock_guard lock(mutex_);
  if (options_.dialect == wire::Dialect::kTorch113) {
    for (std::size_t i = 0; i < keys.size(); ++i) {
      call(makeRequest(Op::kSet, {key(keys[i])}, {values[i]}), "set " + key(keys[i]));
    }
    return;
  }
  wire::Request req = makeRequest(Op::kMultiSet, {}, values);
  for (const auto& k : keys) req.keys.push_back(key(k));
  call(req, "multi_set " + joinKeys(req.keys));
}

void TcpStore::ping() {
  requireTorch2("PING");
  std::lock_guard lock(mutex_);
  auto req = makeRequest(Op::kPing, {}, {}, 0, static_cast<std::uint32_t>(::getpid()));
  if (call(req, "ping").word != req.word) fail("ping", "wrong nonce in the reply");
}

void TcpStore::queuePush(const std::string& k, const Bytes& value) {
  requireTorch2("QUEUE_PUSH");
  std::lock_guard lock(mutex_);
  call(makeRequest(Op::kQueuePush, {key(k)}, {value}), "queue_push " + key(k));
}

std::optional<Bytes> TcpStore::queuePop(const std::string& k, milliseconds timeout) {
  requireTorch2("QUEUE_POP");
  std::lock_guard lock(mutex_);
  if (timeout > milliseconds::zero()) waitLocked({k}, timeout);
  wire::Reply r = call(makeRequest(Op::kQueuePop, {key(k)}), "queue_pop " + key(k));
  if (r.values.empty()) return std::nullopt;
  return std::move(r.values[0]);
}

std::int64_t TcpStore::queueLen(const std::string& k) {
  requireTorch2("QUEUE_LEN");
  std::lock_guard lock(mutex_);
  return call(makeRequest(Op::kQueueLen, {key(k)}), "queue_len " + key(k)).number;
}

std::vector<std::string> TcpStore::listKeys() {
  requireTorch2("LIST_KEYS");
  std::lock_guard lock(mutex_);
  wire::Reply r = call(makeRequest(Op::kListKeys), "list_keys");
  std::vector<std::string> keys;
  for (auto& k : r.values) {
    if (k.compare(0, options_.keyPrefix.size(), options_.keyPrefix) == 0) {
      keys.push_back(k.substr(options_.keyPrefix.size()));
    }
  }
  return keys;
}

void TcpStore::barrier(const std::string& k, std::int64_t worldSize, milliseconds timeout) {
  requireTorch2("BARRIER");
  std::lock_guard lock(mutex_);
  parkedCall(makeRequest(Op::kBarrier, {key(k)}, {}, worldSize), timeout, "barrier " + key(k));
}

void TcpStore::addOnClose(const std::string& k, std::int64_t delta) {
  std::lock_guard lock(mutex_);
  call(makeRequest(Op::kAddOnClose, {key(k)}, {}, delta), "add_on_close " + key(k));
  stateful_ = true;
}

void TcpStore::lease(milliseconds quiet) {
  std::lock_guard lock(mutex_);
  auto word = static_cast<std::uint32_t>(std::clamp<long long>(quiet.count(), 0, UINT32_MAX));
  call(makeRequest(Op::kLease, {}, {}, 0, word), "lease");
  stateful_ = word != 0;
}

std::string TcpStore::writerOf(const std::string& k) {
  try {
    return writer(k);
  } catch (const std::exception&) {
    return {};
  }
}

std::string TcpStore::writer(const std::string& k) {
  std::lock_guard lock(mutex_);
  return std::move(call(makeRequest(Op::kWriter, {key(k)}), "writer of " + key(k)).values.at(0));
}

std::vector<std::optional<milliseconds>> TcpStore::heard(const std::vector<std::string>& keys) {
  std::lock_guard lock(mutex_);
  wire::Request req = makeRequest(Op::kHeard);
  for (const auto& k : keys) req.keys.push_back(key(k));
  const auto values = call(req, "heard " + joinKeys(req.keys)).values;
  std::vector<std::optional<milliseconds>> out;
  for (const auto& v : values) {
    const auto ms = parseDecimal(v);
    out.push_back(ms ? std::optional<milliseconds>(*ms) : std::nullopt);
  }
  return out;
}

std::vector<Bytes> TcpStore::multiGetNow(const std::vector<std::string>& keys) {
  requireTorch2("MULTI_GET");
  std::lock_guard lock(mutex_);
  wire::Request req = makeRequest(Op::kMultiGet);
  for (const auto& k : keys) req.keys.push_back(key(k));
  return std::move(call(req, "multi_get " + joinKeys(req.keys)).values);
}

Bytes TcpStore::waitChange(const std::string& k, const Bytes& old, milliseconds timeout) {
  std::lock_guard lock(mutex_);
  parkedCall(makeRequest(Op::kWaitChange, {key(k)}, {old}), timeout,
             "wait for a change of " + key(k));
  return std::move(call(makeRequest(Op::kGet, {key(k)}), "get " + key(k)).values.at(0));
}

}  // namespace dtrun::rendezvous
