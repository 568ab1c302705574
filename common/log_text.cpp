#include "common/log_text.h"

#include <algorithm>
#include <ctime>

namespace dtrun {

std::string wallClockText(std::chrono::steady_clock::time_point t) {
  using std::chrono::steady_clock;
  using std::chrono::system_clock;
  const auto left = std::chrono::duration_cast<std::chrono::seconds>(t - steady_clock::now());
  const std::time_t when = system_clock::to_time_t(
      system_clock::now() +
      std::chrono::duration_cast<system_clock::duration>(t - steady_clock::now()));
  std::tm tm{};
  ::localtime_r(&when, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return std::string(buf) + " (in " + std::to_string(std::max<long long>(0, left.count())) + " s)";
}

std::string escapeForLog(std::string_view bytes, std::size_t maxBytes) {
  static const char* kHex = "0123456789abcdef";
  std::string out = "\"";
  const std::size_t shown = bytes.size() < maxBytes ? bytes.size() : maxBytes;
  for (std::size_t i = 0; i < shown; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c >= 0x20 && c < 0x7f) {
          out += static_cast<char>(c);
        } else {
          out += "\\x";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        }
    }
  }
  out += '"';
  if (shown < bytes.size()) out += "... (" + std::to_string(bytes.size()) + " bytes)";
  return out;
}

namespace {
std::string summaryLine(const std::string& kind, std::uint64_t suppressed,
                        std::chrono::steady_clock::duration span) {
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(span).count();
  return kind + ": ... " + std::to_string(suppressed) + " more in the last " +
         std::to_string(secs < 1 ? 1 : secs) + " s";
}
}  // namespace

bool WarningLimiter::allow(const std::string& kind, Clock::time_point now, std::string* summary) {
  auto [it, fresh] = kinds_.try_emplace(kind);
  Kind& k = it->second;
  if (fresh) k.windowStart = now;
  if (now - k.windowStart >= window_) {
    if (k.suppressed > 0 && summary)
      *summary = summaryLine(kind, k.suppressed, now - k.windowStart);
    k = Kind{now, 0, 0};
  }
  if (k.lines < burst_) {
    ++k.lines;
    return true;
  }
  ++k.suppressed;
  return false;
}

std::vector<std::string> WarningLimiter::flush(Clock::time_point now) {
  std::vector<std::string> out;
  for (auto it = kinds_.begin(); it != kinds_.end();) {
    Kind& k = it->second;
    if (now - k.windowStart < window_) {
      ++it;
      continue;
    }
    if (k.suppressed > 0) out.push_back(summaryLine(it->first, k.suppressed, now - k.windowStart));
    it = kinds_.erase(it);  // a kind seen again starts a fresh window
  }
  return out;
}

std::optional<WarningLimiter::Clock::time_point> WarningLimiter::nextFlush() const {
  std::optional<Clock::time_point> next;
  for (const auto& [name, k] : kinds_) {
    if (k.suppressed == 0) continue;
    auto at = k.windowStart + window_;
    if (!next || at < *next) next = at;
  }
  return next;
}

}  // namespace dtrun
