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

StoreServer::StoreServer(asio::io_context& io, StoreServerOptions options,
                         std::shared_ptr<spdlog::logger> log)
    : io_(io),
      options_(std::move(options)),
      log_(std::move(log)),
      acceptor_(io),
      acceptRetry_(io),
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
  const std::string where = joinHostPort(options_.host, options_.port);
  try {
    tcp::resolver resolver(io_);
    auto results = resolver.resolve(options_.host, std::to_string(options_.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service);
    tcp::endpoint ep = results.begin()->endpoint();
    // Opened here with SOCK_CLOEXEC (Asio's open() would leave it inheritable).
    int fd = ::socket(ep.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      throw boost::system::system_error(
          boost::system::error_code(errno, boost::system::system_category()));
    }
    acceptor_.assign(ep.protocol(), fd);
    acceptor_.set_option(tcp::acceptor::reuse_address(true));
    if (ep.address().is_v6()) acceptor_.set_option(asio::ip::v6_only(false));
    acceptor_.bind(ep);
    acceptor_.listen(options_.backlog);
    endpoint_ = acceptor_.local_endpoint();
  } catch (const boost::system::system_error& e) {
    throw ConnectionError("store: cannot listen on " + where + ": " + e.code().message());
  }
  spareFd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  log_->info("store: listening on {}:{}{}", endpoint_.address().to_string(), endpoint_.port(),
             options_.token.empty() ? ""
                                    : " (a shared secret guards the keys under " +
                                          std::string(kProtectedKeyPrefix) + ")");
  accept();
}

void StoreServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  acceptRetry_.cancel();
  warningFlush_.cancel();
  auto sessions = std::move(sessions_);
  sessions_.clear();
  for (auto& [id, s] : sessions) s->close();
}

void StoreServer::accept() {
  // Readiness, then accept4() until the queue is empty: a storm of clients is taken from the
  // kernel's accept queue as fast as it fills, so the queue does not overflow into SYN retries.
  acceptor_.async_wait(tcp::acceptor::wait_read, [this](boost::system::error_code ec) {
    if (ec == asio::error::operation_aborted || stopped_) return;
    if (ec) {
      warn("accept", "store: waiting for connections failed: " + ec.message() + "; retrying");
      acceptRetry_.expires_after(std::chrono::milliseconds(20));
      acceptRetry_.async_wait([this](boost::system::error_code e) {
        if (!e && !stopped_) accept();
      });
      return;
    }
    try {
      acceptReady();
    } catch (const std::exception& e) {
      warn("accept", std::string("store: accepting a connection failed: ") + e.what());
    }
    if (!stopped_) accept();
  });
}

void StoreServer::acceptReady() {
  const int lfd = acceptor_.native_handle();
  for (int i = 0; i < 4096 && !stopped_; ++i) {
    int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      onAccepted(fd);
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

void StoreServer::onAccepted(int fd) {
  if (maxConnections_ != 0 && sessions_.size() >= maxConnections_) {
    refuse(fd, "connection limit " + std::to_string(maxConnections_) + " reached");
    return;
  }
  tcp::socket socket(io_);
  boost::system::error_code ec;
  socket.assign(endpoint_.protocol(), fd, ec);
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
