// Signal names and sets: the one table dtrun uses to print a signal ("SIGTERM", as Python's
// signal.Signals names it, which torch's reports show) and to read one from a command line, and
// the sets of signals that stop dtrun and that it passes on to the workers.
#pragma once

#include <signal.h>

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace dtrun {

/// The signals that stop a dtrun process (the agent, `dtrun --hostfile`) in order: torch's
/// elastic agent's set. Any other signal an agent handles is passed on to the workers.
inline constexpr std::array<int, 4> kTerminatingSignals = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};

/// --signals-to-handle's default: the terminating signals and Slurm's preemption warnings
/// (SIGUSR1, SIGUSR2), which torchrun's default lacks.
inline constexpr std::array<int, 6> kDefaultHandledSignals = {SIGTERM, SIGINT,  SIGHUP,
                                                              SIGQUIT, SIGUSR1, SIGUSR2};

/// True for a member of kTerminatingSignals. Pure.
bool isTerminatingSignal(int signo);

/// "SIGTERM", "SIGRTMIN+3"; "SIG<n>" for a number Linux does not name. Any thread.
std::string signalName(int signo);

/// The number of a signal named "SIGTERM", "sigterm" or "TERM" (aliases such as SIGIOT and
/// SIGCLD included); nullopt for a name Linux does not have.
std::optional<int> signalNumber(std::string_view name);

}  // namespace dtrun
