// gpu/nccl: world size 1 on the one device (the all-reduce mean and the broadcast are the identity
// bit for bit, eagerly and captured in a CUDA graph; the flag max is the identity; buckets of any
// size give the same bytes); the id's hex round trip; and, on a host with two or more devices,
// every device as one rank of a communicator (one thread each): the mean of distinct random
// buffers against a float64 reference, the flag max, the broadcast. The multi-rank test skips,
// saying why, with fewer than two devices.
#include <cstring>
#include <stdexcept>
#include <limits>
#include <thread>
#include <vector>

#include "gpu/graph.hpp"
#include "gpu/nccl.hpp"
#include "tests/support/gpu_test.hpp"

namespace foxhunt::gpu {
namespace {

class NcclTest : public test::GpuTest {};

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Random values with the awkward ones mixed in: the mean of one value must keep them all.
std::vector<float> awkward_values(std::size_t n, std::mt19937_64& rng) {
  auto v = test::random_uniform(n, -3.f, 3.f, rng);
  v[1] = -0.f;
  v[2] = std::numeric_limits<float>::denorm_min();
  v[3] = std::numeric_limits<float>::infinity();
  v[4] = std::numeric_limits<float>::max();
  return v;
}

TEST(NcclIdTest, HexRoundTripAndErrors) {
  NcclId id{};
  for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<std::uint8_t>(i * 37 + 11);
  const std::string hex = to_hex(id);
  EXPECT_EQ(hex.size(), 2 * id.size());
  EXPECT_EQ(nccl_id_from_hex(hex), id);
  EXPECT_THROW(nccl_id_from_hex(hex.substr(1)), std::invalid_argument);
  std::string bad = hex;
  bad[5] = 'g';
  EXPECT_THROW(nccl_id_from_hex(bad), std::invalid_argument);
}

TEST_F(NcclTest, WorldOneAllReduceAndBroadcastAreTheIdentity) {
  SCOPED_TRACE(seed_note());
  NcclCommunicator comm(nccl_unique_id(), 1, 0);
  EXPECT_EQ(comm.world(), 1);
  EXPECT_EQ(comm.async_error(), "");
  const std::size_t n = 100'003;  // not a multiple of any bucket below
  const auto host = awkward_values(n, rng());
  for (const std::int64_t bucket : {std::int64_t{0}, std::int64_t{1024}, std::int64_t{77'777}}) {
    SCOPED_TRACE("bucket " + std::to_string(bucket));
    auto buf = test::upload(host, stream());
    comm.all_reduce_mean(buf.data(), static_cast<std::int64_t>(n), stream(), bucket);
    EXPECT_TRUE(bits_equal(test::download(buf.data(), n, stream()), host));
  }
  auto buf = test::upload(host, stream());
  comm.broadcast(buf.data(), static_cast<std::int64_t>(n), 0, stream());
  EXPECT_TRUE(bits_equal(test::download(buf.data(), n, stream()), host));

  const std::vector<std::uint32_t> flags{0u, 1u, 7u};
  auto f = test::upload(flags, stream());
  comm.max_u32(f.data(), 3, stream());
  EXPECT_EQ(test::download(f.data(), 3, stream()), flags);
  EXPECT_THROW(comm.broadcast(buf.data(), 4, 1, stream()), std::invalid_argument);
  EXPECT_THROW(NcclCommunicator(nccl_unique_id(), 1, 1), std::invalid_argument);
}

TEST_F(NcclTest, WorldOneCollectivesReplayInACudaGraph) {
  SCOPED_TRACE(seed_note());
  NcclCommunicator comm(nccl_unique_id(), 1, 0);
  const std::size_t n = 4096 + 13;
  const auto host = awkward_values(n, rng());
  auto buf = test::upload(host, stream());
  const std::vector<std::uint32_t> flags{3u, 0u};
  auto f = test::upload(flags, stream());
  CudaGraph graph;
  graph.capture(stream(), [&](cudaStream_t cs) {
    comm.all_reduce_mean(buf.data(), static_cast<std::int64_t>(n), cs, 1000);
    comm.max_u32(f.data(), 2, cs);
  });
  ASSERT_TRUE(graph.captured());
  for (int i = 0; i < 5; ++i) graph.replay(stream());
  EXPECT_TRUE(bits_equal(test::download(buf.data(), n, stream()), host));
  EXPECT_EQ(test::download(f.data(), 2, stream()), flags);
}

// Every device one rank, one thread per rank (NCCL's one-process, several-GPU setup).
TEST(NcclMultiGpuTest, EveryDeviceOneRankAllReduceMeanMaxAndBroadcast) {
  std::string why;
  const int devices = device_count(&why);
  if (devices < 2)
    GTEST_SKIP() << "needs >= 2 CUDA devices (one rank per device; two ranks sharing one GPU are not a valid NCCL "
                    "setup), found "
                 << devices << (why.empty() ? "" : ": " + why);
  const std::uint64_t seed = test::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FOXHUNT_TEST_SEED)");
  const int world = devices;
  const std::size_t n = 1 << 20;
  std::vector<std::vector<float>> inputs(static_cast<std::size_t>(world));
  std::mt19937_64 rng(seed);
  for (auto& in : inputs) in = test::random_uniform(n, -1.f, 1.f, rng);
  std::vector<double> mean(n, 0.0);
  for (const auto& in : inputs)
    for (std::size_t i = 0; i < n; ++i) mean[i] += in[i] / static_cast<double>(world);

  const NcclId id = nccl_unique_id();
  std::vector<std::vector<float>> reduced(static_cast<std::size_t>(world)), bcast(reduced.size());
  std::vector<std::uint32_t> flag_max(reduced.size());
  std::vector<std::string> errors(reduced.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        FH_CHECK(cudaSetDevice(r));
        Stream s;
        NcclCommunicator comm(id, world, r);
        auto buf = test::upload(inputs[static_cast<std::size_t>(r)], s);
        comm.all_reduce_mean(buf.data(), static_cast<std::int64_t>(n), s, 100'000);
        std::vector<std::uint32_t> flag{r == world - 1 ? 1u : 0u};
        auto f = test::upload(flag, s);
        comm.max_u32(f.data(), 1, s);
        auto b = test::upload(inputs[static_cast<std::size_t>(r)], s);
        comm.broadcast(b.data(), static_cast<std::int64_t>(n), 0, s);
        reduced[static_cast<std::size_t>(r)] = test::download(buf.data(), n, s);
        flag_max[static_cast<std::size_t>(r)] = test::download(f.data(), 1, s)[0];
        bcast[static_cast<std::size_t>(r)] = test::download(b.data(), n, s);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_EQ(errors[static_cast<std::size_t>(r)], "");
    // Every rank holds the same bytes (replicas must not diverge) ...
    EXPECT_TRUE(bits_equal(reduced[static_cast<std::size_t>(r)], reduced[0]));
    EXPECT_EQ(flag_max[static_cast<std::size_t>(r)], 1u);
    EXPECT_TRUE(bits_equal(bcast[static_cast<std::size_t>(r)], inputs[0]));
  }
  // ... and the mean within float rounding: world - 1 additions of |x| <= 1 plus the scaling.
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(reduced[0][i] - mean[i]));
  EXPECT_LE(worst, 4.0 * world * std::numeric_limits<float>::epsilon());
}

}  // namespace
}  // namespace foxhunt::gpu
