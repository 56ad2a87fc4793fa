// Which devices this build and machine have. The CUDA build implements these in cuda/device.cu;
// a CPU-only build links cuda_stub.cpp. Any CUDA error counts as "no GPU".
#pragma once
#include <string>

namespace pb {

bool cuda_built();                  // compiled with the CUDA backend
int cuda_device_count();            // 0 when no driver or no device
std::string cuda_device_name(int);  // "" when unavailable
int cuda_current_device();          // the calling thread's device (0 when unavailable)

}  // namespace pb
