#include "rendezvous/store_server.h"

#include <sys/resource.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/write.hpp>
#include <utility>

#include "common/error.h"

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

// One client connection. Requests are decoded from `in_` as they complete; replies are appended
// to `out_` and written in batches, so a pipelining client costs one write per read.
class StoreServer::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(StoreServer& server, tcp::socket socket, StoreCore::ClientId id)
      : server_(server), socket_(std::move(socket)), id_(id), leaseTimer_(server.io_) {
    boost::system::error_code ec;
    auto remote = socket_.remote_endpoint(ec);
    peer_ = ec ? std::string("unknown peer")
               : remote.address().to_string() + ":" + std::to_string(remote.port());
    socket_.set_option(tcp::no_delay(true), ec);
    socket_.non_blocking(true, ec);
  }

  void start() { read(); }

  /// A parked WAIT/BARRIER/WAIT_CHANGE completed.
  void stopWaiting() {
    wire::appendU8(&out_, wire::kStopWaiting);
    flush();
  }

  /// Closes the socket; the pending handlers then finish with errors and the registry forgets us.
  void close() {
    if (closed_) return;
    closed_ = true;
    leaseTimer_.cancel();
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    server_.onSessionClosed(id_);
  }

  const std::string& peer() const { return peer_; }

 private:
  // Replies wait in out_ while a write is in flight; past this much, reading pauses.
  static constexpr std::size_t kMaxPendingOut = 64 * 1024 * 1024;
  // Values up to this size are copied into the store rather than moved (see kSet).
  static constexpr std::size_t kCopyLimit = 4096;

  void read() {
    if (closed_ || reading_) return;
    if (out_.size() + writing_.size() > kMaxPendingOut) return;  // resumed by flush()'s handler
    reading_ = true;
    // Reactor style: wait for readability, then read into the server's one buffer. Sessions keep
    // only the unfinished tail of a request, so thousands of idle connections cost little.
    socket_.async_wait(tcp::socket::wait_read,
                       [self = shared_from_this()](boost::system::error_code ec) {
                         self->reading_ = false;
                         if (ec) {
                           self->close();
                           return;
                         }
                         self->onReadable();
                       });
  }

  void onReadable() {
    auto& buf = server_.readBuffer_;
    for (;;) {
      boost::system::error_code ec;
      std::size_t n = socket_.read_some(asio::buffer(buf), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) break;
      if (ec) {
        if (!in_.empty()) {
          // The peer left with a frame half sent: a truncated frame, named like any bad one.
          server_.log_->warn(
              "store: closing connection from {}: it ended inside a request ({} "
              "bytes of a truncated frame)",
              peer_, in_.size());
        } else if (ec != asio::error::eof && ec != asio::error::connection_reset) {
          server_.log_->debug("store: connection {} read error: {}", peer_, ec.message());
        }
        close();
        return;
      }
      lastActivity_ = std::chrono::steady_clock::now();
      std::string_view data(buf.data(), n);
      const bool buffered = !in_.empty();
      if (buffered) {
        in_.append(data);
        data = in_;
      }
      std::size_t used = consume(data);
      if (closed_) return;
      if (buffered) {
        in_.erase(0, used);
      } else {
        in_.assign(data.substr(used));
      }
      flush();
      // A full buffer means more is probably waiting: read it now rather than through another
      // trip round the reactor. Otherwise the socket is drained; wait for readiness again.
      if (n < buf.size() || out_.size() + writing_.size() > kMaxPendingOut) break;
    }
    read();
  }

  /// Handles every complete request at the front of `data`; returns the bytes used.
  std::size_t consume(std::string_view data) {
    std::size_t pos = 0;
    while (!closed_ && pos < data.size()) {
      std::string_view pending = data.substr(pos);
      if (dialect_ == wire::Dialect::kUnknown) {
        dialect_ = wire::detectDialect(pending);
        if (dialect_ == wire::Dialect::kUnknown) break;
      }
      wire::Request& req = req_;
      auto r = wire::decodeRequest(dialect_, pending, server_.options_.limits, &req);
      if (r.status == wire::DecodeStatus::kNeedMore) break;
      if (r.status == wire::DecodeStatus::kBad) {
        server_.log_->warn("store: closing connection from {}: {}", peer_, r.error);
        close();
        break;
      }
      pos += r.consumed;
      try {
        handle(req);
      } catch (const Error& e) {
        server_.log_->warn("store: closing connection from {}: {} failed: {}", peer_,
                           wire::opName(req.op), e.what());
        close();
      }
    }
    return pos;
  }

  void handle(wire::Request& req) {
    StoreCore& core = server_.core_;
    std::string& out = out_;
    switch (req.op) {
      case wire::Op::kValidate:
        if (req.word != wire::kValidationMagic) throw ProtocolError("bad validation magic");
        break;
      case wire::Op::kPing:
        wire::appendU32(&out, req.word);
        break;
      case wire::Op::kSet:
        // Small values are copied, so req_'s buffer is kept for the next request.
        if (req.values[0].size() > kCopyLimit) {
          core.set(req.keys[0], std::move(req.values[0]));
        } else {
          core.set(req.keys[0], std::as_const(req.values[0]));
        }
        break;
      case wire::Op::kCompareSet:
        wire::appendBytes(&out,
                          core.compareSet(req.keys[0], req.values[0], std::move(req.values[1])));
        break;
      case wire::Op::kGet: {
        // GET follows a WAIT in every torch client; a missing key answers empty, as libuv does.
        const Bytes* v = core.find(req.keys[0]);
        wire::appendBytes(&out, v ? std::string_view(*v) : std::string_view());
        break;
      }
      case wire::Op::kAdd:
        wire::appendI64(&out, core.add(req.keys[0], req.number));
        break;
      case wire::Op::kCheck:
        wire::appendU8(&out, core.check(req.keys) ? wire::kCheckReady : wire::kCheckNotReady);
        break;
      case wire::Op::kWait:
        if (core.wait(id_, req.keys)) wire::appendU8(&out, wire::kStopWaiting);
        break;
      case wire::Op::kNumKeys:
        wire::appendI64(&out, core.numKeys());
        break;
      case wire::Op::kDeleteKey:
        wire::appendI64(&out, core.deleteKey(req.keys[0]) ? 1 : 0);
        break;
      case wire::Op::kAppend:
        core.append(req.keys[0], req.values[0]);
        break;
      case wire::Op::kMultiGet:
        for (const auto& k : req.keys) {
          const Bytes* v = core.find(k);
          wire::appendBytes(&out, v ? std::string_view(*v) : std::string_view());
        }
        break;
      case wire::Op::kMultiSet:
        core.multiSet(req.keys, std::move(req.values));
        break;
      case wire::Op::kCancelWait:
        // A STOP_WAITING that completed first is already in out_, ahead of this reply.
        core.cancelWait(id_);
        wire::appendU8(&out, wire::kWaitCanceled);
        break;
      case wire::Op::kQueuePush:
        core.queuePush(req.keys[0], std::move(req.values[0]));
        break;
      case wire::Op::kQueuePop: {
        std::int64_t before = 0;
        auto front = core.queuePop(req.keys[0], &before);
        wire::appendI64(&out, before);
        if (front) wire::appendBytes(&out, *front);
        break;
      }
      case wire::Op::kQueueLen:
        wire::appendI64(&out, core.queueLen(req.keys[0]));
        break;
      case wire::Op::kListKeys: {
        auto keys = core.listKeys();
        wire::appendI64(&out, static_cast<std::int64_t>(keys.size()));
        for (const auto& k : keys) wire::appendBytes(&out, k);
        break;
      }
      case wire::Op::kBarrier:
        if (core.barrier(id_, req.keys[0], req.number)) wire::appendU8(&out, wire::kStopWaiting);
        break;
      case wire::Op::kWatchKey:
        throw ProtocolError("WATCH_KEY (torch 1.13 only, unused by torchrun) is not supported");
      case wire::Op::kAddOnClose:
        core.addOnClose(id_, req.keys[0], req.number);
        break;
      case wire::Op::kLease:
        lease_ = std::chrono::milliseconds(req.word);
        armLease();
        break;
      case wire::Op::kWaitChange:
        if (core.waitChange(id_, req.keys[0], req.values[0])) {
          wire::appendU8(&out, wire::kStopWaiting);
        }
        break;
    }
  }

  // A lease closes a connection that went quiet (a stopped or cut-off agent keeps its socket
  // open); closing runs its close actions, so the others hear of it.
  void armLease() {
    if (lease_.count() == 0 || closed_) {
      leaseTimer_.cancel();
      return;
    }
    leaseTimer_.expires_at(lastActivity_ + lease_);
    leaseTimer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec || self->closed_) return;
      auto quiet = std::chrono::steady_clock::now() - self->lastActivity_;
      if (quiet < self->lease_) {
        self->armLease();
        return;
      }
      self->server_.log_->warn(
          "store: closing connection from {}: nothing received for {} ms", self->peer_,
          std::chrono::duration_cast<std::chrono::milliseconds>(quiet).count());
      self->close();
    });
  }

  void flush() {
    if (closed_ || !writing_.empty() || out_.empty()) return;
    writing_.swap(out_);
    asio::async_write(socket_, asio::buffer(writing_),
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                        self->writing_.clear();
                        if (ec) {
                          self->close();
                          return;
                        }
                        self->flush();
                        self->read();
                      });
  }

  StoreServer& server_;
  tcp::socket socket_;
  StoreCore::ClientId id_;
  std::string peer_;
  wire::Dialect dialect_ = wire::Dialect::kUnknown;
  std::string in_;
  std::string out_;
  wire::Request req_;  // reused for every request: its buffers keep their capacity
  std::string writing_;
  bool reading_ = false;
  bool closed_ = false;
  std::chrono::milliseconds lease_{0};
  std::chrono::steady_clock::time_point lastActivity_ = std::chrono::steady_clock::now();
  asio::steady_timer leaseTimer_;
};

StoreServer::StoreServer(asio::io_context& io, StoreServerOptions options,
                         std::shared_ptr<spdlog::logger> log)
    : io_(io),
      options_(std::move(options)),
      log_(std::move(log)),
      acceptor_(io),
      acceptRetry_(io),
      core_([this](StoreCore::ClientId id) { wake(id); }) {}

StoreServer::~StoreServer() {
  // Sessions hold a reference to us; make sure none outlives the server.
  stop();
}

void StoreServer::start() {
  std::uint64_t files = raiseFileLimit();
  maxConnections_ = options_.maxConnections;
  if (maxConnections_ == 0 && files > 64) maxConnections_ = files - 64;  // room for logs, workers
  const std::string where = options_.host + ":" + std::to_string(options_.port);
  try {
    tcp::resolver resolver(io_);
    auto results = resolver.resolve(options_.host, std::to_string(options_.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service);
    tcp::endpoint ep = results.begin()->endpoint();
    acceptor_.open(ep.protocol());
    acceptor_.set_option(tcp::acceptor::reuse_address(true));
    if (ep.address().is_v6()) acceptor_.set_option(asio::ip::v6_only(false));
    acceptor_.bind(ep);
    acceptor_.listen(options_.backlog);
    endpoint_ = acceptor_.local_endpoint();
  } catch (const boost::system::system_error& e) {
    throw ConnectionError("store: cannot listen on " + where + ": " + e.code().message());
  }
  log_->info("store: listening on {}:{}", endpoint_.address().to_string(), endpoint_.port());
  accept();
}

void StoreServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  acceptRetry_.cancel();
  auto sessions = std::move(sessions_);
  sessions_.clear();
  for (auto& [id, s] : sessions) s->close();
}

void StoreServer::accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || stopped_) return;
    if (ec) {
      // EMFILE/ENFILE: the connection stays in the backlog; try again shortly rather than spin.
      log_->warn("store: accept failed: {}; retrying", ec.message());
      acceptRetry_.expires_after(std::chrono::milliseconds(20));
      acceptRetry_.async_wait([this](boost::system::error_code e) {
        if (!e && !stopped_) accept();
      });
      return;
    }
    onAccepted(std::move(socket));
    accept();
  });
}

void StoreServer::onAccepted(tcp::socket socket) {
  if (maxConnections_ != 0 && sessions_.size() >= maxConnections_) {
    boost::system::error_code ec;
    auto remote = socket.remote_endpoint(ec);
    log_->warn("store: refusing {}: connection limit {} reached",
               ec ? std::string("unknown peer") : remote.address().to_string(), maxConnections_);
    socket.close(ec);
    return;
  }
  auto id = nextId_++;
  auto session = std::make_shared<Session>(*this, std::move(socket), id);
  sessions_.emplace(id, session);
  log_->debug("store: connection {} from {}", id, session->peer());
  session->start();
}

void StoreServer::onSessionClosed(StoreCore::ClientId id) {
  core_.dropClient(id);
  sessions_.erase(id);
}

void StoreServer::wake(StoreCore::ClientId id) {
  auto it = sessions_.find(id);
  if (it != sessions_.end()) it->second->stopWaiting();
}

}  // namespace dtrun::rendezvous
