// HttpConnection: one HTTP/1.1 connection (plain or TLS) to one etcd member, blocking, every
// operation bounded by a deadline; and Endpoint, a member's address, with its parser. The etcd
// client (rendezvous/etcd/etcd_client.h) keeps one per member it talks to; a watch has one of its
// own, since its response never ends.
//
// Blocking calls run Boost.Beast's async operations on a private io_context until the deadline:
// this is how a synchronous Beast call gets a timeout. interrupt() may be called from any thread
// and makes the call in progress (and the next one) fail at once.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrun::rendezvous::etcd {

using Clock = std::chrono::steady_clock;

/// One etcd member's client URL, split.
struct Endpoint {
  std::string host;
  std::uint16_t port = 2379;
  /// "host:port" ("[::1]:2379" for IPv6).
  std::string text() const;
};

/// "a:2379,http://b:2379,https://c" -> endpoints; a scheme must agree with `protocol` ("http" or
/// "https"). Throws ConfigError naming `option` and the bad element.
std::vector<Endpoint> parseEndpoints(const std::string& option, const std::string& text,
                                     const std::string& protocol);

/// The client side of TLS: a CA file to verify the members with, and optionally a client
/// certificate and key. Throws ConfigError naming the file and what is wrong with it.
std::shared_ptr<boost::asio::ssl::context> makeTlsContext(const std::string& cacert,
                                                          const std::string& cert,
                                                          const std::string& key);

class HttpConnection {
 public:
  struct Response {
    int status = 0;
    std::string body;
  };

  /// `tls` null: plain HTTP. Connects lazily.
  HttpConnection(Endpoint endpoint, std::shared_ptr<boost::asio::ssl::context> tls);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  /// POSTs `body` (JSON) to `path` and reads the whole response, reusing the connection when it
  /// is open. Throws ConnectionError (connect, TLS handshake, I/O) or TimeoutError (deadline);
  /// the connection is then closed.
  Response post(const std::string& path, const std::string& body, const std::string& auth,
                Clock::time_point deadline);

  /// Streaming: POSTs and reads the response's header. A status other than 200 comes back with
  /// its body (the stream is then closed); 200 leaves the body to nextLine().
  Response startStream(const std::string& path, const std::string& body, const std::string& auth,
                       Clock::time_point deadline);
  /// The next newline-terminated message of the streamed body, or nullopt when `deadline` passed
  /// first (the stream is then closed). Throws ConnectionError when the stream ends or breaks.
  std::optional<std::string> nextLine(Clock::time_point deadline);

  /// Closes the connection (the next call connects again).
  void close();
  /// Any thread: the call in progress fails now with ConnectionError("interrupted"), and so does
  /// every later one.
  void interrupt();
  bool interrupted() const { return interrupted_; }

  const Endpoint& endpoint() const { return endpoint_; }

 private:
  struct Streams;
  void connect(Clock::time_point deadline);
  /// Runs one Beast/Asio operation on the private io_context to its end or `deadline`: `start`
  /// begins it with the handler it is given (called as handler(ec, ...)). Returns the
  /// operation's error code, or nullopt when the deadline came first: the operation is then
  /// aborted (its handler has run) and the connection closed. Throws ConnectionError after
  /// interrupt().
  template <typename Start>
  std::optional<boost::system::error_code> runOp(Start&& start, Clock::time_point deadline);
  /// runOp(), with the deadline a TimeoutError naming `what`.
  template <typename Start>
  boost::system::error_code await(Start&& start, Clock::time_point deadline, const char* what);
  void sendRequest(const std::string& path, const std::string& body, const std::string& auth,
                   Clock::time_point deadline);
  [[noreturn]] void fail(const std::string& what, const std::string& why);

  Endpoint endpoint_;
  std::shared_ptr<boost::asio::ssl::context> tls_;
  boost::asio::io_context io_{1};
  std::unique_ptr<Streams> streams_;
  boost::beast::flat_buffer buffer_;
  std::string pending_;  // streamed body bytes not yet returned by nextLine()
  bool streaming_ = false;
  std::atomic<bool> interrupted_{false};
};

}  // namespace dtrun::rendezvous::etcd
