#include "agent/metrics_server.h"

#include <boost/asio/ip/address.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <map>
#include <optional>

#include "common/error.h"

namespace dtrun::agent {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

// A scraper that connects and says nothing, or reads slowly, holds a descriptor for this long at
// most; a request is a few hundred bytes.
constexpr std::chrono::seconds kIdle(30);
constexpr std::size_t kRequestLimit = 8 * 1024;

}  // namespace

struct MetricsServer::State : std::enable_shared_from_this<MetricsServer::State> {
  class Session;

  State(asio::io_context& io, MetricsHandler handler) : acceptor(io), metrics(std::move(handler)) {}

  void accept();
  void close();

  tcp::acceptor acceptor;
  MetricsHandler metrics;
  std::map<std::uint64_t, std::weak_ptr<Session>> sessions;
  std::uint64_t nextId = 0;
  bool closed = false;
};

class MetricsServer::State::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<State> server, tcp::socket socket, std::uint64_t id)
      : server_(std::move(server)), stream_(std::move(socket)), id_(id) {}

  void read() {
    parser_.emplace();
    parser_->header_limit(kRequestLimit);
    parser_->body_limit(kRequestLimit);
    stream_.expires_after(kIdle);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       if (ec) return self->close();
                       self->serve();
                     });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
    server_->sessions.erase(id_);
  }

 private:
  void serve() {
    const auto& req = parser_->get();
    const bool keepAlive = req.keep_alive();
    const std::string target(req.target());
    const std::string path = target.substr(0, target.find('?'));
    if (req.method() != http::verb::get) {
      return respond(405, "text/plain; charset=utf-8", "only GET is served\n", keepAlive);
    }
    if (path == "/healthz") return respond(200, "text/plain; charset=utf-8", "ok\n", keepAlive);
    if (path == "/metrics") {
      server_->metrics(
          [self = shared_from_this(), keepAlive](int status, std::string type, std::string body) {
            self->respond(status, std::move(type), std::move(body), keepAlive);
          });
      return;
    }
    if (path == "/") {
      return respond(200, "text/html; charset=utf-8",
                     "<html><body><a href=\"/metrics\">/metrics</a> <a "
                     "href=\"/healthz\">/healthz</a></body></html>\n",
                     keepAlive);
    }
    respond(404, "text/plain; charset=utf-8", "not found: " + path + "\n", keepAlive);
  }

  void respond(int status, std::string type, std::string body, bool keepAlive) {
    if (!stream_.socket().is_open()) return;
    res_ = {};
    res_.version(11);
    res_.result(static_cast<http::status>(status));
    res_.set(http::field::content_type, type);
    res_.set(http::field::server, "dtrun");
    res_.keep_alive(keepAlive);
    res_.body() = std::move(body);
    res_.prepare_payload();
    stream_.expires_after(kIdle);
    http::async_write(stream_, res_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        if (ec || !self->res_.keep_alive()) return self->close();
                        self->read();
                      });
  }

  std::shared_ptr<State> server_;
  beast::tcp_stream stream_;
  std::uint64_t id_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;
};

void MetricsServer::State::accept() {
  acceptor.async_accept([self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    if (self->closed) return;
    if (!ec) {
      auto session = std::make_shared<Session>(self, std::move(socket), self->nextId++);
      self->sessions[self->nextId - 1] = session;
      session->read();
    }
    // A failed accept (descriptors exhausted) leaves the agent as it was; try the next one.
    self->accept();
  });
}

void MetricsServer::State::close() {
  if (closed) return;
  closed = true;
  beast::error_code ignored;
  acceptor.close(ignored);
  auto open = std::move(sessions);
  sessions.clear();
  for (auto& [id, weak] : open) {
    if (auto s = weak.lock()) s->close();
  }
}

MetricsServer::MetricsServer(asio::io_context& io, const std::string& host, std::uint16_t port,
                             MetricsHandler metrics)
    : state_(std::make_shared<State>(io, std::move(metrics))) {
  beast::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) throw ConfigError("--metrics-host " + host + ": not an IP address");
  const tcp::endpoint where(address, port);
  auto fail = [&](const char* what) {
    throw ConfigError("--metrics-port " + std::to_string(port) + ": cannot " + what + " " + host +
                      ":" + std::to_string(port) + ": " + ec.message());
  };
  state_->acceptor.open(where.protocol(), ec);
  if (ec) fail("open");
  state_->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  state_->acceptor.bind(where, ec);
  if (ec) fail("bind");
  state_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail("listen on");
  endpoint_ = state_->acceptor.local_endpoint(ec);
  state_->accept();
}

MetricsServer::~MetricsServer() { close(); }

void MetricsServer::close() { state_->close(); }

}  // namespace dtrun::agent
