// StandbyPool and Standby with real /usr/bin/python3 standbys importing small modules of the
// test's own: a standby takes its round (environment, argv, streams, exit code, what the imports
// printed), and every way it can fail to falls back with the reason said: killed, stopped, an
// import failing, imports unsafe to hand over, an interpreter that skips the hook, a standby not
// ready in time. The io loop is stepped until an event-log record or an exit arrives.
#include "agent/standby_pool.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <vector>

#include "agent/worker_env.h"
#include "tests/agent/child_pipe.h"
#include "tests/agent/round_util.h"
#include "tests/support/run_until.h"
#include "tests/support/test_support.h"

using namespace dtrun::agent;
using dtrun::ExitStatus;
using dtrun::SpawnSpec;
using dtrun::test::processAlive;
using dtrun::test::runUntil;
using namespace std::chrono_literals;

namespace {

constexpr const char* kPython = "/usr/bin/python3";

struct Pool {
  dtrun::test::TempDir dir;
  boost::asio::io_context io;
  LaunchConfig config;
  std::ostringstream logText;
  std::unique_ptr<EventLog> events;
  std::unique_ptr<StandbyPool> pool;

  explicit Pool(std::vector<std::string> modules, std::string python = kPython) {
    config.nprocPerNode = 1;
    config.script = (dir.path() / "script.py").string();
    config.entrypoint = {std::move(python), "-u", config.script};
    config.scriptArgs = {"--lr", "0.1"};
    config.prewarm = std::move(modules);
    config.prewarmTimeout = 60s;
    config.baseEnv = {{"PATH", "/usr/bin:/bin"},
                      {"PYTHONPATH", dir.path().string()},
                      {"PYTHONDONTWRITEBYTECODE", "1"}};
    // The worker: what it sees, one line each, then exit code 7.
    module("script.py",
           "import os, sys\n"
           "open(os.path.join(os.path.dirname(__file__), 'ran'), 'a').write('x')\n"
           "print('imported', 'quick_mod' in sys.modules, 'late_thread_mod' in sys.modules)\n"
           "print('rank', os.environ.get('RANK'), os.getenv('WORLD_SIZE'))\n"
           "print('argv', sys.argv[1:])\n"
           "print('path0', sys.path[0] == os.path.dirname(os.path.realpath(__file__)))\n"
           "print('err line', file=sys.stderr)\n"
           "sys.exit(7)\n");
    module("quick_mod.py", "print('importing quick_mod')\n");
  }

  void module(const std::string& name, const std::string& text) {
    std::filesystem::create_directories((dir.path() / name).parent_path());
    dtrun::test::writeFile(dir.path() / name, text);
  }

  void start() {
    events = std::make_unique<EventLog>((dir.path() / "events.jsonl").string());
    auto log = std::make_shared<spdlog::logger>(
        "agent", std::make_shared<spdlog::sinks::ostream_sink_st>(logText));
    pool = std::make_unique<StandbyPool>(io, config, StandbyPoolContext{}, *events, log);
    pool->start();
  }

  std::vector<nlohmann::json> records(const std::string& name) const {
    std::vector<nlohmann::json> out;
    std::ifstream in(dir.path() / "events.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      if (j["event"] == name) out.push_back(j);
    }
    return out;
  }

  // Steps the loop until `name` was recorded `count` times; its last record.
  nlohmann::json await(const std::string& name, std::size_t count = 1) {
    REQUIRE(runUntil(
        io, [&] { return records(name).size() >= count; }, 60s));
    return records(name).back();
  }

  // The worker spec of local rank 0 in a round as rank 5 of 8, streams to `out` and `err`.
  SpawnSpec worker(int out, int err) const {
    SpawnSpec s;
    s.argv = workerArgv(config, 0);
    s.env = workerEnv(config, testing::roundOf(3, 2, 4, 2), 0, WorkerStore{"head", 1234}, "");
    s.stdoutFd = out;
    s.stderrFd = err;
    return s;
  }
};

using Pipe = testing::ChildPipe;

bool havePython() { return ::access(kPython, X_OK) == 0; }

}  // namespace

TEST_CASE("a ready standby runs its round's script as a cold worker would", "[agent][prewarm]") {
  if (!havePython()) DTRUN_SKIP(kPython << " is missing");
  Pool p({"quick_mod"});
  p.start();
  const auto ready = p.await("standby_ready");
  CHECK(ready["rss_kib"].get<int>() > 1000);
  CHECK(p.logText.str().find("hold") != std::string::npos);  // the cost, once
  Pipe out, err;
  std::optional<ExitStatus> status;
  auto process =
      p.pool->claim(0, p.worker(out.write, err.write), [&](ExitStatus s) { status = s; });
  REQUIRE(process);
  CHECK(process->pid() == ready["pid"].get<int>());
  out.closeWrite();
  err.closeWrite();
  REQUIRE(runUntil(
      p.io, [&] { return status.has_value(); }, 30s));
  CHECK(status->code == 7);
  CHECK(out.all() ==
        "importing quick_mod\n"  // what the import printed, held until the round
        "imported True False\n"
        "rank 4 8\n"
        "argv ['--lr', '0.1']\n"
        "path0 True\n");
  CHECK(err.all() == "err line\n");
  p.pool->refill();
  CHECK(p.await("standby_started", 2)["local_rank"] == 0);
}

TEST_CASE("a killed or stopped standby: the rank starts cold, saying why", "[agent][prewarm]") {
  if (!havePython()) DTRUN_SKIP(kPython << " is missing");
  Pool p({"quick_mod"});
  p.start();
  Pipe out, err;
  SECTION("killed") {
    const int pid = p.await("standby_ready")["pid"];
    REQUIRE(::kill(pid, SIGKILL) == 0);
    CHECK(p.await("standby_exited")["signal"] == SIGKILL);
    CHECK_FALSE(p.pool->claim(0, p.worker(out.write, err.write), [](ExitStatus) {}));
    const auto fallback = p.await("prewarm_fallback");
    CHECK(fallback["reason"].get<std::string>().find("SIGKILL") != std::string::npos);
    CHECK(p.logText.str().find("local rank 0 starts cold") != std::string::npos);
    // The next round's standby comes with the refill.
    p.pool->refill();
    p.await("standby_ready", 2);
    CHECK(p.pool->enabled());
  }
  SECTION("stopped") {
    const int pid = p.await("standby_ready")["pid"];
    REQUIRE(::kill(pid, SIGSTOP) == 0);
    REQUIRE(dtrun::test::pollUntil([&] {
      std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
      std::string all((std::istreambuf_iterator<char>(stat)), {});
      return all.find(") T ") != std::string::npos;
    }));
    CHECK_FALSE(p.pool->claim(0, p.worker(out.write, err.write), [](ExitStatus) {}));
    CHECK(p.await("prewarm_fallback")["reason"].get<std::string>().find("stopped") !=
          std::string::npos);
    CHECK_FALSE(processAlive(pid));  // dropped: killed and reaped
  }
  CHECK_FALSE(dtrun::test::readFile(p.dir.path() / "ran").size() > 0);
}

TEST_CASE("imports that fail or are unsafe to hand over turn prewarming off", "[agent][prewarm]") {
  if (!havePython()) DTRUN_SKIP(kPython << " is missing");
  struct Case {
    const char* what;
    std::string module, text, expected;
  };
  const std::vector<Case> cases{
      {"an import fails", "no_such_module_for_dtrun", "", "ModuleNotFoundError"},
      {"a Python thread", "threaded_mod",
       "import threading, time\nthreading.Thread(target=time.sleep, args=(60,)).start()\n",
       "Python thread"},
      {"a per-round variable read at import time", "rank_mod",
       "import os\nRANK = int(os.environ.get('RANK', '0'))\n", "read RANK"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    Pool p({c.module});
    if (!c.text.empty()) p.module(c.module + ".py", c.text);
    p.start();
    const auto off = p.await("prewarm_disabled");
    CHECK(off["reason"].get<std::string>().find(c.expected) != std::string::npos);
    CHECK(p.logText.str().find("workers start cold") != std::string::npos);
    CHECK_FALSE(p.pool->enabled());
    Pipe out, err;
    CHECK_FALSE(p.pool->claim(0, p.worker(out.write, err.write), [](ExitStatus) {}));
    CHECK(p.records("prewarm_fallback").empty());  // said once, when it was turned off
    CHECK(dtrun::test::readFile(p.dir.path() / "ran").empty());  // the script never ran
  }
}

TEST_CASE("a standby that became unfit after it was ready restarts itself cold, in place",
          "[agent][prewarm]") {
  if (!havePython()) DTRUN_SKIP(kPython << " is missing");
  // The import leaves a signal handler that starts a Python thread: sent after "ready", the
  // signal makes the standby unsafe only by the time of its hand-over.
  Pool p({"late_thread_mod"});
  const auto marker = p.dir.path() / "thread-started";
  const std::string touch = "open(" + nlohmann::json(marker.string()).dump() + ", 'w').close()";
  const std::string handler =
      "def start(*_):\n"
      "    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
      "    " +
      touch + "\n";
  p.module("late_thread_mod.py",
           "import signal, threading, time\n" + handler + "signal.signal(signal.SIGUSR1, start)\n");
  p.start();
  const int pid = p.await("standby_ready")["pid"];
  REQUIRE(::kill(pid, SIGUSR1) == 0);
  REQUIRE(dtrun::test::pollUntil([&] { return std::filesystem::exists(marker); }));
  Pipe out, err;
  std::optional<ExitStatus> status;
  auto process =
      p.pool->claim(0, p.worker(out.write, err.write), [&](ExitStatus s) { status = s; });
  REQUIRE(process);  // taken: the standby itself found out, and exec'd a cold start
  out.closeWrite();
  err.closeWrite();
  const auto fallback = p.await("prewarm_fallback");
  CHECK(fallback["after_handover"] == true);
  CHECK(fallback["reason"].get<std::string>().find("Python thread") != std::string::npos);
  REQUIRE(runUntil(
      p.io, [&] { return status.has_value(); }, 30s));
  CHECK(status->code == 7);
  CHECK(process->pid() == pid);  // the same process, group and pidfd
  const std::string text = out.all();
  CHECK(text.find("imported False False\nrank 4 8\n") != std::string::npos);  // a fresh one
  CHECK(text.find("importing quick_mod") == std::string::npos);
  CHECK(err.all() == "err line\n");
}

TEST_CASE("a -m module runs as __main__ from a standby as it does cold", "[agent][prewarm]") {
  if (!havePython()) DTRUN_SKIP(kPython << " is missing");
  Pool p({"quick_mod"});
  p.config.module = true;
  p.config.script = "pkg.main_mod";
  p.config.entrypoint = {kPython, "-u", "-m", "pkg.main_mod"};
  p.module("pkg/__init__.py", "");
  p.module("pkg/main_mod.py",
           "import os, sys\n"
           "print(__name__, __spec__.name, __package__, sys.argv, __file__)\n"
           "print(sys.path[0] == os.getcwd(), sys.orig_argv[1:])\n"
           "raise SystemExit('bye from ' + os.environ['RANK'])\n");
  // The same spec twice: spawned cold, then handed to the standby.
  auto run = [&](bool warm) {
    Pipe out, err;
    std::optional<ExitStatus> status;
    std::unique_ptr<WorkerProcess> w;
    if (warm) {
      w = p.pool->claim(0, p.worker(out.write, err.write), [&](ExitStatus s) { status = s; });
      REQUIRE(w);
    } else {
      w = std::make_unique<WorkerProcess>(p.io, p.worker(out.write, err.write),
                                          [&](ExitStatus s) { status = s; });
    }
    out.closeWrite();
    err.closeWrite();
    REQUIRE(runUntil(
        p.io, [&] { return status.has_value(); }, 30s));
    return std::make_tuple(status->code, out.all(), err.all());
  };
  const auto cold = run(false);
  p.start();
  p.await("standby_ready");
  const auto warm = run(true);
  CHECK(std::get<0>(cold) == 1);
  CHECK(std::get<1>(cold).find("__main__ pkg.main_mod pkg") == 0);
  CHECK(std::get<2>(cold) == "bye from 4\n");
  CHECK(std::get<1>(warm) == "importing quick_mod\n" + std::get<1>(cold));
  CHECK(std::get<0>(warm) == std::get<0>(cold));
  CHECK(std::get<2>(warm) == std::get<2>(cold));
}

TEST_CASE("a preload that imports the -m module itself is refused", "[agent][prewarm]") {
  if (!havePython()) DTRUN_SKIP(kPython << " is missing");
  Pool p({"pulls_main"});
  p.config.module = true;
  p.config.script = "main_mod";
  p.config.entrypoint = {kPython, "-u", "-m", "main_mod"};
  p.module("main_mod.py", "print('main')\n");
  p.module("pulls_main.py", "import main_mod\n");
  p.start();
  CHECK(p.await("prewarm_disabled")["reason"].get<std::string>().find("-m runs as __main__") !=
        std::string::npos);
}

TEST_CASE("an interpreter that skips the hook never gets a standby", "[agent][prewarm]") {
  if (!havePython()) DTRUN_SKIP(kPython << " is missing");
  dtrun::test::TempDir bin;
  const auto wrapper = bin.path() / "isolated-python";
  dtrun::test::writeFile(wrapper, std::string("#!/bin/sh\nexec ") + kPython + " -I \"$@\"\n");
  ::chmod(wrapper.c_str(), 0755);
  Pool p({"quick_mod"}, wrapper.string());
  p.start();
  CHECK(p.await("prewarm_disabled")["reason"].get<std::string>().find(
            "did not run dtrun's start-up hook") != std::string::npos);
  CHECK(p.records("standby_started").empty());
  CHECK(dtrun::test::readFile(p.dir.path() / "ran").empty());
}

TEST_CASE("a round waits for a standby still importing, within --prewarm-timeout",
          "[agent][prewarm]") {
  if (!havePython()) DTRUN_SKIP(kPython << " is missing");
  bool started = false;
  SECTION("ready in time: the start waits for it") {
    Pool p({"quick_mod"});
    p.start();
    REQUIRE(p.pool->deferStart([&] { started = true; }));
    REQUIRE(runUntil(
        p.io, [&] { return started; }, 60s));
    CHECK(p.records("standby_ready").size() == 1);
    CHECK_FALSE(p.pool->deferStart([] {}));  // nothing importing any more
  }
  SECTION("not ready in time: killed, prewarming off, the start goes on") {
    Pool p({"blocked_mod"});
    const auto fifo = p.dir.path() / "never";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    p.module("blocked_mod.py", "open(" + nlohmann::json(fifo.string()).dump() + ").read()\n");
    p.config.prewarmTimeout = 1s;
    p.start();
    const int pid = p.await("standby_started")["pid"];
    REQUIRE(p.pool->deferStart([&] { started = true; }));
    REQUIRE(runUntil(
        p.io, [&] { return started; }, 30s));
    CHECK(p.await("prewarm_disabled")["reason"].get<std::string>().find("--prewarm-timeout") !=
          std::string::npos);
    CHECK_FALSE(processAlive(pid));
  }
  SECTION("a cancelled start never runs") {
    Pool p({"quick_mod"});
    p.start();
    REQUIRE(p.pool->deferStart([&] { started = true; }));
    p.pool->cancelDeferred();
    p.await("standby_ready");
    p.io.restart();
    p.io.poll();
    CHECK_FALSE(started);
  }
}

TEST_CASE("stop() ends every standby", "[agent][prewarm]") {
  if (!havePython()) DTRUN_SKIP(kPython << " is missing");
  Pool p({"quick_mod"});
  p.config.nprocPerNode = 2;
  p.start();
  p.await("standby_ready", 2);
  std::vector<int> pids;
  for (const auto& r : p.records("standby_ready")) pids.push_back(r["pid"]);
  std::set<int> listed;
  p.pool->addPids(listed);
  CHECK(listed == std::set<int>(pids.begin(), pids.end()));
  p.pool->stop();
  for (int pid : pids) CHECK_FALSE(processAlive(pid));
  CHECK_FALSE(p.pool->enabled());
}
