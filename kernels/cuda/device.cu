// Device discovery for the CUDA build. Plain C++17 + CUDA runtime only (no fmt/Eigen in .cu).
#include <cuda_runtime.h>

#include "kernels/device.h"

namespace pb {

bool cuda_built() { return true; }

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error (35) or "no device" (100)
    return 0;
  }
  return n;
}

std::string cuda_device_name(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return prop.name;
}

}  // namespace pb
