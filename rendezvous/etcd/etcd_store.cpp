#include "rendezvous/etcd/etcd_store.h"

#include <optional>

#include "common/deadline.h"
#include "common/decimal.h"
#include "common/node_id.h"

namespace dtrun::rendezvous::etcd {

using std::chrono::milliseconds;

namespace {

std::optional<KeyValue> first(const TxnResponse& r) {
  if (r.ranges.empty() || r.ranges.front().kvs.empty()) return std::nullopt;
  return r.ranges.front().kvs.front();
}

}  // namespace

EtcdStore::EtcdStore(std::shared_ptr<EtcdClient> client)
    : client_(std::move(client)), writer_(randomHex(16)) {}

void EtcdStore::set(const std::string& key, const Bytes& value) { client_->put(key, value); }

Bytes EtcdStore::update(const std::string& key,
                        const std::function<Bytes(const std::optional<Bytes>&)>& change) {
  // The first attempt guesses the key is missing; a failed guess returns the key as it is, and
  // every later attempt is guarded by that read's revision. One round trip when uncontended.
  std::optional<KeyValue> seen;
  for (;;) {
    const Bytes next = change(seen ? std::optional<Bytes>(seen->value) : std::nullopt);
    const Compare guard =
        seen ? Compare::modRevision(key, seen->modRevision) : Compare::missing(key);
    const TxnResponse r = client_->txn({guard}, {Op::put(key, next)}, {Op::get(key)});
    if (r.succeeded) return next;
    seen = first(r);
  }
}

Bytes EtcdStore::get(const std::string& key, milliseconds timeout) {
  return waitFor(
      key, timeout, [](const Bytes&) { return true; }, "get");
}

std::int64_t EtcdStore::counterValue(const std::string& key, const RangeResponse& r) {
  std::int64_t total = 0;
  for (const auto& kv : r.kvs) {
    // Read as TCPStore's ADD reads a value (std::stoll), as every Store does.
    const auto n =
        kv.value.empty() ? std::optional<std::int64_t>(0) : parseLeadingDecimal(kv.value);
    if (!n) {
      throw ProtocolError("etcd key '" + key + "' holds '" + kv.value.substr(0, 40) +
                          "', not a counter");
    }
    total += *n;
  }
  return total;
}

std::int64_t EtcdStore::add(const std::string& key, std::int64_t delta) {
  const std::string end = counterEnd(key);  // K itself and every K\x01...
  if (delta == 0) {
    // A read that creates the counter, as ADD 0 does on dtrun's store (a later COMPARE_SET of
    // "round" needs the key to exist). Read first: a transaction with a put goes through raft
    // (an fsync on every member) even when its compare fails, a plain read does not.
    const RangeResponse now = client_->range(key, end);
    if (!now.kvs.empty() && now.kvs.front().key == key) return counterValue(key, now);
    const TxnResponse r = client_->txn(
        {Compare::missing(key)}, {Op::put(key, "0"), Op::scan(key, end)}, {Op::scan(key, end)});
    return r.ranges.empty() ? 0 : counterValue(key, r.ranges.back());
  }
  const std::string inc = key + '\x01' + writer_ + "-" + std::to_string(++added_);
  const std::int64_t revision = client_->put(inc, std::to_string(delta));
  return counterValue(key, client_->range(key, end, false, revision));
}

Bytes EtcdStore::compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  // Most calls of the protocol lose (every node tries to close a round or claim it): read first,
  // and write (a raft round even when the compare fails) only when the swap may succeed.
  if (const auto now = client_->get(key)) {
    if (now->value != expected) return now->value;
  } else if (!expected.empty()) {
    return expected;
  }
  for (;;) {
    const Compare guard =
        expected.empty() ? Compare::missing(key) : Compare::valueIs(key, expected);
    const TxnResponse r = client_->txn({guard}, {Op::put(key, desired)}, {Op::get(key)});
    if (r.succeeded) return desired;
    const auto kv = first(r);
    // Missing with a non-empty `expected`: nothing stored, `expected` returned (c10d's rule).
    if (!kv) {
      if (expected.empty()) continue;  // deleted in between: try again
      return expected;
    }
    if (kv->value != expected) return kv->value;
    // Present and empty while `expected` is empty: compare the value instead.
    const TxnResponse again =
        client_->txn({Compare::valueIs(key, expected)}, {Op::put(key, desired)}, {Op::get(key)});
    if (again.succeeded) return desired;
    if (const auto now = first(again)) return now->value;
  }
}

bool EtcdStore::check(const std::vector<std::string>& keys) {
  if (keys.empty()) return true;
  std::vector<Op> ops;
  for (const auto& k : keys) {
    Op op = Op::get(k);
    op.countOnly = true;
    ops.push_back(op);
  }
  const TxnResponse r = client_->txn({}, ops, {});
  for (const auto& range : r.ranges) {
    if (range.count == 0) return false;
  }
  return r.ranges.size() == keys.size();
}

Bytes EtcdStore::waitFor(const std::string& key, milliseconds timeout,
                         const std::function<bool(const Bytes&)>& accept, const char* what) {
  const auto deadline = deadlineAfter(timeout);
  const RangeResponse now = client_->range(key, "");
  if (!now.kvs.empty() && accept(now.kvs.front().value)) return now.kvs.front().value;
  auto watch = client_->watch(key, "", now.revision + 1);
  for (;;) {
    auto events = watch->next(deadline);
    if (!events) {
      throw TimeoutError(client_->describe() + ": " + what + " of key '" + key +
                         "' timed out after " + std::to_string(timeout.count()) + " ms");
    }
    for (const auto& e : *events) {
      if (e.type == WatchEvent::Type::kPut && accept(e.kv.value)) return e.kv.value;
    }
  }
}

void EtcdStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  multiGet(keys, timeout);
}

std::vector<Bytes> EtcdStore::multiGet(const std::vector<std::string>& keys, milliseconds timeout) {
  const auto deadline = deadlineAfter(timeout);
  std::vector<Bytes> out;
  for (const auto& k : keys) {
    const auto left =
        deadline == Clock::time_point::max()
            ? kNoTimeout
            : std::max(milliseconds(1), std::chrono::ceil<milliseconds>(deadline - Clock::now()));
    out.push_back(get(k, left));
  }
  return out;
}

bool EtcdStore::deleteKey(const std::string& key) {
  // A counter's increments go with it.
  const bool existed = client_->remove(key) > 0;
  client_->remove(key + '\x01', counterEnd(key));
  return existed;
}

std::int64_t EtcdStore::numKeys() {
  const std::string all(1, '\0');
  return client_->range(all, all, true).count;
}

void EtcdStore::append(const std::string& key, const Bytes& value) {
  update(key, [&](const std::optional<Bytes>& old) { return old.value_or("") + value; });
}

void EtcdStore::multiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  if (keys.size() != values.size()) {
    throw ConfigError("multiSet: " + std::to_string(keys.size()) + " keys but " +
                      std::to_string(values.size()) + " values");
  }
  std::vector<Op> ops;
  for (std::size_t i = 0; i < keys.size(); ++i) ops.push_back(Op::put(keys[i], values[i]));
  client_->txn({}, ops, {});
}

Bytes EtcdStore::waitChange(const std::string& key, const Bytes& old, milliseconds timeout) {
  return waitFor(
      key, timeout, [&](const Bytes& v) { return v != old; }, "wait for a change");
}

}  // namespace dtrun::rendezvous::etcd
