// EtcdClient against a real 3-member etcd on loopback: the v3 JSON gateway calls, leases,
// watches, failover when members die, quorum loss, authentication and TLS.
#include "rendezvous/etcd/etcd_client.h"

#include <catch2/catch.hpp>
#include <thread>

#include "tests/etcd/etcd_cluster.h"

using namespace dtrun::rendezvous::etcd;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using dtrun::test::EtcdCluster;

namespace {

ClientOptions optionsFor(const EtcdCluster& c) {
  ClientOptions o;
  o.endpoints = parseEndpoints("test", c.endpoints(), "http");
  o.requestTimeout = 2s;
  o.retryFor = 10s;
  return o;
}

std::string errorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("parseEndpoints takes host:port and URLs, and names a bad element", "[etcd]") {
  auto eps = parseEndpoints("--rdzv-endpoint", "a:1,http://b:2,[::1]:3,c", "http");
  REQUIRE(eps.size() == 4);
  CHECK(eps[0].host == "a");
  CHECK(eps[1].port == 2);
  CHECK(eps[2].host == "::1");
  CHECK(eps[3].port == 2379);
  CHECK_THAT(errorOf([] { parseEndpoints("--rdzv-endpoint", "a:1,,b", "http"); }),
             Contains("--rdzv-endpoint") && Contains("empty"));
  CHECK_THAT(errorOf([] { parseEndpoints("--rdzv-endpoint", "https://a:1", "http"); }),
             Contains("protocol=https"));
  CHECK_THAT(errorOf([] { parseEndpoints("--rdzv-endpoint", "a:99999", "http"); }),
             Contains("'a:99999'") && Contains("port"));
  CHECK(prefixEnd("a/") == "a0");
}

TEST_CASE("etcd client: put, range, prefix delete and transactions", "[etcd]") {
  DTRUN_NEED_ETCD();
  EtcdCluster cluster;
  EtcdClient c(optionsFor(cluster));
  const std::string binary("v\0\xff\n", 4);
  c.put("job/a", binary);
  c.put("job/b", "2");
  c.put("other", "3");
  REQUIRE(c.get("job/a"));
  CHECK(c.get("job/a")->value == binary);
  CHECK_FALSE(c.get("job/none"));
  auto r = c.range("job/", prefixEnd("job/"));
  CHECK(r.kvs.size() == 2);
  CHECK(c.range("job/", prefixEnd("job/"), true).count == 2);

  // create_revision == 0: only the first creator wins.
  auto t1 = c.txn({Compare::missing("lock")}, {Op::put("lock", "me")}, {Op::get("lock")});
  CHECK(t1.succeeded);
  auto t2 = c.txn({Compare::missing("lock")}, {Op::put("lock", "you")}, {Op::get("lock")});
  CHECK_FALSE(t2.succeeded);
  REQUIRE(t2.ranges.size() == 1);
  CHECK(t2.ranges[0].kvs.at(0).value == "me");
  // mod_revision guards a read-modify-write.
  const auto seen = t2.ranges[0].kvs[0].modRevision;
  CHECK(c.txn({Compare::modRevision("lock", seen)}, {Op::put("lock", "me2")}, {}).succeeded);
  CHECK_FALSE(c.txn({Compare::modRevision("lock", seen)}, {Op::put("lock", "x")}, {}).succeeded);
  CHECK(c.txn({Compare::valueIs("lock", "me2")}, {Op::put("lock", "me3")}, {}).succeeded);
  CHECK_FALSE(c.txn({Compare::valueIs("missing", "")}, {Op::put("missing", "x")}, {}).succeeded);

  CHECK(c.remove("job/", prefixEnd("job/")) == 2);
  CHECK(c.range("job/", prefixEnd("job/"), true).count == 0);
  CHECK(c.get("other")->value == "3");
}

TEST_CASE("etcd client: keys on a lease vanish when it is revoked or expires", "[etcd]") {
  DTRUN_NEED_ETCD();
  EtcdCluster cluster;
  EtcdClient c(optionsFor(cluster));
  const auto lease = c.leaseGrant(30s);
  c.put("alive/1", "x", lease);
  CHECK(c.get("alive/1")->lease == lease);
  CHECK(c.leaseKeepAlive(lease) > 0);
  c.leaseRevoke(lease);
  CHECK_FALSE(c.get("alive/1"));
  CHECK(c.leaseKeepAlive(lease) == 0);
  c.leaseRevoke(lease);  // again: already gone is fine

  // Expiry: a 1 s lease nobody renews; its key's DELETE arrives on a watch.
  const auto shortLease = c.leaseGrant(1s);
  const auto rev = c.put("alive/2", "y", shortLease);
  auto w = c.watch("alive/2", "", rev + 1);
  auto events = w->next(Clock::now() + 30s);
  REQUIRE(events);
  CHECK(events->at(0).type == WatchEvent::Type::kDelete);
  CHECK_FALSE(c.get("alive/2"));
}

TEST_CASE("etcd client: a watch delivers every event in order, from a past revision on", "[etcd]") {
  DTRUN_NEED_ETCD();
  EtcdCluster cluster;
  EtcdClient c(optionsFor(cluster));
  const auto first = c.put("w/a", "1");
  c.put("w/b", "2");
  c.remove("w/a");
  auto w = c.watch("w/", prefixEnd("w/"), first);
  std::vector<WatchEvent> seen;
  while (seen.size() < 3) {
    auto evs = w->next(Clock::now() + 20s);
    REQUIRE(evs);
    seen.insert(seen.end(), evs->begin(), evs->end());
  }
  CHECK(seen[0].kv.key == "w/a");
  CHECK(seen[1].kv.value == "2");
  CHECK(seen[2].type == WatchEvent::Type::kDelete);
  // Nothing more: a deadline returns nullopt, and the watch resumes after the last event.
  CHECK_FALSE(w->next(Clock::now() + 200ms));
  c.put("w/c", "3");
  auto later = w->next(Clock::now() + 20s);
  REQUIRE(later);
  CHECK(later->at(0).kv.key == "w/c");
}

TEST_CASE("etcd client: one member down is invisible, a watch included", "[etcd]") {
  DTRUN_NEED_ETCD();
  EtcdCluster cluster;
  EtcdClient c(optionsFor(cluster));
  const auto rev = c.put("k", "0");
  auto w = c.watch("k", "", rev + 1);
  // The client talks to member 0 first; kill it.
  cluster.kill(0);
  for (int i = 1; i <= 20; ++i) c.put("k", std::to_string(i));
  CHECK(c.get("k")->value == "20");
  std::vector<std::string> values;
  while (values.size() < 20) {
    auto evs = w->next(Clock::now() + 30s);
    REQUIRE(evs);
    for (const auto& e : *evs) values.push_back(e.kv.value);
  }
  CHECK(values.front() == "1");
  CHECK(values.back() == "20");
  cluster.start(0);
  REQUIRE(cluster.waitHealthy());
  cluster.kill(1);
  CHECK(c.get("k")->value == "20");
}

TEST_CASE("etcd client: quorum lost fails within retryFor naming every member, then recovers",
          "[etcd]") {
  DTRUN_NEED_ETCD();
  EtcdCluster cluster;
  auto o = optionsFor(cluster);
  o.retryFor = 3s;
  EtcdClient c(o);
  c.put("q", "1");
  cluster.kill(1);
  cluster.kill(2);
  const auto t0 = Clock::now();
  const std::string msg = errorOf([&] { c.put("q", "2"); });
  const auto took = Clock::now() - t0;
  CHECK_THAT(msg, Contains("no member answered") && Contains(cluster.endpoints()));
  CHECK(took < 20s);  // bounded: retryFor plus one request timeout
  cluster.start(1);
  REQUIRE(cluster.waitHealthy());
  o.retryFor = 30s;
  EtcdClient again(o);
  again.put("q", "3");
  CHECK(again.get("q")->value == "3");
}

TEST_CASE("etcd client: no member reachable is one clear error naming the endpoints", "[etcd]") {
  ClientOptions o;
  // Ports bound and released: nothing listens there.
  o.endpoints = parseEndpoints("test", "127.0.0.1:1,127.0.0.1:2", "http");
  o.retryFor = 500ms;
  o.requestTimeout = 500ms;
  EtcdClient c(o);
  const std::string msg = errorOf([&] { c.get("x"); });
  CHECK_THAT(msg, Contains("etcd at 127.0.0.1:1,127.0.0.1:2") && Contains("connect"));
}

TEST_CASE("etcd client: authentication with a user and password", "[etcd]") {
  DTRUN_NEED_ETCD();
  EtcdCluster cluster;
  std::string out;
  REQUIRE(cluster.etcdctl({"user", "add", "root:rootpw"}, &out) == 0);
  REQUIRE(cluster.etcdctl({"auth", "enable"}, &out) == 0);
  auto o = optionsFor(cluster);
  {
    EtcdClient anonymous(o);
    CHECK_THAT(errorOf([&] { anonymous.put("a", "1"); }), Contains("requires authentication"));
  }
  o.user = "root";
  o.password = "wrong";
  {
    EtcdClient bad(o);
    const std::string msg = errorOf([&] { bad.put("a", "1"); });
    CHECK_THAT(msg, Contains("authentication as user 'root' failed") && Contains("password"));
  }
  o.password = "rootpw";
  EtcdClient good(o);
  good.put("a", "1");
  CHECK(good.get("a")->value == "1");
  auto w = good.watch("a", "", good.put("a", "2"));
  auto evs = w->next(Clock::now() + 20s);
  REQUIRE(evs);
  CHECK(evs->at(0).kv.value == "2");
}

TEST_CASE("etcd client: TLS with a CA, and bad TLS files named in one line", "[etcd]") {
  DTRUN_NEED_ETCD();
  dtrun::test::TempDir pki;
  const auto p = [&](const char* f) { return (pki.path() / f).string(); };
  const std::string script =
      "set -e; cd '" + pki.path().string() +
      "'; openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj "
      "/CN=test-ca 2>/dev/null; openssl req -newkey rsa:2048 -nodes -keyout server.key -out "
      "server.csr -subj /CN=127.0.0.1 2>/dev/null; printf 'subjectAltName=IP:127.0.0.1\\n' > "
      "ext; openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out "
      "server.pem -days 2 -extfile ext 2>/dev/null; openssl req -x509 -newkey rsa:2048 -nodes "
      "-keyout other.key -out other.pem -days 2 -subj /CN=other 2>/dev/null";
  REQUIRE(std::system(script.c_str()) == 0);
  EtcdCluster cluster(3, {"--cert-file", p("server.pem"), "--key-file", p("server.key")}, "https");
  ClientOptions o;
  o.endpoints = parseEndpoints("test", cluster.endpoints(), "https");
  o.tls = true;
  o.cacert = p("ca.pem");
  o.retryFor = 2s;
  {
    EtcdClient c(o);
    c.put("t", "1");
    CHECK(c.get("t")->value == "1");
  }
  o.cacert = p("other.pem");  // a CA that did not sign the members' certificate
  {
    EtcdClient c(o);
    CHECK_THAT(errorOf([&] { c.get("t"); }), Contains("TLS handshake failed"));
  }
  o.cacert = p("nothing-here.pem");
  CHECK_THAT(errorOf([&] { EtcdClient c(o); }), Contains("cacert") && Contains("nothing-here"));
  o.cacert = p("ext");  // a file, but no certificate in it
  CHECK_THAT(errorOf([&] { EtcdClient c(o); }), Contains("cacert") && Contains("'" + p("ext")));
  o.cacert = p("ca.pem");
  o.cert = p("server.pem");
  o.key = p("other.key");
  CHECK_THAT(errorOf([&] { EtcdClient c(o); }), Contains("does not match"));
  // Plain HTTP against TLS members: the error says what was tried.
  ClientOptions plain;
  plain.endpoints = o.endpoints;
  plain.retryFor = 1s;
  plain.requestTimeout = 1s;
  EtcdClient c(plain);
  CHECK_THAT(errorOf([&] { c.get("t"); }), Contains("no member answered"));
}
