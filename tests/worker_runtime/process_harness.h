// Real child processes for the worker_runtime tests: workers spawned with a hand-made
// environment (exactly the variables given, nothing inherited) and a real `dtrun store`.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtrun::test {

/// A child with stdout and stderr on one pipe. The destructor SIGKILLs it if it still runs.
class Child {
 public:
  /// posix_spawn(argv) with exactly `env` ("NAME=value" entries); throws std::runtime_error.
  Child(const std::vector<std::string>& argv, const std::vector<std::string>& env);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  int pid() const { return pid_; }
  /// Everything the child wrote so far (reads what is available; never blocks).
  const std::string& output();
  /// Polls until the output contains `text` (true) or `timeout` passes (false).
  bool waitForOutput(const std::string& text, std::chrono::milliseconds timeout);
  /// Waits for the exit, draining output; the exit code (128+signal when killed), or nullopt
  /// after `timeout`.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  /// Sends `sig` to the child (only to it: it is ours).
  void signal(int sig);
  /// Drains the pipe and reaps the child if it exited; true once it has. Never blocks.
  bool step();

 private:
  void pump();

  int pid_ = -1;
  int fd_ = -1;
  std::string output_;
  std::optional<int> status_;
};

/// Waits for every child (draining all pipes meanwhile); true when all exited within `timeout`.
bool waitAll(const std::vector<Child*>& children, std::chrono::milliseconds timeout);

/// `dtrun store --host 127.0.0.1 --port 0`, with the port read from its first line.
class StoreProcess {
 public:
  /// Starts it and waits (up to 20 s) for the address; throws std::runtime_error.
  StoreProcess();
  /// Starts it on a given port (for restarting a store where it was).
  explicit StoreProcess(std::uint16_t port);
  std::uint16_t port() const { return port_; }
  /// SIGKILLs the store and reaps it.
  void kill();
  Child& child() { return child_; }

 private:
  Child child_;
  std::uint16_t port_ = 0;
};

/// "NAME=value" entries of a worker environment for `rank` in a world of `world` ranks spread
/// over nodes of `perNode` ranks, against 127.0.0.1:`port`, agent-store mode, round `round`.
/// `extra` entries override or add; nullopt removes the variable.
std::vector<std::string> workerEnv(
    int rank, int world, int perNode, std::uint16_t port, int round = 0,
    const std::map<std::string, std::optional<std::string>>& extra = {});

}  // namespace dtrun::test
