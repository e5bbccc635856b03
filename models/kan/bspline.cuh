#pragma once
// The non-zero B-spline bases of order K at one point, by Cox-de Boor on the knots of one input
// (device and host: the kernels and their tests share it; tests check it against a dense float64
// recursion).
#include <cuda_runtime.h>

#include <cstdint>

namespace foxhunt::models::kan {

// knots t[0 .. n_knots-1] (strictly increasing, n_knots = G + 2K + 1): bases j = 0 .. G+K-1, where
// B_j,0 = 1 on [t_j, t_{j+1}) and
//   B_j,p(x) = (x - t_j) / (t_{j+p} - t_j) B_j,p-1(x) + (t_{j+p+1} - x) / (t_{j+p+1} - t_{j+1}) B_j+1,p-1(x).
// Writes *first (in [0, G-1]) and v[t], dv[t] (t = 0..K): basis *first + t and its derivative in x;
// entries of bases that do not exist are 0, as are all of them outside [t_0, t_{n_knots-1}) (and
// for NaN). Only the K+1 bases of x's knot interval are computed.
template <int K, class T>
__host__ __device__ inline void bspline_local(T x, const T* t, int n_knots, std::int32_t* first, T* v, T* dv) {
  const int n_bases = n_knots - K - 1;
  for (int q = 0; q <= K; ++q) v[q] = T(0), dv[q] = T(0);
  *first = 0;
  if (!(x >= t[0] && x < t[n_knots - 1])) return;
  int m = 0;  // the knot interval [t_m, t_{m+1}) holding x, m in [0, n_knots - 2]
  while (m < n_knots - 2 && t[m + 1] <= x) ++m;
  // b[q] at order p: basis m - p + q (q = 0..p); a basis j of order p exists for 0 <= j < n_knots - 1 - p.
  T b[K + 1], prev[K + 1];
  b[0] = T(1);
  for (int q = 1; q <= K; ++q) b[q] = T(0);
  for (int p = 1; p <= K; ++p) {
    for (int q = 0; q <= K; ++q) prev[q] = b[q];
    for (int q = 0; q <= p; ++q) {
      const int j = m - p + q;
      T val = T(0);
      if (j >= 0 && j < n_knots - 1 - p) {
        const T left = q >= 1 ? prev[q - 1] : T(0);   // B_j,p-1
        const T right = q <= p - 1 ? prev[q] : T(0);  // B_j+1,p-1
        val = left * (x - t[j]) / (t[j + p] - t[j]) + right * (t[j + p + 1] - x) / (t[j + p + 1] - t[j + 1]);
      }
      b[q] = val;
    }
  }
  // Slopes from order K-1 (in prev): dB_j,K = K (B_j,K-1 / (t_{j+K} - t_j) - B_j+1,K-1 / (t_{j+K+1} - t_{j+1})).
  T d[K + 1];
  for (int q = 0; q <= K; ++q) {
    const int j = m - K + q;
    T val = T(0);
    if (j >= 0 && j < n_bases) {
      const T left = q >= 1 ? prev[q - 1] : T(0);
      const T right = q <= K - 1 ? prev[q] : T(0);
      val = T(K) * (left / (t[j + K] - t[j]) - right / (t[j + K + 1] - t[j + 1]));
    }
    d[q] = val;
  }
  // Shift the window into [0, n_bases - K - 1]: the entries shifted out belong to bases that do not
  // exist, so they are 0.
  const int f = m - K;
  int fc = f < 0 ? 0 : f;
  if (fc > n_bases - K - 1) fc = n_bases - K - 1;
  const int shift = fc - f;
  for (int q = 0; q <= K; ++q) {
    const int src = q + shift;
    const bool in = src >= 0 && src <= K;
    v[q] = in ? b[in ? src : 0] : T(0);
    dv[q] = in ? d[in ? src : 0] : T(0);
  }
  *first = fc;
}

}  // namespace foxhunt::models::kan
