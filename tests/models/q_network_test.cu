// QNetwork assembled from specs (plain, dueling, noisy dueling, BDQ branches, C51 with dueling and
// noise): every parameter tensor's gradient against central finite differences of the GPU forward;
// the C51 probabilities and expected values against float64; dead-unit counting against a network
// whose dead units are known by construction; the side-lane backward bitwise against the one-lane one.
#include "models/fd_support.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu/arena.hpp"
#include "gpu/check.hpp"
#include "gpu/context.hpp"
#include "gpu/linear.hpp"
#include "gpu/stream.hpp"
#include "models/mlp.hpp"
#include "models/q_network.hpp"

namespace foxhunt::models {
namespace {

class QNetworkTest : public test::LaneTest {
 protected:
  // The set-up every network here starts from: its parameters in an arena of its own, declared,
  // finalized, initialised from the fixture's RNG and bound.
  template <class Net>
  void set_up(Net& net, gpu::ParameterArena& arena) {
    net.declare(arena);
    arena.finalize(s());
    net.init(arena, rng(), s());
    net.bind(arena);
  }
  // Fresh noise (noisy layers) at Philox counter `counter`, with a seed from the fixture's RNG.
  template <class Net>
  void draw_noise(Net& net, std::uint64_t counter) {
    counter_ = test::upload(std::vector<std::uint64_t>{counter}, s());
    net.resample_noise(rng()(), counter_.data(), s());
  }
  gpu::DeviceBuffer<std::uint64_t> counter_;
};

struct Named {
  const char* what;
  QNetworkSpec spec;
};

QNetworkSpec make(std::int64_t obs, std::vector<std::int64_t> hidden, std::int64_t D, std::int64_t A, std::int64_t Z,
                  bool dueling, bool noisy) {
  QNetworkSpec s;
  s.obs_dim = obs;
  s.hidden = std::move(hidden);
  s.act = gpu::Activation::gelu;  // smooth: central differences need no kink-avoidance
  s.branches = D;
  s.actions = A;
  s.atoms = Z;
  s.v_min = -5.f;
  s.v_max = 5.f;
  s.dueling = dueling;
  s.noisy = noisy;
  s.sigma0 = 0.5f;
  return s;
}

QNetworkSpec gemm_heads(QNetworkSpec s) {
  s.fused_heads = false;
  return s;
}

QNetworkSpec with_act(QNetworkSpec s, gpu::Activation a) {
  s.act = a;
  return s;
}

TEST_F(QNetworkTest, GradientsMatchFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const std::vector<Named> cases{
      {"plain", make(6, {16, 12}, 1, 3, 1, false, false)},
      {"dueling", make(5, {20}, 1, 4, 1, true, false)},
      {"plain, GEMM heads", gemm_heads(make(6, {16, 12}, 1, 3, 1, false, false))},
      {"bdq, GEMM heads", gemm_heads(make(4, {13, 10}, 3, 5, 1, true, false))},
      {"noisy dueling", make(7, {9, 11}, 1, 5, 1, true, true)},
      {"bdq", make(4, {13, 10}, 3, 5, 1, true, false)},
      {"c51 noisy dueling", make(3, {10}, 1, 3, 7, true, true)},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const std::int64_t B = 6;
    QNetwork net(c.spec, "", 40);
    gpu::ParameterArena arena;
    set_up(net, arena);
    draw_noise(net, 5);
    auto ws = net.make_workspace(B);
    const auto obs = test::random_uniform(static_cast<std::size_t>(B * c.spec.obs_dim), -1.f, 1.f, rng());
    const auto u = test::random_uniform(static_cast<std::size_t>(B * net.outputs()), -1.f, 1.f, rng());
    auto d_obs = test::upload(obs, s()), d_u = test::upload(u, s());
    FH_CHECK(cudaMemsetAsync(arena.grads(), 0xFF, static_cast<std::size_t>(arena.padded_count()) * 4, s()));
    net.forward(ws, d_obs.data(), B, false, lane());
    net.backward(ws, d_u.data(), d_obs.data(), B, lane());
    const auto grads = test::download(arena.grads(), static_cast<std::size_t>(arena.padded_count()), s());
    auto loss = [&] {
      return test::weighted_sum([&] { net.forward(ws, d_obs.data(), B, false, lane()); }, net.logits(ws), u, s());
    };
    double rms = 0;
    for (const auto& e : arena.entries())
      for (std::int64_t i = 0; i < e.numel; ++i) rms += static_cast<double>(grads[e.offset + i]) * grads[e.offset + i];
    rms = std::sqrt(rms / static_cast<double>(arena.count()));
    for (const auto& e : arena.entries()) {
      for (std::int64_t i = 0; i < e.numel; ++i)
        ASSERT_TRUE(std::isfinite(grads[e.offset + i])) << e.name << "[" << i << "] not written";
      for (int k = 0; k < 3; ++k) {
        const std::int64_t i = static_cast<std::int64_t>(rng()() % static_cast<std::uint64_t>(e.numel));
        const double fd = test::central_difference(loss, arena.params() + e.offset, i, 1e-2f, s());
        EXPECT_TRUE(test::fd_close(fd, grads[e.offset + i], 2e-2, 0.05 * rms)) << e.name << "[" << i << "]";
      }
    }
    if (c.spec.atoms > 1) {  // probabilities and expected values from the logits
      net.forward(ws, d_obs.data(), B, false, lane());
      const auto lg = test::download(net.logits(ws), static_cast<std::size_t>(B * net.outputs()), s());
      const auto pr = test::download(net.probs(ws), lg.size(), s());
      const std::int64_t rows = B * c.spec.branches * c.spec.actions, Z = c.spec.atoms;
      const auto q = test::download(net.q(ws), static_cast<std::size_t>(rows), s());
      std::vector<double> p_ref(lg.size()), q_ref(rows, 0);
      for (std::int64_t r = 0; r < rows; ++r) {
        double mx = lg[r * Z], se = 0;
        for (std::int64_t i = 0; i < Z; ++i) mx = std::max<double>(mx, lg[r * Z + i]);
        for (std::int64_t i = 0; i < Z; ++i) se += std::exp(lg[r * Z + i] - mx);
        for (std::int64_t i = 0; i < Z; ++i) {
          p_ref[r * Z + i] = std::exp(lg[r * Z + i] - mx) / se;
          q_ref[r] += p_ref[r * Z + i] * (c.spec.v_min + i * (c.spec.v_max - c.spec.v_min) / (Z - 1));
        }
      }
      EXPECT_TRUE(test::all_close(pr, p_ref, 1e-5, 1e-7));
      EXPECT_TRUE(test::all_close(q, q_ref, 1e-5, 1e-5));
    }
  }
}

// Holds a stream for ~`ns` nanoseconds: delays the side lane's work so that a main-stream write into
// a buffer the side still reads (a missing per-layer buffer, a missing fork) shows up as a difference.
__global__ void spin_kernel(unsigned ns) {
  for (unsigned t = 0; t < ns; t += 1000) __nanosleep(1000);
}

// A backward with a side lane (parameter gradients on a second stream) writes bitwise the gradients
// of the one-lane backward on the same forward: every variant (fused heads with ReLU/identity/GELU
// trunks, GEMM heads, noisy, C51), one to three trunk layers, batches on our small-GEMM kernels and
// (B > 1024) on cuBLASLt; once with the side stream held back before the backward.
TEST_F(QNetworkTest, SideLaneBackwardIsBitwiseOneLane) {
  SCOPED_TRACE(seed_note());
  const std::vector<Named> cases{
      {"plain relu", with_act(make(6, {16, 12}, 1, 3, 1, false, false), gpu::Activation::relu)},
      {"dueling relu, 3 layers", with_act(make(5, {20, 33, 17}, 1, 4, 1, true, false), gpu::Activation::relu)},
      {"bdq identity", with_act(make(4, {13, 10}, 3, 5, 1, true, false), gpu::Activation::identity)},
      {"dueling gelu (fused, unmasked d_h)", make(5, {20, 9}, 1, 4, 1, true, false)},
      {"one layer relu", with_act(make(7, {24}, 1, 3, 1, true, false), gpu::Activation::relu)},
      {"bdq, GEMM heads", gemm_heads(make(4, {13, 10}, 3, 5, 1, true, false))},
      {"identity, GEMM heads",
       with_act(gemm_heads(make(4, {13, 10, 8}, 1, 5, 1, false, false)), gpu::Activation::identity)},
      {"noisy dueling", make(7, {9, 11}, 1, 5, 1, true, true)},
      {"c51 noisy dueling", make(3, {10, 6}, 1, 3, 7, true, true)},
  };
  gpu::DeviceContext side_ctx(0, 1);  // its own stream and a workspace of the fixture lane's size
  gpu::Event fork, join;
  const SideLane side{side_ctx.blas(0), fork, join};
  for (const std::int64_t B : {std::int64_t{37}, std::int64_t{1100}}) {
    for (const auto& c : cases) {
      SCOPED_TRACE(std::string(c.what) + ", B " + std::to_string(B));
      QNetwork net(c.spec, "", 40);
      gpu::ParameterArena arena;
      set_up(net, arena);
      draw_noise(net, 3);
      auto ws = net.make_workspace(B, true);
      auto d_obs =
          test::upload(test::random_uniform(static_cast<std::size_t>(B * c.spec.obs_dim), -1.f, 1.f, rng()), s());
      auto d_u = test::upload(test::random_uniform(static_cast<std::size_t>(B * net.outputs()), -1.f, 1.f, rng()), s());
      const auto n = static_cast<std::size_t>(arena.padded_count());
      net.forward(ws, d_obs.data(), B, false, lane());
      auto run = [&](const SideLane* sl, bool hold_side) {
        FH_CHECK(cudaMemsetAsync(arena.grads(), 0xFF, n * 4, s()));  // NaN: unwritten entries differ
        if (hold_side) {
          FH_CHECK(cudaStreamSynchronize(s()));
          spin_kernel<<<1, 1, 0, side_ctx.stream()>>>(200000u);
          FH_CHECK_LAUNCH();
        }
        net.backward(ws, d_u.data(), d_obs.data(), B, lane(), sl);
        return test::download(arena.grads(), n, s());  // on s(): after the join
      };
      const auto one = run(nullptr, false);
      for (const bool hold : {false, true}) {
        SCOPED_TRACE(hold ? "side held back" : "side free");
        const auto two = run(&side, hold);
        ASSERT_EQ(two.size(), one.size());
        for (const auto& e : arena.entries()) {
          for (std::int64_t i = 0; i < e.numel; ++i) {
            const auto k = static_cast<std::size_t>(e.offset + i);
            ASSERT_TRUE(std::isfinite(one[k])) << e.name << "[" << i << "] not written by the one-lane backward";
            std::uint32_t a = 0, b = 0;
            std::memcpy(&a, &one[k], 4);
            std::memcpy(&b, &two[k], 4);
            ASSERT_EQ(a, b) << e.name << "[" << i << "]: one lane " << one[k] << ", side lane " << two[k];
          }
        }
      }
    }
  }
  FH_CHECK(cudaStreamSynchronize(side_ctx.stream()));
}

// The same for a bare Mlp: noisy layers (they stay on the main stream), every activation, and the
// input gradient asked for (layer 0 then splits too); d_in compared bitwise as well.
TEST_F(QNetworkTest, MlpSideLaneBackwardIsBitwiseOneLane) {
  SCOPED_TRACE(seed_note());
  gpu::DeviceContext side_ctx(0, 1);
  gpu::Event fork, join;
  const SideLane side{side_ctx.blas(0), fork, join};
  const std::int64_t in_f = 9, B = 53;
  for (const auto act : {gpu::Activation::relu, gpu::Activation::gelu, gpu::Activation::identity}) {
    for (const bool noisy : {false, true}) {
      SCOPED_TRACE(std::string(gpu::activation_name(act)) + (noisy ? ", noisy" : ""));
      Mlp mlp(MlpSpec{"m", in_f, {14, 31, 6}, act, noisy, 0.5f, gpu::LinearMath::fp32}, 7);
      gpu::ParameterArena arena;
      set_up(mlp, arena);
      draw_noise(mlp, 2);
      const OwnedWorkspace ws(mlp, B, true);
      auto d_x = test::upload(test::random_uniform(static_cast<std::size_t>(B * in_f), -1.f, 1.f, rng()), s());
      auto d_y = test::upload(test::random_uniform(static_cast<std::size_t>(B * 6), -1.f, 1.f, rng()), s());
      gpu::DeviceBuffer<float> d_in(static_cast<std::size_t>(B * in_f)), y(static_cast<std::size_t>(B * 6));
      const auto n = static_cast<std::size_t>(arena.padded_count());
      mlp.forward(y.data(), d_x.data(), B, false, ws.view, lane());
      auto run = [&](const SideLane* sl) {
        FH_CHECK(cudaMemsetAsync(arena.grads(), 0xFF, n * 4, s()));
        FH_CHECK(cudaMemsetAsync(d_in.data(), 0xFF, d_in.bytes(), s()));
        if (sl) {
          spin_kernel<<<1, 1, 0, side_ctx.stream()>>>(200000u);  // the side starts late
          FH_CHECK_LAUNCH();
        }
        mlp.backward(d_in.data(), d_y.data(), d_x.data(), B, ws.view, lane(), sl);
        auto g = test::download(arena.grads(), n, s());
        const auto di = test::download(d_in.data(), d_in.size(), s());
        g.insert(g.end(), di.begin(), di.end());
        return g;
      };
      const auto one = run(nullptr), two = run(&side);
      ASSERT_EQ(one.size(), two.size());
      for (std::size_t k = 0; k < one.size(); ++k) {
        std::uint32_t a = 0, b = 0;
        std::memcpy(&a, &one[k], 4);
        std::memcpy(&b, &two[k], 4);
        ASSERT_EQ(a, b) << "element " << k << " of the grads (padded " << n << ") then d_in: " << one[k] << " vs "
                        << two[k];
      }
      for (const auto& e : arena.entries())
        for (std::int64_t i = 0; i < e.numel; ++i)
          ASSERT_TRUE(std::isfinite(one[static_cast<std::size_t>(e.offset + i)])) << e.name << "[" << i << "]";
      for (std::size_t k = n; k < one.size(); ++k) ASSERT_TRUE(std::isfinite(one[k])) << "d_in[" << k - n << "]";
    }
  }
  FH_CHECK(cudaStreamSynchronize(side_ctx.stream()));
}

// A ReLU trunk wide enough for cuBLASLt (64 -> 256 -> 256 -> 128, 96 rows): each layer's input
// gradient may fold into the layer below's dReLU and bias gradient (gpu::linear_backward_input_drelu).
// fp32 through cuBLASLt (the small kernel off): the folded backward against the unfolded one
// (the fold off while the forced fallback is on; the forward is the same one) within 1e-5 relative
// L2, the bias gradients summed in another order; and for fp32 and TF32 the side-lane backward,
// from d_out and from the last pre-activation gradient, bitwise the one-lane one (both make the
// same fold decisions).
TEST_F(QNetworkTest, MlpFoldedReluBackwardMatchesUnfoldedAndSideLane) {
  SCOPED_TRACE(seed_note());
  struct SmallGemmOff {
    SmallGemmOff() { gpu::detail::linear_disable_small_gemm(true); }
    ~SmallGemmOff() {
      gpu::detail::linear_disable_small_gemm(false);
      gpu::detail::linear_force_unfused_epilogue(false);
    }
  } small_off;
  gpu::DeviceContext side_ctx(0, 1);
  gpu::Event fork, join;
  const SideLane side{side_ctx.blas(0), fork, join};
  const std::int64_t in_f = 64, out_f = 128, B = 96;
  for (const gpu::LinearMath math : {gpu::LinearMath::fp32, gpu::LinearMath::tf32}) {
    SCOPED_TRACE(math == gpu::LinearMath::fp32 ? "fp32" : "tf32");
    Mlp mlp(MlpSpec{"m", in_f, {256, 256, out_f}, gpu::Activation::relu, false, 0.5f, math}, 7);
    gpu::ParameterArena arena;
    set_up(mlp, arena);
    const OwnedWorkspace ws(mlp, B, true);
    auto d_x = test::upload(test::random_uniform(static_cast<std::size_t>(B * in_f), -1.f, 1.f, rng()), s());
    auto d_y = test::upload(test::random_uniform(static_cast<std::size_t>(B * out_f), -1.f, 1.f, rng()), s());
    gpu::DeviceBuffer<float> d_in(static_cast<std::size_t>(B * in_f)), y(static_cast<std::size_t>(B * out_f));
    const auto n = static_cast<std::size_t>(arena.padded_count());
    mlp.forward(y.data(), d_x.data(), B, false, ws.view, lane());
    // from_pre: backward_from_last_pre with d_y as the last layer's pre-activation gradient.
    auto run = [&](const SideLane* sl, bool from_pre) {
      FH_CHECK(cudaMemsetAsync(arena.grads(), 0xFF, n * 4, s()));
      FH_CHECK(cudaMemsetAsync(d_in.data(), 0xFF, d_in.bytes(), s()));
      if (from_pre) {
        FH_CHECK(cudaMemsetAsync(mlp.last_bias_grad(), 0, static_cast<std::size_t>(out_f) * 4, s()));  // the caller's
        mlp.backward_from_last_pre(d_in.data(), d_y.data(), d_x.data(), B, ws.view, lane(), sl);
      } else {
        mlp.backward(d_in.data(), d_y.data(), d_x.data(), B, ws.view, lane(), sl);
      }
      auto g = test::download(arena.grads(), n, s());
      const auto di = test::download(d_in.data(), d_in.size(), s());
      g.insert(g.end(), di.begin(), di.end());
      return g;
    };
    for (const bool from_pre : {false, true}) {
      SCOPED_TRACE(from_pre ? "from the last pre-activation gradient" : "from d_out");
      const auto one = run(nullptr, from_pre), two = run(&side, from_pre);
      ASSERT_EQ(one.size(), two.size());
      for (std::size_t k = 0; k < one.size(); ++k) {
        std::uint32_t a = 0, b = 0;
        std::memcpy(&a, &one[k], 4);
        std::memcpy(&b, &two[k], 4);
        ASSERT_EQ(a, b) << "element " << k << " of the grads (padded " << n << ") then d_in: " << one[k] << " vs "
                        << two[k];
      }
      for (const auto& e : arena.entries())
        for (std::int64_t i = 0; i < e.numel; ++i)
          ASSERT_TRUE(std::isfinite(one[static_cast<std::size_t>(e.offset + i)])) << e.name << "[" << i << "]";
      if (math != gpu::LinearMath::fp32) continue;
      gpu::detail::linear_force_unfused_epilogue(true);  // no fold (the forward is not rerun)
      const auto unfolded = run(nullptr, from_pre);
      gpu::detail::linear_force_unfused_epilogue(false);
      std::vector<double> ref(unfolded.begin(), unfolded.end());
      for (std::size_t k = 0; k < ref.size(); ++k)
        if (!std::isfinite(ref[k])) ref[k] = 0.0;  // padding between tensors (never written)
      std::vector<float> got(one);
      for (std::size_t k = 0; k < got.size(); ++k)
        if (!std::isfinite(unfolded[k])) got[k] = 0.f;
      EXPECT_LT(test::rel_error(got, ref), 1e-5) << "folded against unfolded";
    }
  }
  FH_CHECK(cudaStreamSynchronize(side_ctx.stream()));
}

// A network given its encoder (the spec's Mlp built by the caller) is the spec-built network bit
// for bit: the same parameter names and initial values, forward and backward through the Module
// interface (fused heads folding into the encoder's last layer on the ReLU trunk, the GELU trunk's
// plain backward, the GEMM heads); also with the encoder in an arena of its own (EncoderParams::own).
TEST_F(QNetworkTest, GivenEncoderIsTheSpecNetworkBitwise) {
  SCOPED_TRACE(seed_note());
  const std::vector<Named> cases{
      {"dueling relu (fold)", with_act(make(6, {16, 12}, 1, 3, 1, true, false), gpu::Activation::relu)},
      {"bdq gelu", make(4, {13, 10}, 3, 5, 1, true, false)},
      {"plain relu, GEMM heads", with_act(gemm_heads(make(5, {9}, 1, 4, 1, false, false)), gpu::Activation::relu)},
  };
  const std::int64_t B = 11;
  for (const auto& c : cases) {
    for (const EncoderParams params : {EncoderParams::shared, EncoderParams::own}) {
      SCOPED_TRACE(std::string(c.what) + (params == EncoderParams::own ? ", own arena" : ", shared arena"));
      const std::uint64_t seed = rng()();
      QNetwork ref(c.spec, "", 40);
      gpu::ParameterArena ref_arena;
      ref.declare(ref_arena);
      ref_arena.finalize(s());
      std::mt19937_64 ref_rng(seed);
      ref.init(ref_arena, ref_rng, s());
      ref.bind(ref_arena);

      auto encoder = std::make_unique<Mlp>(
          MlpSpec{"trunk", c.spec.obs_dim, c.spec.hidden, c.spec.act, false, c.spec.sigma0, c.spec.math}, 40 + 16);
      Mlp& enc = *encoder;
      QNetwork net(c.spec, std::move(encoder), params, "", 40);
      gpu::ParameterArena arena, enc_arena;
      gpu::ParameterArena& ea = params == EncoderParams::own ? enc_arena : arena;
      if (params == EncoderParams::own) enc.declare(enc_arena);
      net.declare(arena);
      if (params == EncoderParams::own) enc_arena.finalize(s());
      arena.finalize(s());
      std::mt19937_64 net_rng(seed);  // the encoder first, as the shared network initialises it
      if (params == EncoderParams::own) enc.init(enc_arena, net_rng, s());
      net.init(arena, net_rng, s());
      if (params == EncoderParams::own) enc.bind(enc_arena);
      net.bind(arena);

      auto ref_ws = ref.make_workspace(B), ws = net.make_workspace(B);
      auto d_obs =
          test::upload(test::random_uniform(static_cast<std::size_t>(B * c.spec.obs_dim), -1.f, 1.f, rng()), s());
      auto d_u = test::upload(test::random_uniform(static_cast<std::size_t>(B * net.outputs()), -1.f, 1.f, rng()), s());
      for (auto* a : {&ref_arena, &arena, &enc_arena})
        if (a->padded_count() > 0)
          FH_CHECK(cudaMemsetAsync(a->grads(), 0xFF, static_cast<std::size_t>(a->padded_count()) * 4, s()));
      ref.forward(ref_ws, d_obs.data(), B, false, lane());
      ref.backward(ref_ws, d_u.data(), d_obs.data(), B, lane());
      net.forward(ws, d_obs.data(), B, false, lane());
      net.backward(ws, d_u.data(), d_obs.data(), B, lane());
      const auto bits = [&](const float* p, std::size_t n) {
        const auto h = test::download(p, n, s());
        std::vector<std::uint32_t> b(n);
        std::memcpy(b.data(), h.data(), n * 4);
        return b;
      };
      const auto rows = static_cast<std::size_t>(B * net.outputs());
      EXPECT_EQ(bits(net.q(ws), rows), bits(ref.q(ref_ws), rows)) << "Q";
      for (const auto& e : ref_arena.entries()) {
        SCOPED_TRACE(e.name);
        const gpu::ParameterArena& a = e.name.rfind("trunk.", 0) == 0 ? ea : arena;
        ASSERT_TRUE(a.contains(e.name));
        const auto n = static_cast<std::size_t>(e.numel);
        EXPECT_EQ(bits(a.param(e.name).as<float>(), n), bits(ref_arena.param(e.name).as<float>(), n)) << "init";
        const auto g = bits(a.grad(e.name).as<float>(), n);
        EXPECT_EQ(g, bits(ref_arena.grad(e.name).as<float>(), n)) << "gradient";
        for (const auto x : g) ASSERT_NE(x, 0xFFFFFFFFu) << "gradient not written";
      }
    }
  }
}

TEST_F(QNetworkTest, EvalUsesMuOnly) {
  SCOPED_TRACE(seed_note());
  auto spec = make(5, {8}, 1, 4, 1, true, true);
  QNetwork noisy(spec, "", 0);
  spec.noisy = false;
  spec.fused_heads = false;  // the noisy heads are GEMMs: compare like with like, bit for bit
  QNetwork plain(spec, "", 0);
  gpu::ParameterArena an, ap;
  noisy.declare(an);
  plain.declare(ap);
  an.finalize(s());
  ap.finalize(s());
  noisy.init(an, rng(), s());
  noisy.bind(an);
  plain.bind(ap);
  // plain's weights := noisy's mu (same names up to the _mu suffix).
  for (const auto& e : ap.entries()) {
    std::string n = e.name;
    const bool w = n.ends_with(".weight"), b = n.ends_with(".bias");
    const std::string src = w ? n + "_mu" : b ? n + "_mu" : n;
    const std::string from = an.contains(src) ? src : n;
    FH_CHECK(cudaMemcpyAsync(ap.param(e.name).data, an.param(from).data, static_cast<std::size_t>(e.numel) * 4,
                             cudaMemcpyDeviceToDevice, s()));
  }
  std::vector<std::uint64_t> counter{1};
  auto d_counter = test::upload(counter, s());
  noisy.resample_noise(17, d_counter.data(), s());
  const std::int64_t B = 9;
  auto wn = noisy.make_workspace(B), wp = plain.make_workspace(B);
  auto d_obs = test::upload(test::random_uniform(static_cast<std::size_t>(B * 5), -1.f, 1.f, rng()), s());
  noisy.forward(wn, d_obs.data(), B, true, lane());
  plain.forward(wp, d_obs.data(), B, false, lane());
  const auto qn = test::download(noisy.q(wn), static_cast<std::size_t>(B * 4), s());
  const auto qp = test::download(plain.q(wp), qn.size(), s());
  EXPECT_EQ(qn, qp);  // identical GEMMs on identical inputs
  noisy.forward(wn, d_obs.data(), B, false, lane());
  const auto qt = test::download(noisy.q(wn), qn.size(), s());
  EXPECT_NE(qt, qp);  // training mode adds the noise
}

TEST_F(QNetworkTest, DeadUnitsCountedOnDevice) {
  SCOPED_TRACE(seed_note());
  QNetworkSpec spec = make(6, {40, 150}, 1, 3, 1, true, false);
  spec.act = gpu::Activation::relu;
  QNetwork net(spec, "", 0);
  gpu::ParameterArena arena;
  set_up(net, arena);
  // Layer 0: bias -100 kills all 40 units for inputs in [-1, 1]. Layer 1 then sees zeros: its
  // pre-activation is its bias, so exactly the units with bias <= 0 are dead.
  arena.upload_param("trunk.0.bias", std::vector<float>(40, -100.f), s());
  auto b1 = test::random_uniform(150, -1.f, 1.f, rng());
  arena.upload_param("trunk.1.bias", b1, s());
  std::uint32_t want = 40;
  for (float b : b1) want += b <= 0.f;
  const std::int64_t B = 33;
  auto ws = net.make_workspace(B);
  auto d_obs = test::upload(test::random_uniform(static_cast<std::size_t>(B * 6), -1.f, 1.f, rng()), s());
  net.forward(ws, d_obs.data(), B, false, lane());
  gpu::DeviceBuffer<std::uint32_t> dead(1);
  dead.zero(s());
  net.count_dead_units(dead.data(), ws, B, s());
  EXPECT_EQ(test::download(dead, s())[0], want);
  EXPECT_EQ(net.relu_units(), 190);
}

// count_dead_relu_units on random sparse masks (a unit is alive in few rows, so some are dead and
// many are alive through a single row) against a CPU count; padding bits past out_f are set at
// random and must be ignored. Batch 0 counts every unit dead.
TEST_F(QNetworkTest, DeadUnitsMatchCpuCount) {
  SCOPED_TRACE(seed_note());
  for (const auto& [B, units] :
       {std::pair<std::int64_t, std::int64_t>{1, 1}, {300, 200}, {256, 256}, {1000, 33}, {4097, 130}}) {
    SCOPED_TRACE("B " + std::to_string(B) + " units " + std::to_string(units));
    const std::int64_t words = (units + 127) / 128 * 4;
    std::vector<std::uint32_t> mask(static_cast<std::size_t>(B * words));
    std::bernoulli_distribution bit(B <= 1 ? 0.5 : 3.0 / static_cast<double>(B));
    std::bernoulli_distribution pad(0.5);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t j = 0; j < words * 32; ++j)
        if (j < units ? bit(rng()) : pad(rng())) mask[b * words + j / 32] |= 1u << (j % 32);
    std::uint32_t want = 0;
    for (std::int64_t j = 0; j < units; ++j) {
      bool alive = false;
      for (std::int64_t b = 0; b < B; ++b) alive = alive || ((mask[b * words + j / 32] >> (j % 32)) & 1u);
      want += alive ? 0u : 1u;
    }
    auto d_mask = test::upload(mask, s());
    gpu::DeviceBuffer<std::uint32_t> dead(1);
    dead.zero(s());
    count_dead_relu_units(dead.data(), d_mask.data(), B, units, s());
    count_dead_relu_units(dead.data(), d_mask.data(), B, units, s());  // adds: twice the count
    EXPECT_EQ(test::download(dead, s())[0], 2 * want);
    dead.zero(s());
    count_dead_relu_units(dead.data(), nullptr, 0, units, s());
    EXPECT_EQ(test::download(dead, s())[0], static_cast<std::uint32_t>(units));
  }
}

}  // namespace
}  // namespace foxhunt::models
