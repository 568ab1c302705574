#include "rendezvous/store_server.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <utility>

#include "common/error.h"
#include "common/host_port.h"
#include "rendezvous/store_session.h"

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

}  // namespace

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
