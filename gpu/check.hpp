#pragma once
// One error macro for every library the device layer talks to. A failing call throws
// foxhunt::gpu::Error carrying the expression, file, line and the library's own error string.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cupti_result.h>
#include <nccl.h>

#include <stdexcept>
#include <string>

namespace foxhunt::gpu {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_error(const char* library, const char* expr, const char* file, int line,
                              const std::string& detail);

inline void check(cudaError_t r, const char* expr, const char* file, int line) {
  if (r != cudaSuccess) throw_error("CUDA", expr, file, line, cudaGetErrorString(r));
}
inline void check(cublasStatus_t r, const char* expr, const char* file, int line) {
  if (r != CUBLAS_STATUS_SUCCESS) throw_error("cuBLAS", expr, file, line, cublasGetStatusString(r));
}
inline void check(ncclResult_t r, const char* expr, const char* file, int line) {
  if (r != ncclSuccess) throw_error("NCCL", expr, file, line, ncclGetErrorString(r));
}
void check(CUptiResult r, const char* expr, const char* file, int line);  // gpu/check.cpp

// Argument checks on the host: bad shapes and sizes are caller errors, reported the same way.
[[noreturn]] void throw_invalid(const char* cond, const char* file, int line, const std::string& why);

}  // namespace foxhunt::gpu

#define FH_CHECK(expr) ::foxhunt::gpu::check((expr), #expr, __FILE__, __LINE__)
// After every kernel launch: catches bad launch configurations at the launch site.
#define FH_CHECK_LAUNCH() ::foxhunt::gpu::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
#define FH_EXPECT(cond, why)                                                      \
  do {                                                                            \
    if (!(cond)) ::foxhunt::gpu::throw_invalid(#cond, __FILE__, __LINE__, (why)); \
  } while (0)
