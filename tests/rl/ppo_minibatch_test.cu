// Minibatch kernels: random_permutation is a permutation (n = 1, 7, 512, 100000) equal to a host
// replay of its documented keys, changes with *step, and is uniform (chi-square of the position of
// element 0 and of the last element over many draws, p = 1e-4) also when replayed from a captured
// graph; gather_minibatch equals a CPU gather (f32 and bf16 obs, scalar and vector paths, nulls
// skipped); advance_counter counts.
#include "support/gpu_test.hpp"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/graph.hpp"
#include "gpu/philox.cuh"
#include "rl/ppo/minibatch.hpp"
#include "tests/rl/ppo_reference.hpp"

namespace foxhunt::rl::ppo {
namespace {

class PpoMinibatchTest : public test::GpuTest {};

// The documented algorithm on the host: stable sort of i by word x of Philox(seed, sid, step * n + i).
std::vector<std::int32_t> host_permutation(std::int64_t n, std::uint64_t seed, std::uint32_t sid, std::uint64_t step) {
  std::vector<std::uint32_t> key(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) key[i] = gpu::random_bits4(seed, sid, step * n + i).x;
  std::vector<std::int32_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](std::int32_t a, std::int32_t b) { return key[a] < key[b]; });
  return perm;
}

void set_step(gpu::DeviceBuffer<std::uint64_t>& step, std::uint64_t v, cudaStream_t s) {
  step.upload(std::span<const std::uint64_t>(&v, 1), s);
  FH_CHECK(cudaStreamSynchronize(s));
}

TEST_F(PpoMinibatchTest, PermutationIsAPermutationAndMatchesTheHost) {
  const std::uint64_t seed = 0x5eed;
  const std::uint32_t sid = 4;
  auto step = test::upload(std::vector<std::uint64_t>{0}, stream());
  for (std::int64_t n : {1, 7, 512, 100000}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    gpu::DeviceBuffer<std::int32_t> perm(n);
    gpu::DeviceBuffer<std::byte> ws(permutation_workspace_bytes(n));
    std::vector<std::vector<std::int32_t>> draws;
    for (std::uint64_t st : {0ull, 1ull, 12345ull}) {
      set_step(step, st, stream());
      test::poison(perm, stream());
      random_permutation(perm.data(), n, seed, sid, step.data(), ws.data(), stream());
      const auto got = test::download(perm, stream());
      std::vector<std::int32_t> sorted = got;
      std::sort(sorted.begin(), sorted.end());
      for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i) << "not a permutation at step " << st;
      EXPECT_EQ(got, host_permutation(n, seed, sid, st)) << "step " << st;
      draws.push_back(got);
    }
    EXPECT_EQ(test::download(step, stream())[0], 12345u) << "the step is not advanced by the permutation";
    if (n >= 7) {
      EXPECT_NE(draws[0], draws[1]);
      EXPECT_NE(draws[1], draws[2]);
    }
  }
}

// 16000 draws of a permutation of 16 from one captured graph (permutation, then advance_counter):
// the position of element 0, and of element 15, is uniform over the 16 places.
TEST_F(PpoMinibatchTest, PermutationIsUniformUnderGraphReplay) {
  const std::int64_t n = 16, draws = 16000;
  auto step = test::upload(std::vector<std::uint64_t>{100}, stream());
  gpu::DeviceBuffer<std::int32_t> perm(n), all(n * draws);
  gpu::DeviceBuffer<std::byte> ws(permutation_workspace_bytes(n));
  gpu::CudaGraph graph;
  graph.capture(stream(), [&](cudaStream_t cs) {
    random_permutation(perm.data(), n, 77, 0, step.data(), ws.data(), cs);
    advance_counter(step.data(), cs);
  });
  for (std::int64_t d = 0; d < draws; ++d) {
    graph.replay(stream());
    FH_CHECK(
        cudaMemcpyAsync(all.data() + d * n, perm.data(), n * sizeof(std::int32_t), cudaMemcpyDeviceToDevice, stream()));
  }
  EXPECT_EQ(test::download(step, stream())[0], 100u + draws);
  const auto h = test::download(all, stream());
  for (std::int32_t element : {0, 15}) {
    SCOPED_TRACE("element " + std::to_string(element));
    std::vector<double> count(n, 0.0);
    for (std::int64_t d = 0; d < draws; ++d) {
      const std::int32_t* p = h.data() + d * n;
      count[std::find(p, p + n, element) - p] += 1;
    }
    const double e = static_cast<double>(draws) / n;
    double chi2 = 0;
    for (double c : count) chi2 += (c - e) * (c - e) / e;
    EXPECT_LT(chi2, ref::chi2_critical_1e4(static_cast<int>(n) - 1));
  }
  // Replays are the eager permutations of their steps.
  gpu::DeviceBuffer<std::int32_t> eager(n);
  set_step(step, 100 + draws - 1, stream());
  random_permutation(eager.data(), n, 77, 0, step.data(), ws.data(), stream());
  const auto last = test::download(eager, stream());
  EXPECT_TRUE(std::equal(last.begin(), last.end(), h.end() - n));
}

template <class T>
std::vector<std::uint32_t> bits(const std::vector<T>& v) {
  std::vector<std::uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

void check_gather(gpu::DType dtype, std::int64_t obs_dim, bool skip_some, std::mt19937_64& rng, cudaStream_t s) {
  SCOPED_TRACE(std::string(gpu::dtype_name(dtype)) + " obs_dim " + std::to_string(obs_dim) +
               (skip_some ? " with nulls" : ""));
  const std::int64_t total = 1000, rows = 300, W = 3;
  const auto obs = test::random_normal(static_cast<std::size_t>(total * obs_dim), 0.f, 1.f, rng);
  std::vector<__nv_bfloat16> obs_bf16(obs.size());
  for (std::size_t k = 0; k < obs.size(); ++k) obs_bf16[k] = __float2bfloat16_rn(obs[k]);
  std::vector<std::int32_t> disc(static_cast<std::size_t>(total * W));
  std::uniform_int_distribution<int> act(0, 9), idx(0, static_cast<int>(total) - 1);
  for (auto& a : disc) a = act(rng);
  const auto raw = test::random_normal(static_cast<std::size_t>(total * W), 0.f, 1.f, rng);
  const auto logp = test::random_normal(total, 0.f, 1.f, rng), adv = test::random_normal(total, 0.f, 1.f, rng);
  const auto ret = test::random_normal(total, 0.f, 1.f, rng), val = test::random_normal(total, 0.f, 1.f, rng);
  std::vector<std::int32_t> indices(rows);
  for (auto& i : indices) i = idx(rng);
  indices[0] = static_cast<std::int32_t>(total - 1);
  indices[1] = indices[2];  // a repeat

  auto d_obs32 = test::upload(obs, s);
  auto d_obs16 = test::upload(obs_bf16, s);
  auto d_disc = test::upload(disc, s);
  auto d_raw = test::upload(raw, s), d_logp = test::upload(logp, s);
  auto d_adv = test::upload(adv, s), d_ret = test::upload(ret, s), d_val = test::upload(val, s);
  auto d_idx = test::upload(indices, s);
  gpu::DeviceBuffer<float> o_obs(rows * obs_dim), o_raw(rows * W), o_logp(rows), o_adv(rows), o_ret(rows), o_val(rows);
  gpu::DeviceBuffer<std::int32_t> o_disc(rows * W);
  for (auto* b : {&o_obs, &o_raw, &o_logp, &o_adv, &o_ret, &o_val}) test::poison(*b, s);
  test::poison(o_disc, s);

  GatherSpec in{};
  in.obs = dtype == gpu::DType::bf16 ? static_cast<const void*>(d_obs16.data()) : d_obs32.data();
  in.obs_dtype = dtype;
  in.obs_dim = obs_dim;
  in.discrete = d_disc.data();
  in.raw = skip_some ? nullptr : d_raw.data();
  in.action_width = W;
  in.logp = d_logp.data();
  in.advantages = skip_some ? nullptr : d_adv.data();
  in.returns = d_ret.data();
  in.values = skip_some ? nullptr : d_val.data();
  GatherOut out{};
  out.obs = o_obs.data();
  out.discrete = o_disc.data();
  out.raw = skip_some ? nullptr : o_raw.data();
  out.logp = o_logp.data();
  out.advantages = skip_some ? nullptr : o_adv.data();
  out.returns = o_ret.data();
  out.values = skip_some ? nullptr : o_val.data();
  gather_minibatch(out, in, d_idx.data(), rows, s);

  std::vector<float> want_obs(static_cast<std::size_t>(rows * obs_dim)), want_raw(rows * W);
  std::vector<std::int32_t> want_disc(rows * W);
  std::vector<float> want_logp(rows), want_adv(rows), want_ret(rows), want_val(rows);
  for (std::int64_t j = 0; j < rows; ++j) {
    const std::int64_t k = indices[j];
    for (std::int64_t c = 0; c < obs_dim; ++c)
      want_obs[j * obs_dim + c] =
          dtype == gpu::DType::bf16 ? __bfloat162float(obs_bf16[k * obs_dim + c]) : obs[k * obs_dim + c];
    for (std::int64_t a = 0; a < W; ++a) {
      want_disc[j * W + a] = disc[k * W + a];
      want_raw[j * W + a] = raw[k * W + a];
    }
    want_logp[j] = logp[k];
    want_adv[j] = adv[k];
    want_ret[j] = ret[k];
    want_val[j] = val[k];
  }
  EXPECT_EQ(bits(test::download(o_obs, s)), bits(want_obs)) << "obs";
  EXPECT_EQ(test::download(o_disc, s), want_disc) << "discrete";
  EXPECT_EQ(bits(test::download(o_logp, s)), bits(want_logp)) << "logp";
  EXPECT_EQ(bits(test::download(o_ret, s)), bits(want_ret)) << "returns";
  const std::vector<std::uint32_t> untouched_w(rows * W, 0xFFFFFFFFu), untouched(rows, 0xFFFFFFFFu);
  EXPECT_EQ(bits(test::download(o_raw, s)), skip_some ? untouched_w : bits(want_raw)) << "raw";
  EXPECT_EQ(bits(test::download(o_adv, s)), skip_some ? untouched : bits(want_adv)) << "advantages";
  EXPECT_EQ(bits(test::download(o_val, s)), skip_some ? untouched : bits(want_val)) << "values";
}

TEST_F(PpoMinibatchTest, GatherEqualsCpuGather) {
  SCOPED_TRACE(seed_note());
  for (gpu::DType dtype : {gpu::DType::f32, gpu::DType::bf16})
    for (std::int64_t obs_dim : {1, 7, 8, 100})  // 8 and 100: four elements at a time
      for (bool skip : {false, true}) check_gather(dtype, obs_dim, skip, rng(), stream());
}

TEST_F(PpoMinibatchTest, GatherRejectsOneSidedPairs) {
  gpu::DeviceBuffer<float> f(4);
  gpu::DeviceBuffer<std::int32_t> idx(1);
  GatherSpec in{};
  GatherOut out{};
  out.logp = f.data();  // no in.logp
  EXPECT_THROW(gather_minibatch(out, in, idx.data(), 1, stream()), std::invalid_argument);
}

TEST_F(PpoMinibatchTest, AdvanceCounterCounts) {
  auto c = test::upload(std::vector<std::uint64_t>{41}, stream());
  for (int k = 0; k < 3; ++k) advance_counter(c.data(), stream());
  EXPECT_EQ(test::download(c, stream())[0], 44u);
}

}  // namespace
}  // namespace foxhunt::rl::ppo
