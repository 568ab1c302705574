#include "agent/store_channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cstring>

namespace dtrun::agent {

namespace wire = rendezvous::wire;
namespace {

using Clock = std::chrono::steady_clock;

// Replies dtrun's server sends to what this channel asks (the layouts are wire.h's).
constexpr std::size_t kMaxValue = 64 * 1024 * 1024;

template <typename T>
bool fixed(std::string_view in, T* v, std::size_t* used) {
  if (in.size() < sizeof(T)) return false;
  std::memcpy(v, in.data(), sizeof(T));  // little-endian hosts, as the wire codec
  *used = sizeof(T);
  return true;
}

// A PING carrying this process's pid as its nonce.
wire::Request pingRequest() {
  wire::Request req;
  req.op = wire::Op::kPing;
  req.word = static_cast<std::uint32_t>(::getpid());
  return req;
}

// Reads PING's reply: the nonce echoed back.
auto pingReply(std::uint32_t nonce) {
  return [nonce](std::string_view in, std::string* error) -> std::optional<std::size_t> {
    std::uint32_t echo = 0;
    std::size_t used = 0;
    if (!fixed(in, &echo, &used)) return std::nullopt;
    if (echo != nonce) *error = "PING answered with a different nonce";
    return used;
  };
}

}  // namespace

struct StoreChannel::State : std::enable_shared_from_this<StoreChannel::State> {
  // One request: its bytes, how to recognise its complete reply, its deadline, its handler.
  // parse() returns nullopt while more bytes are needed, else the bytes it used and sets
  // `error` when the reply is wrong.
  struct Request {
    std::string frame;
    std::function<std::optional<std::size_t>(std::string_view in, std::string* error)> parse;
    std::optional<std::chrono::milliseconds> timeout;
    std::function<void(const std::string& error)> done;
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
  char chunk[4096];

  std::string frameOf(wire::Request req) const {
    for (auto& k : req.keys) k = prefix + k;
    std::string out;
    wire::encodeRequest(wire::Dialect::kTorch2, req, &out);
    return out;
  }

  void submit(Request r) {
    if (closed) {
      // Never inside the caller's frame: handlers always run later, on the io thread.
      auto done = std::move(r.done);
      boost::asio::post(
          socket.get_executor(),
          [done = std::move(done), why = "store " + address + ": " + closeReason] { done(why); });
      return;
    }
    queue.push_back(std::move(r));
    next();
  }

  void next() {
    if (busy || closed || queue.empty()) return;
    busy = true;
    Request& r = queue.front();
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
    std::string error;
    if (auto used = queue.front().parse(in, &error)) {
      if (!error.empty()) {
        fail(error);
        return;
      }
      in.erase(0, *used);
      timer.cancel();
      Request done = std::move(queue.front());
      queue.pop_front();
      busy = false;
      done.done("");
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
    for (auto& r : pending) r.done("store " + address + ": " + why);
  }
};

StoreChannel::StoreChannel(boost::asio::io_context& io, int fd, std::string address,
                           std::string keyPrefix)
    : state_(std::make_shared<State>(io, fd, std::move(address), std::move(keyPrefix))) {}

StoreChannel::~StoreChannel() { close(); }

void StoreChannel::close() { state_->fail("closed"); }

void StoreChannel::ping(std::chrono::milliseconds timeout, Done done) {
  const wire::Request req = pingRequest();
  state_->submit({state_->frameOf(req), pingReply(req.word), timeout, std::move(done)});
}

void StoreChannel::addOnClose(const std::string& key, std::int64_t delta,
                              std::chrono::milliseconds timeout, Done done) {
  // ADD_ON_CLOSE has no reply; the PING sent with it proves the server took it.
  wire::Request add;
  add.op = wire::Op::kAddOnClose;
  add.keys = {key};
  add.number = delta;
  const wire::Request ping = pingRequest();
  state_->submit(
      {state_->frameOf(add) + state_->frameOf(ping), pingReply(ping.word), timeout, std::move(done)});
}

void StoreChannel::read(const std::string& key, std::chrono::milliseconds timeout,
                        std::function<void(const std::string&, rendezvous::Bytes)> done) {
  wire::Request req;
  req.op = wire::Op::kAdd;
  req.keys = {key};
  auto value = std::make_shared<std::int64_t>(0);
  state_->submit({state_->frameOf(req),
                  [value](std::string_view in, std::string*) -> std::optional<std::size_t> {
                    std::size_t used = 0;
                    if (!fixed(in, value.get(), &used)) return std::nullopt;
                    return used;
                  },
                  timeout,
                  [value, done = std::move(done)](const std::string& error) {
                    done(error, error.empty() ? std::to_string(*value) : rendezvous::Bytes());
                  }});
}

void StoreChannel::waitChange(const std::string& key, const rendezvous::Bytes& old,
                              std::function<void(const std::string&, rendezvous::Bytes)> done) {
  wire::Request wait;
  wait.op = wire::Op::kWaitChange;
  wait.keys = {key};
  wait.values = {old};
  auto state = state_;
  state_->submit({state_->frameOf(wait),
                  [](std::string_view in, std::string* error) -> std::optional<std::size_t> {
                    if (in.empty()) return std::nullopt;
                    if (static_cast<std::uint8_t>(in[0]) != wire::kStopWaiting) {
                      *error = "WAIT_CHANGE answered " +
                               std::to_string(static_cast<unsigned char>(in[0]));
                    }
                    return 1;
                  },
                  std::nullopt,
                  [state, key, done = std::move(done)](const std::string& error) mutable {
                    if (!error.empty()) {
                      done(error, {});
                      return;
                    }
                    // Changed: read the new value (the parked WAIT_CHANGE is answered, so the
                    // connection is free again).
                    wire::Request get;
                    get.op = wire::Op::kGet;
                    get.keys = {key};
                    auto value = std::make_shared<rendezvous::Bytes>();
                    state->submit({state->frameOf(get),
                                   [value](std::string_view in,
                                           std::string* err) -> std::optional<std::size_t> {
                                     std::uint64_t len = 0;
                                     std::size_t used = 0;
                                     if (!fixed(in, &len, &used)) return std::nullopt;
                                     if (len > kMaxValue) {
                                       *err = "GET reply of " + std::to_string(len) + " bytes";
                                       return used;
                                     }
                                     if (in.size() - used < len) return std::nullopt;
                                     value->assign(in.data() + used, len);
                                     return used + len;
                                   },
                                   std::nullopt,
                                   [value, done = std::move(done)](const std::string& err) {
                                     done(err, err.empty() ? *value : rendezvous::Bytes());
                                   }});
                  }});
}

}  // namespace dtrun::agent
