#include "rl/replay/snapshot.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <set>
#include <stdexcept>
#include <system_error>

#include "gpu/atomic_file.hpp"
#include "gpu/check.hpp"
#include "gpu/checkpoint_io.hpp"

namespace foxhunt::rl {
namespace {

constexpr std::string_view kChecksumPrefix = "checksum.";

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

std::string hex16(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Chunks are whole 8-byte words (the hash is chunk-independent anyway; this keeps copies aligned).
std::size_t chunk_of(std::size_t bytes) { return std::max<std::size_t>(8, bytes / 8 * 8); }

std::uint64_t mix(std::uint64_t h, std::uint64_t w) {
  h = (h ^ w) * 0x9FB21C651E98DF25ull;
  return h ^ (h >> 29);
}

// gpu::safetensors_header with each tensor's checksum in the metadata ("checksum.<name>").
std::string build_header(std::span<const SnapshotTensor> tensors, const std::map<std::string, std::string>& metadata,
                         const std::vector<std::uint64_t>& checksums) {
  std::map<std::string, std::string> meta = metadata;
  std::vector<gpu::SafetensorsTensor> entries;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    meta[std::string(kChecksumPrefix) + tensors[i].name] = hex16(checksums[i]);
    entries.push_back({tensors[i].name, tensors[i].dtype, tensors[i].shape, {}});
  }
  return gpu::safetensors_header(entries, meta);
}

std::uint64_t tensor_bytes(const SnapshotTensor& t) {
  std::uint64_t numel = 1;
  for (const std::int64_t d : t.shape) numel *= static_cast<std::uint64_t>(d);
  return numel * gpu::dtype_size(t.dtype);
}

void check_tensors(std::span<const SnapshotTensor> tensors, const std::map<std::string, std::string>& metadata) {
  std::set<std::string_view> names;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__")
      throw std::invalid_argument("snapshot: bad tensor name '" + t.name + "'");
    if (!names.insert(t.name).second) throw std::invalid_argument("snapshot: duplicate tensor name '" + t.name + "'");
    for (const std::int64_t d : t.shape)
      if (d < 0) throw std::invalid_argument("snapshot: tensor '" + t.name + "' has a negative dimension");
    const std::uint64_t bytes = tensor_bytes(t);
    if ((t.device != nullptr) == !t.host.empty() && bytes > 0)
      throw std::invalid_argument("snapshot: tensor '" + t.name + "' needs exactly one of a device or a host source");
    if (!t.host.empty() && t.host.size() != bytes)
      throw std::invalid_argument("snapshot: tensor '" + t.name + "' has " + std::to_string(t.host.size()) +
                                  " host bytes, shape " + shape_str(t.shape) + " needs " + std::to_string(bytes));
  }
  for (const auto& [k, v] : metadata)
    if (k.starts_with(kChecksumPrefix)) throw std::invalid_argument("snapshot: metadata key '" + k + "' is reserved");
}

}  // namespace

// ------------------------------------------------------------------------------------- hash
void SnapshotHash::add(std::span<const std::byte> bytes) {
  length_ += bytes.size();
  std::size_t i = 0;
  while (tail_bytes_ != 0 && i < bytes.size()) {  // finish a partial word
    tail_ |= static_cast<std::uint64_t>(bytes[i++]) << (8 * tail_bytes_);
    if (++tail_bytes_ == 8) {
      h_ = mix(h_, tail_);
      tail_ = 0;
      tail_bytes_ = 0;
    }
  }
  for (; i + 8 <= bytes.size(); i += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, bytes.data() + i, 8);
    h_ = mix(h_, w);
  }
  for (; i < bytes.size(); ++i) tail_ |= static_cast<std::uint64_t>(bytes[i]) << (8 * tail_bytes_++);
}

std::uint64_t SnapshotHash::value() const {
  std::uint64_t h = tail_bytes_ ? mix(h_, tail_) : h_;
  h = mix(h, length_);
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  return h ^ (h >> 33);
}

// ----------------------------------------------------------------------------------- writer
void write_snapshot_file(const std::filesystem::path& path, std::span<const SnapshotTensor> tensors,
                         const std::map<std::string, std::string>& metadata, cudaStream_t stream,
                         std::size_t chunk_bytes) {
  check_tensors(tensors, metadata);
  const std::size_t chunk = chunk_of(chunk_bytes);
  const bool any_device = std::any_of(tensors.begin(), tensors.end(), [](const SnapshotTensor& t) { return t.device; });
  if (any_device) FH_CHECK(cudaStreamSynchronize(stream));  // the arrays hold every update enqueued so far

  const std::string tmp = path.string() + ".tmp." + std::to_string(::getpid());
  auto fail = [&](const std::string& step, int err) {
    throw std::runtime_error("cannot write replay snapshot '" + path.string() + "': " + step + ": " + errno_text(err));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("creating temporary file '" + tmp + "'", errno);
  bool fd_open = true;
  try {
    auto fail_now = [&](const std::string& step, int err) { fail(step + " '" + tmp + "'", err); };
    auto write_all = [&](const std::byte* p, std::size_t left, std::uint64_t* at) {
      while (left > 0) {
        const ssize_t w = at ? ::pwrite(fd, p, left, static_cast<off_t>(*at)) : ::write(fd, p, left);
        if (w < 0) {
          if (errno == EINTR) continue;
          fail_now("writing", errno);
        }
        p += w;
        left -= static_cast<std::size_t>(w);
        if (at) *at += static_cast<std::uint64_t>(w);
      }
    };
    // Placeholder checksums: 16 hex digits each, so the final header has exactly this length.
    std::vector<std::uint64_t> sums(tensors.size(), 0);
    const std::string header0 = build_header(tensors, metadata, sums);
    write_all(reinterpret_cast<const std::byte*>(header0.data()), header0.size(), nullptr);

    std::vector<std::byte> buf;  // the one host chunk buffer (device sources only)
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const SnapshotTensor& t = tensors[i];
      const std::uint64_t bytes = tensor_bytes(t);
      SnapshotHash hash;
      if (!t.host.empty()) {
        hash.add(t.host);
        write_all(t.host.data(), t.host.size(), nullptr);
      } else {
        if (buf.empty() && bytes > 0) buf.resize(static_cast<std::size_t>(std::min<std::uint64_t>(chunk, bytes)));
        for (std::uint64_t off = 0; off < bytes;) {
          const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), bytes - off));
          // Checkpoint I/O: the one place the replay buffer's contents come to the host.
          gpu::checkpoint_read(buf.data(), static_cast<const std::byte*>(t.device) + off, n, stream);
          const std::span<const std::byte> piece(buf.data(), n);
          hash.add(piece);
          write_all(piece.data(), n, nullptr);
          off += n;
        }
      }
      sums[i] = hash.value();
    }
    const std::string header = build_header(tensors, metadata, sums);
    if (header.size() != header0.size()) throw std::logic_error("snapshot header changed length");
    std::uint64_t at = 0;
    write_all(reinterpret_cast<const std::byte*>(header.data()), header.size(), &at);
    if (::fsync(fd) != 0) fail_now("fsync of", errno);
    fd_open = false;
    if (::close(fd) != 0) fail_now("closing", errno);
    if (::rename(tmp.c_str(), path.c_str()) != 0) fail_now("renaming over the target", errno);
  } catch (...) {
    if (fd_open) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  std::string step;
  if (const int err = gpu::fsync_parent_directory(path, step)) fail(step, err);
}

// ----------------------------------------------------------------------------------- reader
SnapshotReader::SnapshotReader(const std::filesystem::path& path, std::size_t chunk_bytes)
    : path_(path), chunk_bytes_(chunk_of(chunk_bytes)) {
  auto fail = [&](const std::string& step, int err) {
    throw std::runtime_error("cannot read replay snapshot '" + path.string() + "': " + step + ": " + errno_text(err));
  };
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail("open", errno);
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail("fstat", errno);
    if (!S_ISREG(st.st_mode)) fail("not a regular file", EINVAL);
    const auto size = static_cast<std::size_t>(st.st_size);
    if (size < 8) {  // too short to map usefully: let the parser reject it with its message
      std::vector<std::byte> small(size);
      read_at(small.data(), 0, size);
      file_ = gpu::parse_safetensors(small, path.string());
    } else {
      // A read-only mapping: the parser touches the header only, so the data is not read here.
      void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd_, 0);
      if (map == MAP_FAILED) fail("mmap", errno);
      try {
        file_ =
            gpu::parse_safetensors(std::span<const std::byte>(static_cast<const std::byte*>(map), size), path.string());
        std::uint64_t n = 0;
        std::memcpy(&n, map, 8);
        data_start_ = 8 + n;
      } catch (...) {
        ::munmap(map, size);
        throw;
      }
      ::munmap(map, size);
    }
    file_.data = {};  // the mapping is gone; data is read with pread from here on
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SnapshotReader::~SnapshotReader() {
  if (fd_ >= 0) ::close(fd_);
}

void SnapshotReader::read_at(std::byte* out, std::uint64_t offset, std::size_t bytes) const {
  while (bytes > 0) {
    const ssize_t r = ::pread(fd_, out, bytes, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      throw std::runtime_error("cannot read replay snapshot '" + path_.string() +
                               "': " + (r < 0 ? "pread: " + errno_text(errno) : std::string("unexpected end of file")));
    out += r;
    bytes -= static_cast<std::size_t>(r);
    offset += static_cast<std::uint64_t>(r);
  }
}

const gpu::SafetensorsEntry* SnapshotReader::expect(const std::string& name, gpu::DType dtype,
                                                    const std::vector<std::int64_t>& shape,
                                                    std::vector<std::string>& problems) const {
  const gpu::SafetensorsEntry* e = file_.find(name);
  if (!e) {
    problems.push_back("missing tensor '" + name + "'");
    return nullptr;
  }
  if (e->dtype != dtype || e->shape != shape) {
    problems.push_back("tensor '" + name + "' is " + std::string(gpu::dtype_name(e->dtype)) + " " +
                       shape_str(e->shape) + " in the file, this buffer needs " + std::string(gpu::dtype_name(dtype)) +
                       " " + shape_str(shape));
    return nullptr;
  }
  return e;
}

void SnapshotReader::verify(std::vector<std::string>& problems) const {
  std::vector<std::byte> buf;
  for (const auto& e : file_.entries) {
    const auto it = file_.metadata.find(std::string(kChecksumPrefix) + e.name);
    if (it == file_.metadata.end()) {
      problems.push_back("tensor '" + e.name + "' has no checksum");
      continue;
    }
    SnapshotHash hash;
    if (buf.empty() && e.bytes() > 0) buf.resize(chunk_bytes_);
    for (std::uint64_t off = 0; off < e.bytes();) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), e.bytes() - off));
      read_at(buf.data(), data_start_ + e.begin + off, n);
      hash.add(std::span<const std::byte>(buf.data(), n));
      off += n;
    }
    if (hex16(hash.value()) != it->second)
      problems.push_back("tensor '" + e.name + "' does not match its checksum (corrupt data)");
  }
}

std::vector<std::byte> SnapshotReader::read_host(const gpu::SafetensorsEntry& e) const {
  std::vector<std::byte> out(static_cast<std::size_t>(e.bytes()));
  read_at(out.data(), data_start_ + e.begin, out.size());
  return out;
}

void SnapshotReader::upload(void* dst, const gpu::SafetensorsEntry& e, cudaStream_t stream) const {
  if (e.bytes() == 0) return;
  std::vector<std::byte> buf(static_cast<std::size_t>(std::min<std::uint64_t>(chunk_bytes_, e.bytes())));
  for (std::uint64_t off = 0; off < e.bytes();) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), e.bytes() - off));
    read_at(buf.data(), data_start_ + e.begin + off, n);
    // Checkpoint I/O: host to device; synchronized so the one chunk buffer can be refilled.
    FH_CHECK(cudaMemcpyAsync(static_cast<std::byte*>(dst) + off, buf.data(), n, cudaMemcpyHostToDevice, stream));
    FH_CHECK(cudaStreamSynchronize(stream));
    off += n;
  }
}

}  // namespace foxhunt::rl
