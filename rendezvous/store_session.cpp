#include "rendezvous/store_session.h"

#include <boost/asio/write.hpp>
#include <utility>

#include "common/host_port.h"

namespace dtrun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

std::string peerOf(const tcp::socket& socket) {
  boost::system::error_code ec;
  auto remote = socket.remote_endpoint(ec);
  return ec ? std::string("unknown peer")
            : hostPortText(remote.address().to_string(), remote.port());
}

}  // namespace

StoreServer::Session::Session(StoreServer& server, tcp::socket socket, StoreCore::ClientId id)
    : server_(server),
      socket_(std::move(socket)),
      peer_(peerOf(socket_)),
      conn_(server.core_, id, server.options_.limits, server.options_.maxReplyBytes,
            server.connectionBytes_, peer_, server.options_.token, &server.requests_),
      timer_(server.io_) {
  boost::system::error_code ec;
  socket_.set_option(tcp::no_delay(true), ec);
  socket_.non_blocking(true, ec);
}

template <typename F>
void StoreServer::Session::guarded(F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    closeBecause("failure", std::string("serving it failed: ") + e.what());
  } catch (...) {
    closeBecause("failure", "serving it failed");
  }
}

void StoreServer::Session::stopWaiting() {
  conn_.stopWaiting();
  flush();
}

void StoreServer::Session::close() {
  if (closed_) return;
  closed_ = true;
  timer_.cancel();
  boost::system::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  conn_.close();
  server_.onSessionClosed(conn_.id());
}

void StoreServer::Session::closeBecause(const std::string& kind, const std::string& why) {
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

void StoreServer::Session::read() {
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

void StoreServer::Session::onReadable() {
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

std::optional<StoreServer::Session::Clock::time_point> StoreServer::Session::nextDeadline() const {
  std::optional<Clock::time_point> at;
  if (lease_.count() > 0) at = lastActivity_ + lease_;
  const auto frameTimeout = server_.options_.frameTimeout;
  if (conn_.midRequest() && frameTimeout.count() > 0) {
    auto frameAt = requestStarted_ + frameTimeout;
    if (!at || frameAt < *at) at = frameAt;
  }
  return at;
}

void StoreServer::Session::armTimer() {
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

void StoreServer::Session::onTimer() {
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

void StoreServer::Session::flush() {
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

}  // namespace dtrun::rendezvous
