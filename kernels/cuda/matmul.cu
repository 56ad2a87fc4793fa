// y = x w and its gradients by cuBLAS, fp32 storage and accumulation; the products as the
// thread's precision() says (runtime.h): fp32 or TF32 by cublasSgemm and the handle's math mode,
// bf16 by cublasGemmEx with CUBLAS_COMPUTE_32F_FAST_16BF.
//
// cuBLAS is column-major; a row-major (R, C) matrix is the column-major (C, R) matrix, its
// transpose. So every product is computed transposed: y = x w becomes yᵀ = wᵀ xᵀ, with the
// operands passed in swapped order and no explicit transposes.
//
// Stacked runs (Runs, kernels/ops.h) are one strided-batched call (cublasSgemmStridedBatched,
// cublasGemmStridedBatchedEx), batch r the product of run r: its n = N / R rows of x, y, dx, dy
// (batch strides n·K, n·M) and its copy of w, dw (batch stride runs.stride).
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runs.cuh"
#include "core/cuda/runtime.h"

namespace pb::cuda {
namespace {

// A column-major fp32 operand of a batched product: matrix b at p + b·stride.
struct Operand {
  const float* p;
  int ld;
  int64_t stride;
};

// C_b = α op(A_b) op(B_b) + β C_b for b < batch, column-major fp32 matrices; one batch is the
// plain GEMM.
void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha,
          Operand A, Operand B, const float* beta, float* C, int ldc, int64_t stride_c, int batch) {
  const bool bf16 = precision() == Precision::BF16;
  if (batch == 1 && bf16)
    PB_CUBLAS_CHECK(cublasGemmEx(blas(), ta, tb, m, n, k, alpha, A.p, CUDA_R_32F, A.ld, B.p,
                                 CUDA_R_32F, B.ld, beta, C, CUDA_R_32F, ldc,
                                 CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT));
  else if (batch == 1)
    PB_CUBLAS_CHECK(cublasSgemm(blas(), ta, tb, m, n, k, alpha, A.p, A.ld, B.p, B.ld, beta, C, ldc));
  else if (bf16)
    PB_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        blas(), ta, tb, m, n, k, alpha, A.p, CUDA_R_32F, A.ld, A.stride, B.p, CUDA_R_32F, B.ld,
        B.stride, beta, C, CUDA_R_32F, ldc, stride_c, batch, CUBLAS_COMPUTE_32F_FAST_16BF,
        CUBLAS_GEMM_DEFAULT));
  else  // fp32, or TF32 by the handle's math mode as cublasSgemm
    PB_CUBLAS_CHECK(cublasSgemmStridedBatched(blas(), ta, tb, m, n, k, alpha, A.p, A.ld, A.stride,
                                              B.p, B.ld, B.stride, beta, C, ldc, stride_c, batch));
}

}  // namespace

void matmul_forward(float* y, const float* x, const float* w, int N, int K, int M, GradMode mode,
                    Runs runs) {
  const int n = rows_per_run("matmul_forward", N, runs), R = runs.count;  // rows per run
  if (N == 0 || M == 0) return;
  const float alpha = 1.f, beta = mode == GradMode::Accumulate ? 1.f : 0.f;
  if (K == 0) {  // empty product: y = 0, or unchanged when accumulating
    if (mode == GradMode::Overwrite)
      PB_CUDA_CHECK(cudaMemsetAsync(y, 0, sizeof(float) * size_t(N) * M, stream()));
    return;
  }
  // per run r: yᵀ_r (M, n) = wᵀ_r (M, K) · xᵀ_r (K, n)
  gemm(CUBLAS_OP_N, CUBLAS_OP_N, M, n, K, &alpha, {w, M, run_stride(runs)},
       {x, K, int64_t(n) * K}, &beta, y, M, int64_t(n) * M, R);
}

void matmul_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, int N,
                     int K, int M, GradMode mode, Runs runs) {
  const int n = rows_per_run("matmul_backward", N, runs), R = runs.count;  // rows per run
  if (N == 0 || K == 0) return;
  const float one = 1.f, beta_dx = mode == GradMode::Accumulate ? 1.f : 0.f;
  if (M == 0) {  // empty product: dx = 0, or unchanged when accumulating; dw is empty
    if (dx && mode == GradMode::Overwrite)
      PB_CUDA_CHECK(cudaMemsetAsync(dx, 0, sizeof(float) * size_t(N) * K, stream()));
    return;
  }
  const int64_t sw = run_stride(runs), sx = int64_t(n) * K, sy = int64_t(n) * M;
  // dx_r = dy_r w_rᵀ  →  dxᵀ_r (K, n) = w_r (K, M) · dyᵀ_r (M, n); w is stored as column-major wᵀ,
  // hence OP_T
  if (dx)
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, K, n, M, &one, {w, M, sw}, {dy, M, sy}, &beta_dx, dx, K, sx, R);
  // dw_r += x_rᵀ dy_r  →  dwᵀ_r (M, K) += dyᵀ_r (M, n) · x_r (n, K); x is stored as column-major
  // xᵀ, hence OP_T
  gemm(CUBLAS_OP_N, CUBLAS_OP_T, M, K, n, &one, {dy, M, sy}, {x, K, sx}, &one, dw, M, sw, R);
}

}  // namespace pb::cuda
