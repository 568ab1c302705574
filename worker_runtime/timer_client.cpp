#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "dtrun/worker/timer.h"

namespace dtrun::worker {

namespace {

// How long a full FIFO (a server that stopped reading) may hold up a worker's acquire.
constexpr int kFullWaitMs = 1000;

// Python's repr(float): the shortest digits that read back as the same double, in fixed
// notation for exponents -4..15 ("1700000000.0", "0.001") and as "1e+22", "1.5e-05" otherwise.
std::string pythonFloat(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  if (ec != std::errc()) return "0.0";
  std::string s(buf, end);
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  const auto e = s.find('e');
  const int exp = std::atoi(s.c_str() + e + 1);
  std::string digits = s.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  if (exp >= -4 && exp < 16) {
    if (exp < 0) return sign + "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
    const auto point = static_cast<std::size_t>(exp) + 1;
    if (digits.size() <= point)
      return sign + digits + std::string(point - digits.size(), '0') + ".0";
    return sign + digits.substr(0, point) + "." + digits.substr(point);
  }
  const int mag = exp < 0 ? -exp : exp;
  return sign + digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "") + "e" +
         (exp < 0 ? "-" : "+") + (mag < 10 ? "0" : "") + std::to_string(mag);
}

// Blocks SIGPIPE on this thread while the guard lives; a SIGPIPE raised meanwhile by our write is
// taken back so that it is never delivered (the server may close between our open and write).
class NoSigpipe {
 public:
  NoSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    hadPending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~NoSigpipe() {
    if (raised_ && !hadPending_) {
      timespec zero{};
      while (sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  void raised() { raised_ = true; }

 private:
  sigset_t pipe_;
  sigset_t old_;
  bool hadPending_ = false;
  bool raised_ = false;
};

const TimerClient& processClient() {
  // Made once; an unset variable throws here every time, so a later fix of the environment
  // in-process is not needed for the error to be clear.
  static const TimerClient client = TimerClient::fromEnvironment(SIGKILL);
  return client;
}

std::chrono::system_clock::time_point after(std::chrono::duration<double> d) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(d);
}

}  // namespace

std::string formatTimerRequest(int pid, std::string_view scopeId, double expirationTime,
                               int signal) {
  const std::string scope = nlohmann::json(std::string(scopeId))
                                .dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  const std::string expiration =
      expirationTime == -1 ? std::string("-1") : pythonFloat(expirationTime);
  return R"({"version": 1, "pid": )" + std::to_string(pid) + R"(, "scope_id": )" + scope +
         R"(, "expiration_time": )" + expiration + R"(, "signal": )" + std::to_string(signal) + "}";
}

TimerClient::TimerClient(std::string path, int signal) : path_(std::move(path)), signal_(signal) {
  if (path_.empty()) throw ConfigError("timer client: the FIFO path is empty");
}

TimerClient TimerClient::fromEnvironment(int signal) {
  const char* path = std::getenv(kTimerFileVariable);
  if (path == nullptr || *path == '\0') {
    throw ConfigError(std::string(kTimerFileVariable) +
                      " is not set: the launcher runs no file timer (dtrun --file-timer, or "
                      "TORCHELASTIC_ENABLE_FILE_TIMER=1 for dtrun and torchrun)");
  }
  return TimerClient(path, signal);
}

void TimerClient::acquire(std::string_view scope,
                          std::chrono::system_clock::time_point expiration) const {
  const double seconds = std::chrono::duration<double>(expiration.time_since_epoch()).count();
  // A deadline before the epoch would read as a release; it has passed all the same.
  send(formatTimerRequest(static_cast<int>(::getpid()), scope, seconds < 0 ? 0.0 : seconds,
                          signal_));
}

void TimerClient::release(std::string_view scope) const {
  send(formatTimerRequest(static_cast<int>(::getpid()), scope, -1, 0));
}

void TimerClient::send(const std::string& json) const {
  const std::string line = json + "\n";
  if (line.size() > PIPE_BUF) {
    throw ConfigError("timer client: a request of " + std::to_string(line.size()) +
                      " bytes exceeds PIPE_BUF (" + std::to_string(PIPE_BUF) +
                      "); use a shorter scope id");
  }
  // Non-blocking open: with no server, a blocking open would wait for one for ever.
  int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw ConnectionError("timer client: no file-timer server reads " + path_ + " (" +
                          std::strerror(err) + "); is the launcher's file timer on?");
  }
  NoSigpipe guard;
  ssize_t n = -1;
  int err = 0;
  for (int waited = 0;;) {
    n = ::write(fd, line.data(), line.size());
    err = errno;
    if (n >= 0 || err == EINTR) {
      if (n >= 0) break;
      continue;
    }
    if (err != EAGAIN || waited >= kFullWaitMs) break;
    pollfd p{fd, POLLOUT, 0};
    ::poll(&p, 1, 50);
    waited += 50;
  }
  ::close(fd);
  if (n < 0 && err == EPIPE) guard.raised();
  if (n == static_cast<ssize_t>(line.size())) return;
  if (n < 0 && err == EAGAIN) {
    throw TimeoutError("timer client: " + path_ + " stayed full for " +
                       std::to_string(kFullWaitMs) + " ms; the file-timer server is not reading");
  }
  throw ConnectionError("timer client: writing to " + path_ +
                        " failed: " + (n < 0 ? std::strerror(err) : "short write"));
}

TimerScope::TimerScope(std::string scope, std::chrono::duration<double> d)
    : TimerScope(processClient(), std::move(scope), d) {}

TimerScope::TimerScope(std::chrono::duration<double> d, const char* file, int line)
    : TimerScope(processClient(), std::string(file) + "#" + std::to_string(line), d) {}

TimerScope::TimerScope(const TimerClient& client, std::string scope,
                       std::chrono::duration<double> d)
    : client_(&client), scope_(std::move(scope)) {
  client_->acquire(scope_, after(d));
}

TimerScope::TimerScope(TimerScope&& other) noexcept
    : client_(std::exchange(other.client_, nullptr)), scope_(std::move(other.scope_)) {}

TimerScope::~TimerScope() {
  if (client_ == nullptr) return;
  try {
    client_->release(scope_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrun_worker: could not release timer scope %s: %s\n", scope_.c_str(),
                 e.what());
  }
}

}  // namespace dtrun::worker
