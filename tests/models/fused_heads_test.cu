// models/fused_heads against a float64 CPU reference of Dense heads + dueling (Z == 1): forward
// logits, d_h, the head pre-activation gradients and the head parameter gradients, for dueling and
// plain heads, branches, odd sizes, the widest head (32 outputs), batch 0 (zero gradients) and a
// size check that rejects wider heads.
#include "support/gpu_test.hpp"

#include <cmath>
#include <stdexcept>
#include <vector>

#include "models/fused_heads.hpp"

namespace foxhunt::models {
namespace {

class FusedHeadsTest : public test::GpuTest {};

struct Case {
  std::int64_t B, H, D, A;
  bool duel;
};

struct Reference {
  std::vector<double> logits, d_heads, d_h, vdw, vdb, adw, adb;
  std::vector<double> vdb_abs, adb_abs;  // sums of |term| of the bias gradients (their condition)
};

Reference reference(const Case& c, const std::vector<float>& h, const std::vector<float>& vw,
                    const std::vector<float>& vb, const std::vector<float>& aw, const std::vector<float>& ab,
                    const std::vector<float>& g) {
  const std::int64_t K = c.D * c.A, V = c.duel ? 1 : 0, O = V + K;
  Reference r;
  r.logits.assign(static_cast<std::size_t>(c.B * K), 0);
  r.d_heads.assign(static_cast<std::size_t>(c.B * O), 0);
  r.d_h.assign(static_cast<std::size_t>(c.B * c.H), 0);
  r.vdw.assign(static_cast<std::size_t>(V * c.H), 0);
  r.vdb.assign(static_cast<std::size_t>(V), 0);
  r.adw.assign(static_cast<std::size_t>(K * c.H), 0);
  r.adb.assign(static_cast<std::size_t>(K), 0);
  r.vdb_abs.assign(static_cast<std::size_t>(V), 0);
  r.adb_abs.assign(static_cast<std::size_t>(K), 0);
  for (std::int64_t b = 0; b < c.B; ++b) {
    std::vector<double> out(static_cast<std::size_t>(O));
    for (std::int64_t o = 0; o < O; ++o) {
      const bool is_v = o < V;
      double s = is_v ? vb[0] : ab[o - V];
      for (std::int64_t j = 0; j < c.H; ++j)
        s += static_cast<double>(h[b * c.H + j]) * (is_v ? vw[j] : aw[(o - V) * c.H + j]);
      out[o] = s;
    }
    std::vector<double> dh(static_cast<std::size_t>(O));
    for (std::int64_t d = 0; d < c.D; ++d) {
      double mean = 0, gsum = 0;
      for (std::int64_t a = 0; a < c.A; ++a) {
        mean += out[V + d * c.A + a];
        gsum += g[b * K + d * c.A + a];
      }
      mean /= static_cast<double>(c.A);
      for (std::int64_t a = 0; a < c.A; ++a) {
        const std::int64_t k = d * c.A + a;
        r.logits[b * K + k] = c.duel ? out[0] + out[V + k] - mean : out[k];
        dh[V + k] = c.duel ? g[b * K + k] - gsum / static_cast<double>(c.A) : g[b * K + k];
      }
      if (c.duel) dh[0] += gsum;
    }
    for (std::int64_t o = 0; o < O; ++o) {
      r.d_heads[b * O + o] = dh[o];
      const bool is_v = o < V;
      for (std::int64_t j = 0; j < c.H; ++j) {
        r.d_h[b * c.H + j] += dh[o] * (is_v ? vw[j] : aw[(o - V) * c.H + j]);
        (is_v ? r.vdw[j] : r.adw[(o - V) * c.H + j]) += dh[o] * h[b * c.H + j];
      }
      (is_v ? r.vdb[0] : r.adb[o - V]) += dh[o];
      (is_v ? r.vdb_abs[0] : r.adb_abs[o - V]) += std::abs(dh[o]);
    }
  }
  return r;
}

// A bias gradient is a sum over B rows whose terms cancel (a scalar with dueling: no L2 norm to
// average over), so its float error is bounded relative to the sum of the terms' magnitudes.
void expect_sums_near(const std::vector<float>& got, const std::vector<double>& ref, const std::vector<double>& abs) {
  ASSERT_EQ(got.size(), ref.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_LE(std::abs(got[i] - ref[i]), 1e-5 * abs[i]) << "element " << i << ": " << got[i] << " vs " << ref[i];
}

TEST_F(FusedHeadsTest, MatchFloat64Reference) {
  SCOPED_TRACE(seed_note());
  const std::vector<Case> cases{{1, 1, 1, 1, true},
                                {37, 33, 1, 9, true},
                                {256, 256, 1, 9, true},
                                {1000, 65, 3, 5, true},
                                {129, 40, 2, 15, true},
                                {61, 100, 1, 32, false},
                                {4097, 128, 1, 9, true},
                                {300, 31, 4, 2, false},
                                // several two-chunk steps per row (float4, H > 256), an 8-output
                                // float4 head, row counts around the 16-row param-grad splits
                                {300, 1000, 2, 4, true},
                                {70, 96, 1, 7, false},
                                {17, 256, 1, 9, true},
                                {16, 260, 1, 9, true},
                                {2049, 512, 1, 15, true},
                                // the large learner's shapes: several row groups per param-grad thread
                                // in each of the 16 splits (uneven at 4097), every MaxO
                                {4096, 1024, 1, 9, true},
                                {4097, 1024, 3, 3, true},
                                {4097, 1024, 3, 5, false},
                                {4097, 1024, 1, 31, true},
                                // one chunk per step above H 512 (float4, MaxO 8 and 16), two at 512
                                {100, 1024, 1, 7, false},
                                {33, 516, 1, 9, true},
                                {40, 512, 1, 9, true}};
  for (const auto& c : cases) {
    SCOPED_TRACE("B " + std::to_string(c.B) + " H " + std::to_string(c.H) + " D " + std::to_string(c.D) + " A " +
                 std::to_string(c.A) + (c.duel ? " dueling" : " plain"));
    const std::int64_t K = c.D * c.A, V = c.duel ? 1 : 0, O = V + K;
    auto& r = rng();
    const auto h = test::random_uniform(static_cast<std::size_t>(c.B * c.H), -1.f, 1.f, r);
    const auto vw = test::random_uniform(static_cast<std::size_t>(c.H), -0.5f, 0.5f, r);
    const auto vb = test::random_uniform(1, -0.5f, 0.5f, r);
    const auto aw = test::random_uniform(static_cast<std::size_t>(K * c.H), -0.5f, 0.5f, r);
    const auto ab = test::random_uniform(static_cast<std::size_t>(K), -0.5f, 0.5f, r);
    const auto g = test::random_uniform(static_cast<std::size_t>(c.B * K), -1.f, 1.f, r);
    const Reference ref = reference(c, h, vw, vb, aw, ab, g);

    auto d_h_in = test::upload(h, stream()), d_vw = test::upload(vw, stream()), d_vb = test::upload(vb, stream());
    auto d_aw = test::upload(aw, stream()), d_ab = test::upload(ab, stream()), d_g = test::upload(g, stream());
    gpu::DeviceBuffer<float> logits(static_cast<std::size_t>(c.B * K)), d_heads(static_cast<std::size_t>(c.B * O)),
        d_h(static_cast<std::size_t>(c.B * c.H)), vdw(static_cast<std::size_t>(c.H)), vdb(1),
        adw(static_cast<std::size_t>(K * c.H)), adb(static_cast<std::size_t>(K));
    for (auto* buf : {&logits, &d_heads, &d_h, &vdw, &vdb, &adw, &adb}) test::poison(*buf, stream());

    fused_heads_forward(logits.data(), d_h_in.data(), c.duel ? d_vw.data() : nullptr, c.duel ? d_vb.data() : nullptr,
                        d_aw.data(), d_ab.data(), c.B, c.H, c.D, c.A, stream());
    fused_heads_backward_input(d_h.data(), d_heads.data(), d_g.data(), c.duel ? d_vw.data() : nullptr, d_aw.data(),
                               nullptr, c.B, c.H, c.D, c.A, stream());
    gpu::DeviceBuffer<std::byte> ws(fused_heads_param_grads_workspace_bytes(c.B, c.H, c.D, c.A, c.duel));
    FH_CHECK(cudaMemsetAsync(ws.data(), 0, ws.bytes(), stream()));
    for (int call = 0; call < 2; ++call)  // the second call checks that the completion counters reset
      fused_heads_param_grads(c.duel ? vdw.data() : nullptr, c.duel ? vdb.data() : nullptr, adw.data(), adb.data(),
                              nullptr, d_heads.data(), d_h_in.data(), nullptr, c.B, c.H, c.D, c.A, ws.data(), stream());

    // fp32 dot products of length H (forward, param grads over B rows): 1e-5 relative in L2.
    EXPECT_LT(test::rel_error(test::download(logits, stream()), ref.logits), 1e-5);
    EXPECT_LT(test::rel_error(test::download(d_heads, stream()), ref.d_heads), 1e-5);
    EXPECT_LT(test::rel_error(test::download(d_h, stream()), ref.d_h), 1e-5);
    EXPECT_LT(test::rel_error(test::download(adw, stream()), ref.adw), 1e-5);
    expect_sums_near(test::download(adb, stream()), ref.adb, ref.adb_abs);
    if (c.duel) {
      EXPECT_LT(test::rel_error(test::download(vdw, stream()), ref.vdw), 1e-5);
      expect_sums_near(test::download(vdb, stream()), ref.vdb, ref.vdb_abs);
    }
  }
}

// With the ReLU mask of the layer below: d_h becomes that layer's pre-activation gradient (zero where
// the mask bit is 0) and trunk_db its column sums; the head gradients are unchanged.
TEST_F(FusedHeadsTest, ReluMaskAndTrunkBias) {
  SCOPED_TRACE(seed_note());
  for (const Case c : {Case{37, 33, 1, 9, true}, Case{256, 256, 1, 9, true}, Case{1000, 130, 3, 5, false},
                       Case{9000, 64, 1, 9, true}, Case{4096, 1024, 1, 9, true}, Case{4097, 1024, 3, 3, true}}) {
    SCOPED_TRACE("B " + std::to_string(c.B) + " H " + std::to_string(c.H));
    const std::int64_t K = c.D * c.A, V = c.duel ? 1 : 0, O = V + K, ld = (c.H + 127) / 128 * 128;
    auto& r = rng();
    const auto h = test::random_uniform(static_cast<std::size_t>(c.B * c.H), 0.f, 1.f, r);
    const auto vw = test::random_uniform(static_cast<std::size_t>(c.H), -0.5f, 0.5f, r);
    const auto vb = test::random_uniform(1, -0.5f, 0.5f, r);
    const auto aw = test::random_uniform(static_cast<std::size_t>(K * c.H), -0.5f, 0.5f, r);
    const auto ab = test::random_uniform(static_cast<std::size_t>(K), -0.5f, 0.5f, r);
    const auto g = test::random_uniform(static_cast<std::size_t>(c.B * K), -1.f, 1.f, r);
    std::vector<std::uint32_t> mask(static_cast<std::size_t>(c.B * ld / 32));
    for (auto& w : mask) w = static_cast<std::uint32_t>(r());
    const Reference ref = reference(c, h, vw, vb, aw, ab, g);
    std::vector<double> pre(static_cast<std::size_t>(c.B * c.H)), tdb_ref(static_cast<std::size_t>(c.H), 0);
    for (std::int64_t b = 0; b < c.B; ++b)
      for (std::int64_t j = 0; j < c.H; ++j) {
        const bool on = (mask[static_cast<std::size_t>((b * ld + j) / 32)] >> (j % 32)) & 1u;
        pre[b * c.H + j] = on ? ref.d_h[b * c.H + j] : 0.0;
        tdb_ref[j] += pre[b * c.H + j];
      }
    auto d_hin = test::upload(h, stream()), d_vw = test::upload(vw, stream()), d_aw = test::upload(aw, stream());
    auto d_g = test::upload(g, stream());
    auto d_mask = test::upload(mask, stream());
    gpu::DeviceBuffer<float> d_heads(static_cast<std::size_t>(c.B * O)), d_pre(static_cast<std::size_t>(c.B * c.H)),
        vdw(static_cast<std::size_t>(c.H)), vdb(1), adw(static_cast<std::size_t>(K * c.H)),
        adb(static_cast<std::size_t>(K)), tdb(static_cast<std::size_t>(c.H));
    for (auto* buf : {&d_heads, &d_pre, &vdw, &vdb, &adw, &adb, &tdb}) test::poison(*buf, stream());
    fused_heads_backward_input(d_pre.data(), d_heads.data(), d_g.data(), c.duel ? d_vw.data() : nullptr, d_aw.data(),
                               d_mask.data(), c.B, c.H, c.D, c.A, stream());
    gpu::DeviceBuffer<std::byte> ws(fused_heads_param_grads_workspace_bytes(c.B, c.H, c.D, c.A, c.duel));
    FH_CHECK(cudaMemsetAsync(ws.data(), 0, ws.bytes(), stream()));
    fused_heads_param_grads(c.duel ? vdw.data() : nullptr, c.duel ? vdb.data() : nullptr, adw.data(), adb.data(),
                            tdb.data(), d_heads.data(), d_hin.data(), d_pre.data(), c.B, c.H, c.D, c.A, ws.data(),
                            stream());
    EXPECT_LT(test::rel_error(test::download(d_pre, stream()), pre), 1e-5);
    EXPECT_LT(test::rel_error(test::download(tdb, stream()), tdb_ref), 1e-5);
    EXPECT_LT(test::rel_error(test::download(adw, stream()), ref.adw), 1e-5);
    expect_sums_near(test::download(adb, stream()), ref.adb, ref.adb_abs);
    if (c.duel) EXPECT_LT(test::rel_error(test::download(vdw, stream()), ref.vdw), 1e-5);
  }
}

TEST_F(FusedHeadsTest, EmptyBatchZeroesParameterGradients) {
  SCOPED_TRACE(seed_note());
  const std::int64_t H = 70, K = 9;
  gpu::DeviceBuffer<float> vdw(H), vdb(1), adw(K * H), adb(K);
  for (auto* buf : {&vdw, &vdb, &adw, &adb}) test::poison(*buf, stream());
  gpu::DeviceBuffer<float> tdb(H);
  test::poison(tdb, stream());
  gpu::DeviceBuffer<std::byte> ws(fused_heads_param_grads_workspace_bytes(0, H, 1, K, true));
  FH_CHECK(cudaMemsetAsync(ws.data(), 0, ws.bytes(), stream()));
  fused_heads_param_grads(vdw.data(), vdb.data(), adw.data(), adb.data(), tdb.data(), nullptr, nullptr, nullptr, 0, H,
                          1, K, ws.data(), stream());
  for (auto* buf : {&vdw, &vdb, &adw, &adb, &tdb})
    for (float x : test::download(*buf, stream())) EXPECT_EQ(x, 0.f);
}

TEST_F(FusedHeadsTest, RejectsWideHeads) {
  gpu::DeviceBuffer<float> buf(64 * 64);
  // dueling 1 + 32 outputs > 32
  EXPECT_THROW(fused_heads_forward(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), 1, 2, 1, 32,
                                   stream()),
               std::invalid_argument);
}

}  // namespace
}  // namespace foxhunt::models
