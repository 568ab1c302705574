// DeepSpeed's resource pool (launcher/hostfile.h): the hostfile, --include/--exclude,
// --num-nodes/--num-gpus, .dtrun_env files and the variables that travel. The expected answers
// are DeepSpeed's runner.py (_parse_hostfile, parse_resource_filter) where it has one.
#include "launcher/hostfile.h"

#include <catch2/catch.hpp>

using namespace dtrun::launcher;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using Hosts = std::vector<HostSlots>;
using Slots = std::vector<int>;

namespace {

const Hosts kPool = {{"worker-0", {0, 1, 2, 3}}, {"worker-1", {0, 1, 2, 3}}, {"worker-2", {0, 1}}};

std::string hostfileError(const std::string& text) {
  try {
    parseHostfile(text, "hosts.txt");
  } catch (const UsageError& e) {
    return e.what();
  }
  FAIL_CHECK("no UsageError");
  return "";
}

Hosts include(const std::string& spec) {
  GivenValue v{spec, "--include"};
  return filterHosts(kPool, &v, nullptr);
}
Hosts exclude(const std::string& spec) {
  GivenValue v{spec, "-e"};
  return filterHosts(kPool, nullptr, &v);
}
std::string filterError(const std::string& inc, const std::string& exc) {
  GivenValue i{inc, "--include"}, e{exc, "--exclude"};
  try {
    filterHosts(kPool, inc.empty() ? nullptr : &i, exc.empty() ? nullptr : &e);
  } catch (const UsageError& err) {
    return err.what();
  }
  FAIL_CHECK("no UsageError");
  return "";
}

}  // namespace

TEST_CASE("hostfile: HOST slots=N lines, comments, one line per host", "[launcher][hostfile]") {
  CHECK(parseHostfile("worker-0 slots=2\nworker-1 slots=1\n", "h") ==
        Hosts{{"worker-0", {0, 1}}, {"worker-1", {0}}});
  // Comments, blank lines, blanks around, and whatever follows slots=N (DeepSpeed ignores it).
  CHECK(parseHostfile("# the cluster\n\n  a\tslots=3   # big one\n\t\nb slots=1 max_slots=8\n",
                      "h") == Hosts{{"a", {0, 1, 2}}, {"b", {0}}});
  CHECK(parseHostfile("127.0.0.2 slots=1\n127.0.0.3 slots=1", "h").size() == 2);

  CHECK(hostfileError("a slots=2\nb\n") == "hosts.txt:2: expected 'HOST slots=N', got 'b'");
  CHECK(hostfileError("a slots=x\n") ==
        "hosts.txt:1: invalid slot count in 'a slots=x': expected slots=N with N >= 1");
  CHECK(hostfileError("a slots=0\n") ==
        "hosts.txt:1: invalid slot count in 'a slots=0': expected slots=N with N >= 1");
  CHECK(hostfileError("a slots=2x\n") ==
        "hosts.txt:1: invalid slot count in 'a slots=2x': expected slots=N with N >= 1");
  CHECK(hostfileError("a slots=1\n\na slots=2\n") ==
        "hosts.txt:3: host 'a' appears twice; give each host one line");
  CHECK(hostfileError("-oProxyCommand=x slots=1\n") ==
        "hosts.txt:1: invalid host name '-oProxyCommand=x': it may not start with '-' or "
        "contain '@'");
  CHECK(hostfileError("# nothing\n\n") ==
        "hosts.txt: no host in the hostfile (lines 'HOST slots=N')");
  CHECK(hostfileError("") == "hosts.txt: no host in the hostfile (lines 'HOST slots=N')");
}

TEST_CASE("include keeps what it names, in the hostfile's order", "[launcher][hostfile]") {
  CHECK(include("worker-1") == Hosts{{"worker-1", {0, 1, 2, 3}}});
  // DeepSpeed's own example: all of worker-0, slots 0 and 2 of worker-1.
  CHECK(include("worker-0@worker-1:0,2") ==
        Hosts{{"worker-0", {0, 1, 2, 3}}, {"worker-1", {0, 2}}});
  // Node ranks follow the hostfile, not the order of the filter.
  CHECK(include("worker-2@worker-0:1") == Hosts{{"worker-0", {1}}, {"worker-2", {0, 1}}});
  // Slots keep the order given (they become CUDA_VISIBLE_DEVICES) without duplicates, and two
  // specs of one host add up.
  CHECK(include("worker-1:3,1,3") == Hosts{{"worker-1", {3, 1}}});
  CHECK(include("worker-1:0@worker-1:2") == Hosts{{"worker-1", {0, 2}}});
}

TEST_CASE("DeepSpeed's include: its slots taken as they are, sorted", "[launcher][hostfile]") {
  GivenValue v{"worker-1:3,1,3@worker-2:9", "--include"};
  CHECK(filterHosts(kPool, &v, nullptr, IncludeSlots::kDeepSpeed) ==
        Hosts{{"worker-1", {1, 3}}, {"worker-2", {9}}});
  GivenValue bare{"worker-2", "--include"};
  CHECK(filterHosts(kPool, &bare, nullptr, IncludeSlots::kDeepSpeed) ==
        Hosts{{"worker-2", {0, 1}}});
  // An exclude is checked either way, and a host must be in the pool.
  GivenValue ex{"worker-2:5", "--exclude"};
  CHECK_THROWS_WITH(filterHosts(kPool, nullptr, &ex, IncludeSlots::kDeepSpeed),
                    StartsWith("--exclude: host 'worker-2' has no slot 5"));
  GivenValue unknown{"worker-9:0", "--include"};
  CHECK_THROWS_WITH(filterHosts(kPool, &unknown, nullptr, IncludeSlots::kDeepSpeed),
                    StartsWith("--include: host 'worker-9'"));
}

TEST_CASE("exclude removes hosts or slots", "[launcher][hostfile]") {
  // DeepSpeed's example: everything but slot 0 of worker-1.
  CHECK(exclude("worker-1:0") ==
        Hosts{{"worker-0", {0, 1, 2, 3}}, {"worker-1", {1, 2, 3}}, {"worker-2", {0, 1}}});
  CHECK(exclude("worker-0@worker-2:1") == Hosts{{"worker-1", {0, 1, 2, 3}}, {"worker-2", {0}}});
  // A host left without slots is gone.
  CHECK(exclude("worker-2:0,1") == Hosts{{"worker-0", {0, 1, 2, 3}}, {"worker-1", {0, 1, 2, 3}}});
  CHECK(exclude("worker-2:1@worker-2:1") ==
        Hosts{{"worker-0", {0, 1, 2, 3}}, {"worker-1", {0, 1, 2, 3}}, {"worker-2", {0}}});
}

TEST_CASE("filters that cannot be met are usage errors", "[launcher][hostfile]") {
  CHECK(filterError("worker-0", "worker-1") ==
        "--include and --exclude exclude each other: give one of them");
  CHECK(filterError("worker-9", "") ==
        "--include: host 'worker-9' of 'worker-9' is not in the hostfile");
  CHECK(filterError("worker-0@worker-7:1", "") ==
        "--include: host 'worker-7' of 'worker-0@worker-7:1' is not in the hostfile");
  CHECK(filterError("worker-2:2", "") ==
        "--include: host 'worker-2' has no slot 2 (the hostfile gives it slots 0 to 1)");
  CHECK(filterError("worker-2:a", "") ==
        "--include: invalid slot 'a' in 'worker-2:a': expected HOST:SLOT[,SLOT...] with slot "
        "numbers");
  CHECK(filterError("worker-2:", "") ==
        "--include: invalid slot '' in 'worker-2:': expected HOST:SLOT[,SLOT...] with slot "
        "numbers");
  CHECK(filterError("worker-0@@worker-1", "") ==
        "--include: empty host in 'worker-0@@worker-1': expected HOST[:SLOT,...][@HOST[:SLOT,"
        "...]...]");
  CHECK(filterError("", "worker-0@worker-1@worker-2") ==
        "--exclude worker-0@worker-1@worker-2: leaves no host to run on");
  CHECK(filterHosts(kPool, nullptr, nullptr) == kPool);
}

TEST_CASE("num-nodes and num-gpus", "[launcher][hostfile]") {
  GivenValue two{"2", "--num-nodes"}, four{"4", "--num_nodes"}, zero{"0", "--num-nodes"};
  GivenValue g3{"3", "--num-gpus"};
  CHECK(limitHosts(kPool, &two, nullptr) ==
        Hosts{{"worker-0", {0, 1, 2, 3}}, {"worker-1", {0, 1, 2, 3}}});
  // At most G: a host with fewer slots keeps its own.
  CHECK(limitHosts(kPool, nullptr, &g3) ==
        Hosts{{"worker-0", {0, 1, 2}}, {"worker-1", {0, 1, 2}}, {"worker-2", {0, 1}}});
  CHECK(limitHosts(kPool, &two, &g3) == Hosts{{"worker-0", {0, 1, 2}}, {"worker-1", {0, 1, 2}}});
  CHECK(limitHosts(kPool, nullptr, nullptr) == kPool);
  CHECK_THROWS_WITH(limitHosts(kPool, &four, nullptr),
                    "--num_nodes 4: only 3 host(s) to choose from");
  CHECK_THROWS_WITH(limitHosts(kPool, &zero, nullptr),
                    "--num-nodes: invalid value '0': expected an integer from 1 to 1048576");
}

TEST_CASE(".dtrun_env: KEY=VALUE lines", "[launcher][hostfile]") {
  using Vars = std::vector<std::pair<std::string, std::string>>;
  CHECK(parseEnvFile("# comment\nNCCL_DEBUG=INFO\n\nexport A_B=x=y\nQ=\"two words\"\nS='s'\nE=\n",
                     "f") ==
        Vars{{"NCCL_DEBUG", "INFO"}, {"A_B", "x=y"}, {"Q", "two words"}, {"S", "s"}, {"E", ""}});
  CHECK(parseEnvFile("  SPACED=1  \n", "f") == Vars{{"SPACED", "1"}});
  CHECK(parseEnvFile("NCCL_DEBUG = INFO\nB= 'x y'\n", "f") ==
        Vars{{"NCCL_DEBUG", "INFO"}, {"B", "x y"}});
  CHECK_THROWS_WITH(parseEnvFile("OK=1\nno equals\n", "/h/.dtrun_env"),
                    "/h/.dtrun_env:2: expected KEY=VALUE with KEY a variable name, got 'no "
                    "equals'");
  CHECK_THROWS_WITH(parseEnvFile("1X=2\n", "f"), StartsWith("f:1: expected KEY=VALUE"));
  CHECK_THROWS_WITH(parseEnvFile("A-B=2\n", "f"), StartsWith("f:1: expected KEY=VALUE"));
  CHECK_THROWS_WITH(parseEnvFile("=2\n", "f"), StartsWith("f:1: expected KEY=VALUE"));
}

TEST_CASE("which of the launching shell's variables travel", "[launcher][hostfile]") {
  for (const char* yes : {"PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONUNBUFFERED", "NCCL_DEBUG",
                          "TORCH_NCCL_ASYNC_ERROR_HANDLING", "CUDA_HOME", "CUDA_LAUNCH_BLOCKING",
                          "OMP_NUM_THREADS", "UCX_TLS", "FI_PROVIDER"}) {
    INFO(yes);
    CHECK(isExportedVariable(yes));
  }
  for (const char* no :
       {"CUDA_VISIBLE_DEVICES", "HOME", "USER", "SSH_AUTH_SOCK", "LD_PRELOAD", "PATHX",
        "MASTER_ADDR", "RANK", "PET_NNODES", "TORCHELASTIC_RUN_ID", "FIX", "NCCL"}) {
    INFO(no);
    CHECK_FALSE(isExportedVariable(no));
  }
}
