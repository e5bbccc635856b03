#pragma once
// A float64 CfC cell layer with models/cfc's parameter layout (ncps CfCCell semantics) and its
// exact backpropagation through time: the reference the GPU layer is tested against.
#include <cmath>
#include <cstdint>
#include <vector>

#include "models/cfc/cfc.hpp"

namespace foxhunt::test {

struct RefCfc {
  std::int64_t in = 0, H = 0, U = 0, L = 1, P = 0;
  models::CfcMode mode = models::CfcMode::standard;
  models::CfcActivation act = models::CfcActivation::lecun_tanh;
  std::vector<double> wx, wh, b0;         // (U, in), (U, H), (U)
  std::vector<std::vector<double>> w, b;  // layer i >= 1: (U, U), (U); index 0 unused
  std::vector<double> wg, bg;             // (G, U), (G)
  std::vector<double> A, wtau;            // (H), (H): pure mode
  std::vector<double> wp, bp;             // (P, H), (P): P > 0

  struct Tape {
    std::vector<double> out;     // (rows, O)
    std::vector<double> state;   // (B, H) after the last step
    std::vector<double> z, a;    // (L, rows, U)
    std::vector<double> g;       // (rows, G)
    std::vector<double> hp, hs;  // (rows, H): masked h_prev, h_t
  };
  struct Grads {
    std::vector<double> wx, wh, b0, wg, bg, A, wtau, wp, bp, x;
    std::vector<std::vector<double>> w, b;
  };

  std::int64_t G() const { return mode == models::CfcMode::pure ? H : 4 * H; }
  std::int64_t O() const { return P > 0 ? P : H; }

  static double sig(double z) { return 1.0 / (1.0 + std::exp(-z)); }
  double f(double z) const {
    switch (act) {
      case models::CfcActivation::lecun_tanh:
        return 1.7159 * std::tanh(0.666 * z);
      case models::CfcActivation::tanh:
        return std::tanh(z);
      case models::CfcActivation::relu:
        return z > 0 ? z : 0;
      case models::CfcActivation::silu:
        return z * sig(z);
    }
    return z;
  }
  double df(double z) const {
    switch (act) {
      case models::CfcActivation::lecun_tanh: {
        const double t = std::tanh(0.666 * z);
        return 1.7159 * 0.666 * (1 - t * t);
      }
      case models::CfcActivation::tanh: {
        const double t = std::tanh(z);
        return 1 - t * t;
      }
      case models::CfcActivation::relu:
        return z > 0 ? 1 : 0;
      case models::CfcActivation::silu: {
        const double s = sig(z);
        return s * (1 + z * (1 - s));
      }
    }
    return 1;
  }

  // x (T, B, in); ts (T, B), state0 (B, H) and resets (T, B) may be empty (1, zeros, none).
  Tape forward(const std::vector<float>& x, const std::vector<float>& ts, const std::vector<float>& state0,
               const std::vector<std::uint8_t>& resets, std::int64_t T, std::int64_t B) const {
    const std::int64_t rows = T * B, Gw = G(), ls = rows * U;
    Tape tp;
    tp.out.assign(rows * O(), 0);
    tp.z.assign(L * ls, 0);
    tp.a.assign(L * ls, 0);
    tp.g.assign(rows * Gw, 0);
    tp.hp.assign(rows * H, 0);
    tp.hs.assign(rows * H, 0);
    std::vector<double> h(B * H, 0);
    if (!state0.empty()) h.assign(state0.begin(), state0.end());
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t r = 0; r < B; ++r) {
        const std::int64_t row = t * B + r;
        if (!resets.empty() && resets[row] != 0)
          for (std::int64_t j = 0; j < H; ++j) h[r * H + j] = 0;
        for (std::int64_t j = 0; j < H; ++j) tp.hp[row * H + j] = h[r * H + j];
        double* z0 = &tp.z[row * U];
        double* a0 = &tp.a[row * U];
        for (std::int64_t u = 0; u < U; ++u) {
          double acc = b0[u];
          for (std::int64_t k = 0; k < in; ++k) acc += wx[u * in + k] * x[row * in + k];
          for (std::int64_t k = 0; k < H; ++k) acc += wh[u * H + k] * h[r * H + k];
          z0[u] = acc;
          a0[u] = f(acc);
        }
        for (std::int64_t i = 1; i < L; ++i) {
          const double* ap = &tp.a[(i - 1) * ls + row * U];
          double* zi = &tp.z[i * ls + row * U];
          double* ai = &tp.a[i * ls + row * U];
          for (std::int64_t u = 0; u < U; ++u) {
            double acc = b[i][u];
            for (std::int64_t k = 0; k < U; ++k) acc += w[i][u * U + k] * ap[k];
            zi[u] = acc;
            ai[u] = f(acc);
          }
        }
        const double* al = &tp.a[(L - 1) * ls + row * U];
        double* g = &tp.g[row * Gw];
        for (std::int64_t q = 0; q < Gw; ++q) {
          double acc = bg[q];
          for (std::int64_t k = 0; k < U; ++k) acc += wg[q * U + k] * al[k];
          g[q] = acc;
        }
        const double dt = ts.empty() ? 1.0 : ts[row];
        for (std::int64_t j = 0; j < H; ++j) {
          double hn;
          if (mode == models::CfcMode::pure) {
            const double e = std::exp(-dt * (std::abs(wtau[j]) + std::abs(g[j])));
            hn = -A[j] * e * g[j] + A[j];
          } else {
            const double f1 = std::tanh(g[j]), f2 = std::tanh(g[H + j]), s = sig(g[2 * H + j] * dt + g[3 * H + j]);
            hn = mode == models::CfcMode::no_gate ? f1 + s * f2 : f1 * (1 - s) + s * f2;
          }
          tp.hs[row * H + j] = hn;
          h[r * H + j] = hn;
        }
        for (std::int64_t o = 0; o < O(); ++o) {
          if (P == 0) {
            tp.out[row * H + o] = tp.hs[row * H + o];
            continue;
          }
          double acc = bp[o];
          for (std::int64_t j = 0; j < H; ++j) acc += wp[o * H + j] * tp.hs[row * H + j];
          tp.out[row * P + o] = acc;
        }
      }
    tp.state = h;
    return tp;
  }

  // Gradients of L = sum(d_out * out) after forward() with the same inputs.
  Grads backward(const Tape& tp, const std::vector<float>& x, const std::vector<float>& ts,
                 const std::vector<float>& d_out, const std::vector<std::uint8_t>& resets, std::int64_t T,
                 std::int64_t B) const {
    const std::int64_t rows = T * B, Gw = G(), ls = rows * U;
    Grads gr;
    gr.wx.assign(wx.size(), 0);
    gr.wh.assign(wh.size(), 0);
    gr.b0.assign(b0.size(), 0);
    gr.w.assign(static_cast<std::size_t>(L), {});
    gr.b.assign(static_cast<std::size_t>(L), {});
    for (std::int64_t i = 1; i < L; ++i) {
      gr.w[i].assign(w[i].size(), 0);
      gr.b[i].assign(b[i].size(), 0);
    }
    gr.wg.assign(wg.size(), 0);
    gr.bg.assign(bg.size(), 0);
    gr.A.assign(A.size(), 0);
    gr.wtau.assign(wtau.size(), 0);
    gr.wp.assign(wp.size(), 0);
    gr.bp.assign(bp.size(), 0);
    gr.x.assign(x.size(), 0);
    std::vector<double> d_hs(rows * H, 0);
    for (std::int64_t row = 0; row < rows; ++row)
      for (std::int64_t o = 0; o < O(); ++o) {
        const double d = d_out[row * O() + o];
        if (P == 0) {
          d_hs[row * H + o] = d;
          continue;
        }
        gr.bp[o] += d;
        for (std::int64_t j = 0; j < H; ++j) {
          d_hs[row * H + j] += d * wp[o * H + j];
          gr.wp[o * H + j] += d * tp.hs[row * H + j];
        }
      }
    std::vector<double> dh_next(B * H, 0), dg(Gw), da(U), dz(U), da_prev(U);
    for (std::int64_t t = T; t-- > 0;)
      for (std::int64_t r = 0; r < B; ++r) {
        const std::int64_t row = t * B + r;
        const double* g = &tp.g[row * Gw];
        const double dt = ts.empty() ? 1.0 : ts[row];
        for (std::int64_t j = 0; j < H; ++j) {
          const double dh = d_hs[row * H + j] + dh_next[r * H + j];
          if (mode == models::CfcMode::pure) {
            const double e = std::exp(-dt * (std::abs(wtau[j]) + std::abs(g[j])));
            const double sw = wtau[j] > 0 ? 1.0 : (wtau[j] < 0 ? -1.0 : 0.0);
            gr.A[j] += dh * (1 - e * g[j]);
            gr.wtau[j] += dh * A[j] * e * g[j] * dt * sw;
            dg[j] = -dh * A[j] * e * (1 - dt * std::abs(g[j]));
          } else {
            const double f1 = std::tanh(g[j]), f2 = std::tanh(g[H + j]), s = sig(g[2 * H + j] * dt + g[3 * H + j]);
            const bool ng = mode == models::CfcMode::no_gate;
            const double d1 = ng ? dh : dh * (1 - s), d2 = dh * s, ds = ng ? dh * f2 : dh * (f2 - f1);
            const double dzs_ = ds * s * (1 - s);
            dg[j] = d1 * (1 - f1 * f1);
            dg[H + j] = d2 * (1 - f2 * f2);
            dg[2 * H + j] = dzs_ * dt;
            dg[3 * H + j] = dzs_;
          }
        }
        const double* al = &tp.a[(L - 1) * ls + row * U];
        for (std::int64_t k = 0; k < U; ++k) da[k] = 0;
        for (std::int64_t q = 0; q < Gw; ++q) {
          gr.bg[q] += dg[q];
          for (std::int64_t k = 0; k < U; ++k) {
            da[k] += dg[q] * wg[q * U + k];
            gr.wg[q * U + k] += dg[q] * al[k];
          }
        }
        for (std::int64_t i = L; i-- > 0;) {
          const double* zi = &tp.z[i * ls + row * U];
          for (std::int64_t u = 0; u < U; ++u) dz[u] = da[u] * df(zi[u]);
          if (i == 0) break;
          const double* ap = &tp.a[(i - 1) * ls + row * U];
          for (std::int64_t k = 0; k < U; ++k) da_prev[k] = 0;
          for (std::int64_t u = 0; u < U; ++u) {
            gr.b[i][u] += dz[u];
            for (std::int64_t k = 0; k < U; ++k) {
              da_prev[k] += dz[u] * w[i][u * U + k];
              gr.w[i][u * U + k] += dz[u] * ap[k];
            }
          }
          da = da_prev;
        }
        std::vector<double> dhp(H, 0);
        for (std::int64_t u = 0; u < U; ++u) {
          gr.b0[u] += dz[u];
          for (std::int64_t k = 0; k < in; ++k) {
            gr.wx[u * in + k] += dz[u] * x[row * in + k];
            gr.x[row * in + k] += dz[u] * wx[u * in + k];
          }
          for (std::int64_t k = 0; k < H; ++k) {
            gr.wh[u * H + k] += dz[u] * tp.hp[row * H + k];
            dhp[k] += dz[u] * wh[u * H + k];
          }
        }
        const bool cut = !resets.empty() && resets[row] != 0;  // h_prev was the constant zero
        for (std::int64_t k = 0; k < H; ++k) dh_next[r * H + k] = cut ? 0 : dhp[k];
      }
    return gr;
  }
};

}  // namespace foxhunt::test
