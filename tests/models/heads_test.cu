// Heads of the DQN family: dueling aggregation (plain, BDQ branches, per-atom), the C51 expectation,
// projection and cross-entropy, each against a float64 reference; the backward passes also against
// central finite differences of the GPU forward.
#include "models/fd_support.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "models/c51.hpp"
#include "models/dueling.hpp"

namespace foxhunt::models {
namespace {

class HeadsTest : public test::LaneTest {};

struct Dims {
  std::int64_t B, D, A, Z;
};

TEST_F(HeadsTest, DuelingForwardBackward) {
  SCOPED_TRACE(seed_note());
  for (const Dims& d :
       {Dims{1, 1, 1, 1}, Dims{7, 1, 9, 1}, Dims{33, 4, 5, 1}, Dims{5, 1, 3, 51}, Dims{1000, 3, 7, 2}}) {
    SCOPED_TRACE("B=" + std::to_string(d.B) + " D=" + std::to_string(d.D) + " A=" + std::to_string(d.A) +
                 " Z=" + std::to_string(d.Z));
    const auto nv = static_cast<std::size_t>(d.B * d.Z), na = static_cast<std::size_t>(d.B * d.D * d.A * d.Z);
    const auto v = test::random_uniform(nv, -2.f, 2.f, rng()), a = test::random_uniform(na, -2.f, 2.f, rng());
    const auto u = test::random_uniform(na, -1.f, 1.f, rng());
    auto d_v = test::upload(v, s()), d_a = test::upload(a, s()), d_u = test::upload(u, s());
    gpu::DeviceBuffer<float> d_out(na), d_dv(nv), d_da(na);
    test::poison(d_out, s());
    test::poison(d_dv, s());
    test::poison(d_da, s());
    dueling_forward(d_out.data(), d_v.data(), d_a.data(), d.B, d.D, d.A, d.Z, s());
    dueling_backward(d_dv.data(), d_da.data(), d_u.data(), d.B, d.D, d.A, d.Z, s());
    std::vector<double> out(na), dv(nv, 0), da(na);
    for (std::int64_t b = 0; b < d.B; ++b)
      for (std::int64_t br = 0; br < d.D; ++br)
        for (std::int64_t z = 0; z < d.Z; ++z) {
          auto idx = [&](std::int64_t k) { return ((b * d.D + br) * d.A + k) * d.Z + z; };
          double mean = 0, umean = 0;
          for (std::int64_t k = 0; k < d.A; ++k) mean += a[idx(k)], umean += u[idx(k)];
          mean /= d.A;
          umean /= d.A;
          for (std::int64_t k = 0; k < d.A; ++k) {
            out[idx(k)] = v[b * d.Z + z] + a[idx(k)] - mean;
            da[idx(k)] = u[idx(k)] - umean;
            dv[b * d.Z + z] += u[idx(k)];
          }
        }
    EXPECT_TRUE(test::all_close(test::download(d_out, s()), out, 1e-5, 1e-5));
    EXPECT_TRUE(test::all_close(test::download(d_dv, s()), dv, 1e-5, 1e-5));
    EXPECT_TRUE(test::all_close(test::download(d_da, s()), da, 1e-5, 1e-5));
    // Finite differences (the map is linear: exact up to float rounding).
    const auto gdv = test::download(d_dv, s()), gda = test::download(d_da, s());
    auto loss = [&] {
      return test::weighted_sum([&] { dueling_forward(d_out.data(), d_v.data(), d_a.data(), d.B, d.D, d.A, d.Z, s()); },
                                d_out.data(), u, s());
    };
    for (int k = 0; k < 4; ++k) {
      const auto iv = static_cast<std::int64_t>(rng()() % nv), ia = static_cast<std::int64_t>(rng()() % na);
      EXPECT_TRUE(test::fd_close(test::central_difference(loss, d_v.data(), iv, 1e-2f, s()), gdv[iv], 1e-2, 0.05));
      EXPECT_TRUE(test::fd_close(test::central_difference(loss, d_a.data(), ia, 1e-2f, s()), gda[ia], 1e-2, 0.05));
    }
  }
}

double atom(std::int64_t i, std::int64_t Z, double vmin, double vmax) { return vmin + i * (vmax - vmin) / (Z - 1); }

TEST_F(HeadsTest, C51Expectation) {
  SCOPED_TRACE(seed_note());
  const std::int64_t rows = 1001, Z = 51;
  auto p = test::random_uniform(static_cast<std::size_t>(rows * Z), 0.f, 1.f, rng());
  auto d_p = test::upload(p, s());
  gpu::DeviceBuffer<float> d_q(rows);
  test::poison(d_q, s());
  c51_expectation(d_q.data(), d_p.data(), rows, Z, -10.f, 10.f, s());
  std::vector<double> q(rows, 0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < Z; ++i) q[r] += p[r * Z + i] * atom(i, Z, -10, 10);
  EXPECT_TRUE(test::all_close(test::download(d_q, s()), q, 1e-5, 5e-4));  // 51 terms of |p z| <= 10
}

// The categorical projection in float64: the reference the device must match.
std::vector<double> project_ref(const std::vector<float>& probs, const std::vector<std::int32_t>& a,
                                const std::vector<float>& R, const std::vector<float>& g, std::int64_t B,
                                std::int64_t A, std::int64_t Z, double vmin, double vmax) {
  std::vector<double> m(static_cast<std::size_t>(B * Z), 0);
  const double dz = (vmax - vmin) / (Z - 1);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t j = 0; j < Z; ++j) {
      const double p = probs[(b * A + a[b]) * Z + j];
      const double tz = std::clamp(R[b] + static_cast<double>(g[b]) * atom(j, Z, vmin, vmax), vmin, vmax);
      const double x = std::clamp((tz - vmin) / dz, 0.0, static_cast<double>(Z - 1));
      const double l = std::floor(x), u = std::ceil(x);
      if (l == u) {
        m[b * Z + static_cast<std::int64_t>(l)] += p;
      } else {
        m[b * Z + static_cast<std::int64_t>(l)] += p * (u - x);
        m[b * Z + static_cast<std::int64_t>(u)] += p * (x - l);
      }
    }
  return m;
}

TEST_F(HeadsTest, C51ProjectionFixedAndRandom) {
  SCOPED_TRACE(seed_note());
  // Fixed batch: Z = 5 atoms on [-2, 2] (dz = 1), one action.
  {
    const std::int64_t B = 4, A = 1, Z = 5;
    // b0: terminal, R = 0.5 -> all mass split between atoms 2 (0) and 3 (1): 0.5 / 0.5.
    // b1: R = 0, discount 1 -> the distribution itself.
    // b2: R = 10 (beyond v_max), terminal -> all mass on the last atom.
    // b3: R = 1, discount 1 -> shifted by one atom, the top atom's mass piles on the last atom.
    const std::vector<float> probs{0.1f, 0.2f, 0.3f, 0.25f, 0.15f, 0.1f, 0.2f, 0.3f, 0.25f, 0.15f,
                                   0.1f, 0.2f, 0.3f, 0.25f, 0.15f, 0.1f, 0.2f, 0.3f, 0.25f, 0.15f};
    const std::vector<std::int32_t> a{0, 0, 0, 0};
    const std::vector<float> R{0.5f, 0.f, 10.f, 1.f}, g{0.f, 1.f, 0.f, 1.f};
    const std::vector<double> want{0, 0, 0.5, 0.5, 0, 0.1, 0.2, 0.3, 0.25, 0.15, 0, 0, 0, 0, 1, 0, 0.1, 0.2, 0.3, 0.4};
    auto d_p = test::upload(probs, s());
    auto d_a = test::upload(a, s());
    auto d_R = test::upload(R, s()), d_g = test::upload(g, s());
    gpu::DeviceBuffer<float> d_m(static_cast<std::size_t>(B * Z));
    test::poison(d_m, s());
    c51_project(d_m.data(), d_p.data(), d_a.data(), d_R.data(), d_g.data(), B, A, Z, -2.f, 2.f, s());
    EXPECT_TRUE(test::all_close(test::download(d_m, s()), want, 1e-6, 1e-6));
  }
  // Random batches against the float64 reference; the mass is conserved.
  const std::int64_t B = 257, A = 6, Z = 51;
  std::vector<float> probs(static_cast<std::size_t>(B * A * Z));
  for (std::int64_t r = 0; r < B * A; ++r) {
    double sum = 0;
    std::uniform_real_distribution<float> u(0.01f, 1.f);
    for (std::int64_t i = 0; i < Z; ++i) sum += probs[r * Z + i] = u(rng());
    for (std::int64_t i = 0; i < Z; ++i) probs[r * Z + i] = static_cast<float>(probs[r * Z + i] / sum);
  }
  std::vector<std::int32_t> a(B);
  for (auto& x : a) x = static_cast<std::int32_t>(rng()() % A);
  const auto R = test::random_uniform(B, -12.f, 12.f, rng());
  auto g = test::random_uniform(B, 0.f, 0.99f, rng());
  for (std::int64_t b = 0; b < B; b += 5) g[b] = 0.f;  // terminal rows
  auto d_p = test::upload(probs, s());
  auto d_a = test::upload(a, s());
  auto d_R = test::upload(R, s()), d_g = test::upload(g, s());
  gpu::DeviceBuffer<float> d_m(static_cast<std::size_t>(B * Z));
  test::poison(d_m, s());
  c51_project(d_m.data(), d_p.data(), d_a.data(), d_R.data(), d_g.data(), B, A, Z, -10.f, 10.f, s());
  const auto m = test::download(d_m, s());
  // rtol 1e-4: each projected mass sums up to Z f32 contributions (seen on an H200: 4.4e-5).
  // atol 1e-5: with a discount near 0 a bin can collect most of the row's mass, and the float
  // position b = (Tz - v_min) / dz of each atom carries about one ulp of |Tz| / dz (~2.5e-6 here),
  // which moves up to that much mass between neighbouring bins (seen on an H200: 1.9e-6).
  EXPECT_TRUE(test::all_close(m, project_ref(probs, a, R, g, B, A, Z, -10, 10), 1e-4, 1e-5));
  for (std::int64_t b = 0; b < B; ++b) {
    double sum = 0;
    for (std::int64_t i = 0; i < Z; ++i) sum += m[b * Z + i];
    EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << b;
  }
}

TEST_F(HeadsTest, C51CrossEntropyAndGradient) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 37, A = 4, Z = 11;
  const auto logits = test::random_uniform(static_cast<std::size_t>(B * A * Z), -3.f, 3.f, rng());
  std::vector<float> m(static_cast<std::size_t>(B * Z));
  for (std::int64_t b = 0; b < B; ++b) {
    double sum = 0;
    for (std::int64_t i = 0; i < Z; ++i) sum += m[b * Z + i] = std::uniform_real_distribution<float>(0, 1)(rng());
    for (std::int64_t i = 0; i < Z; ++i) m[b * Z + i] = static_cast<float>(m[b * Z + i] / sum);
  }
  std::vector<std::int32_t> a(B);
  for (auto& x : a) x = static_cast<std::int32_t>(rng()() % A);
  const auto w = test::random_uniform(B, 0.2f, 1.f, rng());
  auto d_x = test::upload(logits, s()), d_m = test::upload(m, s()), d_w = test::upload(w, s());
  auto d_a = test::upload(a, s());
  gpu::DeviceBuffer<float> d_g(logits.size()), d_l(B);
  test::poison(d_g, s());
  test::poison(d_l, s());
  c51_cross_entropy(d_g.data(), d_l.data(), d_x.data(), d_a.data(), d_m.data(), d_w.data(), B, A, Z, s());
  std::vector<double> loss(B), grad(logits.size(), 0);
  for (std::int64_t b = 0; b < B; ++b) {
    const float* x = logits.data() + (b * A + a[b]) * Z;
    double mx = x[0], se = 0;
    for (std::int64_t i = 1; i < Z; ++i) mx = std::max<double>(mx, x[i]);
    for (std::int64_t i = 0; i < Z; ++i) se += std::exp(x[i] - mx);
    const double lse = mx + std::log(se);
    loss[b] = 0;
    for (std::int64_t i = 0; i < Z; ++i) {
      loss[b] -= m[b * Z + i] * (x[i] - lse);
      grad[(b * A + a[b]) * Z + i] = w[b] / B * (std::exp(x[i] - lse) - m[b * Z + i]);
    }
  }
  EXPECT_TRUE(test::all_close(test::download(d_l, s()), loss, 1e-5, 1e-6));
  const auto g = test::download(d_g, s());
  EXPECT_TRUE(test::all_close(g, grad, 1e-4, 1e-7));
  // Finite differences of the weighted batch loss sum_b w_b l_b / B.
  auto batch_loss = [&] {
    c51_cross_entropy(d_g.data(), d_l.data(), d_x.data(), d_a.data(), d_m.data(), d_w.data(), B, A, Z, s());
    const auto l = test::download(d_l, s());
    double L = 0;
    for (std::int64_t b = 0; b < B; ++b) L += static_cast<double>(w[b]) * l[b] / B;
    return L;
  };
  for (int k = 0; k < 8; ++k) {
    const std::int64_t b = static_cast<std::int64_t>(rng()() % B), i = static_cast<std::int64_t>(rng()() % Z);
    const std::int64_t idx = (b * A + a[b]) * Z + i;
    const double fd = test::central_difference(batch_loss, d_x.data(), idx, 1e-2f, s());
    EXPECT_TRUE(test::fd_close(fd, grad[idx], 2e-2, 1e-3)) << "logit " << idx;
  }
}

}  // namespace
}  // namespace foxhunt::models
