// Inserts through the flat row copy and the per-node tree writers (insert.cu): every new slot
// holds its row's data, every new leaf the running max priority, and every tree node the sum and
// min of its children, for one-kernel inserts of 1, 127, 128, 129, ... rows up to the whole
// capacity, whose slot ranges start and end inside level-1 nodes (partial first / last nodes),
// cover whole nodes (written without reads), wrap around the ring (onto their own first node)
// and reach the partial last node of a capacity that is no multiple of 128. Priority updates
// between the inserts make the old leaves of partial nodes differ from the new stamps, and raise
// the max priority the next insert stamps with.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/rl/replay_gpu_util.hpp"

namespace foxhunt::rl {
namespace {

using namespace test_model;

class ReplayInsertTreeTest : public test::GpuTest {};

ReplayConfig tree_config(std::int64_t capacity, std::int64_t obs_dim) {
  ReplayConfig c;
  c.capacity = capacity;
  c.layout.obs_dim = obs_dim;
  c.batch_size = std::min<std::int64_t>(64, capacity);
  c.n_step = 3;
  c.alpha = 0.6f;
  c.eps = 1e-6f;
  c.seed = 0xabcdULL;
  return c;
}

// One block of `rows` rows (one kernel) from the single-env producer `p`, then: the new slots
// hold the block's rows (obs, next obs, action, reward, flags) bit for bit, the new leaves the
// max priority of before the insert, the other leaves are unchanged, the tree is consistent.
void insert_and_check(ReplayBuffer& rb, int p, std::int64_t rows, std::vector<double>& ref, std::mt19937_64& rng,
                      cudaStream_t stream) {
  const std::int64_t C = rb.capacity(), D = rb.config().layout.obs_dim;
  const float maxp = download_state(rb, stream).max_priority;
  const std::int64_t first = rb.inserted();
  const HostBlock h = random_block(rows, 1, D, 1, rng);
  DeviceBlock d(h, rb.config().layout, stream);
  rb.insert(p, d.batch, stream);
  FH_CHECK(cudaStreamSynchronize(stream));
  for (std::int64_t r = 0; r < rows; ++r) ref[static_cast<std::size_t>((first + r) % C)] = maxp;
  expect_leaves(rb, ref, stream);
  if (::testing::Test::HasFatalFailure()) return;
  expect_tree_consistent(rb, stream);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(download_state(rb, stream).size, rb.size());

  const RingView v = rb.ring_view();
  const auto n = static_cast<std::size_t>(C);
  const auto obs = test::download(static_cast<const float*>(v.obs), n * static_cast<std::size_t>(D), stream);
  const auto next = test::download(static_cast<const float*>(v.next_obs), n * static_cast<std::size_t>(D), stream);
  const auto actions = test::download(v.actions, n, stream);
  const auto rewards = test::download(v.rewards, n, stream);
  const auto flags = test::download(v.flags, n, stream);
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto s = static_cast<std::size_t>((first + r) % C);
    const auto rr = static_cast<std::size_t>(r);
    for (std::int64_t e = 0; e < D; ++e) {
      const auto de = static_cast<std::size_t>(e), dd = static_cast<std::size_t>(D);
      ASSERT_EQ(obs[s * dd + de], h.obs[rr * dd + de]) << "row " << r << " slot " << s << " obs " << e;
      ASSERT_EQ(next[s * dd + de], h.next_obs[rr * dd + de]) << "row " << r << " slot " << s << " next obs " << e;
    }
    ASSERT_EQ(actions[s], static_cast<std::uint32_t>(h.actions[rr])) << "row " << r;
    ASSERT_EQ(rewards[s], h.rewards[rr]) << "row " << r;
    const std::uint8_t f =
        static_cast<std::uint8_t>((h.terminated[rr] ? kTerminatedBit : 0) | (h.truncated[rr] ? kTruncatedBit : 0));
    ASSERT_EQ(flags[s], f) << "row " << r;
  }
}

// A priority update of about `count` random stored slots (some repeated, TD errors up to 8, so
// the max priority rises now and then).
void random_update(ReplayBuffer& rb, std::int64_t count, std::vector<double>& ref, std::mt19937_64& rng,
                   cudaStream_t stream) {
  const std::int64_t size = rb.size();
  std::uniform_int_distribution<std::int32_t> slot(0, static_cast<std::int32_t>(size - 1));
  std::vector<std::int32_t> idx(static_cast<std::size_t>(std::max<std::int64_t>(1, count)));
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = (i > 0 && rng() % 5 == 0) ? idx[rng() % i] : slot(rng);
  const std::vector<float> td = test::random_uniform(idx.size(), 0.01f, 8.0f, rng);
  update(rb, idx, td, stream);
  apply_update(ref, idx, td, rb.config(), size);
}

TEST_F(ReplayInsertTreeTest, OneKernelInsertsOfEveryShapeKeepDataLeavesAndTreeExact) {
  SCOPED_TRACE(seed_note());
  // Trees: leaves only (top 0), one level (391 nodes, the last partial), two levels (1094 and 9
  // nodes; 1563 and 13 nodes), each with a capacity that is no multiple of 128; obs of 3
  // elements (the one-element copy path) and 4 (the four-element path).
  for (const std::int64_t C : std::vector<std::int64_t>{1000, 50003, 140000, 200003}) {
    const std::int64_t D = C % 2 == 0 ? 4 : 3;
    SCOPED_TRACE("capacity " + std::to_string(C) + ", obs_dim " + std::to_string(D));
    ReplayBuffer rb(tree_config(C, D), stream());
    const int p = rb.add_producer(1);
    std::vector<double> ref(static_cast<std::size_t>(C), 0.0);
    // batch 1, within one node, exactly one node when aligned, across node ends, many nodes,
    // capacity - 1 (wraps, ends inside the first insert's node), the whole capacity (wraps onto
    // its own first node), batch 1 again, and a capacity insert from a node-aligned start.
    std::vector<std::int64_t> sizes = {1, 127, 128, 129, 300, 4096, C - 1, C, 1, 5000, 129};
    const std::int64_t to_aligned =
        (128 - (1 + 127 + 128 + 129 + 300 + 4096 + (C - 1) + C + 1 + 5000 + 129) % 128) % 128;
    if (to_aligned > 0) sizes.push_back(to_aligned);
    sizes.push_back(C);
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const std::int64_t rows = std::min(sizes[i], C);
      SCOPED_TRACE("insert " + std::to_string(i) + ": " + std::to_string(rows) + " rows from slot " +
                   std::to_string(rb.inserted() % C));
      insert_and_check(rb, p, rows, ref, rng(), stream());
      if (HasFatalFailure()) return;
      random_update(rb, std::min<std::int64_t>(rb.size(), 2000), ref, rng(), stream());
      expect_leaves(rb, ref, stream());
      expect_tree_consistent(rb, stream());
      if (HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace foxhunt::rl
