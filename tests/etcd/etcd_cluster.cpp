#include "tests/etcd/etcd_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>

#include "common/free_port.h"
#include "common/spawn.h"

namespace dtrun::test {

namespace {
constexpr char kEtcd[] = "/usr/bin/etcd";
constexpr char kEtcdctl[] = "/usr/bin/etcdctl";
}  // namespace

bool EtcdCluster::available() {
  return ::access(kEtcd, X_OK) == 0 && ::access(kEtcdctl, X_OK) == 0;
}

EtcdCluster::EtcdCluster(int members, std::vector<std::string> extra, std::string scheme)
    : extra_(std::move(extra)), scheme_(std::move(scheme)) {
  for (int i = 0; i < members; ++i) {
    Member m;
    m.name = "m" + std::to_string(i);
    // Each port was free a moment ago (bound to 0 and read back): etcd takes a port number,
    // not a socket, so this small race is the fixture's.
    m.clientPort = pickFreePort();
    m.peerPort = pickFreePort();
    members_.push_back(m);
  }
  for (int i = 0; i < members; ++i) spawn(i, true);
  if (!waitHealthy()) throw std::runtime_error("etcd cluster did not become healthy in 60 s");
}

EtcdCluster::~EtcdCluster() {
  for (int i = 0; i < size(); ++i) kill(i);
}

std::vector<std::string> EtcdCluster::command(int i, bool fresh) const {
  const Member& m = members_[i];
  std::string cluster;
  for (const auto& o : members_) {
    cluster +=
        (cluster.empty() ? "" : ",") + o.name + "=http://127.0.0.1:" + std::to_string(o.peerPort);
  }
  const std::string client = scheme_ + "://127.0.0.1:" + std::to_string(m.clientPort);
  const std::string peer = "http://127.0.0.1:" + std::to_string(m.peerPort);
  std::vector<std::string> argv = {kEtcd,
                                   "--name",
                                   m.name,
                                   "--data-dir",
                                   (dir() / m.name).string(),
                                   "--listen-client-urls",
                                   client,
                                   "--advertise-client-urls",
                                   client,
                                   "--listen-peer-urls",
                                   peer,
                                   "--initial-advertise-peer-urls",
                                   peer,
                                   "--initial-cluster",
                                   cluster,
                                   "--initial-cluster-state",
                                   fresh ? "new" : "existing",
                                   "--initial-cluster-token",
                                   dir().filename().string(),
                                   "--heartbeat-interval",
                                   "50",
                                   "--election-timeout",
                                   "500",
                                   "--log-level",
                                   "warn"};
  argv.insert(argv.end(), extra_.begin(), extra_.end());
  return argv;
}

std::string EtcdCluster::endpoints() const {
  std::string out;
  for (const auto& m : members_) {
    out += (out.empty() ? "" : ",") + std::string("127.0.0.1:") + std::to_string(m.clientPort);
  }
  return out;
}

void EtcdCluster::kill(int i) {
  int& pid = members_[i].pid;
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  pid = 0;
}

void EtcdCluster::start(int i) {
  if (members_[i].pid <= 0) spawn(i, false);
}

void EtcdCluster::spawn(int i, bool fresh) {
  SpawnSpec spec;
  spec.argv = command(i, fresh);
  const auto log = (dir() / (members_[i].name + ".log")).string();
  int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  spec.stdoutFd = fd;
  spec.stderrFd = fd;
  spec.stdinFd = kSpawnDevNull;
  spec.parentDeathSignal = SIGKILL;
  members_[i].pid = spawnProcess(spec);
  ::close(fd);
}

int EtcdCluster::etcdctl(const std::vector<std::string>& args, std::string* out) const {
  std::vector<std::string> argv = {kEtcdctl, "--command-timeout=3s", "--dial-timeout=2s"};
  std::string eps;
  for (const auto& m : members_) {
    eps += (eps.empty() ? "" : ",") + scheme_ + "://127.0.0.1:" + std::to_string(m.clientPort);
  }
  argv.push_back("--endpoints=" + eps);
  if (scheme_ == "https") {
    argv.push_back("--insecure-transport=false");
    argv.push_back("--insecure-skip-tls-verify");
  }
  argv.insert(argv.end(), args.begin(), args.end());
  int pipeFds[2];
  if (::pipe2(pipeFds, O_CLOEXEC) != 0) return -1;
  SpawnSpec spec;
  spec.argv = argv;
  spec.env = std::vector<std::string>{"ETCDCTL_API=3", "PATH=/usr/bin:/bin"};
  spec.stdinFd = kSpawnDevNull;
  spec.stdoutFd = pipeFds[1];
  spec.stderrFd = pipeFds[1];
  int pid = spawnProcess(spec);
  ::close(pipeFds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipeFds[0], buf, sizeof buf)) > 0;) text.append(buf, n);
  ::close(pipeFds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (out) *out = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool EtcdCluster::waitHealthy(std::chrono::milliseconds timeout) {
  // A linearizable read needs a leader and a quorum; any error (auth enabled included, which
  // answers "user name is empty" only with a leader) means "not yet" unless it says so.
  return pollUntil(
      [&] {
        std::string out;
        const int rc = etcdctl({"get", "dtrun-health-probe"}, &out);
        return rc == 0 || out.find("user name is empty") != std::string::npos ||
               out.find("permission denied") != std::string::npos;
      },
      timeout);
}

}  // namespace dtrun::test
