// Losses (MSE, Huber, quantile, element-wise Huber) against float64 references and central finite
// differences of the GPU loss itself.
#include "support/gpu_test.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/loss.hpp"

namespace foxhunt::gpu {
namespace {

class LossTest : public test::GpuTest {};

enum class Kind { mse, huber };

double term_ref(Kind kind, double d, double delta, double* dl) {
  if (kind == Kind::mse) {
    *dl = 2 * d;
    return d * d;
  }
  if (std::abs(d) < delta) {
    *dl = d;
    return 0.5 * d * d;
  }
  *dl = d < 0 ? -delta : delta;
  return delta * (std::abs(d) - 0.5 * delta);
}

// Host copies with an offset, so a test can hand the kernels pointers that are not 16-byte aligned.
struct Inputs {
  std::vector<float> pred, target, weights;
};

Inputs make_inputs(std::size_t n, std::mt19937_64& rng) {
  Inputs in;
  in.pred = test::random_normal(n, 0.f, 2.f, rng);
  in.target = test::random_normal(n, 0.5f, 1.5f, rng);
  in.weights = test::random_uniform(n, 0.1f, 2.f, rng);
  return in;
}

void run_pointwise(Kind kind, float* loss, float* grad, const float* pred, const float* target, const float* weights,
                   std::int64_t n, float delta, void* ws, cudaStream_t s) {
  if (kind == Kind::mse)
    mse_loss(loss, grad, pred, target, weights, n, ws, s);
  else
    huber_loss(loss, grad, pred, target, weights, n, delta, ws, s);
}

// Checks loss and gradient for one size; offset (in floats) shifts every device pointer.
void check_pointwise(Kind kind, std::int64_t n, bool use_weights, std::size_t offset, float delta, std::mt19937_64& rng,
                     cudaStream_t s) {
  SCOPED_TRACE("n=" + std::to_string(n) + " weights=" + std::to_string(use_weights) +
               " offset=" + std::to_string(offset) + (kind == Kind::mse ? " mse" : " huber"));
  const Inputs in = make_inputs(static_cast<std::size_t>(n) + offset, rng);
  auto d_pred = test::upload(in.pred, s), d_target = test::upload(in.target, s), d_w = test::upload(in.weights, s);
  DeviceBuffer<float> loss(1), grad(static_cast<std::size_t>(n) + offset);
  DeviceBuffer<std::byte> ws(loss_workspace_bytes(n));
  test::poison(loss, s);
  test::poison(grad, s);
  run_pointwise(kind, loss.data(), grad.data() + offset, d_pred.data() + offset, d_target.data() + offset,
                use_weights ? d_w.data() + offset : nullptr, n, delta, ws.data(), s);
  const float got_loss = test::download(loss, s)[0];
  const auto got_grad = test::download(grad.data() + offset, static_cast<std::size_t>(n), s);

  double sum = 0;
  std::vector<double> ref_grad(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::size_t k = static_cast<std::size_t>(i) + offset;
    const double w = use_weights ? in.weights[k] : 1.0;
    double dl;
    sum += w * term_ref(kind, static_cast<double>(in.pred[k]) - in.target[k], delta, &dl);
    ref_grad[static_cast<std::size_t>(i)] = w * dl / static_cast<double>(n);
  }
  const double ref_loss = sum / static_cast<double>(n);
  // Every term is >= 0, so the float sum's error is relative to the result itself.
  EXPECT_NEAR(got_loss, ref_loss, 1e-5 * ref_loss) << "loss";
  EXPECT_TRUE(test::all_close(got_grad, ref_grad, 1e-5, 1e-12)) << "grad";
}

TEST_F(LossTest, MseMatchesReference) {
  SCOPED_TRACE(seed_note());
  for (std::int64_t n : {1, 3, 4097, 1000003, 4 << 20})
    for (bool w : {false, true}) check_pointwise(Kind::mse, n, w, 0, 1.f, rng(), stream());
  check_pointwise(Kind::mse, 1001, true, 1, 1.f, rng(), stream());  // misaligned: scalar path
}

TEST_F(LossTest, HuberMatchesReference) {
  SCOPED_TRACE(seed_note());
  for (float delta : {1.f, 0.3f})
    for (std::int64_t n : {1, 5, 4097, 1000003})
      for (bool w : {false, true}) check_pointwise(Kind::huber, n, w, 0, delta, rng(), stream());
  check_pointwise(Kind::huber, 4 << 20, true, 0, 1.f, rng(), stream());
  check_pointwise(Kind::huber, 1001, false, 3, 1.f, rng(), stream());
}

TEST_F(LossTest, LossOnlyWhenGradIsNull) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 4097;
  const Inputs in = make_inputs(n, rng());
  auto d_pred = test::upload(in.pred, stream()), d_target = test::upload(in.target, stream());
  DeviceBuffer<float> with_grad(1), without(1), grad(n);
  DeviceBuffer<std::byte> ws(loss_workspace_bytes(n));
  test::poison(without, stream());
  huber_loss(with_grad.data(), grad.data(), d_pred.data(), d_target.data(), nullptr, n, 1.f, ws.data(), stream());
  huber_loss(without.data(), nullptr, d_pred.data(), d_target.data(), nullptr, n, 1.f, ws.data(), stream());
  EXPECT_EQ(test::download(with_grad, stream())[0], test::download(without, stream())[0]);
}

TEST_F(LossTest, EmptyInputGivesZeroLoss) {
  DeviceBuffer<float> loss(1);
  DeviceBuffer<std::byte> ws(loss_workspace_bytes(0));
  for (int which = 0; which < 3; ++which) {
    test::poison(loss, stream());
    if (which == 0) mse_loss(loss.data(), nullptr, nullptr, nullptr, nullptr, 0, ws.data(), stream());
    if (which == 1) huber_loss(loss.data(), nullptr, nullptr, nullptr, nullptr, 0, 1.f, ws.data(), stream());
    if (which == 2) quantile_loss(loss.data(), nullptr, nullptr, nullptr, nullptr, 0, 4, ws.data(), stream());
    EXPECT_EQ(test::download(loss, stream())[0], 0.f) << "loss " << which;
  }
}

TEST_F(LossTest, ReductionIsDeterministic) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 1000003;
  const Inputs in = make_inputs(n, rng());
  auto d_pred = test::upload(in.pred, stream()), d_target = test::upload(in.target, stream());
  auto d_w = test::upload(in.weights, stream());
  DeviceBuffer<float> a(1), b(1);
  DeviceBuffer<std::byte> ws(loss_workspace_bytes(n));
  mse_loss(a.data(), nullptr, d_pred.data(), d_target.data(), d_w.data(), n, ws.data(), stream());
  test::poison(ws, stream());
  mse_loss(b.data(), nullptr, d_pred.data(), d_target.data(), d_w.data(), n, ws.data(), stream());
  EXPECT_EQ(test::download(a, stream())[0], test::download(b, stream())[0]);
}

void check_quantile(std::int64_t n, std::int64_t q, std::size_t offset, std::mt19937_64& rng, cudaStream_t s) {
  SCOPED_TRACE("n=" + std::to_string(n) + " Q=" + std::to_string(q) + " offset=" + std::to_string(offset));
  const std::size_t total = static_cast<std::size_t>(n * q);
  auto pred = test::random_normal(total + offset, 0.f, 1.f, rng);
  auto target = test::random_normal(static_cast<std::size_t>(n), 0.f, 1.f, rng);
  std::vector<float> taus(static_cast<std::size_t>(q));
  for (std::int64_t j = 0; j < q; ++j) taus[j] = static_cast<float>((2.0 * j + 1) / (2.0 * q));
  auto d_pred = test::upload(pred, s), d_target = test::upload(target, s), d_taus = test::upload(taus, s);
  DeviceBuffer<float> loss(1), grad(total + offset);
  DeviceBuffer<std::byte> ws(loss_workspace_bytes(n * q));
  test::poison(loss, s);
  test::poison(grad, s);
  quantile_loss(loss.data(), grad.data() + offset, d_pred.data() + offset, d_target.data(), d_taus.data(), n, q,
                ws.data(), s);
  const float got_loss = test::download(loss, s)[0];
  const auto got_grad = test::download(grad.data() + offset, total, s);
  double sum = 0;
  std::vector<double> ref_grad(total);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < q; ++j) {
      const std::size_t e = static_cast<std::size_t>(i * q + j);
      const double u = static_cast<double>(target[i]) - pred[e + offset];
      const double slope = taus[j] - (u < 0 ? 1.0 : 0.0);
      sum += u * slope;
      ref_grad[e] = -slope / static_cast<double>(total);
    }
  const double ref_loss = sum / static_cast<double>(total);
  EXPECT_NEAR(got_loss, ref_loss, 1e-5 * ref_loss) << "loss";  // pinball terms are >= 0
  EXPECT_TRUE(test::all_close(got_grad, ref_grad, 1e-5, 1e-12)) << "grad";
}

TEST_F(LossTest, QuantileMatchesReference) {
  SCOPED_TRACE(seed_note());
  check_quantile(1, 1, 0, rng(), stream());
  check_quantile(1, 3, 0, rng(), stream());
  check_quantile(1000, 32, 0, rng(), stream());
  check_quantile(4097, 3, 0, rng(), stream());  // rows cross float4 boundaries
  check_quantile(333, 51, 0, rng(), stream());
  check_quantile(777, 5, 1, rng(), stream());       // misaligned: scalar path
  check_quantile(1 << 17, 32, 0, rng(), stream());  // 4M terms
}

TEST_F(LossTest, HuberElementwiseMatchesReference) {
  SCOPED_TRACE(seed_note());
  for (std::int64_t n : {1, 7, 4097, 1000003})
    for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
      const Inputs in = make_inputs(static_cast<std::size_t>(n) + offset, rng());
      auto d_pred = test::upload(in.pred, stream()), d_target = test::upload(in.target, stream());
      DeviceBuffer<float> out(static_cast<std::size_t>(n) + offset);
      test::poison(out, stream());
      huber_elementwise(out.data() + offset, d_pred.data() + offset, d_target.data() + offset, n, 0.7f, stream());
      const auto got = test::download(out.data() + offset, static_cast<std::size_t>(n), stream());
      std::vector<double> ref(static_cast<std::size_t>(n));
      double dl;
      for (std::int64_t i = 0; i < n; ++i)
        ref[i] = term_ref(Kind::huber, static_cast<double>(in.pred[i + offset]) - in.target[i + offset], 0.7, &dl);
      EXPECT_TRUE(test::all_close(got, ref, 1e-5, 1e-12)) << "n=" << n << " offset=" << offset;
    }
}

// Central differences of the GPU loss: L(pred + h e_i) - L(pred - h e_i), for elements away from
// the kinks (Huber's |d| = delta, the pinball's u = 0). Every loss is piecewise quadratic, where a
// central difference is exact, so h can be large (MSE has no kink: h = 0.5); what is left is the
// float rounding of the two loss sums, bounded by a few ulps of |L| each and divided by 2h.
TEST_F(LossTest, GradientsMatchFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 67, q = 4;
  const float delta = 1.f;
  auto target = test::random_normal(n, 0.f, 1.f, rng());
  auto weights = test::random_uniform(n, 0.5f, 1.5f, rng());
  std::vector<float> taus = {0.1f, 0.35f, 0.6f, 0.9f};
  auto d_target = test::upload(target, stream()), d_w = test::upload(weights, stream());
  auto d_taus = test::upload(taus, stream());
  DeviceBuffer<float> loss(1), grad(n * q), pred_dev(n * q);
  DeviceBuffer<std::byte> ws(loss_workspace_bytes(n * q));

  for (int which = 0; which < 3; ++which) {
    SCOPED_TRACE(which == 0 ? "mse" : which == 1 ? "huber" : "quantile");
    const std::int64_t count = which == 2 ? n * q : n;
    const float h = which == 0 ? 0.5f : 5e-2f;
    auto pred = test::random_normal(static_cast<std::size_t>(count), 0.f, 1.5f, rng());
    auto eval = [&](const std::vector<float>& p, float* g) {
      pred_dev.upload(std::span<const float>(p), stream());
      if (which == 0) mse_loss(loss.data(), g, pred_dev.data(), d_target.data(), d_w.data(), n, ws.data(), stream());
      if (which == 1)
        huber_loss(loss.data(), g, pred_dev.data(), d_target.data(), d_w.data(), n, delta, ws.data(), stream());
      if (which == 2)
        quantile_loss(loss.data(), g, pred_dev.data(), d_target.data(), d_taus.data(), n, q, ws.data(), stream());
      return static_cast<double>(test::download(loss, stream())[0]);
    };
    test::poison(grad, stream());
    eval(pred, grad.data());
    const auto analytic = test::download(grad.data(), static_cast<std::size_t>(count), stream());
    int checked = 0;
    for (int attempt = 0; attempt < 1000 && checked < 8; ++attempt) {
      const std::size_t e = std::uniform_int_distribution<std::size_t>(0, count - 1)(rng());
      const std::size_t row = which == 2 ? e / q : e;
      const double d = static_cast<double>(pred[e]) - target[row];
      if (which == 1 && std::abs(std::abs(d) - delta) < 3 * h) continue;
      if (which == 2 && std::abs(d) < 3 * h) continue;
      auto plus = pred, minus = pred;
      plus[e] += h;
      minus[e] -= h;
      const double l_plus = eval(plus, nullptr), l_minus = eval(minus, nullptr);
      const double step = static_cast<double>(plus[e]) - static_cast<double>(minus[e]);
      const double rounding = 16.0 * FLT_EPSILON * (std::abs(l_plus) + std::abs(l_minus)) / step;
      EXPECT_NEAR((l_plus - l_minus) / step, analytic[e], 1e-2 * std::abs(analytic[e]) + rounding + 1e-7)
          << "element " << e;
      ++checked;
    }
    EXPECT_EQ(checked, 8);
  }
}

TEST_F(LossTest, RejectsBadArguments) {
  DeviceBuffer<float> loss(1), x(4);
  DeviceBuffer<std::byte> ws(loss_workspace_bytes(4));
  EXPECT_THROW(huber_loss(loss.data(), nullptr, x.data(), x.data(), nullptr, 4, 0.f, ws.data(), stream()),
               std::invalid_argument);
  EXPECT_THROW(mse_loss(loss.data(), nullptr, x.data(), x.data(), nullptr, 4, nullptr, stream()),
               std::invalid_argument);
  EXPECT_THROW(quantile_loss(loss.data(), nullptr, x.data(), x.data(), x.data(), 2, 0, ws.data(), stream()),
               std::invalid_argument);
  EXPECT_THROW(huber_elementwise(x.data(), x.data(), x.data(), 4, -1.f, stream()), std::invalid_argument);
}

}  // namespace
}  // namespace foxhunt::gpu
