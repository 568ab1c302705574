// EtcdCluster: real etcd members (Debian's /usr/bin/etcd) on loopback for the tests, each with
// its own client and peer port (bound to port 0 and read back, then handed to etcd) and its own
// data directory under a temporary folder. Members can be killed and started again; the
// destructor kills whatever is left. Elections are made fast (50 ms heartbeat, 500 ms election
// timeout) so that losing a member costs the tests well under a second.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/support/test_support.h"

namespace dtrun::test {

class EtcdCluster {
 public:
  /// Starts `members` members and waits (up to 60 s) until the cluster has a leader. `extra` is
  /// added to every member's command line (TLS flags, --enable-v2). `scheme` is "http" or
  /// "https" (then `extra` must hold the server's certificate flags).
  explicit EtcdCluster(int members = 3, std::vector<std::string> extra = {},
                       std::string scheme = "http");
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  /// True when etcd is installed (tests SKIP otherwise, saying so: DTRUN_NEED_ETCD).
  static bool available();

  int size() const { return static_cast<int>(members_.size()); }
  /// "127.0.0.1:p0,127.0.0.1:p1,..." (every member, also the dead ones).
  std::string endpoints() const;
  std::uint16_t clientPort(int i) const { return members_[i].clientPort; }
  /// SIGKILL member i and reap it.
  void kill(int i);
  /// Starts member i again on its data directory (it rejoins the cluster).
  void start(int i);
  bool running(int i) const { return members_[i].pid > 0; }
  /// Waits until a member answers a linearizable read (the cluster has quorum), up to `timeout`.
  bool waitHealthy(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  /// Runs etcdctl against the cluster (for setting up users); returns its exit code, output in
  /// `out`.
  int etcdctl(const std::vector<std::string>& args, std::string* out = nullptr) const;
  const std::filesystem::path& dir() const { return dir_.path(); }

 private:
  struct Member {
    std::string name;
    std::uint16_t clientPort = 0, peerPort = 0;
    int pid = 0;
  };
  std::vector<std::string> command(int i, bool fresh) const;
  void spawn(int i, bool fresh);

  TempDir dir_;
  std::vector<std::string> extra_;
  std::string scheme_;
  std::vector<Member> members_;
};

}  // namespace dtrun::test

/// Ends the current Catch2 test case as skipped when etcd is not installed here.
#define DTRUN_NEED_ETCD()                                                            \
  do {                                                                               \
    if (!::dtrun::test::EtcdCluster::available()) {                                  \
      DTRUN_SKIP(                                                                    \
          "/usr/bin/etcd or /usr/bin/etcdctl is missing (scripts/setup.sh installs " \
          "etcd-server and etcd-client)");                                           \
    }                                                                                \
  } while (false)
