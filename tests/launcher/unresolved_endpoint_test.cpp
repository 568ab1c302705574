// An agent whose rendezvous host does not resolve says so before it starts waiting out the join
// timeout (launcher/endpoint_check.h), instead of a silent wait.
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <sstream>

#include "launcher/endpoint_check.h"

using namespace dtrun::launcher;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

TEST_CASE("an endpoint that does not resolve is named with what dtrun keeps trying",
          "[launcher][endpoint]") {
  std::ostringstream text;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text);
  sink->set_pattern("%l: %v");
  spdlog::logger log("test", sink);

  warnIfEndpointDoesNotResolve("no-such-host.invalid", 29400, 600s, log);
  CHECK_THAT(text.str(),
             Contains("warning: rendezvous host 'no-such-host.invalid' does not resolve on this "
                      "machine (") &&
                 Contains("dtrun keeps trying to reach no-such-host.invalid:29400 until the join "
                          "timeout (600 s): check the name, or give an address"));
  const std::string said = text.str();
  CHECK(std::count(said.begin(), said.end(), '\n') == 1);

  std::ostringstream quiet;
  auto quietSink = std::make_shared<spdlog::sinks::ostream_sink_mt>(quiet);
  spdlog::logger quietLog("quiet", quietSink);
  warnIfEndpointDoesNotResolve("localhost", 29400, 1500ms, quietLog);
  warnIfEndpointDoesNotResolve("127.0.0.1", 1, 1s, quietLog);
  CHECK(quiet.str().empty());
}
