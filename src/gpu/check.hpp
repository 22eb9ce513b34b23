// src/gpu/check.hpp: the check for CUDA runtime return codes inside libshunt_gpu (CUDA-only, private).
#pragma once

#include <shunt/gpu/pack.hpp>

#include <cuda_runtime.h>

#include <cstdio>
#include <string>

namespace shunt::gpu::detail {

/// Throws cuda_error naming the call, file:line and CUDA's message, after clearing the sticky
/// error so that later calls do not report it again.
[[noreturn]] inline void throw_cuda(cudaError_t rc, const char* call, const char* file, int line) {
    (void)cudaGetLastError();
    char text[512];
    std::snprintf(text, sizeof text, "%s failed at %s:%d: %s (%s, code %d)", call, file, line, cudaGetErrorString(rc),
                  cudaGetErrorName(rc), static_cast<int>(rc));
    throw cuda_error(static_cast<int>(rc), text);
}

}  // namespace shunt::gpu::detail

/// Checks a CUDA runtime call made by shunt; throws shunt::gpu::cuda_error on failure.
#define SHUNT_CUDA(call)                                                                 \
    do {                                                                                 \
        if (const cudaError_t shunt_cuda_rc_ = (call); shunt_cuda_rc_ != cudaSuccess)    \
            ::shunt::gpu::detail::throw_cuda(shunt_cuda_rc_, #call, __FILE__, __LINE__); \
    } while (0)
