// y = x w and its gradients by cuBLAS, fp32 storage and accumulation; the products as the
// thread's precision() says (runtime.h): fp32 or TF32 by cublasSgemm and the handle's math mode,
// bf16 by cublasGemmEx with CUBLAS_COMPUTE_32F_FAST_16BF.
//
// cuBLAS is column-major; a row-major (R, C) matrix is the column-major (C, R) matrix, its
// transpose. So every product is computed transposed: y = x w becomes yᵀ = wᵀ xᵀ, with the
// operands passed in swapped order and no explicit transposes.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "core/cuda/runtime.h"

namespace pb::cuda {
namespace {

// C = α op(A) op(B) + β C, column-major fp32 matrices.
void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha,
          const float* A, int lda, const float* B, int ldb, const float* beta, float* C, int ldc) {
  if (precision() == Precision::BF16)
    PB_CUBLAS_CHECK(cublasGemmEx(blas(), ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F,
                                 ldb, beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F_FAST_16BF,
                                 CUBLAS_GEMM_DEFAULT));
  else
    PB_CUBLAS_CHECK(cublasSgemm(blas(), ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc));
}

}  // namespace

void matmul_forward(float* y, const float* x, const float* w, int N, int K, int M, GradMode mode) {
  if (N == 0 || M == 0) return;
  const float alpha = 1.f, beta = mode == GradMode::Accumulate ? 1.f : 0.f;
  if (K == 0) {  // empty product: y = 0, or unchanged when accumulating
    if (mode == GradMode::Overwrite)
      PB_CUDA_CHECK(cudaMemsetAsync(y, 0, sizeof(float) * size_t(N) * M, stream()));
    return;
  }
  // yᵀ (M, N) = wᵀ (M, K) · xᵀ (K, N)
  gemm(CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &alpha, w, M, x, K, &beta, y, M);
}

void matmul_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, int N,
                     int K, int M, GradMode mode) {
  if (N == 0 || K == 0) return;
  const float one = 1.f, beta_dx = mode == GradMode::Accumulate ? 1.f : 0.f;
  if (M == 0) {  // empty product: dx = 0, or unchanged when accumulating; dw is empty
    if (dx && mode == GradMode::Overwrite)
      PB_CUDA_CHECK(cudaMemsetAsync(dx, 0, sizeof(float) * size_t(N) * K, stream()));
    return;
  }
  // dx = dy wᵀ  →  dxᵀ (K, N) = w (K, M) · dyᵀ (M, N); w is stored as column-major wᵀ, hence OP_T
  if (dx) gemm(CUBLAS_OP_T, CUBLAS_OP_N, K, N, M, &one, w, M, dy, M, &beta_dx, dx, K);
  // dw += xᵀ dy  →  dwᵀ (M, K) += dyᵀ (M, N) · x (N, K); x is stored as column-major xᵀ, hence OP_T
  gemm(CUBLAS_OP_N, CUBLAS_OP_T, M, K, N, &one, dy, M, x, K, &one, dw, M);
}

}  // namespace pb::cuda
