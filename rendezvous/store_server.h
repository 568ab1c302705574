// StoreServer: the TCPStore-compatible server. One io_context, one thread, many connections.
//
// Ownership follows asio's http server example: StoreServer owns the acceptor, the session
// registry and the StoreCore; each Session owns one socket and its buffers. All of it is touched
// only on the io_context's thread, so there are no mutexes. The protocol itself is
// StoreConnection's (no I/O); a session adds the socket, the timers and the logs. A session that
// sends a malformed, truncated, oversized or unknown request, asks for more than the limits allow,
// or makes serving it fail in any way (an exception, std::bad_alloc included) is closed with one
// rate-limited log line naming the peer; everyone else carries on, and no exception leaves a
// handler, so the thread running the io_context (the agent's hosted store) never dies of a client
// (docs/store.md).
#pragma once

#include <spdlog/logger.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/log_text.h"
#include "rendezvous/store_connection.h"
#include "rendezvous/store_core.h"
#include "rendezvous/wire.h"

namespace dtrun::rendezvous {

struct StoreServerOptions {
  std::string host = "0.0.0.0";  ///< bind address or name; "::" listens on IPv6 and IPv4
  std::uint16_t port = 0;        ///< 0 picks a free port; endpoint() tells which
  wire::Limits limits;           ///< per request; maxValueSize also bounds APPEND's result
  std::size_t maxReplyBytes = 128 * 1024 * 1024;  ///< a larger reply is refused, not built
  /// Keys, values and every connection's buffers together (StoreQuota::maxBytes).
  std::size_t memoryQuota = std::size_t{2} * 1024 * 1024 * 1024;
  /// A connection inside a request for longer than this (half a frame, then silence) is closed.
  std::chrono::milliseconds frameTimeout = std::chrono::seconds(30);
  std::size_t maxConnections = 0;  ///< 0: bounded only by RLIMIT_NOFILE
  /// Warning lines of one kind (bad frames, refusals, timeouts...) per window; the rest are
  /// counted and the count logged when the window ends.
  std::size_t warningBurst = 5;
  std::chrono::milliseconds warningWindow = std::chrono::seconds(5);
  int backlog = 16384;  ///< listen backlog (the kernel caps it at somaxconn)
  /// Shared secret (docs/store.md, "Shared secret"); empty: none. With one, keys under
  /// kProtectedKeyPrefix need it, presented with DTRUN_AUTH.
  std::string token;
};

class StoreServer {
 public:
  /// Does not bind yet; start() does. `io` must be run by exactly one thread.
  StoreServer(boost::asio::io_context& io, StoreServerOptions options,
              std::shared_ptr<spdlog::logger> log);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  /// Raises RLIMIT_NOFILE, binds and listens; throws ConnectionError naming host:port. Call
  /// before io.run() or on the io thread.
  void start();
  /// The bound address (valid after start()).
  boost::asio::ip::tcp::endpoint endpoint() const { return endpoint_; }
  /// Closes the acceptor and every connection; io.run() then returns once nothing is pending.
  /// Io thread only (post() it from elsewhere).
  void stop();
  /// Sets `key` as a client's SET would, waking whoever waits for it. Io thread only.
  void set(const std::string& key, Bytes value) { core_.set(key, std::move(value)); }
  /// Open connections. Io thread only.
  std::size_t connectionCount() const { return sessions_.size(); }
  /// Bytes the store holds (keys, values, queues). Io thread only.
  std::size_t storedBytes() const { return core_.bytes(); }

 private:
  class Session;
  friend class Session;

  void accept();
  void acceptReady();
  void onAccepted(int fd);
  void refuse(int fd, const std::string& why);
  void onSessionClosed(StoreCore::ClientId id);
  void wake(StoreCore::ClientId id);
  /// Logs `line` at warn level unless too many of `kind` were logged lately (WarningLimiter).
  void warn(const std::string& kind, const std::string& line);
  void armWarningFlush();

  boost::asio::io_context& io_;
  StoreServerOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer acceptRetry_;
  boost::asio::steady_timer warningFlush_;
  boost::asio::ip::tcp::endpoint endpoint_;
  StoreCore core_;
  ConnectionBytes connectionBytes_;
  WarningLimiter warnings_;
  bool flushArmed_ = false;
  int spareFd_ = -1;  // closed to accept-and-refuse a connection when descriptors run out
  std::vector<char> readBuffer_ = std::vector<char>(256 * 1024);  // shared: one thread reads
  std::unordered_map<StoreCore::ClientId, std::shared_ptr<Session>> sessions_;
  StoreCore::ClientId nextId_ = 1;
  std::size_t maxConnections_ = 0;
  bool stopped_ = false;
};

/// Runs `io` (the thread that serves a StoreServer) until it has nothing left to do. The
/// server's handlers catch what serving a client throws (docs/store.md); should anything still
/// escape, it is logged and the loop goes on serving instead of ending the process.
void runServing(boost::asio::io_context& io, spdlog::logger& log);

/// Raises the soft RLIMIT_NOFILE to the hard limit; returns the new soft limit.
std::uint64_t raiseFileLimit();

}  // namespace dtrun::rendezvous
