// The command lines of what a job shows of itself: --exit-codes, --termination-log,
// --metrics-port/--metrics-host; `dtrun status`'s text; `dtrun timeline`'s page, bar by bar.
#include <catch2/catch.hpp>
#include <regex>

#include "launcher/cli.h"
#include "launcher/status_command.h"
#include "launcher/timeline.h"
#include "launcher/timeline_command.h"
#include "tests/launcher/launcher_test_util.h"
#include "tests/support/test_support.h"

using namespace dtrun::launcher;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using dtrun::agent::ExitCodeScheme;
using Args = std::vector<std::string>;
using Env = std::map<std::string, std::string>;

namespace {

dtrun::agent::LaunchConfig parse(const Args& args, const Env& env = {}) {
  dtrun::test::TempDir dev;
  return parseCommandLine(args, env, testing::fakeProbe(dev.path(), dev.path()));
}

std::string usageError(const Args& args, const Env& env = {}) {
  return testing::usageErrorOf([&] { parse(args, env); });
}

}  // namespace

TEST_CASE("observe options: --exit-codes, --termination-log, --metrics-port", "[launcher][cli]") {
  auto cfg = parse({"train.py"});
  CHECK(cfg.exitCodes == ExitCodeScheme::kTorchrun);
  CHECK(cfg.terminationLog.empty());
  CHECK_FALSE(cfg.metricsPort);
  cfg = parse({"--exit-codes", "detailed", "--termination-log", "/tmp/t", "--metrics-port", "0",
               "--metrics-host", "127.0.0.1", "train.py"});
  CHECK(cfg.exitCodes == ExitCodeScheme::kDetailed);
  CHECK(cfg.terminationLog == "/tmp/t");
  CHECK(cfg.metricsPort == 0);
  CHECK(cfg.metricsHost == "127.0.0.1");
  CHECK(parse({"train.py"}, {{"DTRUN_EXIT_CODES", "detailed"}}).exitCodes ==
        ExitCodeScheme::kDetailed);
  CHECK(parse({"train.py"}, {{"DTRUN_METRICS_PORT", "9100"}}).metricsPort == 9100);
  CHECK_THAT(usageError({"--exit-codes", "exact", "train.py"}),
             StartsWith("--exit-codes: invalid value 'exact'"));
  CHECK_THAT(usageError({"train.py"}, {{"DTRUN_EXIT_CODES", "x"}}),
             StartsWith("DTRUN_EXIT_CODES: invalid value 'x'"));
  CHECK_THAT(usageError({"--metrics-port", "70000", "train.py"}), StartsWith("--metrics-port"));
  CHECK_THAT(usageError({"--metrics-host", "localhost", "train.py"}),
             StartsWith("--metrics-host: invalid value 'localhost'"));
  CHECK_THAT(helpText(), Contains("--exit-codes SCHEME") && Contains("--metrics-port PORT") &&
                             Contains("--termination-log PATH") && Contains("128+N"));
}

TEST_CASE("status: the text names the phase, the restarts, the last failure and each agent",
          "[launcher][status]") {
  dtrun::rendezvous::JobStatus st;
  st.runId = "job7";
  st.phase = "running";
  st.round = 2;
  st.restartsUsed = 1;
  st.maxRestarts = 3;
  st.rounds = {{0, true, 2, 4, "failure"}, {1, true, 1, 2, "membership"}, {2, true, 2, 4, ""}};
  st.restarts = {{0, "worker_failure", "rank 1 on node-a: exit code 3"}, {1, "node_joined", ""}};
  dtrun::rendezvous::JobStatus::Failure f;
  f.round = 0;
  f.rank = 1;
  f.host = "node-a";
  f.exitCode = 3;
  f.message = "ValueError: boom";
  st.lastFailure = f;
  dtrun::rendezvous::JobStatus::Node a;
  a.host = "node-a";
  a.pid = 811;
  a.groupRank = 0;
  a.round = 2;
  a.nproc = 2;
  a.state = "running";
  a.heardMs = 150;
  a.sinceMs = 1000;
  st.nodes = {a};
  const std::string text = formatStatus(st, "store at h:29400", 13000);
  CHECK_THAT(text, StartsWith("job job7 (store at h:29400): running, round 2, world size 4 on 2"));
  CHECK_THAT(text, Contains("\nrestarts: 1 of 3 used: worker_failure after round 0 (rank 1 on "
                            "node-a: exit code 3); node_joined after round 1\n"));
  CHECK_THAT(text, Contains("\nlast failure: round 0, rank 1 (local_rank 0, pid 0) on node-a: "
                            "exit code 3: ValueError: boom\n"));
  CHECK_THAT(text, Contains("0: 4 workers on 2 (ended: failure); 1: 2 workers on 1"));
  CHECK(std::regex_search(text, std::regex("\nnode-a +811 +2 +0 +2 running +0.1 s +12 s\n")));
}

TEST_CASE("timeline: one bar per worker lifetime, coloured by how it ended",
          "[launcher][timeline]") {
  using nlohmann::json;
  auto rec = [](const char* event, double ts, const char* host, json fields) {
    fields["event"] = event;
    fields["ts"] = ts;
    fields["host"] = host;
    fields["agent_pid"] = 1;
    return fields;
  };
  TimelineInput a{"a.jsonl", {}};
  a.records = {
      rec("rendezvous_done", 10, "a", {{"round", 0}, {"group_world_size", 2}, {"world_size", 2}}),
      rec("worker_started", 10.1, "a", {{"round", 0}, {"local_rank", 0}, {"rank", 0}, {"pid", 5}}),
      rec("worker_exited", 12, "a", {{"pid", 5}, {"exit_code", 3}, {"outcome", "failed"}}),
      rec("restart_decided", 12.1, "a",
          {{"round", 0}, {"next_round", 1}, {"reason", "worker_failure"}}),
      rec("rendezvous_done", 12.5, "a", {{"round", 1}, {"group_world_size", 1}, {"world_size", 1}}),
      rec("worker_started", 12.6, "a", {{"round", 1}, {"local_rank", 0}, {"rank", 0}, {"pid", 6}}),
      rec("worker_exited", 15, "a", {{"pid", 6}, {"exit_code", 0}, {"outcome", "succeeded"}}),
      rec("job_ended", 15.1, "a", {{"outcome", "succeeded"}})};
  TimelineInput b{"b.jsonl", {}};
  b.records = {
      rec("rendezvous_done", 10, "b", {{"round", 0}, {"group_world_size", 2}, {"world_size", 2}}),
      rec("worker_started", 10.1, "b", {{"round", 0}, {"local_rank", 0}, {"rank", 1}, {"pid", 7}}),
      rec("worker_exited", 12.05, "b", {{"pid", 7}, {"signal", 15}, {"outcome", "stopped"}}),
      rec("shutdown", 12.2, "b", {{"reason", "signal"}})};
  b.records.push_back(json{{"no", "event"}});  // not a record: ignored
  const std::string html = renderTimeline({a, b});
  CHECK_THAT(html, StartsWith("<!DOCTYPE html>"));
  CHECK(html.find("http") == html.find("http://www.w3.org/2000/svg"));  // nothing fetched
  std::regex bar("<rect class=\"worker\" data-outcome=\"([a-z]+)\" data-round=\"(\\d+)\"");
  std::vector<std::string> outcomes;
  for (std::sregex_iterator it(html.begin(), html.end(), bar), end; it != end; ++it) {
    outcomes.push_back((*it)[1].str() + "@" + (*it)[2].str());
  }
  CHECK(outcomes == std::vector<std::string>{"failed@0", "succeeded@1", "stopped@0"});
  CHECK_THAT(html, Contains("fill=\"" + std::string(kFailedColor) + "\""));
  CHECK_THAT(html, Contains("data-kind=\"membership\""));  // 2 nodes -> 1
  CHECK_THAT(html, Contains("data-kind=\"restart\""));
  CHECK_THAT(html, Contains("data-lane=\"a pid 1\"") && Contains("data-lane=\"b pid 1\""));
  CHECK_THAT(html, Contains("<title>rank 0 (local 0, pid 5), round 0: failed (exit code 3)"));
}

TEST_CASE("timeline and status command lines: files anywhere, the output required, one line each",
          "[launcher][timeline][status]") {
  dtrun::test::TempDir tmp;
  const auto a = (tmp.path() / "a.jsonl").string(), b = (tmp.path() / "b.jsonl").string();
  dtrun::test::writeFile(a, R"({"event":"rendezvous_done","ts":1,"round":0})"
                            "\n");
  dtrun::test::writeFile(b,
                         "not json\n"
                         R"({"event":"worker_started","ts":2,"pid":3})"
                         "\n");
  const auto out = (tmp.path() / "t.html").string();
  CHECK(runTimelineCommand({a, "-o", out, b}, {}) == 0);
  const std::string html = dtrun::test::readFile(out);
  CHECK_THAT(html, Contains("data-file=\"" + a + "\"") && Contains("data-file=\"" + b + "\""));
  CHECK(runTimelineCommand({"-o", out, a}, {}) == 0);
  CHECK(runTimelineCommand({a}, {}) == 2);          // no -o
  CHECK(runTimelineCommand({"-o", out}, {}) == 2);  // no file
  CHECK(runTimelineCommand({(tmp.path() / "missing").string(), "-o", out}, {}) == 1);
  CHECK(runStatusCommand({"--rdzv-endpoint", "127.0.0.1:1"}, {}) == 2);  // no --rdzv-id
  CHECK(runStatusCommand({"--rdzv-backend", "zk", "--rdzv-id", "j"}, {}) == 2);
  CHECK(runStatusCommand({"--rdzv-backend", "etcd", "--rdzv-id", "j"}, {}) == 2);  // no members
}
