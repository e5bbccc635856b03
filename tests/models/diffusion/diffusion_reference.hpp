#pragma once
// Float64 CPU references of the diffusion family (models/diffusion): the schedules written from
// their formulas, the sinusoidal embedding, the denoiser's forward from its parameters, and the
// exact moments of a sampler run with the optimal epsilon-predictor of Gaussian data.
#include <cmath>
#include <cstdint>
#include <map>
#include <numbers>
#include <string>
#include <vector>

namespace foxhunt::test::diffusion {

// beta and alpha_bar (T) of the linear (1e-4 -> 0.02) and cosine (s = 0.008, clip 0.999) schedules.
struct RefSchedule {
  std::vector<double> beta, alpha_bar;
};
inline RefSchedule ref_linear(std::int64_t T, double b0 = 1e-4, double b1 = 0.02) {
  RefSchedule r;
  double p = 1;
  for (std::int64_t t = 0; t < T; ++t) {
    const double b = b0 + (b1 - b0) * static_cast<double>(t) / static_cast<double>(T - 1);
    p *= 1 - b;
    r.beta.push_back(b);
    r.alpha_bar.push_back(p);
  }
  return r;
}
inline RefSchedule ref_cosine(std::int64_t T) {
  RefSchedule r;
  const auto f = [&](double t) {
    const double c = std::cos((t / static_cast<double>(T) + 0.008) / 1.008 * std::numbers::pi / 2);
    return c * c;
  };
  double p = 1;
  for (std::int64_t t = 0; t < T; ++t) {
    const double b = std::min(1 - f(static_cast<double>(t + 1)) / f(static_cast<double>(t)), 0.999);
    p *= 1 - b;
    r.beta.push_back(b);
    r.alpha_bar.push_back(p);
  }
  return r;
}

inline double gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

inline std::vector<double> embedding(std::int32_t t, std::int64_t E) {
  std::vector<double> e(static_cast<std::size_t>(E));
  const std::int64_t half = E / 2;
  for (std::int64_t k = 0; k < half; ++k) {
    const double f = std::exp(-std::log(10000.0) * static_cast<double>(k) / static_cast<double>(half));
    e[static_cast<std::size_t>(k)] = std::sin(t * f);
    e[static_cast<std::size_t>(half + k)] = std::cos(t * f);
  }
  return e;
}

// y = act(W x + b), W (out, in) row-major.
inline std::vector<double> dense(const std::vector<float>& W, const std::vector<float>& b, const std::vector<double>& x,
                                 bool gelu_act) {
  const std::size_t out = b.size(), in = x.size();
  std::vector<double> y(out);
  for (std::size_t o = 0; o < out; ++o) {
    double s = b[o];
    for (std::size_t i = 0; i < in; ++i) s += static_cast<double>(W[o * in + i]) * x[i];
    y[o] = gelu_act ? gelu(s) : s;
  }
  return y;
}

// The denoiser of one row from its parameters (name -> values, as "<name>.in.weight").
inline std::vector<double> denoiser_row(const std::map<std::string, std::vector<float>>& p, const std::string& name,
                                        std::int64_t blocks, std::int64_t embed, const std::vector<double>& x,
                                        const std::vector<double>& ctx, std::int32_t t) {
  const auto W = [&](const std::string& l) { return p.at(name + "." + l + ".weight"); };
  const auto B = [&](const std::string& l) { return p.at(name + "." + l + ".bias"); };
  const auto temb = dense(W("time.1"), B("time.1"), dense(W("time.0"), B("time.0"), embedding(t, embed), true), false);
  std::vector<double> xin = x;
  xin.insert(xin.end(), ctx.begin(), ctx.end());
  std::vector<double> h = dense(W("in"), B("in"), xin, false);
  for (std::int64_t l = 0; l < blocks; ++l) {
    const std::string k = "blocks." + std::to_string(l);
    std::vector<double> u(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) u[i] = h[i] + temb[i];
    const auto v = dense(W(k + ".fc2"), B(k + ".fc2"), dense(W(k + ".fc1"), B(k + ".fc1"), u, true), false);
    for (std::size_t i = 0; i < h.size(); ++i) h[i] += v[i];
  }
  return dense(W("out"), B("out"), h, false);
}

}  // namespace foxhunt::test::diffusion
