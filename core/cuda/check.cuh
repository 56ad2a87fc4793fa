// The CUDA runtime's error checks, and the calling thread's stream and cuBLAS handle, for the .cu
// files of core/cuda/ (runtime.cu implements them) and of the CUDA engine (kernels/cuda/common.cuh).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace pb::cuda {

[[noreturn]] void throw_cuda_error(const char* what, const char* detail, const char* file, int line);

cudaStream_t stream();   // the calling thread's stream (runtime.cu)
cublasHandle_t blas();   // the calling thread's cuBLAS handle, bound to stream()

#define PB_CUDA_CHECK(call)                                                                  \
  do {                                                                                       \
    const cudaError_t pb_err_ = (call);                                                      \
    if (pb_err_ != cudaSuccess)                                                              \
      ::pb::cuda::throw_cuda_error(#call, cudaGetErrorString(pb_err_), __FILE__, __LINE__);  \
  } while (0)
#define PB_CUBLAS_CHECK(call)                                                                   \
  do {                                                                                          \
    const cublasStatus_t pb_st_ = (call);                                                       \
    if (pb_st_ != CUBLAS_STATUS_SUCCESS)                                                        \
      ::pb::cuda::throw_cuda_error(#call, cublasGetStatusString(pb_st_), __FILE__, __LINE__);   \
  } while (0)
// After every launch: a bad configuration is reported here, not at the next sync.
#define PB_LAUNCH_CHECK() PB_CUDA_CHECK(cudaGetLastError())

}  // namespace pb::cuda
