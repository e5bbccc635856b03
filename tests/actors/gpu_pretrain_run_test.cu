// `foxhunt pretrain` runs (actors::run_pretraining) on the device: the run directory (kept
// configs, metrics with the validation and baseline scalars, checkpoints with the model's named
// parameters and the trainer state); a run of N steps equals N/2 steps then a resume for the rest,
// bitwise (parameters, optimizer moments, counters); a stop signal ends the run with a final
// checkpoint and the outcome "stopped" (exit code 0); a resume with another config's split or past
// its steps is refused; run.interpret writes a TFT's attention and selection weights.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "actors/env_state.hpp"
#include "actors/pretrain_run.hpp"
#include "gpu/safetensors.hpp"
#include "pretrain/config.hpp"
#include "support/file_bytes.hpp"
#include "support/gpu_test.hpp"
#include "support/paths.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

class PretrainRunTest : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    root_ = fs::temp_directory_path() / ("foxhunt_pretrain_run_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!root_.empty()) fs::remove_all(root_, ec);
    test::GpuTest::TearDown();
  }
  // model: the [model] table's lines; extra_run: more [run] lines.
  pretrain::PretrainConfig config(std::int64_t steps = 40,
                                  const std::string& model = "kind = \"lstm\"\nhidden = 8\nlayers = 2\n",
                                  const std::string& extra_run = "") {
    const fs::path market = test::configs_dir() / "markets" / "ou_mean_reversion.toml";
    std::ostringstream t;
    t << "[model]\n"
      << model << "[data]\nsource = \"market\"\nmarket = \"" << market.string() << "\"\nwindow = 16\n"
      << "[task]\nkind = \"returns\"\n"
      << "[optim]\nlr = 0.003\nwarmup_steps = 5\nbatch = 64\nsteps = " << steps << "\n"
      << "[run]\nseed = 5\neval_every = 20\neval_windows = 512\nbaseline_fit_samples = 2048\nlog_every = 10\n"
      << extra_run;
    const fs::path file = root_ / "p.toml";
    std::ofstream(file) << t.str();
    return pretrain::load_pretrain_config(file);
  }
  PretrainOutcome run(const pretrain::PretrainConfig& c, const std::string& dir,
                      std::optional<fs::path> resume = std::nullopt, std::int64_t stop_at = -1,
                      const std::atomic<int>* stop = nullptr,
                      std::function<void(const PretrainProgress&)> observer = nullptr) {
    PretrainRequest req;
    req.config = c;
    req.run_dir = root_ / dir;
    req.resume = std::move(resume);
    req.stop_at = stop_at;
    req.stop_signal = stop;
    req.console = false;
    req.observer = std::move(observer);
    return run_pretraining(req);
  }
  static std::string text_of(const fs::path& f) {
    std::ifstream in(f);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  fs::path root_;
};

TEST_F(PretrainRunTest, WritesTheRunDirectory) {
  const PretrainOutcome out = run(config(), "a");
  ASSERT_EQ(out.result.outcome.kind, RunOutcome::Kind::completed) << out.result.outcome.reason;
  EXPECT_EQ(out.result.exit_code(), 0);
  EXPECT_EQ(out.result.counters.updates, 40);
  ASSERT_TRUE(out.last_eval.has_value());
  EXPECT_EQ(out.last_eval_step, 40);
  EXPECT_EQ(out.last_eval->windows, 512u);
  EXPECT_TRUE(std::isfinite(out.last_eval->r2));
  EXPECT_TRUE(std::isfinite(out.last_eval->baseline_r2));

  const fs::path dir = root_ / "a";
  EXPECT_TRUE(fs::is_regular_file(dir / "config.resolved.toml"));
  EXPECT_TRUE(fs::is_regular_file(dir / "market.resolved.toml"));
  EXPECT_NE(text_of(dir / "config.resolved.toml").find("market = \"market.resolved.toml\""), std::string::npos);
  const std::string metrics = text_of(dir / "metrics.jsonl");
  for (const char* tag : {"train/loss", "train/lr", "train/grad_norm", "val/r2", "val/mse", "baseline/linear_r2"})
    EXPECT_NE(metrics.find(tag), std::string::npos) << tag << " missing from metrics.jsonl";
  EXPECT_TRUE(fs::is_directory(dir / "tensorboard"));

  ASSERT_TRUE(out.result.final_checkpoint.has_value());
  const fs::path ckpt = *out.result.final_checkpoint;
  EXPECT_EQ(ckpt.filename(), "step_000000000040");
  for (const char* f : {"model.safetensors", "pretrain.state", "counters.json", "config.resolved.toml",
                        "market.resolved.toml"})
    EXPECT_TRUE(fs::is_regular_file(ckpt / f)) << f;
  const std::vector<char> bytes = test::bytes_of(ckpt / "model.safetensors");
  const gpu::SafetensorsFile st =
      gpu::parse_safetensors(std::as_bytes(std::span<const char>(bytes)), "model.safetensors");
  for (const char* name : {"model.lstm0.weight_ih", "model.lstm0.weight_hh", "model.lstm0.bias", "model.lstm1.weight_ih",
                           "head.weight", "head.bias"})
    EXPECT_NE(st.find(name), nullptr) << name;
  for (const auto& e : st.entries) EXPECT_EQ(e.name.rfind("adam_", 0), std::string::npos) << e.name;
  const auto arrays = read_span_headers(ckpt / "pretrain.state");
  ASSERT_EQ(arrays.size(), 5u);
  EXPECT_EQ(arrays[0].first, "adam_m");
  EXPECT_EQ(arrays[4].first, "split");

  // The kept config runs from the run directory itself.
  EXPECT_NO_THROW(pretrain::load_pretrain_config(dir / "config.resolved.toml"));
}

TEST_F(PretrainRunTest, ResumeContinuesBitwise) {
  const pretrain::PretrainConfig c = config(40);
  const PretrainOutcome full = run(c, "full");
  ASSERT_TRUE(full.result.final_checkpoint) << full.result.outcome.reason;
  const PretrainOutcome half = run(c, "half", std::nullopt, 20);
  ASSERT_TRUE(half.result.final_checkpoint) << half.result.outcome.reason;
  EXPECT_EQ(half.result.counters.updates, 20);
  const PretrainOutcome rest = run(c, "rest", *half.result.final_checkpoint);
  ASSERT_TRUE(rest.result.final_checkpoint) << rest.result.outcome.reason;
  EXPECT_EQ(rest.result.counters.updates, 40);
  const fs::path a = *full.result.final_checkpoint, b = *rest.result.final_checkpoint;
  EXPECT_EQ(test::differing_bytes(a / "model.safetensors", b / "model.safetensors"), 0);
  EXPECT_EQ(test::differing_bytes(a / "pretrain.state", b / "pretrain.state"), 0);
  ASSERT_TRUE(full.last_eval && rest.last_eval);
  EXPECT_EQ(full.last_eval->r2, rest.last_eval->r2);
  EXPECT_EQ(full.last_eval->baseline_r2, rest.last_eval->baseline_r2);

  // A checkpoint at or past the run's end is refused before anything runs.
  EXPECT_THROW(run(c, "again", a), std::invalid_argument);
  EXPECT_FALSE(fs::exists(root_ / "again"));
}

// run.interpret: a TFT run writes interpretation.json at its last validation (step 40, 512
// windows): each head's attention of the last step and each step's selection weights sum to 1, and
// the per-variable means are those of the steps.
TEST_F(PretrainRunTest, InterpretWritesTheTftWeights) {
  const PretrainOutcome out =
      run(config(40, "kind = \"tft\"\nhidden = 8\nlayers = 1\nheads = 2\n", "interpret = true\n"), "t");
  ASSERT_EQ(out.result.outcome.kind, RunOutcome::Kind::completed) << out.result.outcome.reason;
  const fs::path file = root_ / "t" / "interpretation.json";
  ASSERT_TRUE(fs::is_regular_file(file));
  const nlohmann::json doc = nlohmann::json::parse(text_of(file));
  EXPECT_EQ(doc.at("model"), "tft");
  EXPECT_EQ(doc.at("step"), 40);
  EXPECT_EQ(doc.at("windows"), 512);
  const std::int64_t heads = doc.at("heads"), steps = doc.at("steps"), variables = doc.at("variables");
  EXPECT_EQ(heads, 2);
  EXPECT_EQ(steps, 16);
  EXPECT_EQ(variables, 1);  // one asset's returns
  ASSERT_EQ(doc.at("attention_of_last_step").size(), static_cast<std::size_t>(heads));
  for (const auto& row : doc.at("attention_of_last_step")) {
    ASSERT_EQ(row.size(), static_cast<std::size_t>(steps));
    double sum = 0;
    for (const auto& v : row) sum += v.get<double>();
    EXPECT_NEAR(sum, 1.0, 1e-4);
  }
  ASSERT_EQ(doc.at("selection").size(), static_cast<std::size_t>(steps));
  std::vector<double> mean(static_cast<std::size_t>(variables), 0.0);
  for (const auto& row : doc.at("selection")) {
    ASSERT_EQ(row.size(), static_cast<std::size_t>(variables));
    double sum = 0;
    for (std::size_t v = 0; v < row.size(); ++v) {
      sum += row[v].get<double>();
      mean[v] += row[v].get<double>() / static_cast<double>(steps);
    }
    EXPECT_NEAR(sum, 1.0, 1e-4);
  }
  for (std::size_t v = 0; v < mean.size(); ++v)
    EXPECT_NEAR(doc.at("selection_mean_over_steps")[v].get<double>(), mean[v], 1e-12);
  EXPECT_FALSE(fs::exists(root_ / "t" / "interpretation.json.tmp"));
}

TEST_F(PretrainRunTest, StopSignalWritesAFinalCheckpoint) {
  std::atomic<int> stop{0};
  const PretrainOutcome out = run(config(400), "s", std::nullopt, -1, &stop, [&](const PretrainProgress& p) {
    if (p.step >= 10) stop.store(1);
  });
  EXPECT_EQ(out.result.outcome.kind, RunOutcome::Kind::stopped) << out.result.outcome.reason;
  EXPECT_EQ(out.result.exit_code(), 0);
  EXPECT_LT(out.result.counters.updates, 400);
  EXPECT_GE(out.result.counters.updates, 10);
  ASSERT_TRUE(out.result.final_checkpoint);
  EXPECT_TRUE(fs::is_regular_file(*out.result.final_checkpoint / "model.safetensors"));
  EXPECT_TRUE(out.last_eval.has_value());
}

}  // namespace
