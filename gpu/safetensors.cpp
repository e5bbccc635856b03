#include "gpu/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <system_error>

#include "gpu/atomic_file.hpp"

namespace foxhunt::gpu {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

using json = nlohmann::json;

constexpr DType kAllDtypes[] = {DType::f32, DType::bf16, DType::i32, DType::u32, DType::u8};

std::string allowed_dtypes() {
  std::string s;
  for (DType t : kAllDtypes) s += (s.empty() ? "" : ", ") + std::string(dtype_name(t));
  return s;
}

bool dtype_from_name(std::string_view name, DType* out) {
  for (DType t : kAllDtypes)
    if (dtype_name(t) == name) {
      *out = t;
      return true;
    }
  return false;
}

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// numel with overflow detection; false if the product exceeds int64.
bool checked_numel(const std::vector<std::int64_t>& shape, std::int64_t* out) {
  std::int64_t n = 1;
  for (std::int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return false;
  *out = n;
  return true;
}

class Rejecter {
 public:
  explicit Rejecter(std::string_view source) : source_(source) {}
  [[noreturn]] void operator()(const std::string& reason) const {
    throw std::runtime_error("safetensors file '" + source_ + "' rejected: " + reason);
  }

 private:
  std::string source_;
};

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

SafetensorsEntry parse_entry(const std::string& name, const json& v, const Rejecter& reject) {
  const std::string who = "tensor '" + name + "'";
  if (!v.is_object()) reject(who + ": entry is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) reject(who + ": missing '" + key + "'");
  SafetensorsEntry e;
  e.name = name;
  const json& dt = v.at("dtype");
  if (!dt.is_string()) reject(who + ": dtype is not a string");
  if (!dtype_from_name(dt.get_ref<const std::string&>(), &e.dtype))
    reject(who + ": unsupported dtype '" + dt.get<std::string>() + "' (allowed: " + allowed_dtypes() + ")");
  const json& sh = v.at("shape");
  if (!sh.is_array()) reject(who + ": shape is not a list");
  for (const json& d : sh) {
    if (!d.is_number_integer()) reject(who + ": shape has a non-integer dimension");
    if (d.is_number_unsigned()) {
      if (d.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        reject(who + ": shape dimension too large");
      e.shape.push_back(static_cast<std::int64_t>(d.get<std::uint64_t>()));
    } else {
      const std::int64_t x = d.get<std::int64_t>();
      if (x < 0) reject(who + ": negative dimension " + std::to_string(x) + " in shape");
      e.shape.push_back(x);
    }
  }
  const json& off = v.at("data_offsets");
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    reject(who + ": data_offsets must be a list of two non-negative integers");
  e.begin = off[0].get<std::uint64_t>();
  e.end = off[1].get<std::uint64_t>();
  return e;
}

}  // namespace

std::int64_t SafetensorsEntry::numel() const {
  std::int64_t n = 0;
  return checked_numel(shape, &n) ? n : -1;
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  for (const auto& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

SafetensorsFile parse_safetensors(std::span<const std::byte> file, std::string_view source_name) {
  const Rejecter reject(source_name);
  if (file.size() < 8)
    reject("file is " + std::to_string(file.size()) + " bytes, shorter than 8 bytes (the header length)");
  std::uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);  // little-endian host (static_assert above)
  if (n > kSafetensorsMaxHeaderBytes) reject("header length " + std::to_string(n) + " exceeds the 100 MB limit");
  if (n > file.size() - 8)
    reject("header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(file.size()) +
           " bytes): truncated file?");
  const char* text = reinterpret_cast<const char*>(file.data() + 8);

  // Duplicate keys at the top level would silently collapse in the parsed object: catch them
  // while parsing (depth 1 = keys of the root object).
  std::set<std::string> seen;
  std::string duplicate;
  json header;
  try {
    header = json::parse(text, text + n, [&](int depth, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::key && depth == 1 && duplicate.empty() &&
          !seen.insert(parsed.get<std::string>()).second)
        duplicate = parsed.get<std::string>();
      return true;
    });
  } catch (const json::exception& e) {
    reject(std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) reject("header is not a JSON object");
  if (!duplicate.empty()) reject("duplicate tensor name '" + duplicate + "'");

  SafetensorsFile out;
  out.data = file.subspan(8 + n);
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) reject("__metadata__ is not a JSON object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) reject("__metadata__ value for '" + k + "' is not a string");
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    out.entries.push_back(parse_entry(name, value, reject));
  }

  const std::uint64_t data_size = out.data.size();
  for (const auto& e : out.entries) {
    const std::string who = "tensor '" + e.name + "'";
    std::string range = "[";  // appended piecewise: GCC 12 warns falsely (-Wrestrict) on "[" + string
    range.append(std::to_string(e.begin)).append(", ").append(std::to_string(e.end)).append("]");
    if (e.end < e.begin) reject(who + ": data_offsets " + range + " end before begin");
    if (e.end > data_size)
      reject(who + ": data_offsets " + range + " out of range of the " + std::to_string(data_size) +
             "-byte data section");
    std::int64_t numel = 0;
    if (!checked_numel(e.shape, &numel)) reject(who + ": shape " + shape_str(e.shape) + " overflows");
    const std::uint64_t want = static_cast<std::uint64_t>(numel) * dtype_size(e.dtype);  // numel*size <= end
    if (static_cast<std::uint64_t>(numel) > data_size || e.bytes() != want)
      reject(who + ": size mismatch: " + std::to_string(e.bytes()) + " bytes for shape " + shape_str(e.shape) + " " +
             std::string(dtype_name(e.dtype)) + " (needs " + std::to_string(numel) + " x " +
             std::to_string(dtype_size(e.dtype)) + " bytes)");
  }

  // Packed cover of the data section: sorted by offset, each tensor starts where the last ended.
  std::sort(out.entries.begin(), out.entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t cursor = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const auto& e : out.entries) {
    if (e.begin < cursor)
      reject("tensors '" + prev->name + "' and '" + e.name + "' overlap (bytes " + std::to_string(e.begin) + " to " +
             std::to_string(std::min(cursor, e.end)) + ")");
    if (e.begin > cursor)
      reject("gap: data bytes " + std::to_string(cursor) + " to " + std::to_string(e.begin) +
             " are not covered by any tensor");
    cursor = e.end;
    prev = &e;
  }
  if (cursor != data_size)
    reject("trailing " + std::to_string(data_size - cursor) +
           " bytes after the last tensor are not covered by any tensor");
  return out;
}

namespace {

// [u64 N][header JSON padded with spaces to a multiple of 8]; offsets assigned in list order.
// with_data: each tensor's data must hold numel * dtype size bytes.
std::string build_header(std::span<const SafetensorsTensor> tensors, const std::map<std::string, std::string>& metadata,
                         bool with_data) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string_view> names;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__") throw std::invalid_argument("safetensors: '__metadata__' is not a tensor name");
    if (!names.insert(t.name).second)
      throw std::invalid_argument("safetensors: duplicate tensor name '" + t.name + "'");
    std::int64_t numel = 0;
    if (!checked_numel(t.shape, &numel))
      throw std::invalid_argument("safetensors: tensor '" + t.name + "' has a bad shape " + shape_str(t.shape));
    const std::uint64_t bytes = static_cast<std::uint64_t>(numel) * dtype_size(t.dtype);
    if (with_data && t.data.size() != bytes)
      throw std::invalid_argument("safetensors: tensor '" + t.name + "' has " + std::to_string(t.data.size()) +
                                  " bytes of data, shape " + shape_str(t.shape) + " needs " + std::to_string(bytes));
    header[t.name] = {
        {"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::uint64_t n = text.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + text;
}

std::vector<std::span<const std::byte>> file_pieces(const std::string& header,
                                                    std::span<const SafetensorsTensor> tensors) {
  std::vector<std::span<const std::byte>> pieces;
  pieces.emplace_back(reinterpret_cast<const std::byte*>(header.data()), header.size());
  for (const auto& t : tensors)
    if (!t.data.empty()) pieces.push_back(t.data);
  return pieces;
}

}  // namespace

std::string safetensors_header(std::span<const SafetensorsTensor> tensors,
                               const std::map<std::string, std::string>& metadata) {
  return build_header(tensors, metadata, false);
}

std::vector<std::byte> serialize_safetensors(std::span<const SafetensorsTensor> tensors,
                                             const std::map<std::string, std::string>& metadata) {
  const std::string header = build_header(tensors, metadata, true);
  std::vector<std::byte> out;
  for (const auto& piece : file_pieces(header, tensors)) out.insert(out.end(), piece.begin(), piece.end());
  return out;
}

void write_safetensors_file(const std::filesystem::path& path, std::span<const SafetensorsTensor> tensors,
                            const std::map<std::string, std::string>& metadata) {
  const std::string header = build_header(tensors, metadata, true);
  write_file_atomically(path, file_pieces(header, tensors), "safetensors file");
}

std::vector<std::byte> read_file_bytes(const std::filesystem::path& path) {
  auto fail = [&](const std::string& step, int err) {
    throw std::runtime_error("cannot read file '" + path.string() + "': " + step + ": " + errno_text(err));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("open", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("fstat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("not a regular file", EINVAL);
  }
  std::vector<std::byte> out(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      fail("read", err);
    }
    if (r == 0) break;  // file shrank under us: keep what is there, the parser judges it
    got += static_cast<std::size_t>(r);
  }
  out.resize(got);
  ::close(fd);
  return out;
}

}  // namespace foxhunt::gpu
