// FeatureExtractor (pretrain/feature_extractor.hpp) on the device, for every family: the features
// it writes into the observations, step by step with one state per environment and resets at
// random episode ends, equal the model's training form (the window form, models::RecurrentModule::
// forward over (B, T, C)) on the same episode's returns (from the window's start for the recurrent
// families, ending the window for TFT's shift register); a peek (an episode's
// final observation) continues the episode from a copy of the state and leaves the state as it was;
// no other observation column changes. The weights come from a checkpoint directory written like
// `foxhunt pretrain`'s (config.resolved.toml, market.resolved.toml, model.safetensors).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/arena.hpp"
#include "gpu/context.hpp"
#include "pretrain/feature_extractor.hpp"
#include "pretrain/frozen_features.hpp"
#include "pretrain/tuned_features.hpp"
#include "pretrain/window_feature_extractor.hpp"
#include "rl/envs/market_params.hpp"
#include "tests/support/feature_checkpoint.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/paths.hpp"

using namespace foxhunt;
using namespace foxhunt::pretrain;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kWindow = 12;  // the model's T: every episode here is shorter

class FeatureExtractorTest : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    ctx_ = std::make_unique<gpu::DeviceContext>(0, 1);
    root_ = fs::temp_directory_path() / ("foxhunt_features_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!root_.empty()) fs::remove_all(root_, ec);
    test::GpuTest::TearDown();
  }

  // A pretrain checkpoint of family `kind` with random weights (as a trainer initializes them).
  FeatureSource checkpoint(const std::string& kind, std::int64_t layers) {
    const fs::path dir = root_ / kind;
    std::ostringstream t;
    t << "[model]\nkind = \"" << kind << "\"\nhidden = 8\nlayers = " << layers << "\n"
      << "[data]\nsource = \"market\"\nmarket = \"" << (test::configs_dir() / "markets" / "regime2.toml").string()
      << "\"\nwindow = " << kWindow << "\n[task]\nkind = \"regime\"\n";
    return test::write_feature_checkpoint(dir, t.str(), seed_, stream());
  }

  gpu::BlasLane lane() {
    gpu::BlasLane l = ctx_->blas();
    l.stream = stream();
    return l;
  }

  void check_family(const std::string& kind, std::int64_t layers, FeatureOutput output);

  std::unique_ptr<gpu::DeviceContext> ctx_;
  fs::path root_;
};

void FeatureExtractorTest::check_family(const std::string& kind, std::int64_t layers, FeatureOutput output) {
  SCOPED_TRACE(kind + " " + to_string(output) + ", " + seed_note());
  const FeatureSource src = checkpoint(kind, layers);
  rl::MarketConfig market = src.market;
  market.extra_features = static_cast<int>(src.width(output));
  const std::int64_t N = 6, K = 30, D = rl::market_obs_dim(market), F = src.width(output);
  FeatureExtractor fx(src, output, market, N, stream());
  ASSERT_EQ(fx.obs_dim(), D);
  ASSERT_EQ(fx.features(), F);
  const std::int64_t col = fx.feature_column(), newest = fx.newest_return_column();

  // Observations (K, N, D) and the final observations peeked before each step; episode ends
  // (terminated at step t: obs t starts a new episode) every 1 .. kWindow - 1 steps.
  const auto obs = test::random_uniform(static_cast<std::size_t>(K * N * D), -2.f, 2.f, rng());
  const auto peeks = test::random_uniform(static_cast<std::size_t>(K * N * D), -2.f, 2.f, rng());
  std::vector<std::uint8_t> term(static_cast<std::size_t>(K * N), 0);
  std::vector<std::int64_t> start(static_cast<std::size_t>(K * N), 0);  // episode start of (t, i)
  std::uniform_int_distribution<std::int64_t> len(1, kWindow - 1);
  for (std::int64_t i = 0; i < N; ++i) {
    std::int64_t s = 0, end = len(rng());
    for (std::int64_t t = 0; t < K; ++t) {
      if (t == end) {
        term[t * N + i] = 1;
        s = t;
        end = t + len(rng());
      }
      start[t * N + i] = s;
    }
  }
  auto d_obs = test::upload(obs, stream()), d_peek = test::upload(peeks, stream());
  auto d_term = test::upload(term, stream());
  const gpu::BlasLane l = lane();
  for (std::int64_t t = 0; t < K; ++t) {
    if (t > 0) fx.peek(d_peek.data() + t * N * D, l);
    fx.step(d_obs.data() + t * N * D, t == 0 ? nullptr : d_term.data() + t * N, nullptr, l);
  }
  const auto got = test::download(d_obs, stream());
  const auto got_peek = test::download(d_peek, stream());

  // The windows of the reference: one per (t, i) for the step, one per (t >= 1, i) for the peek
  // (the episode of step t - 1 continued by the peeked return); zeros after the position read.
  const std::int64_t A = market.assets, B = 2 * K * N;
  std::vector<float> x(static_cast<std::size_t>(B * kWindow * A), 0.f);
  std::vector<std::int64_t> pos(static_cast<std::size_t>(B), -1);
  // The recurrent families' step form continues from the zero state: the episode's returns from
  // the window's first position, read at the last one given. TFT's keeps the last T inputs with
  // zeros after a reset: the returns end the window (zeros in front), read at its last position.
  const bool shift_register = kind == "tft";
  auto put = [&](std::int64_t b, std::int64_t s, std::int64_t last_t, std::int64_t i, const std::vector<float>& last) {
    const std::int64_t first = shift_register ? kWindow - 1 - (last_t - s) : 0;
    for (std::int64_t u = s; u <= last_t; ++u)
      for (std::int64_t a = 0; a < A; ++a) {
        const auto& src_obs = u == last_t ? last : obs;
        x[(b * kWindow + first + (u - s)) * A + a] = src_obs[(u * N + i) * D + newest + a];
      }
    pos[b] = first + last_t - s;
  };
  for (std::int64_t t = 0; t < K; ++t)
    for (std::int64_t i = 0; i < N; ++i) {
      put(t * N + i, start[t * N + i], t, i, obs);
      if (t > 0) put(K * N + t * N + i, start[(t - 1) * N + i], t, i, peeks);
    }
  auto d_x = test::upload(x, stream());
  models::OwnedWorkspace ws(fx.model(), B);
  gpu::DeviceBuffer<float> seq(static_cast<std::size_t>(B * kWindow * src.embedding));
  test::poison(seq, stream());
  fx.model().forward(seq.data(), d_x.data(), B, true, ws.view, l);
  // The features of each window's position read, then (head) the head on them.
  const auto seq_h = test::download(seq, stream());
  std::vector<float> last(static_cast<std::size_t>(B * src.embedding));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t j = 0; j < src.embedding; ++j)
      last[b * src.embedding + j] = pos[b] < 0 ? 0.f : seq_h[(b * kWindow + pos[b]) * src.embedding + j];
  std::vector<float> want = last;
  if (output == FeatureOutput::head) {
    auto d_last = test::upload(last, stream());
    gpu::DeviceBuffer<float> d_head(static_cast<std::size_t>(B * F));
    models::OwnedWorkspace hws(fx.head(), B);
    fx.head().forward(d_head.data(), d_last.data(), B, true, hws.view, l);
    want = test::download(d_head, stream());
  }

  std::vector<float> got_f, got_pf;
  std::vector<double> want_f, want_pf;
  for (std::int64_t t = 0; t < K; ++t)
    for (std::int64_t i = 0; i < N; ++i) {
      const std::int64_t row = (t * N + i) * D;
      for (std::int64_t c = 0; c < D; ++c) {
        if (c >= col && c < col + F) continue;
        ASSERT_EQ(got[row + c], obs[row + c]) << "column " << c << " of obs (" << t << ", " << i << ") changed";
        ASSERT_EQ(got_peek[row + c], peeks[row + c]) << "column " << c << " of peek (" << t << ", " << i << ")";
      }
      for (std::int64_t j = 0; j < F; ++j) {
        got_f.push_back(got[row + col + j]);
        want_f.push_back(want[(t * N + i) * F + j]);
        if (t > 0) {
          got_pf.push_back(got_peek[row + col + j]);
          want_pf.push_back(want[(K * N + t * N + i) * F + j]);
        }
      }
    }
  // The step form and the window form run the same arithmetic in another order (chunked scans,
  // GEMM shapes): agreement to float rounding of O(1) activations over <= 12 steps.
  EXPECT_TRUE(test::all_close(got_f, want_f, 1e-3, 1e-4)) << "step features";
  EXPECT_TRUE(test::all_close(got_pf, want_pf, 1e-3, 1e-4)) << "peek features";
}

TEST_F(FeatureExtractorTest, LstmStepsEqualTheWindowForm) { check_family("lstm", 2, FeatureOutput::embedding); }
TEST_F(FeatureExtractorTest, LstmHeadOutputEqualsTheHeadOnTheWindowForm) {
  check_family("lstm", 1, FeatureOutput::head);
}
TEST_F(FeatureExtractorTest, Mamba2StepsEqualTheWindowForm) { check_family("mamba2", 1, FeatureOutput::embedding); }
TEST_F(FeatureExtractorTest, XlstmStepsEqualTheWindowForm) { check_family("xlstm", 2, FeatureOutput::embedding); }
TEST_F(FeatureExtractorTest, CfcStepsEqualTheWindowForm) { check_family("cfc", 1, FeatureOutput::embedding); }
TEST_F(FeatureExtractorTest, TftStepsEqualTheWindowForm) { check_family("tft", 1, FeatureOutput::embedding); }
TEST_F(FeatureExtractorTest, KanStepsEqualTheWindowForm) { check_family("kan", 1, FeatureOutput::embedding); }

TEST_F(FeatureExtractorTest, RefusesAMarketItCannotRead) {
  const FeatureSource src = checkpoint("lstm", 1);
  rl::MarketConfig wrong_width = src.market;
  wrong_width.extra_features = 3;
  EXPECT_THROW(FeatureExtractor(src, FeatureOutput::embedding, wrong_width, 4, stream()), std::invalid_argument);
  rl::MarketConfig wider = src.market;
  wider.sigma = {0.2, 0.6};  // another return normalization
  wider.extra_features = 8;
  try {
    FeatureExtractor fx(src, FeatureOutput::embedding, wider, 4, stream());
    FAIL() << "a market of another return scale was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("normalized"), std::string::npos) << e.what();
  }
}

}  // namespace

// The sizing the memory estimate reads (bytes_for, from the config alone) equals what the
// constructed extractors allocate, frozen and window form, embedding and head, for families whose
// state and workspaces differ.
TEST_F(FeatureExtractorTest, BytesForEqualsWhatIsAllocated) {
  for (const char* kind : {"lstm", "mamba2", "tft"}) {
    const FeatureSource src = checkpoint(kind, 1);
    for (const FeatureOutput output : {FeatureOutput::embedding, FeatureOutput::head}) {
      SCOPED_TRACE(std::string(kind) + " " + to_string(output));
      rl::MarketConfig market = src.market;
      market.extra_features = static_cast<int>(src.width(output));
      const FeatureExtractor fx(src, output, market, 6, stream());
      EXPECT_EQ(FeatureExtractor::bytes_for(src, output, 6), fx.allocated_bytes());
      const WindowFeatureExtractor wx(src, output, market, 5, 7, stream());
      EXPECT_EQ(WindowFeatureExtractor::bytes_for(src, output, market, 5, 7), wx.allocated_bytes());
      EXPECT_EQ(tuned_features_bytes(src, output, market, 5, 7), wx.allocated_bytes());
      EXPECT_EQ(frozen_features_bytes(src, output, market, 6), fx.allocated_bytes());
    }
  }
}
