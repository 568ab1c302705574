#include "agent/log_forwarder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <deque>
#include <utility>

#include "common/error.h"

namespace dtrun::agent {

namespace {

constexpr std::size_t kReadChunk = 64 * 1024;
// A segment without a terminator is forwarded once this much has piled up (binary output, a
// progress bar that never ends its line): bounded memory, and the console still moves.
constexpr std::size_t kMaxPartialBytes = 64 * 1024;
// drainAndClose() reads at most this much: a grandchild that keeps writing must not pin the
// io thread.
constexpr std::size_t kMaxDrainBytes = 4 * 1024 * 1024;

UniqueFd openAppend(const std::string& path, const char* what) {
  // Never through a symlink planted where a log file belongs; job output is readable by the
  // user alone (docs/store.md, "Descriptors and exposure").
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    throw Error(std::string("cannot open ") + what + " " + path + ": " + std::strerror(errno));
  }
  return UniqueFd(fd);
}

}  // namespace

// One pipe and everything its bytes feed. Owned by the forwarder's map while open; the pending
// read's handler holds another reference, so a Stream outlives both drainAndClose() (which
// forgets the id at once) and the forwarder itself. Touched only on the io thread.
struct LogForwarder::Stream : std::enable_shared_from_this<LogForwarder::Stream> {
  Stream(boost::asio::io_context& io, int readFd, StreamOptions o,
         std::shared_ptr<std::optional<std::chrono::steady_clock::time_point>> any)
      : pipe(io, readFd), options(std::move(o)), tail(options.tailLines), lastAny(std::move(any)) {}

  void sawBytes() {
    lastRead = std::chrono::steady_clock::now();
    *lastAny = lastRead;
  }

  void startRead() {
    reading = true;
    pipe.async_read_some(boost::asio::buffer(buffer),
                         [self = shared_from_this()](const boost::system::error_code& ec,
                                                     std::size_t n) { self->onRead(ec, n); });
  }

  void onRead(const boost::system::error_code& ec, std::size_t n) {
    reading = false;
    if (closed) return;  // closeAll() got here first
    if (n > 0) {
      sawBytes();
      consume(std::string_view(buffer.data(), n), false);
    }
    // operation_aborted: drainAndClose() cancelled the read, finish below. Any other error (EOF,
    // EIO) ends the stream like EOF.
    if (ec == boost::asio::error::operation_aborted && !draining) return;
    if (ec && ec != boost::asio::error::operation_aborted) atEof();
    if (draining) {
      finish();
    } else if (!eof) {
      startRead();
    }
  }

  void atEof() {
    eof = true;
    consume({}, true);
    boost::system::error_code ignored;
    pipe.close(ignored);
  }

  // Reads whatever the pipe holds right now (the read end is O_NONBLOCK), up to a cap.
  void drainNow() {
    std::size_t total = 0;
    while (!eof && total < kMaxDrainBytes) {
      ssize_t n = ::read(pipe.native_handle(), buffer.data(), buffer.size());
      if (n > 0) {
        sawBytes();
        total += static_cast<std::size_t>(n);
        consume(std::string_view(buffer.data(), static_cast<std::size_t>(n)), false);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        break;  // EAGAIN: empty for now (a grandchild may still hold the write end); or EOF
      }
    }
    if (!eof) {
      consume({}, true);  // a partial last line is flushed, not lost
      eof = true;
    }
  }

  // Drains, closes and reports the tail. Runs from the read handler or a posted call.
  void finish() {
    drainNow();
    close();
    if (auto done = std::move(onDrained)) done(tail.lines());
  }

  void close() {
    closed = true;
    boost::system::error_code ignored;
    pipe.close(ignored);  // cancels a pending read: its handler sees `closed` and returns
    tee.reset();
    filterOut.reset();
  }

  bool matchesFilter(std::string_view content) const {
    return std::any_of(options.filters.begin(), options.filters.end(),
                       [&](const std::string& f) { return content.find(f) != std::string::npos; });
  }

  // Appends `data` to the partial segment, then forwards every complete segment: one write per
  // destination for the whole batch. `final` also forwards an unterminated rest (EOF).
  void consume(std::string_view data, bool final) {
    // The tee file is the worker's own bytes: appended as they arrive, not held back for
    // segmenting, so `tail -f stdout.log` and a killed agent both see everything read so far.
    if (tee && !data.empty() && !writeAll(tee.get(), data)) tee.reset();
    pending.append(data);
    std::string console;
    std::string filtered;
    const bool filtering = filterOut && !options.filters.empty();
    auto emit = [&](std::string_view content, char term) {
      bool crlf = term == '\n' && content.empty() && lastWasCr;
      if (options.consoleFd >= 0) {
        if (crlf) {
          console += '\n';  // the '\n' of "\r\n": no second prefix
        } else {
          console += options.prefix;
          console += content;
          console += term ? term : '\n';  // a cut segment still ends its console line
        }
      }
      if (filtering && !crlf && matchesFilter(content)) {
        filtered += options.prefix;
        filtered += content;
        filtered += '\n';  // the filter file is for grep: every segment a line
      }
      tail.add(content, term);
      lastWasCr = term == '\r';
    };
    std::size_t rest = forEachSegment(pending, emit);
    if (rest < pending.size() && (final || pending.size() - rest >= kMaxPartialBytes)) {
      emit(std::string_view(pending).substr(rest), 0);
      rest = pending.size();
    }
    pending.erase(0, rest);
    if (final) {
      tail.finish();
      // A stream that ends on a "\r" progress update leaves the console cursor at column 0,
      // where the next worker's line would overwrite it: end the line.
      if (lastWasCr && options.consoleFd >= 0) console += '\n';
      lastWasCr = false;
    }

    // A destination that fails for good (closed console pipe, full disk) is dropped for this
    // stream; the others keep going.
    if (!console.empty() && !writeAll(options.consoleFd, console)) options.consoleFd = -1;
    if (!filtered.empty() && !writeAll(filterOut.get(), filtered)) filterOut.reset();
  }

  boost::asio::posix::stream_descriptor pipe;
  StreamOptions options;
  UniqueFd tee;
  UniqueFd filterOut;
  std::vector<char> buffer = std::vector<char>(kReadChunk);
  std::string pending;  // the current segment's bytes so far
  LineTail tail;
  std::shared_ptr<std::optional<std::chrono::steady_clock::time_point>> lastAny;
  std::optional<std::chrono::steady_clock::time_point> lastRead;
  DrainHandler onDrained;
  bool lastWasCr = false;
  bool reading = false;   // an async read is outstanding
  bool eof = false;       // the write end is gone (or the stream was drained)
  bool draining = false;  // drainAndClose() was called
  bool closed = false;
};

LogForwarder::LogForwarder(boost::asio::io_context& io) : io_(io) {}

LogForwarder::~LogForwarder() { closeAll(); }

LogForwarder::Opened LogForwarder::open(StreamOptions options) {
  UniqueFd tee;
  UniqueFd filterOut;
  if (!options.teeFile.empty()) tee = openAppend(options.teeFile, "tee file");
  if (!options.filterFile.empty() && !options.filters.empty()) {
    filterOut = openAppend(options.filterFile, "filter file");
  }
  // Both ends close-on-exec: the write end must reach only its own worker (through dup2 onto
  // fd 1/2), never a sibling spawned meanwhile, or EOF would wait for that sibling too.
  Pipe pipe = makePipe("cannot forward a worker's output");
  // Non-blocking read end: drainAndClose() reads until EAGAIN instead of waiting for EOF.
  const int flags = ::fcntl(pipe.read.get(), F_GETFL);
  if (flags < 0 || ::fcntl(pipe.read.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    throw Error(std::string("cannot forward a worker's output: fcntl: ") + std::strerror(errno));
  }

  auto stream = std::make_shared<Stream>(io_, pipe.read.release(), std::move(options), lastAny_);
  stream->tee = std::move(tee);
  stream->filterOut = std::move(filterOut);
  StreamId id = nextId_++;
  streams_.emplace(id, stream);
  stream->startRead();
  return Opened{id, std::move(pipe.write)};
}

std::vector<std::string> LogForwarder::tail(StreamId id) const {
  auto it = streams_.find(id);
  if (it == streams_.end()) return {};
  return it->second->tail.lines();
}

std::optional<std::chrono::steady_clock::time_point> LogForwarder::lastOutput(StreamId id) const {
  auto it = streams_.find(id);
  if (it == streams_.end()) return std::nullopt;
  return it->second->lastRead;
}

void LogForwarder::drainAndClose(StreamId id, DrainHandler done) {
  auto it = streams_.find(id);
  if (it == streams_.end()) {
    boost::asio::post(io_, [done = std::move(done)] {
      if (done) done({});
    });
    return;
  }
  std::shared_ptr<Stream> stream = std::move(it->second);
  streams_.erase(it);
  stream->draining = true;
  stream->onDrained = std::move(done);
  if (stream->reading) {
    // The pending read may already hold bytes older than anything still in the pipe; cancelling
    // lets its handler consume them first and then finish(), which keeps the order.
    boost::system::error_code ignored;
    stream->pipe.cancel(ignored);
  } else {
    boost::asio::post(io_, [stream] { stream->finish(); });
  }
}

void LogForwarder::closeAll() {
  for (auto& [id, stream] : streams_) {
    if (!stream->closed) {
      stream->drainNow();
      stream->close();
    }
  }
  streams_.clear();
}

}  // namespace dtrun::agent
