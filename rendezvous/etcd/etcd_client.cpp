#include "rendezvous/etcd/etcd_client.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <thread>

namespace dtrun::rendezvous::etcd {

using json = nlohmann::json;
using std::chrono::milliseconds;

namespace {

// Between two passes over every member, while none answers.
constexpr milliseconds kRetryPause(200);

// One member's attempt. A plain Error (the member is down, slow, or answered what is not etcd)
// is that member failing: its text is returned for the message that names every member, and
// the caller tries the next. What concerns the request itself (etcd refused it, the revision is
// compacted, our own configuration is wrong) goes to the caller at once.
template <typename Attempt>
std::optional<std::string> memberFailure(Attempt&& attempt) {
  try {
    attempt();
    return std::nullopt;
  } catch (const EtcdError&) {
    throw;
  } catch (const CompactedError&) {
    throw;
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    return std::string(e.what());
  }
}

std::string joinWhys(const std::vector<std::string>& whys) {
  std::string out;
  for (const auto& w : whys) {
    if (w.empty()) continue;
    out += (out.empty() ? "" : "; ") + w;
  }
  return out;
}

}  // namespace

EtcdClient::EtcdClient(ClientOptions options) : options_(std::move(options)) {
  if (options_.endpoints.empty()) throw ConfigError("etcd: no endpoint given");
  if (options_.tls) tls_ = makeTlsContext(options_.cacert, options_.cert, options_.key);
  for (const auto& ep : options_.endpoints) {
    connections_.push_back(std::make_unique<HttpConnection>(ep, tls_));
  }
}

EtcdClient::~EtcdClient() = default;

std::string EtcdClient::describe() const {
  std::string out = "etcd at ";
  for (std::size_t i = 0; i < options_.endpoints.size(); ++i) {
    out += (i ? "," : "") + options_.endpoints[i].text();
  }
  return out;
}

void EtcdClient::interrupt() {
  interrupted_ = true;
  for (auto& c : connections_) c->interrupt();
  std::lock_guard lock(watchesMutex_);
  for (auto* w : watches_) w->interrupt();
}

bool EtcdClient::checkAnswer(int status, const std::string& body, std::string* why) {
  if (status == 200) return true;
  json j = json::parse(body, nullptr, false);
  const int code = j.is_object() ? j.value("code", 0) : 0;
  std::string message = j.is_object() ? j.value("message", j.value("error", "")) : std::string();
  if (message.empty()) message = "HTTP " + std::to_string(status) + " " + body.substr(0, 200);
  // Unavailable (14), deadline exceeded (4) and the member's own "no leader" / "timed out"
  // mean: another member may serve it.
  if (code == 14 || code == 4 || status == 502 || status == 503 || status == 504 ||
      message.find("no leader") != std::string::npos ||
      message.find("timed out") != std::string::npos) {
    *why = message;
    return false;
  }
  throw EtcdError(code, message);
}

void EtcdClient::authenticate(HttpConnection& c, Clock::time_point deadline) {
  const json body{{"name", options_.user}, {"password", options_.password}};
  auto r = c.post("/v3/auth/authenticate", body.dump(), "", deadline);
  std::string why;
  try {
    if (!checkAnswer(r.status, r.body, &why)) {
      throw ConnectionError("etcd " + c.endpoint().text() + ": " + why);
    }
  } catch (const EtcdError& e) {
    throw EtcdError(e.code(),
                    "etcd authentication as user '" + options_.user + "' failed: " + e.what());
  }
  token_ = json::parse(r.body).value("token", "");
}

json EtcdClient::call(const std::string& path, const json& body) {
  const std::string text = body.dump();
  const auto giveUp = Clock::now() + options_.retryFor;
  std::vector<std::string> whys(connections_.size());
  for (;;) {
    for (std::size_t n = 0; n < connections_.size(); ++n) {
      const std::size_t i = (current_ + n) % connections_.size();
      auto& c = *connections_[i];
      if (interrupted_) throw ConnectionError(describe() + ": interrupted");
      std::optional<json> answer;
      auto failed = memberFailure([&] {
        for (int attempt = 0;; ++attempt) {
          const auto deadline = Clock::now() + options_.requestTimeout;
          if (!options_.user.empty() && token_.empty()) authenticate(c, deadline);
          auto r = c.post(path, text, token_, deadline);
          std::string why;
          try {
            if (checkAnswer(r.status, r.body, &why)) {
              answer = json::parse(r.body);
              return;
            }
          } catch (const EtcdError& e) {
            // A token expires (simple tokens after 5 minutes by default): log in again, once.
            if (!options_.user.empty() && attempt == 0 &&
                std::string(e.what()).find("token") != std::string::npos) {
              token_.clear();
              continue;
            }
            if (options_.user.empty() &&
                std::string(e.what()).find("user name is empty") != std::string::npos) {
              throw EtcdError(e.code(), describe() +
                                            " requires authentication: give --rdzv-conf user=... "
                                            "password=... (" +
                                            e.what() + ")");
            }
            throw;
          }
          whys[i] = c.endpoint().text() + ": " + why;
          return;
        }
      });
      if (answer) {
        current_ = i;
        return *answer;
      }
      if (failed) {
        whys[i] = *failed;
        if (c.interrupted()) throw ConnectionError(describe() + ": interrupted");
      }
    }
    const auto now = Clock::now();
    if (now >= giveUp) {
      throw UnreachableError(describe() + ": no member answered " + path + " within " +
                                 std::to_string(options_.retryFor.count() / 1000.0).substr(0, 4) +
                                 " s",
                             joinWhys(whys));
    }
    std::this_thread::sleep_for(
        std::min(kRetryPause, std::chrono::ceil<milliseconds>(giveUp - now)));
  }
}

std::optional<KeyValue> EtcdClient::get(const std::string& key) {
  auto r = range(key, "");
  if (r.kvs.empty()) return std::nullopt;
  return r.kvs.front();
}

RangeResponse EtcdClient::range(const std::string& key, const std::string& rangeEnd, bool countOnly,
                                std::int64_t revision) {
  json body{{"key", base64(key)}};
  if (!rangeEnd.empty()) body["range_end"] = base64(rangeEnd);
  if (countOnly) body["count_only"] = true;
  if (revision > 0) body["revision"] = std::to_string(revision);
  return rangeResponse(call("/v3/kv/range", body));
}

std::int64_t EtcdClient::put(const std::string& key, const std::string& value, std::int64_t lease) {
  json body{{"key", base64(key)}, {"value", base64(value)}};
  if (lease) body["lease"] = std::to_string(lease);
  return gatewayNumber(call("/v3/kv/put", body)["header"], "revision");
}

std::int64_t EtcdClient::remove(const std::string& key, const std::string& rangeEnd) {
  json body{{"key", base64(key)}};
  if (!rangeEnd.empty()) body["range_end"] = base64(rangeEnd);
  return gatewayNumber(call("/v3/kv/deleterange", body), "deleted");
}

TxnResponse EtcdClient::txn(const std::vector<Compare>& compare, const std::vector<Op>& success,
                            const std::vector<Op>& failure) {
  json body{{"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
  for (const auto& c : compare) body["compare"].push_back(compareJson(c));
  for (const auto& op : success) body["success"].push_back(opJson(op));
  for (const auto& op : failure) body["failure"].push_back(opJson(op));
  json j = call("/v3/kv/txn", body);
  TxnResponse r;
  r.succeeded = j.value("succeeded", false);
  r.revision = gatewayNumber(j["header"], "revision");
  if (auto rs = j.find("responses"); rs != j.end()) {
    for (const auto& one : *rs) {
      if (auto range = one.find("response_range"); range != one.end()) {
        r.ranges.push_back(rangeResponse(*range));
      }
    }
  }
  return r;
}

std::int64_t EtcdClient::leaseGrant(std::chrono::seconds ttl) {
  json j = call("/v3/lease/grant", {{"TTL", std::to_string(std::max<long long>(1, ttl.count()))}});
  if (j.contains("error") && !j["error"].get<std::string>().empty()) {
    throw EtcdError(0, describe() + ": lease grant failed: " + j["error"].get<std::string>());
  }
  return gatewayNumber(j, "ID");
}

std::int64_t EtcdClient::leaseKeepAlive(std::int64_t id) {
  // A bidirectional stream in gRPC; through the gateway one request gives one answer.
  json j = call("/v3/lease/keepalive", {{"ID", std::to_string(id)}});
  const json& result = j.contains("result") ? j["result"] : j;
  return gatewayNumber(result, "TTL");
}

void EtcdClient::leaseRevoke(std::int64_t id) {
  try {
    call("/v3/lease/revoke", {{"ID", std::to_string(id)}});
  } catch (const EtcdError& e) {
    // Already gone (expired): what revoking wanted.
    if (std::string(e.what()).find("not found") == std::string::npos) throw;
  }
}

std::optional<EtcdClient::LeaseTtl> EtcdClient::leaseTimeToLive(std::int64_t id) {
  json j = call("/v3/lease/timetolive", {{"ID", std::to_string(id)}});
  LeaseTtl t;
  t.left = gatewayNumber(j, "TTL");
  t.granted = gatewayNumber(j, "grantedTTL");
  if (t.left < 0) return std::nullopt;  // etcd answers TTL -1 for a lease that is gone
  return t;
}

std::unique_ptr<Watch> EtcdClient::watch(const std::string& key, const std::string& rangeEnd,
                                         std::int64_t startRevision) {
  return std::unique_ptr<Watch>(new Watch(*this, key, rangeEnd, startRevision));
}

Watch::Watch(EtcdClient& client, std::string key, std::string rangeEnd, std::int64_t startRevision)
    : client_(client),
      key_(std::move(key)),
      rangeEnd_(std::move(rangeEnd)),
      nextRevision_(startRevision) {
  std::lock_guard lock(client_.watchesMutex_);
  client_.watches_.push_back(this);
  if (client_.interrupted_) interrupted_ = true;
}

Watch::~Watch() {
  std::lock_guard lock(client_.watchesMutex_);
  std::erase(client_.watches_, this);
}

void Watch::interrupt() {
  interrupted_ = true;
  std::lock_guard lock(mutex_);
  if (connection_) connection_->interrupt();
}

void Watch::open(Clock::time_point deadline) {
  json create{{"key", base64(key_)}};
  if (!rangeEnd_.empty()) create["range_end"] = base64(rangeEnd_);
  if (nextRevision_ > 0) create["start_revision"] = std::to_string(nextRevision_);
  const std::string body = json{{"create_request", create}}.dump();
  const auto& opts = client_.options_;
  const auto giveUp = Clock::now() + opts.retryFor;
  std::vector<std::string> whys(opts.endpoints.size());
  for (;;) {
    for (std::size_t n = 0; n < opts.endpoints.size(); ++n) {
      const std::size_t i = (client_.current_ + n) % opts.endpoints.size();
      if (interrupted_) throw ConnectionError(client_.describe() + ": watch interrupted");
      auto c = std::make_unique<HttpConnection>(opts.endpoints[i], client_.tls_);
      {
        std::lock_guard lock(mutex_);
        connection_ = std::move(c);
        if (interrupted_) connection_->interrupt();  // interrupt() ran before the swap
      }
      auto& conn = *connection_;
      bool confirmed = false;
      auto failed = memberFailure([&] {
        const auto until = std::min(deadline, Clock::now() + opts.requestTimeout);
        if (!opts.user.empty() && client_.token_.empty()) client_.authenticate(conn, until);
        auto r = conn.startStream("/v3/watch", body, client_.token_, until);
        std::string why;
        if (r.status != 200) {
          if (!client_.checkAnswer(r.status, r.body, &why)) {
            throw ConnectionError(conn.endpoint().text() + ": " + why);
          }
        }
        // The first message confirms the watch (or says the revision is compacted).
        auto line = conn.nextLine(until);
        if (!line) throw TimeoutError("etcd " + conn.endpoint().text() + ": watch not confirmed");
        json j = json::parse(*line, nullptr, false);
        const json result = j.is_object() && j.contains("result") ? j["result"] : json::object();
        if (gatewayNumber(result, "compact_revision") > 0) {
          throw CompactedError(client_.describe() + ": revision " + std::to_string(nextRevision_) +
                               " was compacted");
        }
        if (!result.value("created", false)) {
          throw ConnectionError(conn.endpoint().text() +
                                ": watch refused: " + line->substr(0, 200));
        }
        confirmed = true;
      });
      if (confirmed) {
        client_.current_ = i;
        return;
      }
      if (failed) whys[i] = *failed;
      if (Clock::now() >= deadline) {
        // The caller's own deadline, not the members': next() reports it as a quiet watch.
        std::lock_guard lock(mutex_);
        connection_.reset();
        return;
      }
    }
    const auto now = Clock::now();
    if (interrupted_) throw ConnectionError(client_.describe() + ": watch interrupted");
    if (now >= giveUp) {
      {
        std::lock_guard lock(mutex_);
        connection_.reset();
      }
      throw UnreachableError(client_.describe() + ": no member serves a watch", joinWhys(whys));
    }
    std::this_thread::sleep_for(
        std::min(kRetryPause, std::chrono::ceil<milliseconds>(giveUp - now)));
  }
}

std::optional<std::vector<WatchEvent>> Watch::next(Clock::time_point deadline) {
  for (;;) {
    if (interrupted_) throw ConnectionError(client_.describe() + ": watch interrupted");
    if (!connection_) open(deadline);
    if (!connection_) return std::nullopt;
    std::optional<std::string> line;
    try {
      line = connection_->nextLine(deadline);
    } catch (const Error&) {
      // The member went (or ended the stream): resume on another one after the last event.
      if (interrupted_) throw ConnectionError(client_.describe() + ": watch interrupted");
      std::lock_guard lock(mutex_);
      connection_.reset();
      client_.current_ = (client_.current_ + 1) % client_.options_.endpoints.size();
      continue;
    }
    if (!line) {
      std::lock_guard lock(mutex_);
      connection_.reset();
      return std::nullopt;
    }
    json j = json::parse(*line, nullptr, false);
    if (!j.is_object() || !j.contains("result")) {
      // {"error": ...}: the stream failed on the member's side; reopen.
      std::lock_guard lock(mutex_);
      connection_.reset();
      continue;
    }
    const json& result = j["result"];
    if (gatewayNumber(result, "compact_revision") > 0) {
      throw CompactedError(client_.describe() + ": revision " + std::to_string(nextRevision_) +
                           " was compacted");
    }
    if (result.value("canceled", false)) {
      std::lock_guard lock(mutex_);
      connection_.reset();
      continue;
    }
    std::vector<WatchEvent> events;
    if (auto evs = result.find("events"); evs != result.end()) {
      for (const auto& e : *evs) {
        WatchEvent ev;
        ev.type =
            e.value("type", "PUT") == "DELETE" ? WatchEvent::Type::kDelete : WatchEvent::Type::kPut;
        if (e.contains("kv")) ev.kv = keyValue(e["kv"]);
        nextRevision_ = std::max(nextRevision_, ev.kv.modRevision + 1);
        events.push_back(std::move(ev));
      }
    }
    if (!events.empty()) return events;
  }
}

}  // namespace dtrun::rendezvous::etcd
