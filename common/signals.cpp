#include "common/signals.h"

#include <algorithm>
#include <cctype>
#include <csignal>

namespace dtrun {
namespace {

struct Entry {
  int signo;
  const char* name;  // without "SIG"
};

// Python's signal.Signals names on Linux. Where two names share a number (IOT/ABRT, CLD/CHLD,
// POLL/IO) the first entry for the number is the one printed; the others are only read.
constexpr Entry kSignals[] = {
    {SIGHUP, "HUP"},       {SIGINT, "INT"},   {SIGQUIT, "QUIT"},     {SIGILL, "ILL"},
    {SIGTRAP, "TRAP"},     {SIGABRT, "ABRT"}, {SIGIOT, "IOT"},       {SIGBUS, "BUS"},
    {SIGFPE, "FPE"},       {SIGKILL, "KILL"}, {SIGUSR1, "USR1"},     {SIGSEGV, "SEGV"},
    {SIGUSR2, "USR2"},     {SIGPIPE, "PIPE"}, {SIGALRM, "ALRM"},     {SIGTERM, "TERM"},
#ifdef SIGSTKFLT
    {SIGSTKFLT, "STKFLT"},
#endif
    {SIGCHLD, "CHLD"},     {SIGCLD, "CLD"},   {SIGCONT, "CONT"},     {SIGSTOP, "STOP"},
    {SIGTSTP, "TSTP"},     {SIGTTIN, "TTIN"}, {SIGTTOU, "TTOU"},     {SIGURG, "URG"},
    {SIGXCPU, "XCPU"},     {SIGXFSZ, "XFSZ"}, {SIGVTALRM, "VTALRM"}, {SIGPROF, "PROF"},
    {SIGWINCH, "WINCH"},   {SIGIO, "IO"},     {SIGPOLL, "POLL"},     {SIGPWR, "PWR"},
    {SIGSYS, "SYS"},
};

}  // namespace

bool isTerminatingSignal(int signo) {
  return std::find(kTerminatingSignals.begin(), kTerminatingSignals.end(), signo) !=
         kTerminatingSignals.end();
}

std::string signalName(int signo) {
  for (const auto& e : kSignals) {
    if (e.signo == signo) return std::string("SIG") + e.name;
  }
  if (signo == SIGRTMIN) return "SIGRTMIN";
  if (signo == SIGRTMAX) return "SIGRTMAX";
  if (signo > SIGRTMIN && signo < SIGRTMAX) return "SIGRTMIN+" + std::to_string(signo - SIGRTMIN);
  return "SIG" + std::to_string(signo);
}

std::optional<int> signalNumber(std::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper.rfind("SIG", 0) == 0) upper.erase(0, 3);
  for (const auto& e : kSignals) {
    if (upper == e.name) return e.signo;
  }
  if (upper == "RTMIN") return SIGRTMIN;
  if (upper == "RTMAX") return SIGRTMAX;
  return std::nullopt;
}

}  // namespace dtrun
