// MetricsServer: the agent's HTTP endpoint for Prometheus (--metrics-port), on the agent's own
// io_context: no thread of its own, and nothing it does can block the agent (every read and
// write is asynchronous, bounded by a deadline, and a request is at most 8 KiB).
//
//   GET /metrics   the text exposition format (the handler writes it)
//   GET /healthz   200 "ok" while the agent's event loop turns: a liveness probe
//
// HTTP/1.1 with Boost.Beast (part of the Boost dtrun builds with), keep-alive as Prometheus
// uses it. Anything but GET and HEAD is 405; an unknown path 404.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace dtrun::agent {

class MetricsServer {
 public:
  /// Answers one request: status, content type, body. Called on the io thread.
  using Respond = std::function<void(int status, std::string contentType, std::string body)>;
  /// Serves /metrics: builds the body (now, or later on the io thread) and calls `respond`.
  using MetricsHandler = std::function<void(Respond respond)>;

  /// Binds `host`:`port` (0: a free port) and starts accepting on `io`. Throws ConfigError
  /// naming --metrics-port when it cannot bind.
  MetricsServer(boost::asio::io_context& io, const std::string& host, std::uint16_t port,
                MetricsHandler metrics);
  /// close().
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  /// The bound address.
  boost::asio::ip::tcp::endpoint endpoint() const { return endpoint_; }
  /// Stops accepting and closes every connection. Io thread; idempotent.
  void close();

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the handlers in flight
  boost::asio::ip::tcp::endpoint endpoint_;
};

}  // namespace dtrun::agent
