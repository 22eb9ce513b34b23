// shunt/compress/gpu.hpp: the gradient compressors on device buffers (CUDA kernels in
// libshunt_compress_gpu): the host versions' formats and bits (NaN payloads aside), stream-ordered,
// no host synchronisation and no allocation (top-k's scratch comes from the caller). Without CUDA
// at build time (or without a device) every call throws shunt::unsupported.
#pragma once

#include <shunt/compress/common.hpp>
#include <shunt/gpu/pack.hpp>

#include <cstdint>

namespace shunt::compress::gpu {

using shunt::gpu::stream_t;

namespace detail {
/// top-k's tiles: elements counted and written by one thread block.
inline constexpr std::int64_t top_k_tile = 4096;
}  // namespace detail

/// Bytes of device scratch compress() needs for n elements (top_k only; 0 for the other methods).
/// Allocate it once per compression point (or per largest n) and pass it to every call; calls on
/// different streams need their own.
constexpr std::int64_t workspace_bytes(const params& p, std::int64_t n) {
    if (p.kind != method::top_k || n <= 0) return 0;
    const std::int64_t tiles = (n + detail::top_k_tile - 1) / detail::top_k_tile;
    return 4 * 2048 + 64 + 4 * 4 * tiles;  // histogram, state, four counters per tile
}

/// Compresses n floats at `in` (device memory) into compressed_bytes(p, n) bytes at `out` (device
/// memory, 4-byte aligned), ordered on `stream`; the bytes are those the host's compress() writes
/// for the same p, n and step. `workspace` holds workspace_bytes(p, n) device bytes (nullptr when
/// that is 0). Returns once the work is queued; the caller synchronises. Thread-safe for distinct
/// outputs and workspaces. Throws shunt::error for invalid parameters, shunt::unsupported without
/// device support or when n does not fit the format, gpu::cuda_error when a launch fails.
void compress(const params& p, const float* in, std::int64_t n, void* out, void* workspace, stream_t stream,
              std::uint64_t step = 0);

/// out[0..n) = the values compressed form `in` stands for (device memory), ordered on `stream`;
/// the host's decompress() bits (a NaN may come out as the device's canonical NaN).
void decompress(const params& p, const void* in, std::int64_t n, float* out, stream_t stream, std::uint64_t step = 0);

/// acc[0..n) += the values compressed form `in` stands for (each rounded to float, then added),
/// ordered on `stream`; the host's decompress_accumulate() bits (NaN payloads aside).
void decompress_accumulate(const params& p, const void* in, std::int64_t n, float* acc, stream_t stream,
                           std::uint64_t step = 0);

/// inout[i] += in[i] for `count` elements of summable form `f` (halves added in float, rounded to
/// nearest even), ordered on `stream`; the host's combine() bits but for NaN payloads.
void combine(sum_form f, const void* in, void* inout, std::int64_t count, stream_t stream);

/// Error feedback on the device: corrected = in + residual, before compressing `corrected`.
void feedback_apply(const float* in, const float* residual, float* corrected, std::int64_t n, stream_t stream);

/// Error feedback on the device: residual = corrected - decompressed, after decompressing the
/// compressed form of `corrected` (into `decompressed`, which may be `residual` itself).
void feedback_update(const float* corrected, const float* decompressed, float* residual, std::int64_t n,
                     stream_t stream);

}  // namespace shunt::compress::gpu
