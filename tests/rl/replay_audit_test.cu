// The replay buffer never copies: insert, sample and priority update perform zero device-to-host
// (and zero other) memcpys, directly and as CUDA graph replays; a captured sample + update keeps
// drawing fresh batches and re-prioritising on every replay.
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "gpu/graph.hpp"
#include "gpu/transfer_audit.hpp"
#include "tests/rl/replay_gpu_util.hpp"

namespace foxhunt::rl {
namespace {

using namespace test_model;

class ReplayAuditTest : public test::GpuTest {
 protected:
  bool start_or_skip(gpu::TransferAudit& audit) {
    try {
      audit.start();
      return true;
    } catch (const gpu::TransferAuditUnavailable& e) {
      skip_reason_ = e.what();
      return false;
    }
  }
  std::string skip_reason_;
};

#define START_OR_SKIP(audit) \
  if (!start_or_skip(audit)) GTEST_SKIP() << "CUPTI unavailable: " << skip_reason_

ReplayConfig audit_config() {
  ReplayConfig c;
  c.capacity = 200003;  // two tree levels above the leaves
  c.layout.obs_dim = 64;
  c.layout.obs_dtype = gpu::DType::bf16;
  c.batch_size = 256;
  c.n_step = 3;
  c.beta_anneal_steps = 10;
  return c;
}

TEST_F(ReplayAuditTest, InsertSampleAndUpdateMakeNoCopies) {
  SCOPED_TRACE(seed_note());
  const ReplayConfig cfg = audit_config();
  ReplayBuffer rb(cfg, stream());
  const int p = rb.add_producer(500), q = rb.add_producer(7);
  std::vector<std::unique_ptr<DeviceBlock>> blocks;
  for (int i = 0; i < 6; ++i)
    blocks.push_back(std::make_unique<DeviceBlock>(random_block(i % 2 ? 3 : 100, i % 2 ? 7 : 500, 64, 1, rng()),
                                                   cfg.layout, stream(), i == 2));
  SampledBatch out = rb.allocate_batch();
  const auto td = test::upload(test::random_uniform(256, -2.0f, 2.0f, rng()), stream());
  FH_CHECK(cudaDeviceSynchronize());

  gpu::TransferAudit audit;
  START_OR_SKIP(audit);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 6; ++i) rb.insert(i % 2 ? q : p, blocks[i]->batch, stream());  // wraps in round 3
    rb.sample(out.view(), round, stream());
    rb.update_priorities(out.view().indices, td.data(), 256, stream());
    rb.sample(out.view(), stream());
    rb.update_priorities(out.view().indices, td.data(), 256, stream());
  }
  FH_CHECK(cudaStreamSynchronize(stream()));
  const gpu::TransferCounts c = audit.stop();
  SCOPED_TRACE(c.str());
  EXPECT_EQ(c.device_to_host, 0);
  EXPECT_EQ(c.total(), 0);  // nothing in either direction: the host passes counts only
  EXPECT_EQ(c.dropped_records, 0u);
  EXPECT_GT(rb.inserted(), cfg.capacity);
}

TEST_F(ReplayAuditTest, CapturedSampleAndUpdateReplayWithFreshDrawsAndNoCopies) {
  SCOPED_TRACE(seed_note());
  const ReplayConfig cfg = audit_config();
  ReplayBuffer rb(cfg, stream());
  const int p = rb.add_producer(1000);
  DeviceBlock block(random_block(150, 1000, 64, 1, rng()), cfg.layout, stream());
  rb.insert(p, block.batch, stream());
  SampledBatch out = rb.allocate_batch();
  const std::vector<float> td_host = test::random_uniform(256, 0.5f, 4.0f, rng());
  const auto td = test::upload(td_host, stream());

  gpu::CudaGraph step;
  step.capture(stream(), [&](cudaStream_t s) {
    rb.sample(out.view(), s);
    rb.update_priorities(out.view().indices, td.data(), 256, s);
  });
  FH_CHECK(cudaDeviceSynchronize());

  gpu::TransferAudit audit;
  START_OR_SKIP(audit);
  for (int i = 0; i < 5; ++i) step.replay(stream());
  FH_CHECK(cudaStreamSynchronize(stream()));
  const gpu::TransferCounts c = audit.stop();
  SCOPED_TRACE(c.str());
  EXPECT_EQ(c.device_to_host, 0);
  EXPECT_EQ(c.total(), 0);

  // Each replay drew a new batch (the Philox counter lives on the device) ...
  const ReplayState st = download_state(rb, stream());
  EXPECT_EQ(st.sample_calls, 5u);
  std::set<std::vector<std::int32_t>> batches;
  for (int i = 0; i < 3; ++i) {
    step.replay(stream());
    batches.insert(test::download(out.view().indices, 256, stream()));
  }
  EXPECT_EQ(batches.size(), 3u);
  // ... and re-prioritised what it drew: the last batch's leaves carry its TD errors (the
  // largest one where an index repeats).
  const auto idx = test::download(out.view().indices, 256, stream());
  const auto leaves = download_leaves(rb, stream());
  std::map<std::int32_t, double> want;
  for (std::size_t i = 0; i < idx.size(); ++i) {
    const double pr = std::pow(std::fabs(static_cast<double>(td_host[i])) + cfg.eps, static_cast<double>(cfg.alpha));
    want[idx[i]] = std::max(want[idx[i]], pr);
  }
  for (const auto& [j, pr] : want) EXPECT_NEAR(leaves[j], pr, 1e-6 * pr) << "slot " << j;
}

}  // namespace
}  // namespace foxhunt::rl
