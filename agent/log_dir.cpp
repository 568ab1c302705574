#include "agent/log_dir.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>

#include "common/error.h"

namespace dtrun::agent {

namespace fs = std::filesystem;

namespace {

constexpr const char* kDevNull = "/dev/null";

}  // namespace

bool LogDir::removeIfEmpty() const {
  if (!ownsBase_ || baseDir_.empty()) return false;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(baseDir_, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_directory(ec)) return false;  // a log or an error file: keep everything
  }
  if (ec) return false;
  fs::remove_all(baseDir_, ec);
  return !ec;
}

std::string makeTempDir(const std::string& dir, const std::string& prefix) {
  // Python's _RandomNameSequence alphabet and length, so names look like torchrun's
  // ("none_pg2onyju"). glibc's mkdtemp only does six X's from a different alphabet.
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789_";
  std::random_device seed;
  std::mt19937_64 rng(seed());
  std::uniform_int_distribution<std::size_t> pick(0, sizeof(kAlphabet) - 2);
  constexpr int kAttempts = 10000;  // Python's TMP_MAX
  for (int i = 0; i < kAttempts; ++i) {
    std::string name = prefix;
    for (int k = 0; k < 8; ++k) name += kAlphabet[pick(rng)];
    std::string path = (fs::path(dir) / name).string();
    if (::mkdir(path.c_str(), 0700) == 0) return path;
    if (errno != EEXIST) {
      throw Error("cannot create directory " + path + ": " + std::strerror(errno));
    }
  }
  throw Error("cannot create a unique directory " + prefix + "XXXXXXXX in " + dir);
}

LogDir::LogDir(const std::optional<std::string>& base, const std::string& runId) {
  if (base && *base == kDevNull) {
    baseDir_ = kDevNull;
    return;
  }
  if (base && !base->empty()) {
    std::error_code ec;
    fs::path p = fs::absolute(*base, ec);
    if (ec) throw ConfigError("--log-dir " + *base + ": " + ec.message());
    // os.makedirs(base, exist_ok=True): a regular file (or anything but a directory) there is an
    // error; a missing chain of parents is not.
    fs::create_directories(p, ec);
    if (ec || !fs::is_directory(p)) {
      throw ConfigError("--log-dir " + *base + " is not a directory" +
                        (ec ? " (" + ec.message() + ")" : std::string()));
    }
    p = p.lexically_normal();
    if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();  // "logs/" -> "logs"
    baseDir_ = p.string();
  } else {
    std::error_code ec;
    fs::path tmp = fs::temp_directory_path(ec);
    if (ec) throw ConfigError("no usable temporary directory for logs: " + ec.message());
    baseDir_ = makeTempDir(fs::absolute(tmp).string(), "torchelastic_");
    ownsBase_ = true;
  }
  try {
    runDir_ = makeTempDir(baseDir_, runId + "_");
  } catch (const Error& e) {
    throw ConfigError(std::string("--log-dir: ") + e.what());
  }
}

void LogDir::prepareAttempt(int attempt, int nproc) const {
  if (disabled()) return;
  fs::path dir = attemptDir(attempt);
  std::error_code ec;
  // shutil.rmtree(ignore_errors=True), then makedirs: a restart (or a scaling event that reuses
  // the attempt number) starts from empty per-rank directories.
  fs::remove_all(dir, ec);
  for (int lr = 0; lr < nproc; ++lr) {
    fs::path rank = dir / std::to_string(lr);
    fs::create_directories(rank, ec);
    if (ec) throw Error("cannot create log directory " + rank.string() + ": " + ec.message());
  }
  if (nproc <= 0) {
    fs::create_directories(dir, ec);
    if (ec) throw Error("cannot create log directory " + dir.string() + ": " + ec.message());
  }
}

std::string LogDir::attemptDir(int attempt) const {
  if (disabled()) return {};
  return (fs::path(runDir_) / ("attempt_" + std::to_string(attempt))).string();
}

std::string LogDir::rankDir(int attempt, int localRank) const {
  if (disabled()) return {};
  return (fs::path(attemptDir(attempt)) / std::to_string(localRank)).string();
}

std::string LogDir::rankFile(int attempt, int localRank, const char* name) const {
  if (disabled()) return {};
  return (fs::path(rankDir(attempt, localRank)) / name).string();
}

std::string LogDir::stdoutPath(int attempt, int localRank) const {
  return rankFile(attempt, localRank, "stdout.log");
}

std::string LogDir::stderrPath(int attempt, int localRank) const {
  return rankFile(attempt, localRank, "stderr.log");
}

std::string LogDir::errorFilePath(int attempt, int localRank) const {
  return rankFile(attempt, localRank, "error.json");
}

std::string LogDir::filteredStdoutPath(int attempt) const {
  if (disabled()) return {};
  return (fs::path(attemptDir(attempt)) / "filtered_stdout.log").string();
}

std::string LogDir::filteredStderrPath(int attempt) const {
  if (disabled()) return {};
  return (fs::path(attemptDir(attempt)) / "filtered_stderr.log").string();
}

}  // namespace dtrun::agent
