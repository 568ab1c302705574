#include "rendezvous/etcd/http_connection.h"

#include <openssl/ssl.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <utility>

#include "common/error.h"
#include "common/host_port.h"

namespace dtrun::rendezvous::etcd {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string Endpoint::text() const { return hostPortText(host, port); }

std::vector<Endpoint> parseEndpoints(const std::string& option, const std::string& text,
                                     const std::string& protocol) {
  std::vector<Endpoint> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(start, comma - start);
    start = comma + 1;
    const auto bad = [&](const std::string& why) {
      return ConfigError(option + ": invalid etcd endpoint '" + item + "': " + why);
    };
    if (item.empty()) throw bad("empty (expected host:port, comma-separated)");
    std::string rest = item;
    if (auto scheme = rest.find("://"); scheme != std::string::npos) {
      const std::string s = rest.substr(0, scheme);
      if (s != "http" && s != "https") throw bad("expected http:// or https://");
      if (s != protocol) {
        throw bad("the scheme says " + s + " but protocol is " + protocol +
                  " (set --rdzv-conf protocol=" + s + ")");
      }
      rest = rest.substr(scheme + 3);
    }
    if (!rest.empty() && rest.back() == '/') rest.pop_back();
    const auto badPort = [&](const std::string& port) {
      return bad("port '" + port + "' is not a number from 1 to 65535");
    };
    HostPort split;
    try {
      split = splitHostPort(rest);
    } catch (const HostPortError& e) {
      throw e.inPort() ? badPort(e.port()) : bad(e.what());
    }
    if (split.host.empty()) throw bad("no host");
    if (split.port == 0) throw badPort("0");
    Endpoint ep;
    ep.host = split.host;
    if (split.port) ep.port = *split.port;
    out.push_back(ep);
    if (comma == text.size()) break;
  }
  return out;
}

namespace {

// A readable file, or ConfigError naming the option and the file.
void checkReadable(const std::string& what, const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw ConfigError("etcd TLS: " + what + " '" + path + "' is not a readable file");
  }
  std::ifstream in(path);
  if (!in) throw ConfigError("etcd TLS: " + what + " '" + path + "' cannot be read");
}

}  // namespace

std::shared_ptr<asio::ssl::context> makeTlsContext(const std::string& cacert,
                                                   const std::string& cert,
                                                   const std::string& key) {
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  boost::system::error_code ec;
  if (!cacert.empty()) {
    checkReadable("cacert", cacert);
    ctx->load_verify_file(cacert, ec);
    if (ec) {
      throw ConfigError("etcd TLS: cacert '" + cacert + "' holds no CA certificate in PEM form (" +
                        ec.message() + ")");
    }
  } else {
    ctx->set_default_verify_paths(ec);
  }
  ctx->set_verify_mode(asio::ssl::verify_peer);
  if (cert.empty() != key.empty()) {
    throw ConfigError("etcd TLS: cert and key go together; only " +
                      std::string(cert.empty() ? "key" : "cert") + " was given");
  }
  if (!cert.empty()) {
    checkReadable("cert", cert);
    checkReadable("key", key);
    ctx->use_certificate_chain_file(cert, ec);
    if (ec) {
      throw ConfigError("etcd TLS: cert '" + cert + "' is not a PEM certificate (" + ec.message() +
                        ")");
    }
    ctx->use_private_key_file(key, asio::ssl::context::pem, ec);
    if (ec && ec.message().find("mismatch") != std::string::npos) {
      throw ConfigError("etcd TLS: key '" + key + "' does not match cert '" + cert + "'");
    }
    if (ec) {
      throw ConfigError("etcd TLS: key '" + key + "' is not a PEM private key (" + ec.message() +
                        ")");
    }
    if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
      throw ConfigError("etcd TLS: key '" + key + "' does not match cert '" + cert + "'");
    }
  }
  return ctx;
}

struct HttpConnection::Streams {
  std::optional<beast::tcp_stream> tcp;
  std::optional<asio::ssl::stream<beast::tcp_stream>> ssl;
  std::optional<http::response_parser<http::string_body>> parser;  // while streaming
  // The parser keeps a reference to its chunk callback: it lives here, next to it.
  std::function<std::size_t(std::uint64_t, boost::string_view, boost::system::error_code&)> onChunk;

  template <typename F>
  void with(F&& f) {
    if (ssl) {
      f(*ssl);
    } else {
      f(*tcp);
    }
  }
  beast::tcp_stream& lowest() { return ssl ? ssl->next_layer() : *tcp; }
};

HttpConnection::HttpConnection(Endpoint endpoint, std::shared_ptr<asio::ssl::context> tls)
    : endpoint_(std::move(endpoint)), tls_(std::move(tls)) {}

HttpConnection::~HttpConnection() = default;

void HttpConnection::close() {
  if (!streams_) return;
  boost::system::error_code ec;
  streams_->lowest().socket().close(ec);
  // Handlers of the closed socket may still be queued: let them run before the streams go.
  io_.restart();
  io_.poll();
  streams_.reset();
  buffer_.clear();
  pending_.clear();
  streaming_ = false;
}

void HttpConnection::interrupt() {
  interrupted_ = true;
  asio::post(io_, [this] {
    if (streams_) {
      boost::system::error_code ec;
      streams_->lowest().socket().close(ec);
    }
  });
}

void HttpConnection::fail(const std::string& what, const std::string& why) {
  close();
  if (interrupted_) throw ConnectionError("etcd " + endpoint_.text() + ": interrupted");
  throw ConnectionError("etcd " + endpoint_.text() + ": " + what + ": " + why);
}

template <typename Start>
std::optional<boost::system::error_code> HttpConnection::runOp(Start&& start,
                                                               Clock::time_point deadline) {
  bool done = false;
  boost::system::error_code error;
  start([&](boost::system::error_code ec, auto&&...) {
    error = ec;
    done = true;
  });
  io_.restart();
  while (!done) {
    if (io_.run_one_until(deadline) == 0) break;
  }
  if (done) return error;
  // Deadline: a read in flight cannot be left behind (least of all inside TLS), so abort what is
  // in flight, let its handler run, then close.
  if (streams_) {
    boost::system::error_code ec;
    streams_->lowest().socket().close(ec);
  }
  io_.restart();
  io_.run();
  close();
  if (interrupted_) throw ConnectionError("etcd " + endpoint_.text() + ": interrupted");
  return std::nullopt;
}

template <typename Start>
boost::system::error_code HttpConnection::await(Start&& start, Clock::time_point deadline,
                                                const char* what) {
  if (auto error = runOp(std::forward<Start>(start), deadline)) return *error;
  throw TimeoutError("etcd " + endpoint_.text() + ": no answer in time (" + what + ")");
}

void HttpConnection::connect(Clock::time_point deadline) {
  if (streams_) return;
  auto s = std::make_unique<Streams>();
  if (tls_) {
    s->ssl.emplace(io_, *tls_);
  } else {
    s->tcp.emplace(io_);
  }
  streams_ = std::move(s);
  tcp::resolver resolver(io_);
  tcp::resolver::results_type results;
  auto error = await(
      [&](auto handler) {
        resolver.async_resolve(endpoint_.host, std::to_string(endpoint_.port),
                               [&results, handler](boost::system::error_code ec,
                                                   tcp::resolver::results_type r) mutable {
                                 results = std::move(r);
                                 handler(ec);
                               });
      },
      deadline, "resolving the host");
  if (error) fail("cannot resolve " + endpoint_.host, error.message());
  error = await([&](auto handler) { streams_->lowest().async_connect(results, handler); }, deadline,
                "connecting");
  if (error) fail("cannot connect", error.message());
  streams_->lowest().socket().set_option(tcp::no_delay(true), error);
  if (!tls_) return;
  SSL_set_tlsext_host_name(streams_->ssl->native_handle(), endpoint_.host.c_str());
  streams_->ssl->set_verify_callback(asio::ssl::host_name_verification(endpoint_.host));
  error = await(
      [&](auto handler) {
        streams_->ssl->async_handshake(asio::ssl::stream_base::client, handler);
      },
      deadline, "TLS handshake");
  if (error)
    fail(
        "TLS handshake failed (is protocol=https right, and cacert the CA that signed "
        "the member's certificate?)",
        error.message());
}

void HttpConnection::sendRequest(const std::string& path, const std::string& body,
                                 const std::string& auth, Clock::time_point deadline) {
  if (interrupted_) fail("request", "interrupted");
  connect(deadline);
  http::request<http::string_body> req{http::verb::post, path, 11};
  req.set(http::field::host, endpoint_.text());
  req.set(http::field::content_type, "application/json");
  if (!auth.empty()) req.set(http::field::authorization, auth);
  req.keep_alive(true);
  req.body() = body;
  req.prepare_payload();
  const auto error = await(
      [&](auto handler) {
        streams_->with([&](auto& stream) { http::async_write(stream, req, handler); });
      },
      deadline, "sending a request");
  if (error) fail("sending a request", error.message());
}

HttpConnection::Response HttpConnection::post(const std::string& path, const std::string& body,
                                              const std::string& auth, Clock::time_point deadline) {
  if (streaming_) close();
  sendRequest(path, body, auth, deadline);
  http::response_parser<http::string_body> parser;
  parser.body_limit(64u << 20);
  const auto error = await(
      [&](auto handler) {
        streams_->with([&](auto& stream) { http::async_read(stream, buffer_, parser, handler); });
      },
      deadline, "reading the answer");
  if (error) fail("reading the answer", error.message());
  auto res = parser.release();
  if (!res.keep_alive()) close();
  return {static_cast<int>(res.result_int()), std::move(res.body())};
}

HttpConnection::Response HttpConnection::startStream(const std::string& path,
                                                     const std::string& body,
                                                     const std::string& auth,
                                                     Clock::time_point deadline) {
  close();
  sendRequest(path, body, auth, deadline);
  streaming_ = true;
  auto& parser = streams_->parser.emplace();
  parser.body_limit(boost::none);
  streams_->onChunk = [this](std::uint64_t, boost::string_view data,
                             boost::system::error_code&) -> std::size_t {
    pending_.append(data.data(), data.size());
    return data.size();
  };
  parser.on_chunk_body(streams_->onChunk);
  const auto error = await(
      [&](auto handler) {
        streams_->with(
            [&](auto& stream) { http::async_read_header(stream, buffer_, parser, handler); });
      },
      deadline, "starting a stream");
  if (error) fail("starting a stream", error.message());
  const int status = static_cast<int>(parser.get().result_int());
  if (status == 200) return {status, ""};
  // An error answer is short: read it whole, then drop the stream.
  std::string text;
  try {
    const auto readSome = [&](auto handler) {
      streams_->with(
          [&](auto& stream) { http::async_read_some(stream, buffer_, parser, handler); });
    };
    while (!parser.is_done()) {
      if (await(readSome, deadline, "reading an error answer")) break;
    }
    text = pending_ + parser.get().body();
  } catch (const Error&) {
  }
  close();
  return {status, text};
}

std::optional<std::string> HttpConnection::nextLine(Clock::time_point deadline) {
  if (!streaming_ || !streams_) fail("reading a stream", "no stream is open");
  for (;;) {
    if (auto nl = pending_.find('\n'); nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      if (line.empty() || line == "\r") continue;
      return line;
    }
    auto& parser = *streams_->parser;
    if (parser.is_done()) {
      pending_ += parser.get().body();
      parser.get().body().clear();
      if (pending_.find('\n') != std::string::npos) continue;
      fail("reading a stream", "the member ended the stream");
    }
    if (interrupted_) fail("reading a stream", "interrupted");
    if (Clock::now() >= deadline) return std::nullopt;
    // Quiet until the deadline is not an error: runOp() closes the stream then, and the caller
    // opens a new one if it still wants to wait.
    const auto error = runOp(
        [&](auto handler) {
          streams_->with(
              [&](auto& stream) { http::async_read_some(stream, buffer_, parser, handler); });
        },
        deadline);
    if (!error) return std::nullopt;
    if (*error) fail("reading a stream", error->message());
  }
}

}  // namespace dtrun::rendezvous::etcd
