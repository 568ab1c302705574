#include "rendezvous/store_server.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/write.hpp>
#include <utility>

#include "common/error.h"
#include "common/host_port.h"

namespace asio = boost::asio;
using asio::ip::tcp;

namespace dtrun::rendezvous {

std::uint64_t raiseFileLimit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return 0;
  if (lim.rlim_cur < lim.rlim_max) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  return lim.rlim_cur;
}

void runServing(asio::io_context& io, spdlog::logger& log) {
  for (;;) {
    try {
      io.run();
      return;
    } catch (const std::exception& e) {
      log.error("store: unexpected error on the store's event loop (continuing): {}", e.what());
    }
  }
}

namespace {

// A later address of a server on a free port found the first one's port taken.
class PortTaken : public ConnectionError {
 public:
  using ConnectionError::ConnectionError;
};

std::string peerOf(const tcp::socket& socket) {
  boost::system::error_code ec;
  auto remote = socket.remote_endpoint(ec);
  return ec ? std::string("unknown peer")
            : remote.address().to_string() + ":" + std::to_string(remote.port());
}

}  // namespace

// One client connection: its socket, its timers, and the StoreConnection that speaks the
// protocol. Replies are written in batches, so a pipelining client costs one write per read.
class StoreServer::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(StoreServer& server, tcp::socket socket, StoreCore::ClientId id)
      : server_(server),
        socket_(std::move(socket)),
        peer_(peerOf(socket_)),
        conn_(server.core_, id, server.options_.limits, server.options_.maxReplyBytes,
              server.connectionBytes_, peer_, server.options_.token),
        timer_(server.io_) {
    boost::system::error_code ec;
    socket_.set_option(tcp::no_delay(true), ec);
    socket_.non_blocking(true, ec);
  }

  void start() { read(); }

  /// A parked WAIT/BARRIER/WAIT_CHANGE completed.
  void stopWaiting() {
    conn_.stopWaiting();
    flush();
  }

  /// Closes the socket; the pending handlers then finish with errors and the registry forgets us.
  void close() {
    if (closed_) return;
    closed_ = true;
    timer_.cancel();
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    conn_.close();
    server_.onSessionClosed(conn_.id());
  }

  /// Logs why (once, rate-limited with every other session's) and closes. Replies already
  /// made (DTRUN_AUTH's "refused" among them) are sent first if the socket takes them now.
  void closeBecause(const std::string& kind, const std::string& why) {
    if (closed_) return;
    server_.warn(kind, "store: closing connection from " + peer_ + ": " + why);
    if (!writing_ && conn_.hasOutput()) {
      const std::string last = conn_.takeOutput();
      boost::system::error_code ignored;
      socket_.send(asio::buffer(last), 0, ignored);  // non-blocking: what fits, or nothing
      conn_.sent();
    }
    close();
  }

  const std::string& peer() const { return peer_; }

 private:
  using Clock = std::chrono::steady_clock;
  // Replies wait while a write is in flight; past this much, reading pauses until it drains.
  static constexpr std::size_t kMaxPendingOut = 4 * 1024 * 1024;

  void read() {
    if (closed_ || reading_) return;
    if (conn_.pendingOutput() > kMaxPendingOut) return;  // resumed by flush()'s handler
    reading_ = true;
    // Reactor style: wait for readability, then read into the server's one buffer. A session
    // keeps only the request it is receiving, so thousands of idle connections cost little.
    socket_.async_wait(tcp::socket::wait_read,
                       [self = shared_from_this()](boost::system::error_code ec) {
                         self->reading_ = false;
                         if (ec) {
                           self->close();
                           return;
                         }
                         self->guarded([&] { self->onReadable(); });
                       });
  }

  // Runs a handler's body; whatever it throws closes this connection only.
  template <typename F>
  void guarded(F&& body) {
    try {
      body();
    } catch (const std::exception& e) {
      closeBecause("failure", std::string("serving it failed: ") + e.what());
    } catch (...) {
      closeBecause("failure", "serving it failed");
    }
  }

  void onReadable() {
    auto& buf = server_.readBuffer_;
    for (;;) {
      boost::system::error_code ec;
      std::size_t n = socket_.read_some(asio::buffer(buf), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) break;
      if (ec) {
        if (conn_.midRequest()) {
          // The peer left with a frame half sent: a truncated frame, named like any bad one.
          closeBecause("truncated", "it ended inside a request (" +
                                        std::to_string(conn_.receivedRequest()) +
                                        " bytes of a truncated frame)");
        } else {
          if (ec != asio::error::eof && ec != asio::error::connection_reset) {
            server_.log_->debug("store: connection {} read error: {}", peer_, ec.message());
          }
          close();
        }
        return;
      }
      lastActivity_ = Clock::now();
      const bool wasMidRequest = conn_.midRequest();
      std::string why = conn_.receive(std::string_view(buf.data(), n));
      if (!why.empty()) {
        closeBecause("refused", why);
        return;
      }
      if (auto lease = conn_.takeLease()) lease_ = *lease;
      if (conn_.midRequest() && !wasMidRequest) requestStarted_ = lastActivity_;
      armTimer();
      flush();
      if (closed_) return;
      // A full buffer means more is probably waiting: read it now rather than through another
      // trip round the reactor. Otherwise the socket is drained; wait for readiness again.
      if (n < buf.size() || conn_.pendingOutput() > kMaxPendingOut) break;
    }
    read();
  }

  // One timer serves both deadlines: the lease (nothing received for that long) and the frame
  // timeout (a request begun and not finished). It is re-armed lazily: a handler that finds the
  // deadline moved waits again.
  std::optional<Clock::time_point> nextDeadline() const {
    std::optional<Clock::time_point> at;
    if (lease_.count() > 0) at = lastActivity_ + lease_;
    const auto frameTimeout = server_.options_.frameTimeout;
    if (conn_.midRequest() && frameTimeout.count() > 0) {
      auto frameAt = requestStarted_ + frameTimeout;
      if (!at || frameAt < *at) at = frameAt;
    }
    return at;
  }

  void armTimer() {
    auto at = nextDeadline();
    if (!at || closed_) return;
    if (timerArmed_ && timerAt_ <= *at) return;  // the armed wake-up comes first; it re-checks
    timerArmed_ = true;
    timerAt_ = *at;
    timer_.expires_at(*at);
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec == asio::error::operation_aborted && !self->closed_ && self->timerArmed_) {
        return;  // re-armed earlier: that wait owns the timer now
      }
      self->timerArmed_ = false;
      if (ec || self->closed_) return;
      self->guarded([&] { self->onTimer(); });
    });
  }

  void onTimer() {
    const auto now = Clock::now();
    if (lease_.count() > 0 && now - lastActivity_ >= lease_) {
      auto quiet = std::chrono::duration_cast<std::chrono::milliseconds>(now - lastActivity_);
      closeBecause("lease", "nothing received for " + std::to_string(quiet.count()) + " ms");
      return;
    }
    const auto frameTimeout = server_.options_.frameTimeout;
    if (conn_.midRequest() && frameTimeout.count() > 0 && now - requestStarted_ >= frameTimeout) {
      closeBecause(
          "timeout",
          "a request begun " +
              std::to_string(
                  std::chrono::duration_cast<std::chrono::seconds>(now - requestStarted_).count()) +
              " s ago is still incomplete (" + std::to_string(conn_.receivedRequest()) + " bytes)");
      return;
    }
    armTimer();
  }

  void flush() {
    if (closed_ || writing_ || !conn_.hasOutput()) return;
    writing_ = true;
    out_ = conn_.takeOutput();
    asio::async_write(socket_, asio::buffer(out_),
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                        self->writing_ = false;
                        self->out_.clear();
                        self->conn_.sent();
                        if (ec) {
                          self->close();
                          return;
                        }
                        self->guarded([&] {
                          self->flush();
                          self->read();
                        });
                      });
  }

  StoreServer& server_;
  tcp::socket socket_;
  std::string peer_;
  StoreConnection conn_;
  std::string out_;  // the write in flight
  bool writing_ = false;
  bool reading_ = false;
  bool closed_ = false;
  std::chrono::milliseconds lease_{0};
  Clock::time_point lastActivity_ = Clock::now();
  Clock::time_point requestStarted_ = Clock::now();
  asio::steady_timer timer_;
  bool timerArmed_ = false;
  Clock::time_point timerAt_{};
};

StoreServer::StoreServer(asio::io_context& io, StoreServerOptions options,
                         std::shared_ptr<spdlog::logger> log)
    : io_(io),
      options_(std::move(options)),
      log_(std::move(log)),
      warningFlush_(io),
      core_([this](StoreCore::ClientId id) { wake(id); },
            StoreQuota{options_.limits.maxValueSize, options_.memoryQuota}),
      warnings_(options_.warningBurst, options_.warningWindow) {}

StoreServer::~StoreServer() {
  // Sessions hold a reference to us; make sure none outlives the server.
  stop();
  if (spareFd_ >= 0) ::close(spareFd_);
}

void StoreServer::start() {
  std::uint64_t files = raiseFileLimit();
  maxConnections_ = options_.maxConnections;
  if (maxConnections_ == 0 && files > 64) maxConnections_ = files - 64;  // room for logs, workers
  if (options_.hosts.empty()) throw ConnectionError("store: no address to listen on");
  // With a free port and several addresses, the port the first one got may be taken on another
  // address already: then all of them try again with a new one.
  for (int attempt = 0;; ++attempt) {
    try {
      listenAll(options_.port);
      break;
    } catch (const PortTaken&) {
      listeners_.clear();
      if (options_.port != 0 || attempt == 8) throw;
    }
  }
  spareFd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  std::string where;
  for (const auto& ep : endpoints()) {
    where += (where.empty() ? "" : ", ") + hostPortText(ep.address().to_string(), ep.port());
  }
  log_->info("store: listening on {}{}", where,
             options_.token.empty() ? ""
                                    : " (a shared secret guards the keys under " +
                                          std::string(kProtectedKeyPrefix) + ")");
  for (std::size_t i = 0; i < listeners_.size(); ++i) accept(i);
}

std::vector<tcp::endpoint> StoreServer::endpoints() const {
  std::vector<tcp::endpoint> out;
  for (const auto& l : listeners_) out.push_back(l.endpoint);
  return out;
}

void StoreServer::listenAll(std::uint16_t port) {
  listeners_.reserve(options_.hosts.size() * 2);
  for (const auto& host : options_.hosts) {
    const std::string where = hostPortText(host, port);
    try {
      tcp::resolver resolver(io_);
      auto results = resolver.resolve(host, std::to_string(port),
                                      tcp::resolver::passive | tcp::resolver::numeric_service);
      for (const auto& r : results) {
        tcp::endpoint ep = r.endpoint();
        if (!listeners_.empty() && port == 0) ep.port(listeners_.front().endpoint.port());
        bool duplicate = false;
        for (const auto& l : listeners_) duplicate = duplicate || l.endpoint == ep;
        if (duplicate) continue;
        try {
          listenOn(ep);
        } catch (const boost::system::system_error& e) {
          // "::" on a kernel without IPv6: every IPv4 address instead, as torch's server does.
          const bool noV6 = e.code() == boost::system::errc::address_family_not_supported ||
                            e.code() == boost::system::errc::address_not_available;
          if (!(host == "::" && noV6)) throw;
          log_->info("store: no IPv6 on this machine ({}); listening on IPv4 only",
                     e.code().message());
          listenOn(tcp::endpoint(asio::ip::address_v4::any(), ep.port()));
        }
      }
    } catch (const boost::system::system_error& e) {
      const std::string why = "store: cannot listen on " + where + ": " + e.code().message();
      // The port a first address got may be another process's on this one: worth a new port.
      if (e.code() == boost::system::errc::address_in_use && !listeners_.empty()) {
        throw PortTaken(why);
      }
      throw ConnectionError(why);
    }
  }
}

void StoreServer::listenOn(const tcp::endpoint& ep) {
  // Opened here with SOCK_CLOEXEC (Asio's open() would leave it inheritable).
  int fd = ::socket(ep.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    throw boost::system::system_error(
        boost::system::error_code(errno, boost::system::system_category()));
  }
  Listener l{tcp::acceptor(io_), {}, asio::steady_timer(io_)};
  l.acceptor.assign(ep.protocol(), fd);
  l.acceptor.set_option(tcp::acceptor::reuse_address(true));
  // "::" (any IPv6 address) also takes IPv4 clients, whatever net.ipv6.bindv6only says; a
  // specific IPv6 address is that address only.
  if (ep.address().is_v6()) {
    l.acceptor.set_option(asio::ip::v6_only(!ep.address().is_unspecified()));
  }
  l.acceptor.bind(ep);
  l.acceptor.listen(options_.backlog);
  l.endpoint = l.acceptor.local_endpoint();
  listeners_.push_back(std::move(l));
}

void StoreServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ignored;
  for (auto& l : listeners_) {
    l.acceptor.close(ignored);
    l.retry.cancel();
  }
  warningFlush_.cancel();
  auto sessions = std::move(sessions_);
  sessions_.clear();
  for (auto& [id, s] : sessions) s->close();
}

void StoreServer::accept(std::size_t listener) {
  // Readiness, then accept4() until the queue is empty: a storm of clients is taken from the
  // kernel's accept queue as fast as it fills, so the queue does not overflow into SYN retries.
  auto& l = listeners_[listener];
  l.acceptor.async_wait(tcp::acceptor::wait_read, [this, listener](boost::system::error_code ec) {
    if (ec == asio::error::operation_aborted || stopped_) return;
    if (ec) {
      warn("accept", "store: waiting for connections failed: " + ec.message() + "; retrying");
      auto& retry = listeners_[listener].retry;
      retry.expires_after(std::chrono::milliseconds(20));
      retry.async_wait([this, listener](boost::system::error_code e) {
        if (!e && !stopped_) accept(listener);
      });
      return;
    }
    try {
      acceptReady(listener);
    } catch (const std::exception& e) {
      warn("accept", std::string("store: accepting a connection failed: ") + e.what());
    }
    if (!stopped_) accept(listener);
  });
}

void StoreServer::acceptReady(std::size_t listener) {
  auto& l = listeners_[listener];
  const int lfd = l.acceptor.native_handle();
  for (int i = 0; i < 4096 && !stopped_; ++i) {
    int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      onAccepted(fd, l.endpoint);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    if ((errno == EMFILE || errno == ENFILE) && spareFd_ >= 0) {
      // Out of descriptors: give the spare one up to take the client off the queue and close
      // it at once, so it hears "no" now instead of retrying its SYN for seconds.
      ::close(spareFd_);
      spareFd_ = -1;
      int victim = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (victim >= 0) refuse(victim, "no file descriptors left (RLIMIT_NOFILE)");
      spareFd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      continue;
    }
    warn("accept", std::string("store: accept failed: ") + std::strerror(errno));
    return;
  }
}

void StoreServer::refuse(int fd, const std::string& why) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  std::string peer = "unknown peer";
  char text[INET6_ADDRSTRLEN] = {};
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    const void* a =
        addr.ss_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&addr)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr);
    if (::inet_ntop(addr.ss_family, a, text, sizeof(text))) peer = text;
  }
  ::close(fd);
  warn("refused-connection", "store: refusing " + peer + ": " + why);
}

void StoreServer::onAccepted(int fd, const tcp::endpoint& local) {
  if (maxConnections_ != 0 && sessions_.size() >= maxConnections_) {
    refuse(fd, "connection limit " + std::to_string(maxConnections_) + " reached");
    return;
  }
  tcp::socket socket(io_);
  boost::system::error_code ec;
  socket.assign(local.protocol(), fd, ec);
  if (ec) {
    ::close(fd);
    warn("accept", "store: cannot take a connection: " + ec.message());
    return;
  }
  auto id = nextId_++;
  auto session = std::make_shared<Session>(*this, std::move(socket), id);
  sessions_.emplace(id, session);
  log_->debug("store: connection {} from {}", id, session->peer());
  session->start();
}

void StoreServer::onSessionClosed(StoreCore::ClientId id) {
  sessions_.erase(id);  // its handlers still hold it until they run (aborted)
}

void StoreServer::wake(StoreCore::ClientId id) {
  auto it = sessions_.find(id);
  if (it != sessions_.end()) it->second->stopWaiting();
}

void StoreServer::warn(const std::string& kind, const std::string& line) {
  std::string summary;
  const bool allowed = warnings_.allow(kind, WarningLimiter::Clock::now(), &summary);
  if (!summary.empty()) log_->warn("store: {}", summary);
  if (allowed) {
    log_->warn("{}", line);
  } else {
    armWarningFlush();
  }
}

void StoreServer::armWarningFlush() {
  if (flushArmed_ || stopped_) return;
  auto at = warnings_.nextFlush();
  if (!at) return;
  flushArmed_ = true;
  warningFlush_.expires_at(*at);
  warningFlush_.async_wait([this](boost::system::error_code ec) {
    flushArmed_ = false;
    if (ec || stopped_) return;
    for (const auto& line : warnings_.flush()) log_->warn("store: {}", line);
    armWarningFlush();
  });
}

}  // namespace dtrun::rendezvous
