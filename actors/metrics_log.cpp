#include "actors/metrics_log.hpp"

#include <unistd.h>
#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace foxhunt::actors {
namespace {

constexpr std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82f63b78u : c >> 1;  // reflected Castagnoli
    t[i] = c;
  }
  return t;
}
constexpr auto kCrcTable = make_crc_table();

// Protobuf wire format, the four pieces an Event needs.
void put_varint(std::vector<std::uint8_t>& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<std::uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<std::uint8_t>(v));
}
void put_tag(std::vector<std::uint8_t>& out, int field, int wire_type) {
  put_varint(out, (static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint64_t>(wire_type));
}
template <class T>
void put_fixed(std::vector<std::uint8_t>& out, T v) {
  std::uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian host (x86-64, aarch64)
  out.insert(out.end(), b, b + sizeof(T));
}
void put_bytes(std::vector<std::uint8_t>& out, int field, const void* data, std::size_t n) {
  put_tag(out, field, 2);
  put_varint(out, n);
  const auto* p = static_cast<const std::uint8_t*>(data);
  out.insert(out.end(), p, p + n);
}

std::vector<std::uint8_t> event_header(double wall_time, std::int64_t step) {
  std::vector<std::uint8_t> e;
  put_tag(e, 1, 1);
  put_fixed(e, wall_time);
  if (step != 0) {
    put_tag(e, 2, 0);
    put_varint(e, static_cast<std::uint64_t>(step));
  }
  return e;
}

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

}  // namespace

std::uint32_t crc32c(std::span<const std::uint8_t> data) {
  std::uint32_t c = 0xffffffffu;
  for (std::uint8_t b : data) c = kCrcTable[(c ^ b) & 0xffu] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

std::vector<std::uint8_t> encode_file_version_event(double wall_time) {
  std::vector<std::uint8_t> e = event_header(wall_time, 0);
  static constexpr char kVersion[] = "brain.Event:2";
  put_bytes(e, 3, kVersion, sizeof kVersion - 1);
  return e;
}

std::vector<std::uint8_t> encode_scalar_event(double wall_time, std::int64_t step,
                                              const std::vector<std::pair<std::string, double>>& scalars) {
  std::vector<std::uint8_t> summary;
  for (const auto& [tag, value] : scalars) {
    std::vector<std::uint8_t> v;
    put_bytes(v, 1, tag.data(), tag.size());
    put_tag(v, 2, 5);
    put_fixed(v, static_cast<float>(value));
    put_bytes(summary, 1, v.data(), v.size());
  }
  std::vector<std::uint8_t> e = event_header(wall_time, step);
  put_bytes(e, 5, summary.data(), summary.size());
  return e;
}

std::vector<std::uint8_t> tfrecord(std::span<const std::uint8_t> data) {
  std::vector<std::uint8_t> out;
  std::vector<std::uint8_t> len;
  put_fixed(len, static_cast<std::uint64_t>(data.size()));
  out.insert(out.end(), len.begin(), len.end());
  put_fixed(out, masked_crc32c(len));
  out.insert(out.end(), data.begin(), data.end());
  put_fixed(out, masked_crc32c(data));
  return out;
}

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const double now = wall_time_now();
  path_ = dir / ("events.out.tfevents." + std::to_string(static_cast<long long>(now)) + "." + hostname());
  file_ = std::fopen(path_.c_str(), "ab");
  if (!file_) throw std::runtime_error("cannot create " + path_.string() + ": " + std::strerror(errno));
  write(encode_file_version_event(now));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::write(const std::vector<std::uint8_t>& event) {
  const auto rec = tfrecord(event);
  if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size())
    throw std::runtime_error("cannot write " + path_.string() + ": " + std::strerror(errno));
}

void TensorBoardWriter::scalars(std::int64_t step, const std::vector<std::pair<std::string, double>>& values,
                                double wall_time) {
  if (!values.empty()) write(encode_scalar_event(wall_time, step, values));
}

void TensorBoardWriter::flush() { std::fflush(file_); }

JsonlWriter::JsonlWriter(const std::filesystem::path& file) {
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
  file_ = std::fopen(file.c_str(), "ab");
  if (!file_) throw std::runtime_error("cannot open " + file.string() + ": " + std::strerror(errno));
}

JsonlWriter::~JsonlWriter() {
  if (file_) std::fclose(file_);
}

void JsonlWriter::scalars(std::int64_t step, const std::vector<std::pair<std::string, double>>& values,
                          double wall_time) {
  nlohmann::json j;
  j["step"] = step;
  j["wall_time"] = wall_time;
  for (const auto& [k, v] : values) j[k] = std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
  const std::string line = j.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
}

void JsonlWriter::flush() { std::fflush(file_); }

}  // namespace foxhunt::actors
