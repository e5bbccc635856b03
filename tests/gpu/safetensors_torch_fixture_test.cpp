// A file byte for byte as PyTorch's `safetensors.torch.save_file` lays it out (u64 header length,
// compact JSON with __metadata__ first, padded with spaces to a multiple of 8, packed data),
// written here by hand so the test needs no Python:
//   save_file({"bias": tensor([0.5]), "weight": tensor([[1., 2.], [3., 4.]]),
//              "scale": tensor([1., -2.], dtype=bfloat16)}, path, metadata={"format": "pt"})
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/safetensors.hpp"

namespace foxhunt::gpu {
namespace {

std::vector<std::byte> torch_style_file() {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"bias":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
      R"("weight":{"dtype":"F32","shape":[2,2],"data_offsets":[4,20]},)"
      R"("scale":{"dtype":"BF16","shape":[2],"data_offsets":[20,24]}})"
      "       ";  // 209 bytes of JSON + 7 spaces = 216 = 0xd8
  const std::uint8_t length[8] = {0xd8, 0, 0, 0, 0, 0, 0, 0};
  const std::uint8_t data[24] = {
      0x00, 0x00, 0x00, 0x3f,                          // bias   0.5f
      0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40,  // weight 1.0f 2.0f
      0x00, 0x00, 0x40, 0x40, 0x00, 0x00, 0x80, 0x40,  //        3.0f 4.0f
      0x80, 0x3f, 0x00, 0xc0,                          // scale  bf16 1.0, -2.0
  };
  std::vector<std::byte> file;
  for (auto b : length) file.push_back(static_cast<std::byte>(b));
  for (char c : header) file.push_back(static_cast<std::byte>(c));
  for (auto b : data) file.push_back(static_cast<std::byte>(b));
  return file;
}

TEST(SafetensorsTorchFixture, ReadsAFileLaidOutLikePyTorchs) {
  const auto file = torch_style_file();
  ASSERT_EQ(file.size(), 8u + 216u + 24u);
  const SafetensorsFile f = parse_safetensors(file, "torch_fixture.safetensors");
  ASSERT_EQ(f.entries.size(), 3u);
  EXPECT_EQ(f.metadata.at("format"), "pt");

  const SafetensorsEntry* w = f.find("weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::f32);
  EXPECT_EQ(w->shape, (std::vector<std::int64_t>{2, 2}));
  float wv[4];
  std::memcpy(wv, f.bytes(*w).data(), sizeof wv);
  EXPECT_EQ(wv[0], 1.f);
  EXPECT_EQ(wv[1], 2.f);
  EXPECT_EQ(wv[2], 3.f);
  EXPECT_EQ(wv[3], 4.f);

  const SafetensorsEntry* b = f.find("bias");
  ASSERT_NE(b, nullptr);
  float bv;
  std::memcpy(&bv, f.bytes(*b).data(), 4);
  EXPECT_EQ(bv, 0.5f);

  const SafetensorsEntry* s = f.find("scale");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->dtype, DType::bf16);
  std::uint16_t sv[2];
  std::memcpy(sv, f.bytes(*s).data(), 4);
  EXPECT_EQ(sv[0], 0x3f80u);  // bf16 1.0
  EXPECT_EQ(sv[1], 0xc000u);  // bf16 -2.0
}

// Our writer lays out the same tensors the same way (modulo key order), so PyTorch reads ours.
TEST(SafetensorsTorchFixture, OurWriterPadsAndPacksTheSameWay) {
  const float bias[1] = {0.5f};
  const float weight[4] = {1.f, 2.f, 3.f, 4.f};
  const std::uint16_t scale[2] = {0x3f80, 0xc000};
  const std::vector<SafetensorsTensor> tensors = {
      {"bias", DType::f32, {1}, std::as_bytes(std::span<const float>(bias))},
      {"weight", DType::f32, {2, 2}, std::as_bytes(std::span<const float>(weight))},
      {"scale", DType::bf16, {2}, std::as_bytes(std::span<const std::uint16_t>(scale))}};
  const auto ours = serialize_safetensors(tensors, {{"format", "pt"}});
  EXPECT_EQ(ours, torch_style_file());
}

}  // namespace
}  // namespace foxhunt::gpu
