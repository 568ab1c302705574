// The launch plan (launcher/launch_plan.h) over every kind of configuration, from whole command
// lines on machines described by hand: which job link, who serves the store, where it listens,
// and what the agent and its workers are told. Every row checks the plan's invariant: every
// address anyone is told to connect to is one the store listens on (before and after the store
// says which free port it got).
#include "launcher/launch_plan.h"

#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/host_port.h"
#include "launcher/cli.h"
#include "launcher/multi_host_plan.h"
#include "tests/launcher/launcher_test_util.h"
#include "tests/support/test_support.h"

using namespace dtrun::launcher;
using namespace std::chrono_literals;
using dtrun::agent::LaunchConfig;
using Args = std::vector<std::string>;
using Env = std::map<std::string, std::string>;

namespace {

// node0: 10.0.0.5 and fd00::5 on its interfaces; its /etc/hosts maps its own name to 127.0.1.1
// (Debian's default), "localhost" to both loopbacks; node1 is another machine.
HostFacts node0() {
  HostFacts f;
  f.hostName = "node0";
  f.fqdn = "node0.cluster";
  f.pid = 4242;
  f.localAddresses = {"127.0.0.1", "::1", "10.0.0.5", "fd00::5"};
  f.resolved = {{"localhost", {"127.0.0.1", "::1"}},
                {"node0", {"127.0.1.1"}},
                {"node0.cluster", {"10.0.0.5"}},
                {"node1", {"10.0.0.6"}},
                {"gone.invalid", {}}};
  return f;
}

HostFacts node1() {
  HostFacts f = node0();
  f.hostName = "node1";
  f.fqdn = "node1.cluster";
  f.localAddresses = {"127.0.0.1", "::1", "10.0.0.6"};
  f.resolved["node0"] = {"10.0.0.5"};
  return f;
}

LaunchConfig parse(const Args& args) {
  dtrun::test::TempDir dev;
  return parseCommandLine(args, Env{}, testing::fakeProbe(dev.path(), dev.path()));
}

std::string told(const std::optional<dtrun::agent::WorkerStore>& ws) {
  return ws ? dtrun::hostPortText(ws->addr, ws->port) : "-";
}

// The invariant, checked on `plan` as made and after the store listens on `port`. With is_host
// given, the user says the endpoint reaches this machine although it names none of its
// addresses (a Kubernetes service, a floating address): then only the agent's own connection is
// this machine's business.
void checkInvariant(LaunchPlan plan, const HostFacts& facts, std::uint16_t port,
                    bool endpointClaimed = false) {
  if (plan.storeRole == StoreRole::kNone) return;
  REQUIRE_FALSE(plan.store.hosts.empty());
  auto check = [&](const LaunchPlan& p) {
    const bool workers[] = {false, true};
    for (bool isWorkers : workers) {
      const auto ws = isWorkers ? p.workersConnect() : p.agentConnects();
      if (!ws || (endpointClaimed && isWorkers)) continue;
      INFO("listening on " << p.store.hosts.size() << " hosts, first " << p.store.hosts.front()
                           << "; told " << told(ws));
      CHECK(listensFor(p.store.hosts, ws->addr, facts));
      CHECK(ws->port == p.store.port);
    }
  };
  check(plan);
  plan.served(port);
  CHECK(plan.store.port == port);
  check(plan);
}

struct Row {
  const char* what;
  Args args;
  HostFacts facts;
  JobKind kind;
  StoreRole role;
  std::vector<std::string> listen;  // when the role is not kNone
  std::string agentTold;            // "-": none
  std::string workersTold;          // "-": none
};

}  // namespace

TEST_CASE("launch plan: every configuration, and the invariant", "[launcher][plan]") {
  const std::vector<Row> rows = {
      {"standalone",
       {"--standalone", "--nproc-per-node=2", "t.py"},
       node0(),
       JobKind::kLocal,
       StoreRole::kServe,
       {"127.0.0.1"},
       "-",
       "127.0.0.1:0"},
      {"standalone, workers serve their own store",
       {"--standalone", "--no-agent-store", "t.py"},
       node0(),
       JobKind::kLocal,
       StoreRole::kNone,
       {},
       "-",
       "-"},
      {"one node, no endpoint (a free port)",
       {"t.py"},
       node0(),
       JobKind::kLocal,
       StoreRole::kServe,
       {"127.0.0.1", "::1"},
       "-",
       "localhost:0"},
      {"one node, endpoint a name of this machine (127.0.1.1)",
       {"--rdzv-endpoint=node0:29400", "t.py"},
       node0(),
       JobKind::kC10d,
       StoreRole::kServeOrJoin,
       {"127.0.1.1"},
       "127.0.1.1:29400",
       "node0:29400"},
      {"one node, endpoint 127.0.0.1",
       {"--rdzv-endpoint=127.0.0.1:29400", "t.py"},
       node0(),
       JobKind::kC10d,
       StoreRole::kServeOrJoin,
       {"127.0.0.1"},
       "127.0.0.1:29400",
       "127.0.0.1:29400"},
      {"one node, endpoint another 127.x",
       {"--rdzv-endpoint=127.0.0.2:29400", "t.py"},
       node0(),
       JobKind::kC10d,
       StoreRole::kServeOrJoin,
       {"127.0.0.2"},
       "127.0.0.2:29400",
       "127.0.0.2:29400"},
      {"one node, endpoint ::1",
       {"--rdzv-endpoint=[::1]:29400", "t.py"},
       node0(),
       JobKind::kC10d,
       StoreRole::kServeOrJoin,
       {"::1"},
       "[::1]:29400",
       "[::1]:29400"},
      {"one node, endpoint an IPv6 address of this machine",
       {"--rdzv-endpoint=[fd00::5]:29400", "t.py"},
       node0(),
       JobKind::kC10d,
       StoreRole::kServeOrJoin,
       {"fd00::5"},
       "[fd00::5]:29400",
       "[fd00::5]:29400"},
      {"one node, endpoint localhost (both loopbacks)",
       {"--rdzv-endpoint=localhost:29400", "t.py"},
       node0(),
       JobKind::kC10d,
       StoreRole::kServeOrJoin,
       {"127.0.0.1", "::1"},
       "127.0.0.1:29400",
       "localhost:29400"},
      {"one node, endpoint port 0 on 127.0.0.2 (a free port)",
       {"--rdzv-endpoint=127.0.0.2:0", "t.py"},
       node0(),
       JobKind::kLocal,
       StoreRole::kServe,
       {"127.0.0.2"},
       "-",
       "127.0.0.2:0"},
      {"one node, the store on another machine",
       {"--rdzv-endpoint=node1:29400", "t.py"},
       node0(),
       JobKind::kC10d,
       StoreRole::kNone,
       {},
       "node1:29400",
       "node1:29400"},
      {"many nodes, this machine hosts",
       {"--nnodes=2", "--rdzv-endpoint=node0:29400", "t.py"},
       node0(),
       JobKind::kC10d,
       StoreRole::kServeOrJoin,
       {"::"},
       "127.0.0.1:29400",
       "node0:29400"},
      {"many nodes, another machine hosts",
       {"--nnodes=2", "--rdzv-endpoint=node0:29400", "t.py"},
       node1(),
       JobKind::kC10d,
       StoreRole::kNone,
       {},
       "node0:29400",
       "node0:29400"},
      {"many nodes on ::1",
       {"--nnodes=2", "--rdzv-endpoint=[::1]:29400", "t.py"},
       node0(),
       JobKind::kC10d,
       StoreRole::kServeOrJoin,
       {"::"},
       "127.0.0.1:29400",
       "[::1]:29400"},
      {"many nodes on an IPv6 address",
       {"--nnodes=1:4", "--rdzv-endpoint=[fd00::5]:29400", "t.py"},
       node0(),
       JobKind::kC10d,
       StoreRole::kServeOrJoin,
       {"::"},
       "127.0.0.1:29400",
       "[fd00::5]:29400"},
      {"is_host=false on the endpoint's machine",
       {"--nnodes=2", "--rdzv-endpoint=node0:29400", "--rdzv-conf=is_host=false", "t.py"},
       node0(),
       JobKind::kC10d,
       StoreRole::kNone,
       {},
       "node0:29400",
       "node0:29400"},
      {"is_host=true elsewhere",
       {"--nnodes=2", "--rdzv-endpoint=node0:29400", "--rdzv-conf=is_host=true", "t.py"},
       node1(),
       JobKind::kC10d,
       StoreRole::kServe,
       {"::"},
       "127.0.0.1:29400",
       "node0:29400"},
      {"an endpoint that does not resolve",
       {"--nnodes=2", "--rdzv-endpoint=gone.invalid", "t.py"},
       node0(),
       JobKind::kC10d,
       StoreRole::kNone,
       {},
       "gone.invalid:29400",
       "gone.invalid:29400"},
      {"static, one node, --master-addr 127.0.0.2",
       {"--master-addr=127.0.0.2", "--master-port=29500", "t.py"},
       node0(),
       JobKind::kStatic,
       StoreRole::kServe,
       {"127.0.0.2"},
       "127.0.0.2:29500",
       "127.0.0.2:29500"},
      {"static, one node, --master-addr ::1",
       {"--master-addr=[::1]", "--master-port=29500", "t.py"},
       node0(),
       JobKind::kStatic,
       StoreRole::kServe,
       {"::1"},
       "[::1]:29500",
       "[::1]:29500"},
      {"static, rank 0 of 2",
       {"--nnodes=2", "--node-rank=0", "--master-addr=node0", "--master-port=29500", "t.py"},
       node0(),
       JobKind::kStatic,
       StoreRole::kServe,
       {"::"},
       "127.0.0.1:29500",
       "node0:29500"},
      {"static, rank 1 of 2",
       {"--nnodes=2", "--node-rank=1", "--master-addr=node0", "--master-port=29500", "t.py"},
       node1(),
       JobKind::kStatic,
       StoreRole::kNone,
       {},
       "node0:29500",
       "node0:29500"},
      {"etcd",
       {"--nnodes=2", "--rdzv-backend=etcd", "--rdzv-endpoint=node0:2379", "t.py"},
       node0(),
       JobKind::kEtcd,
       StoreRole::kNone,
       {},
       "-",
       "-"},
  };
  for (const auto& row : rows) {
    SECTION(row.what) {
      const LaunchConfig config = parse(row.args);
      const LaunchPlan plan = planLaunch(config, row.facts);
      CHECK(plan.kind == row.kind);
      CHECK(plan.storeRole == row.role);
      if (row.role != StoreRole::kNone) CHECK(plan.store.hosts == row.listen);
      CHECK(told(plan.agentConnects()) == row.agentTold);
      CHECK(told(plan.workersConnect()) == row.workersTold);
      checkInvariant(plan, row.facts, 41000, config.rdzv.isHost.value_or(false));
    }
  }
}

TEST_CASE("launch plan: joining another agent's store, timeouts, checks, the node",
          "[launcher][plan]") {
  SECTION("serve-or-join: the second agent on the machine is a client at the endpoint") {
    LaunchPlan plan =
        planLaunch(parse({"--nnodes=2", "--rdzv-endpoint=[::1]:29400", "t.py"}), node0());
    REQUIRE(plan.storeRole == StoreRole::kServeOrJoin);
    plan.joinInstead();
    CHECK(plan.storeRole == StoreRole::kNone);
    CHECK(told(plan.agentConnects()) == "[::1]:29400");
    CHECK(told(plan.workersConnect()) == "[::1]:29400");
    CHECK_FALSE(std::get<dtrun::agent::C10dJobOptions>(plan.job).hostsStore);
  }
  SECTION("the static backend waits as long as the store's timeout, unless join_timeout says") {
    const auto fixed = planLaunch(parse({"--master-port=29500", "t.py"}), node0());
    CHECK(fixed.joinTimeout == 600s);
    const auto given =
        planLaunch(parse({"--master-port=29500", "--rdzv-conf=join_timeout=7", "t.py"}), node0());
    CHECK(given.joinTimeout == 7s);
    const auto c10d = planLaunch(
        parse({"--rdzv-endpoint=node1:1", "--rdzv-conf=join_timeout=9,timeout=3", "t.py"}),
        node0());
    CHECK(c10d.joinTimeout == 9s);
    CHECK(std::get<dtrun::agent::C10dJobOptions>(c10d.job).store.connectTimeout == 9s);
  }
  SECTION("only a client of another's store checks that the endpoint resolves") {
    CHECK(planLaunch(parse({"--rdzv-endpoint=node1:1", "t.py"}), node0()).checkEndpointResolves);
    CHECK_FALSE(
        planLaunch(parse({"--rdzv-endpoint=node0:1", "t.py"}), node0()).checkEndpointResolves);
    CHECK_FALSE(planLaunch(parse({"--standalone", "t.py"}), node0()).checkEndpointResolves);
  }
  SECTION("the node's description, rendezvous settings and fixed rank") {
    const auto plan = planLaunch(
        parse({"--nnodes=2:3", "--nproc-per-node=3", "--role=trainer", "--rdzv-endpoint=node1:5",
               "--local-addr=10.9.9.9", "--rdzv-id=job7", "t.py"}),
        node0());
    const auto& c = std::get<dtrun::agent::C10dJobOptions>(plan.job);
    CHECK(c.me.host == "node0.cluster");
    CHECK(c.me.addr == "10.9.9.9");
    CHECK(c.me.pid == 4242);
    CHECK(c.me.nproc == 3);
    CHECK(c.me.role == "trainer");
    CHECK(c.runId == "job7");
    CHECK(c.rendezvous.minNodes == 2);
    CHECK(c.rendezvous.maxNodes == 3);
    CHECK_FALSE(c.rendezvous.fixedRank.has_value());
    const auto rank1 =
        planLaunch(parse({"--nnodes=2", "--node-rank=1", "--master-addr=node0", "t.py"}), node1());
    CHECK(std::get<dtrun::agent::C10dJobOptions>(rank1.job).rendezvous.fixedRank == 1);
  }
  SECTION("the hosted store takes the secret and the store_* limits of --rdzv-conf") {
    const auto plan = planLaunch(
        parse({"--rdzv-endpoint=node0:7", "--rdzv-conf=store_max_keys=17", "t.py"}), node0());
    CHECK(plan.store.port == 7);
    CHECK(plan.store.limits.maxKeysPerRequest == 17);
  }
  SECTION("etcd: TLS files with plain http are refused, naming the keys") {
    CHECK_THROWS_WITH(planLaunch(parse({"--rdzv-backend=etcd", "--rdzv-endpoint=node0:2379",
                                        "--rdzv-conf=cacert=/x.pem", "t.py"}),
                                 node0()),
                      Catch::Matchers::Contains("protocol=https"));
  }
  SECTION("the loopback warning for a multi-host job whose endpoint name is loopback here") {
    HostFacts f = node0();
    f.resolved["head"] = {"127.0.1.1"};
    const auto plan = planLaunch(parse({"--nnodes=2", "--rdzv-endpoint=head:1", "t.py"}), f);
    REQUIRE(plan.loopbackWarning.has_value());
    CHECK_THAT(*plan.loopbackWarning, Catch::Matchers::Contains("127.0.1.1"));
    CHECK_FALSE(planLaunch(parse({"--rdzv-endpoint=head:1", "t.py"}), f).loopbackWarning);
  }
}

TEST_CASE(
    "launch plan: a --hostfile job reduced to one host by --exclude serves that host's "
    "address",
    "[launcher][plan]") {
  dtrun::test::TempDir dir;
  HostProbe probe = testing::fakeProbe(dir.path(), dir.path());
  dtrun::test::writeFile(dir.path() / "hosts", "127.0.0.2 slots=2\n127.0.0.3 slots=2\n");
  ParsedOptions parsed = mainParser().parse(
      {"--hostfile", (dir.path() / "hosts").string(), "--exclude", "127.0.0.3", "t.py"});
  const Invocation inv = resolveInvocation(mainParser(), parsed, Env{}, probe);
  REQUIRE(inv.multiHost);
  REQUIRE(inv.multiHost->hosts.size() == 1);
  // The one agent's own command line, as its host runs it (without dtrun's path).
  std::vector<std::string> argv = inv.multiHost->agentArgv(0);
  argv.erase(argv.begin());
  const LaunchPlan plan = planLaunch(parse(argv), node0());
  CHECK(plan.kind == JobKind::kStatic);
  REQUIRE(plan.storeRole == StoreRole::kServe);
  CHECK(plan.store.hosts == std::vector<std::string>{"127.0.0.2"});
  CHECK(told(plan.workersConnect()) == "127.0.0.2:29500");
  checkInvariant(plan, node0(), 29500);
}

TEST_CASE("launch plan: listensFor", "[launcher][plan]") {
  const HostFacts f = node0();
  CHECK(listensFor({"::"}, "10.0.0.5", f));
  CHECK(listensFor({"::"}, "fd00::5", f));
  CHECK(listensFor({"::"}, "127.0.0.9", f));
  CHECK(listensFor({"::"}, "node0.cluster", f));
  CHECK_FALSE(listensFor({"::"}, "10.0.0.6", f));  // another machine's
  CHECK(listensFor({"0.0.0.0"}, "127.0.0.2", f));
  CHECK_FALSE(listensFor({"0.0.0.0"}, "::1", f));
  CHECK(listensFor({"127.0.0.2"}, "127.0.0.2", f));
  CHECK_FALSE(listensFor({"127.0.0.1"}, "127.0.0.2", f));
  CHECK_FALSE(listensFor({"127.0.0.1"}, "::1", f));
  CHECK_FALSE(listensFor({"127.0.0.1"}, "localhost", f));  // ::1 too
  CHECK(listensFor({"127.0.0.1", "::1"}, "localhost", f));
  CHECK(listensFor({"localhost"}, "localhost", f));
  CHECK(listensFor({"localhost"}, "::1", f));
  CHECK_FALSE(listensFor({"::"}, "gone.invalid", f));  // resolves to nothing
}

TEST_CASE("host facts: matchesThisMachine", "[launcher][plan]") {
  const HostFacts f = node0();
  CHECK(matchesThisMachine(f, "localhost"));
  CHECK(matchesThisMachine(f, "127.0.0.2"));
  CHECK(matchesThisMachine(f, "::1"));
  CHECK(matchesThisMachine(f, "node0"));          // its host name
  CHECK(matchesThisMachine(f, "node0.cluster"));  // its canonical name
  CHECK(matchesThisMachine(f, "10.0.0.5"));
  CHECK(matchesThisMachine(f, "fd00::5"));
  CHECK_FALSE(matchesThisMachine(f, "node1"));
  CHECK_FALSE(matchesThisMachine(f, "10.0.0.6"));
  CHECK_FALSE(matchesThisMachine(f, "gone.invalid"));
  CHECK_FALSE(matchesThisMachine(f, "unknown-name"));
}

TEST_CASE("host facts: what each launch looks up", "[launcher][plan]") {
  CHECK(namesToResolve(parse({"--standalone", "t.py"})).empty());
  CHECK(namesToResolve(parse({"t.py"})).empty());
  CHECK(namesToResolve(parse({"--rdzv-backend=etcd", "--rdzv-endpoint=e:1", "t.py"})).empty());
  CHECK(namesToResolve(parse({"--nnodes=2", "--rdzv-endpoint=head:1", "t.py"})) ==
        std::vector<std::string>{"head", "localhost"});
  CHECK(namesToResolve(parse({"--master-addr=localhost", "t.py"})) ==
        std::vector<std::string>{"localhost"});
  // The real machine: its own name and loopback are there, a bad name resolves to nothing.
  const HostFacts here = readHostFacts({"localhost", "no-such-host.invalid"});
  CHECK_FALSE(here.hostName.empty());
  CHECK(here.pid > 0);
  CHECK(here.localAddresses.count("127.0.0.1") == 1);
  REQUIRE(here.resolved.count("localhost") == 1);
  CHECK_FALSE(here.resolved.at("localhost").empty());
  CHECK(here.resolved.at("no-such-host.invalid").empty());
}
