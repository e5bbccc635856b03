#pragma once
// `foxhunt pretrain`: pretrain::PretrainTrainer's loop on one stream with the run directory of
// `foxhunt train`:
//   config.resolved.toml    the resolved pretrain config (a market run: naming market.resolved.toml)
//   market.resolved.toml    data.source = "market": the market as read
//   train.log, metrics.jsonl, tensorboard/   the log and the metrics (train/*, val/*, baseline/*)
//   interpretation.json     run.interpret (tft): the attention of the window's last step and the
//                           variable selection weights, means over the latest validation's windows
//   checkpoints/step_<S>/   every run.checkpoint_every steps and at the end, written atomically
//                           (actors/checkpoint_store), each holding
//     model.safetensors     the model's and the head's parameters under their names
//     pretrain.state        adam_m, adam_v (the arena's flat moments), counters (training steps,
//                           data counter, validation counter, statistics window start), stats_sums,
//                           split (data source, train_end, validation_end, bars)
//     counters.json         env_steps = updates = the training steps
//     the kept config files
// A resumed run (--resume) continues bitwise where the checkpoint was taken: the same parameters,
// moments, counters and hence the same batches and learning rates as the uninterrupted run.
// SIGINT / SIGTERM (stop_signal): the run stops after the step in flight, validates, writes its
// final checkpoint and ends with outcome "stopped" (exit code 0, as `foxhunt train`).
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/pipeline.hpp"
#include "pretrain/config.hpp"
#include "pretrain/tasks.hpp"

namespace foxhunt::actors {

struct PretrainProgress {
  std::int64_t step = 0;
  double seconds = 0;
  Scalars scalars;  // the values written to metrics.jsonl at this step
};

struct PretrainRequest {
  pretrain::PretrainConfig config;
  std::filesystem::path run_dir;                // created
  std::optional<std::filesystem::path> resume;  // a checkpoint directory (resolve_checkpoint)
  std::int64_t stop_at = -1;                    // --steps: stop after this many steps in all (< 0: optim.steps)
  const std::atomic<int>* stop_signal = nullptr;
  bool console = true;  // the progress line on stderr
  std::function<void(const PretrainProgress&)> observer;  // after each report (tests)
};

struct PretrainOutcome {
  RunResult result;  // counters: env_steps = updates = the training steps at the end
  std::optional<pretrain::EvalMetrics> last_eval;
  std::int64_t last_eval_step = -1;
};

// The checkpoint's pretrain.state arrays as (name, bytes), in file order.
std::vector<std::pair<std::string, std::size_t>> pretrain_state_arrays(std::int64_t padded_params);

// What a run keeps of its configuration (name, text): config.resolved.toml and, for a market,
// market.resolved.toml (which the kept config names as data.market).
std::vector<std::pair<std::string, std::string>> kept_pretrain_files(const pretrain::PretrainConfig& c);

// Throws std::invalid_argument / std::runtime_error before anything runs for a configuration or a
// checkpoint that cannot run; otherwise the outcome (failures in result.outcome).
PretrainOutcome run_pretraining(const PretrainRequest& request);

}  // namespace foxhunt::actors
