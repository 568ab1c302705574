// The option table of `accelerate launch` (its commands/launch.py parser: names, groups, types
// and defaults), in accelerate's order: what `dtrun accelerate` parses (accelerate_options.cpp).
#include <array>

#include "launcher/accelerate_options.h"

namespace dtrun::launcher {
namespace {

using T = PyType;

constexpr std::string_view kTop = "";
constexpr std::string_view kHardware =
    "Hardware (one of them; the config file's distributed_type "
    "otherwise)";
constexpr std::string_view kResource = "Resources";
constexpr std::string_view kParadigm = "Training paradigm";
constexpr std::string_view kDistributed = "Processes and rendezvous";
constexpr std::string_view kTpu = "TPU (not launched by dtrun)";
constexpr std::string_view kDeepSpeed = "DeepSpeed (ACCELERATE_DEEPSPEED_* for the workers)";
constexpr std::string_view kFsdp = "FSDP (FSDP_* for the workers)";
constexpr std::string_view kMegatron = "Megatron-LM (MEGATRON_LM_* for the workers)";
constexpr std::string_view kFp8 = "FP8 (ACCELERATE_FP8_* for the workers, with fp8 precision)";
constexpr std::string_view kAws = "SageMaker (not launched by dtrun)";
constexpr std::string_view kMpi = "mpirun (not launched by dtrun)";
constexpr std::string_view kParallel =
    "Parallelism config (PARALLELISM_CONFIG_* for the workers, with --use_parallelism_config)";

constexpr std::string_view kDynamoBackends =
    "no|eager|aot_eager|inductor|aot_ts_nvfuser|nvprims_nvfuser|cudagraphs|ofi|fx2trt|onnxrt|"
    "tensorrt|aot_torchxla_trace_once|torhchxla_trace_once|tvm";

constexpr std::array<AccelerateOption, 123> kOptions{{
    {"help", "-h", T::kTopFlag, "None", "", kTop, "show this help message and exit"},
    {"config_file", "", T::kStr, "None", "", kTop,
     "The accelerate config file (YAML, or JSON when it ends in .json). (default: "
     "$HF_HOME/accelerate/default_config.yaml, else $XDG_CACHE_HOME/huggingface/accelerate/..., "
     "else ~/.cache/huggingface/accelerate/..., when it exists and --cpu is not given)"},
    {"quiet", "-q", T::kTopFlag, "None", "", kTop,
     "accelerate's shorter failure output; dtrun's failure report is the same either way."},
    {"cpu", "", T::kFlag, "False", "", kHardware,
     "Train on the CPU: one process started as plain python, the config file's default skipped."},
    {"multi_gpu", "", T::kFlag, "False", "", kHardware,
     "Several processes under dtrun's agent (needs --num_processes 2 or more when given)."},
    {"tpu", "", T::kFlag, "False", "", kHardware, "TPU training; not launched by dtrun."},
    {"mixed_precision", "", T::kStr, "None", "no|fp16|bf16|fp8", kResource,
     "ACCELERATE_MIXED_PRECISION for the workers. (default: the config file's, else no)"},
    {"num_processes", "", T::kInt, "None", "", kResource,
     "Processes of the whole job, divided by --num_machines for each machine. (default: the "
     "config file's, else this machine's GPUs)"},
    {"num_machines", "", T::kInt, "None", "", kResource, "Machines of the job. (default: 1)"},
    {"num_cpu_threads_per_process", "", T::kInt, "None", "", kResource,
     "OMP_NUM_THREADS for the workers. (default: $OMP_NUM_THREADS, else 1; with use_cpu the "
     "physical cores divided among the processes)"},
    {"enable_cpu_affinity", "", T::kFlag, "False", "", kResource,
     "ACCELERATE_CPU_AFFINITY=1 for the workers (the config file's key is ignored, as by "
     "accelerate)."},
    {"dynamo_backend", "", T::kStr, "None", kDynamoBackends, kResource,
     "ACCELERATE_DYNAMO_BACKEND for the workers, in capitals. (default: no)"},
    {"dynamo_mode", "", T::kStr, "default", "default|reduce-overhead|max-autotune", kResource,
     "ACCELERATE_DYNAMO_MODE for the workers."},
    {"dynamo_use_fullgraph", "", T::kFlag, "False", "", kResource,
     "ACCELERATE_DYNAMO_USE_FULLGRAPH=True for the workers."},
    {"dynamo_use_dynamic", "", T::kFlag, "False", "", kResource,
     "ACCELERATE_DYNAMO_USE_DYNAMIC=True for the workers."},
    {"dynamo_use_regional_compilation", "", T::kFlag, "False", "", kResource,
     "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION=True for the workers."},
    {"use_deepspeed", "", T::kFlag, "False", "", kParadigm,
     "DeepSpeed: ACCELERATE_USE_DEEPSPEED=true and the DeepSpeed options below."},
    {"use_fsdp", "", T::kFlag, "False", "", kParadigm,
     "FSDP: ACCELERATE_USE_FSDP=true and the FSDP options below."},
    {"use_parallelism_config", "", T::kFlag, "False", "", kParadigm,
     "ACCELERATE_USE_PARALLELISM_CONFIG=true (needs --use_fsdp)."},
    {"use_megatron_lm", "", T::kFlag, "False", "", kParadigm,
     "Megatron-LM: ACCELERATE_USE_MEGATRON_LM=true and the Megatron-LM options below."},
    {"gpu_ids", "", T::kStr, "None", "", kDistributed,
     "CUDA_VISIBLE_DEVICES for the workers, e.g. 0,1 (all: leave it as it is); the process count "
     "stays --num_processes."},
    {"same_network", "", T::kFlag, "False", "", kDistributed,
     "Several machines: the static rendezvous at --main_process_ip:--main_process_port as "
     "--master-addr/--master-port instead of --rdzv-endpoint (the config file's key is ignored, "
     "as by accelerate)."},
    {"machine_rank", "", T::kInt, "None", "", kDistributed,
     "This machine's rank, 0 to --num_machines - 1."},
    {"main_process_ip", "", T::kStr, "None", "", kDistributed,
     "Address of machine 0 (several machines only; one machine uses 127.0.0.1)."},
    {"main_process_port", "", T::kInt, "None", "", kDistributed,
     "Port on machine 0; 0 = a free one. (default: one machine: a free port; several: 29500)"},
    {"tee", "-t", T::kStr, "0", "", kDistributed, "dtrun's --tee."},
    {"log_dir", "", T::kStr, "None", "", kDistributed, "dtrun's --log-dir."},
    {"role", "", T::kStr, "default", "", kDistributed, "dtrun's --role."},
    {"rdzv_backend", "", T::kStr, "static", "", kDistributed,
     "dtrun's --rdzv-backend (the config file's key is ignored, as by accelerate)."},
    {"rdzv_conf", "", T::kStr, "", "", kDistributed, "dtrun's --rdzv-conf."},
    {"max_restarts", "", T::kInt, "0", "", kDistributed, "dtrun's --max-restarts."},
    {"monitor_interval", "", T::kFloat, "0.1", "", kDistributed, "dtrun's --monitor-interval."},
    {"module", "-m", T::kTopFlag, "None", "", kTop, "Run the script as a module, python -m."},
    {"no_python", "", T::kTopFlag, "None", "", kTop,
     "Run the script as a program, without python."},
    {"tpu_cluster", "", T::kFlag, "False", "", kTpu, "TPU pods; not launched by dtrun."},
    {"no_tpu_cluster", "", T::kFlag, "False", "", kTpu, "TPU pods; not launched by dtrun."},
    {"tpu_use_sudo", "", T::kFlag, "False", "", kTpu, "TPU pods; not launched by dtrun."},
    {"vm", "", T::kStr, "None", "", kTpu, "TPU pods; not launched by dtrun."},
    {"env", "", T::kStr, "None", "", kTpu, "TPU pods; not launched by dtrun."},
    {"main_training_function", "", T::kStr, "None", "", kTpu, "TPU only; ignored."},
    {"downcast_bf16", "", T::kFlag, "False", "", kTpu, "TPU only; ignored."},
    {"deepspeed_config_file", "", T::kStr, "None", "", kDeepSpeed,
     "ACCELERATE_DEEPSPEED_CONFIG_FILE: a DeepSpeed JSON config."},
    {"zero_stage", "", T::kInt, "None", "", kDeepSpeed, "ACCELERATE_DEEPSPEED_ZERO_STAGE."},
    {"offload_optimizer_device", "", T::kStr, "None", "", kDeepSpeed,
     "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE (none, cpu or nvme)."},
    {"offload_param_device", "", T::kStr, "None", "", kDeepSpeed,
     "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE (none, cpu or nvme)."},
    {"offload_optimizer_nvme_path", "", T::kStr, "None", "", kDeepSpeed,
     "Accepted; accelerate's launcher does not pass it on either."},
    {"offload_param_nvme_path", "", T::kStr, "None", "", kDeepSpeed,
     "Accepted; accelerate's launcher does not pass it on either."},
    {"gradient_accumulation_steps", "", T::kInt, "None", "", kDeepSpeed,
     "ACCELERATE_GRADIENT_ACCUMULATION_STEPS."},
    {"gradient_clipping", "", T::kFloat, "None", "", kDeepSpeed, "ACCELERATE_GRADIENT_CLIPPING."},
    {"zero3_init_flag", "", T::kStr, "None", "", kDeepSpeed, "ACCELERATE_DEEPSPEED_ZERO3_INIT."},
    {"zero3_save_16bit_model", "", T::kStr, "None", "", kDeepSpeed,
     "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL."},
    {"deepspeed_hostfile", "", T::kStr, "None", "", kDeepSpeed,
     "Several machines through DeepSpeed's launcher; not supported (use "
     "deepspeed_multinode_launcher standard, or dtrun deepspeed --hostfile)."},
    {"deepspeed_exclusion_filter", "", T::kStr, "None", "", kDeepSpeed,
     "See --deepspeed_hostfile."},
    {"deepspeed_inclusion_filter", "", T::kStr, "None", "", kDeepSpeed,
     "See --deepspeed_hostfile."},
    {"deepspeed_multinode_launcher", "", T::kStr, "None", "", kDeepSpeed,
     "Several machines: standard (each machine runs dtrun accelerate) is supported; pdsh, "
     "openmpi, mvapich, mpich, nossh and slurm are not."},
    {"deepspeed_moe_layer_cls_names", "", T::kStr, "None", "", kDeepSpeed,
     "ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES."},
    {"fsdp_version", "", T::kStr, "1", "1|2", kFsdp, "FSDP_VERSION."},
    {"fsdp_offload_params", "", T::kStr, "false", "", kFsdp, "FSDP_OFFLOAD_PARAMS."},
    {"fsdp_min_num_params", "", T::kInt, "100000000", "", kFsdp, "FSDP_MIN_NUM_PARAMS."},
    {"fsdp_sharding_strategy", "", T::kStr, "FULL_SHARD", "", kFsdp, "FSDP_SHARDING_STRATEGY."},
    {"fsdp_reshard_after_forward", "", T::kStr, "true", "", kFsdp, "FSDP_RESHARD_AFTER_FORWARD."},
    {"fsdp_auto_wrap_policy", "", T::kStr, "None", "", kFsdp, "FSDP_AUTO_WRAP_POLICY."},
    {"fsdp_transformer_layer_cls_to_wrap", "", T::kStr, "None", "", kFsdp,
     "FSDP_TRANSFORMER_CLS_TO_WRAP."},
    {"fsdp_backward_prefetch", "", T::kStr, "None", "", kFsdp, "FSDP_BACKWARD_PREFETCH."},
    {"fsdp_state_dict_type", "", T::kStr, "None", "", kFsdp, "FSDP_STATE_DICT_TYPE."},
    {"fsdp_forward_prefetch", "", T::kStr, "false", "", kFsdp, "FSDP_FORWARD_PREFETCH."},
    {"fsdp_use_orig_params", "", T::kStr, "true", "", kFsdp, "FSDP_USE_ORIG_PARAMS."},
    {"fsdp_cpu_ram_efficient_loading", "", T::kStr, "true", "", kFsdp,
     "FSDP_CPU_RAM_EFFICIENT_LOADING."},
    {"fsdp_sync_module_states", "", T::kStr, "true", "", kFsdp, "FSDP_SYNC_MODULE_STATES."},
    {"fsdp_activation_checkpointing", "", T::kStr, "false", "", kFsdp,
     "FSDP_ACTIVATION_CHECKPOINTING."},
    {"megatron_lm_tp_degree", "", T::kInt, "1", "", kMegatron, "MEGATRON_LM_TP_DEGREE."},
    {"megatron_lm_use_custom_fsdp", "", T::kPyBool, "False", "", kMegatron,
     "MEGATRON_LM_USE_CUSTOM_FSDP (any text but an empty one is True, as argparse's bool)."},
    {"megatron_lm_no_load_optim", "", T::kPyBool, "False", "", kMegatron,
     "MEGATRON_LM_NO_LOAD_OPTIM."},
    {"megatron_lm_eod_mask_loss", "", T::kPyBool, "False", "", kMegatron,
     "MEGATRON_LM_EOD_MASK_LOSS."},
    {"megatron_lm_overlap_cpu_optimizer_d2h_h2d", "", T::kPyBool, "False", "", kMegatron,
     "MEGATRON_LM_OVERLAP_CPU_OPTIMIZER_D2H_H2D."},
    {"megatron_lm_no_save_optim", "", T::kPyBool, "False", "", kMegatron,
     "MEGATRON_LM_NO_SAVE_OPTIM."},
    {"megatron_lm_optimizer_cpu_offload", "", T::kPyBool, "False", "", kMegatron,
     "MEGATRON_LM_OPTIMIZER_CPU_OFFLOAD."},
    {"megatron_lm_use_precision_aware_optimizer", "", T::kPyBool, "False", "", kMegatron,
     "MEGATRON_LM_USE_PRECISION_AWARE_OPTIMIZER."},
    {"megatron_lm_decoder_last_pipeline_num_layers", "", T::kInt, "None", "", kMegatron,
     "MEGATRON_LM_DECODER_LAST_PIPELINE_NUM_LAYERS."},
    {"megatron_lm_pp_degree", "", T::kInt, "1", "", kMegatron, "MEGATRON_LM_PP_DEGREE."},
    {"megatron_lm_num_micro_batches", "", T::kInt, "None", "", kMegatron,
     "MEGATRON_LM_NUM_MICRO_BATCHES."},
    {"megatron_lm_sequence_parallelism", "", T::kStr, "None", "", kMegatron,
     "MEGATRON_LM_SEQUENCE_PARALLELISM."},
    {"megatron_lm_recompute_activations", "", T::kStr, "None", "", kMegatron,
     "MEGATRON_LM_RECOMPUTE_ACTIVATIONS."},
    {"megatron_lm_use_distributed_optimizer", "", T::kStr, "None", "", kMegatron,
     "MEGATRON_LM_USE_DISTRIBUTED_OPTIMIZER."},
    {"megatron_lm_gradient_clipping", "", T::kFloat, "1.0", "", kMegatron,
     "MEGATRON_LM_GRADIENT_CLIPPING."},
    {"megatron_lm_recompute_granularity", "", T::kStr, "None", "", kMegatron,
     "MEGATRON_LM_RECOMPUTE_GRANULARITY."},
    {"megatron_lm_recompute_method", "", T::kStr, "None", "", kMegatron,
     "MEGATRON_LM_RECOMPUTE_METHOD."},
    {"megatron_lm_recompute_num_layers", "", T::kInt, "None", "", kMegatron,
     "MEGATRON_LM_RECOMPUTE_NUM_LAYERS."},
    {"megatron_lm_attention_backend", "", T::kStr, "None", "", kMegatron,
     "MEGATRON_LM_ATTENTION_BACKEND."},
    {"megatron_lm_expert_model_parallel_size", "", T::kInt, "None", "", kMegatron,
     "MEGATRON_LM_EXPERT_MODEL_PARALLEL_SIZE."},
    {"megatron_lm_context_parallel_size", "", T::kInt, "None", "", kMegatron,
     "MEGATRON_LM_CONTEXT_PARALLEL_SIZE."},
    {"megatron_lm_attention_dropout", "", T::kFloat, "None", "", kMegatron,
     "MEGATRON_LM_ATTENTION_DROPOUT."},
    {"megatron_lm_hidden_dropout", "", T::kFloat, "None", "", kMegatron,
     "MEGATRON_LM_HIDDEN_DROPOUT."},
    {"megatron_lm_attention_softmax_in_fp32", "", T::kStr, "None", "", kMegatron,
     "MEGATRON_LM_ATTENTION_SOFTMAX_IN_FP32."},
    {"megatron_lm_expert_tensor_parallel_size", "", T::kInt, "None", "", kMegatron,
     "MEGATRON_LM_EXPERT_TENSOR_PARALLEL_SIZE."},
    {"megatron_lm_calculate_per_token_loss", "", T::kStr, "None", "", kMegatron,
     "MEGATRON_LM_CALCULATE_PER_TOKEN_LOSS."},
    {"megatron_lm_use_rotary_position_embeddings", "", T::kStr, "None", "", kMegatron,
     "MEGATRON_LM_USE_ROTARY_POSITION_EMBEDDINGS."},
    {"fp8_backend", "", T::kStr, "None", "ao|te|msamp", kFp8, "ACCELERATE_FP8_BACKEND."},
    {"fp8_use_autocast_during_eval", "", T::kFlag, "False", "", kFp8,
     "ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL=True."},
    {"fp8_margin", "", T::kInt, "0", "", kFp8, "ACCELERATE_FP8_MARGIN."},
    {"fp8_interval", "", T::kInt, "1", "", kFp8, "ACCELERATE_FP8_INTERVAL."},
    {"fp8_format", "", T::kStr, "HYBRID", "HYBRID|E4M3|E5M2", kFp8, "ACCELERATE_FP8_FORMAT."},
    {"fp8_amax_history_len", "", T::kInt, "1024", "", kFp8, "ACCELERATE_FP8_AMAX_HISTORY_LEN."},
    {"fp8_amax_compute_algo", "", T::kStr, "most_recent", "max|most_recent", kFp8,
     "ACCELERATE_FP8_AMAX_COMPUTE_ALGO."},
    {"fp8_override_linear_precision", "", T::kBoolTuple, "False,False,False", "", kFp8,
     "Three booleans, fprop,dgrad,wgrad: ACCELERATE_FP8_OVERRIDE_FPROP, _DGRAD, _WGRAD."},
    {"fp8_opt_level", "", T::kStr, "O2", "O1|O2", kFp8, "ACCELERATE_FP8_OPT_LEVEL."},
    {"fp8_enable_fsdp_float8_all_gather", "", T::kStrToBool, "true", "", kFp8,
     "ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER (1 or 0)."},
    {"fp8_pad_inner_dim", "", T::kStrToBool, "true", "", kFp8,
     "ACCELERATE_FP8_PAD_INNER_DIM (1 or 0)."},
    {"aws_access_key_id", "", T::kStr, "None", "", kAws, "SageMaker only; ignored."},
    {"aws_secret_access_key", "", T::kStr, "None", "", kAws, "SageMaker only; ignored."},
    {"debug", "", T::kTopFlag, "None", "", kTop, "ACCELERATE_DEBUG_MODE=true for the workers."},
    {"mpirun_hostfile", "", T::kStr, "None", "", kMpi,
     "A multi-CPU job through mpirun; not launched by dtrun."},
    {"parallelism_config_dp_replicate_size", "", T::kInt, "1", "", kParallel,
     "PARALLELISM_CONFIG_DP_REPLICATE_SIZE."},
    {"parallelism_config_dp_shard_size", "", T::kInt, "1", "", kParallel,
     "PARALLELISM_CONFIG_DP_SHARD_SIZE."},
    {"parallelism_config_tp_size", "", T::kInt, "1", "", kParallel, "PARALLELISM_CONFIG_TP_SIZE."},
    {"parallelism_config_cp_size", "", T::kInt, "1", "", kParallel, "PARALLELISM_CONFIG_CP_SIZE."},
    {"parallelism_config_cp_backend", "", T::kStr, "torch", "torch", kParallel,
     "PARALLELISM_CONFIG_CP_BACKEND."},
    {"parallelism_config_cp_comm_strategy", "", T::kStr, "allgather", "", kParallel,
     "PARALLELISM_CONFIG_CP_COMM_STRATEGY (with a context-parallel size above 1)."},
    {"parallelism_config_sp_size", "", T::kInt, "1", "", kParallel, "PARALLELISM_CONFIG_SP_SIZE."},
    {"parallelism_config_sp_backend", "", T::kStr, "deepspeed", "deepspeed", kParallel,
     "PARALLELISM_CONFIG_SP_BACKEND."},
    {"parallelism_config_sp_seq_length", "", T::kStr, "None", "", kParallel,
     "PARALLELISM_CONFIG_SP_SEQ_LENGTH (with a sequence-parallel size above 1)."},
    {"parallelism_config_sp_seq_length_is_variable", "", T::kPyBool, "True", "", kParallel,
     "PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE (with a sequence-parallel size above 1)."},
    {"parallelism_config_sp_attn_implementation", "", T::kStr, "sdpa", "", kParallel,
     "PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION (with a sequence-parallel size above 1)."},
}};

}  // namespace

std::span<const AccelerateOption> accelerateOptions() { return kOptions; }

}  // namespace dtrun::launcher
