#include "agent/outcome.h"

namespace dtrun::agent {

int exitCodeFor(const JobOutcome& outcome, ExitCodeScheme scheme) {
  switch (outcome.kind) {
    case Outcome::kSucceeded:
    case Outcome::kFinishedWithoutThisNode:
      return 0;
    case Outcome::kUsageError:
      return 2;  // both schemes: argparse's code, which torchrun has too
    default:
      break;
  }
  if (scheme == ExitCodeScheme::kTorchrun) return 1;
  if (scheme == ExitCodeScheme::kWorker) {
    const bool workersFailed = outcome.kind == Outcome::kWorkersFailed ||
                               outcome.kind == Outcome::kHung ||
                               outcome.kind == Outcome::kFailedElsewhere;
    if (!workersFailed || !outcome.rootExitCode) return 1;
    // DeepSpeed's launch.py exits with the child's returncode, which Python makes -N for signal
    // N; the exit status keeps its low byte.
    const int code = *outcome.rootExitCode;
    if (code < 0) return 256 + code;
    return code == 0 ? 1 : code;
  }
  switch (outcome.kind) {
    case Outcome::kWorkersFailed:
    case Outcome::kError:
      return 1;
    case Outcome::kConfigError:
      return 2;  // detailed: a configuration error is a usage error found late
    case Outcome::kHung:
      return 3;
    case Outcome::kRendezvousFailed:
      return 4;
    case Outcome::kJobLost:
      return 5;
    case Outcome::kFailedElsewhere:
      return 6;
    case Outcome::kSignaled:
      // The shell's convention; a signal number that cannot be one is an ordinary failure.
      return outcome.signal > 0 && outcome.signal < 128 ? 128 + outcome.signal : 1;
    default:
      return 1;
  }
}

std::string_view outcomeName(Outcome kind) {
  switch (kind) {
    case Outcome::kSucceeded:
      return "succeeded";
    case Outcome::kFinishedWithoutThisNode:
      return "finished_without_this_node";
    case Outcome::kWorkersFailed:
      return "workers_failed";
    case Outcome::kHung:
      return "hung";
    case Outcome::kFailedElsewhere:
      return "failed_on_another_node";
    case Outcome::kRendezvousFailed:
      return "rendezvous_failed";
    case Outcome::kJobLost:
      return "job_lost";
    case Outcome::kSignaled:
      return "signaled";
    case Outcome::kUsageError:
      return "usage_error";
    case Outcome::kConfigError:
      return "config_error";
    case Outcome::kError:
      return "error";
  }
  return "error";
}

std::optional<ExitCodeScheme> parseExitCodeScheme(std::string_view text) {
  if (text == "torchrun") return ExitCodeScheme::kTorchrun;
  if (text == "detailed") return ExitCodeScheme::kDetailed;
  return std::nullopt;
}

namespace {

// `text` cut to at most `limit` bytes, before a UTF-8 continuation byte (never inside a
// character).
std::string cutUtf8(std::string text, std::size_t limit) {
  if (text.size() <= limit) return text;
  std::size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  text.resize(cut);
  return text;
}

}  // namespace

std::string terminationMessage(const JobOutcome& outcome, const std::string& details,
                               std::size_t limit) {
  std::string head = "dtrun: ";
  head += outcomeName(outcome.kind);
  const std::string tail = details.empty() ? "" : "\n" + details;
  if (!outcome.why.empty()) {
    const std::size_t fixed = head.size() + 2 + tail.size();
    const std::size_t room = limit > fixed + 3 ? limit - fixed - 3 : 0;
    head += ": ";
    head += outcome.why.size() <= room + 3 ? outcome.why : cutUtf8(outcome.why, room) + "...";
  }
  return cutUtf8(head + tail, limit);
}

}  // namespace dtrun::agent
