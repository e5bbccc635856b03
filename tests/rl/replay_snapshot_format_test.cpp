// The replay checkpoint's host parts, no device needed: the slot allocator's export/import and
// the streaming snapshot file (host-only tensors) with its checksums and rejections.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/safetensors.hpp"
#include "rl/replay/slots.hpp"
#include "rl/replay/snapshot.hpp"

namespace foxhunt::rl {
namespace {
namespace fs = std::filesystem;

// Two producers, n = 3, blocks of varying length: the export holds several recent blocks.
SlotAllocator busy_allocator(std::mt19937_64& rng) {
  SlotAllocator a(1000, 3);
  a.add_producer(4);
  a.add_producer(7);
  std::uniform_int_distribution<int> steps(1, 5), who(0, 1);
  for (int i = 0; i < 60; ++i) a.reserve(who(rng), steps(rng));
  return a;
}

TEST(ReplaySnapshotFormat, SlotStateRoundTripsAndContinuesIdentically) {
  std::mt19937_64 rng(std::random_device{}());
  SlotAllocator a = busy_allocator(rng);
  const std::vector<std::int64_t> words = a.export_state();
  SlotAllocator b(1000, 3);
  b.add_producer(4);
  b.add_producer(7);
  b.import_state(words);
  EXPECT_EQ(b.export_state(), words);
  EXPECT_EQ(b.head(), a.head());
  EXPECT_EQ(b.filled(), a.filled());
  // The same further reservations give the same slots and n-step windows.
  for (int i = 0; i < 20; ++i) {
    const int p = i % 2;
    const std::int64_t s = 1 + i % 4;
    const Reservation ra = a.reserve(p, s), rb = b.reserve(p, s);
    ASSERT_EQ(ra.first_global, rb.first_global);
    ASSERT_EQ(ra.filled_after, rb.filled_after);
    ASSERT_EQ(ra.window.num_blocks, rb.window.num_blocks);
    ASSERT_EQ(ra.window.step_begin, rb.window.step_begin);
    ASSERT_EQ(ra.window.step_end, rb.window.step_end);
    for (int k = 0; k < ra.window.num_blocks; ++k) {
      ASSERT_EQ(ra.window.blocks[k].first_global, rb.window.blocks[k].first_global);
      ASSERT_EQ(ra.window.blocks[k].first_step, rb.window.blocks[k].first_step);
      ASSERT_EQ(ra.window.blocks[k].steps, rb.window.blocks[k].steps);
    }
  }
}

TEST(ReplaySnapshotFormat, SlotStateRejectsMismatchesAndKeepsItsState) {
  std::mt19937_64 rng(std::random_device{}());
  const std::vector<std::int64_t> words = busy_allocator(rng).export_state();
  auto rejects = [&](SlotAllocator& target, const std::vector<std::int64_t>& w, const std::string& part) {
    const std::vector<std::int64_t> before = target.export_state();
    try {
      target.import_state(w);
      ADD_FAILURE() << "accepted; expected a message containing '" << part << "'";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
    EXPECT_EQ(target.export_state(), before) << "a rejected import changed the allocator";
  };
  SlotAllocator one(1000, 3);
  one.add_producer(4);
  rejects(one, words, "producers");
  SlotAllocator other_envs(1000, 3);
  other_envs.add_producer(4);
  other_envs.add_producer(8);
  rejects(other_envs, words, "envs");
  SlotAllocator ok(1000, 3);
  ok.add_producer(4);
  ok.add_producer(7);
  rejects(ok, std::vector<std::int64_t>(words.begin(), words.end() - 1), "truncated");
  std::vector<std::int64_t> longer = words;
  longer.push_back(0);
  rejects(ok, longer, "trailing");
  std::vector<std::int64_t> bad_head = words;
  bad_head[0] += 1;  // the producers' rows no longer add up
  rejects(ok, bad_head, "");
}

class SnapshotFile : public ::testing::Test {
 protected:
  fs::path dir_ = fs::temp_directory_path() / ("foxhunt_snapshot_" + std::to_string(::getpid()));
  void SetUp() override { fs::create_directories(dir_); }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<float> a_ = std::vector<float>(1001);
  std::vector<std::uint8_t> b_ = std::vector<std::uint8_t>(37);
  fs::path write(std::size_t chunk = kSnapshotChunkBytes) {
    std::mt19937_64 rng(std::random_device{}());
    std::normal_distribution<float> n(1.0f, 3.0f);
    for (float& x : a_) x = n(rng);
    for (auto& x : b_) x = static_cast<std::uint8_t>(1 + rng() % 255);
    const std::vector<SnapshotTensor> t = {{"a", gpu::DType::f32, {7, 143}, nullptr, std::as_bytes(std::span(a_))},
                                           {"b", gpu::DType::u8, {37}, nullptr, std::as_bytes(std::span(b_))}};
    const fs::path f = dir_ / "s.safetensors";
    write_snapshot_file(f, t, {{"format", "test"}}, nullptr, chunk);
    return f;
  }
  static std::vector<std::byte> bytes_of(const fs::path& f) { return gpu::read_file_bytes(f); }
  static void put(const fs::path& f, const std::vector<std::byte>& b) {
    std::ofstream out(f, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
};

TEST_F(SnapshotFile, IsSafetensorsAndReadsBack) {
  const fs::path f = write();
  const std::vector<std::byte> all = bytes_of(f);
  const gpu::SafetensorsFile parsed = gpu::parse_safetensors(all, f.string());  // a standard file
  ASSERT_NE(parsed.find("a"), nullptr);
  EXPECT_EQ(parsed.metadata.at("format"), "test");
  EXPECT_EQ(parsed.metadata.at("checksum.a").size(), 16u);

  for (const std::size_t chunk : {std::size_t{8}, std::size_t{24}, kSnapshotChunkBytes}) {  // chunk-independent
    const SnapshotReader r(f, chunk);
    std::vector<std::string> problems;
    const gpu::SafetensorsEntry* ea = r.expect("a", gpu::DType::f32, {7, 143}, problems);
    const gpu::SafetensorsEntry* eb = r.expect("b", gpu::DType::u8, {37}, problems);
    r.verify(problems);
    ASSERT_TRUE(problems.empty()) << problems.front();
    const auto ha = r.read_host(*ea);
    const auto hb = r.read_host(*eb);
    ASSERT_EQ(ha.size(), a_.size() * 4);
    EXPECT_EQ(std::memcmp(ha.data(), a_.data(), ha.size()), 0);
    EXPECT_EQ(std::memcmp(hb.data(), b_.data(), hb.size()), 0);
  }
  // Written in small chunks: the same bytes.
  const std::vector<float> a = a_;
  const std::vector<std::uint8_t> b = b_;
  const std::vector<SnapshotTensor> t = {{"a", gpu::DType::f32, {7, 143}, nullptr, std::as_bytes(std::span(a))},
                                         {"b", gpu::DType::u8, {37}, nullptr, std::as_bytes(std::span(b))}};
  write_snapshot_file(dir_ / "t.safetensors", t, {{"format", "test"}}, nullptr, 16);
  EXPECT_EQ(bytes_of(dir_ / "t.safetensors"), all);
  EXPECT_FALSE(fs::exists(f.string() + ".tmp." + std::to_string(::getpid())));
}

TEST_F(SnapshotFile, ExpectNamesWrongShapeAndDtype) {
  const SnapshotReader r(write());
  std::vector<std::string> problems;
  EXPECT_EQ(r.expect("a", gpu::DType::f32, {143, 7}, problems), nullptr);
  EXPECT_EQ(r.expect("b", gpu::DType::i32, {37}, problems), nullptr);
  EXPECT_EQ(r.expect("c", gpu::DType::u8, {1}, problems), nullptr);
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_NE(problems[0].find("'a'"), std::string::npos) << problems[0];
  EXPECT_NE(problems[1].find("'b'"), std::string::npos) << problems[1];
  EXPECT_NE(problems[2].find("missing tensor 'c'"), std::string::npos) << problems[2];
}

TEST_F(SnapshotFile, CorruptDataFailsItsChecksum) {
  const fs::path f = write();
  std::vector<std::byte> all = bytes_of(f);
  all[all.size() - 40] ^= std::byte{0x10};  // inside tensor a (the last 37 bytes are b)
  put(f, all);
  const SnapshotReader r(f);
  std::vector<std::string> problems;
  r.verify(problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("'a'"), std::string::npos) << problems[0];
}

TEST_F(SnapshotFile, TruncatedOrGarbageFilesAreRejectedByName) {
  const fs::path f = write();
  std::vector<std::byte> all = bytes_of(f);
  all.resize(all.size() - 1);
  put(f, all);
  try {
    SnapshotReader r(f);
    ADD_FAILURE() << "a truncated file was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(f.string()), std::string::npos) << e.what();
  }
  put(f, std::vector<std::byte>(5, std::byte{1}));
  EXPECT_THROW(SnapshotReader{f}, std::runtime_error);
  EXPECT_THROW(SnapshotReader{dir_ / "absent"}, std::runtime_error);
}

TEST_F(SnapshotFile, BadTensorListsAreRefused) {
  const std::vector<float> x(4, 1.0f);
  const auto bytes = std::as_bytes(std::span(x));
  const std::vector<SnapshotTensor> dup = {{"x", gpu::DType::f32, {4}, nullptr, bytes},
                                           {"x", gpu::DType::f32, {4}, nullptr, bytes}};
  EXPECT_THROW(write_snapshot_file(dir_ / "d", dup, {}, nullptr), std::invalid_argument);
  const std::vector<SnapshotTensor> size = {{"x", gpu::DType::f32, {5}, nullptr, bytes}};
  EXPECT_THROW(write_snapshot_file(dir_ / "d", size, {}, nullptr), std::invalid_argument);
  const std::vector<SnapshotTensor> ok = {{"x", gpu::DType::f32, {4}, nullptr, bytes}};
  EXPECT_THROW(write_snapshot_file(dir_ / "d", ok, {{"checksum.x", "0"}}, nullptr), std::invalid_argument);
  EXPECT_FALSE(fs::exists(dir_ / "d"));
}

}  // namespace
}  // namespace foxhunt::rl
