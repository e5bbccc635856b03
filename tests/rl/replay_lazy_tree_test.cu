// The lazy tree: inserts and priority updates write leaves and dirty bits only; refresh_tree
// rebuilds the dirty nodes. After many interleaved inserts (wrapping, of every size) and updates
// (repeats, skipped entries) with no sample in between, one refresh must leave every node of
// every level bit for bit equal to an eager rebuild from the leaves (the CPU reference below
// reproduces the device's summation order: per lane (c0 + c1) + (c2 + c3) in double, then the
// xor butterfly over 32 lanes, rounded once to float), and a second refresh must change nothing.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tests/rl/replay_gpu_util.hpp"

namespace foxhunt::rl {
namespace {

using namespace test_model;

class ReplayLazyTreeTest : public test::GpuTest {};

ReplayConfig lazy_config(std::int64_t capacity) {
  ReplayConfig c;
  c.capacity = capacity;
  c.layout.obs_dim = 2;
  c.batch_size = std::min<std::int64_t>(64, capacity);
  c.n_step = 2;
  c.alpha = 0.6f;
  c.eps = 1e-6f;
  c.seed = 0x1a2bULL;
  return c;
}

std::uint32_t bits_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

// The device's node_sum on the CPU: lane l holds children 4l..4l+3.
float node_sum_ref(const float* c) {
  double v[32];
  for (int l = 0; l < 32; ++l)
    v[l] = (static_cast<double>(c[4 * l]) + static_cast<double>(c[4 * l + 1])) +
           (static_cast<double>(c[4 * l + 2]) + static_cast<double>(c[4 * l + 3]));
  for (int o = 16; o > 0; o >>= 1) {
    double w[32];
    for (int l = 0; l < 32; ++l) w[l] = v[l] + v[l ^ o];
    std::copy(w, w + 32, v);
  }
  return static_cast<float>(v[0]);
}

// Refreshes, then compares every node of levels 1..top (padding included) bit for bit with the
// eager rebuild of the downloaded leaves, and checks that the dirty bitmap is clear.
void expect_tree_bitwise(ReplayBuffer& rb, cudaStream_t stream) {
  rb.refresh_tree(stream);
  const TreeView* t = rb.tree_view();
  const TreeShape& shape = rb.tree_shape();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> below = download_leaves(rb, stream);
  below.resize(static_cast<std::size_t>(shape.padded[0]), 0.0f);
  std::vector<float> below_min(below.size());
  for (std::size_t i = 0; i < below.size(); ++i) below_min[i] = below[i] > 0.0f ? below[i] : inf;
  for (int k = 1; k <= shape.top; ++k) {
    const auto n = static_cast<std::size_t>(shape.padded[k]);
    const auto sums = test::download(t->sums[k], n, stream);
    const auto mins = test::download(t->mins[k], n, stream);
    const auto dirty = test::download(t->dirty[k], n, stream);
    std::vector<float> want_sum(n, 0.0f), want_min(n, inf);
    for (std::size_t q = 0; q < static_cast<std::size_t>(shape.count[k]); ++q) {
      want_sum[q] = node_sum_ref(below.data() + q * 128);
      float m = inf;
      for (std::size_t c = 0; c < 128; ++c) m = std::min(m, below_min[q * 128 + c]);
      want_min[q] = m;
    }
    for (std::size_t q = 0; q < n; ++q) {
      ASSERT_EQ(bits_of(sums[q]), bits_of(want_sum[q]))
          << "level " << k << " node " << q << ": sum " << sums[q] << ", eager rebuild " << want_sum[q];
      ASSERT_EQ(bits_of(mins[q]), bits_of(want_min[q]))
          << "level " << k << " node " << q << ": min " << mins[q] << ", eager rebuild " << want_min[q];
      ASSERT_EQ(dirty[q], 0u) << "level " << k << " word " << q << " still dirty after the refresh";
    }
    below = sums;
    below_min = mins;
  }
}

// Capacities: leaves only (top 0), one level (40 nodes: the top == 1 ownership path), two levels
// with odd sizes (1094 / 9 and 1563 / 13 nodes). 80 operations without a sample: inserts of 1 ..
// C - 1 rows (several wrap, some from a producer with many envs) and updates of up to 6000
// entries (a fifth repeated, a few outside the stored range or non-finite), then one refresh.
TEST_F(ReplayLazyTreeTest, InterleavedInsertsAndUpdatesThenOneRefreshEqualAnEagerRebuild) {
  SCOPED_TRACE(seed_note());
  for (const std::int64_t C : std::vector<std::int64_t>{1000, 5000, 140000, 200003}) {
    SCOPED_TRACE("capacity " + std::to_string(C));
    const ReplayConfig cfg = lazy_config(C);
    ReplayBuffer rb(cfg, stream());
    const int single = rb.add_producer(1), wide = rb.add_producer(97);
    std::vector<double> ref(static_cast<std::size_t>(C), 0.0);
    for (int phase = 0; phase < 2; ++phase) {
      SCOPED_TRACE("phase " + std::to_string(phase));
      for (int op = 0; op < 40; ++op) {
        const bool do_insert = rb.size() == 0 || rng()() % 3 == 0;
        if (do_insert) {
          const float maxp = download_state(rb, stream()).max_priority;
          const std::int64_t first = rb.inserted();
          std::int64_t rows;
          if (rng()() % 4 == 0) {  // (steps, 97) block from the wide producer
            const std::int64_t steps = 1 + static_cast<std::int64_t>(rng()() % static_cast<std::uint64_t>(std::max<std::int64_t>(1, C / 97 / 3)));
            rows = steps * 97;
            if (rows > C) continue;
            DeviceBlock d(random_block(steps, 97, cfg.layout.obs_dim, 1, rng()), cfg.layout, stream());
            rb.insert(wide, d.batch, stream());
            FH_CHECK(cudaStreamSynchronize(stream()));
          } else {
            const std::uint64_t pick = rng()() % 8;
            rows = pick == 0 ? C - 1 : pick < 3 ? 1 + static_cast<std::int64_t>(rng()() % 300)
                                                : 1 + static_cast<std::int64_t>(rng()() % static_cast<std::uint64_t>(C / 3));
            DeviceBlock d(random_block(rows, 1, cfg.layout.obs_dim, 1, rng()), cfg.layout, stream());
            rb.insert(single, d.batch, stream());
            FH_CHECK(cudaStreamSynchronize(stream()));
          }
          for (std::int64_t r = 0; r < rows; ++r) ref[static_cast<std::size_t>((first + r) % C)] = maxp;
        } else {
          const std::int64_t size = rb.size();
          std::vector<std::int32_t> idx(1 + rng()() % 6000);
          for (std::size_t i = 0; i < idx.size(); ++i) {
            const std::uint64_t c = rng()() % 100;
            if (i > 0 && c < 20) idx[i] = idx[rng()() % i];
            else if (c < 22) idx[i] = static_cast<std::int32_t>(size + static_cast<std::int64_t>(rng()() % 50));  // not stored
            else if (c < 23) idx[i] = -1;
            else idx[i] = static_cast<std::int32_t>(rng()() % static_cast<std::uint64_t>(size));
          }
          std::vector<float> td = test::random_uniform(idx.size(), -6.0f, 6.0f, rng());
          td[rng()() % td.size()] = std::numeric_limits<float>::quiet_NaN();  // skipped
          update(rb, idx, td, stream());
          std::vector<float> finite_td = td;
          std::vector<std::int32_t> finite_idx = idx;
          for (std::size_t i = 0; i < td.size(); ++i)
            if (!std::isfinite(td[i])) finite_idx[i] = -1;  // the reference skips it as the device does
          apply_update(ref, finite_idx, finite_td, cfg, size);
        }
      }
      expect_leaves(rb, ref, stream());
      if (HasFatalFailure()) return;
      expect_tree_bitwise(rb, stream());
      if (HasFatalFailure()) return;
      expect_tree_bitwise(rb, stream());  // a refresh of a clean tree changes nothing
      if (HasFatalFailure()) return;
    }
  }
}

// The sample refreshes by itself: after an update that puts nearly all the mass on one slot, the
// very next sample (no explicit refresh) draws that slot for almost every stratum.
TEST_F(ReplayLazyTreeTest, SampleSeesTheUpdateBeforeIt) {
  SCOPED_TRACE(seed_note());
  const ReplayConfig cfg = lazy_config(200003);
  ReplayBuffer rb(cfg, stream());
  insert_rows(rb, rb.add_producer(1), 150000, rng(), stream());
  const std::int32_t hot = static_cast<std::int32_t>(rng()() % 150000);
  update(rb, {hot}, {1e9f}, stream());  // leaf (1e9)^0.6 ~ 2.5e5 against 150000 leaves of 1
  SampledBatch out = rb.allocate_batch(1000);
  rb.sample(out.view(), 0, stream());
  const HostSample s = download_sample(out.view(), cfg.layout, stream());
  const auto hits = std::count(s.indices.begin(), s.indices.end(), hot);
  // mass share ~ 2.5e5 / 4e5 = 0.62: stratified draws give ~620 of 1000 (a stale tree gives ~0)
  EXPECT_GT(hits, 500) << "slot " << hot;
  EXPECT_LT(hits, 750) << "slot " << hot;
}

}  // namespace
}  // namespace foxhunt::rl
