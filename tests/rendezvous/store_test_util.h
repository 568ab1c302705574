// Helpers for the store tests: a StoreServer on its own thread, raw loopback sockets that speak
// bytes rather than a client API, frame builders, and a log capture for asserting on log lines.
//
// Everything binds or connects to 127.0.0.1 with port 0; every blocking read has a deadline.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "rendezvous/store_server.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/wire.h"

namespace dtrun::rendezvous::test {

using namespace std::chrono_literals;

inline std::shared_ptr<spdlog::logger> quietLogger() {
  return std::make_shared<spdlog::logger>("store", std::make_shared<spdlog::sinks::null_sink_mt>());
}

/// Log lines captured through spdlog's ostream sink. Read text() only once the thread that logs
/// has stopped (ServerThread::stop() joins it): the stream itself is not synchronised for readers.
// An spdlog sink that keeps what it is given in a string, read under the sink's own lock: the
// server's thread logs while the test's thread reads.
class StringSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::string text() {
    std::lock_guard<std::mutex> lock(mutex_);
    return text_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t buf;
    formatter_->format(msg, buf);
    text_.append(buf.data(), buf.size());
  }
  void flush_() override {}

 private:
  std::string text_;
};

class CapturedLog {
 public:
  CapturedLog()
      : sink_(std::make_shared<StringSink>()),
        logger_(std::make_shared<spdlog::logger>("store", sink_)) {
    sink_->set_pattern("%l %v");
    logger_->set_level(spdlog::level::debug);
  }
  const std::shared_ptr<spdlog::logger>& logger() const { return logger_; }
  std::string text() const { return sink_->text(); }
  /// The lines that contain `needle`.
  std::vector<std::string> linesWith(std::string_view needle) const {
    std::vector<std::string> out;
    std::istringstream in(text());
    for (std::string line; std::getline(in, line);) {
      if (line.find(needle) != std::string::npos) out.push_back(line);
    }
    return out;
  }

 private:
  std::shared_ptr<StringSink> sink_;
  std::shared_ptr<spdlog::logger> logger_;
};

/// A client of a test server on loopback, with generous deadlines.
inline TcpStoreOptions clientOptions(std::uint16_t port,
                                     wire::Dialect dialect = wire::Dialect::kTorch2) {
  TcpStoreOptions o;
  o.port = port;
  o.dialect = dialect;
  o.connectTimeout = std::chrono::seconds(20);
  o.timeout = std::chrono::seconds(20);
  return o;
}

inline StoreServerOptions loopbackOptions() {
  StoreServerOptions o;
  o.hosts = {"127.0.0.1"};
  o.port = 0;
  o.warningBurst = 1000;  // tests that count log lines per connection; one test checks the limit
  return o;
}

/// A StoreServer on loopback port 0, run by its own thread until stop() or destruction.
class ServerThread {
 public:
  explicit ServerThread(StoreServerOptions options = loopbackOptions(),
                        std::shared_ptr<spdlog::logger> log = quietLogger())
      : server_(io_, std::move(options), std::move(log)) {
    server_.start();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~ServerThread() { stop(); }
  ServerThread(const ServerThread&) = delete;
  ServerThread& operator=(const ServerThread&) = delete;

  std::uint16_t port() const { return server_.endpoint().port(); }

  /// Stops the server and joins its thread: io.run() must return on its own once stopped.
  void stop() {
    if (!thread_.joinable()) return;
    boost::asio::post(io_, [this] { server_.stop(); });
    thread_.join();
  }

  /// Runs `fn` on the io thread and returns its result (the server's state lives there).
  template <typename F>
  auto onIoThread(F fn) -> decltype(fn(std::declval<StoreServer&>())) {
    using R = decltype(fn(std::declval<StoreServer&>()));
    std::promise<R> done;
    auto result = done.get_future();
    boost::asio::post(io_, [&] {
      try {
        done.set_value(fn(server_));
      } catch (...) {
        done.set_exception(std::current_exception());
      }
    });
    return result.get();
  }

  std::size_t connectionCount() {
    return onIoThread([](StoreServer& s) { return s.connectionCount(); });
  }

 private:
  boost::asio::io_context io_{1};
  StoreServer server_;
  std::thread thread_;
};

/// A plain TCP connection to 127.0.0.1:port that sends and receives raw bytes.
class RawConn {
 public:
  explicit RawConn(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      int err = errno;
      ::close(fd_);
      throw std::runtime_error(std::string("connect: ") + std::strerror(err));
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~RawConn() { close(); }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  /// Sends every byte; false when the peer already closed (EPIPE, ECONNRESET).
  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  void shutdownWrite() { ::shutdown(fd_, SHUT_WR); }

  /// "127.0.0.1:<this end's port>": how the server names this client.
  std::string localAddress() const {
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    return "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  }

  /// Exactly `n` bytes; throws when the deadline passes or the peer closes first.
  std::string recv(std::size_t n, std::chrono::milliseconds timeout = 20s) {
    std::string out;
    auto until = std::chrono::steady_clock::now() + timeout;
    while (out.size() < n) {
      if (!readable(until)) {
        throw std::runtime_error("recv: timed out with " + std::to_string(out.size()) + " of " +
                                 std::to_string(n) + " bytes");
      }
      char buf[4096];
      ssize_t got = ::recv(fd_, buf, std::min(sizeof(buf), n - out.size()), 0);
      if (got == 0) throw std::runtime_error("recv: connection closed by the server");
      if (got < 0 && errno != EINTR) {
        throw std::runtime_error(std::string("recv: ") + std::strerror(errno));
      }
      if (got > 0) out.append(buf, static_cast<std::size_t>(got));
    }
    return out;
  }

  std::int64_t recvI64(std::chrono::milliseconds timeout = 20s) {
    std::string b = recv(8, timeout);
    std::int64_t v = 0;
    std::memcpy(&v, b.data(), 8);
    return v;
  }
  std::uint32_t recvU32(std::chrono::milliseconds timeout = 20s) {
    std::string b = recv(4, timeout);
    std::uint32_t v = 0;
    std::memcpy(&v, b.data(), 4);
    return v;
  }
  std::string recvBytes(std::chrono::milliseconds timeout = 20s) {
    auto len = static_cast<std::size_t>(recvI64(timeout));
    return recv(len, timeout);
  }

  /// Whatever has arrived by now, without blocking ("" when nothing).
  std::string recvAvailable() {
    std::string out;
    char buf[4096];
    for (;;) {
      ssize_t got = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (got <= 0) return out;
      out.append(buf, static_cast<std::size_t>(got));
    }
  }

  /// True once the server closed the connection (EOF or reset), reading and discarding any bytes
  /// before that; false when it is still open at the deadline.
  bool closedByPeer(std::chrono::milliseconds timeout = 20s) {
    auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (!readable(until)) return false;
      char buf[4096];
      ssize_t got = ::recv(fd_, buf, sizeof(buf), 0);
      if (got == 0) return true;
      if (got < 0 && errno != EINTR && errno != EAGAIN) return true;  // ECONNRESET
    }
  }

  std::uint16_t localPort() const {
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    return ntohs(addr.sin_port);
  }
  int fd() const { return fd_; }

 private:
  bool readable(std::chrono::steady_clock::time_point until) {
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      until - std::chrono::steady_clock::now())
                      .count();
      if (left < 0) left = 0;
      pollfd p{fd_, POLLIN, 0};
      int rc = ::poll(&p, 1, static_cast<int>(left));
      if (rc > 0) return true;
      if (rc == 0) return false;
      if (errno != EINTR) return false;
    }
  }

  int fd_ = -1;
};

/// The torch 2.x handshake: VALIDATE with the magic number.
inline std::string validateFrame() { return std::string("\x00\xCE\xF7\x85\x3C", 5); }

/// One encoded request.
inline std::string frame(wire::Dialect dialect, wire::Op op, std::vector<std::string> keys = {},
                         std::vector<Bytes> values = {}, std::int64_t number = 0,
                         std::uint32_t word = 0) {
  return wire::encodeFrame(dialect, op, std::move(keys), std::move(values), number, word);
}

/// Shorthand for the torch 2.x table.
inline std::string frame2(wire::Op op, std::vector<std::string> keys = {},
                          std::vector<Bytes> values = {}, std::int64_t number = 0,
                          std::uint32_t word = 0) {
  return frame(wire::Dialect::kTorch2, op, std::move(keys), std::move(values), number, word);
}

/// A raw connection that has done the torch 2.x handshake (VALIDATE, then a PING round trip).
inline std::unique_ptr<RawConn> connect2(std::uint16_t port) {
  auto c = std::make_unique<RawConn>(port);
  c->send(validateFrame() + frame2(wire::Op::kPing, {}, {}, 0, 4242));
  if (c->recvU32() != 4242) throw std::runtime_error("handshake: wrong PING echo");
  return c;
}

/// A thread whose exception is rethrown by join() instead of terminating the test binary. The
/// destructor joins too (and drops the exception), so an early test failure cannot leak a thread.
class Background {
 public:
  template <typename F>
  explicit Background(F fn)
      : thread_([this, fn = std::move(fn)]() mutable {
          try {
            fn();
          } catch (...) {
            error_ = std::current_exception();
          }
        }) {}
  ~Background() {
    if (thread_.joinable()) thread_.join();
  }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  void join() {
    thread_.join();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::exception_ptr error_;  // declared first: the thread may set it at once
  std::thread thread_;
};

/// Runs `fn(i)` on `n` threads, joins them all, then rethrows the first failure (gloo's
/// spawnThreads): Catch2 assertions stay on the main thread.
template <typename F>
void runThreads(int n, F fn) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        fn(i);
      } catch (...) {
        errors[static_cast<std::size_t>(i)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace dtrun::rendezvous::test
