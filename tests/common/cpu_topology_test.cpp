// common/cpu_topology.h: physical cores as psutil counts them, NUMA nodes with CPUs as
// DeepSpeed's CPU accelerator counts them, on fake sysfs trees.
#include "common/cpu_topology.h"

#include <catch2/catch.hpp>

#include "tests/support/fake_devices.h"

using dtrun::countNumaNodesWithCpus;
using dtrun::countPhysicalCores;
using dtrun::test::FakeDeviceTree;

TEST_CASE("physical cores: distinct sibling sets, hyperthreads counted once", "[common][cpu]") {
  FakeDeviceTree smt;
  smt.addCpus(/*cores=*/4, /*threadsPerCore=*/2);
  CHECK(countPhysicalCores(smt.sys()) == 4);
  FakeDeviceTree plain;
  plain.addCpus(3, 1);
  CHECK(countPhysicalCores(plain.sys()) == 3);
  // Older kernels name the file thread_siblings_list only.
  FakeDeviceTree old;
  old.addCpus(2, 2, /*legacy=*/true);
  CHECK(countPhysicalCores(old.sys()) == 2);
  // Nothing readable: 0, which the callers treat as "unknown".
  FakeDeviceTree none;
  CHECK(countPhysicalCores(none.sys()) == 0);
}

TEST_CASE("NUMA nodes: those with CPUs", "[common][cpu]") {
  FakeDeviceTree two;
  two.addNumaNodes({"0-3", "4-7"});
  CHECK(countNumaNodesWithCpus(two.sys()) == 2);
  // A memory-only node (HBM in flat mode) has no CPUs and is no device.
  FakeDeviceTree hbm;
  hbm.addNumaNodes({"0-7", ""});
  CHECK(countNumaNodesWithCpus(hbm.sys()) == 1);
  FakeDeviceTree none;
  CHECK(countNumaNodesWithCpus(none.sys()) == 0);
}
