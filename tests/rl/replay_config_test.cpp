// Replay configuration, tree shape and slot bookkeeping: host-only, no device needed.
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>

#include "rl/replay/config.hpp"
#include "rl/replay/slots.hpp"
#include "rl/replay/tree_shape.hpp"

namespace foxhunt::rl {
namespace {

ReplayConfig good_config() {
  ReplayConfig c;
  c.capacity = 1 << 16;
  c.layout.obs_dim = 64;
  c.batch_size = 256;
  c.n_step = 3;
  return c;
}

// Expects std::invalid_argument whose message names `key` (and, when given, contains `also`).
void expect_rejected(const std::function<void()>& fn, const std::string& key, const std::string& also = "") {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected one naming " << key;
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(key), std::string::npos) << "message: " << msg;
    if (!also.empty()) {
      EXPECT_NE(msg.find(also), std::string::npos) << "message: " << msg;
    }
  }
}

TEST(ReplayConfigTest, GoodConfigPasses) {
  EXPECT_NO_THROW(good_config().validate());
  ReplayConfig c = good_config();
  c.alpha = 0.0f;  // uniform by priorities: allowed
  c.beta = 0.0f;
  c.beta_final = 1.0f;
  c.layout.obs_dtype = gpu::DType::bf16;
  c.layout.action_kind = ActionKind::continuous;
  c.layout.action_dim = 6;
  EXPECT_NO_THROW(c.validate());
}

TEST(ReplayConfigTest, EachBadKeyIsNamed) {
  auto check = [](auto mutate, const std::string& key, const std::string& also = "") {
    ReplayConfig c = good_config();
    mutate(c);
    expect_rejected([&] { c.validate(); }, key, also);
  };
  check([](ReplayConfig& c) { c.capacity = 0; }, "replay.capacity", "got 0");
  check([](ReplayConfig& c) { c.capacity = -5; }, "replay.capacity");
  check([](ReplayConfig& c) { c.capacity = std::int64_t{1} << 31; }, "replay.capacity");
  check([](ReplayConfig& c) { c.alpha = -1.0f; }, "replay.alpha must be >= 0, got -1");
  check([](ReplayConfig& c) { c.beta = -0.1f; }, "replay.beta", "[0, 1]");
  check([](ReplayConfig& c) { c.beta = 1.5f; }, "replay.beta", "got 1.5");
  check([](ReplayConfig& c) { c.beta_final = 2.0f; }, "replay.beta_final");
  check([](ReplayConfig& c) { c.beta_anneal_steps = -1; }, "replay.beta_anneal_steps");
  check([](ReplayConfig& c) { c.eps = 0.0f; }, "replay.eps");
  check([](ReplayConfig& c) { c.gamma = 1.5f; }, "replay.gamma");
  check([](ReplayConfig& c) { c.n_step = 0; }, "replay.n_step");
  check([](ReplayConfig& c) { c.n_step = 33; }, "replay.n_step");
  check([](ReplayConfig& c) { c.batch_size = 0; }, "replay.batch_size");
  check([](ReplayConfig& c) { c.batch_size = c.capacity + 1; }, "replay.batch_size");
  check([](ReplayConfig& c) { c.layout.obs_dim = 0; }, "replay.layout.obs_dim");
  check([](ReplayConfig& c) { c.layout.obs_dtype = gpu::DType::i32; }, "replay.layout.obs_dtype", "I32");
  check([](ReplayConfig& c) { c.layout.action_dim = 0; }, "replay.layout.action_dim");
  check([](ReplayConfig& c) { c.layout.action_dim = 3; }, "replay.layout.action_dim", "discrete");
}

TEST(ReplayConfigTest, CapacityThatDoesNotFitTheDeviceIsRejected) {
  ReplayConfig c = good_config();
  c.capacity = 1 << 24;  // 64 f32 obs + next obs: over 8 GiB
  EXPECT_GT(c.device_bytes(), std::size_t{8} << 30);
  expect_rejected([&] { c.validate(std::size_t{1} << 30); }, "replay.capacity", "bytes of device memory");
  EXPECT_NO_THROW(c.validate(c.device_bytes()));
}

TEST(ReplayConfigTest, DeviceBytesCountsRingAndTree) {
  ReplayConfig c = good_config();
  const std::size_t per = 2 * 64 * 4 + 4 + 4 + 1 + 12;
  EXPECT_EQ(c.layout.bytes_per_transition(), per);
  ReplayConfig u = c;
  u.mode = SamplingMode::uniform;
  EXPECT_EQ(c.device_bytes() - u.device_bytes(), TreeShape::for_capacity(c.capacity).bytes());
  c.layout.obs_dtype = gpu::DType::bf16;
  EXPECT_EQ(c.layout.bytes_per_transition(), per - 2 * 64 * 2);
}

TEST(ReplayConfigTest, BetaAnnealsLinearlyThenHolds) {
  ReplayConfig c = good_config();
  c.beta = 0.4f;
  c.beta_final = 1.0f;
  c.beta_anneal_steps = 1000;
  EXPECT_NEAR(c.beta_at(0), 0.4, 1e-7);
  EXPECT_NEAR(c.beta_at(250), 0.55, 1e-7);
  EXPECT_NEAR(c.beta_at(1000), 1.0, 1e-7);
  EXPECT_NEAR(c.beta_at(5000), 1.0, 1e-7);
  c.beta_anneal_steps = 0;
  EXPECT_NEAR(c.beta_at(5000), 0.4, 1e-7);
}

TEST(ReplayTreeShapeTest, LevelsAndPadding) {
  const TreeShape small = TreeShape::for_capacity(1000);
  EXPECT_EQ(small.top, 0);
  EXPECT_EQ(small.padded[0], 1024);

  const TreeShape mid = TreeShape::for_capacity(5000);
  EXPECT_EQ(mid.top, 1);
  EXPECT_EQ(mid.count[1], 40);  // ceil(5000 / 128)
  EXPECT_EQ(mid.padded[1], 128);

  const TreeShape big = TreeShape::for_capacity(std::int64_t{1} << 24);
  EXPECT_EQ(big.top, 2);
  EXPECT_EQ(big.count[1], std::int64_t{1} << 17);
  EXPECT_EQ(big.count[2], 1024);

  const TreeShape odd = TreeShape::for_capacity(200003);
  EXPECT_EQ(odd.top, 2);
  EXPECT_EQ(odd.count[1], 1563);
  EXPECT_EQ(odd.count[2], 13);

  const TreeShape largest = TreeShape::for_capacity(ReplayConfig::kMaxCapacity);
  EXPECT_LE(largest.count[largest.top], TreeShape::kMaxTop);
  EXPECT_LT(largest.top, TreeShape::kMaxLevels);
  for (int k = 0; k <= largest.top; ++k) EXPECT_EQ(largest.padded[k] % TreeShape::kFanout, 0);
}

TEST(ReplaySlotAllocatorTest, ReservesByCountsAndWraps) {
  SlotAllocator s(100, 1);
  const int a = s.add_producer(4);
  const int b = s.add_producer(3);
  Reservation r1 = s.reserve(a, 10);  // 40 rows
  EXPECT_EQ(r1.first_global, 0);
  EXPECT_EQ(r1.rows, 40);
  EXPECT_EQ(r1.filled_after, 40);
  Reservation r2 = s.reserve(b, 20);  // 60 rows
  EXPECT_EQ(r2.first_global, 40);
  EXPECT_EQ(r2.filled_after, 100);
  Reservation r3 = s.reserve(a, 5);  // wraps: globals 100..119 -> slots 0..19
  EXPECT_EQ(r3.first_global, 100);
  EXPECT_EQ(r3.filled_after, 100);
  EXPECT_EQ(s.head(), 120);
  EXPECT_EQ(r3.window.oldest_stored_global, 20);
  EXPECT_EQ(r3.window.step_begin, 10);  // n = 1: only the new steps
  EXPECT_EQ(r3.window.step_end, 15);
}

TEST(ReplaySlotAllocatorTest, NStepWindowReachesBackAcrossBlocks) {
  SlotAllocator s(1000, 4);
  const int p = s.add_producer(2);
  const int q = s.add_producer(5);
  s.reserve(p, 1);                        // steps 0      globals 0..1
  s.reserve(q, 3);                        //              globals 2..16
  s.reserve(p, 1);                        // step 1       globals 17..18
  s.reserve(p, 2);                        // steps 2..3   globals 19..22
  const Reservation r = s.reserve(p, 5);  // steps 4..8, globals 23..32
  const NStepWindow& w = r.window;
  // Steps 1..3 (n - 1 = 3 back) are recomputed: blocks [1], [2..3] and the new one.
  EXPECT_EQ(w.step_begin, 1);
  EXPECT_EQ(w.step_end, 9);
  EXPECT_EQ(w.new_first_step, 4);
  ASSERT_EQ(w.num_blocks, 3);
  EXPECT_EQ(w.blocks[0].first_global, 17);
  EXPECT_EQ(w.blocks[0].first_step, 1);
  EXPECT_EQ(w.blocks[1].first_global, 19);
  EXPECT_EQ(w.blocks[2].first_global, 23);
  EXPECT_EQ(w.envs, 2);

  // A long block drops everything older than n - 1 steps back.
  const Reservation r2 = s.reserve(p, 50);
  EXPECT_EQ(r2.window.step_begin, 9 - 3);
  EXPECT_EQ(r2.window.num_blocks, 2);
}

TEST(ReplaySlotAllocatorTest, WindowNeverExceedsTheBlockTable) {
  SlotAllocator s(1 << 20, ReplayConfig::kMaxNStep);
  const int p = s.add_producer(1);
  for (int i = 0; i < 100; ++i) {
    const Reservation r = s.reserve(p, 1);
    EXPECT_LE(r.window.num_blocks, kMaxNStepBlocks);
    EXPECT_EQ(r.window.step_begin, std::max(0, i - (ReplayConfig::kMaxNStep - 1)));
  }
}

TEST(ReplaySlotAllocatorTest, BadProducerAndOversizedBlocksAreNamed) {
  SlotAllocator s(100, 3);
  const int p = s.add_producer(10);
  expect_rejected([&] { s.reserve(p + 1, 1); }, "replay.producer");
  expect_rejected([&] { s.reserve(p, 11); }, "replay.insert.steps");
  expect_rejected([&] { s.reserve(p, 0); }, "replay.insert.steps");
  expect_rejected([&] { s.add_producer(0); }, "replay.producer.envs");
  expect_rejected([&] { s.add_producer(101); }, "replay.producer.envs");
  expect_rejected([] { SlotAllocator(0, 1); }, "replay.capacity");
  expect_rejected([] { SlotAllocator(10, 0); }, "replay.n_step");
}

}  // namespace
}  // namespace foxhunt::rl
