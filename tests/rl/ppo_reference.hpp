#pragma once
// Float64 CPU references of the PPO head and loss kernels (rl/ppo/), written from the formulas in
// their headers, and the chi-square threshold the sampler tests use.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "rl/ppo/distributions.hpp"

namespace foxhunt::rl::ppo::ref {

inline constexpr double kHalfLog2Pi = 0.918938533204672741780329736406;

// log p(action) and entropy of one row. head (width), log_std (dim); discrete (branches) or raw (dim).
inline void row_logp_entropy(const double* head, const double* log_std, const std::int32_t* discrete, const float* raw,
                             const HeadShape& s, double* logp, double* entropy) {
  double lp = 0, ent = 0;
  if (!s.gaussian()) {
    for (int b = 0; b < s.branches; ++b) {
      const double* l = head + b * s.choices;
      double m = -std::numeric_limits<double>::infinity();
      for (int k = 0; k < s.choices; ++k) m = std::max(m, l[k]);
      double z = 0;
      for (int k = 0; k < s.choices; ++k) z += std::exp(l[k] - m);
      const double log_z = std::log(z) + m;
      double h = 0;
      for (int k = 0; k < s.choices; ++k) {
        const double p = std::exp(l[k] - log_z);
        if (p > 0) h -= p * (l[k] - log_z);
      }
      if (discrete) lp += l[discrete[b]] - log_z;
      ent += h;
    }
  } else {
    for (int d = 0; d < s.dim; ++d) {
      const double sd = std::exp(log_std[d]);
      ent += 0.5 + kHalfLog2Pi + log_std[d];
      if (!raw) continue;
      const double u = raw[d];
      const double z = (u - head[d]) / sd;
      lp += -0.5 * z * z - log_std[d] - kHalfLog2Pi;
      // log(1 - tanh(u)^2) = -2 log cosh(u), accurate in double where 1 - tanh^2 would cancel.
      if (s.bound == HeadShape::Bound::tanh)
        lp -= std::log(0.5 * (static_cast<double>(s.high) - s.low)) - 2.0 * std::log(std::cosh(u));
    }
  }
  *logp = lp;
  *entropy = ent;
}

inline double bound(double u, const HeadShape& s) {
  if (s.bound == HeadShape::Bound::tanh)
    return s.low + (std::tanh(u) + 1.0) / 2.0 * (static_cast<double>(s.high) - s.low);
  return std::clamp(u, static_cast<double>(s.low), static_cast<double>(s.high));
}

// The policy loss of rl/ppo/loss.hpp and its gradient (d_head (B, width), d_log_std (dim)), with
// torch's tie rules; d_head / d_log_std may be null.
struct PolicyRef {
  double loss = 0, pg = 0, entropy = 0, approx_kl = 0, clip_fraction = 0;
};
inline PolicyRef policy_loss(const std::vector<double>& head, const std::vector<double>& log_std,
                             const std::vector<std::int32_t>& discrete, const std::vector<float>& raw,
                             const std::vector<float>& old_logp, const std::vector<float>& adv, std::int64_t B,
                             const HeadShape& s, double eps, double ent_coef, bool normalize,
                             std::vector<double>* d_head, std::vector<double>* d_log_std) {
  const int W = s.width(), AW = s.action_width();
  std::vector<double> a(adv.begin(), adv.end());
  if (normalize) {
    double mean = 0;
    for (double x : a) mean += x;
    mean /= static_cast<double>(B);
    double var = 0;
    for (double x : a) var += (x - mean) * (x - mean);
    const double sd = std::sqrt(var / static_cast<double>(B - 1));
    for (double& x : a) x = (x - mean) / (sd + 1e-8);
  }
  PolicyRef out;
  if (d_head) d_head->assign(static_cast<std::size_t>(B * W), 0.0);
  if (d_log_std) d_log_std->assign(static_cast<std::size_t>(s.gaussian() ? s.dim : 0), 0.0);
  const double lo = 1 - eps, hi = 1 + eps;
  for (std::int64_t i = 0; i < B; ++i) {
    const double* h = head.data() + i * W;
    double lp, ent;
    row_logp_entropy(h, s.gaussian() ? log_std.data() : nullptr, s.gaussian() ? nullptr : discrete.data() + i * AW,
                     s.gaussian() ? raw.data() + i * AW : nullptr, s, &lp, &ent);
    const double log_ratio = lp - old_logp[i];
    const double r = std::exp(log_ratio);
    const double pg1 = -a[i] * r, pg2 = -a[i] * std::clamp(r, lo, hi);
    const double inside = (r >= lo && r <= hi) ? 1.0 : 0.0;
    const double slope = pg1 > pg2 ? -a[i] : pg1 < pg2 ? -a[i] * inside : -a[i] * 0.5 * (1 + inside);
    out.pg += std::max(pg1, pg2);
    out.entropy += ent;
    out.approx_kl += (r - 1) - log_ratio;
    out.clip_fraction += std::abs(r - 1) > eps ? 1.0 : 0.0;
    const double coef = slope * r / static_cast<double>(B);  // d loss / d logp_i
    const double ent_scale = ent_coef / static_cast<double>(B);
    if (!s.gaussian()) {
      for (int b = 0; b < s.branches && d_head; ++b) {
        const double* l = h + b * s.choices;
        double m = -std::numeric_limits<double>::infinity();
        for (int k = 0; k < s.choices; ++k) m = std::max(m, l[k]);
        double z = 0;
        for (int k = 0; k < s.choices; ++k) z += std::exp(l[k] - m);
        const double log_z = std::log(z) + m;
        double hb = 0;
        for (int k = 0; k < s.choices; ++k) {
          const double p = std::exp(l[k] - log_z);
          if (p > 0) hb -= p * (l[k] - log_z);
        }
        for (int k = 0; k < s.choices; ++k) {
          const double p = std::exp(l[k] - log_z);
          const double dlogp = (k == discrete[i * AW + b] ? 1.0 : 0.0) - p;
          const double dent = p > 0 ? -p * ((l[k] - log_z) + hb) : 0.0;  // dH/dl_k
          (*d_head)[i * W + b * s.choices + k] = coef * dlogp - ent_scale * dent;
        }
      }
    } else {
      for (int d = 0; d < s.dim; ++d) {
        const double sd = std::exp(log_std[d]);
        const double z = (raw[i * AW + d] - h[d]) / sd;
        if (d_head) (*d_head)[i * W + d] = coef * z / sd;
        if (d_log_std) (*d_log_std)[d] += coef * (z * z - 1) - ent_scale;
      }
    }
  }
  const double n = static_cast<double>(B);
  out.pg /= n;
  out.entropy /= n;
  out.approx_kl /= n;
  out.clip_fraction /= n;
  out.loss = out.pg - ent_coef * out.entropy;
  return out;
}

// 0.5 * mean of the (clipped) squared error, unscaled; d_values = d (vf_coef * that) / d v.
inline double value_loss(const std::vector<double>& v, const std::vector<float>& v_old, const std::vector<float>& ret,
                         double eps, bool clip, double vf_coef, std::vector<double>* d_values) {
  const std::size_t B = v.size();
  if (d_values) d_values->assign(B, 0.0);
  double sum = 0;
  for (std::size_t i = 0; i < B; ++i) {
    const double l1 = (v[i] - ret[i]) * (v[i] - ret[i]), g1 = 2 * (v[i] - ret[i]);
    double l = l1, g = g1;
    if (clip) {
      const double dv = v[i] - v_old[i];
      const double vc = v_old[i] + std::clamp(dv, -eps, eps);
      const double l2 = (vc - ret[i]) * (vc - ret[i]);
      const double g2 = (dv >= -eps && dv <= eps) ? 2 * (vc - ret[i]) : 0.0;
      l = std::max(l1, l2);
      g = l1 > l2 ? g1 : l1 < l2 ? g2 : 0.5 * (g1 + g2);
    }
    sum += l;
    if (d_values) (*d_values)[i] = vf_coef * 0.5 * g / static_cast<double>(B);
  }
  return 0.5 * sum / static_cast<double>(B);
}

// Upper 1e-4 critical value of chi-square with df degrees of freedom: exact table for df <= 4,
// Wilson-Hilferty above (within 1% there, and conservative).
inline double chi2_critical_1e4(int df) {
  static const double table[] = {0, 15.137, 18.421, 21.108, 23.513};
  if (df <= 4) return table[df];
  const double z = 3.719016;  // upper 1e-4 point of N(0, 1)
  const double k = 2.0 / (9.0 * df);
  return df * std::pow(1 - k + z * std::sqrt(k), 3);
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

}  // namespace foxhunt::rl::ppo::ref
