// TensorBoard event files and JSONL: decode what the writers wrote (TFRecord framing with masked
// CRC32C, Event protobufs) with an independent little decoder written here.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "actors/metrics_log.hpp"
#include "actors/timeline.hpp"

using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

// Bitwise CRC-32C, independent of the table-driven one under test.
std::uint32_t crc32c_bitwise(const std::uint8_t* p, std::size_t n) {
  std::uint32_t c = 0xffffffffu;
  for (std::size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
  }
  return ~c;
}
std::uint32_t masked(std::uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

struct Reader {
  const std::uint8_t* p;
  const std::uint8_t* end;
  bool done() const { return p >= end; }
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) throw std::runtime_error("truncated varint");
      const std::uint8_t b = *p++;
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    throw std::runtime_error("varint too long");
  }
  template <class T>
  T fixed() {
    if (end - p < static_cast<std::ptrdiff_t>(sizeof(T))) throw std::runtime_error("truncated fixed");
    T v;
    std::memcpy(&v, p, sizeof(T));
    p += sizeof(T);
    return v;
  }
  Reader sub() {
    const std::uint64_t n = varint();
    if (static_cast<std::uint64_t>(end - p) < n) throw std::runtime_error("truncated bytes");
    Reader r{p, p + n};
    p += n;
    return r;
  }
};

struct DecodedEvent {
  double wall_time = 0;
  std::int64_t step = 0;
  std::string file_version;
  std::map<std::string, float> scalars;
};

DecodedEvent decode_event(Reader r) {
  DecodedEvent e;
  while (!r.done()) {
    const std::uint64_t key = r.varint();
    const int field = static_cast<int>(key >> 3), wt = static_cast<int>(key & 7);
    if (field == 1 && wt == 1)
      e.wall_time = r.fixed<double>();
    else if (field == 2 && wt == 0)
      e.step = static_cast<std::int64_t>(r.varint());
    else if (field == 3 && wt == 2) {
      Reader s = r.sub();
      e.file_version.assign(s.p, s.end);
    } else if (field == 5 && wt == 2) {
      Reader summary = r.sub();
      while (!summary.done()) {
        const std::uint64_t k = summary.varint();
        if (k != ((1u << 3) | 2)) throw std::runtime_error("unexpected summary field");
        Reader value = summary.sub();
        std::string tag;
        float v = NAN;
        while (!value.done()) {
          const std::uint64_t vk = value.varint();
          if (vk == ((1u << 3) | 2)) {
            Reader s = value.sub();
            tag.assign(s.p, s.end);
          } else if (vk == ((2u << 3) | 5))
            v = value.fixed<float>();
          else
            throw std::runtime_error("unexpected value field");
        }
        e.scalars[tag] = v;
      }
    } else {
      throw std::runtime_error("unexpected event field " + std::to_string(field));
    }
  }
  return e;
}

std::vector<DecodedEvent> read_tfevents(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<DecodedEvent> out;
  std::size_t off = 0;
  while (off < bytes.size()) {
    if (bytes.size() - off < 12) throw std::runtime_error("truncated record header");
    std::uint64_t len;
    std::memcpy(&len, &bytes[off], 8);
    std::uint32_t len_crc, data_crc;
    std::memcpy(&len_crc, &bytes[off + 8], 4);
    EXPECT_EQ(len_crc, masked(crc32c_bitwise(&bytes[off], 8)));
    off += 12;
    if (bytes.size() - off < len + 4) throw std::runtime_error("truncated record");
    std::memcpy(&data_crc, &bytes[off + len], 4);
    EXPECT_EQ(data_crc, masked(crc32c_bitwise(&bytes[off], len)));
    out.push_back(decode_event(Reader{&bytes[off], &bytes[off] + len}));
    off += len + 4;
  }
  return out;
}

fs::path fresh_dir(const char* name) {
  fs::path d = fs::temp_directory_path() / (std::string("foxhunt_metrics_") + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

}  // namespace

TEST(MetricsLogTest, Crc32cKnownVectors) {
  const std::string s = "123456789";
  EXPECT_EQ(crc32c({reinterpret_cast<const std::uint8_t*>(s.data()), s.size()}), 0xE3069283u);
  EXPECT_EQ(crc32c({}), 0u);
  std::vector<std::uint8_t> zeros(32, 0);
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);  // RFC 3720 B.4
  std::vector<std::uint8_t> ramp(1000);
  for (std::size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<std::uint8_t>(i * 7 + 3);
  EXPECT_EQ(crc32c(ramp), crc32c_bitwise(ramp.data(), ramp.size()));
}

TEST(MetricsLogTest, TensorBoardFileDecodes) {
  const fs::path dir = fresh_dir("tb");
  fs::path file;
  {
    TensorBoardWriter w(dir);
    file = w.path();
    w.scalars(100, {{"train/loss", 0.25}, {"train/episode_return", 187.5}}, 1700000000.5);
    w.scalars(200, {{"train/loss", 0.125}}, 1700000001.0);
    w.scalars(123456789012345, {{"x", -3.5}}, 1700000002.0);  // a step needing a long varint
  }
  EXPECT_EQ(file.filename().string().rfind("events.out.tfevents.", 0), 0u);
  auto events = read_tfevents(file);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_GT(events[0].wall_time, 1.6e9);
  EXPECT_EQ(events[1].step, 100);
  EXPECT_DOUBLE_EQ(events[1].wall_time, 1700000000.5);
  EXPECT_FLOAT_EQ(events[1].scalars.at("train/loss"), 0.25f);
  EXPECT_FLOAT_EQ(events[1].scalars.at("train/episode_return"), 187.5f);
  EXPECT_EQ(events[2].step, 200);
  EXPECT_EQ(events[2].scalars.size(), 1u);
  EXPECT_EQ(events[3].step, 123456789012345);
  EXPECT_FLOAT_EQ(events[3].scalars.at("x"), -3.5f);
  fs::remove_all(dir);
}

TEST(MetricsLogTest, JsonlLines) {
  const fs::path dir = fresh_dir("jsonl");
  {
    JsonlWriter w(dir / "metrics.jsonl");
    w.scalars(10, {{"loss", 1.5}, {"eps", 0.9}}, 5.0);
    w.scalars(20, {{"loss", NAN}}, 6.0);
  }
  std::ifstream in(dir / "metrics.jsonl");
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["step"], 10);
  EXPECT_DOUBLE_EQ(rows[0]["loss"].get<double>(), 1.5);
  EXPECT_TRUE(rows[1]["loss"].is_null());  // non-finite values stay valid JSON
  fs::remove_all(dir);
}

TEST(TimelineTest, OverlapAndChromeTrace) {
  std::vector<BusyInterval> iv = {
      {"collector", "collect", 0, 10},
      {"collector", "collect", 5, 20},  // merged: [0, 20)
      {"learner", "update", 15, 30},
      {"replay", "insert", 18, 40},
  };
  // span [0, 40); >= 2 busy: [15, 30) = 15
  EXPECT_DOUBLE_EQ(overlap_fraction(iv, 2), 15.0 / 40.0);
  // >= 3 busy: [18, 20) = 2
  EXPECT_DOUBLE_EQ(overlap_fraction(iv, 3), 2.0 / 40.0);
  EXPECT_DOUBLE_EQ(busy_us(iv, "collector"), 20.0);
  EXPECT_DOUBLE_EQ(overlap_fraction({}, 2), 0.0);
  auto doc = nlohmann::json::parse(chrome_trace_json(iv));
  int complete = 0, names = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X") {
      ++complete;
      EXPECT_GE(e["dur"].get<double>(), 0.0);
    }
    if (e["ph"] == "M") ++names;
  }
  EXPECT_EQ(complete, 4);
  EXPECT_EQ(names, 3);
}
