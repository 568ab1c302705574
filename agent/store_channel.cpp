#include "agent/store_channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cstring>

#include "rendezvous/wire_decoder.h"

namespace dtrun::agent {

namespace wire = rendezvous::wire;
namespace {

// Bounds on what dtrun's server may send back (a GET of a counter, a PING's echo).
wire::Limits replyLimits() {
  wire::Limits l;
  l.maxValueSize = 64 * 1024 * 1024;
  return l;
}

}  // namespace

struct StoreChannel::State : std::enable_shared_from_this<StoreChannel::State> {
  // One exchange: its bytes (one or more requests), the request whose reply completes it (the
  // wire module decodes that reply), its deadline and its handler.
  struct Request {
    std::string frame;
    wire::Request expect;
    std::optional<std::chrono::milliseconds> timeout;
    std::function<void(const std::string& error, wire::Reply reply)> done;
  };

  State(boost::asio::io_context& io, int fd, std::string address, std::string prefix)
      : socket(io), timer(io), address(std::move(address)), prefix(std::move(prefix)) {
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    const bool v6 = ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
                    local.ss_family == AF_INET6;
    boost::system::error_code ec;
    socket.assign(v6 ? boost::asio::ip::tcp::v6() : boost::asio::ip::tcp::v4(), fd, ec);
    if (ec) {
      ::close(fd);
      closed = true;
      closeReason = "cannot use the socket: " + ec.message();
    }
  }

  boost::asio::ip::tcp::socket socket;
  boost::asio::steady_timer timer;
  std::string address;
  std::string prefix;
  std::deque<Request> queue;  // the front is in flight once `busy`
  bool busy = false;
  bool closed = false;
  std::string closeReason = "closed";
  std::string in;  // reply bytes received and not yet used
  wire::ReplyDecoder decoder{replyLimits()};
  char chunk[4096];

  /// `req` with the key prefix applied.
  wire::Request prefixed(wire::Request req) const {
    for (auto& k : req.keys) k = prefix + k;
    return req;
  }
  static std::string frameOf(const wire::Request& req) {
    std::string out;
    wire::encodeRequest(wire::Dialect::kTorch2, req, &out);
    return out;
  }

  void submit(Request r) {
    if (closed) {
      // Never inside the caller's frame: handlers always run later, on the io thread.
      auto done = std::move(r.done);
      boost::asio::post(socket.get_executor(),
                        [done = std::move(done), why = "store " + address + ": " + closeReason] {
                          done(why, {});
                        });
      return;
    }
    queue.push_back(std::move(r));
    next();
  }

  void next() {
    if (busy || closed || queue.empty()) return;
    busy = true;
    Request& r = queue.front();
    decoder.expect(r.expect);
    if (r.timeout) {
      timer.expires_after(*r.timeout);
      timer.async_wait([self = shared_from_this(), ms = r.timeout->count()](auto ec) {
        if (!ec) self->fail("no reply within " + std::to_string(ms) + " ms");
      });
    }
    boost::asio::async_write(
        socket, boost::asio::buffer(r.frame), [self = shared_from_this()](auto ec, std::size_t) {
          if (ec) {
            self->fail(ec == boost::asio::error::operation_aborted ? self->closeReason
                                                                   : "sending: " + ec.message());
            return;
          }
          self->receive();
        });
  }

  void receive() {
    if (closed) return;
    auto r = decoder.feed(in);
    in.erase(0, r.consumed);
    if (r.status == wire::DecodeStatus::kBad) {
      fail(r.error);
      return;
    }
    if (r.status == wire::DecodeStatus::kComplete) {
      timer.cancel();
      Request done = std::move(queue.front());
      queue.pop_front();
      busy = false;
      done.done("", std::move(decoder.reply()));
      next();
      return;
    }
    socket.async_read_some(
        boost::asio::buffer(chunk), [self = shared_from_this()](auto ec, std::size_t n) {
          if (ec) {
            self->fail(ec == boost::asio::error::eof ? "connection closed by the server"
                       : ec == boost::asio::error::operation_aborted ? self->closeReason
                                                                     : ec.message());
            return;
          }
          self->in.append(self->chunk, n);
          self->receive();
        });
  }

  void fail(const std::string& why) {
    if (closed) return;
    closed = true;
    closeReason = why;
    boost::system::error_code ignored;
    timer.cancel();
    socket.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
    auto pending = std::move(queue);
    queue.clear();
    for (auto& r : pending) r.done("store " + address + ": " + why, {});
  }
};

StoreChannel::StoreChannel(boost::asio::io_context& io, int fd, std::string address,
                           std::string keyPrefix)
    : state_(std::make_shared<State>(io, fd, std::move(address), std::move(keyPrefix))) {}

StoreChannel::~StoreChannel() { close(); }

void StoreChannel::close() { state_->fail("closed"); }

namespace {

// A PING carrying this process's pid as its nonce, and the check of its echo.
wire::Request pingRequest() {
  return wire::makeRequest(wire::Op::kPing, {}, {}, 0, static_cast<std::uint32_t>(::getpid()));
}

std::function<void(const std::string&, wire::Reply)> pingChecked(std::uint32_t nonce,
                                                                 StoreChannel::Done done) {
  return [nonce, done = std::move(done)](const std::string& error, wire::Reply r) {
    if (!error.empty()) return done(error);
    done(r.word == nonce ? "" : "PING answered with a different nonce");
  };
}

}  // namespace

void StoreChannel::ping(std::chrono::milliseconds timeout, Done done) {
  auto ping = pingRequest();
  state_->submit({State::frameOf(ping), ping, timeout, pingChecked(ping.word, std::move(done))});
}

void StoreChannel::addOnClose(const std::string& key, std::int64_t delta,
                              std::chrono::milliseconds timeout, Done done) {
  // ADD_ON_CLOSE has no reply; the PING sent with it proves the server took it.
  auto add = state_->prefixed(wire::makeRequest(wire::Op::kAddOnClose, {key}, {}, delta));
  auto ping = pingRequest();
  state_->submit({State::frameOf(add) + State::frameOf(ping), ping, timeout,
                  pingChecked(ping.word, std::move(done))});
}

void StoreChannel::set(const std::string& key, const rendezvous::Bytes& value,
                       std::chrono::milliseconds timeout, Done done) {
  // SET has no reply either.
  auto set = state_->prefixed(wire::makeRequest(wire::Op::kSet, {key}, {value}));
  auto ping = pingRequest();
  state_->submit({State::frameOf(set) + State::frameOf(ping), ping, timeout,
                  pingChecked(ping.word, std::move(done))});
}

void StoreChannel::read(const std::string& key, std::chrono::milliseconds timeout,
                        std::function<void(const std::string&, rendezvous::Bytes)> done) {
  auto req = state_->prefixed(wire::makeRequest(wire::Op::kAdd, {key}));
  state_->submit({State::frameOf(req), req, timeout,
                  [done = std::move(done)](const std::string& error, wire::Reply r) {
                    done(error, error.empty() ? std::to_string(r.number) : rendezvous::Bytes());
                  }});
}

void StoreChannel::waitChange(const std::string& key, const rendezvous::Bytes& old,
                              std::function<void(const std::string&, rendezvous::Bytes)> done) {
  auto wait = state_->prefixed(wire::makeRequest(wire::Op::kWaitChange, {key}, {old}));
  auto state = state_;
  state_->submit(
      {State::frameOf(wait), wait, std::nullopt,
       [state, key, done = std::move(done)](const std::string& error, wire::Reply r) mutable {
         if (!error.empty()) return done(error, {});
         if (r.status != wire::kStopWaiting) {
           return done("WAIT_CHANGE answered " + std::to_string(r.status), {});
         }
         // Changed: read the new value (the parked WAIT_CHANGE is answered, so the connection
         // is free again).
         auto get = state->prefixed(wire::makeRequest(wire::Op::kGet, {key}));
         state->submit({State::frameOf(get), get, std::nullopt,
                        [done = std::move(done)](const std::string& err, wire::Reply value) {
                          done(err, err.empty() && !value.values.empty()
                                        ? std::move(value.values[0])
                                        : rendezvous::Bytes());
                        }});
       }});
}

}  // namespace dtrun::agent
