#include "rendezvous/tcp_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>

#include "common/deadline.h"
#include "common/error.h"
#include "common/host_port.h"
#include "rendezvous/wire_decoder.h"

namespace dtrun::rendezvous {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// poll() timeout for `deadline`: -1 for never, else the milliseconds left rounded up.
int pollTimeout(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

// Waits until fd is ready for `events`; false when the deadline passed first.
bool pollFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, pollTimeout(deadline));
    if (rc > 0) return true;
    if (rc == 0) {
      if (Clock::now() >= deadline) return false;
      continue;
    }
    if (errno != EINTR) throw Error(std::string("poll failed: ") + std::strerror(errno));
  }
}

// One non-blocking connect to one address; returns the fd or -1 with `error` set.
int connectOnce(const addrinfo* ai, Clock::time_point deadline, std::string* error) {
  int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) {
    *error = std::strerror(errno);
    return -1;
  }
  int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
  if (rc != 0 && errno != EINPROGRESS) {
    *error = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  if (rc != 0) {
    if (!pollFor(fd, POLLOUT, deadline)) {
      *error = "connect timed out";
      ::close(fd);
      return -1;
    }
    int soErr = 0;
    socklen_t len = sizeof(soErr);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soErr, &len);
    if (soErr != 0) {
      *error = std::strerror(soErr);
      ::close(fd);
      return -1;
    }
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

using wire::makeRequest;
using wire::Op;

// Requests whose effect does not change when the server gets them twice, and whose reply does
// not depend on having been first: sent again once on a new connection when the old one broke
// before the reply came.
bool repeatable(Op op) {
  switch (op) {
    case Op::kValidate:
    case Op::kSet:
    case Op::kGet:
    case Op::kCheck:
    case Op::kWait:
    case Op::kNumKeys:
    case Op::kMultiGet:
    case Op::kMultiSet:
    case Op::kPing:
    case Op::kQueueLen:
    case Op::kListKeys:
    case Op::kWaitChange:
    case Op::kWriter:
    case Op::kHeard:
      return true;
    default:
      return false;
  }
}

}  // namespace

TcpStore::TcpStore(TcpStoreOptions options)
    : options_(std::move(options)), address_(hostPortText(options_.host, options_.port)) {
  connect();
}

TcpStore::~TcpStore() { disconnect(); }

Clock::time_point TcpStore::deadline() const { return deadlineAfter(options_.timeout); }

void TcpStore::interrupt() {
  interrupted_ = true;
  int fd = liveFd_.load();
  if (fd >= 0) ::shutdown(fd, SHUT_RDWR);  // the fd stays open until the owner's disconnect()
}

void TcpStore::disconnect() {
  if (fd_ >= 0 && stateful_) lostStateful_ = true;
  liveFd_ = -1;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  rbuf_.clear();
  rpos_ = 0;
}

void TcpStore::fail(const std::string& what, const std::string& why) {
  disconnect();  // the stream's position is unknown now
  throw ConnectionError("store " + address_ + ": " + what + ": " + why);
}

void TcpStore::connect() {
  const auto start = Clock::now();
  const auto until = deadlineAfter(options_.connectTimeout);
  // Jittered exponential backoff: a storm of clients against a full listen backlog spreads out
  // instead of retrying in lockstep (torch PR #129261).
  // Seeded per process and moment (no /dev/urandom per connection): enough to spread retries.
  std::minstd_rand rng(static_cast<unsigned>(::getpid()) ^
                       static_cast<unsigned>(Clock::now().time_since_epoch().count()));
  milliseconds backoff(10);
  std::string lastError = "no attempt made";
  auto nextProgress = start + options_.progressInterval;
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int gai =
        ::getaddrinfo(options_.host.c_str(), std::to_string(options_.port).c_str(), &hints, &res);
    if (gai != 0) {
      lastError = std::string("cannot resolve host: ") + ::gai_strerror(gai);
    } else {
      for (addrinfo* ai = res; ai && fd_ < 0; ai = ai->ai_next) {
        fd_ = connectOnce(ai, until, &lastError);
      }
      ::freeaddrinfo(res);
    }
    if (fd_ >= 0) {
      if (std::string why = handshake(until); !why.empty()) {
        lastError = why;
        disconnect();
      }
    }
    if (fd_ >= 0) {
      liveFd_ = fd_;
      if (interrupted_) ::shutdown(fd_, SHUT_RDWR);  // interrupt() raced with the connect
      return;
    }
    if (interrupted_) throw ConnectionError("store " + address_ + ": interrupted");
    if (Clock::now() >= until) {
      throw ConnectionError("cannot connect to store at " + address_ + " after " +
                            std::to_string(msSince(start)) + " ms: " + lastError);
    }
    if (options_.onWaiting && Clock::now() >= nextProgress) {
      options_.onWaiting(lastError, until);
      nextProgress = Clock::now() + options_.progressInterval;
    }
    std::uniform_real_distribution<double> jitter(0.5, 1.5);
    auto pause = milliseconds(static_cast<long long>(backoff.count() * jitter(rng)) + 1);
    if (until != Clock::time_point::max()) {
      pause = std::min(pause, std::chrono::ceil<milliseconds>(until - Clock::now()));
    }
    std::this_thread::sleep_for(pause);
    backoff = std::min(backoff * 2, milliseconds(1000));
  }
}

std::string TcpStore::handshake(Clock::time_point until) {
  try {
    if (options_.dialect == wire::Dialect::kTorch2) {
      // VALIDATE has no reply; the PING round trip proves the server took it.
      sendRequest(makeRequest(Op::kValidate, {}, {}, 0, wire::kValidationMagic), until);
      auto ping = makeRequest(Op::kPing, {}, {}, 0, static_cast<std::uint32_t>(::getpid()));
      sendRequest(ping, until);
      if (readReply(ping, until, "handshake").word != ping.word) {
        return "handshake: PING answered with a different nonce";
      }
    }
    if (options_.token.empty()) return "";
    auto auth = makeRequest(Op::kAuth, {}, {options_.token});
    sendRequest(auth, until);
    const std::uint8_t status = readReply(auth, until, "presenting the token").status;
    if (status == wire::kAuthRefused) {
      disconnect();
      throw StoreAuthError("store " + address_ +
                           " refused this client's token: the token files of the store and of "
                           "this node differ");
    }
    if (status == wire::kAuthNotRequired) {
      disconnect();
      throw StoreAuthError("store " + address_ +
                           " has no token, but this client was given one: start the store with "
                           "the same token (token_file), or give none to every node");
    }
    if (status != wire::kAuthAccepted) {
      return "DTRUN_AUTH answered with unknown status " + std::to_string(status);
    }
  } catch (const StoreAuthError&) {
    throw;
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

int TcpStore::detachSocket() {
  std::lock_guard lock(mutex_);
  ensureConnected();
  if (rbuf_.size() > rpos_) {
    throw ProtocolError("store " + address_ + ": unread reply bytes on a socket being handed over");
  }
  const int fd = fd_;
  fd_ = -1;
  liveFd_ = -1;
  rbuf_.clear();
  rpos_ = 0;
  stateful_ = false;  // the new owner holds the connection's server-side state
  return fd;
}

void TcpStore::ensureConnected() {
  if (interrupted_) throw ConnectionError("store " + address_ + ": interrupted");
  if (lostStateful_) {
    throw ConnectionError("store " + address_ +
                          ": the connection that carried close actions or a lease was lost; "
                          "not reconnecting, as the server has run those close actions");
  }
  if (fd_ < 0) connect();
}

template <typename Exchange>
auto TcpStore::withReconnect(const wire::Request& req, Clock::time_point giveUp,
                             Exchange&& exchange) {
  for (int attempt = 0;; ++attempt) {
    ensureConnected();
    bool sent = false;
    try {
      sendRequest(req, deadline());
      sent = true;
      return exchange();
    } catch (const TimeoutError&) {
      throw;
    } catch (const ConnectionError& e) {
      if (interrupted_ || lostStateful_ || attempt > 0 || Clock::now() >= giveUp) throw;
      if (sent && !repeatable(req.op)) {
        throw MaybeAppliedError(std::string(e.what()) + " after the whole " + wire::opName(req.op) +
                                " was sent: it may or may not have been applied");
      }
      // Nothing was applied twice: the frame never arrived whole, or repeating it is harmless.
    }
  }
}

wire::Reply TcpStore::call(const wire::Request& req, const std::string& what) {
  return withReconnect(req, Clock::time_point::max(), [&]() -> wire::Reply {
    if (!wire::hasReply(req.op)) return {};
    return readReply(req, deadline(), what);
  });
}

void TcpStore::sendRequest(const wire::Request& req, Clock::time_point until) {
  std::string buf;
  wire::encodeRequest(options_.dialect, req, &buf);
  std::size_t sent = 0;
  while (sent < buf.size()) {
    ssize_t n = ::send(fd_, buf.data() + sent, buf.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!pollFor(fd_, POLLOUT, until)) {
        disconnect();
        throw TimeoutError("store " + address_ + ": sending " + wire::opName(req.op) +
                           " timed out");
      }
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      fail(std::string("sending ") + wire::opName(req.op), std::strerror(errno));
    }
  }
}

void TcpStore::receiveSome(Clock::time_point until, const std::string& what) {
  if (rpos_ > 0) {
    rbuf_.erase(0, rpos_);
    rpos_ = 0;
  }
  for (;;) {
    char chunk[16 * 1024];
    ssize_t got = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (got > 0) {
      rbuf_.append(chunk, static_cast<std::size_t>(got));
      return;
    }
    if (got == 0) fail(what, "connection closed by the server");
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!pollFor(fd_, POLLIN, until)) {
        disconnect();
        throw TimeoutError("store " + address_ + ": " + what + " timed out waiting for the reply");
      }
    } else if (errno != EINTR) {
      fail(what, std::strerror(errno));
    }
  }
}

wire::Reply TcpStore::readReply(const wire::Request& req, Clock::time_point until,
                                const std::string& what) {
  wire::ReplyDecoder decoder(options_.limits);
  decoder.expect(req);
  for (;;) {
    {  // fed even with nothing buffered: a reply may be empty (MULTI_GET of no keys)
      auto r = decoder.feed(std::string_view(rbuf_).substr(rpos_));
      rpos_ += r.consumed;
      if (rpos_ == rbuf_.size()) {
        rbuf_.clear();
        rpos_ = 0;
      }
      if (r.status == wire::DecodeStatus::kComplete) return std::move(decoder.reply());
      if (r.status == wire::DecodeStatus::kBad) {
        disconnect();
        throw ProtocolError("store " + address_ + ": " + what + ": " + r.error);
      }
    }
    receiveSome(until, what);
  }
}

void TcpStore::requireTorch2(const char* op) const {
  if (options_.dialect != wire::Dialect::kTorch2) {
    throw ProtocolError(std::string(op) + " needs the torch 2.x protocol; store " + address_ +
                        " is spoken to in torch 1.13 mode");
  }
}

void TcpStore::parkedCall(const wire::Request& req, milliseconds timeout, const std::string& what) {
  const auto start = Clock::now();
  const auto until = deadlineAfter(timeout);
  withReconnect(req, until, [&] {
    if (rbuf_.size() > rpos_ || pollFor(fd_, POLLIN, until)) {
      if (readReply(req, deadline(), what).status != wire::kStopWaiting) {
        fail(what, "unexpected reply");
      }
      return;
    }
    const std::string timedOut = "store " + address_ + ": " + what + " timed out after " +
                                 std::to_string(msSince(start)) + " ms";
    if (options_.dialect == wire::Dialect::kTorch113) {
      // 1.13 has no CANCEL_WAIT: a late STOP_WAITING would sit in the stream, so start afresh.
      disconnect();
      throw TimeoutError(timedOut);
    }
    const auto cancel = makeRequest(Op::kCancelWait);
    sendRequest(cancel, deadline());
    std::uint8_t r = readReply(cancel, deadline(), what + " (cancel)").status;
    if (r == wire::kStopWaiting) {
      // The keys arrived as we gave up: the wait succeeded; consume the cancel's reply.
      if (readReply(cancel, deadline(), what + " (cancel)").status != wire::kWaitCanceled) {
        fail(what, "CANCEL_WAIT answered out of protocol");
      }
      return;
    }
    if (r != wire::kWaitCanceled) fail(what, "CANCEL_WAIT answered out of protocol");
    throw TimeoutError(timedOut);
  });
}

}  // namespace dtrun::rendezvous
