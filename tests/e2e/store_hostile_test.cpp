// The hostile-client suite (tests/rendezvous/hostile_cases.h) against the real binary: `dtrun
// store`, and the store a dtrun agent hosts while a real job runs. Each case must leave the store
// serving its other clients and its contents as they were; the job must finish with exit code 0,
// so a store that died of a client (bad_alloc, abort) would end the job and fail the test. Also:
// a single-node run with an explicit endpoint port listens on loopback only.
#include <sys/stat.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <sstream>
#include <tuple>

#include "common/free_port.h"
#include "tests/e2e/e2e_support.h"
#include "tests/rendezvous/hostile_cases.h"
#include "tests/support/test_support.h"

namespace dtrun::e2e {
namespace {

using Catch::Matchers::Contains;

// The listening sockets on `port` in /proc/net/tcp{,6}, as "ADDR:PORT" hex (0100007F = 127.0.0.1).
std::vector<std::string> listenersOn(int port) {
  std::vector<std::string> out;
  char hexPort[8];
  std::snprintf(hexPort, sizeof(hexPort), "%04X", port);
  for (const char* file : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      if (state == "0A" && local.size() > 5 && local.substr(local.size() - 4) == hexPort) {
        out.push_back(local);
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("hostile clients against `dtrun store`", "[e2e][store][hostile]") {
  test::TempDir tmp;
  std::vector<std::string> args = {"store", "--host=127.0.0.1", "--port=0"};
  for (const auto& a : rendezvous::test::hostileStoreArgs()) args.push_back(a);
  Launch store(args, tmp.path());
  REQUIRE(test::pollUntil([&] { return store.out().find('\n') != std::string::npos; }));
  const std::string addr = store.out().substr(0, store.out().find('\n'));
  const auto port = static_cast<std::uint16_t>(std::stoi(addr.substr(addr.rfind(':') + 1)));
  for (const auto& name : rendezvous::test::hostileCaseNames()) {
    INFO("dtrun store stderr:\n" << store.err());
    rendezvous::test::runHostileCase(name, port);
  }
  // Keys reach the log escaped; the flood became a few lines and a count.
  CHECK(test::pollUntil([&] { return store.err().find("more in the last") != std::string::npos; },
                        std::chrono::seconds(30)));
  CHECK_THAT(store.err(), Contains("t\\nINJECTED"));
  CHECK(store.err().find("\nINJECTED") == std::string::npos);
  store.signal(SIGTERM);
  auto exit = store.wait();
  REQUIRE(exit);
  CHECK(exit->exited());
  CHECK(exit->code == 0);
}

TEST_CASE("hostile clients against the store an agent hosts while a job runs",
          "[e2e][store][hostile]") {
  test::TempDir tmp;
  Launch dtrun(withWorker({"--standalone", "--nproc-per-node=2",
                           "--rdzv-conf=" + rendezvous::test::hostileRdzvConf()},
                          {"env", "wait=go", "exit=0"}),
               tmp.path());
  const auto w = dtrun.workDir();
  INFO("dtrun stderr:\n" << dtrun.err());
  REQUIRE(waitForFile(workerFile(w, "env", 0, 0)));
  const auto env = readEnvFile(workerFile(w, "env", 0, 0));
  REQUIRE(env.count("MASTER_PORT") == 1);
  const auto port = static_cast<std::uint16_t>(std::stoi(env.at("MASTER_PORT")));
  for (const auto& name : rendezvous::test::hostileCaseNames()) {
    rendezvous::test::runHostileCase(name, port);
    REQUIRE(test::processAlive(dtrun.pid()));
  }
  std::ofstream(w / "go").close();
  auto exit = dtrun.wait();
  REQUIRE(exit);
  CHECK(exit->exited());
  CHECK(exit->code == 0);
}

TEST_CASE("`dtrun store --token-file`: an unsafe or missing file is a one-line usage error",
          "[e2e][store][token]") {
  test::TempDir tmp;
  const std::string open = (tmp.path() / "open").string();
  test::writeFile(open, "0123456789abcdef-secret\n");
  ::chmod(open.c_str(), 0644);
  for (const auto& [args, env, culprit] :
       std::vector<std::tuple<std::vector<std::string>, std::string, std::string>>{
           {{"store", "--port=0", "--token-file=" + open}, "", "--token-file " + open},
           {{"store", "--port=0"}, (tmp.path() / "missing").string(), "DTRUN_RDZV_TOKEN_FILE"}}) {
    std::map<std::string, std::optional<std::string>> vars;
    if (!env.empty()) vars["DTRUN_RDZV_TOKEN_FILE"] = env;
    Launch store(args, tmp.path(), vars);
    auto exit = store.wait();
    REQUIRE(exit);
    CHECK(exit->code == 2);
    const std::string err = store.err();
    INFO("stderr: " << err);
    // argparse's shape: the usage line, then one line that names the culprit.
    CHECK_THAT(err, Contains("dtrun store: error: " + culprit));
    CHECK(std::count(err.begin(), err.end(), '\n') == 2);
  }
}

TEST_CASE("a single-node run with an explicit endpoint port listens on loopback only",
          "[e2e][store]") {
  test::TempDir tmp;
  const int port = pickFreePort();
  Launch dtrun(withWorker({"--nnodes=1", "--nproc-per-node=1", "--rdzv-backend=c10d",
                           "--rdzv-endpoint=localhost:" + std::to_string(port)},
                          {"wait=go", "exit=0"}),
               tmp.path());
  INFO("dtrun stderr:\n" << dtrun.err());
  REQUIRE(test::pollUntil([&] { return !listenersOn(port).empty(); }));
  for (const auto& local : listenersOn(port)) {
    INFO("listening on " << local);
    // 127.0.0.1 in /proc's byte order, as IPv4 or IPv4-mapped IPv6; never 0.0.0.0 or ::.
    CHECK((local.rfind("0100007F:", 0) == 0 ||
           local.rfind("0000000000000000FFFF00000100007F:", 0) == 0));
  }
  std::ofstream(dtrun.workDir() / "go").close();
  auto exit = dtrun.wait();
  REQUIRE(exit);
  CHECK(exit->code == 0);
}

}  // namespace dtrun::e2e
