// EtcdClient: the part of etcd's v3 API dtrun needs, spoken as JSON over HTTP/1.1 to the v3
// gateway every etcd member serves on its client port (docs/rendezvous.md, "The etcd backend",
// says why not gRPC). Keys and values travel base64-encoded, 64-bit numbers as decimal strings.
//
// Blocking, one thread at a time per client (each thread that talks to etcd owns a client).
// Failover: a request that a member cannot serve (connection refused, timed out, "no leader")
// goes to the next member of the list; only when no member answers for `retryFor` does the call
// throw, ConnectionError naming every member and what each said. Errors etcd itself returns
// (a bad password, a missing lease) throw EtcdError at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "rendezvous/etcd/etcd_wire.h"
#include "rendezvous/etcd/http_connection.h"

namespace dtrun::rendezvous::etcd {

/// An error etcd answered with (gRPC status code and message).
class EtcdError : public Error {
 public:
  EtcdError(int code, const std::string& message) : Error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

/// No member answered for the client's retryFor: the cluster is down, unreachable, or without
/// quorum. details() is what each member said.
class UnreachableError : public ConnectionError {
 public:
  UnreachableError(const std::string& message, std::string details)
      : ConnectionError(message + ": " + details), details_(std::move(details)) {}
  const std::string& details() const { return details_; }

 private:
  std::string details_;
};

/// A watch asked for events that compaction removed.
class CompactedError : public Error {
 public:
  using Error::Error;
};

struct ClientOptions {
  std::vector<Endpoint> endpoints;
  bool tls = false;
  std::string cacert, cert, key;  ///< PEM files (cacert empty: the system's CAs)
  std::string user, password;     ///< etcd authentication (user empty: none)
  /// One request on one member.
  std::chrono::milliseconds requestTimeout = std::chrono::seconds(5);
  /// How long a call keeps trying the members before it gives up.
  std::chrono::milliseconds retryFor = std::chrono::seconds(10);
};

class EtcdClient;

/// A watch on one key or a range, from a revision on: a streaming POST /v3/watch. Moves to
/// another member when its member goes (resuming after the last revision it delivered).
class Watch {
 public:
  /// The next events (never empty), waiting at most until `deadline` (then nullopt, and the
  /// stream is reopened on the next call). Throws CompactedError when the revision asked for
  /// was compacted, ConnectionError when no member answers for the client's retryFor.
  std::optional<std::vector<WatchEvent>> next(Clock::time_point deadline);
  /// The revision after the last event delivered (where a resumed watch starts).
  std::int64_t nextRevision() const { return nextRevision_; }
  /// Any thread: next() fails now with ConnectionError.
  void interrupt();
  ~Watch();
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

 private:
  friend class EtcdClient;
  Watch(EtcdClient& client, std::string key, std::string rangeEnd, std::int64_t startRevision);
  void open(Clock::time_point deadline);

  EtcdClient& client_;
  std::string key_, rangeEnd_;
  std::int64_t nextRevision_;
  std::mutex mutex_;  // guards connection_ against interrupt() from another thread
  std::unique_ptr<HttpConnection> connection_;
  std::atomic<bool> interrupted_{false};
};

class EtcdClient {
 public:
  /// Builds the TLS context (ConfigError for bad files). Connects lazily.
  explicit EtcdClient(ClientOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  std::optional<KeyValue> get(const std::string& key);
  /// `revision` > 0: the keys as they were at that revision.
  RangeResponse range(const std::string& key, const std::string& rangeEnd, bool countOnly = false,
                      std::int64_t revision = 0);
  /// Returns the revision of the write.
  std::int64_t put(const std::string& key, const std::string& value, std::int64_t lease = 0);
  /// Deletes `key` (or [key, rangeEnd)); returns how many keys went.
  std::int64_t remove(const std::string& key, const std::string& rangeEnd = "");
  TxnResponse txn(const std::vector<Compare>& compare, const std::vector<Op>& success,
                  const std::vector<Op>& failure);

  /// A new lease of `ttl` (whole seconds, at least 1); returns its id.
  std::int64_t leaseGrant(std::chrono::seconds ttl);
  /// Renews the lease; returns the TTL left (0: the lease is gone, its keys with it).
  std::int64_t leaseKeepAlive(std::int64_t id);
  void leaseRevoke(std::int64_t id);
  /// The lease's TTL left and the TTL it was granted, in seconds; nullopt when it is gone.
  struct LeaseTtl {
    std::int64_t left = 0;
    std::int64_t granted = 0;
  };
  std::optional<LeaseTtl> leaseTimeToLive(std::int64_t id);

  std::unique_ptr<Watch> watch(const std::string& key, const std::string& rangeEnd,
                               std::int64_t startRevision);

  /// Any thread: the call in progress (and every later one) fails at once, watches included.
  void interrupt();
  /// "etcd at a:2379,b:2379".
  std::string describe() const;
  const ClientOptions& options() const { return options_; }

 private:
  friend class Watch;
  /// One unary call: POST `path` to the current member, failing over. The answer's JSON.
  nlohmann::json call(const std::string& path, const nlohmann::json& body);
  void authenticate(HttpConnection& c, Clock::time_point deadline);
  /// Throws EtcdError when `status`/`body` is an answer etcd gave on purpose; returns false for
  /// "try another member" (no leader, unavailable, timed out on its side).
  bool checkAnswer(int status, const std::string& body, std::string* why);

  ClientOptions options_;
  std::shared_ptr<boost::asio::ssl::context> tls_;
  std::vector<std::unique_ptr<HttpConnection>> connections_;  // one per member, lazily
  std::size_t current_ = 0;
  std::string token_;
  std::atomic<bool> interrupted_{false};
  std::mutex watchesMutex_;
  std::vector<Watch*> watches_;  // live watches, for interrupt()
};

}  // namespace dtrun::rendezvous::etcd
