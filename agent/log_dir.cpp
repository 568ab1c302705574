#include "agent/log_dir.h"

#include <sys/stat.h>
#include <unistd.h>

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

bool LogDir::removeIfEmpty() {
  if (!created()) return false;
  // rmdir refuses a directory that holds anything, so a log or an error file keeps its chain.
  bool empty = true;
  for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
    if (::rmdir(it->c_str()) != 0 && errno != ENOENT) empty = false;
  }
  made_.clear();
  if (!empty || !ownsBase_) return false;
  if (::rmdir(runDir_.c_str()) != 0 && errno != ENOENT) return false;
  return ::rmdir(baseDir_.c_str()) == 0 || errno == ENOENT;
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

LogDir::LogDir(const std::optional<std::string>& base, const std::string& runId) : runId_(runId) {
  if (base && *base == kDevNull) {
    baseDir_ = kDevNull;
    disabled_ = true;
    return;
  }
  std::error_code ec;
  if (base && !base->empty()) {
    fs::path p = fs::absolute(*base, ec);
    if (ec) throw ConfigError("--log-dir " + *base + ": " + ec.message());
    // os.makedirs(base, exist_ok=True): a regular file (or anything but a directory) there is an
    // error; a missing chain of parents is not. Checked before the rendezvous: a bad --log-dir
    // is this node's set-up error.
    fs::create_directories(p, ec);
    if (ec || !fs::is_directory(p)) {
      throw ConfigError("--log-dir " + *base + " is not a directory" +
                        (ec ? " (" + ec.message() + ")" : std::string()));
    }
    p = p.lexically_normal();
    if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();  // "logs/" -> "logs"
    baseDir_ = p.string();
    return;
  }
  fs::path tmp = fs::temp_directory_path(ec);
  if (ec) throw ConfigError("no usable temporary directory for logs: " + ec.message());
  tmpRoot_ = fs::absolute(tmp).string();
  ownsBase_ = true;
}

void LogDir::makeRunDir() {
  try {
    if (ownsBase_ && baseDir_.empty()) baseDir_ = makeTempDir(tmpRoot_, "torchelastic_");
    runDir_ = makeTempDir(baseDir_, runId_ + "_");
  } catch (const Error& e) {
    throw ConfigError(std::string("--log-dir: ") + e.what());
  }
}

void LogDir::prepareAttempt(int attempt, int nproc) {
  if (disabled()) return;
  if (!created()) makeRunDir();
  const std::string dir = attemptDir(attempt);
  // shutil.rmtree(ignore_errors=True), then makedirs: a restart (or a scaling event that reuses
  // the attempt number) starts from empty per-rank directories. The run dir is this agent's own
  // (0700), so nobody else can have planted anything in it.
  auto mkdirOrThrow = [this](const std::string& path) {
    if (::mkdir(path.c_str(), 0777) != 0) {
      throw Error("cannot create log directory " + path + ": " + std::strerror(errno));
    }
    made_.push_back(path);
  };
  if (::mkdir(dir.c_str(), 0777) == 0) {
    made_.push_back(dir);
  } else if (errno == EEXIST) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    mkdirOrThrow(dir);
  } else {
    throw Error("cannot create log directory " + dir + ": " + std::strerror(errno));
  }
  for (int lr = 0; lr < nproc; ++lr) mkdirOrThrow(rankDir(attempt, lr));
}

std::string LogDir::attemptDir(int attempt) const {
  if (!created()) return {};
  return (fs::path(runDir_) / ("attempt_" + std::to_string(attempt))).string();
}

std::string LogDir::rankDir(int attempt, int localRank) const {
  if (!created()) return {};
  return (fs::path(attemptDir(attempt)) / std::to_string(localRank)).string();
}

std::string LogDir::rankFile(int attempt, int localRank, const char* name) const {
  if (!created()) return {};
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
  if (!created()) return {};
  return (fs::path(attemptDir(attempt)) / "filtered_stdout.log").string();
}

std::string LogDir::filteredStderrPath(int attempt) const {
  if (!created()) return {};
  return (fs::path(attemptDir(attempt)) / "filtered_stderr.log").string();
}

}  // namespace dtrun::agent
