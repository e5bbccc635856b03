#include "actors/pretrain_run.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <span>
#include <stdexcept>

#include "actors/checkpoint_store.hpp"
#include "actors/env_state.hpp"
#include "actors/metrics_log.hpp"
#include "actors/progress_reporter.hpp"
#include "gpu/atomic_file.hpp"
#include "gpu/check.hpp"
#include "gpu/context.hpp"
#include "gpu/device.hpp"
#include "models/tft/tft.hpp"
#include "pretrain/csv_windows.hpp"
#include "pretrain/diffusion_trainer.hpp"
#include "pretrain/hmm_filter.hpp"
#include "pretrain/linear_baseline.hpp"
#include "pretrain/market_windows.hpp"
#include "pretrain/tft_interpretation.hpp"
#include "pretrain/trainer.hpp"
#include "rl/envs/ohlcv_csv.hpp"

namespace foxhunt::actors {
namespace fs = std::filesystem;
using pretrain::PretrainConfig;

namespace {

// The Philox seeds of the data streams besides training (run.seed): disjoint windows.
constexpr std::uint64_t kEvalSeedMix = 0x9E3779B97F4A7C15ull;
constexpr std::uint64_t kFitSeedMix = 0xC2B2AE3D27D4EB4Full;
constexpr const char* kStateFile = "pretrain.state";
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kInterpretationFile = "interpretation.json";  // run.interpret
constexpr const char* kKeptMarket = "market.resolved.toml";

pretrain::TrainerSpec trainer_spec(const PretrainConfig& c, std::int64_t assets, std::int64_t regimes) {
  pretrain::TrainerSpec t;
  t.model.kind = c.model.kind;
  t.model.hidden = c.model.hidden;
  t.model.layers = c.model.layers;
  t.model.math = c.optim.math == "bf16" ? gpu::LinearMath::bf16 : gpu::LinearMath::fp32;
  t.model.family = c.model.family;
  const pretrain::TaskShape shape = pretrain::task_shape(c, assets, regimes);
  pretrain::TaskSpec& task = t.task;
  if (c.task.kind == "returns") {
    task.kind = pretrain::TaskKind::returns;
    task.loss = c.task.loss == "quantile" ? pretrain::LossKind::quantile : pretrain::LossKind::mse;
    if (task.loss == pretrain::LossKind::quantile)
      for (const double q : c.task.quantiles) task.quantiles.push_back(static_cast<float>(q));
    task.targets = shape.targets;
  } else if (c.task.kind == "volatility") {
    task.kind = pretrain::TaskKind::volatility;
    task.loss = pretrain::LossKind::mse;
    task.targets = shape.targets;
  } else if (c.task.kind == "regime") {
    task.kind = pretrain::TaskKind::regime;
    task.loss = pretrain::LossKind::cross_entropy;
    task.classes = shape.classes;
    task.targets = 0;
  } else {
    task.kind = pretrain::TaskKind::direction;
    task.loss = pretrain::LossKind::binary_cross_entropy;
    task.targets = assets;
  }
  t.optim.lr = static_cast<float>(c.optim.lr);
  t.optim.weight_decay = static_cast<float>(c.optim.weight_decay);
  t.optim.beta1 = static_cast<float>(c.optim.betas[0]);
  t.optim.beta2 = static_cast<float>(c.optim.betas[1]);
  t.optim.eps = static_cast<float>(c.optim.eps);
  t.optim.warmup_steps = c.optim.warmup_steps;
  t.optim.decay = pretrain::parse_decay(c.optim.decay);
  t.optim.grad_clip = static_cast<float>(c.optim.grad_clip);
  t.optim.steps = c.optim.steps;
  t.window.window = c.data.window;
  t.window.horizon = pretrain::label_horizon(c);
  t.window.vol_horizon = pretrain::label_vol_horizon(c);
  t.assets = assets;
  t.batch = c.optim.batch;
  t.seed = c.run.seed;
  return t;
}

// The data of a run: a simulated market (training and validation: two seeds of one stream), or
// the CSV bars' train and validation parts.
struct RunData {
  std::unique_ptr<pretrain::MarketWindows> market;
  std::unique_ptr<pretrain::CsvWindows> csv_train, csv_validation;
  rl::MarketConfig market_config;
  std::int64_t assets = 1, regimes = 1;
  std::int64_t split[4] = {0, 0, 0, 0};  // source (0 market, 1 csv), train_end, validation_end, bars
  pretrain::GenerateFn train, validation;
  std::uint64_t validation_seed = 0;
};

RunData make_data(const PretrainConfig& c) {
  RunData d;
  pretrain::WindowSpec spec;
  spec.window = pretrain::sample_window(c);
  spec.horizon = pretrain::label_horizon(c);
  spec.vol_horizon = pretrain::label_vol_horizon(c);
  d.validation_seed = c.run.seed ^ kEvalSeedMix;
  if (c.data.source == "market") {
    d.market_config = pretrain::pretrain_market(c);
    d.market = std::make_unique<pretrain::MarketWindows>(d.market_config, spec, c.optim.batch);
    d.assets = d.market->assets();
    d.regimes = d.market->regimes();
    pretrain::MarketWindows* m = d.market.get();
    d.train = [m](const pretrain::WindowBatch& out, std::int64_t b, std::uint64_t seed, const std::uint64_t* counter,
                  cudaStream_t s) { m->generate(out, b, seed, counter, s); };
    d.validation = d.train;
    return d;
  }
  std::vector<fs::path> files(c.data.path.begin(), c.data.path.end());
  const rl::OhlcvData bars = rl::load_ohlcv_per_asset(files, pretrain::bars_per_window(c));
  const pretrain::BarSplit split = pretrain::resolve_split(c, bars.bars);
  const std::vector<double> scale = pretrain::train_return_scale(bars, 0, split.train_end);
  d.csv_train = std::make_unique<pretrain::CsvWindows>(bars, 0, split.train_end, spec, scale, c.optim.batch);
  d.csv_validation =
      std::make_unique<pretrain::CsvWindows>(bars, split.train_end, split.validation_end, spec, scale, c.optim.batch);
  d.assets = d.csv_train->assets();
  d.regimes = 1;
  d.split[0] = 1;
  d.split[1] = split.train_end;
  d.split[2] = split.validation_end;
  d.split[3] = split.bars;
  pretrain::CsvWindows* tr = d.csv_train.get();
  pretrain::CsvWindows* va = d.csv_validation.get();
  d.train = [tr](const pretrain::WindowBatch& out, std::int64_t b, std::uint64_t seed, const std::uint64_t* counter,
                 cudaStream_t s) { tr->generate(out, b, seed, counter, s); };
  d.validation = [va](const pretrain::WindowBatch& out, std::int64_t b, std::uint64_t seed,
                      const std::uint64_t* counter, cudaStream_t s) { va->generate(out, b, seed, counter, s); };
  return d;
}

// Trainer: PretrainTrainer or DiffusionTrainer (the same counters and statistics layout).
template <class Trainer>
std::vector<DeviceSpan> state_spans(Trainer& t, std::int64_t* split_device) {
  gpu::ParameterArena& a = t.arena();
  const std::size_t moments = static_cast<std::size_t>(a.padded_count()) * sizeof(float);
  return {{"adam_m", a.adam_m(), moments},
          {"adam_v", a.adam_v(), moments},
          {"counters", t.counters(), Trainer::kCounterCount * sizeof(std::uint64_t)},
          {"stats_sums", t.stats_sums(), Trainer::kStatsSums * sizeof(double)},
          {"split", split_device, 4 * sizeof(std::int64_t)}};
}

// The split array of a pretrain.state file, read on the host (the file's own format,
// actors/env_state.hpp): the resumed run must read the bars its checkpoint was trained on.
std::vector<std::int64_t> read_split(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::string magic, version;
  std::size_t count = 0;
  in >> magic >> version >> count;
  in.get();
  for (std::size_t k = 0; in && k < count; ++k) {
    std::string name;
    std::size_t bytes = 0;
    in >> name >> bytes;
    in.get();
    std::vector<char> data(bytes);
    in.read(data.data(), static_cast<std::streamsize>(bytes));
    if (name == "split" && in && bytes == 4 * sizeof(std::int64_t)) {
      std::vector<std::int64_t> v(4);
      std::memcpy(v.data(), data.data(), bytes);
      return v;
    }
  }
  throw std::runtime_error(file.string() + ": no split array (not a pretrain checkpoint)");
}

// The progress line (stderr) and the metrics files.
class PretrainReporter {
 public:
  PretrainReporter(const PretrainConfig& c, const fs::path& run_dir, bool console, std::int64_t total)
      : total_(total), console_(console), tty_(console && isatty(2)) {
    if (c.run.jsonl) jsonl_ = std::make_unique<JsonlWriter>(run_dir / "metrics.jsonl");
    if (c.run.tensorboard) tb_ = std::make_unique<TensorBoardWriter>(run_dir / "tensorboard");
  }
  void write(std::int64_t step, const Scalars& scalars) {
    const double now = wall_time_now();
    if (jsonl_) jsonl_->scalars(step, scalars, now);
    if (tb_) tb_->scalars(step, scalars, now);
    if (++calls_ % 10 == 0) flush();
  }
  void line(std::int64_t step, double seconds, std::int64_t checkpoints) {
    if (!console_) return;
    const double dt = seconds - last_seconds_;
    if (dt > 0) sps_ = static_cast<double>(step - last_step_) / dt;
    last_seconds_ = seconds;
    last_step_ = step;
    std::string l = "step " + human_count(static_cast<double>(step)) + "/" + human_count(static_cast<double>(total_)) +
                    " | " + human_count(sps_) + " steps/s" + latest_;
    if (checkpoints) l += " | ckpt " + std::to_string(checkpoints);
    if (tty_)
      std::fprintf(stderr, "\r\033[K%s", l.c_str());
    else if (seconds - last_line_ >= 10.0) {
      std::fprintf(stderr, "%s\n", l.c_str());
      last_line_ = seconds;
    }
  }
  void set_summary(std::string s) { latest_ = std::move(s); }
  double steps_per_second() const { return sps_; }
  void flush() {
    if (jsonl_) jsonl_->flush();
    if (tb_) tb_->flush();
  }
  void finish() {
    if (tty_) std::fprintf(stderr, "\n");
    flush();
  }

 private:
  std::int64_t total_;
  bool console_, tty_;
  double last_seconds_ = 0, last_line_ = -1e9, sps_ = 0;
  std::int64_t last_step_ = 0, calls_ = 0;
  std::string latest_;
  std::unique_ptr<JsonlWriter> jsonl_;
  std::unique_ptr<TensorBoardWriter> tb_;
};

void put(Scalars& s, const char* tag, double v) {
  if (std::isfinite(v)) s.emplace_back(tag, v);
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

}  // namespace

std::vector<std::pair<std::string, std::size_t>> pretrain_state_arrays(std::int64_t padded_params) {
  const std::size_t moments = static_cast<std::size_t>(padded_params) * sizeof(float);
  return {{"adam_m", moments},
          {"adam_v", moments},
          {"counters", pretrain::PretrainTrainer::kCounterCount * sizeof(std::uint64_t)},
          {"stats_sums", pretrain::PretrainTrainer::kStatsSums * sizeof(double)},
          {"split", 4 * sizeof(std::int64_t)}};
}

std::vector<std::pair<std::string, std::string>> kept_pretrain_files(const PretrainConfig& c) {
  if (c.data.source != "market") return {{"config.resolved.toml", pretrain::resolved_pretrain_toml(c)}};
  const rl::MarketConfig m = pretrain::pretrain_market(c);
  PretrainConfig kept = c;
  kept.data.market = kKeptMarket;  // relative: beside the kept config
  return {{"config.resolved.toml", pretrain::resolved_pretrain_toml(kept)}, {kKeptMarket, rl::market_config_toml(m)}};
}

namespace {

// interpretation.json: a TftInterpretation's means with their shapes, the validation's step, and
// each variable's selection weight averaged over the steps. Replaced atomically (gpu/atomic_file).
void write_interpretation(const fs::path& file, const pretrain::TftWeights& w, std::int64_t step) {
  const auto rows = [](const std::vector<double>& a, std::int64_t n, std::int64_t m) {
    nlohmann::json out = nlohmann::json::array();
    for (std::int64_t i = 0; i < n; ++i) out.push_back(std::vector<double>(a.begin() + i * m, a.begin() + (i + 1) * m));
    return out;
  };
  std::vector<double> per_variable(static_cast<std::size_t>(w.variables), 0.0);
  for (std::int64_t t = 0; t < w.steps; ++t)
    for (std::int64_t v = 0; v < w.variables; ++v)
      per_variable[static_cast<std::size_t>(v)] +=
          w.selection[static_cast<std::size_t>(t * w.variables + v)] / static_cast<double>(w.steps);
  const nlohmann::json doc = {{"model", "tft"},
                              {"step", step},
                              {"windows", w.windows},
                              {"heads", w.heads},
                              {"steps", w.steps},
                              {"variables", w.variables},
                              {"attention_of_last_step", rows(w.attention, w.heads, w.steps)},
                              {"selection", rows(w.selection, w.steps, w.variables)},
                              {"selection_mean_over_steps", per_variable}};
  const std::string text = doc.dump(1) + "\n";
  gpu::write_file_atomically(file, {std::as_bytes(std::span<const char>(text))}, "interpretation");
}

// The training loop of a run, its reports and checkpoints, for either trainer (PretrainTrainer,
// DiffusionTrainer: the same step, statistics, validation and checkpoint interface). evaluate
// starts a validation; summarize(metrics, step) words its metrics for the progress line and the
// log once they have arrived.
template <class Trainer, class Evaluate, class Summarize>
PretrainOutcome train_loop(const PretrainRequest& req, Trainer& trainer, Counters counters,
                           const std::vector<std::pair<std::string, std::string>>& kept, const RunData& data,
                           const Evaluate& evaluate, const Summarize& summarize, cudaStream_t s) {
  const PretrainConfig& cfg = req.config;
  const std::int64_t stop_at = req.stop_at > 0 ? req.stop_at : cfg.optim.steps;
  gpu::DeviceBuffer<std::int64_t> split_device(4);
  split_device.upload(std::span<const std::int64_t>(data.split, 4), s);
  if (req.resume) {
    trainer.arena().load(*req.resume / kModelFile, s);
    read_spans(*req.resume / kStateFile, state_spans(trainer, split_device.data()), s);
    spdlog::info("resuming from {} at step {}", req.resume->string(), counters.updates);
  }
  std::int64_t step = counters.updates;

  CheckpointStore store(req.run_dir / "checkpoints");
  store.keep_newest(cfg.run.keep);
  for (const auto& [name, text] : kept) store.attach(name, text);
  auto checkpoint = [&]() -> fs::path {
    counters.env_steps = step;
    counters.updates = step;
    return store.write(counters, [&](const fs::path& dir) {
      trainer.arena().save(dir / kModelFile, s, false);
      write_spans(dir / kStateFile, state_spans(trainer, split_device.data()), s);
    });
  };

  PretrainReporter reporter(cfg, req.run_dir, req.console, stop_at);
  const auto t0 = std::chrono::steady_clock::now();
  const auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  std::int64_t checkpoints = 0;
  PretrainOutcome out;
  std::int64_t eval_step = -1;

  auto report = [&](std::int64_t at, const Scalars& sc) {
    reporter.write(at, sc);
    if (req.observer) req.observer(PretrainProgress{at, seconds(), sc});
  };
  auto on_stats = [&](const pretrain::TrainStats& st) {
    Scalars sc;
    put(sc, "train/loss", st.loss);
    put(sc, "train/grad_norm", st.grad_norm);
    put(sc, "train/lr", st.lr);
    put(sc, "perf/steps_per_s", reporter.steps_per_second());
    report(static_cast<std::int64_t>(st.step), sc);
  };
  auto on_eval = [&](const pretrain::EvalMetrics& m) {
    Scalars sc;
    put(sc, "val/loss", m.loss);
    put(sc, "val/r2", m.r2);
    put(sc, "val/mse", m.mse);
    put(sc, "val/pinball", m.pinball);
    put(sc, "val/accuracy", m.accuracy);
    put(sc, "baseline/linear_r2", m.baseline_r2);
    put(sc, "baseline/hmm_accuracy", m.baseline_accuracy);
    report(eval_step, sc);
    const std::string summary = summarize(m, eval_step);
    reporter.set_summary(summary);
    spdlog::info("step {}: validation over {} windows:{}", eval_step, m.windows, summary);
    out.last_eval = m;
    out.last_eval_step = eval_step;
  };
  auto validate = [&] {
    if (trainer.eval_pending()) on_eval(trainer.wait_eval());
    eval_step = step;
    evaluate();
  };

  RunResult& result = out.result;
  try {
    while (step < stop_at) {
      if (req.stop_signal != nullptr && req.stop_signal->load() != 0) {
        result.outcome = {RunOutcome::Kind::stopped, std::string("stopped by ") + stop_signal_name(req.stop_signal->load())};
        break;
      }
      trainer.step();
      ++step;
      if (step % cfg.run.log_every == 0) {
        if (trainer.stats_pending()) on_stats(trainer.wait_stats());
        trainer.publish_stats();
      }
      if (step % cfg.run.eval_every == 0 && step < stop_at) validate();
      pretrain::TrainStats st;
      if (trainer.poll_stats(st)) on_stats(st);
      pretrain::EvalMetrics m;
      if (trainer.poll_eval(m)) on_eval(m);
      reporter.line(step, seconds(), checkpoints);
      if (cfg.run.checkpoint_every > 0 && step % cfg.run.checkpoint_every == 0 && step < stop_at) {
        const fs::path dir = checkpoint();
        ++checkpoints;
        spdlog::info("checkpoint written: {}", dir.string());
      }
    }
    if (result.outcome.kind == RunOutcome::Kind::completed)
      result.outcome.reason = "reached step " + std::to_string(stop_at);
    validate();  // the final model's metrics
    if (trainer.stats_pending()) on_stats(trainer.wait_stats());
    on_eval(trainer.wait_eval());
  } catch (const std::exception& e) {
    result.outcome = {RunOutcome::Kind::failed, e.what()};
  }
  if (result.outcome.kind != RunOutcome::Kind::failed) {
    try {
      result.final_checkpoint = checkpoint();
    } catch (const std::exception& e) {
      result.checkpoint_error = std::string("final checkpoint failed: ") + e.what();
    }
  }
  FH_CHECK(cudaStreamSynchronize(s));
  result.counters.env_steps = step;
  result.counters.updates = step;
  reporter.line(step, seconds(), checkpoints);
  reporter.finish();
  spdlog::info("run {}: {} ({} steps)", kind_name(result.outcome.kind), result.outcome.reason, step);
  if (result.final_checkpoint) spdlog::info("final checkpoint {}", result.final_checkpoint->string());
  if (!result.checkpoint_error.empty()) spdlog::error("{}", result.checkpoint_error);
  return out;
}

}  // namespace

PretrainOutcome run_pretraining(const PretrainRequest& req) {
  const PretrainConfig& cfg = req.config;
  const std::int64_t stop_at = req.stop_at > 0 ? req.stop_at : cfg.optim.steps;
  Counters counters;
  if (req.resume) {
    for (const char* f : {kModelFile, kStateFile, "counters.json"})
      if (!fs::is_regular_file(*req.resume / f))
        throw std::invalid_argument("--resume " + req.resume->string() + ": " + f + " is missing (not a pretrain checkpoint)");
    counters = CheckpointStore::read_counters(*req.resume);
    if (counters.updates >= stop_at)
      throw std::invalid_argument("--resume " + req.resume->string() + ": the checkpoint is at step " +
                                  std::to_string(counters.updates) + ", the run stops at step " +
                                  std::to_string(stop_at) + " (raise --steps or optim.steps)");
  }
  gpu::require_device("foxhunt pretrain");
  FH_CHECK(cudaSetDevice(cfg.run.device));
  gpu::DeviceContext ctx(cfg.run.device, 1);
  const cudaStream_t s = ctx.stream();

  RunData data = make_data(cfg);
  if (req.resume) {
    const std::vector<std::int64_t> split = read_split(*req.resume / kStateFile);
    for (int k = 0; k < 4; ++k)
      if (split[static_cast<std::size_t>(k)] != data.split[k])
        throw std::invalid_argument("--resume " + req.resume->string() + ": the checkpoint was trained on the split (" +
                                    std::to_string(split[1]) + ", " + std::to_string(split[2]) + ", " +
                                    std::to_string(split[3]) + ") of source " + std::to_string(split[0]) +
                                    ", this config gives (" + std::to_string(data.split[1]) + ", " +
                                    std::to_string(data.split[2]) + ", " + std::to_string(data.split[3]) +
                                    ") of source " + std::to_string(data.split[0]) + " (source 0: market, 1: csv)");
  }
  fs::create_directories(req.run_dir);
  const auto kept = kept_pretrain_files(cfg);
  for (const auto& [name, text] : kept) {
    std::ofstream out(req.run_dir / name, std::ios::binary);
    out << text;
    if (!out) throw std::runtime_error("cannot write " + (req.run_dir / name).string());
  }

  if (cfg.model.kind == "diffusion") {
    pretrain::DiffusionTrainer trainer(pretrain::diffusion_trainer_spec(cfg, data.assets), data.train, ctx.blas());
    const auto evaluate = [&] { trainer.evaluate(data.validation, data.validation_seed, cfg.run.eval_windows); };
    const auto summarize = [](const pretrain::EvalMetrics& m, std::int64_t) {
      return " | val eps loss " + fmt(m.loss);
    };
    return train_loop(req, trainer, counters, kept, data, evaluate, summarize, s);
  }
  pretrain::PretrainTrainer trainer(trainer_spec(cfg, data.assets, data.regimes), data.train, ctx.blas());
  // The baselines, on the same validation windows as the model.
  std::unique_ptr<pretrain::LinearBaseline> linear;
  std::unique_ptr<pretrain::HmmFilter> hmm;
  const pretrain::TaskSpec& task = trainer.spec().task;
  if (task.regression()) {
    linear = std::make_unique<pretrain::LinearBaseline>(cfg.data.window * data.assets, task.targets);
    trainer.fit_linear_baseline(*linear, data.train, cfg.run.seed ^ kFitSeedMix, cfg.run.baseline_fit_samples);
  } else if (task.kind == pretrain::TaskKind::regime) {
    try {
      pretrain::HmmFilter::check_supported(data.market_config);
      hmm = std::make_unique<pretrain::HmmFilter>(data.market_config, cfg.data.window);
    } catch (const std::invalid_argument& e) {
      spdlog::warn("no HMM filter baseline for this market: {}", e.what());
    }
  }

  // run.interpret (tft only, checked by the config): the weights the model looks at, averaged over
  // each validation's windows, written to interpretation.json when its metrics arrive.
  std::unique_ptr<pretrain::TftInterpretation> interpretation;
  if (cfg.run.interpret)
    interpretation =
        std::make_unique<pretrain::TftInterpretation>(dynamic_cast<const models::tft::Tft&>(trainer.model()));
  const bool regime = task.kind == pretrain::TaskKind::regime;
  const auto evaluate = [&] {
    pretrain::PretrainTrainer::BatchHook hook;
    if (interpretation) {
      interpretation->reset(s);
      hook = [&](std::int64_t n, cudaStream_t stream) {
        interpretation->accumulate(trainer.model_workspace(), n, stream);
      };
    }
    trainer.evaluate(data.validation, data.validation_seed, cfg.run.eval_windows, linear.get(), hmm.get(), hook);
    if (interpretation) interpretation->publish(s);
  };
  const auto summarize = [&](const pretrain::EvalMetrics& m, std::int64_t at) {
    if (interpretation) write_interpretation(req.run_dir / kInterpretationFile, interpretation->wait(), at);
    std::string summary = " | val loss " + fmt(m.loss);
    if (task.regression()) summary += " | val R2 " + fmt(m.r2) + " (linear " + fmt(m.baseline_r2) + ")";
    if (!task.regression()) summary += " | val acc " + fmt(m.accuracy);
    if (regime && hmm) summary += " (HMM " + fmt(m.baseline_accuracy) + ")";
    return summary;
  };
  return train_loop(req, trainer, counters, kept, data, evaluate, summarize, s);
}

}  // namespace foxhunt::actors
