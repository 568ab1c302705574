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
  /// Addresses (or names) to listen on, all on one port. "::" is every address, IPv6 and IPv4
  /// (dual stack), or every IPv4 address where the kernel has no IPv6; "0.0.0.0" every IPv4
  /// address only; a name listens on each address it resolves to.
  std::vector<std::string> hosts{"::"};
  std::uint16_t port = 0;  ///< 0 picks a free port (the same for every host); port() tells which
  wire::Limits limits;     ///< per request; maxValueSize also bounds APPEND's result
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
  /// The first bound address (valid after start()).
  boost::asio::ip::tcp::endpoint endpoint() const { return listeners_.front().endpoint; }
  /// Every bound address, in the order of options.hosts (valid after start()).
  std::vector<boost::asio::ip::tcp::endpoint> endpoints() const;
  /// The port every address listens on (valid after start()).
  std::uint16_t port() const { return endpoint().port(); }
  /// Closes the acceptor and every connection; io.run() then returns once nothing is pending.
  /// Io thread only (post() it from elsewhere).
  void stop();
  /// Sets `key` as a client's SET would, waking whoever waits for it. Io thread only.
  void set(const std::string& key, Bytes value) { core_.set(key, std::move(value)); }
  /// Open connections. Io thread only.
  std::size_t connectionCount() const { return sessions_.size(); }
  /// Bytes the store holds (keys, values, queues). Io thread only.
  std::size_t storedBytes() const { return core_.bytes(); }
  /// Keys the store holds. Io thread only.
  std::int64_t keyCount() const { return core_.numKeys(); }
  /// Requests served so far, by operation. Io thread only.
  const RequestCounts& requests() const { return requests_; }

 private:
  class Session;
  friend class Session;

  // One listening socket.
  struct Listener {
    boost::asio::ip::tcp::acceptor acceptor;
    boost::asio::ip::tcp::endpoint endpoint;
    boost::asio::steady_timer retry;  // after a failed wait for connections
  };

  /// Binds every address of options_.hosts on `port` (0: the first picks, the others follow).
  void listenAll(std::uint16_t port);
  /// Binds one endpoint; throws boost::system::system_error.
  void listenOn(const boost::asio::ip::tcp::endpoint& ep);
  void accept(std::size_t listener);
  void acceptReady(std::size_t listener);
  void onAccepted(int fd, const boost::asio::ip::tcp::endpoint& local);
  void refuse(int fd, const std::string& why);
  void onSessionClosed(StoreCore::ClientId id);
  void wake(StoreCore::ClientId id);
  /// Logs `line` at warn level unless too many of `kind` were logged lately (WarningLimiter).
  void warn(const std::string& kind, const std::string& line);
  void armWarningFlush();

  boost::asio::io_context& io_;
  StoreServerOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  std::vector<Listener> listeners_;
  boost::asio::steady_timer warningFlush_;
  StoreCore core_;
  ConnectionBytes connectionBytes_;
  RequestCounts requests_;
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
