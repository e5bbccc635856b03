// gpu/atomic_file on the CPU: a replacement that works, and failures (a blocked temporary path, a
// write cut short by the file-size limit) that leave the previous file byte for byte and no
// temporary file behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/atomic_file.hpp"

namespace foxhunt::gpu {
namespace {

namespace fs = std::filesystem;

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "foxhunt_af_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  static std::vector<char> read(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
  static std::vector<std::span<const std::byte>> pieces(const std::string& a, const std::string& b) {
    return {std::as_bytes(std::span<const char>(a)), std::as_bytes(std::span<const char>(b))};
  }
  fs::path dir_;
};

TEST_F(AtomicFileTest, ReplacesTheFileWithTheConcatenation) {
  const fs::path target = dir_ / "state.bin";
  { std::ofstream(target, std::ios::binary) << "an older and longer content"; }
  write_file_atomically(target, pieces("new ", "bytes"), "state");
  const std::vector<char> got = read(target);
  EXPECT_EQ(std::string(got.begin(), got.end()), "new bytes");
  EXPECT_EQ(listing(), std::vector<std::string>{"state.bin"});
}

// Something in the way of the temporary file (here a directory of that name): the write fails,
// names the path and `what`, and the previous file is untouched.
TEST_F(AtomicFileTest, BlockedTempPathKeepsThePreviousFile) {
  const fs::path target = dir_ / "state.bin";
  { std::ofstream(target, std::ios::binary) << "previous"; }
  const fs::path tmp = target.string() + ".tmp." + std::to_string(::getpid());
  fs::create_directory(tmp);
  std::string message;
  try {
    write_file_atomically(target, pieces("replacement", ""), "learner state");
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("cannot write learner state '" + target.string() + "'"), std::string::npos) << message;
  const std::vector<char> got = read(target);
  EXPECT_EQ(std::string(got.begin(), got.end()), "previous");
  fs::remove(tmp);
  EXPECT_EQ(listing(), std::vector<std::string>{"state.bin"});
}

// A write that fails half-way (file-size limit: EFBIG; works as root, unlike permissions).
TEST_F(AtomicFileTest, WriteCutShortKeepsThePreviousFile) {
  const fs::path target = dir_ / "state.bin";
  { std::ofstream(target, std::ios::binary) << "previous"; }
  const std::string big(256 * 1024, 'x');
  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto* old_handler = ::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the default kill
  struct rlimit small = saved;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    write_file_atomically(target, pieces(big, "tail"), "state");
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(message.find("File too large"), std::string::npos) << "want an EFBIG failure, got '" << message << "'";
  const std::vector<char> got = read(target);
  EXPECT_EQ(std::string(got.begin(), got.end()), "previous");
  EXPECT_EQ(listing(), std::vector<std::string>{"state.bin"}) << "temporary file left behind";
}

}  // namespace
}  // namespace foxhunt::gpu
