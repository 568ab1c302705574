// TcpStore: the blocking client of a TCPStore server (dtrun's, or torch's own).
//
// It speaks torch 2.x's protocol by default (VALIDATE + PING on connect, CANCEL_WAIT on a wait
// timeout) and 1.13's when told to. Every call has a deadline; connecting retries with jittered
// exponential backoff until its own deadline. Errors name host:port, the key and the time waited.
// Like torch's client it sends every key as keyPrefix + key ("/" by default), so torch clients
// and dtrun clients see the same keys. Calls are serialised by a mutex: one request at a time.
//
// Reconnecting is explicit (docs/store.md, "Client"): when the connection breaks after a request
// went out and before its reply came back, a request that is safe to repeat (GET, CHECK, WAIT,
// SET, ...) is sent again once on a new connection; any other (ADD, APPEND, COMPARE_SET,
// MULTI_SET, QUEUE_*, BARRIER, DELETE_KEY) fails with MaybeAppliedError, and the caller decides.
// A connection that carries server-side state (ADD_ON_CLOSE, a lease) is never replaced
// silently: once it breaks, every call fails with ConnectionError.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "rendezvous/store.h"
#include "rendezvous/wire.h"

namespace dtrun::rendezvous {

/// The connection broke between sending a request that is not safe to repeat and reading its
/// reply: the server may or may not have applied it. The client reconnects on the next call.
class MaybeAppliedError : public ConnectionError {
 public:
  using ConnectionError::ConnectionError;
};

/// The store refused this client's shared secret, or has none while this client has one
/// (docs/store.md, "Shared secret"). Not a ConnectionError: retrying cannot help.
class StoreAuthError : public Error {
 public:
  using Error::Error;
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  wire::Dialect dialect = wire::Dialect::kTorch2;  ///< kTorch113 to talk to a torch 1.13 server
  std::chrono::milliseconds connectTimeout = std::chrono::seconds(60);
  /// Deadline of calls that take no timeout argument, and of the network part of the others.
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
  std::string keyPrefix = "/";  ///< torch's client prefixes every key with "/"
  wire::Limits limits;          ///< bounds on what the server may send back
  /// The store's shared secret, presented (DTRUN_AUTH) on every connection before any other
  /// request; empty: none. Only dtrun's server knows DTRUN_AUTH.
  std::string token;
  /// While a connect keeps failing: called every `progressInterval` on the connecting thread
  /// with the last error and the connect deadline, so that a waiting caller can say why it
  /// waits (unset: silent).
  std::function<void(const std::string& error, std::chrono::steady_clock::time_point until)>
      onWaiting;
  std::chrono::milliseconds progressInterval = std::chrono::seconds(5);
};

class TcpStore : public Store {
 public:
  /// Connects (blocking, up to options.connectTimeout); throws ConnectionError.
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool deleteKey(const std::string& key) override;
  std::int64_t numKeys() override;
  /// Torch 2.x only (1.13 has no APPEND): ProtocolError in 1.13 mode.
  void append(const std::string& key, const Bytes& value) override;
  std::vector<Bytes> multiGet(const std::vector<std::string>& keys,
                              std::chrono::milliseconds timeout) override;
  void multiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  /// dtrun's server only (DTRUN_WAIT_CHANGE, opcode >= 128).
  Bytes waitChange(const std::string& key, const Bytes& old,
                   std::chrono::milliseconds timeout) override;
  /// writer(key), or "" when it fails (torch's server has no DTRUN_WRITER).
  std::string writerOf(const std::string& key) override;

  // Torch 2.x operations beyond the Store interface (ProtocolError in 1.13 mode).
  /// Round trip with a nonce; throws when the echo differs.
  void ping();
  void queuePush(const std::string& key, const Bytes& value);
  /// Pops the front element; with `timeout` > 0 waits for one first (torch's queue_pop(block)).
  std::optional<Bytes> queuePop(const std::string& key, std::chrono::milliseconds timeout);
  std::int64_t queueLen(const std::string& key);
  /// Every key in the store that starts with keyPrefix, with the prefix removed (torch's rule).
  std::vector<std::string> listKeys();
  /// Adds 1 to `key` and blocks until it reaches `worldSize` (at most `timeout`).
  void barrier(const std::string& key, std::int64_t worldSize, std::chrono::milliseconds timeout);

  // dtrun-only operations (opcodes >= 128; only dtrun's server knows them).
  /// When this connection closes, the server adds `delta` to `key` and wakes its waiters.
  void addOnClose(const std::string& key, std::int64_t delta);

  /// Asks the server to close this connection when it sends nothing for `quiet` (0 = never);
  /// the caller then pings more often than that.
  void lease(std::chrono::milliseconds quiet);

  /// The address ("host:port") of the client that last wrote `key`, as the server saw it; empty
  /// when unknown. The server records writers of protected keys only (docs/store.md).
  std::string writer(const std::string& key);

  /// For each key, how long ago the server last heard from the open connection that holds a
  /// close action on it (DTRUN_HEARD); nullopt when none does. One round trip.
  std::vector<std::optional<std::chrono::milliseconds>> heard(const std::vector<std::string>& keys);

  /// MULTI_GET without the WAIT before it: the values now, a missing key read as "" (as the
  /// server answers it). For readers that must not wait on keys that may never come. Torch 2.x.
  std::vector<Bytes> multiGetNow(const std::vector<std::string>& keys);

  /// Gives the connected (and, for torch 2.x, validated) socket to the caller, who owns it and
  /// speaks on it from then on; this client holds no connection afterwards. Connects first when
  /// needed (blocking, up to the connect timeout).
  int detachSocket();

  /// Any thread: unblocks a call in progress on another thread (it fails with ConnectionError)
  /// and makes every later call fail the same way. For shutting down watcher threads.
  void interrupt();

  /// "host:port", for messages.
  const std::string& address() const { return address_; }
  const TcpStoreOptions& options() const { return options_; }

 private:
  using Clock = std::chrono::steady_clock;

  void connect();
  /// The handshake on a new connection: VALIDATE + PING (torch 2.x), then DTRUN_AUTH when a
  /// token is set. Returns why it failed ("" when it did not); StoreAuthError when refused.
  std::string handshake(Clock::time_point until);
  void ensureConnected();
  void disconnect();
  /// One request and its reply (if it has one), with the reconnect rule above.
  wire::Reply call(const wire::Request& req, const std::string& what);
  /// Sends `req` and returns `exchange()` (which reads what follows), on a new connection once
  /// more when the old one breaks and the rule above allows it (not after `giveUp`).
  template <typename Exchange>
  auto withReconnect(const wire::Request& req, Clock::time_point giveUp, Exchange&& exchange);
  /// call() without the retry: send, then read the reply within `deadline`.
  wire::Reply exchange(const wire::Request& req, Clock::time_point deadline,
                       const std::string& what);
  void sendRequest(const wire::Request& req, Clock::time_point deadline);
  /// Reads the reply to `req` (ReplyDecoder) within `deadline`.
  wire::Reply readReply(const wire::Request& req, Clock::time_point deadline,
                        const std::string& what);
  /// Receives more bytes into rbuf_; TimeoutError when `deadline` passed first.
  void receiveSome(Clock::time_point deadline, const std::string& what);
  /// WAIT-style request whose reply is one STOP_WAITING byte, with CANCEL_WAIT on timeout.
  void parkedCall(const wire::Request& req, std::chrono::milliseconds timeout,
                  const std::string& what);
  void waitLocked(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  void requireTorch2(const char* op) const;
  std::string key(const std::string& k) const { return options_.keyPrefix + k; }
  Clock::time_point deadline() const;
  [[noreturn]] void fail(const std::string& what, const std::string& why);

  TcpStoreOptions options_;
  std::string address_;
  int fd_ = -1;
  std::string rbuf_;  // bytes received and not yet consumed
  std::size_t rpos_ = 0;
  bool stateful_ = false;  // the connection carries close actions or a lease
  bool lostStateful_ = false;
  std::mutex mutex_;
  std::atomic<bool> interrupted_{false};
  std::atomic<int> liveFd_{-1};  // fd_ as seen by interrupt(), which does not take mutex_
};

}  // namespace dtrun::rendezvous
