// Uses the installed dtrun_worker the way a native worker does: parse an environment, talk to a
// real `dtrun store` (started here from argv[1]), write an error file, and, when the package was
// built with NCCL, make a unique id through the store.
#include <dtrun/worker/error_file.h>
#include <dtrun/worker/worker.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#if DTRUN_WORKER_HAS_NCCL
#include <dtrun/worker/communicator.h>
#endif

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++failures;
}

// Starts `dtrun store --host 127.0.0.1 --port 0`; returns its pid and port.
std::pair<pid_t, int> startStore(const char* dtrun) {
  int fds[2];
  if (::pipe(fds) != 0) std::exit(2);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::execl(dtrun, dtrun, "store", "--host", "127.0.0.1", "--port", "0", "--log-level", "warn",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string line;
  char c = 0;
  while (::read(fds[0], &c, 1) == 1 && c != '\n') line += c;
  ::close(fds[0]);
  auto colon = line.rfind(':');
  if (colon == std::string::npos) {
    std::fprintf(stderr, "dtrun store printed '%s'\n", line.c_str());
    std::exit(2);
  }
  return {pid, std::atoi(line.c_str() + colon + 1)};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: consumer /path/to/dtrun\n");
    return 2;
  }
  auto [storePid, port] = startStore(argv[1]);
  std::map<std::string, std::string> vars = {{"RANK", "0"},
                                             {"LOCAL_RANK", "0"},
                                             {"WORLD_SIZE", "1"},
                                             {"LOCAL_WORLD_SIZE", "1"},
                                             {"GROUP_RANK", "0"},
                                             {"MASTER_ADDR", "127.0.0.1"},
                                             {"MASTER_PORT", std::to_string(port)},
                                             {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                             {"TORCHELASTIC_RESTART_COUNT", "2"}};
  auto env = dtrun::worker::parseWorkerEnv([&](const std::string& n) -> std::optional<std::string> {
    auto it = vars.find(n);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  });
  check(env.storePrefix() == "/worker/attempt_2", "environment parsed");
  try {
    dtrun::worker::Worker worker(env);
    worker.barrier();
    check(worker.broadcast("from the consumer", 0) == "from the consumer", "broadcast");
    worker.store().set("consumer", "value");
    check(worker.get("consumer", std::chrono::seconds(5)) == "value", "store set/get");
    check(!worker.abortRequested(), "no abort");
#if DTRUN_WORKER_HAS_NCCL
    auto id = dtrun::worker::exchangeUniqueId(worker, "consumer/id", true, std::chrono::seconds(5));
    check(worker.store().get("consumer/id", std::chrono::seconds(5)).size() == 1 + sizeof(id),
          "NCCL unique id through the store");
    int version = 0;
    DTRUN_NCCL_CHECK(ncclGetVersion(&version), "consumer");
    check(version >= 21900, "NCCL version " + std::to_string(version));
#endif
  } catch (const std::exception& e) {
    check(false, std::string("worker: ") + e.what());
  }
  ::kill(storePid, SIGTERM);
  ::waitpid(storePid, nullptr, 0);

  auto record = dtrun::worker::makeErrorRecord("consumer record");
  check(dtrun::worker::parseErrorRecord(dtrun::worker::formatErrorRecord(record)).message ==
            "consumer record",
        "error record round trip");
  check(dtrun::worker::abortKey(2) == "dtrun/abort/2", "abort key");
  std::printf("consumer: %d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
