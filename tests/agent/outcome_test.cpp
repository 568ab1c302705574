// The outcome -> exit code mapping (agent/outcome.h): every outcome under both schemes, the
// scheme's names, and the termination message's bound.
#include "agent/outcome.h"

#include <catch2/catch.hpp>
#include <csignal>

#include "agent/failure_report.h"

using namespace dtrun::agent;

namespace {

int code(Outcome kind, ExitCodeScheme scheme, int signal = 0) {
  return exitCodeFor(JobOutcome{kind, signal, "why"}, scheme);
}

}  // namespace

TEST_CASE("outcome: torchrun's scheme is 0 success, 2 usage, 1 everything else", "[agent]") {
  const auto t = ExitCodeScheme::kTorchrun;
  CHECK(code(Outcome::kSucceeded, t) == 0);
  CHECK(code(Outcome::kFinishedWithoutThisNode, t) == 0);
  CHECK(code(Outcome::kUsageError, t) == 2);
  for (Outcome o :
       {Outcome::kWorkersFailed, Outcome::kHung, Outcome::kFailedElsewhere,
        Outcome::kRendezvousFailed, Outcome::kJobLost, Outcome::kConfigError, Outcome::kError}) {
    INFO(outcomeName(o));
    CHECK(code(o, t) == 1);
  }
  CHECK(code(Outcome::kSignaled, t, SIGTERM) == 1);
  CHECK(code(Outcome::kSignaled, t, SIGINT) == 1);
}

TEST_CASE("outcome: the detailed scheme tells every outcome apart", "[agent]") {
  const auto d = ExitCodeScheme::kDetailed;
  CHECK(code(Outcome::kSucceeded, d) == 0);
  CHECK(code(Outcome::kFinishedWithoutThisNode, d) == 0);
  CHECK(code(Outcome::kWorkersFailed, d) == 1);
  CHECK(code(Outcome::kUsageError, d) == 2);
  CHECK(code(Outcome::kConfigError, d) == 2);
  CHECK(code(Outcome::kHung, d) == 3);
  CHECK(code(Outcome::kRendezvousFailed, d) == 4);
  CHECK(code(Outcome::kJobLost, d) == 5);
  CHECK(code(Outcome::kFailedElsewhere, d) == 6);
  CHECK(code(Outcome::kSignaled, d, SIGTERM) == 143);
  CHECK(code(Outcome::kSignaled, d, SIGINT) == 130);
  CHECK(code(Outcome::kSignaled, d, SIGHUP) == 129);
  CHECK(code(Outcome::kSignaled, d, 0) == 1);  // no signal: an ordinary failure
  CHECK(code(Outcome::kError, d) == 1);
}

TEST_CASE("outcome: the worker scheme (DeepSpeed's) gives a failed job its root cause's code",
          "[agent]") {
  const auto w = ExitCodeScheme::kWorker;
  auto failed = [](Outcome kind, std::optional<int> root) {
    JobOutcome o{kind, 0, "why"};
    o.rootExitCode = root;
    return o;
  };
  CHECK(exitCodeFor(failed(Outcome::kWorkersFailed, 3), w) == 3);
  CHECK(exitCodeFor(failed(Outcome::kFailedElsewhere, 7), w) == 7);
  CHECK(exitCodeFor(failed(Outcome::kHung, -9), w) == 247);  // 256-N for signal N
  CHECK(exitCodeFor(failed(Outcome::kWorkersFailed, 0), w) == 1);
  CHECK(exitCodeFor(failed(Outcome::kWorkersFailed, std::nullopt), w) == 1);
  CHECK(code(Outcome::kSucceeded, w) == 0);
  CHECK(code(Outcome::kFinishedWithoutThisNode, w) == 0);
  CHECK(code(Outcome::kUsageError, w) == 2);
  CHECK(code(Outcome::kJobLost, w) == 1);
  CHECK(code(Outcome::kSignaled, w, SIGTERM) == 1);
}

TEST_CASE("outcome: names and the schemes' spellings", "[agent]") {
  CHECK(outcomeName(Outcome::kFinishedWithoutThisNode) == "finished_without_this_node");
  CHECK(outcomeName(Outcome::kFailedElsewhere) == "failed_on_another_node");
  CHECK(parseExitCodeScheme("torchrun") == ExitCodeScheme::kTorchrun);
  CHECK(parseExitCodeScheme("detailed") == ExitCodeScheme::kDetailed);
  CHECK_FALSE(parseExitCodeScheme("Detailed"));
  CHECK_FALSE(parseExitCodeScheme(""));
}

TEST_CASE("outcome: the termination message keeps the facts, shortening the why to fit",
          "[agent]") {
  const JobOutcome o{Outcome::kHung, 0, "round 1: rank 3 hung"};
  CHECK(terminationMessage(o) == "dtrun: hung: round 1: rank 3 hung");
  CHECK(terminationMessage(o, "dtrun: job j hung after 1.0 s") ==
        "dtrun: hung: round 1: rank 3 hung\ndtrun: job j hung after 1.0 s");
  CHECK(terminationMessage(JobOutcome{Outcome::kSucceeded, 0, ""}, "facts") ==
        "dtrun: succeeded\nfacts");
  std::string why;
  while (why.size() < 5000) why += "\xc3\xa9";  // é, two bytes each
  const std::string facts = "dtrun: job j workers_failed after 2.0 s: 1 round (world size 2)";
  const std::string cut = terminationMessage(JobOutcome{Outcome::kWorkersFailed, 0, why}, facts);
  CHECK(cut.size() <= kTerminationMessageLimit);
  CHECK(cut.size() >= kTerminationMessageLimit - 2);
  CHECK(cut.substr(cut.size() - facts.size() - 4) == "...\n" + facts);
  const std::string shortened = cut.substr(0, cut.size() - facts.size() - 4);
  CHECK((static_cast<unsigned char>(shortened.back()) & 0xC0) == 0x80);  // ends on a whole é
  CHECK(static_cast<unsigned char>(shortened[shortened.size() - 2]) == 0xC3);
  // Details longer than the limit are cut too, never inside a character.
  const std::string huge = terminationMessage(JobOutcome{Outcome::kError, 0, ""}, why);
  CHECK(huge.size() <= kTerminationMessageLimit);
  CHECK(static_cast<unsigned char>(huge.back()) == 0xA9);
}

TEST_CASE("outcome: one line per failure, its hang and its last words", "[agent]") {
  ProcessFailure f;
  f.rank = 3;
  f.localRank = 1;
  f.pid = 4242;
  f.host = "node-b";
  f.exitCode = 7;
  f.message = "Traceback (most recent call last):\n  File \"t.py\"\nValueError: boom\n";
  f.fromErrorFile = true;
  CHECK(describeFailure(f) ==
        "rank 3 (local_rank 1, pid 4242) on node-b: exit code 7: ValueError: boom");
  f.fromErrorFile = false;
  f.exitCode = -9;
  f.stderrTail = {"first", "last words  "};
  CHECK(describeFailure(f) ==
        "rank 3 (local_rank 1, pid 4242) on node-b: signal 9 (SIGKILL): last words");
  Hang h;
  h.kind = "stall";
  h.overstayMs = 2000;
  h.signal = SIGKILL;
  f.hang = h;
  CHECK_THAT(describeFailure(f), Catch::Matchers::Contains("; hung: no output"));
}
