// `foxhunt pretrain` with [model] kind = "diffusion" (actors::run_pretraining): the run directory
// (metrics with the epsilon loss, a checkpoint with the denoiser's named parameters and the trainer
// state), and a run of N steps equals N/2 steps then a resume for the rest, bitwise.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>
#include <string>

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

class PretrainDiffusionRunTest : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    root_ = fs::temp_directory_path() / ("foxhunt_pretrain_diffusion_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!root_.empty()) fs::remove_all(root_, ec);
    test::GpuTest::TearDown();
  }
  pretrain::PretrainConfig config() {
    const fs::path market = test::configs_dir() / "markets" / "ou_mean_reversion.toml";
    std::ostringstream t;
    t << "[model]\nkind = \"diffusion\"\nhidden = 16\nlayers = 2\nembed = 8\ndiffusion_steps = 100\ncontext = 4\n"
      << "sample_steps = 10\n"
      << "[data]\nsource = \"market\"\nmarket = \"" << market.string() << "\"\nwindow = 8\n"
      << "[task]\nkind = \"generate\"\n"
      << "[optim]\nlr = 0.003\nwarmup_steps = 5\nbatch = 64\nsteps = 40\n"
      << "[run]\nseed = 5\neval_every = 20\neval_windows = 256\nlog_every = 10\n";
    const fs::path file = root_ / "p.toml";
    std::ofstream(file) << t.str();
    return pretrain::load_pretrain_config(file);
  }
  PretrainOutcome run(const pretrain::PretrainConfig& c, const std::string& dir,
                      std::optional<fs::path> resume = std::nullopt, std::int64_t stop_at = -1) {
    PretrainRequest req;
    req.config = c;
    req.run_dir = root_ / dir;
    req.resume = std::move(resume);
    req.stop_at = stop_at;
    req.console = false;
    return run_pretraining(req);
  }
  fs::path root_;
};

TEST_F(PretrainDiffusionRunTest, WritesTheRunDirectoryAndResumesBitwise) {
  const pretrain::PretrainConfig c = config();
  const PretrainOutcome full = run(c, "full");
  ASSERT_EQ(full.result.outcome.kind, RunOutcome::Kind::completed) << full.result.outcome.reason;
  EXPECT_EQ(full.result.counters.updates, 40);
  ASSERT_TRUE(full.last_eval.has_value());
  EXPECT_EQ(full.last_eval->windows, 256u);
  EXPECT_TRUE(std::isfinite(full.last_eval->loss) && full.last_eval->loss > 0) << full.last_eval->loss;
  std::ifstream in(root_ / "full" / "metrics.jsonl");
  std::ostringstream metrics;
  metrics << in.rdbuf();
  for (const char* tag : {"train/loss", "train/grad_norm", "val/loss"})
    EXPECT_NE(metrics.str().find(tag), std::string::npos) << tag << " missing from metrics.jsonl";

  ASSERT_TRUE(full.result.final_checkpoint.has_value());
  const fs::path a = *full.result.final_checkpoint;
  const std::vector<char> bytes = test::bytes_of(a / "model.safetensors");
  const gpu::SafetensorsFile st =
      gpu::parse_safetensors(std::as_bytes(std::span<const char>(bytes)), "model.safetensors");
  for (const char* name : {"model.time.0.weight", "model.in.weight", "model.blocks.1.fc2.bias", "model.out.weight"})
    EXPECT_NE(st.find(name), nullptr) << name;
  EXPECT_NO_THROW(pretrain::load_pretrain_config(root_ / "full" / "config.resolved.toml"));

  const PretrainOutcome half = run(c, "half", std::nullopt, 20);
  ASSERT_TRUE(half.result.final_checkpoint) << half.result.outcome.reason;
  const PretrainOutcome rest = run(c, "rest", *half.result.final_checkpoint);
  ASSERT_TRUE(rest.result.final_checkpoint) << rest.result.outcome.reason;
  const fs::path b = *rest.result.final_checkpoint;
  EXPECT_EQ(test::differing_bytes(a / "model.safetensors", b / "model.safetensors"), 0);
  EXPECT_EQ(test::differing_bytes(a / "pretrain.state", b / "pretrain.state"), 0);
  ASSERT_TRUE(rest.last_eval);
  EXPECT_EQ(full.last_eval->loss, rest.last_eval->loss);
}

}  // namespace
