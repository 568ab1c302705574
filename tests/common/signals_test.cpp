// common/signals.h: the one table of signal names, read and printed.
#include "common/signals.h"

#include <signal.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

using dtrun::signalName;
using dtrun::signalNumber;

TEST_CASE("signalName uses Python's names", "[common]") {
  // {s.value: s.name for s in signal.Signals} from Python 3.11 on Linux x86-64.
  const std::map<int, std::string> python = {
      {1, "SIGHUP"},     {2, "SIGINT"},    {3, "SIGQUIT"},   {4, "SIGILL"},   {5, "SIGTRAP"},
      {6, "SIGABRT"},    {7, "SIGBUS"},    {8, "SIGFPE"},    {9, "SIGKILL"},  {10, "SIGUSR1"},
      {11, "SIGSEGV"},   {12, "SIGUSR2"},  {13, "SIGPIPE"},  {14, "SIGALRM"}, {15, "SIGTERM"},
      {16, "SIGSTKFLT"}, {17, "SIGCHLD"},  {18, "SIGCONT"},  {19, "SIGSTOP"}, {20, "SIGTSTP"},
      {21, "SIGTTIN"},   {22, "SIGTTOU"},  {23, "SIGURG"},   {24, "SIGXCPU"}, {25, "SIGXFSZ"},
      {26, "SIGVTALRM"}, {27, "SIGPROF"},  {28, "SIGWINCH"}, {29, "SIGIO"},   {30, "SIGPWR"},
      {31, "SIGSYS"},    {34, "SIGRTMIN"}, {64, "SIGRTMAX"}};
  for (const auto& [signo, name] : python) {
    INFO("signal " << signo);
    CHECK(signalName(signo) == name);
  }
  CHECK(signalName(36) == "SIGRTMIN+2");
  CHECK(signalName(99) == "SIG99");
}

TEST_CASE("signalNumber reads Python's names, their aliases, and every case", "[common]") {
  CHECK(signalNumber("SIGTERM") == SIGTERM);
  CHECK(signalNumber("term") == SIGTERM);
  CHECK(signalNumber("SigUsr1") == SIGUSR1);
  CHECK(signalNumber("SIGIOT") == SIGABRT);
  CHECK(signalNumber("CLD") == SIGCHLD);
  CHECK(signalNumber("SIGPOLL") == SIGIO);
  CHECK(signalNumber("SIGRTMIN") == SIGRTMIN);
  CHECK(signalNumber("SIGRTMAX") == SIGRTMAX);
  for (const char* bad : {"", "SIG", "15", "SIGFOO", "SIGTERM ", "SIG TERM"}) {
    INFO("'" << bad << "'");
    CHECK_FALSE(signalNumber(bad).has_value());
  }
  // Every name printed reads back to its number.
  for (int s = 1; s < SIGRTMIN; ++s) {
    if (signalName(s) == "SIG" + std::to_string(s)) continue;
    INFO(signalName(s));
    CHECK(signalNumber(signalName(s)) == s);
  }
}

TEST_CASE("the terminating set is torch's four signals, the handled default adds SIGUSR1/2",
          "[common]") {
  // One set for the agent's policy, --hostfile's launcher, the orphan guard and the option's
  // default (four copies once; the guard's also had SIGUSR1/2, which are the default's).
  for (int s = 1; s <= SIGRTMAX; ++s) {
    INFO(signalName(s));
    CHECK(dtrun::isTerminatingSignal(s) ==
          (s == SIGTERM || s == SIGINT || s == SIGHUP || s == SIGQUIT));
  }
  CHECK_FALSE(dtrun::isTerminatingSignal(0));
  std::vector<std::string> names;
  for (int s : dtrun::kDefaultHandledSignals) names.push_back(signalName(s));
  CHECK(names ==
        std::vector<std::string>{"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"});
  for (int s : dtrun::kTerminatingSignals) {
    CHECK(std::find(dtrun::kDefaultHandledSignals.begin(), dtrun::kDefaultHandledSignals.end(),
                    s) != dtrun::kDefaultHandledSignals.end());
  }
}
