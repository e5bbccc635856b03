// Stress tests of the replay's index paths. Many sample calls on partly filled trees whose TD
// errors span ~1e-37 .. 1e30 (exact-zero TD errors give priority eps, far below one fixed-point
// unit; one variant adds values near FLT_MAX; everything above kMaxPriority is capped there),
// directly and as captured sample + update graph replays, must only return stored slots, finite
// weights in [0, 1] and finite gathered values;
// a tree three levels deep (capacity > 2^24) and inserts that wrap onto their own first tile or
// level-2 node keep every node equal to the sum / min of its children.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gpu/graph.hpp"
#include "tests/rl/replay_gpu_util.hpp"

namespace foxhunt::rl {
namespace {

using namespace test_model;

class ReplayStressTest : public test::GpuTest {};

ReplayConfig stress_config(std::int64_t capacity) {
  ReplayConfig c;
  c.capacity = capacity;
  c.layout.obs_dim = 4;
  c.batch_size = std::min<std::int64_t>(1024, capacity / 2);  // a batch must fit the ring
  c.n_step = 3;
  c.alpha = 1.0f;  // leaf = |td| + eps: the extremes reach the tree unchanged
  c.eps = 1e-37f;  // td = 0 gives a priority a few times FLT_MIN
  c.beta = 1.0f;   // the smallest weights there are
  c.beta_final = 1.0f;
  c.seed = 0xfeedULL;
  return c;
}

// TD errors: 30% exact zeros, 10% 1e30, the rest +-10^U(-30, 30); with `overflow` about 0.1% are
// 3e38 (two of them in one node already overflow its float sum).
std::vector<float> extreme_td(std::size_t n, std::mt19937_64& rng, bool overflow) {
  std::uniform_real_distribution<double> expo(-30.0, 30.0), coin(0.0, 1.0);
  std::vector<float> td(n);
  for (auto& x : td) {
    const double c = coin(rng);
    if (c < 0.3)
      x = 0.0f;
    else if (c < 0.4)
      x = 1e30f;
    else if (overflow && c < 0.401)
      x = 3e38f;
    else
      x = static_cast<float>(std::pow(10.0, expo(rng))) * (coin(rng) < 0.5 ? -1.0f : 1.0f);
  }
  return td;
}

// Every index a stored slot, every weight finite in [0, 1], every gathered value finite (a gather
// from an unwritten slot would read whatever the allocation held). Counts the draws per slot.
void check_sample(const HostSample& s, std::int64_t size, std::vector<std::int64_t>& counts) {
  for (std::size_t i = 0; i < s.indices.size(); ++i) {
    const std::int32_t j = s.indices[i];
    ASSERT_TRUE(j >= 0 && j < size) << "sample " << i << ": slot " << j << " is not stored (size " << size << ")";
    ASSERT_TRUE(std::isfinite(s.weights[i]) && s.weights[i] >= 0.0f && s.weights[i] <= 1.0f)
        << "sample " << i << " slot " << j << ": weight " << s.weights[i];
    ASSERT_TRUE(std::isfinite(s.returns[i])) << "sample " << i;
    ASSERT_TRUE(s.discounts[i] >= 0.0f && s.discounts[i] <= 1.0f) << "sample " << i << ": discount " << s.discounts[i];
    ++counts[static_cast<std::size_t>(j)];
  }
  for (std::size_t e = 0; e < s.obs.size(); ++e) {
    ASSERT_TRUE(std::isfinite(s.obs[e])) << "obs element " << e;
    ASSERT_TRUE(std::isfinite(s.next_obs[e])) << "next obs element " << e;
  }
}

// The share of draws on capped slots (kMaxPriority) against their share of the priority mass
// (stratified draws vary less than binomial ones, so 5 binomial sigmas plus a few rounding
// misroutes is a loose but failing bound).
void expect_heavy_share(const std::vector<std::int64_t>& counts, const std::vector<float>& leaves, std::int64_t size) {
  double heavy = 0, total = 0;
  std::int64_t draws = 0, heavy_draws = 0;
  for (std::int64_t j = 0; j < size; ++j) {
    total += leaves[static_cast<std::size_t>(j)];
    if (leaves[static_cast<std::size_t>(j)] >= TreeShape::kMaxPriority) {
      heavy += leaves[static_cast<std::size_t>(j)];
      heavy_draws += counts[static_cast<std::size_t>(j)];
    }
    draws += counts[static_cast<std::size_t>(j)];
  }
  ASSERT_GT(draws, 0);
  const double want = heavy / total, got = static_cast<double>(heavy_draws) / static_cast<double>(draws);
  const double tol =
      5.0 * std::sqrt(want * (1.0 - want) / static_cast<double>(draws)) + 10.0 / static_cast<double>(draws);
  EXPECT_NEAR(got, want, tol) << heavy_draws << " of " << draws << " draws on capped slots";
}

TEST_F(ReplayStressTest, ExtremePrioritiesOnPartlyFilledTreesSampleOnlyStoredSlots) {
  SCOPED_TRACE(seed_note());
  // 1000: the leaves are the top; 5000: one level; 140000 and 200003: two levels, odd sizes.
  for (const std::int64_t C : {1000, 5000, 140000, 200003}) {
    for (const bool overflow : {false, true}) {
      SCOPED_TRACE("capacity " + std::to_string(C) + (overflow ? ", overflowing sums" : ""));
      const ReplayConfig cfg = stress_config(C);
      ReplayBuffer rb(cfg, stream());
      const int p = rb.add_producer(1);
      std::uniform_int_distribution<std::int64_t> fill(C / 5, C - 1);  // partly filled, never full
      insert_rows(rb, p, std::max<std::int64_t>(fill(rng()), cfg.batch_size), rng(), stream());
      const std::int64_t size = rb.size();
      std::vector<std::int32_t> all(static_cast<std::size_t>(size));
      for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int32_t>(i);
      update(rb, all, extreme_td(all.size(), rng(), overflow), stream());

      SampledBatch out = rb.allocate_batch(std::min<std::int64_t>(cfg.batch_size, size));
      std::vector<std::int64_t> counts(static_cast<std::size_t>(C), 0);
      std::uniform_int_distribution<std::int32_t> any(0, static_cast<std::int32_t>(size - 1));
      for (int call = 0; call < 40; ++call) {
        rb.sample(out.view(), call, stream());
        const HostSample s = download_sample(out.view(), cfg.layout, stream());
        check_sample(s, size, counts);
        if (HasFatalFailure()) return;
        if (call % 8 == 7) {
          // The draws since the last update against the current priorities, then re-prioritise
          // what was drawn plus a few random slots, as a learner would.
          if (!overflow) expect_heavy_share(counts, download_leaves(rb, stream()), size);
          std::vector<std::int32_t> idx = s.indices;
          for (int k = 0; k < 256; ++k) idx.push_back(any(rng()));
          update(rb, idx, extreme_td(idx.size(), rng(), overflow), stream());
          std::fill(counts.begin(), counts.end(), 0);
        }
      }
      expect_tree_consistent(rb, stream());
      if (HasFatalFailure()) return;
    }
  }
}

// The disabled audit test's scenario, hardened: a partly filled 200003-slot ring, sample + update
// captured once and replayed many times with fresh extreme TD errors between replays.
TEST_F(ReplayStressTest, CapturedSampleAndUpdateReplaysStayInsideTheStoredRange) {
  SCOPED_TRACE(seed_note());
  ReplayConfig cfg = stress_config(200003);
  cfg.batch_size = 256;
  cfg.beta_anneal_steps = 10;
  ReplayBuffer rb(cfg, stream());
  const int p = rb.add_producer(1000);
  DeviceBlock block(random_block(150, 1000, cfg.layout.obs_dim, 1, rng()), cfg.layout, stream());
  rb.insert(p, block.batch, stream());
  ASSERT_EQ(rb.size(), 150000);
  SampledBatch out = rb.allocate_batch();
  std::vector<float> td_host = extreme_td(256, rng(), false);
  auto td = test::upload(td_host, stream());

  gpu::CudaGraph step;
  step.capture(stream(), [&](cudaStream_t s) {
    rb.sample(out.view(), s);
    rb.update_priorities(out.view().indices, td.data(), out.batch(), s);
  });
  FH_CHECK(cudaDeviceSynchronize());
  std::vector<std::int64_t> counts(static_cast<std::size_t>(cfg.capacity), 0);
  for (int i = 0; i < 200; ++i) {
    SCOPED_TRACE("replay " + std::to_string(i));
    step.replay(stream());
    FH_CHECK(cudaStreamSynchronize(stream()));
    check_sample(download_sample(out.view(), cfg.layout, stream()), rb.size(), counts);
    if (HasFatalFailure()) return;
    td_host = extreme_td(256, rng(), i % 50 == 49);
    td.upload(td_host, stream());
    FH_CHECK(cudaStreamSynchronize(stream()));
  }
  const ReplayState st = download_state(rb, stream());
  EXPECT_EQ(st.sample_calls, 200u);
  EXPECT_EQ(st.epoch, 200u);  // once per update call
  const auto leaves = download_leaves(rb, stream());
  for (std::int64_t j = rb.size(); j < rb.capacity(); ++j)
    ASSERT_EQ(leaves[static_cast<std::size_t>(j)], 0.0f) << "empty slot " << j << " got a priority";
  expect_tree_consistent(rb, stream());
}

// The descent's guards alone, against a tree that lies: top nodes past the stored range claim
// most of the mass (their children are empty), and the unwritten ring entries of the empty slots
// hold garbage bootstrap indices. Every draw must still be a stored slot with a finite weight,
// and every gathered value must come from stored slots (a gather through a garbage bootstrap
// index would read far outside the ring).
TEST_F(ReplayStressTest, LyingTopNodesStillYieldOnlyStoredSlots) {
  SCOPED_TRACE(seed_note());
  ReplayConfig cfg = stress_config(200003);  // levels: 1563, 13 nodes
  ReplayBuffer rb(cfg, stream());
  const int p = rb.add_producer(1000);
  DeviceBlock block(random_block(150, 1000, cfg.layout.obs_dim, 1, rng()), cfg.layout, stream());
  rb.insert(p, block.batch, stream());
  FH_CHECK(cudaStreamSynchronize(stream()));
  ASSERT_EQ(rb.size(), 150000);  // level-2 nodes 10..12 (slots from 163840 on) hold nothing
  const TreeView* t = rb.tree_view();
  const RingView ring = rb.ring_view();
  // Empty slots: bootstrap indices far outside the ring, NaN rewards and n-step fields.
  FH_CHECK(cudaMemsetAsync(ring.bootstrap + 150000, 0x7f, (200003 - 150000) * sizeof(std::int32_t), stream()));
  FH_CHECK(cudaMemsetAsync(ring.returns + 150000, 0xff, (200003 - 150000) * sizeof(float), stream()));
  FH_CHECK(cudaMemsetAsync(ring.discounts + 150000, 0xff, (200003 - 150000) * sizeof(float), stream()));
  const std::vector<std::uint64_t> lies = {std::uint64_t{1} << 61, std::uint64_t{1} << 60, 1};
  FH_CHECK(cudaMemcpyAsync(t->sums[2] + 10, lies.data(), lies.size() * sizeof(std::uint64_t), cudaMemcpyHostToDevice,
                           stream()));
  FH_CHECK(cudaStreamSynchronize(stream()));

  SampledBatch out = rb.allocate_batch(1024);
  std::vector<std::int64_t> counts(static_cast<std::size_t>(cfg.capacity), 0);
  for (int call = 0; call < 20; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const SampledBatchView v = out.view();
    FH_CHECK(cudaMemsetAsync(v.indices, 0xff, 1024 * sizeof(std::int32_t), stream()));  // poison
    FH_CHECK(cudaMemsetAsync(v.weights, 0xff, 1024 * sizeof(float), stream()));
    rb.sample(v, call, stream());
    FH_CHECK(cudaStreamSynchronize(stream()));
    check_sample(download_sample(v, cfg.layout, stream()), rb.size(), counts);
    if (HasFatalFailure()) return;
  }
}

// CPU mirror of the update: entries outside [0, size) are skipped; among repeated indices the
// largest priority wins.
// Capacity 2^24 + 4099: three levels above the leaves (131105, 1025, 9 nodes), so the update's
// shared bitmaps are large and an update clustered below one top node (~4000 distinct level-1
// nodes) drains its level in several rounds.
TEST_F(ReplayStressTest, DeepTreeUpdatesAndWrappingInsertsStayConsistent) {
  SCOPED_TRACE(seed_note());
  ReplayConfig cfg = stress_config((std::int64_t{1} << 24) + 4099);
  cfg.layout.obs_dim = 1;
  cfg.alpha = 0.6f;
  cfg.eps = 1e-6f;
  ReplayBuffer rb(cfg, stream());
  ASSERT_EQ(rb.tree_shape().top, 3);
  const std::int64_t C = cfg.capacity;
  const int p = rb.add_producer(1);
  {
    DeviceBlock big(random_block(std::int64_t{1} << 20, 1, 1, 1, rng()), cfg.layout, stream());
    for (int i = 0; i < 16; ++i) rb.insert(p, big.batch, stream());  // 2^24 rows: 4099 slots stay empty
    FH_CHECK(cudaStreamSynchronize(stream()));
  }
  std::vector<double> ref(static_cast<std::size_t>(C), 0.0);
  std::fill(ref.begin(), ref.begin() + (std::int64_t{1} << 24), 1.0);
  expect_leaves(rb, ref, stream());
  expect_tree_consistent(rb, stream());
  if (HasFatalFailure()) return;

  std::uniform_int_distribution<std::int32_t> anywhere(0, (1 << 24) - 1), first_top(0, (1 << 21) - 1),
      seventh_top(7 << 21, (8 << 21) - 1), empty(1 << 24, static_cast<std::int32_t>(C - 1));
  std::uniform_real_distribution<float> tdd(0.0f, 5.0f);
  std::uint32_t epoch = download_state(rb, stream()).epoch;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<std::int32_t> idx(round == 1 ? 8192 : 4096);
    for (std::size_t i = 0; i < idx.size(); ++i) {
      if (i > 0 && rng()() % 4 == 0)
        idx[i] = idx[rng()() % i];  // repeats
      else if (round == 0)
        idx[i] = anywhere(rng());
      else if (round == 1)
        idx[i] = first_top(rng());  // all below top node 0: several drain rounds
      else
        idx[i] = rng()() % 8 == 0 ? empty(rng()) : seventh_top(rng());  // top node 8 is still empty
    }
    idx.push_back(-1);  // skipped
    std::vector<float> td(idx.size());
    for (auto& x : td) x = tdd(rng());
    update(rb, idx, td, stream());
    apply_update(ref, idx, td, cfg, rb.size());
    EXPECT_EQ(download_state(rb, stream()).epoch, ++epoch);
    expect_leaves(rb, ref, stream());
    expect_tree_consistent(rb, stream());
    if (HasFatalFailure()) return;
  }
  // Wraps: [2^24, C) below the partial last top node, then [0, 3901) below top node 0.
  const float maxp = download_state(rb, stream()).max_priority;
  insert_rows(rb, p, 8000, rng(), stream());
  for (std::int64_t g = std::int64_t{1} << 24; g < (std::int64_t{1} << 24) + 8000; ++g)
    ref[static_cast<std::size_t>(g % C)] = maxp;
  expect_leaves(rb, ref, stream());
  expect_tree_consistent(rb, stream());
}

// Inserts whose two slot ranges (the tail of the ring and its wrapped start) meet: in the same
// level-1 node (tile), or in the same level-2 node from different tiles.
TEST_F(ReplayStressTest, InsertsWrappingOntoTheirOwnFirstNodeKeepTheTreeConsistent) {
  SCOPED_TRACE(seed_note());
  const std::int64_t C = 140000;  // levels: 1094, 9 nodes
  for (const std::int64_t first_rows : {70, 9000}) {
    const std::int64_t wrap_rows = first_rows == 70 ? C - 10 : C - 100;
    SCOPED_TRACE("first insert " + std::to_string(first_rows) + " rows, then " + std::to_string(wrap_rows));
    ReplayConfig cfg = stress_config(C);
    cfg.layout.obs_dim = 2;
    cfg.alpha = 0.6f;
    cfg.eps = 1e-6f;
    ReplayBuffer rb(cfg, stream());
    const int p = rb.add_producer(1);
    insert_rows(rb, p, first_rows, rng(), stream());
    std::vector<double> ref(static_cast<std::size_t>(C), 0.0);
    std::fill(ref.begin(), ref.begin() + first_rows, 1.0);
    std::vector<std::int32_t> idx(static_cast<std::size_t>(first_rows));
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<std::int32_t>(i);
    const std::vector<float> td = test::random_uniform(idx.size(), 0.0f, 8.0f, rng());
    update(rb, idx, td, stream());
    apply_update(ref, idx, td, cfg, rb.size());
    const float maxp = download_state(rb, stream()).max_priority;

    const HostBlock h = random_block(wrap_rows, 1, 2, 1, rng());  // one block: one kernel
    DeviceBlock d(h, cfg.layout, stream());
    rb.insert(p, d.batch, stream());
    FH_CHECK(cudaStreamSynchronize(stream()));
    for (std::int64_t g = first_rows; g < first_rows + wrap_rows; ++g) ref[static_cast<std::size_t>(g % C)] = maxp;
    expect_leaves(rb, ref, stream());
    expect_tree_consistent(rb, stream());
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace foxhunt::rl
