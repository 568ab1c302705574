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

#include "common/error.h"

namespace dtrun::rendezvous {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

Clock::time_point deadlineAfter(milliseconds timeout) {
  auto now = Clock::now();
  if (timeout >= std::chrono::duration_cast<milliseconds>(Clock::time_point::max() - now)) {
    return Clock::time_point::max();
  }
  return now + timeout;
}

long long msSince(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
}

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

// A request with its arguments (the layout per op is wire.cpp's).
wire::Request makeRequest(wire::Op op, std::vector<std::string> keys = {},
                          std::vector<Bytes> values = {}, std::int64_t number = 0) {
  wire::Request r;
  r.op = op;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.number = number;
  return r;
}

}  // namespace

TcpStore::TcpStore(TcpStoreOptions options)
    : options_(std::move(options)), address_(options_.host + ":" + std::to_string(options_.port)) {
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
  liveFd_ = -1;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  rbuf_.clear();
  rpos_ = 0;
}

void TcpStore::fail(const std::string& what, const std::string& why) {
  disconnect();  // the stream's position is unknown now; the next call reconnects
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
    if (fd_ >= 0 && options_.dialect == wire::Dialect::kTorch2) {
      try {
        // VALIDATE has no reply; the PING round trip proves the server took it.
        wire::Request validate;
        validate.op = wire::Op::kValidate;
        validate.word = wire::kValidationMagic;
        sendRequest(validate, until);
        wire::Request ping;
        ping.op = wire::Op::kPing;
        ping.word = static_cast<std::uint32_t>(::getpid());
        sendRequest(ping, until);
        if (readU32(until, "handshake") != ping.word) {
          lastError = "handshake: PING answered with a different nonce";
          disconnect();
        }
      } catch (const Error& e) {
        lastError = e.what();
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
    std::uniform_real_distribution<double> jitter(0.5, 1.5);
    auto pause = milliseconds(static_cast<long long>(backoff.count() * jitter(rng)) + 1);
    if (until != Clock::time_point::max()) {
      pause = std::min(pause, std::chrono::ceil<milliseconds>(until - Clock::now()));
    }
    std::this_thread::sleep_for(pause);
    backoff = std::min(backoff * 2, milliseconds(1000));
  }
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
  return fd;
}

void TcpStore::ensureConnected() {
  if (interrupted_) throw ConnectionError("store " + address_ + ": interrupted");
  if (fd_ < 0) connect();
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

void TcpStore::readExact(char* dst, std::size_t n, Clock::time_point until,
                         const std::string& what) {
  while (rbuf_.size() - rpos_ < n) {
    if (rpos_ > 0) {
      rbuf_.erase(0, rpos_);
      rpos_ = 0;
    }
    char chunk[16 * 1024];
    ssize_t got = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (got > 0) {
      rbuf_.append(chunk, static_cast<std::size_t>(got));
    } else if (got == 0) {
      fail(what, "connection closed by the server");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!pollFor(fd_, POLLIN, until)) {
        disconnect();
        throw TimeoutError("store " + address_ + ": " + what + " timed out waiting for the reply");
      }
    } else if (errno != EINTR) {
      fail(what, std::strerror(errno));
    }
  }
  std::memcpy(dst, rbuf_.data() + rpos_, n);
  rpos_ += n;
}

std::uint8_t TcpStore::readU8(Clock::time_point until, const std::string& what) {
  std::uint8_t v = 0;
  readExact(reinterpret_cast<char*>(&v), 1, until, what);
  return v;
}

std::uint32_t TcpStore::readU32(Clock::time_point until, const std::string& what) {
  std::uint32_t v = 0;
  readExact(reinterpret_cast<char*>(&v), sizeof(v), until, what);
  return v;
}

std::int64_t TcpStore::readI64(Clock::time_point until, const std::string& what) {
  std::int64_t v = 0;
  readExact(reinterpret_cast<char*>(&v), sizeof(v), until, what);
  return v;
}

Bytes TcpStore::readBytes(Clock::time_point until, const std::string& what) {
  std::uint64_t len = 0;
  readExact(reinterpret_cast<char*>(&len), sizeof(len), until, what);
  if (len > options_.limits.maxValueSize) {
    fail(what, "reply of " + std::to_string(len) + " bytes exceeds the limit of " +
                   std::to_string(options_.limits.maxValueSize));
  }
  Bytes v(len, '\0');
  readExact(v.data(), len, until, what);
  return v;
}

void TcpStore::requireTorch2(const char* op) const {
  if (options_.dialect != wire::Dialect::kTorch2) {
    throw ProtocolError(std::string(op) + " needs the torch 2.x protocol; store " + address_ +
                        " is spoken to in torch 1.13 mode");
  }
}

void TcpStore::parkedCall(const wire::Request& req, milliseconds timeout, const std::string& what) {
  const auto start = Clock::now();
  ensureConnected();
  sendRequest(req, deadline());
  if (rbuf_.size() > rpos_ || pollFor(fd_, POLLIN, deadlineAfter(timeout))) {
    std::uint8_t r = readU8(deadline(), what);
    if (r != wire::kStopWaiting) fail(what, "unexpected reply " + std::to_string(r));
    return;
  }
  const std::string timedOut = "store " + address_ + ": " + what + " timed out after " +
                               std::to_string(msSince(start)) + " ms";
  if (options_.dialect == wire::Dialect::kTorch113) {
    // 1.13 has no CANCEL_WAIT: a late STOP_WAITING would sit in the stream, so start afresh.
    disconnect();
    throw TimeoutError(timedOut);
  }
  wire::Request cancel = makeRequest(wire::Op::kCancelWait);
  sendRequest(cancel, deadline());
  std::uint8_t r = readU8(deadline(), what + " (cancel)");
  if (r == wire::kStopWaiting) {
    // The keys arrived as we gave up: the wait succeeded; consume the cancel's reply.
    if (readU8(deadline(), what + " (cancel)") != wire::kWaitCanceled) {
      fail(what, "CANCEL_WAIT answered out of protocol");
    }
    return;
  }
  if (r != wire::kWaitCanceled) fail(what, "CANCEL_WAIT answered out of protocol");
  throw TimeoutError(timedOut);
}

void TcpStore::waitLocked(const std::vector<std::string>& keys, milliseconds timeout) {
  wire::Request req = makeRequest(wire::Op::kWait);
  for (const auto& k : keys) req.keys.push_back(key(k));
  parkedCall(req, timeout, "wait for keys " + joinKeys(req.keys));
}

void TcpStore::set(const std::string& k, const Bytes& value) {
  std::lock_guard lock(mutex_);
  ensureConnected();
  wire::Request req = makeRequest(wire::Op::kSet, {key(k)}, {value});
  sendRequest(req, deadline());
}

Bytes TcpStore::get(const std::string& k, milliseconds timeout) {
  std::lock_guard lock(mutex_);
  waitLocked({k}, timeout);
  wire::Request req = makeRequest(wire::Op::kGet, {key(k)});
  sendRequest(req, deadline());
  return readBytes(deadline(), "get " + key(k));
}

std::int64_t TcpStore::add(const std::string& k, std::int64_t delta) {
  std::lock_guard lock(mutex_);
  ensureConnected();
  wire::Request req = makeRequest(wire::Op::kAdd, {key(k)}, {}, delta);
  sendRequest(req, deadline());
  return readI64(deadline(), "add " + key(k));
}

Bytes TcpStore::compareSet(const std::string& k, const Bytes& expected, const Bytes& desired) {
  std::lock_guard lock(mutex_);
  ensureConnected();
  wire::Request req = makeRequest(wire::Op::kCompareSet, {key(k)}, {expected, desired});
  sendRequest(req, deadline());
  return readBytes(deadline(), "compare_set " + key(k));
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mutex_);
  ensureConnected();
  wire::Request req = makeRequest(wire::Op::kCheck);
  for (const auto& k : keys) req.keys.push_back(key(k));
  sendRequest(req, deadline());
  return readU8(deadline(), "check " + joinKeys(req.keys)) == wire::kCheckReady;
}

void TcpStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  std::lock_guard lock(mutex_);
  waitLocked(keys, timeout);
}

bool TcpStore::deleteKey(const std::string& k) {
  std::lock_guard lock(mutex_);
  ensureConnected();
  wire::Request req = makeRequest(wire::Op::kDeleteKey, {key(k)});
  sendRequest(req, deadline());
  return readI64(deadline(), "delete_key " + key(k)) == 1;
}

std::int64_t TcpStore::numKeys() {
  std::lock_guard lock(mutex_);
  ensureConnected();
  wire::Request req = makeRequest(wire::Op::kNumKeys);
  sendRequest(req, deadline());
  return readI64(deadline(), "num_keys");
}

void TcpStore::append(const std::string& k, const Bytes& value) {
  requireTorch2("APPEND");
  std::lock_guard lock(mutex_);
  ensureConnected();
  wire::Request req = makeRequest(wire::Op::kAppend, {key(k)}, {value});
  sendRequest(req, deadline());
}

std::vector<Bytes> TcpStore::multiGet(const std::vector<std::string>& keys, milliseconds timeout) {
  std::lock_guard lock(mutex_);
  waitLocked(keys, timeout);
  std::vector<Bytes> values;
  values.reserve(keys.size());
  if (options_.dialect == wire::Dialect::kTorch113) {
    for (const auto& k : keys) {  // 1.13 has no MULTI_GET: one GET each, keys already present
      wire::Request req;
      req.op = wire::Op::kGet;
      req.keys = {key(k)};
      sendRequest(req, deadline());
      values.push_back(readBytes(deadline(), "get " + key(k)));
    }
    return values;
  }
  wire::Request req = makeRequest(wire::Op::kMultiGet);
  for (const auto& k : keys) req.keys.push_back(key(k));
  sendRequest(req, deadline());
  for (const auto& k : req.keys) values.push_back(readBytes(deadline(), "multi_get " + k));
  return values;
}

void TcpStore::multiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  if (keys.size() != values.size()) {
    throw ConfigError("multiSet: " + std::to_string(keys.size()) + " keys but " +
                      std::to_string(values.size()) + " values");
  }
  std::lock_guard lock(mutex_);
  ensureConnected();
  if (options_.dialect == wire::Dialect::kTorch113) {
    for (std::size_t i = 0; i < keys.size(); ++i) {
      wire::Request req;
      req.op = wire::Op::kSet;
      req.keys = {key(keys[i])};
      req.values = {values[i]};
      sendRequest(req, deadline());
    }
    return;
  }
  wire::Request req = makeRequest(wire::Op::kMultiSet);
  for (const auto& k : keys) req.keys.push_back(key(k));
  req.values = values;
  sendRequest(req, deadline());
}

void TcpStore::ping() {
  requireTorch2("PING");
  std::lock_guard lock(mutex_);
  ensureConnected();
  wire::Request req;
  req.op = wire::Op::kPing;
  req.word = static_cast<std::uint32_t>(::getpid());
  sendRequest(req, deadline());
  if (readU32(deadline(), "ping") != req.word) fail("ping", "wrong nonce in the reply");
}

void TcpStore::queuePush(const std::string& k, const Bytes& value) {
  requireTorch2("QUEUE_PUSH");
  std::lock_guard lock(mutex_);
  ensureConnected();
  wire::Request req = makeRequest(wire::Op::kQueuePush, {key(k)}, {value});
  sendRequest(req, deadline());
}

std::optional<Bytes> TcpStore::queuePop(const std::string& k, milliseconds timeout) {
  requireTorch2("QUEUE_POP");
  std::lock_guard lock(mutex_);
  if (timeout > milliseconds::zero()) waitLocked({k}, timeout);
  ensureConnected();
  wire::Request req = makeRequest(wire::Op::kQueuePop, {key(k)});
  sendRequest(req, deadline());
  if (readI64(deadline(), "queue_pop " + key(k)) <= 0) return std::nullopt;
  return readBytes(deadline(), "queue_pop " + key(k));
}

std::int64_t TcpStore::queueLen(const std::string& k) {
  requireTorch2("QUEUE_LEN");
  std::lock_guard lock(mutex_);
  ensureConnected();
  wire::Request req = makeRequest(wire::Op::kQueueLen, {key(k)});
  sendRequest(req, deadline());
  return readI64(deadline(), "queue_len " + key(k));
}

std::vector<std::string> TcpStore::listKeys() {
  requireTorch2("LIST_KEYS");
  std::lock_guard lock(mutex_);
  ensureConnected();
  wire::Request req = makeRequest(wire::Op::kListKeys);
  sendRequest(req, deadline());
  std::int64_t n = readI64(deadline(), "list_keys");
  if (n < 0 || static_cast<std::uint64_t>(n) > options_.limits.maxKeysPerRequest * 1024) {
    fail("list_keys", "implausible key count " + std::to_string(n));
  }
  std::vector<std::string> keys;
  for (std::int64_t i = 0; i < n; ++i) {
    Bytes k = readBytes(deadline(), "list_keys");
    if (k.compare(0, options_.keyPrefix.size(), options_.keyPrefix) == 0) {
      keys.push_back(k.substr(options_.keyPrefix.size()));
    }
  }
  return keys;
}

void TcpStore::barrier(const std::string& k, std::int64_t worldSize, milliseconds timeout) {
  requireTorch2("BARRIER");
  std::lock_guard lock(mutex_);
  wire::Request req = makeRequest(wire::Op::kBarrier, {key(k)}, {}, worldSize);
  parkedCall(req, timeout, "barrier " + key(k));
}

void TcpStore::addOnClose(const std::string& k, std::int64_t delta) {
  std::lock_guard lock(mutex_);
  ensureConnected();
  wire::Request req = makeRequest(wire::Op::kAddOnClose, {key(k)}, {}, delta);
  sendRequest(req, deadline());
}

void TcpStore::lease(milliseconds quiet) {
  std::lock_guard lock(mutex_);
  ensureConnected();
  wire::Request req;
  req.op = wire::Op::kLease;
  req.word = static_cast<std::uint32_t>(std::clamp<long long>(quiet.count(), 0, UINT32_MAX));
  sendRequest(req, deadline());
}

Bytes TcpStore::waitChange(const std::string& k, const Bytes& old, milliseconds timeout) {
  std::lock_guard lock(mutex_);
  wire::Request req = makeRequest(wire::Op::kWaitChange, {key(k)}, {old});
  parkedCall(req, timeout, "wait for a change of " + key(k));
  wire::Request get = makeRequest(wire::Op::kGet, {key(k)});
  sendRequest(get, deadline());
  return readBytes(deadline(), "get " + key(k));
}

}  // namespace dtrun::rendezvous
