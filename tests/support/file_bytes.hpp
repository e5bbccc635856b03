#pragma once
// Byte-level file comparisons for the checkpoint tests (resume, walk-forward, PPO runs).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace foxhunt::test {

inline std::vector<char> bytes_of(const std::filesystem::path& f) {
  std::ifstream in(f, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Differing bytes between two files (-1: a file is missing or the sizes differ).
inline std::int64_t differing_bytes(const std::filesystem::path& a, const std::filesystem::path& b) {
  if (!std::filesystem::exists(a) || !std::filesystem::exists(b)) return -1;
  const auto x = bytes_of(a), y = bytes_of(b);
  if (x.size() != y.size()) return -1;
  std::int64_t d = 0;
  for (std::size_t i = 0; i < x.size(); ++i) d += x[i] != y[i];
  return d;
}

}  // namespace foxhunt::test
