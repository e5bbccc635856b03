// CheckpointStore's retention: keep_newest(n) leaves the n newest step directories, always the one
// just written, and `latest` names the newest; temporary directories are never counted or removed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "actors/checkpoint_store.hpp"

using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

std::set<std::string> step_dirs(const fs::path& root) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory()) out.insert(e.path().filename().string());
  return out;
}

fs::path fresh(const char* tag) {
  const fs::path d = fs::temp_directory_path() / ("foxhunt_store_" + std::string(tag) + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

TEST(CheckpointStoreTest, KeepsTheNewestAndTheOneJustWritten) {
  const fs::path root = fresh("keep");
  CheckpointStore store(root);
  store.keep_newest(3);
  fs::create_directories(root / "step_000000000001.tmp");  // a crashed write: not a checkpoint
  for (std::int64_t s = 1; s <= 8; ++s) {
    const fs::path d = store.write(Counters{s * 100, s, s}, [](const fs::path&) {});
    EXPECT_TRUE(fs::exists(d / "counters.json"));
  }
  EXPECT_EQ(step_dirs(root), (std::set<std::string>{"step_000000000001.tmp", "step_000000000600", "step_000000000700",
                                                    "step_000000000800"}));
  ASSERT_TRUE(CheckpointStore::latest(root).has_value());
  EXPECT_EQ(CheckpointStore::latest(root)->filename(), "step_000000000800");
  // A write at an older step (a resume into a directory holding later ones) keeps the new one.
  store.write(Counters{150, 1, 1}, [](const fs::path&) {});
  EXPECT_TRUE(fs::exists(root / "step_000000000150"));
  EXPECT_EQ(CheckpointStore::latest(root)->filename(), "step_000000000150");
  EXPECT_EQ(step_dirs(root).size(), 4u);  // 3 step directories + the .tmp
  fs::remove_all(root);
}

TEST(CheckpointStoreTest, ZeroKeepsEverything) {
  const fs::path root = fresh("all");
  CheckpointStore store(root);
  for (std::int64_t s = 1; s <= 6; ++s) store.write(Counters{s, s, s}, {});
  EXPECT_EQ(step_dirs(root).size(), 6u);
  fs::remove_all(root);
}

}  // namespace
