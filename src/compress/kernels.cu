// src/compress/kernels.cu: the gradient compressors' CUDA kernels (libshunt_compress_gpu): the host
// formats bit for bit (the conversions, scales, draws and summation orders of compress/common.hpp),
// stream-ordered, without host synchronisation or allocation.
#include "../gpu/check.hpp"

#include <shunt/compress/common.hpp>
#include <shunt/compress/gpu.hpp>
#include <shunt/errors.hpp>
#include <shunt/gpu/pack.hpp>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace shunt::compress::gpu {
namespace {

using compress::detail::block_scale;
using compress::detail::draw;
using compress::detail::random_index;
using compress::detail::scale_of;
using compress::detail::unit_draw;

constexpr int threads = 256;
constexpr unsigned full_mask = 0xffffffffu;

/// Blocks for `work` items at `per_thread` items a thread, at most 65536 (the kernels stride).
unsigned grid_for(std::int64_t work, std::int64_t per_thread = 1) {
    const std::int64_t b = (work + threads * per_thread - 1) / (threads * per_thread);
    return static_cast<unsigned>(std::clamp<std::int64_t>(b, 1, std::int64_t{1} << 16));
}

__device__ inline std::int64_t thread_id() { return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline std::int64_t thread_count() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

// --- FP16 and BF16 ----------------------------------------------------------------------------

/// The hardware conversion, with the host's NaN (quiet, top payload bits kept) instead of the
/// canonical one.
__device__ inline std::uint16_t enc16(float x, bool half) {
    if (!half) return compress::detail::to_bf16_bits(x);
    if (isnan(x)) {
        const std::uint32_t u = __float_as_uint(x);
        return static_cast<std::uint16_t>(((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x3ffu));
    }
    return __half_as_ushort(__float2half_rn(x));
}

__device__ inline float dec16(std::uint16_t h, bool half) {
    if (!half) return compress::detail::from_bf16_bits(h);
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu))
        return __uint_as_float((static_cast<std::uint32_t>(h & 0x8000u) << 16) | 0x7fc00000u |
                               (static_cast<std::uint32_t>(h & 0x3ffu) << 13));
    return __half2float(__ushort_as_half(h));
}

/// Four elements a thread where the buffers allow 16-byte loads (`vec`), then one a thread.
template <bool Half>
__global__ void encode16(const float* __restrict__ in, std::uint16_t* __restrict__ out, std::int64_t n, bool vec) {
    const std::int64_t t = thread_id(), stride = thread_count();
    std::int64_t done = 0;
    if (vec) {
        const std::int64_t n4 = n / 4;
        for (std::int64_t i = t; i < n4; i += stride) {
            const float4 v = reinterpret_cast<const float4*>(in)[i];
            ushort4 o;
            o.x = enc16(v.x, Half), o.y = enc16(v.y, Half), o.z = enc16(v.z, Half), o.w = enc16(v.w, Half);
            reinterpret_cast<ushort4*>(out)[i] = o;
        }
        done = 4 * n4;
    }
    for (std::int64_t i = done + t; i < n; i += stride) out[i] = enc16(in[i], Half);
}

template <bool Half, bool Add>
__global__ void decode16(const std::uint16_t* __restrict__ in, float* __restrict__ out, std::int64_t n, bool vec) {
    const std::int64_t t = thread_id(), stride = thread_count();
    std::int64_t done = 0;
    if (vec) {
        const std::int64_t n4 = n / 4;
        for (std::int64_t i = t; i < n4; i += stride) {
            const ushort4 h = reinterpret_cast<const ushort4*>(in)[i];
            float4 v = make_float4(dec16(h.x, Half), dec16(h.y, Half), dec16(h.z, Half), dec16(h.w, Half));
            if (Add) {
                const float4 a = reinterpret_cast<const float4*>(out)[i];
                v = make_float4(__fadd_rn(a.x, v.x), __fadd_rn(a.y, v.y), __fadd_rn(a.z, v.z), __fadd_rn(a.w, v.w));
            }
            reinterpret_cast<float4*>(out)[i] = v;
        }
        done = 4 * n4;
    }
    for (std::int64_t i = done + t; i < n; i += stride) {
        const float v = dec16(in[i], Half);
        out[i] = Add ? __fadd_rn(out[i], v) : v;
    }
}

template <bool Half>
__global__ void combine16(const std::uint16_t* __restrict__ in, std::uint16_t* __restrict__ inout, std::int64_t n) {
    for (std::int64_t i = thread_id(); i < n; i += thread_count())
        inout[i] = enc16(__fadd_rn(dec16(in[i], Half), dec16(inout[i], Half)), Half);
}

__global__ void combine32(const float* __restrict__ in, float* __restrict__ inout, std::int64_t n) {
    for (std::int64_t i = thread_id(); i < n; i += thread_count()) inout[i] = __fadd_rn(inout[i], in[i]);
}

// --- INT8 and INT4: a warp per block of the format ------------------------------------------

/// The code of element i, as the host's code_of: products rounded, then the rounding.
__device__ inline int code_of(float x, const block_scale& s, int q, bool stochastic, std::uint32_t key,
                              std::int64_t i) {
    const float v = __fmul_rn(__fmul_rn(x, s.pre), s.inv);
    float r;
    if (stochastic)
        r = floorf(__fadd_rn(v, unit_draw(draw(static_cast<std::uint32_t>(i), key))));
    else
        r = rintf(v);  // to nearest, ties to even
    r = fminf(fmaxf(r, static_cast<float>(-q)), static_cast<float>(q));
    return static_cast<int>(r);
}

template <int Q>
__global__ void quantize(const float* __restrict__ in, std::int64_t n, std::int64_t block, std::int64_t nb,
                         std::byte* __restrict__ out, bool stochastic, std::uint32_t key) {
    auto* scales = reinterpret_cast<float*>(out);
    auto* codes = reinterpret_cast<std::uint8_t*>(out + 4 * nb);
    const int lane = static_cast<int>(threadIdx.x & 31);
    const std::int64_t warps = thread_count() / 32;
    for (std::int64_t b = thread_id() / 32; b < nb; b += warps) {
        const std::int64_t first = b * block, last = first + block < n ? first + block : n;
        std::uint32_t amax = 0;
        for (std::int64_t i = first + lane; i < last; i += 32) amax = max(amax, __float_as_uint(in[i]) & 0x7fffffffu);
        for (int o = 16; o > 0; o /= 2) amax = max(amax, __shfl_xor_sync(full_mask, amax, o));
        const block_scale s = scale_of(amax, Q);
        if (lane == 0) scales[b] = s.scale;
        for (std::int64_t base = first; base < last; base += 32) {  // the same trip count on every lane
            const std::int64_t i = base + lane;
            const int c = i < last && s.inv != 0 ? code_of(in[i], s, Q, stochastic, key, i) : 0;
            if (Q == 127) {
                if (i < last) codes[i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(c));
            } else {
                // nibble pairs: the even lane writes its own and its odd neighbour's (8 past the end)
                const int nib = c + 8;
                const int next = __shfl_down_sync(full_mask, nib, 1);
                if ((lane & 1) == 0 && i < last) codes[i / 2] = static_cast<std::uint8_t>(nib | (next << 4));
            }
        }
    }
}

template <int Q, bool Add>
__global__ void dequantize(const std::byte* __restrict__ in, std::int64_t n, std::int64_t block, std::int64_t nb,
                           float* __restrict__ out) {
    const auto* scales = reinterpret_cast<const float*>(in);
    const auto* codes = reinterpret_cast<const std::uint8_t*>(in + 4 * nb);
    const int lane = static_cast<int>(threadIdx.x & 31);
    const std::int64_t warps = thread_count() / 32;
    for (std::int64_t b = thread_id() / 32; b < nb; b += warps) {
        const float scale = scales[b];
        const std::int64_t first = b * block, last = first + block < n ? first + block : n;
        for (std::int64_t i = first + lane; i < last; i += 32) {
            int c;
            if (Q == 127)
                c = static_cast<std::int8_t>(codes[i]);
            else
                c = static_cast<int>((i & 1) ? codes[i / 2] >> 4 : codes[i / 2] & 15) - 8;
            const float x = __fmul_rn(static_cast<float>(c), scale);
            out[i] = Add ? __fadd_rn(out[i], x) : x;
        }
    }
}

// --- sign: a half-warp per block, lane l summing elements l, l + 16, ... (the host's order) ----

__global__ void sign(const float* __restrict__ in, std::int64_t n, std::int64_t block, std::int64_t nb,
                     std::byte* __restrict__ out) {
    auto* scales = reinterpret_cast<float*>(out);
    auto* bits = reinterpret_cast<std::uint8_t*>(out + 4 * nb);
    const int lane = static_cast<int>(threadIdx.x & 31), half = lane / 16, hl = lane % 16;
    const std::int64_t warps = thread_count() / 32;
    for (std::int64_t pair = thread_id() / 32; 2 * pair < nb; pair += warps) {
        const std::int64_t b = 2 * pair + half;
        const bool valid = b < nb;
        const std::int64_t first = b * block, last = !valid ? first : first + block < n ? first + block : n;
        float sum = 0.0f;
        for (std::int64_t base = 0; base < block; base += 16) {  // the same trip count on every lane
            const std::int64_t i = first + base + hl;
            const bool here = i < last;
            const float x = here ? in[i] : 0.0f;
            sum = __fadd_rn(sum, fabsf(x));  // adding +0 past the end changes nothing
            const unsigned set = __ballot_sync(full_mask, here && !(__float_as_uint(x) >> 31));
            if (hl == 0 && first + base < last) {
                const std::uint32_t mine = (set >> (16 * half)) & 0xffffu;
                const std::int64_t at = (first + base) / 8;
                bits[at] = static_cast<std::uint8_t>(mine);
                if (last - (first + base) > 8) bits[at + 1] = static_cast<std::uint8_t>(mine >> 8);
            }
        }
        for (int s = 8; s >= 1; s /= 2) {
            const float other = __shfl_down_sync(full_mask, sum, s, 16);
            if (hl < s) sum = __fadd_rn(sum, other);
        }
        if (hl == 0 && valid) {
            const float scale = __fdiv_rn(sum, static_cast<float>(last - first));
            scales[b] = scale <= 3.40282347e38f ? scale : __uint_as_float(compress::detail::nan_bits);
        }
    }
}

template <bool Add>
__global__ void unsign(const std::byte* __restrict__ in, std::int64_t n, std::int64_t block, std::int64_t nb,
                       float* __restrict__ out) {
    const auto* scales = reinterpret_cast<const float*>(in);
    const auto* bits = reinterpret_cast<const std::uint8_t*>(in + 4 * nb);
    const int lane = static_cast<int>(threadIdx.x & 31);
    const std::int64_t warps = thread_count() / 32;
    for (std::int64_t b = thread_id() / 32; b < nb; b += warps) {
        const float scale = scales[b];
        const std::int64_t first = b * block, last = first + block < n ? first + block : n;
        for (std::int64_t i = first + lane; i < last; i += 32) {
            const float x = (bits[i / 8] >> (i % 8)) & 1u ? scale : -scale;
            out[i] = Add ? __fadd_rn(out[i], x) : x;
        }
    }
}

// --- random-k ---------------------------------------------------------------------------------

__global__ void random_k(const float* __restrict__ in, std::int64_t n, std::int64_t k, std::int64_t stride,
                         std::uint32_t key, float* __restrict__ out) {
    for (std::int64_t i = thread_id(); i < k; i += thread_count()) out[i] = in[random_index(i, stride, n, key)];
}

template <bool Add>
__global__ void random_k_scatter(const float* __restrict__ in, std::int64_t n, std::int64_t k, std::int64_t stride,
                                 std::uint32_t key, float* __restrict__ out) {
    for (std::int64_t i = thread_id(); i < k; i += thread_count()) {
        const std::int64_t j = random_index(i, stride, n, key);  // distinct: no two threads share j
        out[j] = Add ? __fadd_rn(out[j], in[i]) : in[i];
    }
}

// --- top-k: radix select (the host's rounds and cut), then an ordered compaction by tiles ------

struct top_k_state {
    std::uint32_t prefix;
    std::int32_t shift;
    std::uint32_t need;  ///< keys equal to the prefix still to take, in index order
    std::uint32_t done;  ///< the cut is final
};

struct top_k_space {
    std::uint32_t* hist;
    top_k_state* state;
    std::uint32_t *tile_gt, *tile_eq, *eq_off, *sel_off;
    std::int64_t tiles;
};

top_k_space top_k_layout(void* ws, std::int64_t n) {
    auto* base = static_cast<std::byte*>(ws);
    top_k_space s;
    s.tiles = (n + detail::top_k_tile - 1) / detail::top_k_tile;
    s.hist = reinterpret_cast<std::uint32_t*>(base);
    s.state = reinterpret_cast<top_k_state*>(base + 4 * 2048);
    auto* tiles = reinterpret_cast<std::uint32_t*>(base + 4 * 2048 + 64);
    s.tile_gt = tiles, s.tile_eq = tiles + s.tiles, s.eq_off = tiles + 2 * s.tiles, s.sel_off = tiles + 3 * s.tiles;
    return s;
}

__device__ inline std::uint32_t key_of(float x) { return __float_as_uint(x) & 0x7fffffffu; }

__global__ void top_k_histogram(const float* __restrict__ in, std::int64_t n, int r, const top_k_state* st,
                                std::uint32_t* hist) {
    __shared__ std::uint32_t local[2048];
    if (st->done) return;  // the same for the whole block
    const int shift = r == 0 ? 20 : r == 1 ? 10 : 0;
    const std::uint32_t bins = r == 0 ? 2048 : 1024, mask = bins - 1, prefix = st->prefix;
    for (std::uint32_t b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (std::int64_t i = thread_id(); i < n; i += thread_count()) {
        const std::uint32_t k = key_of(in[i]);
        if (r == 0 || (k >> (shift + 10)) == prefix) atomicAdd(&local[(k >> shift) & mask], 1u);
    }
    __syncthreads();
    for (std::uint32_t b = threadIdx.x; b < bins; b += blockDim.x)
        if (local[b]) atomicAdd(&hist[b], local[b]);
}

/// One block of 1024 threads: the bin holding the remaining'th largest key (suffix sums of the
/// histogram), the new prefix and need, whether the cut is final; then clears the histogram.
__global__ void top_k_pick(int r, std::uint32_t k, top_k_state* st, std::uint32_t* hist) {
    __shared__ std::uint32_t suffix[2048];
    __shared__ std::uint32_t pick;
    if (st->done) return;
    const std::uint32_t bins = r == 0 ? 2048 : 1024, remaining = r == 0 ? k : st->need;
    const std::uint32_t t = threadIdx.x;
    for (std::uint32_t j = t; j < bins; j += blockDim.x) suffix[j] = hist[bins - 1 - j];  // largest bin first
    __syncthreads();
    for (std::uint32_t offset = 1; offset < bins; offset *= 2) {  // inclusive scan, two items a thread
        std::uint32_t add[2] = {0, 0};
        for (int h = 0; h < 2; ++h) {
            const std::uint32_t j = t + h * blockDim.x;
            if (j < bins && j >= offset) add[h] = suffix[j - offset];
        }
        __syncthreads();
        for (int h = 0; h < 2; ++h) {
            const std::uint32_t j = t + h * blockDim.x;
            if (j < bins) suffix[j] += add[h];
        }
        __syncthreads();
    }
    for (std::uint32_t j = t; j < bins; j += blockDim.x) {
        const std::uint32_t before = j ? suffix[j - 1] : 0;
        if (suffix[j] >= remaining && before < remaining) pick = j;
    }
    __syncthreads();
    if (t == 0) {
        const std::uint32_t j = pick, b = bins - 1 - j, before = j ? suffix[j - 1] : 0;
        const std::uint32_t need = remaining - before, in_bin = suffix[j] - before;
        st->prefix = r == 0 ? b : (st->prefix << 10) | b;
        st->shift = r == 0 ? 20 : r == 1 ? 10 : 0;
        st->need = need;
        st->done = in_bin == need || r == 2 ? 1u : 0u;
    }
    for (std::uint32_t j = t; j < 2048; j += blockDim.x) hist[j] = 0;
}

__device__ inline std::uint32_t warp_sum(std::uint32_t v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(full_mask, v, o);
    return v;
}

__global__ void top_k_count(const float* __restrict__ in, std::int64_t n, std::int64_t tiles, const top_k_state* st,
                            std::uint32_t* tile_gt, std::uint32_t* tile_eq) {
    __shared__ std::uint32_t gt_sum, eq_sum;
    const int shift = st->shift;
    const std::uint32_t prefix = st->prefix;
    for (std::int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        if (threadIdx.x == 0) gt_sum = 0, eq_sum = 0;
        __syncthreads();
        const std::int64_t first = t * detail::top_k_tile;
        const std::int64_t last = first + detail::top_k_tile < n ? first + detail::top_k_tile : n;
        std::uint32_t gt = 0, eq = 0;
        for (std::int64_t i = first + threadIdx.x; i < last; i += blockDim.x) {
            const std::uint32_t kk = key_of(in[i]) >> shift;
            gt += kk > prefix;
            eq += kk == prefix;
        }
        gt = warp_sum(gt), eq = warp_sum(eq);
        if ((threadIdx.x & 31) == 0) atomicAdd(&gt_sum, gt), atomicAdd(&eq_sum, eq);
        __syncthreads();
        if (threadIdx.x == 0) tile_gt[t] = gt_sum, tile_eq[t] = eq_sum;
        __syncthreads();
    }
}

/// Exclusive scan of v over the block (1024 threads) in `buf`; returns the block's total.
__device__ inline std::uint32_t block_exclusive_scan(std::uint32_t v, std::uint32_t* buf, std::uint32_t& out) {
    const std::uint32_t t = threadIdx.x;
    buf[t] = v;
    __syncthreads();
    for (std::uint32_t offset = 1; offset < blockDim.x; offset *= 2) {
        const std::uint32_t add = t >= offset ? buf[t - offset] : 0;
        __syncthreads();
        buf[t] += add;
        __syncthreads();
    }
    out = buf[t] - v;
    const std::uint32_t total = buf[blockDim.x - 1];
    __syncthreads();
    return total;
}

/// One block of 1024 threads: per tile, the equal keys before it (eq_off), how many of its keys
/// are kept, and the kept keys before it (sel_off).
__global__ void top_k_scan(std::int64_t tiles, const top_k_state* st, const std::uint32_t* tile_gt,
                           const std::uint32_t* tile_eq, std::uint32_t* eq_off, std::uint32_t* sel_off) {
    __shared__ std::uint32_t buf[1024];
    const std::uint32_t need = st->need;
    std::uint32_t carry_eq = 0, carry_sel = 0;
    for (std::int64_t base = 0; base < tiles; base += blockDim.x) {
        const std::int64_t i = base + threadIdx.x;
        const std::uint32_t eq = i < tiles ? tile_eq[i] : 0;
        std::uint32_t before_eq;
        const std::uint32_t total_eq = block_exclusive_scan(eq, buf, before_eq);
        before_eq += carry_eq;
        const std::uint32_t left = need > before_eq ? need - before_eq : 0;
        const std::uint32_t sel = i < tiles ? tile_gt[i] + (eq < left ? eq : left) : 0;
        std::uint32_t before_sel;
        const std::uint32_t total_sel = block_exclusive_scan(sel, buf, before_sel);
        if (i < tiles) eq_off[i] = before_eq, sel_off[i] = before_sel + carry_sel;
        carry_eq += total_eq, carry_sel += total_sel;
    }
}

/// Per tile, 256 elements at a time in index order: ranks from warp ballots, so that the kept
/// elements land in index order and the first `need` equal keys are the ones kept.
__global__ void top_k_write(const float* __restrict__ in, std::int64_t n, std::int64_t tiles, std::int64_t k,
                            const top_k_state* st, const std::uint32_t* eq_off, const std::uint32_t* sel_off,
                            std::byte* __restrict__ out) {
    __shared__ std::uint32_t warp_eq[threads / 32], warp_sel[threads / 32];
    auto* indices = reinterpret_cast<std::uint32_t*>(out);
    auto* values = reinterpret_cast<float*>(out + 4 * k);
    const int shift = st->shift;
    const std::uint32_t prefix = st->prefix, need = st->need;
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    const unsigned below = (1u << lane) - 1u;
    for (std::int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const std::int64_t first = t * detail::top_k_tile;
        const std::int64_t last = first + detail::top_k_tile < n ? first + detail::top_k_tile : n;
        std::uint32_t eq_run = eq_off[t], sel_run = sel_off[t];
        for (std::int64_t base = first; base < last; base += blockDim.x) {
            const std::int64_t i = base + threadIdx.x;
            const bool here = i < last;
            const float x = here ? in[i] : 0.0f;
            const std::uint32_t kk = key_of(x) >> shift;
            const bool gt = here && kk > prefix, eq = here && kk == prefix;
            const unsigned eq_bits = __ballot_sync(full_mask, eq);
            if (lane == 0) warp_eq[warp] = __popc(eq_bits);
            __syncthreads();
            std::uint32_t eq_before = 0, eq_total = 0;
            for (unsigned w = 0; w < threads / 32; ++w) eq_before += w < warp ? warp_eq[w] : 0, eq_total += warp_eq[w];
            const bool keep = gt || (eq && eq_run + eq_before + __popc(eq_bits & below) < need);
            const unsigned sel_bits = __ballot_sync(full_mask, keep);
            if (lane == 0) warp_sel[warp] = __popc(sel_bits);
            __syncthreads();
            std::uint32_t sel_before = 0, sel_total = 0;
            for (unsigned w = 0; w < threads / 32; ++w)
                sel_before += w < warp ? warp_sel[w] : 0, sel_total += warp_sel[w];
            if (keep) {
                const std::uint32_t at = sel_run + sel_before + __popc(sel_bits & below);
                indices[at] = static_cast<std::uint32_t>(i);
                values[at] = x;
            }
            eq_run += eq_total, sel_run += sel_total;
        }
    }
}

// --- error feedback ---------------------------------------------------------------------------

__global__ void feedback_apply_kernel(const float* __restrict__ in, const float* __restrict__ residual,
                                      float* __restrict__ corrected, std::int64_t n) {
    for (std::int64_t i = thread_id(); i < n; i += thread_count()) corrected[i] = __fadd_rn(in[i], residual[i]);
}

__global__ void feedback_update_kernel(const float* __restrict__ corrected, const float* decompressed, float* residual,
                                       std::int64_t n) {
    for (std::int64_t i = thread_id(); i < n; i += thread_count())
        residual[i] = __fsub_rn(corrected[i], decompressed[i]);
}

template <bool Add>
__global__ void top_k_scatter(const std::byte* __restrict__ in, std::int64_t n, std::int64_t k,
                              float* __restrict__ out) {
    const auto* indices = reinterpret_cast<const std::uint32_t*>(in);
    const auto* values = reinterpret_cast<const float*>(in + 4 * k);
    for (std::int64_t i = thread_id(); i < k; i += thread_count()) {
        const std::uint32_t j = indices[i];
        if (j >= n) continue;  // a corrupt index writes nothing, as on the host
        out[j] = Add ? __fadd_rn(out[j], values[i]) : values[i];
    }
}

// --- the host side ----------------------------------------------------------------------------

void need_device() {
    if (!shunt::gpu::device_available()) throw unsupported("no CUDA device available");
}

bool aligned(const void* p, std::uintptr_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

/// A warp per item (a block of the format).
unsigned warp_grid(std::int64_t items) { return grid_for(items * 32); }

void launched() { SHUNT_CUDA(cudaGetLastError()); }

template <bool Add>
void expand(const params& p, const void* in, std::int64_t n, float* out, cudaStream_t s, std::uint64_t step) {
    check_count(p, n);
    if (n == 0) return;
    need_device();
    const std::int64_t nb = blocks(p, n), k = kept(p, n);
    const auto* bytes = static_cast<const std::byte*>(in);
    switch (p.kind) {
        case method::fp16:
        case method::bf16: {
            const bool vec = aligned(in, 8) && aligned(out, 16);
            const auto* h = static_cast<const std::uint16_t*>(in);
            if (p.kind == method::fp16)
                decode16<true, Add><<<grid_for(n, 4), threads, 0, s>>>(h, out, n, vec);
            else
                decode16<false, Add><<<grid_for(n, 4), threads, 0, s>>>(h, out, n, vec);
            break;
        }
        case method::int8: dequantize<127, Add><<<warp_grid(nb), threads, 0, s>>>(bytes, n, p.block, nb, out); break;
        case method::int4: dequantize<7, Add><<<warp_grid(nb), threads, 0, s>>>(bytes, n, p.block, nb, out); break;
        case method::sign: unsign<Add><<<warp_grid(nb), threads, 0, s>>>(bytes, n, p.block, nb, out); break;
        case method::random_k: {
            if (!Add) SHUNT_CUDA(cudaMemsetAsync(out, 0, static_cast<std::size_t>(n) * 4, s));
            const std::uint32_t key = compress::detail::draw_key(p.seed, step, compress::detail::purpose::indices);
            random_k_scatter<Add>
                <<<grid_for(k), threads, 0, s>>>(static_cast<const float*>(in), n, k, p.stride, key, out);
            break;
        }
        case method::top_k:
            if (!Add) SHUNT_CUDA(cudaMemsetAsync(out, 0, static_cast<std::size_t>(n) * 4, s));
            top_k_scatter<Add><<<grid_for(k), threads, 0, s>>>(bytes, n, k, out);
            break;
    }
    launched();
}

}  // namespace

void compress(const params& p, const float* in, std::int64_t n, void* out, void* workspace, stream_t stream,
              std::uint64_t step) {
    check_count(p, n);
    if (n == 0) return;
    need_device();
    const cudaStream_t s = stream;
    const std::int64_t nb = blocks(p, n), k = kept(p, n);
    auto* bytes = static_cast<std::byte*>(out);
    switch (p.kind) {
        case method::fp16:
        case method::bf16: {
            const bool vec = aligned(in, 16) && aligned(out, 8);
            auto* h = static_cast<std::uint16_t*>(out);
            if (p.kind == method::fp16)
                encode16<true><<<grid_for(n, 4), threads, 0, s>>>(in, h, n, vec);
            else
                encode16<false><<<grid_for(n, 4), threads, 0, s>>>(in, h, n, vec);
            break;
        }
        case method::int8:
        case method::int4: {
            const bool stochastic = p.round == rounding::stochastic;
            const std::uint32_t key = compress::detail::draw_key(p.seed, step, compress::detail::purpose::rounding);
            if (p.kind == method::int8)
                quantize<127><<<warp_grid(nb), threads, 0, s>>>(in, n, p.block, nb, bytes, stochastic, key);
            else
                quantize<7><<<warp_grid(nb), threads, 0, s>>>(in, n, p.block, nb, bytes, stochastic, key);
            break;
        }
        case method::sign: sign<<<warp_grid((nb + 1) / 2), threads, 0, s>>>(in, n, p.block, nb, bytes); break;
        case method::random_k: {
            const std::uint32_t key = compress::detail::draw_key(p.seed, step, compress::detail::purpose::indices);
            random_k<<<grid_for(k), threads, 0, s>>>(in, n, k, p.stride, key, static_cast<float*>(out));
            break;
        }
        case method::top_k: {
            if (!workspace) throw error("compress::gpu::compress: top_k needs workspace_bytes(p, n) of workspace");
            const top_k_space w = top_k_layout(workspace, n);
            SHUNT_CUDA(cudaMemsetAsync(workspace, 0, 4 * 2048 + 64, s));
            const unsigned hist_grid = std::min(grid_for(n, 16), 1024u);
            for (int r = 0; r < 3; ++r) {
                top_k_histogram<<<hist_grid, threads, 0, s>>>(in, n, r, w.state, w.hist);
                top_k_pick<<<1, 1024, 0, s>>>(r, static_cast<std::uint32_t>(k), w.state, w.hist);
            }
            const auto tile_grid = static_cast<unsigned>(std::min<std::int64_t>(w.tiles, 65535));
            top_k_count<<<tile_grid, threads, 0, s>>>(in, n, w.tiles, w.state, w.tile_gt, w.tile_eq);
            top_k_scan<<<1, 1024, 0, s>>>(w.tiles, w.state, w.tile_gt, w.tile_eq, w.eq_off, w.sel_off);
            top_k_write<<<tile_grid, threads, 0, s>>>(in, n, w.tiles, k, w.state, w.eq_off, w.sel_off, bytes);
            break;
        }
    }
    launched();
}

void decompress(const params& p, const void* in, std::int64_t n, float* out, stream_t stream, std::uint64_t step) {
    expand<false>(p, in, n, out, stream, step);
}

void decompress_accumulate(const params& p, const void* in, std::int64_t n, float* acc, stream_t stream,
                           std::uint64_t step) {
    expand<true>(p, in, n, acc, stream, step);
}

void combine(sum_form f, const void* in, void* inout, std::int64_t count, stream_t stream) {
    if (count <= 0 || f == sum_form::none) return;
    need_device();
    const auto* a = static_cast<const std::uint16_t*>(in);
    auto* b = static_cast<std::uint16_t*>(inout);
    if (f == sum_form::f16)
        combine16<true><<<grid_for(count, 4), threads, 0, stream>>>(a, b, count);
    else if (f == sum_form::bf16)
        combine16<false><<<grid_for(count, 4), threads, 0, stream>>>(a, b, count);
    else
        combine32<<<grid_for(count, 4), threads, 0, stream>>>(static_cast<const float*>(in), static_cast<float*>(inout),
                                                              count);
    launched();
}

void feedback_apply(const float* in, const float* residual, float* corrected, std::int64_t n, stream_t stream) {
    if (n <= 0) return;
    need_device();
    feedback_apply_kernel<<<grid_for(n, 4), threads, 0, stream>>>(in, residual, corrected, n);
    launched();
}

void feedback_update(const float* corrected, const float* decompressed, float* residual, std::int64_t n,
                     stream_t stream) {
    if (n <= 0) return;
    need_device();
    feedback_update_kernel<<<grid_for(n, 4), threads, 0, stream>>>(corrected, decompressed, residual, n);
    launched();
}

}  // namespace shunt::compress::gpu
