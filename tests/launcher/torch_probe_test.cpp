// The NCCL async error handling variable torchrun of each torch version sets
// (launcher/torch_probe.h), and reading torch's version without importing torch.
#include "launcher/torch_probe.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/support/test_support.h"

using namespace dtrun::launcher;
using Env = std::map<std::string, std::string>;

TEST_CASE("torch versions", "[launcher][torch_probe]") {
  CHECK(torchMajorMinor("1.13.0a0") == std::make_pair(1, 13));
  CHECK(torchMajorMinor("2.2.0+cu121") == std::make_pair(2, 2));
  CHECK(torchMajorMinor(" 2.10.1") == std::make_pair(2, 10));
  CHECK_FALSE(torchMajorMinor("nightly"));
  CHECK_FALSE(torchMajorMinor("2"));
  CHECK_FALSE(torchMajorMinor("2."));
  CHECK(versionFromVersionPy("__version__ = '1.13.0a0'\ndebug = False\n") == "1.13.0a0");
  CHECK(versionFromVersionPy("from typing import Optional\n__version__: str = \"2.5.1+cu124\"\n") ==
        "2.5.1+cu124");
  CHECK_FALSE(versionFromVersionPy("debug = False\n"));
}

TEST_CASE("what torchrun of each version adds for NCCL's async error handling",
          "[launcher][torch_probe]") {
  auto added = [](std::optional<std::string> v, Env env = {}) {
    addNcclAsyncErrorHandling(env, v);
    return env;
  };
  // torch 1.13 to 2.1: the old name only (2.2+ would warn about it on every rank).
  CHECK(added("1.13.0a0") == Env{{"NCCL_ASYNC_ERROR_HANDLING", "1"}});
  CHECK(added("2.1.2") == Env{{"NCCL_ASYNC_ERROR_HANDLING", "1"}});
  CHECK(added("2.2.0") == Env{{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}});
  CHECK(added("2.7.0+cu128") == Env{{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}});
  // Unknown (no Python workers, no torch found): both names, which every version reads.
  CHECK(added(std::nullopt) ==
        Env{{"NCCL_ASYNC_ERROR_HANDLING", "1"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}});
  CHECK(added("garbage") == added(std::nullopt));
  // The user's own value is kept, as torchrun's os.getenv(name, "1").
  CHECK(added("2.3.0", {{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}}) ==
        Env{{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}});
  CHECK(added("1.13.0", {{"NCCL_ASYNC_ERROR_HANDLING", "0"}}) ==
        Env{{"NCCL_ASYNC_ERROR_HANDLING", "0"}});
}

TEST_CASE("the workers' interpreter says which torch it would import", "[launcher][torch_probe]") {
  // A torch package first on PYTHONPATH is the one the workers would import; its version.py is
  // read, torch itself is never imported (its __init__ would fail here).
  dtrun::test::TempDir dir;
  std::filesystem::create_directories(dir.path() / "torch");
  dtrun::test::writeFile(dir.path() / "torch" / "__init__.py", "raise SystemExit(9)\n");
  dtrun::test::writeFile(dir.path() / "torch" / "version.py", "__version__ = '2.4.0+fake'\n");
  Env env{{"PATH", "/usr/bin:/bin"}, {"PYTHONPATH", dir.path().string()}};
  CHECK(probeTorchVersion("/usr/bin/python3", env) == "2.4.0+fake");
  CHECK(probeTorchVersion("python3", env) == "2.4.0+fake");  // looked up in PATH
  Env withTorch;
  addNcclAsyncErrorHandling(withTorch, probeTorchVersion("/usr/bin/python3", env));
  CHECK(withTorch == Env{{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}});

  // A torch without version.py, an interpreter that cannot start, none at all: unknown.
  std::filesystem::remove(dir.path() / "torch" / "version.py");
  CHECK_FALSE(probeTorchVersion("/usr/bin/python3", env));
  CHECK_FALSE(probeTorchVersion("/usr/bin/python3", {{"PYTHONHOME", "/nonexistent"}}));
  CHECK_FALSE(probeTorchVersion("/nonexistent/python3", env));
}
