#include "tests/support/test_support.h"

#include <signal.h>
#include <stdlib.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace dtrun::test {

bool pollUntil(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (cond()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

TempDir::TempDir() {
  auto base = std::filesystem::temp_directory_path() / "dtrun-test-XXXXXX";
  std::string tmpl = base.string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string readFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void writeFile(const std::filesystem::path& p, const std::string& contents) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << contents;
}

bool processAlive(int pid) {
  if (::kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  return line[close + 2] != 'Z';
}

std::vector<std::string> envEntries(
    std::map<std::string, std::string> vars,
    const std::map<std::string, std::optional<std::string>>& overlay) {
  for (const auto& [k, v] : overlay) {
    if (v) {
      vars[k] = *v;
    } else {
      vars.erase(k);
    }
  }
  std::vector<std::string> entries;
  for (const auto& [k, v] : vars) entries.push_back(k + "=" + v);
  return entries;
}

Watchdog::Watchdog(std::chrono::milliseconds timeout, std::string what)
    : thread_([this, timeout, what = std::move(what)] {
        std::unique_lock lock(mutex_);
        if (disarmed_.wait_for(lock, timeout, [this] { return done_; })) return;
        std::fprintf(stderr, "FAILED: %s did not finish within %lld ms (test watchdog)\n",
                     what.c_str(), static_cast<long long>(timeout.count()));
        std::fflush(stderr);
        std::_Exit(1);
      }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
  }
  disarmed_.notify_all();
  thread_.join();
}

}  // namespace dtrun::test
