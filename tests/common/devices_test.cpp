// common/devices.h: CUDA_VISIBLE_DEVICES as torch reads it, and the GPUs a process would see.
#include "common/devices.h"

#include <catch2/catch.hpp>

#include "tests/support/test_support.h"

using dtrun::countVisibleGpus;
using dtrun::parseVisibleDevices;
using Strings = std::vector<std::string>;

TEST_CASE("ordinal lists stop at the first entry that is not an ordinal", "[common]") {
  CHECK(parseVisibleDevices("3").entries() == Strings{"3"});
  CHECK(parseVisibleDevices("0,2,5").entries() == Strings{"0", "2", "5"});
  CHECK(parseVisibleDevices(" 1 , 2").entries() == Strings{"1", "2"});
  CHECK(parseVisibleDevices("1gpu,2").entries() == Strings{"1", "2"});  // strtoul's reading
  CHECK(parseVisibleDevices("0,-1,2").entries() == Strings{"0"});
  CHECK(parseVisibleDevices("0,x,2").entries() == Strings{"0"});
  CHECK(parseVisibleDevices("").entries().empty());
  CHECK(parseVisibleDevices("NoDevFiles").entries().empty());
}

TEST_CASE("a repeated entry hides every device", "[common]") {
  CHECK(parseVisibleDevices("0,1,0").entries().empty());
  CHECK(parseVisibleDevices("GPU-a,GPU-b,GPU-a").entries().empty());
}

TEST_CASE("UUID lists keep their prefix and stop at an entry without it", "[common]") {
  auto d = parseVisibleDevices("GPU-aaa,GPU-bbb,1");
  CHECK(d.uuidPrefix == "GPU-");
  CHECK(d.entries() == Strings{"GPU-aaa", "GPU-bbb"});
  auto m = parseVisibleDevices("MIG-x,MIG-y");
  CHECK(m.uuidPrefix == "MIG-");
  CHECK(m.entries() == Strings{"MIG-x", "MIG-y"});
}

TEST_CASE("countVisibleGpus: device files restricted by the list", "[common]") {
  dtrun::test::TempDir dev;
  for (int i = 0; i < 4; ++i)
    dtrun::test::writeFile(dev.path() / ("nvidia" + std::to_string(i)), "");
  dtrun::test::writeFile(dev.path() / "nvidiactl", "");  // not a GPU
  CHECK(countVisibleGpus(dev.path(), std::nullopt) == 4);
  CHECK(countVisibleGpus(dev.path(), std::string("1,3")) == 2);
  CHECK(countVisibleGpus(dev.path(), std::string("2,7,1")) == 1);  // cut at the missing 7
  CHECK(countVisibleGpus(dev.path(), std::string("GPU-a,GPU-b,GPU-c,GPU-d,GPU-e")) == 4);
  CHECK(countVisibleGpus(dev.path(), std::string("MIG-a,MIG-b,MIG-c,MIG-d,MIG-e")) == 5);
  CHECK(countVisibleGpus(dev.path(), std::string("")) == 0);
  CHECK(countVisibleGpus(dev.path() / "missing", std::nullopt) == 0);
}
