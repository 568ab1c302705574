#include "agent/file_timer.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/file_util.h"

namespace dtrun::agent {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr std::size_t kReadChunk = 16 * 1024;
// A request is at most PIPE_BUF bytes; anything far longer is garbage and is skipped to its end
// rather than held in memory.
constexpr std::size_t kMaxLine = 64 * 1024;
constexpr auto kLogEvery = std::chrono::seconds(10);
// Deadlines beyond this are "never" for any job; the bound keeps the clock arithmetic finite.
constexpr double kMaxAheadSeconds = 10.0 * 365 * 24 * 3600;
// How much of a bad line a warning quotes.
constexpr std::size_t kQuote = 200;

std::string quote(std::string_view line) {
  std::string q(line.substr(0, kQuote));
  for (char& c : q) {
    if (static_cast<unsigned char>(c) < 0x20) c = '?';
  }
  if (line.size() > kQuote) q += "... (" + std::to_string(line.size()) + " bytes)";
  return q;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

int intField(const nlohmann::json& j, const char* name, long long lo, long long hi) {
  auto it = j.find(name);
  if (it == j.end()) throw ProtocolError(std::string("no \"") + name + "\"");
  if (!it->is_number_integer()) {
    throw ProtocolError(std::string("\"") + name + "\" is not an integer: " + it->dump());
  }
  // Unsigned values above the int64 range arrive as number_unsigned; compare in that domain.
  if (it->is_number_unsigned() &&
      it->get<unsigned long long>() > static_cast<unsigned long long>(hi)) {
    throw ProtocolError(std::string("\"") + name + "\" is out of range: " + it->dump());
  }
  long long v = it->get<long long>();
  if (v < lo || v > hi) {
    throw ProtocolError(std::string("\"") + name + "\" is out of range: " + it->dump());
  }
  return static_cast<int>(v);
}

}  // namespace

FileTimerRequest parseFileTimerRequest(std::string_view line) {
  nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
  if (j.is_discarded()) throw ProtocolError("not JSON");
  if (!j.is_object()) throw ProtocolError("not a JSON object");
  FileTimerRequest r;
  if (j.contains("version")) {
    r.version = intField(j, "version", 1, 1);
  }
  r.pid = intField(j, "pid", 1, 0x7fffffff);
  auto scope = j.find("scope_id");
  if (scope == j.end() || !scope->is_string()) throw ProtocolError("\"scope_id\" is not a string");
  r.scopeId = scope->get<std::string>();
  auto exp = j.find("expiration_time");
  if (exp == j.end() || !exp->is_number()) {
    throw ProtocolError("\"expiration_time\" is not a number");
  }
  r.expirationTime = exp->get<double>();
  if (!std::isfinite(r.expirationTime)) throw ProtocolError("\"expiration_time\" is not finite");
  // Signals are small; torch passes any int to os.kill, where a negative or zero one means
  // "do not reap".
  r.signal = intField(j, "signal", -0x7fffffff, SIGRTMAX);
  return r;
}

FileTimerServer::FileTimerServer(boost::asio::io_context& io, std::string path, OwnerLookup lookup,
                                 ExpiryHandler onExpired, std::shared_ptr<spdlog::logger> log)
    : io_(io),
      path_(std::move(path)),
      lookup_(std::move(lookup)),
      onExpired_(std::move(onExpired)),
      log_(std::move(log)),
      deadline_(io),
      retry_(io),
      buffer_(kReadChunk) {}

FileTimerServer::~FileTimerServer() { stop(); }

void FileTimerServer::createFifo() {
  if (path_.empty()) {
    privateDir_ = makePrivateTempDir("dtrun-timer", "file timer");
    path_ = privateDir_ + "/timer.fifo";
  }
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0) {
    if (!S_ISFIFO(st.st_mode)) {
      throw ConfigError("file timer: " + path_ +
                        " exists and is not a FIFO; not replacing it (TORCHELASTIC_TIMER_FILE)");
    }
    // A FIFO with a reader is another server's (a second agent given the same path); one without
    // is left over from a killed agent and is replaced, as torch replaces it.
    int probe = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (probe >= 0) {
      ::close(probe);
      throw ConfigError("file timer: " + path_ +
                        " is already served by another process (another agent on this node "
                        "given the same TORCHELASTIC_TIMER_FILE?)");
    }
    if (errno != ENXIO) {
      throw Error("file timer: cannot probe " + path_ + ": " + std::strerror(errno));
    }
    if (::unlink(path_.c_str()) != 0) {
      throw Error("file timer: cannot remove the stale FIFO " + path_ + ": " +
                  std::strerror(errno));
    }
  } else if (errno != ENOENT) {
    throw ConfigError("file timer: cannot use " + path_ + ": " + std::strerror(errno));
  }
  if (::mkfifo(path_.c_str(), 0600) != 0) {
    throw ConfigError("file timer: cannot create the FIFO " + path_ + ": " + std::strerror(errno));
  }
}

void FileTimerServer::start() {
  if (fifo_) return;
  createFifo();
  // O_RDWR: this descriptor is a writer too, so the FIFO never reaches EOF when the last client
  // closes it (a reader-only FIFO would then be readable for ever, torch's sleep-and-retry
  // loop), and clients' non-blocking opens always find a reader.
  int fd = ::open(path_.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    ::unlink(path_.c_str());
    throw Error("file timer: cannot open " + path_ + ": " + std::strerror(err));
  }
  fifo_ = std::make_unique<boost::asio::posix::stream_descriptor>(io_, fd);
  log_->info("file timer: serving {}", path_);
  startRead();
}

void FileTimerServer::stop() {
  if (!fifo_) return;
  *alive_ = false;
  alive_ = std::make_shared<bool>(true);
  boost::system::error_code ignored;
  fifo_->close(ignored);
  fifo_.reset();
  deadline_.cancel();
  retry_.cancel();
  timers_.clear();
  armedFor_.reset();
  pending_.clear();
  ::unlink(path_.c_str());
  if (!privateDir_.empty()) ::rmdir(privateDir_.c_str());
  log_->info("file timer: stopped serving {} ({} request(s), {} expired)", path_, stats_.requests,
             stats_.expired);
  if (malformedUnlogged_ > 0) {
    log_->warn("file timer: {} more malformed line(s) on {}", malformedUnlogged_, path_);
  }
  if (ignoredUnlogged_ > 0) {
    log_->warn("file timer: {} more request(s) from processes outside the job", ignoredUnlogged_);
  }
  malformedUnlogged_ = ignoredUnlogged_ = 0;
}

void FileTimerServer::startRead() {
  fifo_->async_read_some(
      boost::asio::buffer(buffer_),
      [this, alive = alive_](const boost::system::error_code& ec, std::size_t n) {
        if (*alive) onRead(ec, n);
      });
}

void FileTimerServer::onRead(const boost::system::error_code& ec, std::size_t n) {
  std::string_view data(buffer_.data(), n);
  while (!data.empty()) {
    auto nl = data.find('\n');
    std::string_view piece = data.substr(0, nl);
    if (!discarding_) {
      pending_.append(piece);
      if (pending_.size() > kMaxLine) {
        malformed(pending_, "longer than " + std::to_string(kMaxLine) + " bytes");
        pending_.clear();
        discarding_ = true;
      }
    }
    if (nl == std::string_view::npos) break;
    if (!discarding_) onLine(pending_);
    pending_.clear();
    discarding_ = false;
    data.remove_prefix(nl + 1);
  }
  if (!fifo_) return;  // an expiry handler stopped the server
  if (ec && ec != boost::asio::error::operation_aborted) {
    // Not expected on a FIFO this process holds open for writing too; retry rather than spin.
    log_->warn("file timer: reading {} failed: {}; retrying", path_, ec.message());
    retry_.expires_after(milliseconds(100));
    retry_.async_wait([this, alive = alive_](boost::system::error_code e) {
      if (!e && *alive && fifo_) startRead();
    });
    return;
  }
  if (ec) return;  // cancelled by stop()
  startRead();
}

void FileTimerServer::onLine(std::string_view raw) {
  std::string_view line = trim(raw);
  if (line.empty()) return;
  try {
    apply(parseFileTimerRequest(line));
    return;
  } catch (const ProtocolError& e) {
    malformed(line, e.what());
  }
  // A writer that left bytes without a '\n' glues them in front of the next client's request.
  // torch's clients start every request with {"version": take the last one and try again.
  auto at = line.rfind("{\"version\"");
  if (at == std::string_view::npos || at == 0) return;
  try {
    apply(parseFileTimerRequest(line.substr(at)));
  } catch (const ProtocolError&) {
  }
}

void FileTimerServer::apply(const FileTimerRequest& request) {
  const Key key{request.pid, request.scopeId};
  if (request.release()) {
    // A release only drops what is armed, and may come from a worker that exited right after
    // sending it: no ownership check.
    lastRequest_ = Clock::now();
    ++stats_.requests;
    if (timers_.erase(key)) rearm();
    return;
  }
  auto owner = lookup_(request.pid);
  if (!owner) {
    ignored(request.pid);
    return;
  }
  lastRequest_ = Clock::now();
  ++stats_.requests;
  const auto sysNow = std::chrono::system_clock::now();
  const double nowS = std::chrono::duration<double>(sysNow.time_since_epoch()).count();
  const double ahead = std::min(request.expirationTime - nowS, kMaxAheadSeconds);
  Timer t;
  t.request = request;
  t.owner = *owner;
  const auto aheadD =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(ahead));
  t.deadline = sysNow + aheadD;
  t.due = Clock::now() + aheadD;
  timers_[key] = std::move(t);
  rearm();
}

void FileTimerServer::rearm() {
  if (timers_.empty()) {
    if (armedFor_) deadline_.cancel();
    armedFor_.reset();
    return;
  }
  auto earliest =
      std::min_element(timers_.begin(), timers_.end(), [](const auto& a, const auto& b) {
        return a.second.due < b.second.due;
      })->second.due;
  if (armedFor_ == earliest) return;
  armedFor_ = earliest;
  deadline_.expires_at(earliest);
  deadline_.async_wait([this, alive = alive_](boost::system::error_code ec) {
    if (!ec && *alive) onDeadline();
  });
}

void FileTimerServer::onDeadline() {
  armedFor_.reset();
  const auto now = Clock::now();
  // pid -> its expired timers, as torch's get_expired_timers().
  std::map<int, std::vector<const Timer*>> expired;
  for (const auto& [key, t] : timers_) {
    if (t.due <= now) expired[key.first].push_back(&t);
  }
  std::vector<TimerExpiry> reports;
  for (auto& [pid, list] : expired) {
    std::stable_sort(list.begin(), list.end(), [](const Timer* a, const Timer* b) {
      return a->request.expirationTime < b->request.expirationTime;
    });
    auto chosen = std::find_if(list.begin(), list.end(),
                               [](const Timer* t) { return t->request.signal > 0; });
    const Timer& t = chosen != list.end() ? **chosen : *list.front();
    // The process may have exited (its worker is being restarted) and its pid may even belong
    // to someone else by now: only a process still of the same worker is reported.
    auto owner = lookup_(pid);
    if (!owner || *owner != t.owner) {
      log_->debug("file timer: pid {} ({}) expired after it left the job; dropped", pid,
                  t.request.scopeId);
      continue;
    }
    TimerExpiry e;
    e.pid = pid;
    e.owner = t.owner;
    e.scopeId = t.request.scopeId;
    e.deadline = t.deadline;
    e.overstay = std::chrono::duration_cast<milliseconds>(now - t.due);
    e.signal = t.request.signal > 0 ? t.request.signal : 0;
    reports.push_back(std::move(e));
  }
  // Every timer of an expired pid goes, reaped or not (torch's clear_timers).
  for (auto it = timers_.begin(); it != timers_.end();) {
    it = expired.count(it->first.first) ? timers_.erase(it) : std::next(it);
  }
  rearm();
  auto alive = alive_;
  for (const auto& e : reports) {
    ++stats_.expired;
    onExpired_(e);
    if (!*alive) return;  // the handler stopped the server
  }
}

void FileTimerServer::clear() {
  timers_.clear();
  rearm();
}

void FileTimerServer::clearOwner(int owner) {
  std::erase_if(timers_, [owner](const auto& kv) { return kv.second.owner == owner; });
  rearm();
}

void FileTimerServer::malformed(std::string_view line, const std::string& why) {
  ++stats_.malformed;
  const auto now = Clock::now();
  if (!malformedLogged_) {
    log_->warn("file timer: ignoring a malformed line on {} ({}): {}", path_, why, quote(line));
    malformedLogged_ = now;
    return;
  }
  ++malformedUnlogged_;
  if (now - *malformedLogged_ >= kLogEvery) {
    log_->warn("file timer: {} more malformed line(s) on {}; the last ({}): {}", malformedUnlogged_,
               path_, why, quote(line));
    malformedUnlogged_ = 0;
    malformedLogged_ = now;
  }
}

void FileTimerServer::ignored(int pid) {
  ++stats_.ignored;
  const auto now = Clock::now();
  if (!ignoredLogged_ || now - *ignoredLogged_ >= kLogEvery) {
    log_->warn(
        "file timer: ignoring a request from pid {}, which is not a process of this job's "
        "workers (or has exited){}",
        pid, ignoredUnlogged_ ? " (and " + std::to_string(ignoredUnlogged_) + " more since)" : "");
    ignoredUnlogged_ = 0;
    ignoredLogged_ = now;
    return;
  }
  ++ignoredUnlogged_;
}

}  // namespace dtrun::agent
