#include "launcher/accelerate_env.h"

#include <array>
#include <cctype>
#include <string_view>

#include "launcher/args.h"

namespace dtrun::launcher {
namespace {

using Env = std::map<std::string, std::string>;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

constexpr std::array<std::string_view, 16> kDynamoBackends{"NO",
                                                           "EAGER",
                                                           "AOT_EAGER",
                                                           "INDUCTOR",
                                                           "AOT_TS_NVFUSER",
                                                           "NVPRIMS_NVFUSER",
                                                           "CUDAGRAPHS",
                                                           "OFI",
                                                           "FX2TRT",
                                                           "ONNXRT",
                                                           "TENSORRT",
                                                           "AOT_TORCHXLA_TRACE_ONCE",
                                                           "TORCHXLA_TRACE_ONCE",
                                                           "TVM",
                                                           "HPU_BACKEND",
                                                           "NEURON"};

// Megatron-LM's options, each passed on as MEGATRON_LM_<NAME> unless None (the ones accelerate
// passes unconditionally have defaults, so the same rule covers them).
constexpr std::array<std::string_view, 27> kMegatron{"tp_degree",
                                                     "use_custom_fsdp",
                                                     "no_load_optim",
                                                     "eod_mask_loss",
                                                     "no_save_optim",
                                                     "optimizer_cpu_offload",
                                                     "use_precision_aware_optimizer",
                                                     "overlap_cpu_optimizer_d2h_h2d",
                                                     "decoder_last_pipeline_num_layers",
                                                     "pp_degree",
                                                     "gradient_clipping",
                                                     "num_micro_batches",
                                                     "sequence_parallelism",
                                                     "recompute_activations",
                                                     "use_distributed_optimizer",
                                                     "recompute_granularity",
                                                     "recompute_method",
                                                     "recompute_num_layers",
                                                     "attention_backend",
                                                     "expert_model_parallel_size",
                                                     "context_parallel_size",
                                                     "attention_dropout",
                                                     "hidden_dropout",
                                                     "attention_softmax_in_fp32",
                                                     "expert_tensor_parallel_size",
                                                     "calculate_per_token_loss",
                                                     "use_rotary_position_embeddings"};

// ACCELERATE_MIXED_PRECISION, and setup_fp8_env's ACCELERATE_FP8_* for fp8.
void precision(Env& out, const AccelerateArgs& a) {
  const std::string mp = lower(a.get("mixed_precision").text());
  if (mp != "no" && mp != "fp16" && mp != "bf16" && mp != "fp8") {
    throw UsageError(a.source("mixed_precision", "mixed_precision") + ": unknown precision '" + mp +
                     "': expected no, fp16, bf16 or fp8");
  }
  out["ACCELERATE_MIXED_PRECISION"] = mp;
  if (mp != "fp8") return;
  // Every fp8_* attribute of the namespace, those a config's fp8_config added included.
  for (const auto& [dest, v] : a.values) {
    if (dest.rfind("fp8_", 0) != 0 || v.isNone()) continue;
    if (dest == "fp8_override_linear_precision" && v.kind == PyValue::Kind::kList) {
      const char* names[] = {"FPROP", "DGRAD", "WGRAD"};
      for (std::size_t i = 0; i < 3; ++i) {
        out[std::string("ACCELERATE_FP8_OVERRIDE_") + names[i]] =
            i < v.items.size() ? v.items[i].text() : "None";
      }
      continue;
    }
    out["ACCELERATE_" + upper(dest)] = v.text();
  }
}

void dynamo(Env& out, const AccelerateArgs& a) {
  const std::string backend = upper(a.get("dynamo_backend").text());
  bool known = false;
  for (auto b : kDynamoBackends) known = known || b == backend;
  if (!known) {
    throw UsageError(a.source("dynamo_backend", "dynamo_backend") + ": unknown dynamo backend '" +
                     backend + "'");
  }
  out["ACCELERATE_DYNAMO_BACKEND"] = backend;
  out["ACCELERATE_DYNAMO_MODE"] = a.get("dynamo_mode").text();
  out["ACCELERATE_DYNAMO_USE_FULLGRAPH"] = a.get("dynamo_use_fullgraph").text();
  out["ACCELERATE_DYNAMO_USE_DYNAMIC"] = a.get("dynamo_use_dynamic").text();
  out["ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"] =
      a.get("dynamo_use_regional_compilation").text();
}

// What every path starts with: debug mode and the GPUs.
void common(Env& out, const AccelerateArgs& a) {
  if (a.get("debug").truthy()) out["ACCELERATE_DEBUG_MODE"] = "true";
  const PyValue& ids = a.get("gpu_ids");
  if (!ids.isNone() && ids.text() != "all") out["CUDA_VISIBLE_DEVICES"] = ids.text();
}

void fsdp(Env& out, const AccelerateArgs& a) {
  out["ACCELERATE_USE_FSDP"] = "true";
  if (a.get("fsdp_cpu_ram_efficient_loading").truthy() &&
      !a.get("fsdp_sync_module_states").truthy()) {
    throw UsageError(a.source("fsdp_sync_module_states", "fsdp_sync_module_states") +
                     ": fsdp_cpu_ram_efficient_loading needs fsdp_sync_module_states true");
  }
  out["FSDP_VERSION"] = a.get("fsdp_version").text();
  out["FSDP_SHARDING_STRATEGY"] = a.get("fsdp_sharding_strategy").text();
  for (const char* key : {"reshard_after_forward", "offload_params"}) {
    out["FSDP_" + upper(key)] = lower(a.get(std::string("fsdp_") + key).text());
  }
  out["FSDP_MIN_NUM_PARAMS"] = a.get("fsdp_min_num_params").text();
  for (const auto& [dest, name] :
       {std::pair{"fsdp_auto_wrap_policy", "FSDP_AUTO_WRAP_POLICY"},
        {"fsdp_transformer_layer_cls_to_wrap", "FSDP_TRANSFORMER_CLS_TO_WRAP"},
        {"fsdp_backward_prefetch", "FSDP_BACKWARD_PREFETCH"},
        {"fsdp_state_dict_type", "FSDP_STATE_DICT_TYPE"}}) {
    if (!a.get(dest).isNone()) out[name] = a.get(dest).text();
  }
  for (const char* key : {"forward_prefetch", "use_orig_params", "cpu_ram_efficient_loading",
                          "sync_module_states", "activation_checkpointing"}) {
    out["FSDP_" + upper(key)] = lower(a.get(std::string("fsdp_") + key).text());
  }
  if (!a.get("fsdp_ignored_modules").isNone()) {
    out["FSDP_IGNORED_MODULES"] = a.get("fsdp_ignored_modules").text();
  }
}

void megatron(Env& out, const AccelerateArgs& a) {
  out["ACCELERATE_USE_MEGATRON_LM"] = "true";
  for (auto key : kMegatron) {
    const PyValue& v = a.get("megatron_lm_" + std::string(key));
    if (!v.isNone()) out["MEGATRON_LM_" + upper(std::string(key))] = v.text();
  }
}

void parallelism(Env& out, const AccelerateArgs& a) {
  auto get = [&](const char* key) { return a.get(std::string("parallelism_config_") + key); };
  out["ACCELERATE_USE_PARALLELISM_CONFIG"] = "true";
  for (const char* key : {"dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "cp_backend",
                          "sp_size", "sp_backend"}) {
    out["PARALLELISM_CONFIG_" + upper(key)] = get(key).text();
  }
  auto above1 = [&](const char* key) {
    const PyValue& v = get(key);
    return (v.kind == PyValue::Kind::kInt && v.i > 1) ||
           (v.kind == PyValue::Kind::kFloat && v.f > 1);
  };
  if (above1("cp_size"))
    out["PARALLELISM_CONFIG_CP_COMM_STRATEGY"] = get("cp_comm_strategy").text();
  if (above1("sp_size")) {
    for (const char* key :
         {"sp_seq_length", "sp_seq_length_is_variable", "sp_attn_implementation"}) {
      out["PARALLELISM_CONFIG_" + upper(key)] = get(key).text();
    }
  }
}

void deepspeed(Env& out, const AccelerateArgs& a, const std::string& dsFields, const Env& env,
               const std::filesystem::path& cwd) {
  // env_var_path_add: the non-empty parts of PYTHONPATH, then the working directory.
  std::string path;
  if (auto it = env.find("PYTHONPATH"); it != env.end()) {
    for (const auto& part : splitOn(it->second, ':')) {
      if (!part.empty()) path += part + ":";
    }
  }
  out["PYTHONPATH"] = path + cwd.string();
  out["ACCELERATE_CONFIG_DS_FIELDS"] = lower(dsFields);
  out["ACCELERATE_USE_DEEPSPEED"] = "true";
  struct Field {
    const char* dest;
    const char* name;
    bool lowered;
  };
  for (const Field& f :
       {Field{"zero_stage", "ACCELERATE_DEEPSPEED_ZERO_STAGE", false},
        {"gradient_accumulation_steps", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", false},
        {"gradient_clipping", "ACCELERATE_GRADIENT_CLIPPING", true},
        {"offload_optimizer_device", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", true},
        {"offload_param_device", "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", true},
        {"zero3_init_flag", "ACCELERATE_DEEPSPEED_ZERO3_INIT", true},
        {"zero3_save_16bit_model", "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", true},
        {"deepspeed_config_file", "ACCELERATE_DEEPSPEED_CONFIG_FILE", false},
        {"deepspeed_moe_layer_cls_names", "ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES", false}}) {
    const PyValue& v = a.get(f.dest);
    if (!v.isNone()) out[f.name] = f.lowered ? lower(v.text()) : v.text();
  }
}

}  // namespace

Env accelerateWorkerEnv(AcceleratePath path, const AccelerateArgs& a, const std::string& dsFields,
                        const Env& env, const std::filesystem::path& cwd) {
  Env out;
  common(out, a);
  if (path == AcceleratePath::kSimple) {
    // str(args.cpu or args.use_cpu): Python's `or` gives use_cpu itself when --cpu is off.
    out["ACCELERATE_USE_CPU"] = a.get("cpu").truthy() ? "True" : a.get("use_cpu").text();
    const PyValue& n = a.get("num_processes");
    const PyValue& m = a.get("num_machines");
    const bool several =
        (n.kind == PyValue::Kind::kInt && n.i > 1) || (m.kind == PyValue::Kind::kInt && m.i > 1);
    if (several) {
      const PyValue& ip = a.get("main_process_ip");
      const PyValue& port = a.get("main_process_port");
      out["MASTER_ADDR"] = ip.isNone() ? "127.0.0.1" : ip.text();
      out["MASTER_PORT"] = port.isNone() ? "29500" : port.text();
    }
  }
  if (path == AcceleratePath::kDeepSpeed) deepspeed(out, a, dsFields, env, cwd);
  precision(out, a);
  if (path != AcceleratePath::kDeepSpeed) {
    dynamo(out, a);
    if (path == AcceleratePath::kMultiGpu) {
      if (a.get("use_fsdp").truthy()) fsdp(out, a);
      if (a.get("use_megatron_lm").truthy()) megatron(out, a);
    }
    out["OMP_NUM_THREADS"] = a.get("num_cpu_threads_per_process").text();
  }
  if (a.get("enable_cpu_affinity").truthy()) out["ACCELERATE_CPU_AFFINITY"] = "1";
  if (path != AcceleratePath::kSimple && a.get("use_parallelism_config").truthy()) {
    parallelism(out, a);
  }
  return out;
}

}  // namespace dtrun::launcher
