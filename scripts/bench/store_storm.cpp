// store_storm: a connection storm against a TCPStore server (dtrun's or torch's), for
// scripts/bench/store. A benchmark tool, not a test.
//
//   store_storm --port P [--host 127.0.0.1] --clients K [--run ID] [--timeout-s 120]
//               [--bootstrap] [--sources N]
//
// One process, one thread, non-blocking sockets and epoll, speaking the torch 1.13 dialect that
// both servers understand. All K clients connect at once; each sends SET(<run>/c<i>) and
// ADD(<run>/count, 1); the client whose ADD returns K is the last and also SETs <run>/go; every
// client then WAITs for <run>/go and is done when STOP_WAITING arrives. The clock runs from the
// first connect() to the last STOP_WAITING. A refused or reset connect is retried with jittered
// exponential backoff (10 ms doubling, at most 1 s), as torch's client does; retries are counted.
//
// --bootstrap: the workers' bootstrap; after the wake-up each client also GETs its neighbour's key
// (c<i+1>) and is done when the value arrives. --sources N: clients connect from N source
// addresses, 127.0.0.1 to 127.0.0.N, in turn (as many hosts would; one address alone would run
// out of ephemeral ports near 28K connections).
//
// Output: progress on stderr, then one line on stdout:
//   RESULT clients=K seconds=S retries=R
// Exit status 0, or 1 when the storm did not finish before --timeout-s.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "rendezvous/wire.h"
#include "scripts/bench/bench_net.h"

namespace wire = dtrun::rendezvous::wire;
using Clock = std::chrono::steady_clock;

namespace {

enum class State { kIdle, kConnecting, kAwaitAdd, kAwaitGo, kAwaitGet, kDone };

struct Client {
  int fd = -1;
  State state = State::kIdle;
  std::string out;
  std::string in;
  int attempts = 0;
};

std::string encode(wire::Op op, std::vector<std::string> keys, std::vector<std::string> values,
                   std::int64_t number = 0) {
  return wire::encodeFrame(wire::Dialect::kTorch113, op, std::move(keys), std::move(values),
                           number);
}

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "store_storm: %s\n", why.c_str());
  std::exit(2);
}

class Storm {
 public:
  Storm(sockaddr_in addr, int clients, std::string run, bool bootstrap, int sources)
      : addr_(addr),
        clients_(static_cast<std::size_t>(clients)),
        run_(std::move(run)),
        bootstrap_(bootstrap),
        sources_(sources) {
    epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epfd_ < 0) die(std::string("epoll_create1: ") + std::strerror(errno));
  }

  bool run(std::chrono::seconds timeout) {
    start_ = Clock::now();
    const auto deadline = start_ + timeout;
    for (std::size_t i = 0; i < clients_.size(); ++i) connect(i);
    std::vector<epoll_event> events(1024);
    while (done_ < clients_.size()) {
      auto now = Clock::now();
      if (now >= deadline) return false;
      auto until = deadline;
      if (!retries_.empty()) until = std::min(until, retries_.top().first);
      int waitMs = static_cast<int>(
          std::chrono::ceil<std::chrono::milliseconds>(std::max(until - now, Clock::duration{}))
              .count());
      int n = ::epoll_wait(epfd_, events.data(), static_cast<int>(events.size()), waitMs);
      if (n < 0 && errno != EINTR) die(std::string("epoll_wait: ") + std::strerror(errno));
      for (int e = 0; e < n; ++e) onEvent(events[e].data.u32, events[e].events);
      now = Clock::now();
      while (!retries_.empty() && retries_.top().first <= now) {
        auto i = retries_.top().second;
        retries_.pop();
        connect(i);
      }
    }
    end_ = Clock::now();
    return true;
  }

  double seconds() const { return std::chrono::duration<double>(end_ - start_).count(); }
  std::size_t retries() const { return retryCount_; }
  std::size_t done() const { return done_; }
  const std::map<std::string, int>& errors() const { return errors_; }

 private:
  void connect(std::size_t i) {
    Client& c = clients_[i];
    c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c.fd < 0) die(std::string("socket: ") + std::strerror(errno));
    int one = 1;
    ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (sources_ > 1) {
      sockaddr_in src{};
      src.sin_family = AF_INET;
      src.sin_addr.s_addr = htonl(0x7F000001u + static_cast<std::uint32_t>(i % sources_));
      if (::bind(c.fd, reinterpret_cast<const sockaddr*>(&src), sizeof(src)) != 0) {
        die(std::string("bind to a source address: ") + std::strerror(errno));
      }
    }
    int rc = ::connect(c.fd, reinterpret_cast<const sockaddr*>(&addr_), sizeof(addr_));
    if (rc != 0 && errno != EINPROGRESS) {
      retry(i, std::strerror(errno));
      return;
    }
    c.state = State::kConnecting;
    watch(i, EPOLLOUT, EPOLL_CTL_ADD);
  }

  void watch(std::size_t i, std::uint32_t events, int op) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u32 = static_cast<std::uint32_t>(i);
    if (::epoll_ctl(epfd_, op, clients_[i].fd, &ev) != 0) {
      die(std::string("epoll_ctl: ") + std::strerror(errno));
    }
  }

  // Closes without lingering (RST): thousands of TIME_WAIT sockets would exhaust local ports
  // when the benchmark runs several storms in a row.
  void closeFd(Client& c) {
    if (c.fd < 0) return;
    linger lg{1, 0};
    ::setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    ::close(c.fd);  // also removes it from the epoll set
    c.fd = -1;
  }

  void retry(std::size_t i, const std::string& why) {
    Client& c = clients_[i];
    closeFd(c);
    c.state = State::kIdle;
    ++errors_[why];
    ++retryCount_;
    auto backoffMs = std::min(1000.0, 10.0 * (1 << std::min(c.attempts, 7)));
    ++c.attempts;
    std::uniform_real_distribution<double> jitter(0.5, 1.5);
    auto delay = std::chrono::microseconds(static_cast<long long>(backoffMs * 1000 * jitter(rng_)));
    retries_.emplace(Clock::now() + delay, i);
  }

  [[noreturn]] void lost(std::size_t i, const std::string& why) {
    die("client " + std::to_string(i) + " lost its connection after connecting: " + why);
  }

  void onEvent(std::size_t i, std::uint32_t events) {
    Client& c = clients_[i];
    if (c.state == State::kIdle || c.state == State::kDone) return;  // closed earlier this batch
    if (c.state == State::kConnecting) {
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0 || (events & (EPOLLERR | EPOLLHUP))) {
        retry(i, std::strerror(err ? err : ECONNRESET));
        return;
      }
      // Connected: SET our key and count ourselves in, in one write.
      c.out = encode(wire::Op::kSet, {key("c" + std::to_string(i))}, {"x"}) +
              encode(wire::Op::kAdd, {key("count")}, {}, 1);
      c.state = State::kAwaitAdd;
      flush(i);
      watch(i, EPOLLIN | (c.out.empty() ? 0u : static_cast<std::uint32_t>(EPOLLOUT)),
            EPOLL_CTL_MOD);
      return;
    }
    if ((events & EPOLLOUT) && !c.out.empty()) {
      flush(i);
      if (c.out.empty()) watch(i, EPOLLIN, EPOLL_CTL_MOD);
    }
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
      char buf[256];
      ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
      if (n == 0) lost(i, "closed by the server");
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return;
        lost(i, std::strerror(errno));
      }
      c.in.append(buf, static_cast<std::size_t>(n));
      progress(i);
    }
  }

  void progress(std::size_t i) {
    Client& c = clients_[i];
    if (c.state == State::kAwaitAdd && c.in.size() >= 8) {
      std::int64_t count = 0;
      std::memcpy(&count, c.in.data(), 8);
      c.in.erase(0, 8);
      if (count == static_cast<std::int64_t>(clients_.size())) {
        c.out += encode(wire::Op::kSet, {key("go")}, {"1"});  // the last one opens the gate
      }
      c.out += encode(wire::Op::kWait, {key("go")}, {});
      c.state = State::kAwaitGo;
      flush(i);
      if (!c.out.empty()) watch(i, EPOLLIN | EPOLLOUT, EPOLL_CTL_MOD);
    }
    if (c.state == State::kAwaitGo && !c.in.empty()) {
      if (c.in[0] != static_cast<char>(wire::kStopWaiting)) lost(i, "unexpected WAIT reply");
      c.in.erase(0, 1);
      if (bootstrap_) {
        // The neighbour's key, e.g. a peer's address for the process group.
        c.out += encode(wire::Op::kGet, {key("c" + std::to_string((i + 1) % clients_.size()))}, {});
        c.state = State::kAwaitGet;
        flush(i);
        if (!c.out.empty()) watch(i, EPOLLIN | EPOLLOUT, EPOLL_CTL_MOD);
        return;
      }
      finish(i);
    }
    if (c.state == State::kAwaitGet && c.in.size() >= 8) {
      std::uint64_t len = 0;
      std::memcpy(&len, c.in.data(), 8);
      if (c.in.size() < 8 + len) return;
      if (c.in.compare(8, len, "x") != 0) lost(i, "wrong neighbour value");
      finish(i);
    }
  }

  void finish(std::size_t i) {
    Client& c = clients_[i];
    c.state = State::kDone;
    closeFd(c);
    ++done_;
    if (done_ % 1024 == 0 || done_ == clients_.size()) {
      std::fprintf(stderr, "store_storm: %zu/%zu done\n", done_, clients_.size());
    }
  }

  void flush(std::size_t i) {
    Client& c = clients_[i];
    while (!c.out.empty()) {
      ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c.out.erase(0, static_cast<std::size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && errno == EAGAIN) {
        return;
      } else {
        lost(i, std::strerror(errno));
      }
    }
  }

  std::string key(const std::string& k) const { return "/storm/" + run_ + "/" + k; }

  sockaddr_in addr_;
  std::vector<Client> clients_;
  std::string run_;
  bool bootstrap_ = false;
  int sources_ = 1;
  int epfd_ = -1;
  std::size_t done_ = 0;
  std::size_t retryCount_ = 0;
  std::map<std::string, int> errors_;
  using Retry = std::pair<Clock::time_point, std::size_t>;
  std::priority_queue<Retry, std::vector<Retry>, std::greater<>> retries_;
  std::minstd_rand rng_{std::random_device{}()};
  Clock::time_point start_, end_;
};

}  // namespace

int main(int argc, char** argv) {
  std::string host = "127.0.0.1";
  int port = 0;
  int clients = 0;
  int timeoutS = 120;
  bool bootstrap = false;
  int sources = 1;
  std::string run = std::to_string(::getpid()) + "-" +
                    std::to_string(Clock::now().time_since_epoch().count() % 1000000007);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(a + ": missing value");
      return argv[++i];
    };
    if (a == "--host") {
      host = value();
    } else if (a == "--port") {
      port = std::atoi(value().c_str());
    } else if (a == "--clients") {
      clients = std::atoi(value().c_str());
    } else if (a == "--run") {
      run = value();
    } else if (a == "--timeout-s") {
      timeoutS = std::atoi(value().c_str());
    } else if (a == "--bootstrap") {
      bootstrap = true;
    } else if (a == "--sources") {
      sources = std::max(1, std::atoi(value().c_str()));
    } else {
      die("unknown argument " + a +
          "\nusage: store_storm --port P [--host H] --clients K [--run ID] [--timeout-s S] "
          "[--bootstrap] [--sources N]");
    }
  }
  if (port <= 0 || clients <= 0) die("--port and --clients are required");

  // One descriptor per connection.
  if (auto why = dtrun::bench::reserveDescriptors(clients, "clients"); !why.empty()) die(why);
  sockaddr_in addr{};
  if (!dtrun::bench::resolveIPv4(host, port, &addr)) die("cannot resolve " + host);

  Storm storm(addr, clients, run, bootstrap, sources);
  bool finished = storm.run(std::chrono::seconds(timeoutS));
  for (const auto& [why, n] : storm.errors()) {
    std::fprintf(stderr, "store_storm: %d connect attempts failed: %s\n", n, why.c_str());
  }
  if (!finished) {
    std::printf("RESULT clients=%d seconds=timeout retries=%zu done=%zu\n", clients,
                storm.retries(), storm.done());
    return 1;
  }
  std::printf("RESULT clients=%d seconds=%.3f retries=%zu\n", clients, storm.seconds(),
              storm.retries());
  return 0;
}
