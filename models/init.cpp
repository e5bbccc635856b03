#include "models/init.hpp"

#include <cmath>
#include <string>

#include "gpu/check.hpp"

namespace foxhunt::models {

std::vector<float> orthogonal_matrix(std::int64_t rows, std::int64_t cols, double gain, std::mt19937_64& rng) {
  FH_EXPECT(rows >= 1 && cols >= 1, "orthogonal_matrix: rows and cols must be >= 1");
  // Work on the tall orientation (n >= k): Gram-Schmidt (modified, twice for stability) on the k
  // columns of an n x k Gaussian matrix gives Q; R's diagonal is the norms, all positive, so Q is
  // already the sign-fixed factor. Rows <= cols: the result is the transpose.
  const bool transpose = rows < cols;
  const std::int64_t n = transpose ? cols : rows, k = transpose ? rows : cols;
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> q(static_cast<std::size_t>(n * k));  // column j at q[j * n ...]
  for (auto& x : q) x = normal(rng);
  for (std::int64_t j = 0; j < k; ++j) {
    double* v = &q[static_cast<std::size_t>(j * n)];
    for (int pass = 0; pass < 2; ++pass)
      for (std::int64_t p = 0; p < j; ++p) {
        const double* u = &q[static_cast<std::size_t>(p * n)];
        double dot = 0;
        for (std::int64_t i = 0; i < n; ++i) dot += u[i] * v[i];
        for (std::int64_t i = 0; i < n; ++i) v[i] -= dot * u[i];
      }
    double norm = 0;
    for (std::int64_t i = 0; i < n; ++i) norm += v[i] * v[i];
    norm = std::sqrt(norm);
    FH_EXPECT(norm > 0, "orthogonal_matrix: degenerate draw");
    for (std::int64_t i = 0; i < n; ++i) v[i] /= norm;
  }
  std::vector<float> out(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      // tall (rows >= cols): out[r, c] = Q[r, c] = column c, row r; wide: out[r, c] = Q[c, r]
      const double v = transpose ? q[static_cast<std::size_t>(r * n + c)] : q[static_cast<std::size_t>(c * n + r)];
      out[static_cast<std::size_t>(r * cols + c)] = static_cast<float>(gain * v);
    }
  return out;
}

void init_orthogonal(const Dense& layer, gpu::ParameterArena& arena, double gain, std::mt19937_64& rng,
                     cudaStream_t stream) {
  const DenseSpec& s = layer.spec();
  FH_EXPECT(!s.noisy, "init_orthogonal: Dense " + s.name + " is noisy (NoisyNet layers keep their own init)");
  arena.upload_param(layer.weight_name(), orthogonal_matrix(s.out, s.in, gain, rng), stream);
  arena.upload_param(layer.bias_name(), std::vector<float>(static_cast<std::size_t>(s.out), 0.f), stream);
}

}  // namespace foxhunt::models
