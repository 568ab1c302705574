#include "agent/line_tail.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/fd.h"

namespace dtrun::agent {
namespace {

constexpr std::size_t kMaxTailFileBytes = 256 * 1024;

}  // namespace

std::vector<std::string> lastLines(std::string_view text, std::size_t n) {
  LineTail tail(n);
  std::size_t rest =
      forEachSegment(text, [&](std::string_view content, char term) { tail.add(content, term); });
  if (rest < text.size()) tail.add(text.substr(rest), 0);
  tail.finish();
  return tail.lines();
}

std::vector<std::string> tailFile(const std::string& path, std::size_t n) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  UniqueFd guard(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return {};
  off_t size = st.st_size;
  off_t offset = size > static_cast<off_t>(kMaxTailFileBytes)
                     ? size - static_cast<off_t>(kMaxTailFileBytes)
                     : 0;
  std::string data(static_cast<std::size_t>(size - offset), '\0');
  std::size_t got = 0;
  while (got < data.size()) {
    ssize_t r = ::pread(fd, data.data() + got, data.size() - got, offset + static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  data.resize(got);
  std::string_view view(data);
  if (offset > 0) {
    // Started mid-file: the first line is a fragment.
    std::size_t nl = view.find('\n');
    view = nl == std::string_view::npos ? std::string_view() : view.substr(nl + 1);
  }
  return lastLines(view, n);
}

}  // namespace dtrun::agent
