// The agent's metrics: the text format's rules, what the records add up to, the summary line,
// and the endpoint over a real socket on an io_context (as the agent runs it).
#include "agent/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <thread>

#include "agent/metrics_server.h"
#include "agent/run_history.h"
#include "common/error.h"

using namespace dtrun::agent;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

using Time = std::chrono::system_clock::time_point;
const Time kT0 = Time(std::chrono::seconds(1796012000));
Time at(double s) {
  return kT0 + std::chrono::duration_cast<Time::duration>(std::chrono::duration<double>(s));
}

// A job of two rounds: a worker failed in round 0, a node left after round 1.
RunHistory twoRestarts() {
  RunHistory h(kT0);
  h.onRecord("rendezvous_started", {}, at(0));
  h.onRecord("rendezvous_done", {{"round", 0}, {"world_size", 4}, {"group_world_size", 2}},
             at(1.5));
  h.onRecord("worker_started", {{"round", 0}, {"local_rank", 0}}, at(1.6));
  h.onRecord("worker_started", {{"round", 0}, {"local_rank", 1}}, at(1.6));
  h.onRecord("worker_exited", {{"round", 0}, {"outcome", "failed"}}, at(3));
  h.onRecord("worker_exited", {{"round", 0}, {"outcome", "stopped"}}, at(3.1));
  h.onRecord("restart_decided",
             {{"round", 0}, {"reason", "worker_failure"}, {"decided_here", true}},
             at(3.1));  // the report, not a restart
  h.onRecord("restart_decided", {{"round", 0}, {"next_round", 1}, {"reason", "worker_failure"}},
             at(3.2));
  h.onRecord("rendezvous_started", {}, at(3.2));
  h.onRecord("rendezvous_done", {{"round", 1}, {"world_size", 4}}, at(3.7));
  h.onRecord("worker_started", {{"round", 1}, {"local_rank", 0}}, at(3.8));
  h.onRecord("worker_group_stalled", {{"round", 1}}, at(5));
  h.onRecord("restart_decided", {{"round", 1}, {"next_round", 2}, {"reason", "node_left"}}, at(6));
  h.onRecord("rendezvous_started", {}, at(6));
  h.onRecord("rendezvous_done", {{"round", 2}, {"world_size", 2}}, at(7));
  return h;
}

std::string get(std::uint16_t port, const std::string& request) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return "";
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return out;
}

}  // namespace

TEST_CASE("metrics: the text format's escapes and numbers", "[agent][metrics]") {
  CHECK(MetricsText::escapeLabel("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
  CHECK(MetricsText::escapeHelp("a\\b\nc\"") == "a\\\\b\\nc\"");
  CHECK(MetricsText::formatValue(3) == "3");
  CHECK(MetricsText::formatValue(-2) == "-2");
  CHECK(MetricsText::formatValue(0.25) == "0.25");
  CHECK(MetricsText::formatValue(NAN) == "NaN");
  CHECK(MetricsText::formatValue(INFINITY) == "+Inf");
  CHECK(MetricsText::formatValue(-INFINITY) == "-Inf");
  CHECK(MetricsText::formatValue(1e20) == "1e+20");
  MetricsText m;
  m.family("x_total", "counter", "Things.\nCounted.");
  m.sample("x_total", {{"cause", "a\"b"}, {"k", "v"}}, 2);
  CHECK(m.text() ==
        "# HELP x_total Things.\\nCounted.\n# TYPE x_total counter\n"
        "x_total{cause=\"a\\\"b\",k=\"v\"} 2\n");
}

TEST_CASE("metrics: the counts are the records'", "[agent][metrics]") {
  const RunHistory h = twoRestarts();
  CHECK(h.rounds().size() == 3);
  CHECK(h.restarts().size() == 2);
  CHECK(h.restartsByCause().at("worker_failure") == 1);
  CHECK(h.restartsByCause().at("node_left") == 1);
  CHECK(h.rendezvousCount() == 3);
  CHECK(h.rendezvousSecondsSum() == Approx(1.5 + 0.5 + 1.0));
  CHECK(h.lastRendezvousSeconds() == Approx(1.0));
  CHECK(h.workersStarted() == 3);
  CHECK(h.workersRunning() == 0);  // a new round began
  CHECK(h.hangsByKind().at("stall") == 1);

  MetricsSnapshot now;
  now.runId = "job7";
  now.host = "node-a";
  now.state = "running";
  now.round = 2;
  now.worldSize = 2;
  now.process = readProcessSample();
  const std::string text = renderMetrics(h, now);
  CHECK_THAT(text, Contains("dtrun_restarts_total{cause=\"worker_failure\"} 1\n"));
  CHECK_THAT(text, Contains("dtrun_restarts_total{cause=\"node_left\"} 1\n"));
  CHECK_THAT(text, Contains("dtrun_restarts_total{cause=\"node_joined\"} 0\n"));
  CHECK_THAT(text, Contains("dtrun_rounds_total 3\n"));
  CHECK_THAT(text, Contains("dtrun_rendezvous_duration_seconds_count 3\n"));
  CHECK_THAT(text, Contains("dtrun_workers_exited_total{outcome=\"failed\"} 1\n"));
  CHECK_THAT(text, Contains("dtrun_workers_exited_total{outcome=\"stopped\"} 1\n"));
  CHECK_THAT(text, Contains("dtrun_hangs_total{kind=\"stall\"} 1\n"));
  CHECK_THAT(text, Contains("dtrun_seconds_since_worker_progress NaN\n"));
  CHECK_THAT(text,
             Contains("dtrun_agent_info{run_id=\"job7\",host=\"node-a\",state=\"running\"} 1"));
  CHECK_THAT(text, Contains("# TYPE process_cpu_seconds_total counter\n"));
  CHECK(text.find("dtrun_store_") == std::string::npos);  // not the store's host
  CHECK(now.process.residentBytes > 0);
  CHECK(now.process.openFds > 0);
  CHECK(now.process.startTimeSeconds > 1.5e9);

  now.store = StoreSample{3, 10, 512, {{"SET", 7}}};
  CHECK_THAT(renderMetrics(h, now), Contains("dtrun_store_requests_total{op=\"SET\"} 7\n"));
}

TEST_CASE("metrics: the summary line names the outcome, the rounds and the restarts",
          "[agent][metrics]") {
  const RunHistory h = twoRestarts();
  CHECK(h.summary("job7", JobOutcome{Outcome::kSucceeded, 0, ""}, at(12.2)) ==
        "dtrun: job job7 succeeded after 12.2 s: 3 rounds (world sizes 4, 4, 2); 2 restarts "
        "(worker_failure after round 0, node_left after round 1)");
  CHECK(h.summary("job7", JobOutcome{Outcome::kSignaled, 15, "stopped by SIGTERM"}, at(1)) ==
        "dtrun: job job7 signaled (signal 15) after 1.0 s: 3 rounds (world sizes 4, 4, 2); 2 "
        "restarts (worker_failure after round 0, node_left after round 1); stopped by SIGTERM");
  const RunHistory none(kT0);
  CHECK(none.summary("j", JobOutcome{Outcome::kFinishedWithoutThisNode, 0, "x"}, at(0)) ==
        "dtrun: job j finished without this node after 0.0 s: no round with this node; 0 "
        "restarts; x");
  const auto j = h.summaryJson(JobOutcome{Outcome::kHung, 0, "why"}, 3, at(2));
  CHECK(j["outcome"] == "hung");
  CHECK(j["exit_code"] == 3);
  CHECK(j["rounds"].size() == 3);
  CHECK(j["restarts"][1]["cause"] == "node_left");
}

TEST_CASE("metrics endpoint: /metrics, /healthz, 404 and 405 on the caller's io_context",
          "[agent][metrics]") {
  boost::asio::io_context io(1);
  int scrapes = 0;
  MetricsServer server(io, "127.0.0.1", 0, [&](MetricsServer::Respond respond) {
    ++scrapes;
    respond(200, "text/plain; version=0.0.4; charset=utf-8", "up 1\n");
  });
  const auto port = server.endpoint().port();
  REQUIRE(port != 0);
  std::thread loop([&] { io.run(); });  // the test's stand-in for the agent's one thread
  const std::string metrics =
      get(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK_THAT(metrics, StartsWith("HTTP/1.1 200 OK\r\n"));
  CHECK_THAT(metrics, Contains("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
  CHECK_THAT(metrics, Contains("\r\n\r\nup 1\n"));
  CHECK_THAT(get(port, "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n"),
             StartsWith("HTTP/1.1 200 OK\r\n") && Contains("\r\n\r\nok\n"));
  CHECK_THAT(get(port, "GET /nope HTTP/1.1\r\nConnection: close\r\n\r\n"),
             StartsWith("HTTP/1.1 404 Not Found\r\n"));
  CHECK_THAT(get(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
             StartsWith("HTTP/1.1 405 Method Not Allowed\r\n"));
  // Two requests on one connection (Prometheus keeps it alive).
  const std::string two = get(port,
                              "GET /metrics HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n"
                              "Connection: close\r\n\r\n");
  CHECK(two.find("up 1") != two.rfind("up 1"));
  // Garbage closes that connection only.
  CHECK(get(port, "\x01\x02 not http\r\n\r\n").find("200 OK") == std::string::npos);
  CHECK_THAT(get(port, "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n"),
             StartsWith("HTTP/1.1 200 OK"));
  boost::asio::post(io, [&] { server.close(); });
  loop.join();  // closed: nothing is left for run() to do
  CHECK(scrapes == 3);
}

TEST_CASE("metrics endpoint: a port in use is one error naming the option", "[agent][metrics]") {
  boost::asio::io_context io(1);
  MetricsServer first(io, "127.0.0.1", 0, [](MetricsServer::Respond r) { r(200, "t", ""); });
  try {
    MetricsServer second(io, "127.0.0.1", first.endpoint().port(),
                         [](MetricsServer::Respond r) { r(200, "t", ""); });
    FAIL("a second endpoint bound the same port");
  } catch (const dtrun::ConfigError& e) {
    CHECK_THAT(e.what(), StartsWith("--metrics-port " + std::to_string(first.endpoint().port())));
  }
}
