// ReplayBuffer::save / load on the device: a buffer loaded from a snapshot continues exactly like
// the one that was saved (same further inserts, samples and priority updates give bitwise-equal
// batches, weights, ring, tree and state), and a mismatched or corrupt file is rejected naming
// the key while the target buffer stays unchanged.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/safetensors.hpp"
#include "tests/rl/replay_gpu_util.hpp"

namespace foxhunt::rl {
namespace {
namespace fs = std::filesystem;
using test_model::DeviceBlock;
using test_model::download_sample;
using test_model::HostSample;
using test_model::random_block;

class ReplaySnapshotTest : public test::GpuTest {
 protected:
  fs::path dir_ = fs::temp_directory_path() / ("foxhunt_replay_snapshot_" + std::to_string(::getpid()));
  void SetUp() override {
    test::GpuTest::SetUp();
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::remove_all(dir_);
    test::GpuTest::TearDown();
  }

  // Odd capacity (not a multiple of 128), 2 producers, n = 3, a beta anneal: every piece of
  // state is exercised (ring wrap, several tree levels need capacity > 1024).
  static ReplayConfig config(SamplingMode mode, gpu::DType obs_dtype) {
    ReplayConfig c;
    c.capacity = 5003;
    c.layout.obs_dim = 7;
    c.layout.obs_dtype = obs_dtype;
    c.mode = mode;
    c.batch_size = 96;
    c.n_step = 3;
    c.gamma = 0.97f;
    c.alpha = 0.7f;
    c.beta = 0.4f;
    c.beta_final = 1.0f;
    c.beta_anneal_steps = 50;
    c.seed = 1234;
    return c;
  }
  static void add_producers(ReplayBuffer& rb) {
    rb.add_producer(3);
    rb.add_producer(5);
  }

  // One round on `rbs` (all get the same inputs): an insert from each producer, a graph-safe
  // sample, a host-step sample and a priority update of the first sample's indices. Returns the
  // samples of every buffer (downloaded; none while fewer than batch_size are stored).
  std::vector<std::vector<HostSample>> round(const std::vector<ReplayBuffer*>& rbs, std::int64_t step) {
    const ReplayConfig& c = rbs[0]->config();
    std::uniform_int_distribution<int> steps(1, 40);
    for (int p = 0; p < 2; ++p) {
      const test_model::HostBlock h = random_block(steps(rng()), p == 0 ? 3 : 5, c.layout.obs_dim, 1, rng());
      DeviceBlock d(h, c.layout, stream());
      for (ReplayBuffer* rb : rbs) rb->insert(p, d.batch, stream());
      FH_CHECK(cudaStreamSynchronize(stream()));
    }
    std::vector<std::vector<HostSample>> out;
    if (rbs[0]->size() < c.batch_size) return out;  // the first rounds only fill
    std::vector<float> td(static_cast<std::size_t>(c.batch_size));
    std::normal_distribution<float> n(0.0f, 2.0f);
    for (float& x : td) x = n(rng());
    auto d_td = test::upload(td, stream());
    for (ReplayBuffer* rb : rbs) {
      SampledBatch s1 = rb->allocate_batch(), s2 = rb->allocate_batch();
      rb->sample(s1.view(), stream());
      rb->sample(s2.view(), step, stream());
      rb->update_priorities(s1.view().indices, d_td.data(), s1.batch(), stream());
      out.push_back({download_sample(s1.view(), c.layout, stream()), download_sample(s2.view(), c.layout, stream())});
    }
    return out;
  }

  // Every byte of the ring and tree and the state's fields (not its padding).
  static std::vector<std::vector<std::uint8_t>> dump(const ReplayBuffer& rb, cudaStream_t s) {
    const ReplayConfig& c = rb.config();
    const RingView r = rb.ring_view();
    const auto C = static_cast<std::size_t>(c.capacity);
    const std::size_t obs = C * static_cast<std::size_t>(c.layout.obs_dim) * gpu::dtype_size(c.layout.obs_dtype);
    auto bytes = [&](const void* p, std::size_t n) {
      return test::download(static_cast<const std::uint8_t*>(p), n, s);
    };
    std::vector<std::vector<std::uint8_t>> d = {
        bytes(r.obs, obs), bytes(r.next_obs, obs),  bytes(r.actions, C * 4),   bytes(r.rewards, C * 4),
        bytes(r.flags, C), bytes(r.returns, C * 4), bytes(r.discounts, C * 4), bytes(r.bootstrap, C * 4)};
    if (const TreeView* t = rb.tree_view()) {
      const TreeShape& sh = rb.tree_shape();
      d.push_back(bytes(t->leaves, static_cast<std::size_t>(sh.padded[0]) * 8));
      for (int k = 1; k <= sh.top; ++k) {
        const auto n = static_cast<std::size_t>(sh.padded[k]) * 4;
        d.push_back(bytes(t->sums[k], 2 * n));  // u64
        d.push_back(bytes(t->mins[k], n));
        d.push_back(bytes(t->dirty[k], n));
      }
    }
    const ReplayState st = test_model::download_state(rb, s);
    std::vector<std::uint8_t> f(36);
    std::memcpy(f.data(), &st.size, 8);
    std::memcpy(f.data() + 8, &st.sample_calls, 8);
    std::memcpy(f.data() + 16, &st.max_priority, 4);
    std::memcpy(f.data() + 20, &st.epoch, 4);
    std::memcpy(f.data() + 24, &st.insert_done, 4);
    std::memcpy(f.data() + 28, &st.sample_done, 4);
    std::memcpy(f.data() + 32, &st.update_done, 4);
    d.push_back(f);
    return d;
  }

  static void expect_same_samples(const HostSample& a, const HostSample& b, const std::string& what) {
    SCOPED_TRACE(what);
    EXPECT_EQ(a.indices, b.indices);
    auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
      return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * 4) == 0;
    };
    EXPECT_TRUE(same(a.weights, b.weights));
    EXPECT_TRUE(same(a.obs, b.obs));
    EXPECT_TRUE(same(a.next_obs, b.next_obs));
    EXPECT_TRUE(same(a.returns, b.returns));
    EXPECT_TRUE(same(a.discounts, b.discounts));
    EXPECT_EQ(a.actions, b.actions);
  }

  void continues_exactly(SamplingMode mode, gpu::DType obs_dtype) {
    SCOPED_TRACE(seed_note());
    const ReplayConfig c = config(mode, obs_dtype);
    ReplayBuffer a(c, stream());
    add_producers(a);
    std::int64_t step = 0;
    while (a.inserted() < c.capacity + 700) round({&a}, step++);  // wrapped, priorities updated
    const fs::path f = dir_ / "replay.safetensors";
    a.save(f, stream());

    ReplayBuffer b(c, stream());
    add_producers(b);
    b.load(f, stream());
    EXPECT_EQ(b.size(), a.size());
    EXPECT_EQ(b.inserted(), a.inserted());
    ASSERT_EQ(dump(b, stream()), dump(a, stream())) << "loaded buffer differs from the saved one";

    for (int i = 0; i < 40; ++i) {  // wraps the ring again
      const auto s = round({&a, &b}, step++);
      expect_same_samples(s[0][0], s[1][0], "graph-safe sample, round " + std::to_string(i));
      expect_same_samples(s[0][1], s[1][1], "host-step sample, round " + std::to_string(i));
      if (HasFailure()) break;
    }
    EXPECT_EQ(b.inserted(), a.inserted());
    EXPECT_EQ(dump(b, stream()), dump(a, stream())) << "buffers differ after the same further operations";

    // Saving is deterministic: the same state gives the same file.
    a.save(dir_ / "a2.safetensors", stream());
    b.save(dir_ / "b2.safetensors", stream());
    EXPECT_EQ(gpu::read_file_bytes(dir_ / "a2.safetensors"), gpu::read_file_bytes(dir_ / "b2.safetensors"));
  }

  // `load` must throw std::runtime_error containing `part`, leaving `rb` as it was.
  void expect_rejected(ReplayBuffer& rb, const fs::path& f, const std::string& part) {
    const auto before = dump(rb, stream());
    const std::int64_t inserted = rb.inserted();
    try {
      rb.load(f, stream());
      ADD_FAILURE() << "accepted " << f << "; expected an error containing '" << part << "'";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
    EXPECT_EQ(rb.inserted(), inserted);
    EXPECT_EQ(dump(rb, stream()), before) << "a rejected load changed the buffer";
  }
};

TEST_F(ReplaySnapshotTest, PrioritizedF32ContinuesBitwiseAfterLoad) {
  continues_exactly(SamplingMode::prioritized, gpu::DType::f32);
}

TEST_F(ReplaySnapshotTest, UniformBf16ContinuesBitwiseAfterLoad) {
  continues_exactly(SamplingMode::uniform, gpu::DType::bf16);
}

TEST_F(ReplaySnapshotTest, MismatchedOrCorruptFilesAreRejectedAndChangeNothing) {
  SCOPED_TRACE(seed_note());
  const ReplayConfig c = config(SamplingMode::prioritized, gpu::DType::f32);
  ReplayBuffer a(c, stream());
  add_producers(a);
  for (std::int64_t step = 0; step < 30; ++step) round({&a}, step);
  const fs::path f = dir_ / "replay.safetensors";
  a.save(f, stream());

  // The target holds data of its own, which a rejected load must keep.
  auto target = [&](ReplayConfig cfg, int producers = 2) {
    auto rb = std::make_unique<ReplayBuffer>(cfg, stream());
    rb->add_producer(3);
    if (producers > 1) rb->add_producer(5);
    for (std::int64_t step = 0; step < 3; ++step) {
      const test_model::HostBlock h = random_block(4, 3, cfg.layout.obs_dim, 1, rng());
      DeviceBlock d(h, cfg.layout, stream());
      rb->insert(0, d.batch, stream());
      FH_CHECK(cudaStreamSynchronize(stream()));
    }
    return rb;
  };
  {
    ReplayConfig x = c;
    x.capacity = 5004;
    expect_rejected(*target(x), f, "replay.capacity");
  }
  {
    ReplayConfig x = c;
    x.n_step = 2;
    expect_rejected(*target(x), f, "replay.n_step");
  }
  {
    ReplayConfig x = c;
    x.alpha = 0.6f;
    expect_rejected(*target(x), f, "replay.alpha");
  }
  {
    ReplayConfig x = c;
    x.mode = SamplingMode::uniform;
    expect_rejected(*target(x), f, "replay.mode");
  }
  {
    ReplayConfig x = c;
    x.layout.obs_dim = 8;
    expect_rejected(*target(x), f, "replay.layout.obs_dim");
  }
  expect_rejected(*target(c, 1), f, "producers");

  // Corrupt data (one flipped byte in the middle of the ring) and a truncated file.
  std::vector<std::byte> bytes = gpu::read_file_bytes(f);
  const fs::path bad = dir_ / "bad.safetensors";
  auto put = [&](const std::vector<std::byte>& b) {
    std::ofstream out(bad, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  };
  std::vector<std::byte> flipped = bytes;
  flipped[flipped.size() / 2] ^= std::byte{0x04};
  put(flipped);
  expect_rejected(*target(c), bad, "checksum");
  std::vector<std::byte> cut(bytes.begin(), bytes.end() - 100);
  put(cut);
  expect_rejected(*target(c), bad, bad.string());
  expect_rejected(*target(c), dir_ / "absent.safetensors", "absent.safetensors");

  // And the good file still loads into a matching buffer.
  auto ok = target(c);
  EXPECT_NO_THROW(ok->load(f, stream()));
  EXPECT_EQ(dump(*ok, stream()), dump(a, stream()));
}

}  // namespace
}  // namespace foxhunt::rl
