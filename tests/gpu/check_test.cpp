// The error macro: every library's failure names the expression, file, line and the library's text.
#include <gtest/gtest.h>

#include <string>

#include "gpu/check.hpp"
#include "gpu/tensor.hpp"

namespace foxhunt::gpu {
namespace {

std::string message_of(auto&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Check, CudaFailureNamesExpressionFileLineAndText) {
  const std::string m = message_of([] { FH_CHECK(cudaErrorInvalidValue); });
  EXPECT_NE(m.find("CUDA error"), std::string::npos) << m;
  EXPECT_NE(m.find("cudaErrorInvalidValue"), std::string::npos) << m;
  EXPECT_NE(m.find("invalid argument"), std::string::npos) << m;  // cudaGetErrorString's text
  EXPECT_NE(m.find("check_test.cpp:"), std::string::npos) << m;
}

TEST(Check, CublasNcclAndCuptiFailuresAreReported) {
  EXPECT_NE(message_of([] { FH_CHECK(CUBLAS_STATUS_NOT_INITIALIZED); }).find("cuBLAS error"), std::string::npos);
  EXPECT_NE(message_of([] { FH_CHECK(ncclInvalidArgument); }).find("NCCL error"), std::string::npos);
  EXPECT_NE(message_of([] { FH_CHECK(CUPTI_ERROR_INVALID_PARAMETER); }).find("CUPTI error"), std::string::npos);
}

TEST(Check, SuccessDoesNotThrow) {
  EXPECT_NO_THROW(FH_CHECK(cudaSuccess));
  EXPECT_NO_THROW(FH_CHECK(CUBLAS_STATUS_SUCCESS));
  EXPECT_NO_THROW(FH_CHECK(ncclSuccess));
  EXPECT_NO_THROW(FH_CHECK(CUPTI_SUCCESS));
}

TEST(Check, ExpectThrowsInvalidArgumentWithReason) {
  const std::string m = message_of([] { FH_EXPECT(1 + 1 == 3, "arithmetic is broken"); });
  EXPECT_NE(m.find("arithmetic is broken"), std::string::npos) << m;
  EXPECT_THROW(FH_EXPECT(false, "x"), std::invalid_argument);
}

TEST(Tensor, DtypeSizesAndSafetensorsNames) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::u8), 1u);
  EXPECT_EQ(dtype_name(DType::bf16), "BF16");
  EXPECT_EQ(dtype_name(DType::i32), "I32");
}

TEST(Tensor, ViewChecksItsDtype) {
  float x = 0;
  TensorView v{&x, DType::f32, Shape{2, 3}};
  EXPECT_EQ(v.numel(), 6);
  EXPECT_EQ(v.bytes(), 24u);
  EXPECT_EQ(v.as<float>(), &x);
  EXPECT_THROW(v.as<std::int32_t>(), std::invalid_argument);
  EXPECT_EQ(Shape({2, 3}).str(), "[2, 3]");
}

}  // namespace
}  // namespace foxhunt::gpu
