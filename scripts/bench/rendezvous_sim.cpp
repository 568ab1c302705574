// rdzv_sim: N simulated nodes joining one rendezvous round at once, as store connections from
// one process, against a running store (`dtrun store`). For scripts/bench/rendezvous; a
// benchmark tool, not a test.
//
//   rdzv_sim --port P [--host 127.0.0.1] --nodes N [--read-nodes none|all|multiget]
//            [--connect-first] [--no-membership] [--run ID] [--timeout-s 120]
//
// Each joiner has one connection (torch 2.x dialect) and runs, round trip by round trip, the
// store operations DynamicRendezvous::joinRound does for round 0 when N = --nnodes MAX:
//   ADD_ON_CLOSE(epoch), ADD_ON_CLOSE(r0/gone)     membership (no reply; --no-membership: off)
//   COMPARE_SET(r0/role, "", role)                 do all nodes share a role? (before the ADD)
//   ADD(r0/join, 1 << 32 | 1)                      index and rank offset, one round trip
//   CHECK(r0/closed)                               late?
//   SET(r0/node/<index>)                           its description (no reply; round 0 has no
//                                                  r0/expect to read: nobody is expected back)
//   the last joiner: ADD(r0/join, 0), COMPARE_SET(r0/closed, "", snapshot)   closes the round
//   the others:      WAIT(r0/closed)
//   GET(r0/closed)                                 world size
//   CHECK(r0/mixed_roles)                          role ranks = global ranks when absent
// and then, with --read-nodes, reads the other nodes' descriptions: `all` as an earlier dtrun
// did (CHECK and GET of r0/node/<r> for every r: 2N round trips per joiner, O(N^2) in all; kept
// to show why it went), `multiget` in one MULTI_GET (one round trip, O(N) bytes each: what dtrun
// does when roles differ), `none` not at all (the O(1) protocol of docs/design.md decision 2, which
// dtrun follows when every node has the same role). A real agent spreads these over 3 connections
// (ops, membership, watch); one connection per joiner keeps 16384 joiners under the descriptor
// limit.
//
// Checks what every node must agree on: indices 0..N-1 each once, and every joiner read the
// same closed counter, N nodes and N processes. Output: progress on stderr, then one line:
//   RESULT nodes=N seconds=S connected_after=C round_trips=R read_nodes=MODE connect_first=0|1
// C: seconds from the first connect() to the last connection up. S: seconds of the joins: from
// the first connect() when all connect at once (the default, a cold start: S includes C), from
// the moment every connection is up with --connect-first (the join protocol alone).
// Exit status 0; 1 when it did not finish before --timeout-s or a check failed.
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
#include <string>
#include <vector>

#include "rendezvous/dynamic_rendezvous.h"
#include "rendezvous/wire.h"
#include "scripts/bench/bench_net.h"

namespace wire = dtrun::rendezvous::wire;
using dtrun::rendezvous::joinedNodes;
using dtrun::rendezvous::joinedProcs;
using dtrun::rendezvous::packJoin;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "rdzv_sim: %s\n", why.c_str());
  std::exit(1);
}

enum class ReadNodes { kNone, kAll, kMultiGet };

// Where a joiner is: each step waits for one reply.
enum class Step {
  kConnecting,
  kConnected,  // connected, not joining yet (--connect-first)
  kRole,       // awaiting COMPARE_SET(role)
  kJoin,       // awaiting ADD(join)
  kCheck,      // awaiting CHECK(closed)
  kSnapshot,   // awaiting ADD(join, 0)      (the closer)
  kClose,      // awaiting COMPARE_SET       (the closer)
  kWait,       // awaiting WAIT(closed)      (everyone else)
  kClosed,     // awaiting GET(closed)
  kMixed,      // awaiting CHECK(mixed_roles)
  kNodeCheck,  // awaiting CHECK(node/r)     (--read-nodes all)
  kNodeGet,    // awaiting GET(node/r)       (--read-nodes all)
  kMultiGet,   // awaiting MULTI_GET         (--read-nodes multiget)
  kDone,
};

struct Joiner {
  int fd = -1;
  Step step = Step::kConnecting;
  std::string out;
  std::string in;
  int index = -1;
  std::int64_t closed = -1;
  int nextNode = 0;
};

std::string encode(wire::Op op, std::vector<std::string> keys, std::vector<std::string> values = {},
                   std::int64_t number = 0, std::uint32_t word = 0) {
  return wire::encodeFrame(wire::Dialect::kTorch2, op, std::move(keys), std::move(values), number,
                           word);
}

class Sim {
 public:
  Sim(sockaddr_in addr, int nodes, ReadNodes read, bool membership, std::string run)
      : addr_(addr),
        joiners_(static_cast<std::size_t>(nodes)),
        read_(read),
        membership_(membership),
        prefix_("dtrun/" + run + "/") {
    epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epfd_ < 0) die(std::string("epoll_create1: ") + std::strerror(errno));
  }

  /// Runs every joiner to the end. `connectFirst`: establish every connection first (at most
  /// kPendingConnects at a time, so that the listen backlog never overflows) and start the clock
  /// when all are up; otherwise all connect at once, each joining as soon as it is connected,
  /// and the clock starts at the first connect().
  bool run(std::chrono::seconds timeout, bool connectFirst) {
    connectFirst_ = connectFirst;
    start_ = Clock::now();
    joinStart_ = start_;
    const auto deadline = start_ + timeout;
    std::size_t next = 0;
    std::vector<epoll_event> events(1024);
    while (done_ < joiners_.size()) {
      const std::size_t cap = connectFirst_ ? connected_ + kPendingConnects : joiners_.size();
      while (next < joiners_.size() && next < cap) connect(next++);
      if (Clock::now() >= deadline) return false;
      int n = ::epoll_wait(epfd_, events.data(), static_cast<int>(events.size()), 100);
      if (n < 0 && errno != EINTR) die(std::string("epoll_wait: ") + std::strerror(errno));
      for (int e = 0; e < n; ++e) onEvent(events[e].data.u32, events[e].events);
      if (connectFirst_ && connected_ == joiners_.size() && !joining_) {
        joining_ = true;
        joinStart_ = Clock::now();
        for (std::size_t i = 0; i < joiners_.size(); ++i) sendFirst(i);
      }
    }
    end_ = Clock::now();
    return true;
  }

  /// Closes every connection with a reset: thousands of TIME_WAIT sockets would use up local
  /// ports for the next run.
  void closeAll() {
    for (auto& j : joiners_) {
      if (j.fd < 0) continue;
      linger lg{1, 0};
      ::setsockopt(j.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
      ::close(j.fd);
      j.fd = -1;
    }
  }

  /// Every joiner agrees on the round; empty when so, else what is wrong.
  std::string verify() const {
    const auto n = static_cast<int>(joiners_.size());
    std::vector<int> seen(joiners_.size(), 0);
    for (const auto& j : joiners_) {
      if (j.index < 0 || j.index >= n) return "index " + std::to_string(j.index) + " out of range";
      if (seen[j.index]++) return "index " + std::to_string(j.index) + " given twice";
      if (joinedNodes(j.closed) != n || joinedProcs(j.closed) != n) {
        return "joiner " + std::to_string(j.index) + " read closed = " + std::to_string(j.closed);
      }
    }
    return "";
  }

  /// Seconds from the start of the joins to the last joiner through.
  double seconds() const { return std::chrono::duration<double>(end_ - joinStart_).count(); }
  /// Seconds until the last joiner's connection was established.
  double connectSeconds() const {
    return std::chrono::duration<double>(connectedAt_ - start_).count();
  }
  std::size_t roundTrips() const { return roundTrips_; }

 private:
  std::string key(const std::string& k) const { return prefix_ + k; }

  void connect(std::size_t i) {
    Joiner& j = joiners_[i];
    j.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (j.fd < 0) die(std::string("socket: ") + std::strerror(errno));
    int one = 1;
    ::setsockopt(j.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (sourceAddresses_ > 0) {
      // Spread the connections over 127.0.0.2.. source addresses: the kernel then looks for a
      // free local port per address instead of searching one crowded range.
      ::setsockopt(j.fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
      sockaddr_in src{};
      src.sin_family = AF_INET;
      src.sin_addr.s_addr =
          htonl((127u << 24) | (2u + static_cast<std::uint32_t>(i % sourceAddresses_)));
      if (::bind(j.fd, reinterpret_cast<const sockaddr*>(&src), sizeof(src)) != 0) {
        die(std::string("bind: ") + std::strerror(errno));
      }
    }
    int rc = ::connect(j.fd, reinterpret_cast<const sockaddr*>(&addr_), sizeof(addr_));
    if (rc != 0 && errno != EINPROGRESS) die(std::string("connect: ") + std::strerror(errno));
    epoll_event ev{};
    ev.events = EPOLLOUT | EPOLLIN;
    ev.data.u32 = static_cast<std::uint32_t>(i);
    if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, j.fd, &ev) != 0) {
      die(std::string("epoll_ctl: ") + std::strerror(errno));
    }
  }

  void sendFirst(std::size_t i) {
    std::string first = encode(wire::Op::kValidate, {}, {}, 0, wire::kValidationMagic);
    if (membership_) {
      first += encode(wire::Op::kAddOnClose, {key("epoch")}, {}, 1);
      first += encode(wire::Op::kAddOnClose, {key("r0/gone")}, {}, 1);
    }
    send(i, first + encode(wire::Op::kCompareSet, {key("r0/role")}, {"", "default"}), Step::kRole);
  }

  void send(std::size_t i, std::string bytes, Step next) {
    Joiner& j = joiners_[i];
    j.out += bytes;
    j.step = next;
    ++roundTrips_;
    flush(i);
  }

  void flush(std::size_t i) {
    Joiner& j = joiners_[i];
    while (!j.out.empty()) {
      ssize_t n = ::send(j.fd, j.out.data(), j.out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        j.out.erase(0, static_cast<std::size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && errno == EAGAIN) {
        return;  // EPOLLOUT stays armed
      } else {
        die("joiner " + std::to_string(i) + ": send: " + std::strerror(errno));
      }
    }
  }

  void onEvent(std::size_t i, std::uint32_t events) {
    Joiner& j = joiners_[i];
    if (j.step == Step::kDone || j.step == Step::kConnected) return;
    if (j.step == Step::kConnecting) {
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(j.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) die("joiner " + std::to_string(i) + ": connect: " + std::strerror(err));
      if (!(events & EPOLLOUT)) return;
      if (++connected_ == joiners_.size()) connectedAt_ = Clock::now();
      j.step = Step::kConnected;
      if (!connectFirst_) sendFirst(i);
      return;
    }
    if ((events & EPOLLOUT) && !j.out.empty()) flush(i);
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
      char buf[4096];
      for (;;) {
        ssize_t n = ::recv(j.fd, buf, sizeof(buf), 0);
        if (n == 0) die("joiner " + std::to_string(i) + ": the store closed the connection");
        if (n < 0) {
          if (errno == EAGAIN) break;
          if (errno == EINTR) continue;
          die("joiner " + std::to_string(i) + ": recv: " + std::strerror(errno));
        }
        j.in.append(buf, static_cast<std::size_t>(n));
      }
      while (j.step != Step::kDone && progress(i)) {
      }
    }
  }

  // Consumes one reply if a whole one is there; false when more bytes are needed.
  bool takeI64(Joiner& j, std::int64_t* v) {
    if (j.in.size() < 8) return false;
    std::memcpy(v, j.in.data(), 8);
    j.in.erase(0, 8);
    return true;
  }
  bool takeU8(Joiner& j, std::uint8_t* v) {
    if (j.in.empty()) return false;
    *v = static_cast<std::uint8_t>(j.in[0]);
    j.in.erase(0, 1);
    return true;
  }
  bool takeBytes(Joiner& j, std::string* v, int count = 1) {
    std::size_t pos = 0;
    for (int c = 0; c < count; ++c) {
      if (j.in.size() < pos + 8) return false;
      std::uint64_t len = 0;
      std::memcpy(&len, j.in.data() + pos, 8);
      if (j.in.size() < pos + 8 + len) return false;
      if (c == count - 1) v->assign(j.in, pos + 8, len);
      pos += 8 + len;
    }
    j.in.erase(0, pos);
    return true;
  }

  bool progress(std::size_t i) {
    Joiner& j = joiners_[i];
    const auto n = static_cast<int>(joiners_.size());
    std::int64_t num = 0;
    std::uint8_t byte = 0;
    std::string bytes;
    switch (j.step) {
      case Step::kRole:
        if (!takeBytes(j, &bytes)) return false;
        send(i, encode(wire::Op::kAdd, {key("r0/join")}, {}, packJoin(1, 1)), Step::kJoin);
        return true;
      case Step::kJoin:
        if (!takeI64(j, &num)) return false;
        j.index = joinedNodes(num) - 1;
        send(i, encode(wire::Op::kCheck, {key("r0/closed")}), Step::kCheck);
        return true;
      case Step::kCheck:
        if (!takeU8(j, &byte)) return false;
        if (byte == wire::kCheckReady) die("joiner " + std::to_string(i) + " came too late");
        {
          // SET has no reply: it leaves together with the next request.
          std::string set = encode(wire::Op::kSet, {key("r0/node/" + std::to_string(j.index))},
                                   {R"({"addr":"sim","host":"sim","nproc":1,"pid":)" +
                                    std::to_string(i) + R"(,"role":"default"})"});
          if (j.index + 1 >= n) {
            send(i, set + encode(wire::Op::kAdd, {key("r0/join")}, {}, 0), Step::kSnapshot);
          } else {
            send(i, set + encode(wire::Op::kWait, {key("r0/closed")}), Step::kWait);
          }
          return true;
        }
      case Step::kSnapshot:
        if (!takeI64(j, &num)) return false;
        send(i, encode(wire::Op::kCompareSet, {key("r0/closed")}, {"", std::to_string(num)}),
             Step::kClose);
        return true;
      case Step::kClose:
      case Step::kWait:
        if (j.step == Step::kClose ? !takeBytes(j, &bytes) : !takeU8(j, &byte)) return false;
        send(i, encode(wire::Op::kGet, {key("r0/closed")}), Step::kClosed);
        return true;
      case Step::kClosed:
        if (!takeBytes(j, &bytes)) return false;
        j.closed = std::stoll(bytes);
        send(i, encode(wire::Op::kCheck, {key("r0/mixed_roles")}), Step::kMixed);
        return true;
      case Step::kMixed:
        if (!takeU8(j, &byte)) return false;
        if (read_ == ReadNodes::kAll) {
          send(i, encode(wire::Op::kCheck, {key("r0/node/0")}), Step::kNodeCheck);
        } else if (read_ == ReadNodes::kMultiGet) {
          std::vector<std::string> keys;
          for (int r = 0; r < n; ++r) keys.push_back(key("r0/node/" + std::to_string(r)));
          send(i, encode(wire::Op::kMultiGet, std::move(keys)), Step::kMultiGet);
        } else {
          finish(i);
        }
        return true;
      case Step::kNodeCheck:
        if (!takeU8(j, &byte)) return false;
        send(i, encode(wire::Op::kGet, {key("r0/node/" + std::to_string(j.nextNode))}),
             Step::kNodeGet);
        return true;
      case Step::kNodeGet:
        if (!takeBytes(j, &bytes)) return false;
        if (++j.nextNode < n) {
          send(i, encode(wire::Op::kCheck, {key("r0/node/" + std::to_string(j.nextNode))}),
               Step::kNodeCheck);
        } else {
          finish(i);
        }
        return true;
      case Step::kMultiGet:
        if (!takeBytes(j, &bytes, n)) return false;
        finish(i);
        return true;
      case Step::kConnecting:
      case Step::kConnected:
      case Step::kDone:
        return false;
    }
    return false;
  }

  // Keeps the connection open (a closed membership connection would count as a node gone)
  // until every joiner is through.
  void finish(std::size_t i) {
    joiners_[i].step = Step::kDone;
    ++done_;
    if (done_ % 4096 == 0 || done_ == joiners_.size()) {
      std::fprintf(stderr, "rdzv_sim: %zu/%zu joined\n", done_, joiners_.size());
    }
  }

  sockaddr_in addr_;
  std::vector<Joiner> joiners_;
  ReadNodes read_;
  bool membership_;
  std::string prefix_;
  int epfd_ = -1;
  std::size_t done_ = 0;
  std::size_t connected_ = 0;
  bool connectFirst_ = false;
  bool joining_ = false;
  static constexpr std::size_t kPendingConnects = 256;

 public:
  std::size_t sourceAddresses_ = 0;
  std::size_t roundTrips_ = 0;
  Clock::time_point start_, joinStart_, end_, connectedAt_;
};

}  // namespace

int main(int argc, char** argv) {
  std::string host = "127.0.0.1";
  int port = 0;
  int nodes = 0;
  int timeoutS = 120;
  bool membership = true;
  bool connectFirst = false;
  int sourceAddresses = 0;
  ReadNodes read = ReadNodes::kNone;
  std::string readName = "none";
  std::string run = "sim-" + std::to_string(::getpid()) + "-" +
                    std::to_string(Clock::now().time_since_epoch().count() % 1000000007);
  const char* usage =
      "usage: rdzv_sim --port P [--host H] --nodes N [--read-nodes none|all|multiget] "
      "[--connect-first] [--no-membership] [--run ID] [--timeout-s S]";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(a + ": missing value\n" + usage);
      return argv[++i];
    };
    if (a == "--host") {
      host = value();
    } else if (a == "--port") {
      port = std::atoi(value().c_str());
    } else if (a == "--nodes") {
      nodes = std::atoi(value().c_str());
    } else if (a == "--read-nodes") {
      readName = value();
      if (readName == "none") {
        read = ReadNodes::kNone;
      } else if (readName == "all") {
        read = ReadNodes::kAll;
      } else if (readName == "multiget") {
        read = ReadNodes::kMultiGet;
      } else {
        die("--read-nodes: none, all or multiget");
      }
    } else if (a == "--source-addresses") {
      sourceAddresses = std::atoi(value().c_str());
    } else if (a == "--connect-first") {
      connectFirst = true;
    } else if (a == "--no-membership") {
      membership = false;
    } else if (a == "--run") {
      run = value();
    } else if (a == "--timeout-s") {
      timeoutS = std::atoi(value().c_str());
    } else if (a == "-h" || a == "--help") {
      std::printf("%s\n", usage);
      return 0;
    } else {
      die("unknown argument " + a + "\n" + usage);
    }
  }
  if (port <= 0 || nodes <= 0) die(std::string("--port and --nodes are required\n") + usage);

  // One descriptor per connection.
  if (auto why = dtrun::bench::reserveDescriptors(nodes, "joiners"); !why.empty()) die(why);
  sockaddr_in addr{};
  if (!dtrun::bench::resolveIPv4(host, port, &addr)) die("cannot resolve " + host);

  Sim sim(addr, nodes, read, membership, run);
  sim.sourceAddresses_ = static_cast<std::size_t>(sourceAddresses);
  const bool finished = sim.run(std::chrono::seconds(timeoutS), connectFirst);
  sim.closeAll();
  if (!finished) {
    std::printf("RESULT nodes=%d seconds=timeout read_nodes=%s\n", nodes, readName.c_str());
    return 1;
  }
  if (auto wrong = sim.verify(); !wrong.empty()) die("the joiners disagree: " + wrong);
  std::printf(
      "RESULT nodes=%d seconds=%.3f connected_after=%.3f round_trips=%zu read_nodes=%s "
      "connect_first=%d\n",
      nodes, sim.seconds(), sim.connectSeconds(), sim.roundTrips(), readName.c_str(),
      connectFirst ? 1 : 0);
  return 0;
}
