// select_bootstrap_obs against a CPU selection on random flags (every combination of terminated and
// truncated), the output poisoned first; zero envs write nothing.
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "rl/envs/bootstrap_obs.hpp"
#include "tests/support/gpu_test.hpp"

namespace foxhunt::rl {
namespace {

class BootstrapObsTest : public test::GpuTest {};

TEST_F(BootstrapObsTest, FinalObsWhereTheEpisodeEnded) {
  SCOPED_TRACE(seed_note());
  for (const auto& [N, O] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {37, 4}, {1000, 17}}) {
    const auto n = static_cast<std::size_t>(N * O);
    const auto next = test::random_uniform(n, -1.f, 1.f, rng()), final_obs = test::random_uniform(n, 2.f, 3.f, rng());
    std::vector<std::uint8_t> term(static_cast<std::size_t>(N)), trunc(term.size());
    for (std::size_t e = 0; e < term.size(); ++e) {
      term[e] = static_cast<std::uint8_t>(rng()() % 2);
      trunc[e] = static_cast<std::uint8_t>(rng()() % 2);
    }
    auto d_next = test::upload(next), d_final = test::upload(final_obs);
    auto d_term = test::upload(term), d_trunc = test::upload(trunc);
    gpu::DeviceBuffer<float> out(n);
    test::poison(out);
    select_bootstrap_obs(out.data(), d_next.data(), d_final.data(), d_term.data(), d_trunc.data(), N, O, nullptr);
    const auto got = test::download(out);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t e = i / static_cast<std::size_t>(O);
      const float want = (term[e] | trunc[e]) ? final_obs[i] : next[i];
      ASSERT_EQ(got[i], want) << "N " << N << " O " << O << " element " << i;
    }
  }
  gpu::DeviceBuffer<float> untouched(4);
  test::poison(untouched);
  select_bootstrap_obs(untouched.data(), nullptr, nullptr, nullptr, nullptr, 0, 4, nullptr);  // no envs: no launch
  for (const float x : test::download(untouched)) EXPECT_TRUE(x != x) << "written without envs";
}

}  // namespace
}  // namespace foxhunt::rl
