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

#include "common/error.h"

namespace dtrun::rendezvous::etcd {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string Endpoint::text() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
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

void HttpConnection::runUntil(const bool& done, Clock::time_point deadline, const char* what) {
  io_.restart();
  while (!done) {
    if (io_.run_one_until(deadline) == 0) break;
  }
  if (done) return;
  // Deadline: abort what is in flight, let its handler run, then report.
  if (streams_) {
    boost::system::error_code ec;
    streams_->lowest().socket().close(ec);
  }
  io_.restart();
  io_.run();
  close();
  if (interrupted_) throw ConnectionError("etcd " + endpoint_.text() + ": interrupted");
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
  bool done = false;
  boost::system::error_code error;
  tcp::resolver::results_type results;
  resolver.async_resolve(endpoint_.host, std::to_string(endpoint_.port),
                         [&](boost::system::error_code ec, tcp::resolver::results_type r) {
                           error = ec;
                           results = std::move(r);
                           done = true;
                         });
  runUntil(done, deadline, "resolving the host");
  if (error) fail("cannot resolve " + endpoint_.host, error.message());
  done = false;
  streams_->lowest().async_connect(results,
                                   [&](boost::system::error_code ec, const tcp::endpoint&) {
                                     error = ec;
                                     done = true;
                                   });
  runUntil(done, deadline, "connecting");
  if (error) fail("cannot connect", error.message());
  streams_->lowest().socket().set_option(tcp::no_delay(true), error);
  if (!tls_) return;
  SSL_set_tlsext_host_name(streams_->ssl->native_handle(), endpoint_.host.c_str());
  streams_->ssl->set_verify_callback(asio::ssl::host_name_verification(endpoint_.host));
  done = false;
  streams_->ssl->async_handshake(asio::ssl::stream_base::client, [&](boost::system::error_code ec) {
    error = ec;
    done = true;
  });
  runUntil(done, deadline, "TLS handshake");
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
  bool done = false;
  boost::system::error_code error;
  streams_->with([&](auto& stream) {
    http::async_write(stream, req, [&](boost::system::error_code ec, std::size_t) {
      error = ec;
      done = true;
    });
  });
  runUntil(done, deadline, "sending a request");
  if (error) fail("sending a request", error.message());
}

HttpConnection::Response HttpConnection::post(const std::string& path, const std::string& body,
                                              const std::string& auth, Clock::time_point deadline) {
  if (streaming_) close();
  sendRequest(path, body, auth, deadline);
  http::response_parser<http::string_body> parser;
  parser.body_limit(64u << 20);
  bool done = false;
  boost::system::error_code error;
  streams_->with([&](auto& stream) {
    http::async_read(stream, buffer_, parser, [&](boost::system::error_code ec, std::size_t) {
      error = ec;
      done = true;
    });
  });
  runUntil(done, deadline, "reading the answer");
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
  bool done = false;
  boost::system::error_code error;
  streams_->with([&](auto& stream) {
    http::async_read_header(stream, buffer_, parser,
                            [&](boost::system::error_code ec, std::size_t) {
                              error = ec;
                              done = true;
                            });
  });
  runUntil(done, deadline, "starting a stream");
  if (error) fail("starting a stream", error.message());
  const int status = static_cast<int>(parser.get().result_int());
  if (status == 200) return {status, ""};
  // An error answer is short: read it whole, then drop the stream.
  std::string text;
  try {
    while (!parser.is_done()) {
      done = false;
      streams_->with([&](auto& stream) {
        http::async_read_some(stream, buffer_, parser,
                              [&](boost::system::error_code ec, std::size_t) {
                                error = ec;
                                done = true;
                              });
      });
      runUntil(done, deadline, "reading an error answer");
      if (error) break;
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
    bool done = false;
    boost::system::error_code error;
    streams_->with([&](auto& stream) {
      http::async_read_some(stream, buffer_, parser,
                            [&](boost::system::error_code ec, std::size_t) {
                              error = ec;
                              done = true;
                            });
    });
    io_.restart();
    while (!done) {
      if (io_.run_one_until(deadline) == 0) break;
    }
    if (!done) {
      // Quiet until the deadline: not an error, but a read in flight cannot be left behind
      // (least of all inside TLS), so the stream is closed; the caller opens a new one if it
      // still wants to wait.
      boost::system::error_code ec;
      streams_->lowest().socket().close(ec);
      io_.restart();
      io_.run();
      close();
      if (interrupted_) fail("reading a stream", "interrupted");
      return std::nullopt;
    }
    if (error) fail("reading a stream", error.message());
  }
}

}  // namespace dtrun::rendezvous::etcd
