// Linked instead of cuda/*.cu when the build has no CUDA backend (PATHBENCH_CUDA=OFF or no nvcc).
#include "core/device.h"

namespace pb {

bool cuda_built() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_device_name(int) { return ""; }
int cuda_current_device() { return 0; }

}  // namespace pb
