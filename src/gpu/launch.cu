// src/gpu/launch.cu: the empty kernel whose launch and synchronisation the `launch` table measures.
#include "check.hpp"

#include <shunt/errors.hpp>
#include <shunt/gpu/launch.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace shunt::gpu {
namespace {

constexpr int empty_threads = 256;

__global__ void empty_kernel() {}

}  // namespace

void launch_empty(std::int64_t threads, stream_t stream) {
    if (!device_available()) throw unsupported("no CUDA device available");
    // Capped like the pack kernels' grids (src/gpu/pack.cu, 65536 blocks): beyond it they stride
    // rather than launch more blocks.
    const std::int64_t blocks =
        std::clamp<std::int64_t>((threads + empty_threads - 1) / empty_threads, 1, std::int64_t{1} << 16);
    empty_kernel<<<static_cast<unsigned>(blocks), empty_threads, 0, stream>>>();
    SHUNT_CUDA(cudaGetLastError());
}

}  // namespace shunt::gpu
