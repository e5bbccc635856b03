#include "gpu/nccl.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "gpu/check.hpp"

namespace foxhunt::gpu {
namespace {

void nvls_off_unless_set() {
  // setenv(..., 0): a value the user exported wins.
  ::setenv("NCCL_NVLS_ENABLE", "0", 0);
}

std::size_t as_count(std::int64_t n, const char* what) {
  FH_EXPECT(n >= 0, std::string(what) + ": count must be >= 0, got " + std::to_string(n));
  return static_cast<std::size_t>(n);
}

}  // namespace

NcclId nccl_unique_id() {
  nvls_off_unless_set();
  ncclUniqueId raw{};
  FH_CHECK(ncclGetUniqueId(&raw));
  NcclId id{};
  std::copy_n(reinterpret_cast<const std::uint8_t*>(raw.internal), id.size(), id.begin());
  return id;
}

std::string to_hex(const NcclId& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * id.size());
  for (const std::uint8_t b : id) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xf]);
  }
  return out;
}

NcclId nccl_id_from_hex(const std::string& hex) {
  NcclId id{};
  if (hex.size() != 2 * id.size())
    throw std::invalid_argument("NCCL unique id: expected " + std::to_string(2 * id.size()) + " hex digits, got " +
                                std::to_string(hex.size()) + " characters");
  const auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw std::invalid_argument(std::string("NCCL unique id: '") + c + "' is not a hex digit");
  };
  for (std::size_t i = 0; i < id.size(); ++i)
    id[i] = static_cast<std::uint8_t>((digit(hex[2 * i]) << 4) | digit(hex[2 * i + 1]));
  return id;
}

std::string nccl_version() {
  int v = 0;
  FH_CHECK(ncclGetVersion(&v));
  // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z since 2.9.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

NcclCommunicator::NcclCommunicator(const NcclId& id, int world, int rank) : world_(world), rank_(rank) {
  FH_EXPECT(world >= 1, "NcclCommunicator: world must be >= 1, got " + std::to_string(world));
  FH_EXPECT(rank >= 0 && rank < world,
            "NcclCommunicator: rank must be in [0, " + std::to_string(world) + "), got " + std::to_string(rank));
  nvls_off_unless_set();
  ncclUniqueId raw{};
  std::copy_n(id.begin(), id.size(), reinterpret_cast<std::uint8_t*>(raw.internal));
  FH_CHECK(ncclCommInitRank(&comm_, world, raw, rank));
}

std::vector<std::unique_ptr<NcclCommunicator>> NcclCommunicator::for_local_devices(const std::vector<int>& devices) {
  const int world = static_cast<int>(devices.size());
  FH_EXPECT(world >= 1, "NcclCommunicator::for_local_devices: no devices");
  nvls_off_unless_set();
  const NcclId id = nccl_unique_id();
  ncclUniqueId raw{};
  std::copy_n(id.begin(), id.size(), reinterpret_cast<std::uint8_t*>(raw.internal));
  int current = 0;
  FH_CHECK(cudaGetDevice(&current));
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  FH_CHECK(ncclGroupStart());
  for (int r = 0; r < world; ++r) {
    const cudaError_t set = cudaSetDevice(devices[static_cast<std::size_t>(r)]);
    const ncclResult_t init =
        set == cudaSuccess ? ncclCommInitRank(&comms[static_cast<std::size_t>(r)], world, raw, r) : ncclSuccess;
    if (set != cudaSuccess || init != ncclSuccess) {
      (void)ncclGroupEnd();
      (void)cudaSetDevice(current);
      FH_CHECK(set);
      FH_CHECK(init);
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  FH_CHECK(cudaSetDevice(current));
  FH_CHECK(end);
  std::vector<std::unique_ptr<NcclCommunicator>> out;
  for (int r = 0; r < world; ++r) out.emplace_back(new NcclCommunicator(comms[static_cast<std::size_t>(r)], world, r));
  return out;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  // Destructors do not throw: a failure here leaves nothing the caller could act on.
  if (aborted_.load()) return;  // ncclCommAbort freed it
  (void)ncclCommDestroy(comm_);
}

void NcclCommunicator::all_reduce_mean(float* data, std::int64_t count, cudaStream_t stream,
                                       std::int64_t bucket_floats) {
  const std::size_t n = as_count(count, "NcclCommunicator::all_reduce_mean");
  FH_EXPECT(bucket_floats >= 0, "NcclCommunicator::all_reduce_mean: bucket_floats must be >= 0");
  if (n == 0) return;
  const std::size_t bucket = bucket_floats > 0 ? static_cast<std::size_t>(bucket_floats) : n;
  FH_CHECK(ncclGroupStart());
  for (std::size_t at = 0; at < n; at += bucket) {
    const std::size_t len = std::min(bucket, n - at);
    // One rank: a sum, which NCCL leaves in place untouched (ncclAvg would scale by 1/1 in a kernel,
    // exact for normal numbers but not promised for subnormals).
    const ncclResult_t r =
        ncclAllReduce(data + at, data + at, len, ncclFloat32, world_ == 1 ? ncclSum : ncclAvg, comm_, stream);
    if (r != ncclSuccess) {
      (void)ncclGroupEnd();
      FH_CHECK(r);
    }
  }
  FH_CHECK(ncclGroupEnd());
}

void NcclCommunicator::max_u32(std::uint32_t* flags, std::int64_t count, cudaStream_t stream) {
  const std::size_t n = as_count(count, "NcclCommunicator::max_u32");
  if (n == 0) return;
  FH_CHECK(ncclAllReduce(flags, flags, n, ncclUint32, ncclMax, comm_, stream));
}

void NcclCommunicator::broadcast(float* data, std::int64_t count, int root, cudaStream_t stream) {
  const std::size_t n = as_count(count, "NcclCommunicator::broadcast");
  FH_EXPECT(root >= 0 && root < world_, "NcclCommunicator::broadcast: root out of range");
  if (n == 0) return;
  FH_CHECK(ncclBroadcast(data, data, n, ncclFloat32, root, comm_, stream));
}

void NcclCommunicator::abort() noexcept {
  bool expected = false;
  if (!aborted_.compare_exchange_strong(expected, true)) return;
  if (comm_ != nullptr) (void)ncclCommAbort(comm_);
}

std::string NcclCommunicator::async_error() const {
  if (aborted_.load()) return "aborted";
  ncclResult_t r = ncclSuccess;
  if (ncclCommGetAsyncError(comm_, &r) != ncclSuccess) return "ncclCommGetAsyncError failed";
  if (r == ncclSuccess || r == ncclInProgress) return "";
  return ncclGetErrorString(r);
}

}  // namespace foxhunt::gpu
