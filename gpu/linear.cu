#include "gpu/linear.hpp"
#include "gpu/linear_drelu.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>

#include "gpu/cast.hpp"
#include "gpu/check.hpp"
#include "gpu/device.hpp"
#include "gpu/launch.cuh"
#include "gpu/partial_sum.cuh"

namespace foxhunt::gpu {
namespace {

std::atomic<bool> g_force_unfused{false};
std::atomic<bool> g_disable_small{false};

constexpr std::int64_t round_up(std::int64_t a, std::int64_t b) { return (a + b - 1) / b * b; }

// Leading dimension of aux per batch row: bits for the ReLU mask (cuBLASLt: multiple of 128),
// floats for the GELU input (cuBLASLt: multiple of 8).
std::int64_t aux_ld(std::int64_t out_features, Activation act) {
  if (act == Activation::relu) return round_up(out_features, 128);
  if (act == Activation::gelu || act == Activation::tanh) return round_up(out_features, 8);
  return 0;
}

// aux of batch rows [row, ...): relu masks are ld bits a row (ld % 128 == 0: whole 16-byte words),
// gelu/tanh pre-activations ld floats a row.
void* aux_rows(void* aux, std::int64_t row, std::int64_t out_features, Activation act) {
  if (aux == nullptr || row == 0) return aux;
  const std::int64_t ld = aux_ld(out_features, act);
  const std::int64_t bytes =
      act == Activation::relu ? row * ld / 8 : row * ld * static_cast<std::int64_t>(sizeof(float));
  return static_cast<std::byte*>(aux) + bytes;
}

void expect_supported(Activation act, const char* op) {
  FH_EXPECT(act == Activation::identity || act == Activation::relu || act == Activation::gelu ||
                act == Activation::tanh,
            std::string(op) + ": act must be identity, relu, gelu or tanh, got " +
                std::string(activation_name(act)) + "; compose other activations with a separate kernel");
}

// Calls f(std::integral_constant<Activation, A>{}) with A = act, as gpu/activations.cu's dispatch
// does, over the activations the layer fuses (expect_supported; any other reads as identity).
template <class F>
void dispatch(Activation act, F&& f) {
  switch (act) {
    case Activation::relu:
      return f(std::integral_constant<Activation, Activation::relu>{});
    case Activation::gelu:
      return f(std::integral_constant<Activation, Activation::gelu>{});
    case Activation::tanh:
      return f(std::integral_constant<Activation, Activation::tanh>{});
    default:
      return f(std::integral_constant<Activation, Activation::identity>{});
  }
}

// Largest power of two (<= 256) dividing the address: what cuBLASLt's heuristic may assume.
std::uint32_t alignment_of(const void* p) {
  if (p == nullptr) return 256;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 1;
  while (align < 256 && (a % (2u * align)) == 0) align *= 2;
  return align;
}

// ---- cuBLASLt plumbing ---------------------------------------------------------------------

class MatmulDesc {
 public:
  explicit MatmulDesc(cublasComputeType_t compute) { FH_CHECK(cublasLtMatmulDescCreate(&desc_, compute, CUDA_R_32F)); }
  ~MatmulDesc() { cublasLtMatmulDescDestroy(desc_); }
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
  template <class T>
  void set(cublasLtMatmulDescAttributes_t attr, const T& value) {
    FH_CHECK(cublasLtMatmulDescSetAttribute(desc_, attr, &value, sizeof(T)));
  }
  cublasLtMatmulDesc_t get() const { return desc_; }

 private:
  cublasLtMatmulDesc_t desc_ = nullptr;
};

class MatrixLayout {
 public:
  MatrixLayout(std::int64_t rows, std::int64_t cols, std::int64_t ld, cudaDataType_t type = CUDA_R_32F) {
    FH_CHECK(cublasLtMatrixLayoutCreate(&layout_, type, static_cast<std::uint64_t>(rows),
                                        static_cast<std::uint64_t>(cols), ld));
  }
  ~MatrixLayout() { cublasLtMatrixLayoutDestroy(layout_); }
  MatrixLayout(const MatrixLayout&) = delete;
  MatrixLayout& operator=(const MatrixLayout&) = delete;
  cublasLtMatrixLayout_t get() const { return layout_; }

 private:
  cublasLtMatrixLayout_t layout_ = nullptr;
};

class Preference {
 public:
  Preference() { FH_CHECK(cublasLtMatmulPreferenceCreate(&pref_)); }
  ~Preference() { cublasLtMatmulPreferenceDestroy(pref_); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  template <class T>
  void set(cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
    FH_CHECK(cublasLtMatmulPreferenceSetAttribute(pref_, attr, &value, sizeof(T)));
  }
  cublasLtMatmulPreference_t get() const { return pref_; }

 private:
  cublasLtMatmulPreference_t pref_ = nullptr;
};

// Algorithm choice among the heuristic's first kHeuristicResults (best first). For small GEMMs
// (k <= kNoSplitMaxK and m n <= kSmallGemmOutputs: the learner's 256-wide layers) each extra kernel
// costs more than the GEMM saves: split-K adds a reduction kernel (cublasLt splitKreduce / split_k_kernel), and an
// algorithm whose kernel lacks the requested epilogue gets a separate epilogue::globalKernel pass. So the pick prefers,
// in heuristic order, an algorithm without split-K and with the epilogue in its capability mask; failing a split-free
// one, the best result forced to one split (checked with cublasLtMatmulAlgoCheck). Any heuristic result computes the
// same GEMM: only speed changes.
constexpr int kHeuristicResults = 8;
constexpr std::int64_t kNoSplitMaxK = 2048;
constexpr std::int64_t kSmallGemmOutputs = std::int64_t{1} << 20;

std::int32_t splitk_of(const cublasLtMatmulAlgo_t& algo) {
  std::int32_t splits = 1;
  std::size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits), &written) !=
      CUBLAS_STATUS_SUCCESS)
    return 1;  // unknown: take it as unsplit
  return splits;
}

bool epilogue_native(const cublasLtMatmulAlgo_t& algo, cublasLtEpilogue_t epilogue) {
  if (epilogue == CUBLASLT_EPILOGUE_DEFAULT) return true;
  std::uint32_t mask = 0;
  std::size_t written = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_EPILOGUE_MASK, &mask, sizeof(mask), &written) !=
      CUBLAS_STATUS_SUCCESS)
    return false;
  const auto want = static_cast<std::uint32_t>(epilogue);
  return (mask & want) == want;
}

// A forward epilogue that also writes the activation's aux output (the ReLU mask or GELU's input),
// on f32 operands (fp32, TF32). cuBLASLt's capability mask lists these for kernels that only reach
// them through a separate epilogue::globalKernel pass after the GEMM: an ncu profile of the large
// DQN learner (H100, TF32, 4096 and 8192 rows x 1024) showed RELU_AUX_BIAS run that way at every
// forward layer, 44 and 85 us a pass, 40% of the update. So large f32-operand GEMMs never take them
// as native (launch_epilogue instead): 1,512 -> 2,025 updates/s (TF32), 759 -> 865 (fp32). The
// bf16 kernels run them inside the GEMM (no extra graph node), and our pass made that learner 9%
// slower, so bf16 operands keep them.
bool forward_aux_epilogue(cublasLtEpilogue_t e, cudaDataType_t ab_type) {
  return ab_type == CUDA_R_32F && (e == CUBLASLT_EPILOGUE_RELU_AUX || e == CUBLASLT_EPILOGUE_RELU_AUX_BIAS ||
                                   e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
}

// One column-major GEMM D (m, n) = op(A) op(B) + beta D, with an epilogue. A and B are of ab_type
// (f32, or bf16 copies for LinearMath::bf16); C = D, bias and aux are f32 always.
struct GemmSpec {
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  std::int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  std::int64_t lda = 0;
  const void* b = nullptr;
  std::int64_t ldb = 0;
  float* d = nullptr;
  std::int64_t ldd = 0;
  float beta = 0.f;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t ab_type = CUDA_R_32F;
  const float* bias = nullptr;
  void* aux = nullptr;
  std::int64_t aux_ld = 0;
  // Only an algorithm whose kernel has the epilogue itself (no separate epilogue pass), else none.
  bool native_epilogue_only = false;
};

std::optional<cublasLtMatmulAlgo_t> pick_algo(const cublasLtMatmulHeuristicResult_t* results, int count,
                                              const GemmSpec& g, cublasLtHandle_t lt, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t d, std::size_t ws_bytes) {
  int first = -1, best = -1, best_score = -1;
  for (int i = 0; i < count; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    if (first < 0) first = i;
    const int score =
        (splitk_of(results[i].algo) <= 1 ? 1 : 0) + (epilogue_native(results[i].algo, g.epilogue) ? 1 : 0);
    if (score > best_score) {
      best = i;
      best_score = score;
    }
  }
  if (first < 0) return std::nullopt;
  if (g.native_epilogue_only) {  // the heuristic's first algorithm with the epilogue in its kernel
    for (int i = first; i < count; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS && epilogue_native(results[i].algo, g.epilogue))
        return results[i].algo;
    return std::nullopt;
  }
  // large GEMMs: the heuristic's own choice (split-K pays off for large k; the GEMM dominates),
  // but only where its kernel has the epilogue natively. Otherwise cuBLASLt would run its own
  // epilogue::globalKernel pass after the GEMM (measured ~2x slower than ours at 8192 x 1024):
  // report "no fused algorithm" so that linear_forward runs the plain GEMM (same heuristic's
  // best) and launch_epilogue.
  if (g.k > kNoSplitMaxK || g.m * g.n > kSmallGemmOutputs) {
    if (forward_aux_epilogue(g.epilogue, g.ab_type) || !epilogue_native(results[first].algo, g.epilogue)) return std::nullopt;
    return results[first].algo;
  }
  cublasLtMatmulAlgo_t algo = results[best].algo;
  if (splitk_of(algo) > 1) {  // no split-free result: try the best one with one split
    cublasLtMatmulAlgo_t one = algo;
    const std::int32_t splits = 1;
    const std::uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
    cublasLtMatmulHeuristicResult_t check{};
    if (cublasLtMatmulAlgoConfigSetAttribute(&one, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits)) ==
            CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulAlgoConfigSetAttribute(&one, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme)) ==
            CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulAlgoCheck(lt, desc, a, b, d, d, &one, &check) == CUBLAS_STATUS_SUCCESS &&
        check.state == CUBLAS_STATUS_SUCCESS && check.workspaceSize <= ws_bytes)
      algo = one;
  }
  return algo;
}

using AlgoKey = std::array<std::int64_t, 20>;
struct AlgoEntry {
  bool supported = false;  // false: cuBLASLt has no algorithm for this configuration
  cublasLtMatmulAlgo_t algo{};
};
std::mutex g_algo_mutex;
std::map<AlgoKey, AlgoEntry> g_algos;

// Runs the GEMM; returns false (and runs nothing) when cuBLASLt has no algorithm for this
// configuration, so the caller can fall back. Other cuBLASLt failures throw.
bool run_gemm(const GemmSpec& g, const BlasLane& lane) {
  MatmulDesc desc(g.compute);
  desc.set(CUBLASLT_MATMUL_DESC_TRANSA, static_cast<std::int32_t>(g.trans_a));
  desc.set(CUBLASLT_MATMUL_DESC_TRANSB, static_cast<std::int32_t>(g.trans_b));
  desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<std::uint32_t>(g.epilogue));
  if (g.bias) desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(g.bias));
  if (g.aux) {
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.aux_ld);
  }
  const bool na = g.trans_a == CUBLAS_OP_N, nb = g.trans_b == CUBLAS_OP_N;
  MatrixLayout a_layout(na ? g.m : g.k, na ? g.k : g.m, g.lda, g.ab_type);
  MatrixLayout b_layout(nb ? g.k : g.n, nb ? g.n : g.k, g.ldb, g.ab_type);
  MatrixLayout d_layout(g.m, g.n, g.ldd);

  int device = 0;
  FH_CHECK(cudaGetDevice(&device));
  const AlgoKey key{device,
                    g.trans_a,
                    g.trans_b,
                    g.m,
                    g.n,
                    g.k,
                    g.lda,
                    g.ldb,
                    g.ldd,
                    static_cast<std::int64_t>(g.epilogue),
                    g.beta != 0.f,
                    alignment_of(g.a),
                    alignment_of(g.b),
                    alignment_of(g.d),
                    g.bias ? alignment_of(g.bias) : 0,
                    g.aux ? alignment_of(g.aux) : 0,
                    g.aux_ld,
                    static_cast<std::int64_t>(lane.workspace ? lane.workspace_bytes : 0),
                    static_cast<std::int64_t>(g.compute),
                    static_cast<std::int64_t>(g.ab_type)};
  AlgoEntry entry;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(g_algo_mutex);
    if (auto it = g_algos.find(key); it != g_algos.end()) {
      entry = it->second;
      cached = true;
    }
  }
  if (!cached) {
    Preference pref;
    pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
             static_cast<std::uint64_t>(lane.workspace ? lane.workspace_bytes : 0));
    // Tell the heuristic the real alignments: callers may pass views into larger buffers.
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(g.a));
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(g.b));
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(g.d));
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(g.d));
    std::array<cublasLtMatmulHeuristicResult_t, kHeuristicResults> results{};
    int count = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(lane.lt, desc.get(), a_layout.get(), b_layout.get(), d_layout.get(),
                                       d_layout.get(), pref.get(), kHeuristicResults, results.data(), &count);
    if (status == CUBLAS_STATUS_SUCCESS && count > 0) {
      const std::size_t ws_bytes = lane.workspace ? lane.workspace_bytes : 0;
      if (const auto algo = pick_algo(results.data(), count, g, lane.lt, desc.get(), a_layout.get(), b_layout.get(),
                                      d_layout.get(), ws_bytes)) {
        entry.supported = true;
        entry.algo = *algo;
      }
    } else if (status != CUBLAS_STATUS_SUCCESS && status != CUBLAS_STATUS_NOT_SUPPORTED && !g.native_epilogue_only) {
      FH_CHECK(status);  // a real error (bad descriptor): report it (an optional fused epilogue: just none)
    }
    std::lock_guard<std::mutex> lock(g_algo_mutex);
    g_algos.emplace(key, entry);
  }
  if (!entry.supported) return false;
  const float alpha = 1.f;
  const cublasStatus_t status = cublasLtMatmul(lane.lt, desc.get(), &alpha, g.a, a_layout.get(), g.b, b_layout.get(),
                                               &g.beta, g.d, d_layout.get(), g.d, d_layout.get(), &entry.algo,
                                               lane.workspace, lane.workspace ? lane.workspace_bytes : 0, lane.stream);
  // The heuristic offered it, the launch refused (an optional fused epilogue: any refusal): remember.
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (g.native_epilogue_only && status == CUBLAS_STATUS_INVALID_VALUE)) {
    std::lock_guard<std::mutex> lock(g_algo_mutex);
    g_algos[key].supported = false;
    return false;
  }
  FH_CHECK(status);
  return true;
}

cublasComputeType_t compute_type(LinearMath math) {
  switch (math) {
    case LinearMath::tf32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    default:  // fp32, and bf16 (bf16 A/B, f32 products and accumulation: see run_bf16_chunks)
      return CUBLAS_COMPUTE_32F;
  }
}

void run_gemm_or_throw(const GemmSpec& g, const BlasLane& lane, const char* what) {
  if (!run_gemm(g, lane))
    throw Error(std::string("cuBLASLt has no algorithm for the ") + what + " GEMM (m=" + std::to_string(g.m) +
                ", n=" + std::to_string(g.n) + ", k=" + std::to_string(g.k) + ")");
}

// ---- bf16 operands ---------------------------------------------------------------------------
// LinearMath::bf16 runs cuBLASLt with A and B in CUDA_R_16BF and C/D, bias, aux in f32 (compute
// CUBLAS_COMPUTE_32F, scale f32): right before each GEMM its f32 operands are rounded (to nearest
// even) into bf16 copies by gpu/cast's vectorized kernel on the lane's stream. The copies live in the
// lane's workspace: it belongs to the stream already (GEMMs of one stream run one after another, and
// a graph captured on the lane replays with the lane's buffers), so nothing is allocated and the path
// is capturable. The workspace's first part holds the copies; its last quarter (at most
// kBf16LtWorkspace) stays cuBLASLt's workspace. Operands larger than the copy area are processed in
// column chunks of the GEMM: over n (forward and d_in: batch rows; the A operand, the weight, is
// copied once) or over k (d_weight: the batch, accumulated with beta = 1 after the first chunk).
constexpr std::size_t kBf16LtWorkspace = std::size_t{4} << 20;
constexpr std::size_t kScratchAlign = 256;

std::size_t scratch_align(std::size_t bytes) { return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

enum class ChunkDim : std::uint8_t { n, k };

// Converts g's f32 A and B (contiguous: lda / ldb = their stored rows) to bf16 chunk by chunk and
// calls run_chunk(GemmSpec& chunk, std::int64_t first_column, const BlasLane& lt_lane) for each,
// chunk.d (and chunk.beta for k) set, chunk.aux left for run_chunk to offset. Returns false (after
// running nothing but conversions) when one_chunk_only and the operands need more than one chunk, or
// when run_chunk returns false.
template <class RunChunk>
bool run_bf16_chunks(const GemmSpec& g, ChunkDim dim, bool one_chunk_only, const BlasLane& lane, const char* what,
                     RunChunk&& run_chunk) {
  const std::string name(what);
  FH_EXPECT(lane.workspace != nullptr && lane.workspace_bytes >= 4 * kScratchAlign,
            name + ": bf16 GEMMs keep their bf16 operands in the BlasLane's workspace; this lane has " +
                std::to_string(lane.workspace ? lane.workspace_bytes : 0) + " bytes (use DeviceContext::blas)");
  const std::size_t lt_bytes = std::min(lane.workspace_bytes / 4, kBf16LtWorkspace) / kScratchAlign * kScratchAlign;
  const std::size_t scratch = (lane.workspace_bytes - lt_bytes) / kScratchAlign * kScratchAlign;
  auto* const base = static_cast<std::byte*>(lane.workspace);
  BlasLane lt_lane = lane;
  lt_lane.workspace = base + scratch;
  lt_lane.workspace_bytes = lane.workspace_bytes - scratch;

  const bool na = g.trans_a == CUBLAS_OP_N, nb = g.trans_b == CUBLAS_OP_N;
  const std::int64_t a_cols = na ? g.k : g.m;  // stored A: lda x a_cols
  constexpr std::size_t kB = sizeof(__nv_bfloat16);
  // chunk columns: over n, stored B is k x n (column j at b + j ldb); over k, stored A is m x k and
  // stored B is n x k (op T), column j of each at + j ld.
  FH_EXPECT(dim == ChunkDim::n ? nb : (na && !nb), name + ": internal: bf16 chunk dimension does not fit the GEMM");
  const std::int64_t total = dim == ChunkDim::n ? g.n : g.k;
  const std::size_t a_bytes = scratch_align(static_cast<std::size_t>(g.lda * a_cols) * kB);
  std::int64_t cols = 0;
  if (dim == ChunkDim::n) {
    if (a_bytes < scratch)
      cols = static_cast<std::int64_t>((scratch - a_bytes) / (static_cast<std::size_t>(g.ldb) * kB));
  } else if (scratch > 2 * kScratchAlign) {
    cols = static_cast<std::int64_t>((scratch - 2 * kScratchAlign) / (static_cast<std::size_t>(g.lda + g.ldb) * kB));
  }
  FH_EXPECT(cols >= 1, name + ": the bf16 copies of its operands (m=" + std::to_string(g.m) + ", n=" +
                           std::to_string(g.n) + ", k=" + std::to_string(g.k) + ") do not fit the " +
                           std::to_string(scratch) + " bytes of the lane workspace kept for them; give the "
                           "DeviceContext a larger workspace");
  cols = std::min(cols, total);
  if (one_chunk_only && cols < total) return false;

  const auto* const a32 = static_cast<const float*>(g.a);
  const auto* const b32 = static_cast<const float*>(g.b);
  auto* const a16 = reinterpret_cast<__nv_bfloat16*>(base);
  auto* const b16 = reinterpret_cast<__nv_bfloat16*>(
      base + (dim == ChunkDim::n ? a_bytes : scratch_align(static_cast<std::size_t>(cols * g.lda) * kB)));
  if (dim == ChunkDim::n) cast_f32_to_bf16(a16, a32, g.lda * a_cols, lane.stream);
  for (std::int64_t c0 = 0; c0 < total; c0 += cols) {
    const std::int64_t nc = std::min(cols, total - c0);
    GemmSpec c = g;
    c.ab_type = CUDA_R_16BF;
    c.compute = CUBLAS_COMPUTE_32F;
    c.a = a16;
    c.b = b16;
    if (dim == ChunkDim::n) {
      cast_f32_to_bf16(b16, b32 + c0 * g.ldb, nc * g.ldb, lane.stream);
      c.n = nc;
      c.d = g.d + c0 * g.ldd;
    } else {
      cast_f32_to_bf16(a16, a32 + c0 * g.lda, nc * g.lda, lane.stream);
      cast_f32_to_bf16(b16, b32 + c0 * g.ldb, nc * g.ldb, lane.stream);
      c.k = nc;
      c.beta = c0 == 0 ? g.beta : 1.f;
    }
    if (!run_chunk(c, c0, static_cast<const BlasLane&>(lt_lane))) return false;
  }
  return true;
}

// ---- activation math (tanh-approximate GELU, as cuBLASLt and PyTorch approximate="tanh") -------

constexpr float kGeluC0 = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluC1 = 0.044715f;

__device__ __forceinline__ float gelu(float x) {
  const float u = kGeluC0 * (x + kGeluC1 * x * x * x);
  return 0.5f * x * (1.f + tanhf(u));
}

__device__ __forceinline__ float gelu_grad(float x) {
  const float u = kGeluC0 * (x + kGeluC1 * x * x * x);
  const float t = tanhf(u);
  const float du = kGeluC0 * (1.f + 3.f * kGeluC1 * x * x);
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * du;
}

// Block shape of the row-tiled kernels: 32 columns (one warp) x 8 rows.
constexpr int kTileCols = 32;
constexpr int kTileRows = 8;

// Fallback epilogue: out (B, out_f) holds x W^T; adds bias, applies act, writes aux in cuBLASLt's
// layout. A warp covers 32 consecutive columns of one row, so one ballot is one mask word.
template <Activation A>
__global__ void epilogue_kernel(float* __restrict__ out, void* __restrict__ aux, const float* __restrict__ bias,
                                std::int64_t batch, std::int64_t out_f, std::int64_t ld) {
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kTileCols + threadIdx.x;
  const bool in_range = col < out_f;
  const float b = (bias && in_range) ? bias[col] : 0.f;
  for (std::int64_t row = static_cast<std::int64_t>(blockIdx.y) * kTileRows + threadIdx.y; row < batch;
       row += static_cast<std::int64_t>(gridDim.y) * kTileRows) {  // warp-uniform bound
    float x = in_range ? out[row * out_f + col] + b : 0.f;
    if constexpr (A == Activation::relu) {
      if (aux) {
        const unsigned mask = __ballot_sync(0xffffffffu, in_range && x > 0.f);
        if (threadIdx.x == 0)
          static_cast<std::uint32_t*>(aux)[(row * ld + static_cast<std::int64_t>(blockIdx.x) * kTileCols) / 32] = mask;
      }
      x = x > 0.f ? x : 0.f;
    } else if constexpr (A == Activation::gelu) {
      if (aux && in_range) static_cast<float*>(aux)[row * ld + col] = x;
      x = gelu(x);
    } else if constexpr (A == Activation::tanh) {
      if (aux && in_range) static_cast<float*>(aux)[row * ld + col] = x;
      x = tanhf(x);
    }
    if (in_range) out[row * out_f + col] = x;
  }
}

// Same epilogue with 16-byte accesses, for out_f % 4 == 0 with out and bias 16-byte aligned (the
// large layers: a pure bandwidth pass). Lane l of a warp owns columns c0 + 4l .. c0 + 4l + 3 of one
// row (c0 = blockIdx.x * 128): a warp covers 128 columns = 4 mask words, word w from lanes
// 8w .. 8w + 7, each giving 4 bits at bit offset 4 (l % 8); an OR-shuffle over those 8 lanes builds
// the word. Same float operations per element as epilogue_kernel, so bitwise the same outputs.
// out_f % 4 == 0: a float4 is wholly in range or wholly out. GELU aux: ld % 8 == 0, aux 16-byte
// aligned and the column a multiple of 4, so its float4 stores are aligned.
constexpr int kVecTileCols = 4 * kTileCols;

template <Activation A>
__global__ void epilogue_vec4_kernel(float* __restrict__ out, void* __restrict__ aux, const float* __restrict__ bias,
                                     std::int64_t batch, std::int64_t out_f, std::int64_t ld) {
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.x) * kVecTileCols;
  const std::int64_t col = c0 + 4 * static_cast<std::int64_t>(threadIdx.x);
  const bool in_range = col < out_f;
  const float4 b = (bias && in_range) ? *reinterpret_cast<const float4*>(bias + col) : make_float4(0.f, 0.f, 0.f, 0.f);
  for (std::int64_t row = static_cast<std::int64_t>(blockIdx.y) * kTileRows + threadIdx.y; row < batch;
       row += static_cast<std::int64_t>(gridDim.y) * kTileRows) {  // warp-uniform bound
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (in_range) {
      const float4 o = *reinterpret_cast<const float4*>(out + row * out_f + col);
      x = make_float4(o.x + b.x, o.y + b.y, o.z + b.z, o.w + b.w);
    }
    if constexpr (A == Activation::relu) {
      if (aux) {
        // bit e of this lane's nibble: element e > 0 (0 past out_f, as the scalar kernel's ballot)
        std::uint32_t word =
            in_range ? ((x.x > 0.f ? 1u : 0u) | (x.y > 0.f ? 2u : 0u) | (x.z > 0.f ? 4u : 0u) | (x.w > 0.f ? 8u : 0u))
                     : 0u;
        word <<= 4 * (threadIdx.x & 7u);
        word |= __shfl_xor_sync(0xffffffffu, word, 1);
        word |= __shfl_xor_sync(0xffffffffu, word, 2);
        word |= __shfl_xor_sync(0xffffffffu, word, 4);
        // word w = threadIdx.x / 8 starts at column c0 + 32 w; only words holding a column < out_f
        // are written (as the scalar kernel: the padding words up to ld are left alone).
        const std::int64_t word_col = c0 + 32 * static_cast<std::int64_t>(threadIdx.x >> 3);
        if ((threadIdx.x & 7u) == 0 && word_col < out_f)
          static_cast<std::uint32_t*>(aux)[(row * ld + word_col) / 32] = word;
      }
      x.x = x.x > 0.f ? x.x : 0.f;
      x.y = x.y > 0.f ? x.y : 0.f;
      x.z = x.z > 0.f ? x.z : 0.f;
      x.w = x.w > 0.f ? x.w : 0.f;
    } else if constexpr (A == Activation::gelu) {
      if (aux && in_range) *reinterpret_cast<float4*>(static_cast<float*>(aux) + row * ld + col) = x;
      x = make_float4(gelu(x.x), gelu(x.y), gelu(x.z), gelu(x.w));
    } else if constexpr (A == Activation::tanh) {
      if (aux && in_range) *reinterpret_cast<float4*>(static_cast<float*>(aux) + row * ld + col) = x;
      x = make_float4(tanhf(x.x), tanhf(x.y), tanhf(x.z), tanhf(x.w));
    }
    if (in_range) *reinterpret_cast<float4*>(out + row * out_f + col) = x;
  }
}

// d_pre = d_out * act'(pre) (written when d_pre != null) and the bias gradient: the block's column
// sums over its rows go to bias_out[blockIdx.y * out_f + col] (partials), or straight into d_bias
// when the grid has one row split (bias_out == d_bias then).
// Block (kTileCols, kDpreRows): 32 rows per block so that one split (no finish kernel) covers the
// learner's batches with few rows per thread.
constexpr int kDpreRows = 32;

template <Activation A>
__global__ void __launch_bounds__(kTileCols* kDpreRows)
    dpre_bias_kernel(float* __restrict__ d_pre, float* __restrict__ bias_out, const float* __restrict__ d_out,
                     const void* __restrict__ aux, std::int64_t batch, std::int64_t out_f, std::int64_t ld,
                     std::int64_t rows_per_split, bool accumulate) {
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kTileCols + threadIdx.x;
  const bool in_range = col < out_f;
  const std::int64_t row_begin = static_cast<std::int64_t>(blockIdx.y) * rows_per_split;
  const std::int64_t row_end = min(batch, row_begin + rows_per_split);
  float acc = 0.f;
  if (in_range) {
#pragma unroll 4
    for (std::int64_t row = row_begin + threadIdx.y; row < row_end; row += kDpreRows) {
      float g = d_out[row * out_f + col];
      if constexpr (A == Activation::relu) {
        // ld is a multiple of 128 and col's tile starts at a multiple of 32: the whole warp reads
        // one word, and col's bit in it is col % 32.
        const std::uint32_t word = static_cast<const std::uint32_t*>(aux)[(row * ld + col) >> 5];
        if (((word >> (col & 31)) & 1u) == 0u) g = 0.f;
      } else if constexpr (A == Activation::gelu) {
        g *= gelu_grad(static_cast<const float*>(aux)[row * ld + col]);
      } else if constexpr (A == Activation::tanh) {
        const float t = tanhf(static_cast<const float*>(aux)[row * ld + col]);
        g *= 1.f - t * t;
      }
      if (d_pre) d_pre[row * out_f + col] = g;
      acc += g;
    }
  }
  if (bias_out == nullptr) return;  // uniform over the block
  __shared__ float sums[kDpreRows][kTileCols + 1];
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && in_range) {
    float s = 0.f;
#pragma unroll
    for (int r = 0; r < kDpreRows; ++r) s += sums[r][threadIdx.x];
    if (gridDim.y == 1)
      bias_out[col] = accumulate ? bias_out[col] + s : s;
    else
      bias_out[static_cast<std::int64_t>(blockIdx.y) * out_f + col] = s;
  }
}

// d_bias[j] (+)= sum over splits of partials[s, j], in split order (deterministic).
__global__ void bias_finish_kernel(float* __restrict__ d_bias, const float* __restrict__ partials, int splits,
                                   std::int64_t out_f, bool accumulate) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < out_f; j += stride) {
    float s = 0.f;
    for (int split = 0; split < splits; ++split) s += partials[static_cast<std::int64_t>(split) * out_f + j];
    d_bias[j] = accumulate ? d_bias[j] + s : s;
  }
}

// ---- small GEMMs of our own -----------------------------------------------------------------------
// For the learner's layers (B <= a few hundred rows, 256 wide) cuBLASLt's fp32 kernels take ~5 us,
// the bias+ReLU+mask epilogue then runs as a second kernel (epilogue::globalKernel), and split-K
// adds a reduction: 2-3 graph nodes per GEMM. For M N <= kSmallOutputs and K <= kSmallMaxK one
// kernel of ours does the GEMM and the epilogue, strict fp32 (no TF32), deterministic:
//   C (M, N) row-major, ldc:  C[m, n] = act(sum_k A(m, k) B(n, k) + bias[n]) (+ beta C[m, n])
//   A(m, k) = a[m lda + k] (AK) or a[k lda + m];  B(n, k) = b[n ldb + k] (BK) or b[k ldb + n].
// These GEMMs are latency-bound (a few tiles per SM, little math per tile), so:
//  - A block stages the whole K panel of its A and B tiles in shared memory (kSgKC deep chunks:
//    one chunk for K <= 256) with cp.async issued all at once and one wait: one memory round trip
//    per chunk instead of one per 32-deep k-tile. 16-byte copies where the base pointer is 16-byte
//    aligned and ld % 4 == 0 (every copied run then starts 16-byte aligned), else 4-byte ones;
//    zero-fill (cp.async src-size) past M, N and K, so padding adds exact zeros.
//  - In-block split-K: kSgKS thread groups each sum a contiguous slice of the chunk (4x4 register
//    micro-tiles, FMAs in k order); the partials meet in shared memory and are added in group
//    order. That order depends on K only (not on the tile shape, M or N): a row gives bitwise the
//    same result alone or stacked with other rows (online + target forward).
//  - Tile kSgBN = 32 columns x BM rows, BM = 32 when that still gives >= 3/4 of the SMs a tile,
//    else 16 (more, smaller tiles); 2 BM kSgKS threads (256 or 512).
// Epilogue: warp w takes rows w, w + warps, ..., lane = column: a warp's 32 columns of a row are
// one ReLU mask word (one ballot), as in epilogue_kernel.
constexpr int kSgBN = 32;   // tile columns (one warp in the epilogue)
constexpr int kSgKS = 8;    // k-groups per block (the split-K factor; fixes the summation order)
constexpr int kSgKC = 256;  // k depth staged at once
constexpr std::int64_t kSmallOutputs = std::int64_t{1} << 18;
constexpr std::int64_t kSmallMaxK = 1024;

// Staged depth: K rounded up to 4 (the micro-kernel steps 4 k at a time), at most kSgKC.
__host__ __device__ constexpr int sg_chunk(std::int64_t k) {
  return static_cast<int>((k + 3) / 4 * 4 < kSgKC ? (k + 3) / 4 * 4 : kSgKC);
}
// Row stride (floats) of a k-contiguous panel: = 4 (mod 32), so 8 lanes reading float4s of 8
// consecutive rows at the same k hit 8 distinct bank quads.
__host__ __device__ constexpr int sg_ld_k(int chunk) { return (chunk + 31) / 32 * 32 + 4; }
// Floats of the A panel (AK: [BM][ld_k], else [chunk][BM + 4]); the B panel follows it.
__host__ __device__ constexpr int sg_a_floats(bool ak, int bm, int chunk) {
  return ak ? bm * sg_ld_k(chunk) : chunk * (bm + 4);
}
__host__ __device__ constexpr int sg_b_floats(bool bk, int chunk) {
  return bk ? kSgBN * sg_ld_k(chunk) : chunk * (kSgBN + 4);
}
// Dynamic shared memory: the panels, later reused for the partials [kSgKS][BM][kSgBN + 1].
constexpr int sg_smem_bytes(bool ak, bool bk, int bm, int chunk) {
  const int panels = sg_a_floats(ak, bm, chunk) + sg_b_floats(bk, chunk);
  const int partials = kSgKS * bm * (kSgBN + 1);
  return 4 * (panels > partials ? panels : partials);
}
static_assert(sg_smem_bytes(false, false, 32, kSgKC) <= 227 * 1024, "panels exceed the H100/H200 block limit");

__device__ __forceinline__ void cp_async16(float* dst, const float* src, int src_bytes) {
  const auto d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async4(float* dst, const float* src, int src_bytes) {
  const auto d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Issues (no wait) the copies of a panel: global element (o, i) = g[o ldg + i] (i the contiguous
// index) for o in [o0, o0 + o_ext), i in [i0, i0 + i_ext) goes to s[(o - o0) lds + (i - i0)];
// elements with o >= o_lim or i >= i_lim become 0. i0 and i_ext are multiples of 4. vec: g is
// 16-byte aligned and ldg % 4 == 0. Consecutive threads take consecutive i (coalesced).
template <int Threads>
__device__ __forceinline__ void sg_stage(float* s, int lds, const float* __restrict__ g, std::int64_t ldg, bool vec,
                                         std::int64_t o0, int o_ext, std::int64_t o_lim, std::int64_t i0, int i_ext,
                                         std::int64_t i_lim) {
  if (vec) {
    const int per_row = i_ext / 4;
    const int total = o_ext * per_row;
    for (int t = static_cast<int>(threadIdx.x); t < total; t += Threads) {
      const int oo = t / per_row, ii = (t - oo * per_row) * 4;
      const std::int64_t o = o0 + oo, i = i0 + ii;
      const std::int64_t left = o < o_lim ? i_lim - i : 0;  // valid floats from i on
      const int n = left <= 0 ? 0 : (left >= 4 ? 4 : static_cast<int>(left));
      cp_async16(s + oo * lds + ii, n > 0 ? g + o * ldg + i : g, 4 * n);  // n = 0: reads nothing
    }
  } else {
    const int total = o_ext * i_ext;
    for (int t = static_cast<int>(threadIdx.x); t < total; t += Threads) {
      const int oo = t / i_ext, ii = t - oo * i_ext;
      const std::int64_t o = o0 + oo, i = i0 + ii;
      const bool ok = o < o_lim && i < i_lim;
      cp_async4(s + oo * lds + ii, ok ? g + o * ldg + i : g, ok ? 4 : 0);
    }
  }
}

template <Activation A, bool AK, bool BK, int BM>
__global__ void __launch_bounds__(2 * BM * kSgKS, 1)
    small_gemm_kernel(float* __restrict__ c, std::int64_t ldc, void* __restrict__ aux, std::int64_t aux_ld,
                      const float* __restrict__ a, std::int64_t lda, bool a_vec, const float* __restrict__ b,
                      std::int64_t ldb, bool b_vec, const float* __restrict__ bias, std::int64_t M, std::int64_t N,
                      std::int64_t K, float beta) {
  static_assert(BM == 16 || BM == 32, "tile rows");
  constexpr int kThreads = 2 * BM * kSgKS;
  constexpr int kGroup = 2 * BM;       // threads per k-group: (BM / 4) x (kSgBN / 4) micro-tiles of 4x4
  constexpr int kRowStep = BM / 4;     // AK: a thread's rows are tm + kRowStep i
  constexpr int kColStep = kSgBN / 4;  // BK: a thread's columns are tn + kColStep j
  constexpr int ldm = BM + 4, ldn = kSgBN + 4, ldr = kSgBN + 1;
  extern __shared__ float4 sg_smem4[];
  float* const smem = reinterpret_cast<float*>(sg_smem4);
  const int chunk = sg_chunk(K);
  const int ldk = sg_ld_k(chunk);
  float* const s_a = smem;                               // AK: [BM][ldk] (m, k); else [chunk][ldm] (k, m)
  float* const s_b = smem + sg_a_floats(AK, BM, chunk);  // BK: [kSgBN][ldk] (n, k); else [chunk][ldn] (k, n)
  const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.y) * BM;
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * kSgBN;
  const int grp = static_cast<int>(threadIdx.x) / kGroup, t = static_cast<int>(threadIdx.x) % kGroup;
  const int tn = t % kColStep, tm = t / kColStep;
  // Bank layout: in a warp, 8 consecutive lanes share tm and have tn = 0..7. k-contiguous panels:
  // they read 8 consecutive rows (ld = 4 mod 32: distinct quads) or one row (broadcast); row-
  // contiguous panels: 8 consecutive float4s of one k row, or one (broadcast).
  auto row_of = [&](int i) { return AK ? tm + kRowStep * i : 4 * tm + i; };
  auto col_of = [&](int j) { return BK ? tn + kColStep * j : 4 * tn + j; };

  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;

  for (std::int64_t k0 = 0; k0 < K; k0 += kSgKC) {  // uniform over the block
    const int kc = static_cast<int>(K - k0 < kSgKC ? K - k0 : kSgKC);
    const int kc4 = (kc + 3) / 4 * 4;  // <= chunk
    if constexpr (AK)
      sg_stage<kThreads>(s_a, ldk, a, lda, a_vec, m0, BM, M, k0, kc4, K);
    else
      sg_stage<kThreads>(s_a, ldm, a, lda, a_vec, k0, kc4, K, m0, BM, M);
    if constexpr (BK)
      sg_stage<kThreads>(s_b, ldk, b, ldb, b_vec, n0, kSgBN, N, k0, kc4, K);
    else
      sg_stage<kThreads>(s_b, ldn, b, ldb, b_vec, k0, kc4, K, n0, kSgBN, N);
    cp_async_wait_all();
    __syncthreads();  // every thread's copies have landed
    // This group's slice [kb, ke) of the chunk, a multiple of 4 deep (trailing groups may be empty).
    const int per = ((kc4 + kSgKS - 1) / kSgKS + 3) / 4 * 4;
    const int kb = grp * per, ke = min(kc4, kb + per);
#pragma unroll 2
    for (int k = kb; k < ke; k += 4) {
      float fa[4][4], fb[4][4];  // fa[i][kk] = A(row_of(i), k + kk), fb[j][kk] = B(col_of(j), k + kk)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        if constexpr (AK) {
          const float4 v = *reinterpret_cast<const float4*>(s_a + row_of(q) * ldk + k);
          fa[q][0] = v.x;
          fa[q][1] = v.y;
          fa[q][2] = v.z;
          fa[q][3] = v.w;
        } else {
          const float4 v = *reinterpret_cast<const float4*>(s_a + (k + q) * ldm + 4 * tm);
          fa[0][q] = v.x;
          fa[1][q] = v.y;
          fa[2][q] = v.z;
          fa[3][q] = v.w;
        }
        if constexpr (BK) {
          const float4 v = *reinterpret_cast<const float4*>(s_b + col_of(q) * ldk + k);
          fb[q][0] = v.x;
          fb[q][1] = v.y;
          fb[q][2] = v.z;
          fb[q][3] = v.w;
        } else {
          const float4 v = *reinterpret_cast<const float4*>(s_b + (k + q) * ldn + 4 * tn);
          fb[0][q] = v.x;
          fb[1][q] = v.y;
          fb[2][q] = v.z;
          fb[3][q] = v.w;
        }
      }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(fa[i][kk], fb[j][kk], acc[i][j]);
    }
    __syncthreads();  // the panels are rewritten by the next chunk, or reused for the partials
  }

  float* const red = smem;  // [kSgKS][BM][ldr]
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) red[(grp * BM + row_of(i)) * ldr + col_of(j)] = acc[i][j];
  __syncthreads();

  // Epilogue, as epilogue_kernel: group partials in group order, bias, activation, aux in
  // cuBLASLt's layout; or beta C.
  constexpr int kWarps = kThreads / 32;
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const std::int64_t col = n0 + lane;
  const bool in_range = col < N;
  const float bias_v = (bias && in_range) ? bias[col] : 0.f;
  for (int r = warp; r < BM; r += kWarps) {
    const std::int64_t row = m0 + r;
    if (row >= M) break;  // uniform over the warp
    float x = red[r * ldr + lane];
#pragma unroll
    for (int s = 1; s < kSgKS; ++s) x += red[(s * BM + r) * ldr + lane];
    x += bias_v;
    if constexpr (A == Activation::relu) {
      if (aux) {
        const unsigned mask = __ballot_sync(0xffffffffu, in_range && x > 0.f);
        // aux_ld is a multiple of 128 and n0 of 32: this warp's columns are exactly one word
        if (lane == 0) static_cast<std::uint32_t*>(aux)[(row * aux_ld + n0) >> 5] = mask;
      }
      x = x > 0.f ? x : 0.f;
    } else if constexpr (A == Activation::gelu) {
      if (aux && in_range) static_cast<float*>(aux)[row * aux_ld + col] = x;
      x = gelu(x);
    } else if constexpr (A == Activation::tanh) {
      if (aux && in_range) static_cast<float*>(aux)[row * aux_ld + col] = x;
      x = tanhf(x);
    }
    if (in_range) {
      float* dst = c + row * ldc + col;
      *dst = beta != 0.f ? fmaf(beta, *dst, x) : x;  // beta 0: C is not read (may hold NaN)
    }
  }
}

bool use_small_gemm(std::int64_t m, std::int64_t n, std::int64_t k, LinearMath math) {
  return !g_disable_small.load(std::memory_order_relaxed) && math == LinearMath::fp32 && m * n <= kSmallOutputs &&
         k <= kSmallMaxK;
}

template <Activation A, bool AK, bool BK, int BM>
void launch_small_gemm_tiles(float* c, std::int64_t ldc, void* aux, std::int64_t aux_ld, const float* a,
                             std::int64_t lda, const float* b, std::int64_t ldb, const float* bias, std::int64_t m,
                             std::int64_t n, std::int64_t k, float beta, cudaStream_t stream) {
  auto* const kernel = small_gemm_kernel<A, AK, BK, BM>;
  const int smem = sg_smem_bytes(AK, BK, BM, sg_chunk(k));
  if (smem > 48 * 1024) {  // opt in to large dynamic shared memory, once per device
    static std::atomic<std::uint64_t> opted{0};
    int device = 0;
    FH_CHECK(cudaGetDevice(&device));
    const std::uint64_t bit = device < 64 ? std::uint64_t{1} << device : 0;
    if (bit == 0 || (opted.load(std::memory_order_relaxed) & bit) == 0) {
      FH_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, sg_smem_bytes(AK, BK, BM, kSgKC)));
      opted.fetch_or(bit, std::memory_order_relaxed);
    }
  }
  // 16-byte copies need every run start aligned: the base and every row (ld % 4 == 0); the
  // contiguous index of a run is always a multiple of 4 (k0, m0, n0 and the run offsets are).
  const bool a_vec = aligned16(a) && lda % 4 == 0;
  const bool b_vec = aligned16(b) && ldb % 4 == 0;
  // m * n <= kSmallOutputs keeps grid.y = ceil(m / BM) <= 2^14, far below 65535
  const dim3 grid(static_cast<unsigned>(ceil_div(n, kSgBN)), static_cast<unsigned>(ceil_div(m, BM)));
  kernel<<<grid, 2 * BM * kSgKS, static_cast<std::size_t>(smem), stream>>>(c, ldc, aux, aux_ld, a, lda, a_vec, b, ldb,
                                                                           b_vec, bias, m, n, k, beta);
  FH_CHECK_LAUNCH();
}

template <Activation A, bool AK, bool BK>
void launch_small_gemm(float* c, std::int64_t ldc, void* aux, std::int64_t aux_ld, const float* a, std::int64_t lda,
                       const float* b, std::int64_t ldb, const float* bias, std::int64_t m, std::int64_t n,
                       std::int64_t k, float beta, cudaStream_t stream) {
  // 32-row tiles while they still cover >= 3/4 of the SMs (the 512-row stacked forward: 128
  // tiles), else 16-row tiles (256 x 256: 128 tiles instead of 64). The result does not depend
  // on the choice (same summation order).
  const std::int64_t tiles32 = ceil_div(n, kSgBN) * ceil_div(m, 32);
  if (4 * tiles32 >= 3 * static_cast<std::int64_t>(sm_count()))
    launch_small_gemm_tiles<A, AK, BK, 32>(c, ldc, aux, aux_ld, a, lda, b, ldb, bias, m, n, k, beta, stream);
  else
    launch_small_gemm_tiles<A, AK, BK, 16>(c, ldc, aux, aux_ld, a, lda, b, ldb, bias, m, n, k, beta, stream);
}

// out (B, out_f) = act(in (B, in_f) W^T + bias): A = in (k-contiguous), B = W (k-contiguous).
void small_linear_forward(float* out, void* aux, const float* in, const float* w, const float* bias, std::int64_t batch,
                          std::int64_t in_f, std::int64_t out_f, Activation act, cudaStream_t stream) {
  const std::int64_t ld = aux_ld(out_f, act);
  dispatch(act, [&](auto a) {
    constexpr Activation A = decltype(a)::value;
    launch_small_gemm<A, true, true>(out, out_f, A == Activation::identity ? nullptr : aux, ld, in, in_f, w, in_f, bias,
                                     batch, out_f, in_f, 0.f, stream);
  });
}

void launch_epilogue(float* out, void* aux, const float* bias, std::int64_t batch, std::int64_t out_f, Activation act,
                     cudaStream_t stream) {
  const dim3 block(kTileCols, kTileRows);
  const std::int64_t ld = aux_ld(out_f, act);
  // One row per thread and grid.y <= 65535 (grid-stride beyond): 8192 x 1024 gets 8192 blocks.
  const unsigned row_blocks = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(batch, kTileRows), 65535));
  // aux is 16-byte aligned (checked by linear_forward) and ld % 8 == 0 for gelu
  if (out_f % 4 == 0 && aligned16(out) && aligned16(bias)) {
    const dim3 grid(static_cast<unsigned>(ceil_div(out_f, kVecTileCols)), row_blocks);
    dispatch(act, [&](auto a) {
      epilogue_vec4_kernel<decltype(a)::value><<<grid, block, 0, stream>>>(out, aux, bias, batch, out_f, ld);
    });
    FH_CHECK_LAUNCH();
    return;
  }
  const dim3 grid(static_cast<unsigned>(ceil_div(out_f, kTileCols)), row_blocks);
  dispatch(act, [&](auto a) {
    epilogue_kernel<decltype(a)::value><<<grid, block, 0, stream>>>(out, aux, bias, batch, out_f, ld);
  });
  FH_CHECK_LAUNCH();
}

cublasLtEpilogue_t fused_epilogue(Activation act, bool has_bias, bool has_aux) {
  switch (act) {
    case Activation::relu:
      if (has_aux) return has_bias ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_RELU_AUX;
      return has_bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case Activation::gelu:
      if (has_aux) return has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      return has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    default:
      return has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }
}

void expect_shape(std::int64_t batch, std::int64_t in_f, std::int64_t out_f, const BlasLane& lane, const char* op) {
  const std::string name(op);
  FH_EXPECT(batch >= 0, name + ": batch must be >= 0, got " + std::to_string(batch));
  FH_EXPECT(in_f >= 1, name + ": in_features must be >= 1, got " + std::to_string(in_f));
  FH_EXPECT(out_f >= 1, name + ": out_features must be >= 1, got " + std::to_string(out_f));
  FH_EXPECT(lane.lt != nullptr, name + ": the BlasLane has no cuBLASLt handle (use DeviceContext::blas)");
}

}  // namespace

namespace detail {
void linear_force_unfused_epilogue(bool force) { g_force_unfused.store(force); }
void linear_disable_small_gemm(bool disable) { g_disable_small.store(disable); }
}  // namespace detail

std::size_t linear_aux_bytes(std::int64_t batch, std::int64_t out_features, Activation act) {
  expect_supported(act, "linear_aux_bytes");
  FH_EXPECT(batch >= 0 && out_features >= 1, "linear_aux_bytes: batch must be >= 0 and out_features >= 1");
  const std::int64_t ld = aux_ld(out_features, act);
  if (act == Activation::relu) return static_cast<std::size_t>(batch * ld / 8);
  if (act == Activation::gelu || act == Activation::tanh) return static_cast<std::size_t>(batch * ld) * sizeof(float);
  return 0;
}

void linear_forward(float* out, void* aux, const float* in, const float* weight, const float* bias, std::int64_t batch,
                    std::int64_t in_features, std::int64_t out_features, Activation act, LinearMath math,
                    BlasLane lane) {
  expect_supported(act, "linear_forward");
  expect_shape(batch, in_features, out_features, lane, "linear_forward");
  if (batch == 0) return;
  FH_EXPECT(out != nullptr && in != nullptr && weight != nullptr,
            "linear_forward: out, in and weight must not be null");
  if (act == Activation::identity) aux = nullptr;  // nothing to save
  FH_EXPECT(aligned16(aux), "linear_forward: aux must be 16-byte aligned");

  if (!g_force_unfused.load(std::memory_order_relaxed) && use_small_gemm(batch, out_features, in_features, math)) {
    small_linear_forward(out, aux, in, weight, bias, batch, in_features, out_features, act, lane.stream);
    return;
  }
  GemmSpec g;  // column-major view: out^T (out_f, B) = W (out_f, in_f) · in^T (in_f, B)
  g.trans_a = CUBLAS_OP_T;
  g.trans_b = CUBLAS_OP_N;
  g.m = out_features;
  g.n = batch;
  g.k = in_features;
  g.a = weight;
  g.lda = in_features;
  g.b = in;
  g.ldb = in_features;
  g.d = out;
  g.ldd = out_features;
  g.bias = bias;
  g.aux = aux;
  g.aux_ld = aux ? aux_ld(out_features, act) : 0;
  g.epilogue = fused_epilogue(act, bias != nullptr, aux != nullptr);
  g.compute = compute_type(math);
  const bool try_fused = act != Activation::tanh && !g_force_unfused.load(std::memory_order_relaxed);
  if (math == LinearMath::bf16) {  // per chunk of batch rows: fused epilogue, else plain GEMM + our pass
    run_bf16_chunks(g, ChunkDim::n, false, lane, "linear forward",
                    [&](GemmSpec& c, std::int64_t row, const BlasLane& lt_lane) {
                      void* const chunk_aux = aux_rows(aux, row, out_features, act);
                      c.aux = chunk_aux;
                      if (try_fused && run_gemm(c, lt_lane)) return true;
                      GemmSpec plain = c;
                      plain.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
                      plain.bias = nullptr;
                      plain.aux = nullptr;
                      plain.aux_ld = 0;
                      run_gemm_or_throw(plain, lt_lane, "linear forward");
                      if (act != Activation::identity || bias != nullptr)
                        launch_epilogue(c.d, chunk_aux, bias, c.n, out_features, act, lane.stream);
                      return true;
                    });
    return;
  }
  // cuBLASLt has no tanh epilogue: tanh always takes the two-pass path below.
  if (act != Activation::tanh && !g_force_unfused.load(std::memory_order_relaxed) && run_gemm(g, lane)) return;

  // Fallback: plain GEMM, then bias + activation + aux in one pass over out.
  GemmSpec plain = g;
  plain.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  plain.bias = nullptr;
  plain.aux = nullptr;
  plain.aux_ld = 0;
  run_gemm_or_throw(plain, lane, "linear forward");
  if (act != Activation::identity || bias != nullptr)
    launch_epilogue(out, aux, bias, batch, out_features, act, lane.stream);
}

void linear_backward(float* d_in, float* d_weight, float* d_bias, float* d_pre_scratch, const float* d_out,
                     const void* aux, const float* in, const float* weight, std::int64_t batch,
                     std::int64_t in_features, std::int64_t out_features, Activation act, bool accumulate_param_grads,
                     LinearMath math, BlasLane lane) {
  expect_supported(act, "linear_backward");
  expect_shape(batch, in_features, out_features, lane, "linear_backward");
  if (batch == 0) {  // empty batch: zero parameter gradients (sums over nothing), unless accumulating
    if (!accumulate_param_grads) {
      if (d_weight)
        FH_CHECK(cudaMemsetAsync(d_weight, 0, static_cast<std::size_t>(out_features * in_features) * sizeof(float),
                                 lane.stream));
      if (d_bias)
        FH_CHECK(cudaMemsetAsync(d_bias, 0, static_cast<std::size_t>(out_features) * sizeof(float), lane.stream));
    }
    return;
  }
  FH_EXPECT(d_out != nullptr, "linear_backward: d_out must not be null");
  FH_EXPECT(d_weight == nullptr || in != nullptr, "linear_backward: d_weight needs the forward input `in`");
  FH_EXPECT(d_in == nullptr || weight != nullptr, "linear_backward: d_in needs `weight`");
  const bool need_d_pre =
      act != Activation::identity && (d_in != nullptr || d_weight != nullptr || d_pre_scratch != nullptr);
  if (act != Activation::identity) {
    FH_EXPECT(aux != nullptr, std::string("linear_backward: act ") + std::string(activation_name(act)) +
                                  " needs the aux buffer its linear_forward wrote");
    FH_EXPECT(aligned16(aux), "linear_backward: aux must be 16-byte aligned");
    FH_EXPECT(!need_d_pre || d_pre_scratch != nullptr,
              "linear_backward: relu/gelu/tanh need d_pre_scratch (batch * out_features floats)");
  }

  const float* d_pre = d_out;
  if (need_d_pre || d_bias != nullptr) {
    // Row splits: one split (no bias-finish kernel) while each thread has at most kOneSplitRows
    // rows; beyond that enough blocks to fill the device, each split >= 64 rows; partials must fit
    // in the lane's workspace (it is free between GEMMs on this stream).
    constexpr std::int64_t kOneSplitRows = 32;
    const std::int64_t tiles = ceil_div(out_features, kTileCols);
    std::int64_t splits = std::max<std::int64_t>(1, (4LL * sm_count() + tiles - 1) / tiles);
    splits = std::min(splits, std::max<std::int64_t>(1, (batch + 63) / 64));
    splits = std::min<std::int64_t>(splits, 65535);
    if (batch <= kOneSplitRows * kDpreRows) splits = 1;
    if (d_bias != nullptr && splits > 1) {
      const std::int64_t fit =
          lane.workspace ? static_cast<std::int64_t>(lane.workspace_bytes / (sizeof(float) * out_features)) : 0;
      splits = std::min(splits, std::max<std::int64_t>(fit, 1));
    }
    const std::int64_t rows_per_split = (batch + splits - 1) / splits;
    splits = (batch + rows_per_split - 1) / rows_per_split;  // no empty split
    float* bias_out = nullptr;
    if (d_bias != nullptr) bias_out = splits == 1 ? d_bias : static_cast<float*>(lane.workspace);
    float* pre_out = need_d_pre ? d_pre_scratch : nullptr;
    const std::int64_t ld = aux_ld(out_features, act);
    const dim3 block(kTileCols, kDpreRows);
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(splits));
    dispatch(act, [&](auto a) {
      dpre_bias_kernel<decltype(a)::value><<<grid, block, 0, lane.stream>>>(
          pre_out, bias_out, d_out, aux, batch, out_features, ld, rows_per_split, accumulate_param_grads);
    });
    FH_CHECK_LAUNCH();
    if (d_bias != nullptr && splits > 1) {
      bias_finish_kernel<<<grid_stride_blocks(out_features), kBlock, 0, lane.stream>>>(
          d_bias, static_cast<const float*>(lane.workspace), static_cast<int>(splits), out_features,
          accumulate_param_grads);
      FH_CHECK_LAUNCH();
    }
    if (need_d_pre) d_pre = d_pre_scratch;
  }

  if (d_weight != nullptr && use_small_gemm(out_features, in_features, batch, math)) {
    // d_weight[o, i] (+)= sum_b d_pre[b, o] in[b, i]: A(o, b) = d_pre[b out_f + o], B(i, b) = in[b in_f + i]
    launch_small_gemm<Activation::identity, false, false>(d_weight, in_features, nullptr, 0, d_pre, out_features, in,
                                                          in_features, nullptr, out_features, in_features, batch,
                                                          accumulate_param_grads ? 1.f : 0.f, lane.stream);
  } else if (d_weight != nullptr) {  // d_weight^T (in_f, out_f) = in^T (in_f, B) · d_pre (B, out_f)
    GemmSpec g;
    g.trans_a = CUBLAS_OP_N;
    g.trans_b = CUBLAS_OP_T;
    g.m = in_features;
    g.n = out_features;
    g.k = batch;
    g.a = in;
    g.lda = in_features;
    g.b = d_pre;
    g.ldb = out_features;
    g.d = d_weight;
    g.ldd = in_features;
    g.beta = accumulate_param_grads ? 1.f : 0.f;
    g.compute = compute_type(math);
    if (math == LinearMath::bf16)
      run_bf16_chunks(g, ChunkDim::k, false, lane, "linear weight-gradient",
                      [](GemmSpec& c, std::int64_t, const BlasLane& lt_lane) {
                        run_gemm_or_throw(c, lt_lane, "linear weight-gradient");
                        return true;
                      });
    else
      run_gemm_or_throw(g, lane, "linear weight-gradient");
  }
  if (d_in != nullptr && use_small_gemm(batch, in_features, out_features, math)) {
    // d_in[b, i] = sum_o d_pre[b, o] W[o, i]: A(b, o) = d_pre[b out_f + o], B(i, o) = W[o in_f + i]
    launch_small_gemm<Activation::identity, true, false>(d_in, in_features, nullptr, 0, d_pre, out_features, weight,
                                                         in_features, nullptr, batch, in_features, out_features, 0.f,
                                                         lane.stream);
  } else if (d_in != nullptr) {  // d_in^T (in_f, B) = W^T (in_f, out_f) · d_pre^T (out_f, B)
    GemmSpec g;
    g.trans_a = CUBLAS_OP_N;
    g.trans_b = CUBLAS_OP_N;
    g.m = in_features;
    g.n = batch;
    g.k = out_features;
    g.a = weight;
    g.lda = in_features;
    g.b = d_pre;
    g.ldb = out_features;
    g.d = d_in;
    g.ldd = in_features;
    g.compute = compute_type(math);
    if (math == LinearMath::bf16)
      run_bf16_chunks(g, ChunkDim::n, false, lane, "linear input-gradient",
                      [](GemmSpec& c, std::int64_t, const BlasLane& lt_lane) {
                        run_gemm_or_throw(c, lt_lane, "linear input-gradient");
                        return true;
                      });
    else
      run_gemm_or_throw(g, lane, "linear input-gradient");
  }
}

bool linear_backward_input_drelu(float* d_pre_below, float* d_bias_below, const float* d_pre, const float* weight,
                                 const void* relu_mask_below, std::int64_t batch, std::int64_t in_features,
                                 std::int64_t out_features, LinearMath math, BlasLane lane) {
  expect_shape(batch, in_features, out_features, lane, "linear_backward_input_drelu");
  if (batch == 0) return false;
  FH_EXPECT(d_pre_below != nullptr && d_pre != nullptr && weight != nullptr && relu_mask_below != nullptr,
            "linear_backward_input_drelu: d_pre_below, d_pre, weight and relu_mask_below must not be null");
  FH_EXPECT(aligned16(relu_mask_below), "linear_backward_input_drelu: relu_mask_below must be 16-byte aligned");
  if (g_force_unfused.load(std::memory_order_relaxed) || use_small_gemm(batch, in_features, out_features, math))
    return false;
  GemmSpec g;  // d_pre_below^T (in_f, B) = W^T (in_f, out_f) · d_pre^T (out_f, B), then the dReLU (and bias grad)
  g.trans_a = CUBLAS_OP_N;
  g.trans_b = CUBLAS_OP_N;
  g.m = in_features;
  g.n = batch;
  g.k = out_features;
  g.a = weight;
  g.lda = in_features;
  g.b = d_pre;
  g.ldb = out_features;
  g.d = d_pre_below;
  g.ldd = in_features;
  // BGRAD writes the bias gradient (length m = in_f, summed over the n = B columns) where a forward
  // epilogue reads its bias: the same descriptor attribute.
  g.epilogue = d_bias_below != nullptr ? CUBLASLT_EPILOGUE_DRELU_BGRAD : CUBLASLT_EPILOGUE_DRELU;
  g.bias = d_bias_below;
  // The mask of the layer below, as its forward wrote it: (B, in_f) with round_up(in_f, 128) bits a row.
  g.aux = const_cast<void*>(relu_mask_below);
  g.aux_ld = aux_ld(in_features, Activation::relu);
  g.compute = compute_type(math);
  g.native_epilogue_only = true;
  // bf16: in one chunk only (a bias gradient cannot be summed over chunks), else the two-step path.
  if (math == LinearMath::bf16)
    return run_bf16_chunks(g, ChunkDim::n, true, lane, "linear_backward_input_drelu",
                           [](GemmSpec& c, std::int64_t, const BlasLane& lt_lane) { return run_gemm(c, lt_lane); });
  return run_gemm(g, lane);
}

}  // namespace foxhunt::gpu
