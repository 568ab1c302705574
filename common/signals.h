// Signal names: the one table dtrun uses to print a signal ("SIGTERM", as Python's
// signal.Signals names it, which torch's reports show) and to read one from a command line.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dtrun {

/// "SIGTERM", "SIGRTMIN+3"; "SIG<n>" for a number Linux does not name. Any thread.
std::string signalName(int signo);

/// The number of a signal named "SIGTERM", "sigterm" or "TERM" (aliases such as SIGIOT and
/// SIGCLD included); nullopt for a name Linux does not have.
std::optional<int> signalNumber(std::string_view name);

}  // namespace dtrun
