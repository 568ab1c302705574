#include "agent/event_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <utility>

#include "common/error.h"

namespace dtrun::agent {

std::string formatUtcIso8601Ms(std::chrono::system_clock::time_point when) {
  using namespace std::chrono;
  auto ms = duration_cast<milliseconds>(when.time_since_epoch()).count();
  // Floor division so times before 1970 still get a 0..999 millisecond part.
  std::int64_t secs = ms / 1000;
  std::int64_t frac = ms % 1000;
  if (frac < 0) {
    frac += 1000;
    secs -= 1;
  }
  std::time_t t = static_cast<std::time_t>(secs);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(frac));
  return buf;
}

EventLog::EventLog(const std::string& path, int consoleFd) : consoleFd_(consoleFd), path_(path) {
  if (path.empty()) return;
  // O_NOFOLLOW: a symlink planted at the path is refused, not followed (it could make dtrun
  // append to any file its user may write); the events are the user's alone (0600).
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0) {
    throw ConfigError("--event-log " + path + ": cannot open for appending: " +
                      (errno == ELOOP ? std::string("it is a symbolic link, which dtrun does not "
                                                    "follow")
                                      : std::string(std::strerror(errno))));
  }
}

EventLog::~EventLog() {
  if (fd_ >= 0) ::close(fd_);
}

EventLog::EventLog(EventLog&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      consoleFd_(std::exchange(other.consoleFd_, -1)),
      path_(std::move(other.path_)),
      observer_(std::move(other.observer_)),
      source_(std::move(other.source_)) {}

EventLog& EventLog::operator=(EventLog&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    consoleFd_ = std::exchange(other.consoleFd_, -1);
    path_ = std::move(other.path_);
    observer_ = std::move(other.observer_);
    source_ = std::move(other.source_);
  }
  return *this;
}

std::string EventLog::formatLine(std::string_view event, const nlohmann::json& fields,
                                 std::chrono::system_clock::time_point when,
                                 const nlohmann::json& source) {
  using namespace std::chrono;
  nlohmann::ordered_json line = nlohmann::ordered_json::object();
  line["event"] = std::string(event);
  line["time"] = formatUtcIso8601Ms(when);
  auto ms = duration_cast<milliseconds>(when.time_since_epoch()).count();
  line["ts"] = static_cast<double>(ms) / 1000.0;
  if (source.is_object()) {
    for (auto it = source.begin(); it != source.end(); ++it) {
      line[it.key()] = nlohmann::ordered_json(it.value());
    }
  }
  if (fields.is_object()) {
    for (auto it = fields.begin(); it != fields.end(); ++it) {
      if (it.key() == "event" || it.key() == "time" || it.key() == "ts") continue;
      line[it.key()] = nlohmann::ordered_json(it.value());
    }
  } else if (!fields.is_null()) {
    line["value"] = nlohmann::ordered_json(fields);
  }
  // Paths and messages come from workers and may hold invalid UTF-8: replace, never throw.
  return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

bool EventLog::record(std::string_view event, const nlohmann::json& fields) {
  if (!enabled() && !observer_) return false;
  return record(event, fields, std::chrono::system_clock::now());
}

bool EventLog::record(std::string_view event, const nlohmann::json& fields,
                      std::chrono::system_clock::time_point when) {
  if (observer_) {
    try {
      observer_(event, fields, when);
    } catch (const std::exception&) {
      // The observer only counts; a record it cannot read must not cost the line.
    }
  }
  if (!enabled()) return false;
  std::string line;
  try {
    line = formatLine(event, fields, when, source_);
  } catch (const std::exception&) {
    return false;  // e.g. a field that cannot be serialised: drop the event, keep the agent
  }
  line += '\n';
  // One write(2) per line: with O_APPEND the kernel places it atomically at the end of a local
  // file, so concurrent writers (other agents, a previous attempt) never split a line. A short
  // write only happens on a full disk; the rest is not retried, since a second write could land
  // after someone else's line.
  auto writeLine = [&](int fd) {
    for (;;) {
      ssize_t n = ::write(fd, line.data(), line.size());
      if (n < 0 && errno == EINTR) continue;
      return n == static_cast<ssize_t>(line.size());
    }
  };
  bool console = consoleFd_ >= 0 && writeLine(consoleFd_);
  return fd_ >= 0 ? writeLine(fd_) : console;
}

}  // namespace dtrun::agent
