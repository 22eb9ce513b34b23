// shunt/gpu/launch.hpp: an empty kernel launch, what the cost model's `launch` table times.
// Implemented in libshunt_gpu; without CUDA at build time it reports no device support.
#pragma once

#include <shunt/gpu/pack.hpp>

#include <cstdint>

namespace shunt::gpu {

/// Launches a kernel of at least `threads` threads (one at least) that does nothing, ordered on
/// `stream`; the caller synchronises. Thread-safe. Throws shunt::unsupported without device
/// support, cuda_error when the launch fails.
void launch_empty(std::int64_t threads, stream_t stream);

}  // namespace shunt::gpu
