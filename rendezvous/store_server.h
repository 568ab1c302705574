// StoreServer: the TCPStore-compatible server. One io_context, one thread, many connections.
//
// Ownership follows asio's http server example: StoreServer owns the acceptor, the session
// registry and the StoreCore; each Session owns one socket and its buffers. All of it is touched
// only on the io_context's thread, so there are no mutexes. A session that sends a malformed,
// truncated, oversized or unknown request is closed with a log line naming the peer; everyone else
// carries on.
#pragma once

#include <spdlog/logger.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "rendezvous/store_core.h"
#include "rendezvous/wire.h"

namespace dtrun::rendezvous {

struct StoreServerOptions {
  std::string host = "0.0.0.0";  ///< bind address or name; "::" listens on IPv6 and IPv4
  std::uint16_t port = 0;        ///< 0 picks a free port; endpoint() tells which
  wire::Limits limits;
  std::size_t maxConnections = 0;  ///< 0: bounded only by RLIMIT_NOFILE
  int backlog = 16384;             ///< listen backlog (the kernel caps it at somaxconn)
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

 private:
  class Session;
  friend class Session;

  void accept();
  void onAccepted(boost::asio::ip::tcp::socket socket);
  void onSessionClosed(StoreCore::ClientId id);
  void wake(StoreCore::ClientId id);

  boost::asio::io_context& io_;
  StoreServerOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer acceptRetry_;
  boost::asio::ip::tcp::endpoint endpoint_;
  StoreCore core_;
  std::vector<char> readBuffer_ = std::vector<char>(256 * 1024);  // shared: one thread reads
  std::unordered_map<StoreCore::ClientId, std::shared_ptr<Session>> sessions_;
  StoreCore::ClientId nextId_ = 1;
  std::size_t maxConnections_ = 0;
  bool stopped_ = false;
};

/// Raises the soft RLIMIT_NOFILE to the hard limit; returns the new soft limit.
std::uint64_t raiseFileLimit();

}  // namespace dtrun::rendezvous
