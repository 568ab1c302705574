// file_timer_probe: dtrun's FileTimerServer alone, for the interop test that drives it with
// torch's FileTimerClient. It serves a FIFO on an io_context and talks JSON lines:
//
//   stdin   {"root": PID, "owner": N}   PID (and its descendants) count as worker N from now on
//           {"stats": true}             asks for the counters
//   stdout  {"event": "ready", "path": FIFO}
//           {"event": "expired", "pid", "owner", "scope_id", "deadline", "overstay_ms",
//            "signal", "killed"}        after sending the signal to the pid, as torch's server
//           {"event": "stats", "requests", "malformed", "ignored", "expired", "armed"}
//
// usage: file_timer_probe [FIFO]   (no FIFO: a private one). EOF on stdin stops it.
#include <signal.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <cstdio>
#include <istream>
#include <map>
#include <nlohmann/json.hpp>

#include "agent/file_timer.h"
#include "agent/process_tree.h"

namespace {

void emit(const nlohmann::json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  boost::asio::io_context io;
  auto log = spdlog::stderr_logger_st("probe");
  log->set_level(spdlog::level::debug);
  std::map<int, int> roots;
  dtrun::agent::FileTimerServer server(
      io, argc > 1 ? argv[1] : "", [&](int pid) { return dtrun::agent::ownerOf(pid, roots); },
      [&](const dtrun::agent::TimerExpiry& e) {
        bool killed = e.signal > 0 && ::kill(e.pid, e.signal) == 0;
        emit({{"event", "expired"},
              {"pid", e.pid},
              {"owner", e.owner},
              {"scope_id", e.scopeId},
              {"deadline", std::chrono::duration<double>(e.deadline.time_since_epoch()).count()},
              {"overstay_ms", e.overstay.count()},
              {"signal", e.signal},
              {"killed", killed}});
      },
      log);
  server.start();
  emit({{"event", "ready"}, {"path", server.path()}});

  boost::asio::posix::stream_descriptor in(io, ::dup(0));
  boost::asio::streambuf buf;
  std::function<void()> readCommand = [&] {
    boost::asio::async_read_until(in, buf, '\n', [&](boost::system::error_code ec, std::size_t) {
      if (ec) {
        server.stop();
        return;
      }
      std::istream is(&buf);
      std::string line;
      std::getline(is, line);
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("root")) roots[j["root"].get<int>()] = j.value("owner", 0);
      if (j.is_object() && j.contains("stats")) {
        const auto& s = server.stats();
        emit({{"event", "stats"},
              {"requests", s.requests},
              {"malformed", s.malformed},
              {"ignored", s.ignored},
              {"expired", s.expired},
              {"armed", server.armed()}});
      }
      readCommand();
    });
  };
  readCommand();
  io.run();
  return 0;
}
