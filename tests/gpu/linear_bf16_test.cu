// LinearMath::bf16: cuBLASLt GEMMs on bf16 copies of the f32 operands (round to nearest even), f32
// products, accumulation and output. Forward (every activation, with and without bias, fused
// epilogue and fallback), d_in, d_weight (overwrite and accumulate) and d_bias against float64
// references from the bf16-ROUNDED operands (only f32 accumulation is left: 1e-5 of the sum of
// |terms|) and from the unrounded operands (each product carries two bf16 roundings of at most 2^-8
// relative: 2^-7 of the sum of |terms|). Also: bf16 results differ from TF32's and equal those of
// pre-rounded inputs bitwise; operands larger than the lane workspace's copy area run in chunks
// with the same accuracy; a workspace too small for one chunk is refused; a captured graph replays
// the eager results bitwise.
#include "support/gpu_test.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/context.hpp"
#include "gpu/linear.hpp"
#include "gpu/linear_drelu.hpp"

namespace foxhunt::gpu {
namespace {

class LinearBf16Test : public test::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    ctx_ = std::make_unique<DeviceContext>(0, 1);
  }
  void TearDown() override {
    detail::linear_force_unfused_epilogue(false);
    if (ctx_) FH_CHECK(cudaStreamSynchronize(ctx_->stream()));
    GpuTest::TearDown();
  }
  BlasLane lane() const { return ctx_->blas(0); }
  cudaStream_t s() const { return ctx_->stream(0); }
  std::unique_ptr<DeviceContext> ctx_;
};

constexpr double kTight = 1e-5;                    // f32 accumulation, relative to sum |terms|
const double kLoose = std::ldexp(1.0, -7) + 2e-5;  // two bf16 roundings per product, plus f32 accumulation

// Round to nearest, ties to even, as __float2bfloat16_rn (finite inputs).
float bf16_round(float x) {
  std::uint32_t u = 0;
  std::memcpy(&u, &x, sizeof(u));
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  float r = 0;
  std::memcpy(&r, &u, sizeof(r));
  return r;
}
std::vector<float> bf16_round(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  std::transform(v.begin(), v.end(), r.begin(), [](float x) { return bf16_round(x); });
  return r;
}

constexpr double kC0 = 0.7978845608028654, kC1 = 0.044715;
double act_ref(Activation a, double x) {
  if (a == Activation::relu) return x > 0 ? x : 0;
  if (a == Activation::gelu) return 0.5 * x * (1 + std::tanh(kC0 * (x + kC1 * x * x * x)));
  if (a == Activation::tanh) return std::tanh(x);
  return x;
}
double act_grad_ref(Activation a, double x) {
  if (a == Activation::relu) return x > 0 ? 1 : 0;
  if (a == Activation::gelu) {
    const double t = std::tanh(kC0 * (x + kC1 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kC0 * (1 + 3 * kC1 * x * x);
  }
  if (a == Activation::tanh) return 1 - std::tanh(x) * std::tanh(x);
  return 1;
}

struct Shape3 {
  std::int64_t batch, in, out;
};
std::string describe(Shape3 sh, Activation a, bool bias) {
  return "B=" + std::to_string(sh.batch) + " in=" + std::to_string(sh.in) + " out=" + std::to_string(sh.out) +
         " act=" + std::string(activation_name(a)) + " bias=" + std::to_string(bias);
}

// Sum and sum of |terms| in float64.
struct Ref {
  std::vector<double> v, mag;
};

// pre (B, out) = x (B, in) w^T + b
Ref forward_ref(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b, Shape3 sh) {
  Ref r{std::vector<double>(static_cast<std::size_t>(sh.batch * sh.out)),
        std::vector<double>(static_cast<std::size_t>(sh.batch * sh.out))};
  for (std::int64_t i = 0; i < sh.batch; ++i)
    for (std::int64_t j = 0; j < sh.out; ++j) {
      double acc = b.empty() ? 0.0 : b[j], mag = b.empty() ? 0.0 : std::abs(b[j]);
      for (std::int64_t k = 0; k < sh.in; ++k) {
        const double t = static_cast<double>(x[i * sh.in + k]) * w[j * sh.in + k];
        acc += t;
        mag += std::abs(t);
      }
      r.v[i * sh.out + j] = acc;
      r.mag[i * sh.out + j] = mag;
    }
  return r;
}

// d_in (B, in) = d_pre (B, out) w; d_w (out, in) = d_pre^T x
Ref d_in_ref(const std::vector<float>& d_pre, const std::vector<float>& w, Shape3 sh) {
  Ref r{std::vector<double>(static_cast<std::size_t>(sh.batch * sh.in)),
        std::vector<double>(static_cast<std::size_t>(sh.batch * sh.in))};
  for (std::int64_t i = 0; i < sh.batch; ++i)
    for (std::int64_t j = 0; j < sh.out; ++j)
      for (std::int64_t k = 0; k < sh.in; ++k) {
        const double t = static_cast<double>(d_pre[i * sh.out + j]) * w[j * sh.in + k];
        r.v[i * sh.in + k] += t;
        r.mag[i * sh.in + k] += std::abs(t);
      }
  return r;
}
Ref d_w_ref(const std::vector<float>& d_pre, const std::vector<float>& x, Shape3 sh) {
  Ref r{std::vector<double>(static_cast<std::size_t>(sh.out * sh.in)),
        std::vector<double>(static_cast<std::size_t>(sh.out * sh.in))};
  for (std::int64_t i = 0; i < sh.batch; ++i)
    for (std::int64_t j = 0; j < sh.out; ++j)
      for (std::int64_t k = 0; k < sh.in; ++k) {
        const double t = static_cast<double>(d_pre[i * sh.out + j]) * x[i * sh.in + k];
        r.v[j * sh.in + k] += t;
        r.mag[j * sh.in + k] += std::abs(t);
      }
  return r;
}

::testing::AssertionResult close_by_magnitude(const std::vector<float>& got, const std::vector<double>& ref,
                                              const std::vector<double>& mag, double tol, double atol = 1e-7) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << "size mismatch";
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - ref[i]);
    if (!(err <= tol * mag[i] + atol))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << ref[i] << " (|err| "
                                           << err << ", scale " << mag[i] << ", tol " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

// One layer's forward and backward in bf16 on `lane`, checked against both references.
void check_layer(Shape3 sh, Activation act, bool bias, bool unfused, std::mt19937_64& rng, BlasLane lane) {
  SCOPED_TRACE(describe(sh, act, bias) + (unfused ? " unfused" : " fused"));
  detail::linear_force_unfused_epilogue(unfused);
  const cudaStream_t s = lane.stream;
  const float bound = 1.f / std::sqrt(static_cast<float>(sh.in));
  const auto x = test::random_uniform(static_cast<std::size_t>(sh.batch * sh.in), -1.f, 1.f, rng);
  const auto w = test::random_uniform(static_cast<std::size_t>(sh.out * sh.in), -bound, bound, rng);
  const auto b =
      bias ? test::random_uniform(static_cast<std::size_t>(sh.out), -bound, bound, rng) : std::vector<float>{};
  const auto up = test::random_normal(static_cast<std::size_t>(sh.batch * sh.out), 0.f, 1.f, rng);
  auto dx = test::upload(x, s);
  auto dw = test::upload(w, s);
  auto db = test::upload(b, s);
  auto dup = test::upload(up, s);
  const float* bias_ptr = bias ? db.data() : nullptr;

  // ---- forward
  DeviceBuffer<float> y(up.size());
  DeviceBuffer<std::byte> aux(linear_aux_bytes(sh.batch, sh.out, act));
  test::poison(y, s);
  test::poison(aux, s);
  linear_forward(y.data(), aux.data(), dx.data(), dw.data(), bias_ptr, sh.batch, sh.in, sh.out, act, LinearMath::bf16,
                 lane);
  const auto got_y = test::download(y, s);
  const Ref rounded = forward_ref(bf16_round(x), bf16_round(w), b, sh);  // the bias is added in f32
  const Ref exact = forward_ref(x, w, b, sh);
  std::vector<double> y_r(got_y.size()), mag_r(got_y.size()), y_e(got_y.size()), mag_e(got_y.size());
  for (std::size_t i = 0; i < got_y.size(); ++i) {
    y_r[i] = act_ref(act, rounded.v[i]);
    mag_r[i] = rounded.mag[i] * std::max(1.0, std::abs(act_grad_ref(act, rounded.v[i])));
    y_e[i] = act_ref(act, exact.v[i]);
    mag_e[i] = exact.mag[i] * std::max(1.0, std::abs(act_grad_ref(act, exact.v[i])));
  }
  // cuBLASLt's fused GELU may use the hardware tanh (~2^-11 relative): as in linear_test.
  const bool approx_gelu = act == Activation::gelu && !unfused;
  EXPECT_TRUE(close_by_magnitude(got_y, y_r, mag_r, approx_gelu ? 2e-3 : kTight)) << "y vs rounded operands";
  EXPECT_TRUE(close_by_magnitude(got_y, y_e, mag_e, approx_gelu ? 2e-3 + kLoose : kLoose)) << "y vs exact operands";
  if (act == Activation::gelu || act == Activation::tanh) {
    const std::int64_t ld = (sh.out + 7) / 8 * 8;
    const auto raw = test::download(reinterpret_cast<const float*>(aux.data()), aux.size() / sizeof(float), s);
    std::vector<float> pre;
    for (std::int64_t r = 0; r < sh.batch; ++r)
      for (std::int64_t j = 0; j < sh.out; ++j) pre.push_back(raw[r * ld + j]);
    EXPECT_TRUE(close_by_magnitude(pre, rounded.v, rounded.mag, kTight)) << "aux pre-activation";
  }
  if (act == Activation::relu) {
    const std::int64_t ld = (sh.out + 127) / 128 * 128;
    const auto words = test::download(reinterpret_cast<const std::uint32_t*>(aux.data()), aux.size() / 4, s);
    int wrong = 0;
    for (std::int64_t r = 0; r < sh.batch; ++r)
      for (std::int64_t j = 0; j < sh.out; ++j) {
        const double pre = rounded.v[r * sh.out + j];
        if (std::abs(pre) <= kTight * rounded.mag[r * sh.out + j] + 1e-7) continue;  // sign decided by rounding
        const std::int64_t bit = r * ld + j;
        if ((((words[bit / 32] >> (bit % 32)) & 1u) != 0) != (pre > 0)) ++wrong;
      }
    EXPECT_EQ(wrong, 0) << "relu mask bits disagree with the rounded reference's signs";
  }

  // ---- backward: d_pre comes from our f32 kernel (checked in linear_test); the GEMMs take it as is.
  DeviceBuffer<float> scratch(up.size()), d_in(x.size()), d_w(w.size()), d_b(static_cast<std::size_t>(sh.out));
  test::poison(scratch, s);
  test::poison(d_in, s);
  test::poison(d_w, s);
  test::poison(d_b, s);
  linear_backward(d_in.data(), d_w.data(), d_b.data(), scratch.data(), dup.data(), aux.data(), dx.data(), dw.data(),
                  sh.batch, sh.in, sh.out, act, false, LinearMath::bf16, lane);
  const std::vector<float> d_pre = act == Activation::identity ? up : test::download(scratch, s);
  if (act != Activation::identity) {  // d_pre itself: d_out times act' of the saved pre-activation
    const std::int64_t ld_bits = (sh.out + 127) / 128 * 128, ld = (sh.out + 7) / 8 * 8;
    const auto words = test::download(reinterpret_cast<const std::uint32_t*>(aux.data()), aux.size() / 4, s);
    const auto pre = test::download(reinterpret_cast<const float*>(aux.data()), aux.size() / sizeof(float), s);
    std::vector<double> want(up.size()), mag(up.size());
    for (std::int64_t r = 0; r < sh.batch; ++r)
      for (std::int64_t j = 0; j < sh.out; ++j) {
        const std::size_t i = static_cast<std::size_t>(r * sh.out + j);
        double g = 0;
        if (act == Activation::relu) {
          const std::int64_t bit = r * ld_bits + j;
          g = ((words[bit / 32] >> (bit % 32)) & 1u) ? up[i] : 0.0;
        } else {
          g = up[i] * act_grad_ref(act, pre[r * ld + j]);
        }
        want[i] = g;
        mag[i] = std::abs(up[i]);
      }
    EXPECT_TRUE(close_by_magnitude(d_pre, want, mag, 1e-5)) << "d_pre";
  }
  const auto d_pre_r = bf16_round(d_pre);
  const Ref din_r = d_in_ref(d_pre_r, bf16_round(w), sh), din_e = d_in_ref(d_pre, w, sh);
  const Ref dw_r = d_w_ref(d_pre_r, bf16_round(x), sh), dw_e = d_w_ref(d_pre, x, sh);
  Ref db_e{std::vector<double>(static_cast<std::size_t>(sh.out)),
           std::vector<double>(static_cast<std::size_t>(sh.out))};
  for (std::int64_t r = 0; r < sh.batch; ++r)
    for (std::int64_t j = 0; j < sh.out; ++j) {
      db_e.v[j] += d_pre[r * sh.out + j];
      db_e.mag[j] += std::abs(d_pre[r * sh.out + j]);
    }
  const auto got_din = test::download(d_in, s), got_dw = test::download(d_w, s);
  EXPECT_TRUE(close_by_magnitude(got_din, din_r.v, din_r.mag, kTight)) << "d_in vs rounded operands";
  EXPECT_TRUE(close_by_magnitude(got_din, din_e.v, din_e.mag, kLoose)) << "d_in vs exact operands";
  EXPECT_TRUE(close_by_magnitude(got_dw, dw_r.v, dw_r.mag, kTight)) << "d_weight vs rounded operands";
  EXPECT_TRUE(close_by_magnitude(got_dw, dw_e.v, dw_e.mag, kLoose)) << "d_weight vs exact operands";
  EXPECT_TRUE(close_by_magnitude(test::download(d_b, s), db_e.v, db_e.mag, kTight)) << "d_bias (f32, from d_pre)";

  // Accumulate: d_weight (over possibly several k chunks) adds onto what is there.
  const auto w0 = test::random_normal(w.size(), 0.f, 1.f, rng);
  d_w.upload(std::span<const float>(w0), s);
  linear_backward(nullptr, d_w.data(), nullptr, scratch.data(), dup.data(), aux.data(), dx.data(), nullptr, sh.batch,
                  sh.in, sh.out, act, true, LinearMath::bf16, lane);
  std::vector<double> acc(dw_r.v), acc_mag(dw_r.mag);
  for (std::size_t i = 0; i < acc.size(); ++i) {
    acc[i] += w0[i];
    acc_mag[i] += std::abs(w0[i]);
  }
  EXPECT_TRUE(close_by_magnitude(test::download(d_w, s), acc, acc_mag, kTight)) << "d_weight accumulated";
}

const Shape3 kShapes[] = {{37, 129, 65}, {1, 1, 1}, {5, 3, 7}, {300, 17, 200}, {64, 32, 128}, {257, 128, 255}};
const Activation kActs[] = {Activation::identity, Activation::relu, Activation::gelu, Activation::tanh};

TEST_F(LinearBf16Test, ForwardAndBackwardMatchReferences) {
  SCOPED_TRACE(seed_note());
  for (bool unfused : {false, true})
    for (Shape3 sh : kShapes)
      for (Activation act : kActs)
        for (bool bias : {true, false}) check_layer(sh, act, bias, unfused, rng(), lane());
}

// A workspace of 64 KiB keeps 48 KiB for the bf16 copies: {300, 129, 65} runs the forward in 3
// chunks of batch rows (the weight copied once), d_in in 2 and d_weight in 3 chunks of the batch.
TEST_F(LinearBf16Test, ChunkedOperandsMatchReferences) {
  SCOPED_TRACE(seed_note());
  DeviceContext small(0, 1, 64u << 10);
  for (Shape3 sh : {Shape3{300, 129, 65}, Shape3{301, 96, 33}})
    for (Activation act : kActs)
      for (bool unfused : {false, true}) check_layer(sh, act, true, unfused, rng(), small.blas(0));
  FH_CHECK(cudaStreamSynchronize(small.stream(0)));
}

TEST_F(LinearBf16Test, RefusesAWorkspaceTooSmallForOneChunk) {
  DeviceContext tiny(0, 1, 4096);
  DeviceBuffer<float> x(37 * 129), w(65 * 129), y(37 * 65);
  try {
    linear_forward(y.data(), nullptr, x.data(), w.data(), nullptr, 37, 129, 65, Activation::identity, LinearMath::bf16,
                   tiny.blas(0));
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("larger workspace"), std::string::npos) << e.what();
  }
  FH_CHECK(cudaStreamSynchronize(tiny.stream(0)));
}

// The dReLU fold runs in one chunk or not at all (false, nothing written): the two-step path then.
TEST_F(LinearBf16Test, DreluFoldDeclinesChunkedOperands) {
  DeviceContext small(0, 1, 64u << 10);
  const std::int64_t B = 300, hidden = 129, out = 65;
  DeviceBuffer<float> d_pre(B * out), w(out * hidden), got(B * hidden), got_b(hidden);
  DeviceBuffer<std::byte> mask(linear_aux_bytes(B, hidden, Activation::relu));
  FH_CHECK(cudaMemsetAsync(d_pre.data(), 0, d_pre.bytes(), small.stream(0)));
  FH_CHECK(cudaMemsetAsync(w.data(), 0, w.bytes(), small.stream(0)));
  FH_CHECK(cudaMemsetAsync(mask.data(), 0, mask.bytes(), small.stream(0)));
  test::poison(got, small.stream(0));
  test::poison(got_b, small.stream(0));
  EXPECT_FALSE(linear_backward_input_drelu(got.data(), got_b.data(), d_pre.data(), w.data(), mask.data(), B, hidden,
                                           out, LinearMath::bf16, small.blas(0)));
  const auto g = test::download(got, small.stream(0));
  const auto gb = test::download(got_b, small.stream(0));
  EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float v) { return std::isnan(v); })) << "written anyway";
  EXPECT_TRUE(std::all_of(gb.begin(), gb.end(), [](float v) { return std::isnan(v); })) << "written anyway";
}

// bf16 is not TF32: the GEMM sees the rounded operands (bitwise the result of pre-rounded inputs,
// within f32 accumulation of the rounded reference) while TF32 keeps 10 mantissa bits and so lands
// ~2^-9 of sum |terms| away from the rounded reference.
TEST_F(LinearBf16Test, DiffersFromTf32) {
  SCOPED_TRACE(seed_note());
  const Shape3 sh{256, 256, 256};
  const auto x = test::random_uniform(static_cast<std::size_t>(sh.batch * sh.in), -1.f, 1.f, rng());
  const auto w = test::random_uniform(static_cast<std::size_t>(sh.out * sh.in), -0.0625f, 0.0625f, rng());
  auto dx = test::upload(x, s()), dw = test::upload(w, s());
  auto dxr = test::upload(bf16_round(x), s()), dwr = test::upload(bf16_round(w), s());
  DeviceBuffer<float> y_bf16(static_cast<std::size_t>(sh.batch * sh.out)), y_pre(y_bf16.size()), y_tf32(y_bf16.size());
  for (auto* y : {&y_bf16, &y_pre, &y_tf32}) test::poison(*y, s());
  linear_forward(y_bf16.data(), nullptr, dx.data(), dw.data(), nullptr, sh.batch, sh.in, sh.out, Activation::identity,
                 LinearMath::bf16, lane());
  linear_forward(y_pre.data(), nullptr, dxr.data(), dwr.data(), nullptr, sh.batch, sh.in, sh.out, Activation::identity,
                 LinearMath::bf16, lane());
  linear_forward(y_tf32.data(), nullptr, dx.data(), dw.data(), nullptr, sh.batch, sh.in, sh.out, Activation::identity,
                 LinearMath::tf32, lane());
  const auto a = test::download(y_bf16, s()), p = test::download(y_pre, s()), t = test::download(y_tf32, s());
  EXPECT_EQ(a, p) << "bf16 of f32 inputs == bf16 of pre-rounded inputs";
  const Ref r = forward_ref(bf16_round(x), bf16_round(w), {}, sh);
  EXPECT_TRUE(close_by_magnitude(a, r.v, r.mag, kTight)) << "bf16 vs rounded reference";
  EXPECT_NE(a, t) << "bf16 and tf32 gave the same results";
  const double e_bf16 = test::rel_error(a, r.v), e_tf32 = test::rel_error(t, r.v);
  std::printf("  rel_error vs the bf16-rounded reference: bf16 %.3g, tf32 %.3g\n", e_bf16, e_tf32);
  EXPECT_LT(e_bf16, 1e-5);
  EXPECT_GT(e_tf32, 1e-4) << "tf32 landed on the bf16-rounded result";
}

// The conversion kernels and GEMMs capture into a graph (no allocation): replay == eager, bitwise.
TEST_F(LinearBf16Test, CapturedGraphReplaysEagerResults) {
  SCOPED_TRACE(seed_note());
  const Shape3 sh{300, 129, 65};
  const auto x = test::random_uniform(static_cast<std::size_t>(sh.batch * sh.in), -1.f, 1.f, rng());
  const auto w = test::random_uniform(static_cast<std::size_t>(sh.out * sh.in), -0.1f, 0.1f, rng());
  const auto up = test::random_normal(static_cast<std::size_t>(sh.batch * sh.out), 0.f, 1.f, rng());
  auto dx = test::upload(x, s()), dw = test::upload(w, s()), dup = test::upload(up, s());
  DeviceBuffer<float> y(up.size()), scratch(up.size()), d_in(x.size()), d_w(w.size());
  DeviceBuffer<std::byte> aux(linear_aux_bytes(sh.batch, sh.out, Activation::relu));
  auto step = [&] {
    linear_forward(y.data(), aux.data(), dx.data(), dw.data(), nullptr, sh.batch, sh.in, sh.out, Activation::relu,
                   LinearMath::bf16, lane());
    linear_backward(d_in.data(), d_w.data(), nullptr, scratch.data(), dup.data(), aux.data(), dx.data(), dw.data(),
                    sh.batch, sh.in, sh.out, Activation::relu, false, LinearMath::bf16, lane());
  };
  step();
  const auto y0 = test::download(y, s()), din0 = test::download(d_in, s()), dw0 = test::download(d_w, s());
  for (auto* b : {&y, &d_in, &d_w}) test::poison(*b, s());
  cudaGraph_t graph = nullptr;
  FH_CHECK(cudaStreamBeginCapture(s(), cudaStreamCaptureModeThreadLocal));
  step();
  FH_CHECK(cudaStreamEndCapture(s(), &graph));
  cudaGraphExec_t exec = nullptr;
  FH_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  FH_CHECK(cudaGraphLaunch(exec, s()));
  EXPECT_EQ(test::download(y, s()), y0);
  EXPECT_EQ(test::download(d_in, s()), din0);
  EXPECT_EQ(test::download(d_w, s()), dw0);
  FH_CHECK(cudaGraphExecDestroy(exec));
  FH_CHECK(cudaGraphDestroy(graph));
}

}  // namespace
}  // namespace foxhunt::gpu
