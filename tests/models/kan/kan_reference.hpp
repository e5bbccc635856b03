#pragma once
// Float64 references for the KAN tests: every B-spline basis by the dense Cox-de Boor recursion
// over all knots (no locality), a KAN layer's forward and backward, and the grid update's knots and
// least-squares coefficients.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace foxhunt::test {

// All n_knots - k - 1 bases of order k at x (0 outside [t_0, t_last)), and their slopes.
inline void dense_bases(double x, const std::vector<double>& t, int k, std::vector<double>& b, std::vector<double>& db) {
  const int n = static_cast<int>(t.size());
  std::vector<double> cur(static_cast<std::size_t>(n - 1)), prev;
  for (int j = 0; j < n - 1; ++j) cur[j] = (x >= t[j] && x < t[j + 1]) ? 1.0 : 0.0;
  for (int p = 1; p <= k; ++p) {
    prev = cur;
    cur.assign(static_cast<std::size_t>(n - 1 - p), 0.0);
    for (int j = 0; j < n - 1 - p; ++j)
      cur[j] = (x - t[j]) / (t[j + p] - t[j]) * prev[j] + (t[j + p + 1] - x) / (t[j + p + 1] - t[j + 1]) * prev[j + 1];
  }
  b = cur;
  db.assign(b.size(), 0.0);
  if (k == 0) return;
  for (int j = 0; j < static_cast<int>(b.size()); ++j)
    db[j] = k * (prev[j] / (t[j + k] - t[j]) - prev[j + 1] / (t[j + k + 1] - t[j + 1]));
}

inline double silu(double x) { return x / (1.0 + std::exp(-x)); }
inline double silu_grad(double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  return s * (1.0 + x * (1.0 - s));
}

struct RefKan {
  int in = 0, out = 0, G = 0, k = 0;
  std::vector<double> w;     // (out, in)
  std::vector<double> c;     // (out, in, G + k)
  std::vector<double> grid;  // (in, G + 2k + 1)
  int nb() const { return G + k; }
  int nk() const { return G + 2 * k + 1; }
  std::vector<double> knots(int i) const {
    return {grid.begin() + static_cast<std::ptrdiff_t>(i) * nk(), grid.begin() + static_cast<std::ptrdiff_t>(i + 1) * nk()};
  }

  // y (B, out) from x (B, in).
  std::vector<double> forward(const std::vector<double>& x, int B) const {
    std::vector<double> y(static_cast<std::size_t>(B) * out, 0.0), b, db;
    for (int r = 0; r < B; ++r)
      for (int i = 0; i < in; ++i) {
        const double xi = x[static_cast<std::size_t>(r) * in + i];
        dense_bases(xi, knots(i), k, b, db);
        for (int o = 0; o < out; ++o) {
          double s = silu(xi) * w[static_cast<std::size_t>(o) * in + i];
          for (int j = 0; j < nb(); ++j) s += c[(static_cast<std::size_t>(o) * in + i) * nb() + j] * b[j];
          y[static_cast<std::size_t>(r) * out + o] += s;
        }
      }
    return y;
  }

  // From dy (B, out): dx (B, in), dw (out, in), dc (out, in, G + k).
  void backward(const std::vector<double>& x, const std::vector<double>& dy, int B, std::vector<double>& dx,
                std::vector<double>& dw, std::vector<double>& dc) const {
    dx.assign(static_cast<std::size_t>(B) * in, 0.0);
    dw.assign(w.size(), 0.0);
    dc.assign(c.size(), 0.0);
    std::vector<double> b, db;
    for (int r = 0; r < B; ++r)
      for (int i = 0; i < in; ++i) {
        const double xi = x[static_cast<std::size_t>(r) * in + i];
        dense_bases(xi, knots(i), k, b, db);
        double g = 0.0;
        for (int o = 0; o < out; ++o) {
          const double d = dy[static_cast<std::size_t>(r) * out + o];
          const std::size_t oi = static_cast<std::size_t>(o) * in + i;
          dw[oi] += d * silu(xi);
          g += d * w[oi] * silu_grad(xi);
          for (int j = 0; j < nb(); ++j) {
            dc[oi * nb() + j] += d * b[j];
            g += d * c[oi * nb() + j] * db[j];
          }
        }
        dx[static_cast<std::size_t>(r) * in + i] = g;
      }
  }

  // The grid update on x (B, in) (KanLayer::update_grid's rule): new knots from the sorted inputs,
  // then the coefficients of the least-squares fit (normal equations, the same 1e-10 ridge) of the
  // old splines' values on the batch.
  void update_grid(const std::vector<double>& x, int B, double eps, double margin) {
    const RefKan old = *this;
    for (int i = 0; i < in; ++i) {
      std::vector<double> s(static_cast<std::size_t>(B));
      for (int r = 0; r < B; ++r) s[r] = x[static_cast<std::size_t>(r) * in + i];
      std::sort(s.begin(), s.end());
      const double h = (s[B - 1] - s[0] + 2 * margin) / G;
      auto knot = [&](int q) {
        const std::int64_t idx = static_cast<std::int64_t>(q) * (B - 1) / G;
        return eps * (s[0] - margin + q * h) + (1 - eps) * s[static_cast<std::size_t>(idx)];
      };
      double* g = grid.data() + static_cast<std::size_t>(i) * nk();
      for (int q = 0; q <= G; ++q) g[k + q] = knot(q);
      for (int r = 1; r <= k; ++r) {
        g[k - r] = g[k] - r * h;
        g[k + G + r] = g[k + G] + r * h;
      }
    }
    std::vector<double> bo, bn, db;
    for (int i = 0; i < in; ++i) {
      std::vector<double> m(static_cast<std::size_t>(nb()) * nb(), 0.0), rhs(static_cast<std::size_t>(out) * nb(), 0.0);
      for (int r = 0; r < B; ++r) {
        const double xi = x[static_cast<std::size_t>(r) * in + i];
        old.dense_bases_of(xi, i, bo);
        dense_bases(xi, knots(i), k, bn, db);
        for (int j1 = 0; j1 < nb(); ++j1)
          for (int j2 = 0; j2 < nb(); ++j2) m[static_cast<std::size_t>(j1) * nb() + j2] += bn[j1] * bn[j2];
        for (int o = 0; o < out; ++o) {
          double y = 0.0;
          for (int j = 0; j < nb(); ++j) y += old.c[(static_cast<std::size_t>(o) * in + i) * nb() + j] * bo[j];
          for (int j = 0; j < nb(); ++j) rhs[static_cast<std::size_t>(o) * nb() + j] += bn[j] * y;
        }
      }
      double dmax = 0;
      for (int j = 0; j < nb(); ++j) dmax = std::max(dmax, m[static_cast<std::size_t>(j) * nb() + j]);
      for (int j = 0; j < nb(); ++j) m[static_cast<std::size_t>(j) * nb() + j] += 1e-10 * dmax + 1e-300;
      // Cholesky and the solves.
      const int n = nb();
      std::vector<double> L(static_cast<std::size_t>(n) * n, 0.0);
      for (int j = 0; j < n; ++j) {
        double d = m[static_cast<std::size_t>(j) * n + j];
        for (int q = 0; q < j; ++q) d -= L[static_cast<std::size_t>(j) * n + q] * L[static_cast<std::size_t>(j) * n + q];
        L[static_cast<std::size_t>(j) * n + j] = std::sqrt(std::max(d, 1e-300));
        for (int p = j + 1; p < n; ++p) {
          double v = m[static_cast<std::size_t>(p) * n + j];
          for (int q = 0; q < j; ++q) v -= L[static_cast<std::size_t>(p) * n + q] * L[static_cast<std::size_t>(j) * n + q];
          L[static_cast<std::size_t>(p) * n + j] = v / L[static_cast<std::size_t>(j) * n + j];
        }
      }
      for (int o = 0; o < out; ++o) {
        std::vector<double> z(rhs.begin() + static_cast<std::ptrdiff_t>(o) * n,
                              rhs.begin() + static_cast<std::ptrdiff_t>(o + 1) * n);
        for (int j = 0; j < n; ++j) {
          for (int q = 0; q < j; ++q) z[j] -= L[static_cast<std::size_t>(j) * n + q] * z[q];
          z[j] /= L[static_cast<std::size_t>(j) * n + j];
        }
        for (int j = n - 1; j >= 0; --j) {
          for (int q = j + 1; q < n; ++q) z[j] -= L[static_cast<std::size_t>(q) * n + j] * z[q];
          z[j] /= L[static_cast<std::size_t>(j) * n + j];
        }
        for (int j = 0; j < n; ++j) c[(static_cast<std::size_t>(o) * in + i) * n + j] = z[j];
      }
    }
  }

  void dense_bases_of(double x, int i, std::vector<double>& b) const {
    std::vector<double> db;
    dense_bases(x, knots(i), k, b, db);
  }
};

}  // namespace foxhunt::test
