// launcher/accelerate_config.h: where accelerate's config file is found and how it is read
// (accelerate's config_args.py: the default path, process_config, the unknown-key check), and
// the one-line errors for files dtrun does not launch.
#include "launcher/accelerate_config.h"

#include <catch2/catch.hpp>

#include "launcher/args.h"
#include "tests/launcher/front_end_test_util.h"
#include "tests/support/test_support.h"

using namespace dtrun::launcher;
using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;
using Catch::Matchers::StartsWith;
using Env = std::map<std::string, std::string>;
using Kind = PyValue::Kind;

namespace {

struct Files {
  dtrun::test::TempDir dir;
  std::filesystem::path write(const std::string& name, const std::string& text) {
    dtrun::test::writeFile(dir.path() / name, text);
    return dir.path() / name;
  }
  std::string error(const std::string& text, const std::string& name = "cfg.yaml") {
    auto p = write(name, text);
    return testing::usageErrorOf([&] { loadAccelerateConfig(p); });
  }
};

}  // namespace

TEST_CASE("accelerate's default config file: HF_HOME, then XDG_CACHE_HOME, then ~/.cache",
          "[launcher][accelerate]") {
  CHECK(defaultAccelerateConfigFile({{"HOME", "/home/u"}}) ==
        "/home/u/.cache/huggingface/accelerate/default_config.yaml");
  CHECK(defaultAccelerateConfigFile({{"HOME", "/home/u"}, {"XDG_CACHE_HOME", "/xdg"}}) ==
        "/xdg/huggingface/accelerate/default_config.yaml");
  // HF_HOME is used as it is (no huggingface/ level) and wins over XDG_CACHE_HOME.
  CHECK(defaultAccelerateConfigFile(
            {{"HOME", "/home/u"}, {"XDG_CACHE_HOME", "/xdg"}, {"HF_HOME", "/hf"}}) ==
        "/hf/accelerate/default_config.yaml");
  // os.path.expanduser: a leading ~ is $HOME.
  CHECK(defaultAccelerateConfigFile({{"HOME", "/home/u"}, {"HF_HOME", "~/hf"}}) ==
        "/home/u/hf/accelerate/default_config.yaml");
  CHECK(defaultAccelerateConfigFile({{"HOME", "/home/u"}, {"XDG_CACHE_HOME", "~/c"}}) ==
        "/home/u/c/huggingface/accelerate/default_config.yaml");
}

TEST_CASE("the tutorial's config: every field, in ClusterConfig's order",
          "[launcher][accelerate]") {
  Files f;
  auto cfg =
      loadAccelerateConfig(f.write("default_config.yaml", testing::kTutorialAccelerateConfig));
  CHECK(cfg.get("distributed_type") == PyValue::str("MULTI_GPU"));
  CHECK(cfg.get("mixed_precision") == PyValue::str("no"));
  CHECK(cfg.get("num_processes") == PyValue::integer(2));
  CHECK(cfg.get("same_network") == PyValue::boolean(true));
  CHECK(cfg.get("main_process_port").isNone());
  CHECK(cfg.get("downcast_bf16") == PyValue::str("no"));
  CHECK(cfg.get("deepspeed_config").kind == Kind::kDict);
  CHECK(cfg.get("tpu_env").kind == Kind::kList);
  // Fields the file leaves out have ClusterConfig's defaults.
  CHECK(cfg.get("enable_cpu_affinity") == PyValue::boolean(false));
  CHECK(cfg.get("debug") == PyValue::boolean(false));
  CHECK(cfg.get("dynamo_config").kind == Kind::kDict);
  CHECK(cfg.get("mpirun_config").fields.empty());
  CHECK(cfg.fields.front().first == "compute_environment");
  CHECK(cfg.fields.back().first == "dynamo_config");
  CHECK(cfg.warnings.empty());
}

TEST_CASE("unquoted no: YAML's false, read as 'no' with a warning", "[launcher][accelerate]") {
  Files f;
  std::string text = testing::kTutorialAccelerateConfig;
  text.replace(text.find("'no'\nnum_machines"), 4, "no");
  auto cfg = loadAccelerateConfig(f.write("c.yaml", text));
  CHECK(cfg.get("mixed_precision") == PyValue::str("no"));
  REQUIRE(cfg.warnings.size() == 1);
  CHECK_THAT(cfg.warnings[0], Contains("mixed_precision: no unquoted"));
  auto no = loadAccelerateConfig(f.write("n.yaml", "distributed_type: NO\n"));
  CHECK(no.get("distributed_type") == PyValue::str("NO"));
  CHECK(no.get("num_processes") == PyValue::integer(1));  // distributed_type NO's default
}

TEST_CASE("legacy keys: fp16 and a top-level dynamo_backend", "[launcher][accelerate]") {
  Files f;
  auto fp16 = loadAccelerateConfig(f.write("a.yaml", "distributed_type: MULTI_GPU\nfp16: true\n"));
  CHECK(fp16.get("mixed_precision") == PyValue::str("fp16"));
  CHECK(fp16.get("num_processes") == PyValue::integer(-1));  // must come from the command line
  auto off = loadAccelerateConfig(f.write("b.yaml", "distributed_type: MULTI_GPU\nfp16: false\n"));
  CHECK(off.get("mixed_precision").isNone());
  auto dyn = loadAccelerateConfig(
      f.write("c.yaml", "distributed_type: MULTI_GPU\ndynamo_backend: INDUCTOR\n"));
  REQUIRE(dyn.get("dynamo_config").fields.size() == 1);
  CHECK(dyn.get("dynamo_config").fields[0].second == PyValue::str("INDUCTOR"));
  auto none = loadAccelerateConfig(
      f.write("d.yaml", "distributed_type: MULTI_GPU\ndynamo_backend: 'NO'\n"));
  CHECK(none.get("dynamo_config").fields.empty());
}

TEST_CASE("a JSON config is read as JSON", "[launcher][accelerate]") {
  Files f;
  auto cfg = loadAccelerateConfig(
      f.write("c.json", R"({"distributed_type": "DEEPSPEED", "num_processes": 2,
                   "deepspeed_config": {"zero_stage": 2, "offload_param_device": "none"}})"));
  CHECK(cfg.get("num_processes") == PyValue::integer(2));
  const auto& ds = cfg.get("deepspeed_config");
  REQUIRE(ds.fields.size() == 2);
  CHECK(ds.fields[0].first == "zero_stage");  // the file's order
  CHECK(ds.fields[1].second == PyValue::str("none"));
}

TEST_CASE("bad config files: one line naming the file and the key", "[launcher][accelerate]") {
  Files f;
  const std::string p = f.dir.path().string();
  CHECK_THAT(f.error("distributed_type: [MULTI_GPU\n"), StartsWith(p + "/cfg.yaml:"));
  CHECK_THAT(f.error("distributed_type: [MULTI_GPU\n"), Contains("not valid YAML"));
  CHECK_THAT(f.error("{\"distributed_type\": ", "c.json"), Contains("c.json: not valid JSON"));
  CHECK(f.error("distributed_type: MULTI_GPU\nnum_procs: 2\n") ==
        p + "/cfg.yaml: unknown key 'num_procs' (not one of accelerate's config keys)");
  CHECK(f.error("num_processes: 2\n") ==
        p + "/cfg.yaml: no distributed_type (NO, MULTI_CPU, MULTI_GPU, DEEPSPEED, FSDP, "
            "MEGATRON_LM, ...)");
  CHECK_THAT(f.error("distributed_type: MULTI_TPU\n"),
             StartsWith(p + "/cfg.yaml: distributed_type 'MULTI_TPU': expected NO,"));
  CHECK(f.error("compute_environment: AMAZON_SAGEMAKER\ndistributed_type: NO\n") ==
        p + "/cfg.yaml: compute_environment AMAZON_SAGEMAKER: dtrun does not launch SageMaker "
            "jobs (accelerate launch does)");
  CHECK_THAT(f.error(""), EndsWith("got an empty file"));
  CHECK_THAT(f.error("- a\n- b\n"), Contains("expected a mapping of accelerate's config keys"));
  CHECK_THAT(testing::usageErrorOf([&] { loadAccelerateConfig(f.dir.path() / "missing.yaml"); }),
             Contains("missing.yaml: cannot read the config file"));
}
