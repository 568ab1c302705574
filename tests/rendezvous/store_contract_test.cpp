// The Store contract: the same assertions on every implementation (gloo's transport matrix).
#include <spdlog/sinks/null_sink.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <memory>
#include <thread>

#include "rendezvous/error.h"
#include "rendezvous/in_memory_store.h"
#include "rendezvous/prefix_store.h"
#include "rendezvous/store_server.h"
#include "rendezvous/tcp_store.h"

using namespace dtrun::rendezvous;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<spdlog::logger> quietLogger() {
  return std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
}

// A StoreServer on loopback port 0, run by its own thread for the fixture's lifetime.
class ServerThread {
 public:
  ServerThread() : server_(io_, options(), quietLogger()) {
    server_.start();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~ServerThread() {
    boost::asio::post(io_, [this] { server_.stop(); });
    thread_.join();
  }
  std::uint16_t port() const { return server_.endpoint().port(); }

 private:
  static StoreServerOptions options() {
    StoreServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    return o;
  }
  boost::asio::io_context io_{1};
  StoreServer server_;
  std::thread thread_;
};

struct InMemoryFactory {
  std::shared_ptr<InMemoryStore> shared = std::make_shared<InMemoryStore>();
  std::shared_ptr<Store> make() { return shared; }
};

struct PrefixFactory {
  std::shared_ptr<InMemoryStore> shared = std::make_shared<InMemoryStore>();
  std::shared_ptr<Store> make() { return std::make_shared<PrefixStore>("job/7", shared); }
};

template <wire::Dialect D>
struct TcpFactory {
  ServerThread server;
  std::shared_ptr<Store> make() {
    TcpStoreOptions o;
    o.port = server.port();
    o.dialect = D;
    o.timeout = 10s;
    return std::make_shared<TcpStore>(o);
  }
};
using Tcp2Factory = TcpFactory<wire::Dialect::kTorch2>;
using Tcp113Factory = TcpFactory<wire::Dialect::kTorch113>;

}  // namespace

TEMPLATE_TEST_CASE("store contract: set, get, add, compareSet", "[store]", InMemoryFactory,
                   PrefixFactory, Tcp2Factory, Tcp113Factory) {
  TestType factory;
  auto a = factory.make();
  auto b = factory.make();

  a->set("k", "v1");
  CHECK(b->get("k", 1s) == "v1");
  a->set("bin", std::string("\0x\0", 3));
  CHECK(b->get("bin", 1s) == std::string("\0x\0", 3));

  CHECK(a->add("n", 5) == 5);
  CHECK(b->add("n", -7) == -2);
  CHECK(a->get("n", 1s) == "-2");

  CHECK(a->compareSet("cas", "", "first") == "first");
  CHECK(a->compareSet("cas", "wrong", "second") == "first");
  CHECK(a->compareSet("cas", "first", "third") == "third");
  // torch's quirk: a missing key with a non-empty `expected` answers `expected`, stores nothing.
  CHECK(a->compareSet("missing", "exp", "des") == "exp");
  CHECK_FALSE(a->check({"missing"}));
}

TEMPLATE_TEST_CASE("store contract: wait wakes on a write from another client", "[store]",
                   InMemoryFactory, PrefixFactory, Tcp2Factory, Tcp113Factory) {
  TestType factory;
  auto waiter = factory.make();
  auto writer = factory.make();
  CHECK_THROWS_AS(waiter->wait({"late"}, 100ms), dtrun::TimeoutError);
  std::thread t([&] { writer->set("late", "x"); });
  waiter->wait({"late"}, 10s);
  t.join();
  CHECK(waiter->check({"late"}));
}
