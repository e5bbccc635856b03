// ParameterArena: layout (256-byte aligned offsets, zero padding), views, and checkpoint
// save/load through safetensors, including the guarantee that a bad file changes nothing.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "gpu/arena.hpp"
#include "gpu/safetensors.hpp"
#include "support/gpu_test.hpp"

namespace foxhunt::gpu {
namespace {

namespace fs = std::filesystem;

class ArenaTest : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    std::string tmpl = (fs::temp_directory_path() / "foxhunt_arena_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
    test::GpuTest::TearDown();
  }

  // Odd sizes so that every tensor but the aligned ones leaves padding behind it.
  static void declare_model(ParameterArena& a) {
    a.declare("embed", {7, 33});  // 231 floats
    a.declare("w1", {33, 65});    // 2145
    a.declare("b1", {65});
    a.declare("scale", {});         // scalar
    a.declare("w2", {4, 4, 4, 2});  // 128: a multiple of 64, no padding
    a.declare("b2", {1});
  }

  // Random (non-zero) values in every tensor of every array; padding untouched.
  void randomize(ParameterArena& a) {
    for (const auto& e : a.entries()) {
      a.upload_param(e.name, test::random_normal(e.numel, 0.f, 1.f, rng()), stream());
      for (float* base : {a.grads(), a.adam_m(), a.adam_v()}) {
        const auto host = test::random_uniform(e.numel, 0.1f, 2.f, rng());
        FH_CHECK(cudaMemcpyAsync(base + e.offset, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice,
                                 stream()));
      }
    }
    FH_CHECK(cudaStreamSynchronize(stream()));
  }

  struct Snapshot {
    std::vector<float> p, g, m, v;
  };
  Snapshot snapshot(const ParameterArena& a) {
    const auto n = static_cast<std::size_t>(a.padded_count());
    return {test::download(a.params(), n, stream()), test::download(a.grads(), n, stream()),
            test::download(a.adam_m(), n, stream()), test::download(a.adam_v(), n, stream())};
  }
  static bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  }

  fs::path dir_;
};

TEST_F(ArenaTest, LayoutIsAlignedPackedAndInDeclarationOrder) {
  ParameterArena a;
  declare_model(a);
  EXPECT_FALSE(a.finalized());
  a.finalize(stream());
  ASSERT_EQ(a.entries().size(), 6u);
  const std::vector<std::string> order = {"embed", "w1", "b1", "scale", "w2", "b2"};
  std::int64_t expect_offset = 0, total = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto& e = a.entries()[i];
    EXPECT_EQ(e.name, order[i]);
    EXPECT_EQ(e.offset, expect_offset) << e.name;
    EXPECT_EQ(e.offset % ParameterArena::kAlignFloats, 0) << e.name;
    EXPECT_EQ(e.numel, e.shape.numel());
    for (const TensorView& view : {a.param(e.name), a.grad(e.name), a.adam_m(e.name), a.adam_v(e.name)}) {
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(view.data) % 256, 0u) << e.name;
      EXPECT_EQ(view.dtype, DType::f32);
      EXPECT_EQ(view.shape, e.shape);
    }
    EXPECT_EQ(a.param(e.name).as<float>(), a.params() + e.offset);
    EXPECT_EQ(a.grad(e.name).as<float>(), a.grads() + e.offset);
    EXPECT_EQ(a.adam_m(e.name).as<float>(), a.adam_m() + e.offset);
    EXPECT_EQ(a.adam_v(e.name).as<float>(), a.adam_v() + e.offset);
    total += e.numel;
    expect_offset = (e.offset + e.numel + 63) / 64 * 64;
  }
  EXPECT_EQ(a.count(), total);
  EXPECT_EQ(a.count(), 231 + 2145 + 65 + 1 + 128 + 1);
  EXPECT_EQ(a.padded_count(), expect_offset);
  EXPECT_EQ(a.entry("w1").shape, Shape({33, 65}));
}

TEST_F(ArenaTest, PaddingIsZeroAndZeroGradsClearsGradients) {
  SCOPED_TRACE(seed_note());
  ParameterArena a;
  declare_model(a);
  a.finalize(stream());
  randomize(a);
  const Snapshot s = snapshot(a);
  std::vector<bool> used(a.padded_count(), false);
  for (const auto& e : a.entries())
    for (std::int64_t i = 0; i < e.numel; ++i) used[e.offset + i] = true;
  std::int64_t padding = 0;
  for (std::int64_t i = 0; i < a.padded_count(); ++i) {
    if (used[i]) {
      ASSERT_NE(s.p[i], 0.f) << "tensor element " << i << " was not written";
      continue;
    }
    ++padding;
    for (const auto* arr : {&s.p, &s.g, &s.m, &s.v}) {
      std::uint32_t bits;
      std::memcpy(&bits, &(*arr)[i], 4);
      ASSERT_EQ(bits, 0u) << "padding element " << i << " is not zero";
    }
  }
  EXPECT_GT(padding, 0);
  a.zero_grads(stream());
  for (float g : test::download(a.grads(), a.padded_count(), stream())) ASSERT_EQ(g, 0.f);
}

TEST_F(ArenaTest, SaveLoadRoundTripIsBitwiseWithOptimizerState) {
  SCOPED_TRACE(seed_note());
  ParameterArena a;
  declare_model(a);
  a.finalize(stream());
  randomize(a);
  const fs::path path = dir_ / "ckpt.safetensors";
  a.save(path, stream(), /*with_optimizer_state=*/true);

  const auto file_bytes = read_file_bytes(path);
  const auto file = parse_safetensors(file_bytes, path.string());
  EXPECT_EQ(file.entries.size(), 3 * a.entries().size());
  EXPECT_EQ(file.metadata.at("format"), "foxhunt-arena");
  EXPECT_EQ(file.metadata.at("version"), "1");
  EXPECT_NE(file.find("adam_m.w1"), nullptr);
  EXPECT_EQ(file.find("w2")->shape, (std::vector<std::int64_t>{4, 4, 4, 2}));
  EXPECT_TRUE(file.find("scale")->shape.empty());

  ParameterArena b;
  declare_model(b);
  b.finalize(stream());
  randomize(b);  // different contents everywhere before the load
  EXPECT_TRUE(b.load(path, stream()));
  const Snapshot sa = snapshot(a), sb = snapshot(b);
  EXPECT_TRUE(bitwise_equal(sa.p, sb.p)) << "parameters differ after load";
  EXPECT_TRUE(bitwise_equal(sa.m, sb.m)) << "adam m differs after load";
  EXPECT_TRUE(bitwise_equal(sa.v, sb.v)) << "adam v differs after load";
  EXPECT_FALSE(bitwise_equal(sa.g, sb.g)) << "gradients are not part of a checkpoint";
}

TEST_F(ArenaTest, WeightsOnlyCheckpointResetsOptimizerState) {
  SCOPED_TRACE(seed_note());
  ParameterArena a, b;
  declare_model(a);
  declare_model(b);
  a.finalize(stream());
  b.finalize(stream());
  randomize(a);
  randomize(b);
  const fs::path path = dir_ / "weights.safetensors";
  a.save(path, stream());
  EXPECT_EQ(parse_safetensors(read_file_bytes(path), "w").entries.size(), a.entries().size());
  EXPECT_FALSE(b.load(path, stream()));
  const Snapshot sa = snapshot(a), sb = snapshot(b);
  EXPECT_TRUE(bitwise_equal(sa.p, sb.p));
  for (float x : sb.m) ASSERT_EQ(x, 0.f);
  for (float x : sb.v) ASSERT_EQ(x, 0.f);
}

TEST_F(ArenaTest, StateTensorsAreCheckpointedButOutsideTheParameters) {
  SCOPED_TRACE(seed_note());
  ParameterArena a, b;
  for (ParameterArena* x : {&a, &b}) {
    x->declare("w", {3, 5});
    x->declare_state("grid", {3, 7});
  }
  EXPECT_THROW(a.declare("grid", {2}), std::invalid_argument);
  EXPECT_THROW(a.declare_state("w", {2}), std::invalid_argument);
  a.finalize(stream());
  b.finalize(stream());
  EXPECT_EQ(a.count(), 15);
  EXPECT_FALSE(a.contains("grid"));
  EXPECT_EQ(a.state_entry("grid").numel, 21);
  EXPECT_GE(a.state_padded_count(), 21);
  const auto g = test::random_normal(21, 0.f, 1.f, rng());
  const auto w = test::random_normal(15, 0.f, 1.f, rng());
  a.upload_state("grid", g, stream());
  a.upload_param("w", w, stream());
  const fs::path path = dir_ / "state.safetensors";
  a.save(path, stream(), /*with_optimizer_state=*/true);
  const auto file = parse_safetensors(read_file_bytes(path), path.string());
  EXPECT_NE(file.find("grid"), nullptr);
  EXPECT_EQ(file.find("adam_m.grid"), nullptr) << "state tensors have no optimizer moments";
  EXPECT_TRUE(b.load(path, stream()));
  EXPECT_EQ(test::download(b.state("grid").as<float>(), 21, stream()), g);
  EXPECT_EQ(test::download(b.param("w").as<float>(), 15, stream()), w);
  // A checkpoint without the state tensor is refused.
  ParameterArena c;
  c.declare("w", {3, 5});
  c.finalize(stream());
  const fs::path no_state = dir_ / "no_state.safetensors";
  c.save(no_state, stream());
  EXPECT_THROW(b.load(no_state, stream()), std::runtime_error);
}

// Writes `tensors` (float payloads given by shape) to a file; dtype per tensor.
struct Spec {
  std::string name;
  std::vector<std::int64_t> shape;
  DType dtype = DType::f32;
};
fs::path write_file(const fs::path& path, const std::vector<Spec>& specs) {
  std::vector<std::vector<std::byte>> payloads;
  for (const auto& s : specs) {
    std::int64_t n = 1;
    for (auto d : s.shape) n *= d;
    payloads.emplace_back(static_cast<std::size_t>(n) * dtype_size(s.dtype), std::byte{0x3f});
  }
  std::vector<SafetensorsTensor> tensors;
  for (std::size_t i = 0; i < specs.size(); ++i)
    tensors.push_back({specs[i].name, specs[i].dtype, specs[i].shape, payloads[i]});
  write_safetensors_file(path, tensors, {});
  return path;
}

std::vector<Spec> model_specs() {
  return {{"embed", {7, 33}}, {"w1", {33, 65}}, {"b1", {65}}, {"scale", {}}, {"w2", {4, 4, 4, 2}}, {"b2", {1}}};
}

TEST_F(ArenaTest, BadFilesAreRejectedAndChangeNothing) {
  SCOPED_TRACE(seed_note());
  ParameterArena a;
  declare_model(a);
  a.finalize(stream());
  randomize(a);
  const Snapshot before = snapshot(a);

  struct Case {
    std::string label;
    std::vector<Spec> specs;
    std::string reason;
  };
  std::vector<Case> cases;
  {
    auto s = model_specs();
    s[1].shape = {65, 33};
    cases.push_back({"wrong shape", s, "tensor 'w1' has shape [65, 33] in the file, the arena declares [33, 65]"});
  }
  {
    auto s = model_specs();
    s.erase(s.begin() + 2);
    cases.push_back({"missing tensor", s, "missing tensor 'b1'"});
  }
  {
    auto s = model_specs();
    s[0].dtype = DType::bf16;
    cases.push_back({"wrong dtype", s, "tensor 'embed' has dtype BF16; the arena loads F32 only"});
  }
  {
    auto s = model_specs();
    s.push_back({"stray.bias", {3}});
    cases.push_back({"unknown tensor", s, "tensors not in the arena: 'stray.bias'"});
  }
  {
    auto s = model_specs();
    s.push_back({"adam_m.w1", {33, 65}});
    cases.push_back({"partial optimizer state", s, "missing tensor 'adam_v.w1'"});
  }
  {
    auto s = model_specs();
    s[3].shape = {1};  // a scalar saved as [1] is a different shape
    cases.push_back({"scalar as [1]", s, "tensor 'scale' has shape [1]"});
  }
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    const fs::path path = write_file(dir_ / (std::to_string(&c - cases.data()) + ".safetensors"), c.specs);
    try {
      a.load(path, stream());
      ADD_FAILURE() << "load accepted a file with " << c.label;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(c.reason), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
    }
    const Snapshot after = snapshot(a);
    EXPECT_TRUE(bitwise_equal(before.p, after.p) && bitwise_equal(before.g, after.g) &&
                bitwise_equal(before.m, after.m) && bitwise_equal(before.v, after.v))
        << "a rejected load changed device memory";
  }
  // A corrupt (truncated) file is rejected by the parser, also before any upload.
  const fs::path good = write_file(dir_ / "good.safetensors", model_specs());
  auto bytes = read_file_bytes(good);
  bytes.resize(bytes.size() - 3);
  const fs::path cut = dir_ / "cut.safetensors";
  {
    std::FILE* f = std::fopen(cut.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
  EXPECT_THROW(a.load(cut, stream()), std::runtime_error);
  EXPECT_THROW(a.load(dir_ / "absent.safetensors", stream()), std::runtime_error);
  const Snapshot after = snapshot(a);
  EXPECT_TRUE(bitwise_equal(before.p, after.p) && bitwise_equal(before.m, after.m));
  // Extra tensors are accepted when asked for; the payload 0x3f3f3f3f lands in every parameter.
  auto s = model_specs();
  s.push_back({"stray.bias", {3}});
  EXPECT_FALSE(a.load(write_file(dir_ / "extra.safetensors", s), stream(), /*allow_unknown=*/true));
  std::uint32_t bits;
  const auto p = test::download(a.params(), 1, stream());
  std::memcpy(&bits, p.data(), 4);
  EXPECT_EQ(bits, 0x3f3f3f3fu);
}

TEST_F(ArenaTest, MisuseIsRejectedWithClearMessages) {
  ParameterArena a;
  a.declare("w", {2, 2});
  EXPECT_THROW(a.declare("w", {3}), std::invalid_argument);
  EXPECT_THROW(a.declare("", {3}), std::invalid_argument);
  EXPECT_THROW(a.declare("adam_m.w", {3}), std::invalid_argument);
  EXPECT_THROW(a.declare("z", {0, 3}), std::invalid_argument);
  EXPECT_THROW(a.param("w"), std::logic_error);  // before finalize
  a.finalize(stream());
  EXPECT_THROW(a.declare("late", {1}), std::logic_error);
  EXPECT_THROW(a.finalize(stream()), std::logic_error);
  try {
    a.param("nope");
    ADD_FAILURE() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("known: w"), std::string::npos) << e.what();
  }
  EXPECT_THROW(a.upload_param("w", std::vector<float>(3), stream()), std::invalid_argument);
}

}  // namespace
}  // namespace foxhunt::gpu
