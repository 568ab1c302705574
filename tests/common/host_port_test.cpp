// common/host_port.h: the one host:port reader (once four: the command line's, etcd's member
// list's, and two for addresses agents leave in the store) and its writer. The copies disagreed
// on brackets: the store readers took "[::1]:5" for the host "[::1]", the command line's took
// "[::1]x" as the port "1]x"; and on "host:" (etcd's default port, the others' error).
#include "common/host_port.h"

#include <catch2/catch.hpp>
#include <string>
#include <utility>

using dtrun::HostPort;
using dtrun::HostPortError;
using dtrun::hostPortText;
using dtrun::splitHostPort;

namespace {

std::pair<std::string, int> split(const std::string& text) {
  const HostPort hp = splitHostPort(text);
  return {hp.host, hp.port ? static_cast<int>(*hp.port) : -1};
}

}  // namespace

TEST_CASE("splitHostPort: names, IPv4, bracketed IPv6, with and without a port", "[common]") {
  using P = std::pair<std::string, int>;
  CHECK(split("head") == P{"head", -1});
  CHECK(split("head:1234") == P{"head", 1234});
  CHECK(split("10.0.0.1:65535") == P{"10.0.0.1", 65535});
  CHECK(split("node:0") == P{"node", 0});  // a port of 0 is the caller's to refuse
  CHECK(split("[::1]") == P{"::1", -1});
  CHECK(split("[::1]:5") == P{"::1", 5});
  CHECK(split("[2001:db8::7]:29401") == P{"2001:db8::7", 29401});
  // torch's rule without brackets: the last ':' starts the port.
  CHECK(split("fe80::1") == P{"fe80:", 1});
  CHECK(split("::1:29500") == P{"::1", 29500});
  // The host is the caller's to judge.
  CHECK(split(":1") == P{"", 1});
  CHECK(split("[]") == P{"", -1});
}

TEST_CASE("splitHostPort refuses bad ports and brackets, saying which", "[common]") {
  for (std::string bad : {"head:", "head:65536", "head:123456", "head:abc", "head:-1", "head: 1",
                          "head:1x", "head:+1", "[::1]:", "[::1]:99999"}) {
    INFO(bad);
    try {
      splitHostPort(bad);
      FAIL("accepted");
    } catch (const HostPortError& e) {
      CHECK(e.inPort());
      CHECK(std::string(e.what()) == "port '" + e.port() + "' is not a number from 0 to 65535");
      CHECK(bad.substr(bad.size() - e.port().size()) == e.port());
    }
  }
  for (std::string bad : {"[::1", "[::1]x", "[::1]x:5", "[::1]]:5"}) {
    INFO(bad);
    try {
      splitHostPort(bad);
      FAIL("accepted");
    } catch (const HostPortError& e) {
      CHECK_FALSE(e.inPort());
      CHECK(e.port().empty());
    }
  }
  CHECK_THROWS_WITH(splitHostPort("[::1"), "unclosed '['");
  CHECK_THROWS_WITH(splitHostPort("[::1]x"), "expected ':' after ']'");
}

TEST_CASE("hostPortText brackets IPv6 and reads back", "[common]") {
  CHECK(hostPortText("head", 29500) == "head:29500");
  CHECK(hostPortText("10.0.0.1", 0) == "10.0.0.1:0");
  CHECK(hostPortText("::1", 29500) == "[::1]:29500");
  CHECK(hostPortText("fe80::1%eth0", 1) == "[fe80::1%eth0]:1");
  for (std::string host : {"head", "127.0.0.2", "::1", "2001:db8::7"}) {
    INFO(host);
    const HostPort back = splitHostPort(hostPortText(host, 4242));
    CHECK(back.host == host);
    CHECK(back.port == 4242);
  }
}
