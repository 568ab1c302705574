// The last lines of a worker's stream, as the failure report shows them: segments end in '\n' or
// '\r' (tqdm-style "\r" progress updates overwrite each other, as on a terminal), lines are cut
// for people, and the tail of a log file is read the same way. LogForwarder keeps one LineTail per
// stream; the report reads redirected stderr.log files with tailFile().
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtrun::agent {

/// Lines kept per stream for the failure report.
inline constexpr std::size_t kDefaultTailLines = 20;
/// A tail line longer than this is cut (the report is for people).
inline constexpr std::size_t kMaxTailLineBytes = 4096;

/// Calls fn(segment, term) for each complete segment of `buf` (ending in '\n' or '\r', the
/// terminator not included) and returns where the unterminated rest begins. Pure.
template <typename Fn>
inline std::size_t forEachSegment(std::string_view buf, Fn&& fn) {
  std::size_t start = 0;
  for (;;) {
    std::size_t pos = buf.find_first_of("\r\n", start);
    if (pos == std::string_view::npos) return start;
    fn(buf.substr(start, pos - start), buf[pos]);
    start = pos + 1;
  }
}

/// The last lines of one stream, as a terminal would leave them: a "\r" segment is a progress
/// update that the next one overwrites, so only the latest is kept until a '\n' ends the line.
/// Lines are cut at kMaxTailLineBytes. Plain data; one thread.
class LineTail {
 public:
  /// Keeps at most `max` lines.
  explicit LineTail(std::size_t max) : max_(max) {}

  /// One segment; `term` is '\n', '\r', or 0 for a segment cut without a terminator (cap or
  /// EOF).
  void add(std::string_view content, char term) {
    if (term == '\r') {
      if (!content.empty()) progress_.assign(content.substr(0, kMaxTailLineBytes));
      return;
    }
    if (term == '\n' && content.empty() && !progress_.empty()) {
      push(progress_);  // "...\r\n": the progress line was the line
    } else {
      push(std::string(content.substr(0, kMaxTailLineBytes)));
    }
    progress_.clear();
  }

  /// End of stream: a last progress update counts as a line.
  void finish() {
    if (!progress_.empty()) push(std::exchange(progress_, std::string()));
  }

  /// The lines kept, oldest first, a pending progress line last.
  std::vector<std::string> lines() const {
    std::vector<std::string> out(lines_.begin(), lines_.end());
    if (!progress_.empty() && max_ > 0) {
      out.push_back(progress_);
      if (out.size() > max_) out.erase(out.begin());
    }
    return out;
  }

 private:
  void push(std::string line) {
    if (max_ == 0) return;
    lines_.push_back(std::move(line));
    if (lines_.size() > max_) lines_.pop_front();
  }

  std::size_t max_;
  std::deque<std::string> lines_;
  std::string progress_;
};

/// The last `n` lines of `text`, as a LineTail keeps them ("\r" progress updates collapsed to
/// the last one, "\r\n" as one terminator, lines cut at kMaxTailLineBytes). Pure.
std::vector<std::string> lastLines(std::string_view text, std::size_t n);

/// The last `n` lines of the file at `path` (reads at most its last 256 KiB); empty when it
/// cannot be read. For a redirected stderr.log, which the worker writes without the agent.
/// Blocking (local file); any thread.
std::vector<std::string> tailFile(const std::string& path, std::size_t n = kDefaultTailLines);

}  // namespace dtrun::agent
