// StackDump: where a hung Python worker is stuck, asked for just before the watchdog kills it
// (opt-in: dtrun --dump-stacks).
//
// Set-up, without changing what a healthy worker does: the agent writes a sitecustomize.py into
// a private directory and prepends that directory to the workers' PYTHONPATH. At interpreter
// start it arms faulthandler for one real-time signal (DTRUN_STACK_DUMP_SIGNAL), writing every
// thread's stack to <dir>/<pid>.txt (re-armed with its own file in forked children), and then
// runs the sitecustomize it shadows (the user's, or the distribution's) exactly as Python would
// have. Nothing else changes: no handler on any signal a program uses, no output, no import of
// anything but faulthandler, and a failure to arm is silent. PYTHONFAULTHANDLER alone cannot do
// this: it only covers fatal signals, to stderr. Interpreters started with -S, -E or -I skip
// sitecustomize or PYTHONPATH and are simply not armed.
//
// Collection: only processes whose /proc/<pid>/status says they catch the signal get it (the
// signal's default action would kill any other process); the agent then waits, at most a
// bound, until their dump files stop growing, and reads them.
//
//   StackDump(io) --> workers started with env() --> collect(pids) --(files settled | bound)-->
//   done(stacks)
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dtrun::agent {

class StackDump {
 public:
  /// Writes sitecustomize.py into a fresh 0700 directory under $TMPDIR. Blocking (local files);
  /// throws dtrun::Error naming the directory.
  explicit StackDump(boost::asio::io_context& io);
  /// Removes the directory and every dump in it.
  ~StackDump();
  StackDump(const StackDump&) = delete;
  StackDump& operator=(const StackDump&) = delete;

  /// Adds what a worker needs to `env` (its whole environment): the directory prepended to
  /// PYTHONPATH, DTRUN_STACK_DUMP_DIR and DTRUN_STACK_DUMP_SIGNAL. Pure apart from `env`.
  void addTo(std::map<std::string, std::string>& env) const;

  /// Asks every process of `pids` that catches the dump signal for its stacks, waits until their
  /// files have settled or `bound` passed, and posts `done(text)`: one "Python stacks of pid N:"
  /// section per process that answered ("" when none could). Io thread; never blocks it. A
  /// second collect() while one runs is answered "" at once.
  void collect(std::vector<int> pids, std::chrono::milliseconds bound,
               std::function<void(std::string)> done);

  /// Removes the dump files of processes that are gone (a new round starts). Blocking (local).
  void prune();

  /// The signal used (a real-time one no Python program is expected to use).
  int signal() const { return signal_; }
  const std::string& directory() const { return dir_; }

 private:
  struct Pending;
  void check(std::shared_ptr<Pending> p);

  boost::asio::io_context& io_;
  std::string dir_;
  int signal_;
  boost::asio::steady_timer timer_;
  bool collecting_ = false;
};

/// True when /proc/<pid>/status says the process catches `signo` (SigCgt). Blocking (procfs).
bool catchesSignal(int pid, int signo);

}  // namespace dtrun::agent
