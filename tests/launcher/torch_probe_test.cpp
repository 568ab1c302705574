// The NCCL async error handling variable torchrun of each torch version sets
// (launcher/torch_probe.h), and reading torch's version without importing torch.
#include "launcher/torch_probe.h"

#include <catch2/catch.hpp>

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
