#pragma once
// Float64 references of the TFT's pieces (models/tft/) and of the whole model, reading the
// parameters from the arena by name; matrices row-major in std::vector<double>. Test support only.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/arena.hpp"
#include "support/gpu_test.hpp"

namespace foxhunt::test::tft_ref {

using Mat = std::vector<double>;

inline Mat param(const gpu::ParameterArena& arena, const std::string& name) {
  const auto& e = arena.entry(name);
  const auto h = download(arena.params() + e.offset, static_cast<std::size_t>(e.numel));
  return Mat(h.begin(), h.end());
}

inline Mat as_double(const std::vector<float>& v) { return Mat(v.begin(), v.end()); }

// y (rows, out) = x (rows, in) W^T + b, from "<name>.weight" and "<name>.bias".
inline Mat linear(const gpu::ParameterArena& arena, const std::string& name, const Mat& x, std::int64_t rows,
                  std::int64_t in, std::int64_t out) {
  const Mat W = param(arena, name + ".weight"), b = param(arena, name + ".bias");
  Mat y(static_cast<std::size_t>(rows * out));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double acc = b[o];
      for (std::int64_t i = 0; i < in; ++i) acc += x[r * in + i] * W[o * in + i];
      y[r * out + o] = acc;
    }
  return y;
}

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// GLU "<name>": (rows, in) -> (rows, out).
inline Mat glu(const gpu::ParameterArena& arena, const std::string& name, const Mat& x, std::int64_t rows,
               std::int64_t in, std::int64_t out) {
  const Mat pre = linear(arena, name + ".linear", x, rows, in, 2 * out);
  Mat y(static_cast<std::size_t>(rows * out));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) y[r * out + o] = pre[r * 2 * out + o] * sigmoid(pre[r * 2 * out + out + o]);
  return y;
}

inline Mat layernorm(const gpu::ParameterArena& arena, const std::string& name, const Mat& z, std::int64_t rows,
                     std::int64_t n) {
  const Mat g = param(arena, name + ".weight"), b = param(arena, name + ".bias");
  Mat y(z.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (std::int64_t j = 0; j < n; ++j) mean += z[r * n + j];
    mean /= static_cast<double>(n);
    for (std::int64_t j = 0; j < n; ++j) var += (z[r * n + j] - mean) * (z[r * n + j] - mean);
    var /= static_cast<double>(n);
    const double rstd = 1.0 / std::sqrt(var + 1e-5);
    for (std::int64_t j = 0; j < n; ++j) y[r * n + j] = (z[r * n + j] - mean) * rstd * g[j] + b[j];
  }
  return y;
}

// GateAddNorm "<name>": LayerNorm(skip + GLU(x)).
inline Mat gate_add_norm(const gpu::ParameterArena& arena, const std::string& name, const Mat& x, const Mat& skip,
                         std::int64_t rows, std::int64_t in, std::int64_t out) {
  Mat z = glu(arena, name + ".glu", x, rows, in, out);
  for (std::size_t i = 0; i < z.size(); ++i) z[i] += skip[i];
  return layernorm(arena, name + ".norm", z, rows, out);
}

// GRN "<name>" (models/tft/grn.hpp); ctx (rows / rep, context) or empty.
inline Mat grn(const gpu::ParameterArena& arena, const std::string& name, const Mat& a, const Mat& ctx,
               std::int64_t rows, std::int64_t rep, std::int64_t in, std::int64_t hidden, std::int64_t out,
               std::int64_t context) {
  Mat h1 = linear(arena, name + ".fc1", a, rows, in, hidden);
  if (context > 0) {
    const Mat cp = linear(arena, name + ".context", ctx, rows / rep, context, hidden);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t k = 0; k < hidden; ++k) h1[r * hidden + k] += cp[(r / rep) * hidden + k];
  }
  for (auto& v : h1) v = v > 0 ? v : std::expm1(v);
  const Mat h2 = linear(arena, name + ".fc2", h1, rows, hidden, hidden);
  const Mat skip = in == out ? a : linear(arena, name + ".skip", a, rows, in, out);
  return gate_add_norm(arena, name + ".gate", h2, skip, rows, hidden, out);
}

// Variable selection "<name>" over x (rows, V); also returns the weights (rows, V).
inline Mat variable_selection(const gpu::ParameterArena& arena, const std::string& name, const Mat& x, const Mat& ctx,
                              std::int64_t rows, std::int64_t rep, std::int64_t V, std::int64_t n,
                              std::int64_t context, Mat* weights = nullptr) {
  const Mat We = param(arena, name + ".embed.weight"), be = param(arena, name + ".embed.bias");
  Mat flat(static_cast<std::size_t>(rows * V * n));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t v = 0; v < V; ++v)
      for (std::int64_t k = 0; k < n; ++k) flat[(r * V + v) * n + k] = x[r * V + v] * We[v * n + k] + be[v * n + k];
  Mat w = grn(arena, name + ".weights", flat, ctx, rows, rep, V * n, n, V, context);
  for (std::int64_t r = 0; r < rows; ++r) {
    double m = -1e300, sum = 0;
    for (std::int64_t v = 0; v < V; ++v) m = std::max(m, w[r * V + v]);
    for (std::int64_t v = 0; v < V; ++v) sum += (w[r * V + v] = std::exp(w[r * V + v] - m));
    for (std::int64_t v = 0; v < V; ++v) w[r * V + v] /= sum;
  }
  Mat out(static_cast<std::size_t>(rows * n), 0.0);
  for (std::int64_t v = 0; v < V; ++v) {
    Mat e(static_cast<std::size_t>(rows * n));
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t k = 0; k < n; ++k) e[r * n + k] = flat[(r * V + v) * n + k];
    const Mat t = grn(arena, name + ".var" + std::to_string(v), e, {}, rows, 1, n, n, n, 0);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t k = 0; k < n; ++k) out[r * n + k] += w[r * V + v] * t[r * n + k];
  }
  if (weights != nullptr) *weights = w;
  return out;
}

// Interpretable attention "<name>" over B sequences of T rows of width n; also the weights
// (B, heads, T, T).
inline Mat attention(const gpu::ParameterArena& arena, const std::string& name, const Mat& x, std::int64_t B,
                     std::int64_t T, std::int64_t n, std::int64_t heads, Mat* probs = nullptr) {
  const std::int64_t rows = B * T, d = n / heads;
  const Mat q = linear(arena, name + ".query", x, rows, n, n), k = linear(arena, name + ".key", x, rows, n, n);
  const Mat v = linear(arena, name + ".value", x, rows, n, d);
  Mat mixed(static_cast<std::size_t>(rows * d), 0.0), P(static_cast<std::size_t>(B * heads * T * T), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < T; ++i) {
        double* p = P.data() + ((b * heads + h) * T + i) * T;
        double m = -1e300, sum = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (std::int64_t e = 0; e < d; ++e) s += q[(b * T + i) * n + h * d + e] * k[(b * T + j) * n + h * d + e];
          p[j] = s * scale;
          m = std::max(m, p[j]);
        }
        for (std::int64_t j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - m));
        for (std::int64_t j = 0; j <= i; ++j) p[j] /= sum;
        for (std::int64_t j = 0; j <= i; ++j)
          for (std::int64_t e = 0; e < d; ++e)
            mixed[(b * T + i) * d + e] += p[j] * v[(b * T + j) * d + e] / static_cast<double>(heads);
      }
  if (probs != nullptr) *probs = P;
  return linear(arena, name + ".out", mixed, rows, d, n);
}

// LSTM "<name>" (models/lstm.hpp: gates i, f, g, o; one folded bias) over B sequences of T rows
// x (B T, in), batch-major, from state0 (B, 2H) [h | c] per row; returns h (B T, H).
inline Mat lstm(const gpu::ParameterArena& arena, const std::string& name, const Mat& x, const Mat& state0,
                std::int64_t B, std::int64_t T, std::int64_t in, std::int64_t H) {
  const Mat Wi = param(arena, name + ".weight_ih"), Wh = param(arena, name + ".weight_hh");
  const Mat bias = param(arena, name + ".bias");
  Mat out(static_cast<std::size_t>(B * T * H));
  for (std::int64_t b = 0; b < B; ++b) {
    Mat h(state0.begin() + b * 2 * H, state0.begin() + b * 2 * H + H);
    Mat c(state0.begin() + b * 2 * H + H, state0.begin() + (b + 1) * 2 * H);
    for (std::int64_t t = 0; t < T; ++t) {
      const double* xt = x.data() + (b * T + t) * in;
      Mat g(static_cast<std::size_t>(4 * H));
      for (std::int64_t j = 0; j < 4 * H; ++j) {
        double acc = bias[j];
        for (std::int64_t i = 0; i < in; ++i) acc += xt[i] * Wi[j * in + i];
        for (std::int64_t i = 0; i < H; ++i) acc += h[i] * Wh[j * H + i];
        g[j] = acc;
      }
      for (std::int64_t j = 0; j < H; ++j) {
        const double ig = sigmoid(g[j]), fg = sigmoid(g[H + j]), gg = std::tanh(g[2 * H + j]);
        const double og = sigmoid(g[3 * H + j]);
        c[j] = fg * c[j] + ig * gg;
        h[j] = og * std::tanh(c[j]);
        out[(b * T + t) * H + j] = h[j];
      }
    }
  }
  return out;
}

// Static covariate encoders "<name>" (models/tft/static_encoders.hpp): contexts (4, rows, n) from
// statics (rows, S); also the static selection weights (rows, S).
inline Mat static_encoders(const gpu::ParameterArena& arena, const std::string& name, const Mat& statics,
                           std::int64_t rows, std::int64_t S, std::int64_t n, Mat* weights = nullptr) {
  const Mat zeta = variable_selection(arena, name + ".selection", statics, {}, rows, 1, S, n, 0, weights);
  Mat out;
  for (const char* k : {"context_selection", "context_h", "context_c", "context_enrichment"}) {
    const Mat c = grn(arena, name + "." + k, zeta, {}, rows, 1, n, n, n, 0);
    out.insert(out.end(), c.begin(), c.end());
  }
  return out;
}

struct TftDims {
  std::int64_t B, T, C, K, S, H, heads;
};

// The whole Tft "<name>" (models/tft/tft.hpp) on x (B, T, C + K + S); also the selection weights
// (B T, C + K) and, with S > 0, the static selection weights (B, S).
inline Mat tft(const gpu::ParameterArena& arena, const std::string& name, const Mat& x, const TftDims& d,
               Mat* selection = nullptr, Mat* static_selection = nullptr) {
  const std::int64_t V = d.C + d.K, W = V + d.S, rows = d.B * d.T, H = d.H;
  Mat xv(static_cast<std::size_t>(rows * V));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t v = 0; v < V; ++v) xv[r * V + v] = x[r * W + v];
  // Contexts: (B, H) each with statics (one per sequence, rep = T), else one shared vector.
  Mat c_s, c_h, c_c, c_e;
  std::int64_t rep = rows, per = 1;
  if (d.S > 0) {
    Mat st(static_cast<std::size_t>(d.B * d.S));
    for (std::int64_t b = 0; b < d.B; ++b)
      for (std::int64_t j = 0; j < d.S; ++j) st[b * d.S + j] = x[b * d.T * W + V + j];
    const Mat all = static_encoders(arena, name + ".static", st, d.B, d.S, H, static_selection);
    const auto block = static_cast<std::ptrdiff_t>(d.B * H);
    c_s.assign(all.begin(), all.begin() + block);
    c_h.assign(all.begin() + block, all.begin() + 2 * block);
    c_c.assign(all.begin() + 2 * block, all.begin() + 3 * block);
    c_e.assign(all.begin() + 3 * block, all.end());
    rep = d.T;
    per = d.B;
  } else {
    const Mat all = param(arena, name + ".static_contexts");
    c_s.assign(all.begin(), all.begin() + H);
    c_h.assign(all.begin() + H, all.begin() + 2 * H);
    c_c.assign(all.begin() + 2 * H, all.begin() + 3 * H);
    c_e.assign(all.begin() + 3 * H, all.end());
  }
  Mat state0(static_cast<std::size_t>(d.B * 2 * H));
  for (std::int64_t b = 0; b < d.B; ++b)
    for (std::int64_t j = 0; j < H; ++j) {
      const std::int64_t src = (per == 1 ? 0 : b) * H + j;
      state0[b * 2 * H + j] = c_h[src];
      state0[b * 2 * H + H + j] = c_c[src];
    }
  const Mat xi = variable_selection(arena, name + ".selection", xv, c_s, rows, rep, V, H, H, selection);
  const Mat l = lstm(arena, name + ".lstm", xi, state0, d.B, d.T, H, H);
  const Mat phi = gate_add_norm(arena, name + ".lstm_gate", l, xi, rows, H, H);
  const Mat theta = grn(arena, name + ".enrichment", phi, c_e, rows, rep, H, H, H, H);
  const Mat beta = attention(arena, name + ".attention", theta, d.B, d.T, H, d.heads);
  const Mat delta = gate_add_norm(arena, name + ".attention_gate", beta, theta, rows, H, H);
  const Mat psi = grn(arena, name + ".positionwise", delta, {}, rows, 1, H, H, H, 0);
  return gate_add_norm(arena, name + ".output_gate", psi, phi, rows, H, H);
}

}  // namespace foxhunt::test::tft_ref
