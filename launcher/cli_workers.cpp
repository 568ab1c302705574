// The steps of the command line's resolution that concern the workers (launcher/cli_steps.h):
// restarts and signals, the entrypoint, the logs, the hang options, the other launchers'
// conventions and --prewarm, with torchrun's rules.
#include <cctype>
#include <cstdlib>

#include "launcher/cli_steps.h"

namespace dtrun::launcher::steps {

using agent::LaunchConfig;

// Restarts, monitoring, role, signals and shutdown.
void resolveWorkers(LaunchConfig& cfg, const ParsedOptions& t, const Env& env) {
  if (const auto* g = t.value("max_restarts")) {
    cfg.maxRestarts = static_cast<int>(parseInteger(g->source, g->value, 0, 1 << 30));
  }
  if (const auto* g = t.value("monitor_interval")) {
    cfg.monitorInterval = parseSeconds(g->source, g->value);
  }
  if (const auto* g = t.value("start_method")) {
    if (g->value != "spawn" && g->value != "fork" && g->value != "forkserver") {
      throw UsageError(g->source + ": invalid choice '" + g->value +
                       "': expected spawn, fork or forkserver");
    }
    cfg.startMethod = g->value;
  }
  if (const auto* g = t.value("event_log_handler")) {
    if (g->value != "null" && g->value != "console" && g->value != "dynamic_rendezvous") {
      throw UsageError(g->source + ": invalid value '" + g->value +
                       "': expected null, console or dynamic_rendezvous");
    }
    cfg.eventLogHandler = g->value;
  }
  if (const auto* g = t.value("role")) cfg.role = g->value;

  // dtrun's default adds SIGUSR1/SIGUSR2 to torchrun's: Slurm's preemption warning.
  cfg.signalsToHandle.assign(kDefaultHandledSignals.begin(), kDefaultHandledSignals.end());
  if (const auto* g = t.value("signals_to_handle")) {
    cfg.signalsToHandle = parseSignalList(g->source, g->value);
  }
  if (const auto* g = t.value("shutdown_timeout")) {
    cfg.shutdownTimeout = parseSeconds(g->source, g->value, true);
  } else if (auto v = envValue(env, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT")) {
    cfg.shutdownTimeout = parseSeconds("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", *v, true);
  }
  cfg.virtualLocalRank = t.flag("virtual_local_rank");
}

// The worker command, as torchrun's config_from_args builds it.
void resolveEntrypoint(LaunchConfig& cfg, const ParsedOptions& t, const Env& env,
                       const InvocationRules& rules) {
  cfg.script = *t.script();
  cfg.scriptArgs = t.scriptArgs();
  cfg.module = t.flag("module");
  cfg.noPython = t.flag("no_python");
  cfg.runPath = t.flag("run_path");
  if (const auto* g = t.value("python")) {
    if (g->value.empty()) throw UsageError(g->source + ": expected an interpreter path or name");
    cfg.python = g->value;
  } else if (auto exec = envValue(env, "PYTHON_EXEC"); exec && !exec->empty()) {
    cfg.python = *exec;  // torchrun's os.getenv("PYTHON_EXEC", sys.executable)
  }
  if (cfg.runPath) {
    // torchrun runs its run_script_path function, which is also the name in its failure report.
    cfg.entrypoint = {cfg.python, "-u", cfg.script};
    cfg.entrypointName = "run_script_path";
  } else if (cfg.noPython) {
    if (cfg.module) {
      throw UsageError(
          "Don't use both the '--no-python' flag and the '--module' flag at the same time.");
    }
    cfg.entrypoint = {cfg.script};
    cfg.entrypointName = cfg.script;
  } else {
    cfg.entrypoint = {cfg.python};
    if (rules.unbuffered) cfg.entrypoint.push_back("-u");
    if (cfg.module) cfg.entrypoint.push_back("-m");
    cfg.entrypoint.push_back(cfg.script);
    cfg.entrypointName = cfg.script;  // torch: the first argument not starting with '-'
  }
}

// --log-dir, -r, -t, the console filters, and the accepted-only --logs-specs/--numa-binding.
void resolveLogs(LaunchConfig& cfg, const ParsedOptions& t) {
  if (const auto* g = t.value("log_dir"); g && !g->value.empty()) cfg.logDir = g->value;
  if (const auto* g = t.value("redirects")) cfg.redirects = parseStdSpec(g->source, g->value);
  if (const auto* g = t.value("tee")) cfg.tee = parseStdSpec(g->source, g->value);
  if (const auto* g = t.value("local_ranks_filter"); g && !g->value.empty()) {
    cfg.localRanksFilter = parseRankSet(g->source, g->value);
  }
  if (const auto* g = t.value("duplicate_stdout_filters")) {
    cfg.duplicateStdoutFilters = splitEscapedCommaList(g->value);
  }
  if (const auto* g = t.value("duplicate_stderr_filters")) {
    cfg.duplicateStderrFilters = splitEscapedCommaList(g->value);
  }
  if (const auto* g = t.value("logs_specs")) {
    cfg.logsSpecs = g->value;
    cfg.warnings.push_back(g->source + " " + g->value +
                           ": dtrun has no torchrun.logs_specs plugins; using its default logs "
                           "layout");
  }
  if (const auto* g = t.value("numa_binding")) {
    if (g->value != "node" && g->value != "socket" && g->value != "exclusive" &&
        g->value != "core-complex") {
      throw UsageError(g->source + ": invalid choice '" + g->value +
                       "': expected node, socket, exclusive or core-complex");
    }
    cfg.numaBinding = g->value;
  }
}

// --file-timer (TORCHELASTIC_ENABLE_FILE_TIMER), --stall-timeout, --dump-stacks,
// --exit-barrier-timeout.
void resolveHangOptions(LaunchConfig& cfg, const ParsedOptions& t, const Env& env) {
  // torchrun's rule: exactly "1" enables it; anything else leaves it off, silently.
  cfg.fileTimer =
      t.flag("file_timer") || envValue(env, "TORCHELASTIC_ENABLE_FILE_TIMER").value_or("") == "1";
  cfg.timerFile = envValue(env, "TORCHELASTIC_TIMER_FILE").value_or("");
  if (const auto* g = t.value("stall_timeout")) {
    cfg.stallTimeout = parseSeconds(g->source, g->value);
  }
  cfg.dumpStacks = t.flag("dump_stacks");
  if (cfg.dumpStacks && !cfg.fileTimer && !cfg.stallTimeout) {
    cfg.warnings.push_back(
        "--dump-stacks does nothing without --file-timer or --stall-timeout: nothing is "
        "watched for hangs");
  }
  if (const auto* g = t.value("exit_barrier_timeout")) {
    cfg.exitBarrierTimeout = parseSeconds(g->source, g->value, true);
  }
}

// --worker-variables and --exit-code: the other launchers' conventions (launcher/front_end.h).
void resolveConventions(LaunchConfig& cfg, const ParsedOptions& t) {
  if (const auto* g = t.value("worker_variables")) {
    if (g->value == "torchrun") {
      cfg.workerVariables = agent::WorkerVariables::kTorchrun;
    } else if (g->value == "deepspeed") {
      cfg.workerVariables = agent::WorkerVariables::kDeepSpeed;
    } else if (g->value == "none") {
      cfg.workerVariables = agent::WorkerVariables::kNone;
    } else {
      throw UsageError(g->source + ": invalid value '" + g->value +
                       "': expected torchrun, deepspeed or none");
    }
    if (cfg.workerVariables == agent::WorkerVariables::kNone && cfg.nprocPerNode != 1) {
      throw UsageError(g->source +
                       " none: workers without a rank cannot tell each other "
                       "apart; it starts one process (--nproc-per-node 1)");
    }
  }
  if (const auto* g = t.value("exit_code")) {
    if (g->value == "worker") {
      // One scheme decides the code (agent/outcome.h): this one and --exit-codes detailed
      // would both claim it.
      if (cfg.exitCodes == agent::ExitCodeScheme::kDetailed) {
        throw UsageError(g->source + " worker and --exit-codes detailed choose two exit-code " +
                         "schemes: give one");
      }
      cfg.exitCodes = agent::ExitCodeScheme::kWorker;
    } else if (g->value != "torchrun") {
      throw UsageError(g->source + ": invalid value '" + g->value +
                       "': expected torchrun or worker");
    }
  }
}

// --prewarm MODULE[,MODULE...] and --prewarm-timeout: module names checked, and refused where a
// standby cannot stand in for a worker.
void resolvePrewarm(LaunchConfig& cfg, const ParsedOptions& t) {
  const auto* g = t.value("prewarm");
  if (g && !g->value.empty()) {
    for (const std::string& name : splitOn(g->value, ',')) {
      bool ok = !name.empty();
      for (const std::string& part : splitOn(name, '.')) {
        ok = ok && !part.empty() && !std::isdigit(static_cast<unsigned char>(part[0]));
        for (char c : part) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
      }
      if (!ok) {
        throw UsageError(g->source + ": invalid value '" + g->value + "': '" + name +
                         "' is not a module name; expected MODULE[,MODULE...], e.g. torch");
      }
      if (cfg.module && name == cfg.script) {
        throw UsageError(g->source + ": '" + name +
                         "' is the -m module, which runs as __main__: it cannot be imported "
                         "ahead");
      }
      cfg.prewarm.push_back(name);
    }
    if (cfg.noPython && !cfg.runPath) {
      throw UsageError(g->source +
                       " with --no-python: the workers are not Python interpreters, so there "
                       "is nothing to import ahead");
    }
  }
  if (const auto* timeout = t.value("prewarm_timeout")) {
    cfg.prewarmTimeout = parseSeconds(timeout->source, timeout->value);
    if (cfg.prewarm.empty()) {
      cfg.warnings.push_back(timeout->source + " does nothing without --prewarm");
    }
  }
}

}  // namespace dtrun::launcher::steps
