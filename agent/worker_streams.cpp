#include "agent/worker_streams.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "agent/line_prefix.h"
#include "agent/line_tail.h"
#include "agent/worker_env.h"
#include "common/error.h"

namespace dtrun::agent {

WorkerStreams::WorkerStreams(boost::asio::io_context& io, const LaunchConfig& config,
                             const LogDir& logDir, std::string hostname)
    : config_(config), logDir_(logDir), hostname_(std::move(hostname)), forwarder_(io) {}

void WorkerStreams::reset(int nproc) {
  out_.assign(static_cast<std::size_t>(nproc), std::nullopt);
  err_.assign(static_cast<std::size_t>(nproc), std::nullopt);
}

void WorkerStreams::route(const rendezvous::RoundInfo& round, int lr, SpawnSpec& spawn,
                          std::vector<UniqueFd>& childEnds) {
  const int attempt = static_cast<int>(round.round);
  const int tee = static_cast<int>(config_.tee.forRank(lr));
  const bool onConsole = !config_.localRanksFilter || config_.localRanksFilter->count(lr) != 0;
  const LinePrefixVars vars = linePrefixVars(config_, round, lr, hostname_);
  for (int bit : {static_cast<int>(Std::kOut), static_cast<int>(Std::kErr)}) {
    const bool isOut = bit == static_cast<int>(Std::kOut);
    const std::string file =
        isOut ? logDir_.stdoutPath(attempt, lr) : logDir_.stderrPath(attempt, lr);
    int& childFd = isOut ? spawn.stdoutFd : spawn.stderrFd;
    auto& streamId = (isOut ? out_ : err_).at(static_cast<std::size_t>(lr));
    if (streamToFileOnly(config_, lr, static_cast<Std>(bit))) {
      if (file.empty()) {
        childFd = -1;  // --log-dir /dev/null: nowhere to redirect to; keep the console
      } else {
        UniqueFd fd(
            ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
        if (!fd) throw Error("cannot open " + file + ": " + std::strerror(errno));
        childFd = fd.get();
        childEnds.push_back(std::move(fd));
        continue;
      }
    }
    StreamOptions o;
    o.consoleFd = onConsole ? (isOut ? 1 : 2) : -1;
    if ((tee & bit) || !config_.logLinePrefixTemplate.empty()) {
      o.prefix = makeLinePrefix(config_.logLinePrefixTemplate, vars);
    }
    if (tee & bit) o.teeFile = file;
    o.filters = isOut ? config_.duplicateStdoutFilters : config_.duplicateStderrFilters;
    if (!o.filters.empty()) {
      o.filterFile =
          isOut ? logDir_.filteredStdoutPath(attempt) : logDir_.filteredStderrPath(attempt);
    }
    o.tailLines = isOut ? 0 : kDefaultTailLines;
    auto opened = forwarder_.open(std::move(o));
    streamId = opened.id;
    childFd = opened.writeEnd.get();
    childEnds.push_back(std::move(opened.writeEnd));
  }
}

void WorkerStreams::closeOut(int lr) {
  if (auto id = std::exchange(out_.at(static_cast<std::size_t>(lr)), std::nullopt)) {
    forwarder_.drainAndClose(*id, [](std::vector<std::string>) {});
  }
}

void WorkerStreams::closeErr(int lr) {
  if (auto id = std::exchange(err_.at(static_cast<std::size_t>(lr)), std::nullopt)) {
    forwarder_.drainAndClose(*id, [](std::vector<std::string>) {});
  }
}

void WorkerStreams::takeErr(const rendezvous::RoundInfo& round, int lr,
                            LogForwarder::DrainHandler done) {
  if (auto id = std::exchange(err_.at(static_cast<std::size_t>(lr)), std::nullopt)) {
    forwarder_.drainAndClose(*id, std::move(done));
  } else {
    done(tailFile(logDir_.stderrPath(static_cast<int>(round.round), lr)));
  }
}

std::optional<std::chrono::steady_clock::time_point> WorkerStreams::lastFileWrite(
    const rendezvous::RoundInfo& round) const {
  using Steady = std::chrono::steady_clock;
  const auto now = Steady::now();
  const auto sysNow = std::chrono::system_clock::now();
  const int attempt = static_cast<int>(round.round);
  std::optional<Steady::time_point> last;
  for (int lr = 0; lr < config_.nprocPerNode; ++lr) {
    for (const auto& path : {logDir_.stdoutPath(attempt, lr), logDir_.stderrPath(attempt, lr)}) {
      struct stat st {};
      if (path.empty() || ::stat(path.c_str(), &st) != 0) continue;
      const auto mtime = std::chrono::system_clock::time_point(
          std::chrono::duration_cast<std::chrono::system_clock::duration>(
              std::chrono::seconds(st.st_mtim.tv_sec) +
              std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
      const auto t = now - std::chrono::duration_cast<Steady::duration>(sysNow - mtime);
      if (!last || t > *last) last = t;
    }
  }
  return last;
}

}  // namespace dtrun::agent
