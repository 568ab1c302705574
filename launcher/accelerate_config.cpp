#include "launcher/accelerate_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "launcher/args.h"

namespace dtrun::launcher {
namespace {

namespace fs = std::filesystem;
using Env = std::map<std::string, std::string>;

// ClusterConfig's fields in declaration order (BaseConfig's first), with their defaults as
// text for resolvePlainYamlScalar ("" = None; "{}" = an empty section).
constexpr std::array<std::pair<std::string_view, std::string_view>, 31> kFields{{
    {"compute_environment", "LOCAL_MACHINE"},
    {"distributed_type", ""},
    {"mixed_precision", ""},
    {"use_cpu", "false"},
    {"debug", "false"},
    {"num_processes", "-1"},
    {"machine_rank", "0"},
    {"num_machines", "1"},
    {"gpu_ids", ""},
    {"main_process_ip", ""},
    {"main_process_port", ""},
    {"rdzv_backend", "static"},
    {"same_network", "false"},
    {"main_training_function", "main"},
    {"enable_cpu_affinity", "false"},
    {"fp8_config", "{}"},
    {"deepspeed_config", "{}"},
    {"fsdp_config", "{}"},
    {"parallelism_config", "{}"},
    {"megatron_lm_config", "{}"},
    {"mpirun_config", "{}"},
    {"downcast_bf16", "false"},
    {"tpu_name", ""},
    {"tpu_zone", ""},
    {"tpu_use_cluster", "false"},
    {"tpu_use_sudo", "false"},
    {"command_file", ""},
    {"commands", ""},
    {"tpu_vm", ""},
    {"tpu_env", ""},
    {"dynamo_config", "{}"},
}};

constexpr std::array<std::string_view, 14> kDistributedTypes{
    "NO",         "MULTI_CPU",   "MULTI_GPU", "MULTI_NPU",   "MULTI_MLU",
    "MULTI_SDAA", "MULTI_MUSA",  "MULTI_XPU", "DEEPSPEED",   "FSDP",
    "XLA",        "MEGATRON_LM", "MULTI_HPU", "MULTI_NEURON"};

PyValue emptyDict() {
  PyValue d;
  d.kind = PyValue::Kind::kDict;
  return d;
}

PyValue fromYaml(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return PyValue::none();
    case YAML::NodeType::Scalar: {
      const std::string& tag = node.Tag();
      // "?" is a plain scalar, whose type YAML 1.1 infers; a quoted one ("!") is a string.
      if (tag == "?" || tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
          tag == "tag:yaml.org,2002:bool" || tag == "tag:yaml.org,2002:null") {
        return resolvePlainYamlScalar(node.Scalar());
      }
      return PyValue::str(node.Scalar());
    }
    case YAML::NodeType::Sequence: {
      PyValue list;
      list.kind = PyValue::Kind::kList;
      for (const auto& item : node) list.items.push_back(fromYaml(item));
      return list;
    }
    case YAML::NodeType::Map: {
      PyValue dict = emptyDict();
      for (const auto& kv : node) {
        const std::string key = fromYaml(kv.first).text();
        auto same = [&](const auto& f) { return f.first == key; };
        auto it = std::find_if(dict.fields.begin(), dict.fields.end(), same);
        if (it != dict.fields.end()) {
          it->second = fromYaml(kv.second);  // PyYAML: the later one wins
        } else {
          dict.fields.emplace_back(key, fromYaml(kv.second));
        }
      }
      return dict;
    }
  }
  return PyValue::none();
}

PyValue fromJson(const nlohmann::ordered_json& j) {
  if (j.is_null()) return PyValue::none();
  if (j.is_boolean()) return PyValue::boolean(j.get<bool>());
  if (j.is_number_integer()) return PyValue::integer(j.get<std::int64_t>());
  if (j.is_number()) return PyValue::real(j.get<double>());
  if (j.is_string()) return PyValue::str(j.get<std::string>());
  PyValue out;
  if (j.is_array()) {
    out.kind = PyValue::Kind::kList;
    for (const auto& item : j) out.items.push_back(fromJson(item));
    return out;
  }
  out = emptyDict();
  for (const auto& [k, v] : j.items()) out.fields.emplace_back(k, fromJson(v));
  return out;
}

std::string readText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw UsageError(path.string() + ": cannot read the config file: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

PyValue parseFile(const fs::path& path) {
  const std::string text = readText(path);
  const std::string name = path.string();
  if (path.extension() == ".json") {
    try {
      return fromJson(nlohmann::ordered_json::parse(text));
    } catch (const nlohmann::json::exception& e) {
      throw UsageError(name + ": not valid JSON: " + e.what());
    }
  }
  try {
    return fromYaml(YAML::Load(text));
  } catch (const YAML::Exception& e) {
    throw UsageError(name + ":" + std::to_string(e.mark.line + 1) + ":" +
                     std::to_string(e.mark.column + 1) + ": not valid YAML: " + e.msg);
  }
}

PyValue* find(PyValue& dict, const std::string& key) {
  for (auto& [k, v] : dict.fields) {
    if (k == key) return &v;
  }
  return nullptr;
}

void erase(PyValue& dict, const std::string& key) {
  auto same = [&](const auto& f) { return f.first == key; };
  dict.fields.erase(std::remove_if(dict.fields.begin(), dict.fields.end(), same),
                    dict.fields.end());
}

}  // namespace

fs::path defaultAccelerateConfigFile(const Env& env) {
  auto get = [&](const char* name) {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  // os.path.expanduser: a leading ~ is $HOME.
  auto expand = [&](std::string p) {
    if (p == "~" || p.rfind("~/", 0) == 0) p = get("HOME") + p.substr(1);
    return fs::path(p);
  };
  const auto hf = env.find("HF_HOME");
  if (hf != env.end()) return expand(hf->second) / "accelerate" / "default_config.yaml";
  const auto xdg = env.find("XDG_CACHE_HOME");
  const std::string cache = xdg != env.end() ? xdg->second : "~/.cache";
  return expand(cache + "/huggingface") / "accelerate" / "default_config.yaml";
}

const PyValue& AccelerateConfig::get(const std::string& key) const {
  static const PyValue none;
  for (const auto& [k, v] : fields) {
    if (k == key) return v;
  }
  return none;
}

AccelerateConfig loadAccelerateConfig(const fs::path& path) {
  AccelerateConfig cfg;
  cfg.path = path;
  const std::string name = path.string();
  PyValue dict = parseFile(path);
  if (dict.kind != PyValue::Kind::kDict) {
    throw UsageError(name + ": expected a mapping of accelerate's config keys, got " +
                     (dict.isNone() ? std::string("an empty file") : "'" + dict.text() + "'"));
  }
  // BaseConfig.process_config.
  if (!find(dict, "compute_environment"))
    dict.fields.emplace_back("compute_environment", PyValue::str("LOCAL_MACHINE"));
  const PyValue& env = *find(dict, "compute_environment");
  if (env.text() == "AMAZON_SAGEMAKER") {
    throw UsageError(name +
                     ": compute_environment AMAZON_SAGEMAKER: dtrun does not launch "
                     "SageMaker jobs (accelerate launch does)");
  }
  if (env.text() != "LOCAL_MACHINE") {
    throw UsageError(name + ": compute_environment '" + env.text() +
                     "': expected LOCAL_MACHINE or AMAZON_SAGEMAKER");
  }
  PyValue* type = find(dict, "distributed_type");
  if (!type) {
    throw UsageError(name +
                     ": no distributed_type (NO, MULTI_CPU, MULTI_GPU, DEEPSPEED, FSDP, "
                     "MEGATRON_LM, ...)");
  }
  if (type->kind == PyValue::Kind::kBool && !type->b) {
    *type = PyValue::str("NO");
    cfg.warnings.push_back(name + ": distributed_type: NO unquoted is YAML's false; read as 'NO'");
  }
  if (std::find(kDistributedTypes.begin(), kDistributedTypes.end(), type->text()) ==
      kDistributedTypes.end()) {
    throw UsageError(name + ": distributed_type '" + type->text() +
                     "': expected NO, MULTI_CPU, MULTI_GPU, MULTI_NPU, MULTI_MLU, MULTI_SDAA, "
                     "MULTI_MUSA, MULTI_XPU, MULTI_HPU, MULTI_NEURON, DEEPSPEED, FSDP, XLA or "
                     "MEGATRON_LM");
  }
  if (!find(dict, "num_processes") && type->text() == "NO") {
    dict.fields.emplace_back("num_processes", PyValue::integer(1));
  }
  if (!find(dict, "mixed_precision")) {
    const PyValue* fp16 = find(dict, "fp16");
    dict.fields.emplace_back("mixed_precision",
                             fp16 && fp16->truthy() ? PyValue::str("fp16") : PyValue::none());
  }
  erase(dict, "fp16");
  if (PyValue* mp = find(dict, "mixed_precision"); mp->kind == PyValue::Kind::kBool && !mp->b) {
    *mp = PyValue::str("no");
    cfg.warnings.push_back(name +
                           ": mixed_precision: no unquoted is YAML's false; read as 'no' (quote "
                           "it, as accelerate config writes it: newer accelerate fails on it)");
  }
  if (const PyValue* dynamo = find(dict, "dynamo_backend")) {
    PyValue section = emptyDict();
    if (dynamo->text() != "NO") section.fields.emplace_back("dynamo_backend", *dynamo);
    erase(dict, "dynamo_backend");
    erase(dict, "dynamo_config");
    dict.fields.emplace_back("dynamo_config", section);
  }
  for (const auto& entry : dict.fields) {
    auto same = [&](const auto& f) { return f.first == entry.first; };
    if (std::none_of(kFields.begin(), kFields.end(), same)) {
      throw UsageError(name + ": unknown key '" + entry.first +
                       "' (not one of accelerate's config keys)");
    }
  }
  // cls(**config_dict), in field order, with the defaults; an empty section is a dict.
  for (const auto& [field, def] : kFields) {
    const std::string key(field);
    const PyValue* given = find(dict, key);
    PyValue v = given         ? *given
                : def == "{}" ? emptyDict()
                : def.empty() ? PyValue::none()
                              : resolvePlainYamlScalar(std::string(def));
    if (def == "{}" && v.isNone()) v = emptyDict();
    cfg.fields.emplace_back(key, std::move(v));
  }
  return cfg;
}

}  // namespace dtrun::launcher
