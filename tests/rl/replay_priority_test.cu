// Priority updates and the tree: the running max priority against a CPU reference, repeated
// indices (largest wins), later updates replacing earlier ones, skipped bad entries, and every
// tree node equal to the sum / min of its children after inserts (with wraparound) and updates.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <vector>

#include "tests/rl/replay_gpu_util.hpp"

namespace foxhunt::rl {
namespace {

using namespace test_model;

class ReplayPriorityTest : public test::GpuTest {};

ReplayConfig priority_config(std::int64_t capacity) {
  ReplayConfig c;
  c.capacity = capacity;
  c.layout.obs_dim = 2;
  c.batch_size = 16;
  c.alpha = 0.6f;
  c.eps = 1e-4f;
  return c;
}

double leaf_of(double td, const ReplayConfig& c) {
  return std::max(std::pow(std::fabs(td) + static_cast<double>(c.eps), static_cast<double>(c.alpha)), double{FLT_MIN});
}

TEST_F(ReplayPriorityTest, MaxPriorityFollowsTheCpuReferenceAndNewTransitionsEnterAtIt) {
  SCOPED_TRACE(seed_note());
  for (std::int64_t C : {5000, 200003}) {
    SCOPED_TRACE("capacity " + std::to_string(C));
    const ReplayConfig cfg = priority_config(C);
    ReplayBuffer rb(cfg, stream());
    const int p = rb.add_producer(1);
    insert_rows(rb, p, C / 2, rng(), stream());
    EXPECT_EQ(download_state(rb, stream()).max_priority, 1.0f);  // p_1 = 1 (and 1^alpha = 1)
    auto leaves = download_leaves(rb, stream());
    for (std::int64_t j = 0; j < C; ++j) ASSERT_EQ(leaves[j], j < C / 2 ? 1.0f : 0.0f) << "slot " << j;

    // Updates raise the max to the CPU reference (max over everything assigned, and 1).
    double ref_max = 1.0;
    std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(C / 2 - 1));
    for (int round = 0; round < 3; ++round) {
      std::vector<std::int32_t> idx(3000);
      for (auto& i : idx) i = pick(rng());
      const std::vector<float> td = test::random_uniform(idx.size(), -6.0f, 6.0f, rng());  // |td| up to 6
      update(rb, idx, td, stream());
      for (float x : td) ref_max = std::max(ref_max, leaf_of(x, cfg));
      const float got = download_state(rb, stream()).max_priority;
      EXPECT_NEAR(got, ref_max, 1e-6 * ref_max) << "round " << round;
    }
    // Smaller TD errors leave it alone.
    const float before = download_state(rb, stream()).max_priority;
    update(rb, {1, 2, 3}, {0.01f, 0.02f, 0.03f}, stream());
    EXPECT_EQ(download_state(rb, stream()).max_priority, before);

    // New transitions (wrapping past the end) enter at exactly the device's max.
    const std::int64_t first = rb.inserted();
    insert_rows(rb, p, C / 2 + 777, rng(), stream());
    leaves = download_leaves(rb, stream());
    for (std::int64_t r = 0; r < C / 2 + 777; ++r) ASSERT_EQ(leaves[(first + r) % C], before) << "row " << r;
    expect_tree_consistent(rb, stream());
  }
}

TEST_F(ReplayPriorityTest, RepeatedIndicesLargestWinsAndLaterUpdatesReplace) {
  SCOPED_TRACE(seed_note());
  const std::int64_t C = 200003;  // two levels above the leaves
  const ReplayConfig cfg = priority_config(C);
  ReplayBuffer rb(cfg, stream());
  insert_rows(rb, rb.add_producer(1), C, rng(), stream());

  std::vector<double> ref(static_cast<std::size_t>(C), 1.0);
  std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(C - 1));
  for (int round = 0; round < 4; ++round) {
    // Half the entries repeat an index already in the batch, at random positions.
    std::vector<std::int32_t> idx(4096);
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = (i > 0 && (rng()() & 1)) ? idx[rng()() % i] : pick(rng());
    const std::vector<float> td = test::random_uniform(idx.size(), 0.0f, round % 2 ? 0.5f : 4.0f, rng());
    update(rb, idx, td, stream());
    std::map<std::int32_t, double> best;
    for (std::size_t i = 0; i < idx.size(); ++i) {
      const double p = leaf_of(td[i], cfg);
      auto [it, fresh] = best.emplace(idx[i], p);
      if (!fresh) it->second = std::max(it->second, p);
    }
    for (const auto& [i, p] : best) ref[i] = p;  // replaces whatever an earlier round set
    const auto leaves = download_leaves(rb, stream());
    for (std::int64_t j = 0; j < C; ++j)
      ASSERT_NEAR(leaves[j], ref[j], 1e-6 * ref[j]) << "round " << round << " slot " << j;
    expect_tree_consistent(rb, stream());
    if (HasFatalFailure()) return;
  }
  // Same index, smaller priority in the next call: replaced (not max-ed with the old one).
  update(rb, {42}, {100.0f}, stream());
  update(rb, {42}, {0.001f}, stream());
  EXPECT_NEAR(download_leaves(rb, stream())[42], leaf_of(0.001, cfg), 1e-6);
  expect_tree_consistent(rb, stream());
}

TEST_F(ReplayPriorityTest, NonFiniteErrorsAndOutOfRangeIndicesAreSkipped) {
  SCOPED_TRACE(seed_note());
  const ReplayConfig cfg = priority_config(5000);
  ReplayBuffer rb(cfg, stream());
  insert_rows(rb, rb.add_producer(1), 5000, rng(), stream());
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  update(rb, {10, 11, -1, 5000, 1 << 30, 12}, {nan, inf, 3.0f, 3.0f, 3.0f, 0.5f}, stream());
  const auto leaves = download_leaves(rb, stream());
  EXPECT_EQ(leaves[10], 1.0f);
  EXPECT_EQ(leaves[11], 1.0f);
  EXPECT_NEAR(leaves[12], leaf_of(0.5, cfg), 1e-6);
  EXPECT_EQ(download_state(rb, stream()).max_priority, 1.0f);  // 3.0 entries had bad indices
  expect_tree_consistent(rb, stream());

  // An index past the stored size (an empty slot) must stay empty.
  ReplayBuffer part(cfg, stream());
  insert_rows(part, part.add_producer(1), 100, rng(), stream());
  update(part, {4000, 50}, {2.0f, 2.0f}, stream());
  const auto pl = download_leaves(part, stream());
  EXPECT_EQ(pl[4000], 0.0f);
  EXPECT_NEAR(pl[50], leaf_of(2.0, cfg), 1e-6);
  expect_tree_consistent(part, stream());
}

TEST_F(ReplayPriorityTest, TreeIsConsistentAfterWrappingInsertsFromSeveralProducers) {
  SCOPED_TRACE(seed_note());
  ReplayConfig cfg = priority_config(140000);  // level 1: 1094 nodes, level 2 (top): 9
  ReplayBuffer rb(cfg, stream());
  const int a = rb.add_producer(3), b = rb.add_producer(1000);
  std::uniform_int_distribution<std::int64_t> small_steps(1, 60), big_steps(40, 60);  // 4 big blocks wrap
  for (int i = 0; i < 8; ++i) {
    const bool big = i % 2;
    const std::int64_t envs = big ? 1000 : 3;
    const HostBlock h = random_block(big ? big_steps(rng()) : small_steps(rng()), envs, cfg.layout.obs_dim, 1, rng());
    DeviceBlock d(h, cfg.layout, stream());
    rb.insert(big ? b : a, d.batch, stream());
    FH_CHECK(cudaStreamSynchronize(stream()));
    std::vector<std::int32_t> idx(500);
    for (auto& j : idx) j = static_cast<std::int32_t>(rng()() % static_cast<std::uint64_t>(rb.size()));
    update(rb, idx, test::random_uniform(idx.size(), 0.0f, 2.0f, rng()), stream());
    expect_tree_consistent(rb, stream());
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(rb.inserted(), cfg.capacity);  // it did wrap
}

TEST_F(ReplayPriorityTest, Bf16ObservationsRoundTripWithinBf16Precision) {
  SCOPED_TRACE(seed_note());
  for (bool bf16_input : {false, true}) {
    for (gpu::DType storage : {gpu::DType::bf16, gpu::DType::f32}) {
      ReplayConfig cfg = priority_config(3001);
      cfg.layout.obs_dim = 64;  // the vectorised path
      cfg.layout.obs_dtype = storage;
      ReplayBuffer rb(cfg, stream());
      const int p = rb.add_producer(1);
      const HostBlock h = random_block(3001, 1, 64, 1, rng());
      DeviceBlock d(h, cfg.layout, stream(), bf16_input);
      rb.insert(p, d.batch, stream());
      SampledBatch out = rb.allocate_batch(2048);
      rb.sample(out.view(), 0, stream());
      const HostSample s = download_sample(out.view(), cfg.layout, stream());
      double num = 0, den = 0;
      for (std::int64_t i = 0; i < 2048; ++i) {
        const std::int64_t j = s.indices[i];
        for (std::int64_t e = 0; e < 64; ++e) {
          const float x = h.obs[j * 64 + e];
          const float want = (storage == gpu::DType::bf16 || bf16_input) ? __bfloat162float(__float2bfloat16_rn(x)) : x;
          ASSERT_EQ(s.obs[i * 64 + e], want) << "sample " << i << " element " << e;
          // Round to nearest with an 8-bit significand: relative error at most 2^-8.
          ASSERT_LE(std::fabs(s.obs[i * 64 + e] - x), std::ldexp(std::fabs(x), -8)) << "sample " << i;
          num += (s.obs[i * 64 + e] - x) * (s.obs[i * 64 + e] - x);
          den += static_cast<double>(x) * x;
        }
      }
      if (storage == gpu::DType::bf16 || bf16_input) EXPECT_LT(std::sqrt(num / den), 1e-2);
    }
  }
}

TEST_F(ReplayPriorityTest, MismatchedBatchLayoutsAreRejectedByKey) {
  ReplayConfig cfg = priority_config(1000);
  cfg.layout.action_kind = ActionKind::multi_discrete;
  cfg.layout.action_dim = 3;
  ReplayBuffer rb(cfg, stream());
  const int p = rb.add_producer(4);
  const HostBlock h = random_block(5, 4, cfg.layout.obs_dim, 3, rng());
  auto expect_key = [&](auto mutate, const std::string& key) {
    DeviceBlock d(h, cfg.layout, stream());
    mutate(d.batch);
    try {
      rb.insert(p, d.batch, stream());
      ADD_FAILURE() << "no exception for " << key;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
    EXPECT_EQ(rb.inserted(), 0) << "a rejected insert reserved slots";
  };
  expect_key([](TransitionBatch& b) { b.layout.obs_dim = 3; }, "replay.layout.obs_dim");
  expect_key([](TransitionBatch& b) { b.layout.action_dim = 2; }, "replay.layout.action_dim");
  expect_key([](TransitionBatch& b) { b.layout.action_kind = ActionKind::continuous; }, "replay.layout.action_kind");
  expect_key([](TransitionBatch& b) { b.layout.obs_dtype = gpu::DType::u8; }, "replay.layout.obs_dtype");
  expect_key([](TransitionBatch& b) { b.envs = 5; }, "replay.insert.envs");
  expect_key([](TransitionBatch& b) { b.rewards = nullptr; }, "replay.insert");
  try {
    DeviceBlock d(h, cfg.layout, stream());
    rb.insert(p + 1, d.batch, stream());
    ADD_FAILURE() << "no exception for a bad producer";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("replay.producer"), std::string::npos) << e.what();
  }
}

TEST_F(ReplayPriorityTest, CapacityBeyondDeviceMemoryIsRejectedByKey) {
  ReplayConfig cfg = priority_config(ReplayConfig::kMaxCapacity);
  cfg.layout.obs_dim = 1 << 20;  // petabytes
  try {
    ReplayBuffer rb(cfg, stream());
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("replay.capacity"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("device memory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace foxhunt::rl
