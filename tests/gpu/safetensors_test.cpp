// The safetensors reader/writer on the CPU: round trips, every kind of corrupt file rejected with
// its reason, and the atomic writer leaving the previous file intact when a write fails.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "gpu/safetensors.hpp"

namespace foxhunt::gpu {
namespace {

namespace fs = std::filesystem;

template <class T>
std::span<const std::byte> as_bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

// A fresh directory under the system temp dir, removed with everything in it afterwards.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "foxhunt_st_XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  fs::path path_;
};

std::vector<std::byte> bytes_of(const std::string& s) {
  std::vector<std::byte> v(s.size());
  std::memcpy(v.data(), s.data(), s.size());
  return v;
}

// [u64 header length][header][data]
std::vector<std::byte> make_file(const std::string& header, std::size_t data_bytes, std::uint64_t claimed = ~0ull) {
  const std::uint64_t n = claimed == ~0ull ? header.size() : claimed;
  std::vector<std::byte> out(8);
  std::memcpy(out.data(), &n, 8);
  const auto h = bytes_of(header);
  out.insert(out.end(), h.begin(), h.end());
  for (std::size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<std::byte>(i * 7 + 1));
  return out;
}

std::string rejection(const std::vector<std::byte>& file, const std::string& source = "model.safetensors") {
  try {
    parse_safetensors(file, source);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_REJECTED(file, reason)                                                                     \
  do {                                                                                                    \
    const std::string msg_ = rejection(file);                                                             \
    EXPECT_NE(msg_.find(reason), std::string::npos) << "want '" << (reason) << "', got '" << msg_ << "'"; \
    EXPECT_NE(msg_.find("model.safetensors"), std::string::npos) << msg_;                                 \
  } while (0)

struct Fixture {
  std::vector<float> w;
  std::vector<std::uint16_t> b;
  std::vector<std::int32_t> steps;
  std::vector<std::uint32_t> ids;
  std::vector<std::uint8_t> empty;
  std::vector<SafetensorsTensor> tensors;

  explicit Fixture(std::mt19937_64& rng) {
    std::uniform_real_distribution<float> d(-3.f, 3.f);
    w.resize(6);
    for (auto& x : w) x = d(rng);
    b = {0x3f80, 0xc000, static_cast<std::uint16_t>(rng()), 0x7f7f, 1};
    steps = {static_cast<std::int32_t>(rng())};
    ids = {1, 2, 3, 4, 5, static_cast<std::uint32_t>(rng())};
    tensors = {{"layer.w", DType::f32, {2, 3}, as_bytes_of(w)},
               {"layer.b", DType::bf16, {5}, as_bytes_of(b)},
               {"step", DType::i32, {}, as_bytes_of(steps)},
               {"ids", DType::u32, {3, 1, 2}, as_bytes_of(ids)},
               {"nothing", DType::u8, {0, 4}, as_bytes_of(empty)}};
  }
};

void expect_matches(const SafetensorsFile& f, const std::vector<SafetensorsTensor>& tensors) {
  ASSERT_EQ(f.entries.size(), tensors.size());
  for (const auto& t : tensors) {
    const SafetensorsEntry* e = f.find(t.name);
    ASSERT_NE(e, nullptr) << t.name;
    EXPECT_EQ(e->dtype, t.dtype) << t.name;
    EXPECT_EQ(e->shape, t.shape) << t.name;
    const auto got = f.bytes(*e);
    ASSERT_EQ(got.size(), t.data.size()) << t.name;
    EXPECT_TRUE(std::equal(got.begin(), got.end(), t.data.begin())) << t.name;
  }
}

TEST(Safetensors, RoundTripThroughAFile) {
  std::mt19937_64 rng(std::random_device{}());
  Fixture fx(rng);
  TempDir dir;
  const fs::path path = dir.path() / "ckpt.safetensors";
  const std::map<std::string, std::string> meta = {{"format", "foxhunt-arena"}, {"version", "1"}};
  write_safetensors_file(path, fx.tensors, meta);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"ckpt.safetensors"}) << "temp file left behind";
  const auto file = read_file_bytes(path);
  EXPECT_EQ(file, serialize_safetensors(fx.tensors, meta));
  std::uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  EXPECT_EQ(n % 8, 0u) << "header not padded to a multiple of 8";
  EXPECT_EQ(static_cast<char>(file[8]), '{');
  const SafetensorsFile f = parse_safetensors(file, path.string());
  expect_matches(f, fx.tensors);
  EXPECT_EQ(f.metadata, meta);
  EXPECT_EQ(f.find("absent"), nullptr);
  EXPECT_EQ(f.find("step")->numel(), 1);
  EXPECT_EQ(f.find("nothing")->numel(), 0);
  // Data section: exactly the tensors' bytes, in the order written.
  EXPECT_EQ(f.data.size(), 24u + 10u + 4u + 24u);
  EXPECT_EQ(f.find("layer.w")->begin, 0u);
  EXPECT_EQ(f.find("layer.b")->begin, 24u);
}

TEST(Safetensors, OverwriteReplacesTheFile) {
  std::mt19937_64 rng(std::random_device{}());
  Fixture a(rng), b(rng);
  TempDir dir;
  const fs::path path = dir.path() / "x.safetensors";
  write_safetensors_file(path, a.tensors, {});
  write_safetensors_file(path, b.tensors, {{"k", "v"}});
  const auto file = read_file_bytes(path);
  const auto f = parse_safetensors(file, path.string());
  expect_matches(f, b.tensors);
  EXPECT_EQ(f.metadata.at("k"), "v");
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"x.safetensors"});
}

TEST(Safetensors, WriterRejectsBadTensorLists) {
  std::vector<float> four(4);
  const std::vector<SafetensorsTensor> dup = {{"a", DType::f32, {4}, as_bytes_of(four)},
                                              {"a", DType::f32, {4}, as_bytes_of(four)}};
  EXPECT_THROW(serialize_safetensors(dup, {}), std::invalid_argument);
  const std::vector<SafetensorsTensor> wrong_size = {{"a", DType::f32, {5}, as_bytes_of(four)}};
  EXPECT_THROW(serialize_safetensors(wrong_size, {}), std::invalid_argument);
  const std::vector<SafetensorsTensor> negative = {{"a", DType::f32, {-4}, as_bytes_of(four)}};
  EXPECT_THROW(serialize_safetensors(negative, {}), std::invalid_argument);
  const std::vector<SafetensorsTensor> reserved = {{"__metadata__", DType::f32, {4}, as_bytes_of(four)}};
  EXPECT_THROW(serialize_safetensors(reserved, {}), std::invalid_argument);
}

const std::string kGood =
    R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})";

TEST(Safetensors, ValidHandMadeFileParses) {
  const auto f = parse_safetensors(make_file(kGood, 11), "model.safetensors");
  ASSERT_EQ(f.entries.size(), 2u);
  EXPECT_EQ(f.entries[0].name, "a");
  EXPECT_EQ(f.entries[1].dtype, DType::u8);
}

TEST(Safetensors, RejectsBrokenFraming) {
  EXPECT_REJECTED(std::vector<std::byte>(5), "shorter than 8 bytes");
  EXPECT_REJECTED(std::vector<std::byte>(), "shorter than 8 bytes");
  EXPECT_REJECTED(make_file(kGood, 11, kGood.size() + 100), "runs past the end of the file");
  EXPECT_REJECTED(make_file(kGood, 11, 200'000'000), "100 MB");
  // Truncated files: inside the data section, and inside the header.
  auto file = make_file(kGood, 11);
  file.pop_back();
  EXPECT_REJECTED(file, "out of range");
  file.resize(8 + kGood.size() / 2);
  EXPECT_REJECTED(file, "runs past the end of the file");
}

TEST(Safetensors, RejectsBadHeaders) {
  EXPECT_REJECTED(make_file(R"({"a": {"dtype": "F32",)", 0), "not valid JSON");
  EXPECT_REJECTED(make_file(R"({"a":1} trailing)", 0), "not valid JSON");
  EXPECT_REJECTED(make_file("[1, 2]", 0), "not a JSON object");
  EXPECT_REJECTED(make_file(R"({"a": 3})", 0), "tensor 'a': entry is not a JSON object");
  EXPECT_REJECTED(make_file(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", 8), "tensor 'a': missing 'dtype'");
  EXPECT_REJECTED(make_file(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", 8), "missing 'shape'");
  EXPECT_REJECTED(make_file(R"({"a":{"dtype":"F32","shape":[2]}})", 8), "missing 'data_offsets'");
  const std::string f16 = rejection(make_file(R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", 4));
  EXPECT_NE(f16.find("unsupported dtype 'F16'"), std::string::npos) << f16;
  EXPECT_NE(f16.find("allowed: F32, BF16, I32, U32, U8"), std::string::npos) << f16;
  EXPECT_REJECTED(make_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "negative dimension");
  EXPECT_REJECTED(make_file(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8), "non-integer");
  EXPECT_REJECTED(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}})", 8), "data_offsets must be");
  EXPECT_REJECTED(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-1,8]}})", 8), "data_offsets must be");
  EXPECT_REJECTED(make_file(R"({"__metadata__":{"k":1},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1),
                  "__metadata__ value for 'k' is not a string");
  EXPECT_REJECTED(make_file(R"({"__metadata__":[],"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1),
                  "__metadata__ is not a JSON object");
  EXPECT_REJECTED(
      make_file(
          R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
          2),
      "duplicate tensor name 'a'");
}

TEST(Safetensors, RejectsBadOffsets) {
  EXPECT_REJECTED(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8), "out of range");
  EXPECT_REJECTED(make_file(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8), "end before begin");
  EXPECT_REJECTED(make_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "size mismatch");
  EXPECT_REJECTED(make_file(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", 8),
                  "overflows");
  EXPECT_REJECTED(
      make_file(
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
          8),
      "overlap");
  EXPECT_REJECTED(
      make_file(
          R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}})",
          8),
      "gap");
  EXPECT_REJECTED(make_file(kGood, 12), "trailing 1 bytes");
  // A header with no tensors and an empty data section is a valid (empty) file.
  EXPECT_EQ(parse_safetensors(make_file("{}", 0), "x").entries.size(), 0u);
  EXPECT_REJECTED(make_file("{}", 3), "trailing 3 bytes");
}

// --- the atomic writer -------------------------------------------------------------------

std::vector<SafetensorsTensor> one_tensor(const std::vector<float>& v) {
  return {{"w", DType::f32, {static_cast<std::int64_t>(v.size())}, as_bytes_of(v)}};
}

TEST(SafetensorsWriter, PathThatIsADirectoryFailsAndLeavesNoTempFile) {
  TempDir dir;
  const fs::path target = dir.path() / "ckpt.safetensors";
  fs::create_directory(target);
  std::ofstream(target / "keep.txt") << "precious";
  const std::vector<float> v(100, 1.f);
  try {
    write_safetensors_file(target, one_tensor(v), {});
    ADD_FAILURE() << "writing over a directory did not throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(target.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("renaming"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_directory(target));
  EXPECT_TRUE(fs::exists(target / "keep.txt"));
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"ckpt.safetensors"}) << "temp file left behind";
}

TEST(SafetensorsWriter, MissingDirectoryFailsNamingThePath) {
  TempDir dir;
  const fs::path target = dir.path() / "no_such_dir" / "ckpt.safetensors";
  const std::vector<float> v(4, 1.f);
  try {
    write_safetensors_file(target, one_tensor(v), {});
    ADD_FAILURE() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(target.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(dir.listing().empty());
}

// A write that fails half-way (file size limit: EFBIG) keeps the previous checkpoint intact.
// Works as root too, unlike permission-based failures.
TEST(SafetensorsWriter, FailedWriteKeepsThePreviousFile) {
  TempDir dir;
  const fs::path target = dir.path() / "ckpt.safetensors";
  const std::vector<float> old_values(64, 2.5f);
  write_safetensors_file(target, one_tensor(old_values), {{"gen", "old"}});
  const auto before = read_file_bytes(target);

  const std::vector<float> big(1 << 16, -1.f);  // 256 KiB: above the limit set below
  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto* old_handler = ::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the default kill
  struct rlimit small = saved;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    write_safetensors_file(target, one_tensor(big), {{"gen", "new"}});
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, old_handler);

  EXPECT_NE(message.find("File too large"), std::string::npos) << "want an EFBIG failure, got '" << message << "'";
  EXPECT_NE(message.find(target.string()), std::string::npos) << message;
  EXPECT_EQ(read_file_bytes(target), before) << "the previous file changed";
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"ckpt.safetensors"}) << "temp file left behind";
}

TEST(SafetensorsWriter, UnwritableDirectoryFails) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: directory permissions do not stop root";
  TempDir dir;
  const fs::path target = dir.path() / "ckpt.safetensors";
  const std::vector<float> v(4, 1.f);
  write_safetensors_file(target, one_tensor(v), {});
  const auto before = read_file_bytes(target);
  fs::permissions(dir.path(), fs::perms::owner_read | fs::perms::owner_exec);
  const std::vector<float> w(4, 9.f);
  EXPECT_THROW(write_safetensors_file(target, one_tensor(w), {}), std::runtime_error);
  fs::permissions(dir.path(), fs::perms::owner_all);
  EXPECT_EQ(read_file_bytes(target), before);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"ckpt.safetensors"});
}

TEST(SafetensorsReader, MissingFileNamesThePath) {
  try {
    read_file_bytes("/nonexistent/foxhunt/x.safetensors");
    ADD_FAILURE() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/foxhunt/x.safetensors"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace foxhunt::gpu
