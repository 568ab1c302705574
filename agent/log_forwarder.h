// LogForwarder: worker stdout/stderr through the agent, on the agent's io_context (one thread).
//
// For each forwarded stream the agent asks for a pipe; the worker gets the write end as fd 1 or
// 2 and the forwarder reads the other end asynchronously. The bytes are cut into segments that
// end in '\n' or '\r' (so tqdm-style "\r" progress lines pass through); a segment's pieces are
// held until its terminator arrives, EOF, or 64 KiB have piled up. Each read's complete segments
// then go, prefixed, to the console in ONE write(2): all streams are written by the one io
// thread, so lines of different workers never interleave mid-line (torchrun's tee threads
// write line pieces from many threads). The raw bytes are appended to the tee file as they
// arrive; prefixed segments that contain a filter string go to the filter file; the last lines
// stay in a ring for the failure report.
//
//   open() --> reading --(EOF)--> eof ---------------------+
//                 |                                        v
//                 +--drainAndClose(): read to EAGAIN --> closed, done(tail) posted
//
// A worker's grandchild may keep the write end open after the worker died, so nothing waits
// for EOF: drainAndClose() reads what is already in the pipe and closes.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/line_tail.h"
#include "common/fd.h"

namespace dtrun::agent {

/// Where one worker stream goes.
struct StreamOptions {
  int consoleFd = -1;   ///< not owned: the agent's 1 or 2, or -1 for no console output
  std::string prefix;   ///< put before every segment on the console and in the filter file
  std::string teeFile;  ///< raw bytes appended here as read ("" = none); created if missing
  std::vector<std::string> filters;  ///< a segment containing any of these is also copied...
  std::string filterFile;            ///< ...here, prefixed ("" = none)
  std::size_t tailLines = kDefaultTailLines;  ///< lines kept for tail()
};

class LogForwarder {
 public:
  using StreamId = std::uint64_t;
  /// Receives a stream's last lines, oldest first, without terminators.
  using DrainHandler = std::function<void(std::vector<std::string> tail)>;

  /// A new pipe: the worker's end and the id to ask about it.
  struct Opened {
    StreamId id = 0;
    /// Give it to the child as fd 1 or 2 (dup2 clears its O_CLOEXEC), then close it in the
    /// agent right after spawning, or the forwarder never sees EOF.
    UniqueFd writeEnd;
  };

  /// `io` must be run by one thread; every method below is for that thread only.
  explicit LogForwarder(boost::asio::io_context& io);
  /// closeAll().
  ~LogForwarder();
  LogForwarder(const LogForwarder&) = delete;
  LogForwarder& operator=(const LogForwarder&) = delete;

  /// Makes a pipe (both ends O_CLOEXEC) and starts reading it. Opens the tee and filter files
  /// (blocking, local). Throws dtrun::Error naming the file or syscall.
  Opened open(StreamOptions options);
  /// The stream's last lines so far, including a pending "\r" progress line; empty for an
  /// unknown or already drained id. Does not block.
  std::vector<std::string> tail(StreamId id) const;
  /// For a worker that exited: reads what is already in the pipe (never waits for EOF, so a
  /// grandchild holding the write end cannot stall it), flushes a partial last line, closes,
  /// and posts `done(tail)` on the io thread. The id is forgotten at once. An unknown id gets
  /// done({}). `done` must not throw.
  void drainAndClose(StreamId id, DrainHandler done);
  /// Shutdown: drains every open stream without waiting, flushes and closes it. No callbacks.
  void closeAll();
  /// Streams opened and not yet drained or closed.
  std::size_t openStreams() const { return streams_.size(); }

  /// When bytes last arrived on any stream this forwarder ever read (nullopt: none yet). For
  /// stall detection: a worker group that prints nothing for long may be hung. Does not block.
  std::optional<std::chrono::steady_clock::time_point> lastOutput() const { return *lastAny_; }
  /// The same for one open stream (nullopt: nothing yet, or an unknown or drained id).
  std::optional<std::chrono::steady_clock::time_point> lastOutput(StreamId id) const;

 private:
  struct Stream;
  using Activity = std::optional<std::chrono::steady_clock::time_point>;
  boost::asio::io_context& io_;
  // Shared with the streams, whose reads may complete after drainAndClose() forgot them.
  std::shared_ptr<Activity> lastAny_ = std::make_shared<Activity>();
  std::map<StreamId, std::shared_ptr<Stream>> streams_;
  StreamId nextId_ = 1;
};

}  // namespace dtrun::agent
