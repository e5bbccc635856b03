// The run directory (apps/run_dir.hpp): --overwrite lists what it replaces, removes exactly that,
// and the log says so; a directory that is not empty is refused without --overwrite.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "apps/run_dir.hpp"

namespace foxhunt::apps {
namespace {

namespace fs = std::filesystem;

class RunDir : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("foxhunt_run_dir_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(RunDir, OverwriteRemovesThePreviousRunAndTheLogNamesIt) {
  const fs::path dir = root_ / "old";
  fs::create_directories(dir / "checkpoints" / "step_1");
  std::ofstream(dir / "train.log") << "previous run\n";
  EXPECT_THROW(plan_run_dir(dir, false, std::nullopt), std::invalid_argument);

  const RunDirPlan plan = plan_run_dir(dir, true, std::nullopt);
  ASSERT_EQ(plan.replaced.size(), 2u);
  EXPECT_TRUE(fs::exists(dir / "train.log")) << "planning must not remove anything";
  prepare_run_dir(plan);
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_TRUE(fs::is_empty(dir));

  std::ostringstream log;
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("run_dir_test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  warn_replaced(plan);
  warn_replaced(plan_run_dir(root_ / "new", false, std::nullopt));  // nothing replaced: silent
  spdlog::set_default_logger(previous);
  const std::string text = log.str();
  EXPECT_NE(text.find("--overwrite: replaced the contents of " + dir.string()), std::string::npos) << text;
  for (const std::string& entry : plan.replaced) EXPECT_NE(text.find(entry), std::string::npos) << entry;
  EXPECT_EQ(text.find("new"), std::string::npos) << text;
}

}  // namespace
}  // namespace foxhunt::apps
