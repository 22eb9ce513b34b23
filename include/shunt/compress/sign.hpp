// shunt/compress/sign.hpp: the 1-bit sign compressor: one bit an element (its sign) and one float
// scale per block, the block's mean magnitude, so that x is decompressed as +-scale; meant for use
// with error feedback (error_feedback.hpp). Host: scalar, AVX2, AVX-512, the same bits everywhere.
//
// The mean is summed in a fixed order, so that every path (and the device) gets the same scale:
// 16 lanes, lane l adding the block's elements l, l + 16, l + 32, ... in turn, then the lanes
// pairwise (l += l + 8, then l + 4, l + 2, l + 1), divided by the block's element count. A block
// whose mean is not finite (NaN or Inf inside, or an overflowing sum) gets a NaN scale.
#pragma once

#include <shunt/compress/simd.hpp>

#include <cstdint>
#include <cstring>

SHUNT_SIMD_BEGIN

namespace shunt::compress {
namespace detail {

/// The scale from the 16 lane sums of a block of `count` elements.
inline float sign_scale(float* lane, std::int64_t count) {
    for (int s = 8; s >= 1; s /= 2)
        for (int l = 0; l < s; ++l) lane[l] += lane[l + s];
    const float scale = lane[0] / static_cast<float>(count);
    return scale <= 3.40282347e38f ? scale : float_of(nan_bits);
}

template <class T>
void sign_scalar(const params& p, const T* in, std::int64_t n, std::byte* out) {
    const std::int64_t nb = blocks(p, n);
    auto* bits = reinterpret_cast<std::uint8_t*>(out + 4 * nb);
    for (std::int64_t b = 0; b < nb; ++b) {
        const std::int64_t first = b * p.block, last = first + p.block < n ? first + p.block : n;
        float lane[16] = {};
        for (std::int64_t i = first; i < last; ++i)
            lane[(i - first) % 16] += float_of(bits_of(widen(in[i])) & 0x7fffffffu);
        const float scale = sign_scale(lane, last - first);
        std::memcpy(out + 4 * b, &scale, 4);
        for (std::int64_t i = first; i < last; i += 8) {
            std::uint8_t byte = 0;
            for (std::int64_t j = i; j < i + 8 && j < last; ++j)
                if (!(bits_of(widen(in[j])) >> 31)) byte |= static_cast<std::uint8_t>(1u << (j - i));
            bits[i / 8] = byte;
        }
    }
}

template <bool Add>
void unsign_scalar(const params& p, const std::byte* in, std::int64_t n, float* out) {
    const std::int64_t nb = blocks(p, n);
    const auto* bits = reinterpret_cast<const std::uint8_t*>(in + 4 * nb);
    for (std::int64_t b = 0; b < nb; ++b) {
        float scale;
        std::memcpy(&scale, in + 4 * b, 4);
        const std::int64_t first = b * p.block, last = first + p.block < n ? first + p.block : n;
        for (std::int64_t i = first; i < last; ++i) {
            const float x = (bits[i / 8] >> (i % 8)) & 1u ? scale : -scale;
            if (Add)
                out[i] += x;
            else
                out[i] = x;
        }
    }
}

#if SHUNT_COMPRESS_X86
template <class T>
SHUNT_TARGET_AVX2 void sign_avx2(const params& p, const T* in, std::int64_t n, std::byte* out) {
    const std::int64_t nb = blocks(p, n);
    auto* bits = reinterpret_cast<std::uint8_t*>(out + 4 * nb);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (std::int64_t b = 0; b < nb; ++b) {
        const std::int64_t first = b * p.block, last = first + p.block < n ? first + p.block : n;
        __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
        std::int64_t i = first;
        for (; i + 16 <= last; i += 16) {
            const __m256 x = load8(in + i), y = load8(in + i + 8);
            lo = _mm256_add_ps(lo, _mm256_and_ps(x, abs_mask));
            hi = _mm256_add_ps(hi, _mm256_and_ps(y, abs_mask));
            const unsigned sx = static_cast<unsigned>(_mm256_movemask_ps(x));
            const unsigned sy = static_cast<unsigned>(_mm256_movemask_ps(y));
            bits[i / 8] = static_cast<std::uint8_t>(~sx);
            bits[i / 8 + 1] = static_cast<std::uint8_t>(~sy);
        }
        alignas(32) float lane[16];
        _mm256_store_ps(lane, lo);
        _mm256_store_ps(lane + 8, hi);
        for (std::int64_t j = i; j < last; ++j) lane[(j - first) % 16] += float_of(bits_of(widen(in[j])) & 0x7fffffffu);
        for (; i < last; i += 8) {
            std::uint8_t byte = 0;
            for (std::int64_t j = i; j < i + 8 && j < last; ++j)
                if (!(bits_of(widen(in[j])) >> 31)) byte |= static_cast<std::uint8_t>(1u << (j - i));
            bits[i / 8] = byte;
        }
        const float scale = sign_scale(lane, last - first);
        std::memcpy(out + 4 * b, &scale, 4);
    }
}

template <bool Add>
SHUNT_TARGET_AVX2 void unsign_avx2(const params& p, const std::byte* in, std::int64_t n, float* out) {
    const std::int64_t nb = blocks(p, n);
    const auto* bits = reinterpret_cast<const std::uint8_t*>(in + 4 * nb);
    const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    for (std::int64_t b = 0; b < nb; ++b) {
        float scale;
        std::memcpy(&scale, in + 4 * b, 4);
        const __m256 plus = _mm256_set1_ps(scale), minus = _mm256_set1_ps(-scale);
        const std::int64_t first = b * p.block, last = first + p.block < n ? first + p.block : n;
        std::int64_t i = first;
        for (; i + 8 <= last; i += 8) {
            const __m256i byte = _mm256_set1_epi32(bits[i / 8]);
            const __m256i set = _mm256_cmpeq_epi32(_mm256_and_si256(byte, lane_bit), lane_bit);
            __m256 x = _mm256_blendv_ps(minus, plus, _mm256_castsi256_ps(set));
            if (Add) x = _mm256_add_ps(_mm256_loadu_ps(out + i), x);
            _mm256_storeu_ps(out + i, x);
        }
        for (; i < last; ++i) {
            const float x = (bits[i / 8] >> (i % 8)) & 1u ? scale : -scale;
            if (Add)
                out[i] += x;
            else
                out[i] = x;
        }
    }
}

template <class T>
SHUNT_TARGET_AVX512 void sign_avx512(const params& p, const T* in, std::int64_t n, std::byte* out) {
    const std::int64_t nb = blocks(p, n);
    auto* bits = reinterpret_cast<std::uint8_t*>(out + 4 * nb);
    const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (std::int64_t b = 0; b < nb; ++b) {
        const std::int64_t first = b * p.block, last = first + p.block < n ? first + p.block : n;
        __m512 acc = _mm512_setzero_ps();
        std::int64_t i = first;
        for (; i + 16 <= last; i += 16) {
            const __m512 x = load16(in + i);
            acc = _mm512_add_ps(acc, _mm512_and_ps(x, abs_mask));
            const auto set = static_cast<std::uint16_t>(~_mm512_movepi32_mask(_mm512_castps_si512(x)));
            std::memcpy(bits + i / 8, &set, 2);
        }
        if (i < last) {
            const std::int64_t count = last - i;
            const __mmask16 m = first_lanes(count);
            const __m512 x = load16(in + i, m);
            acc = _mm512_add_ps(acc, _mm512_and_ps(x, abs_mask));
            const auto set = static_cast<std::uint16_t>(~_mm512_movepi32_mask(_mm512_castps_si512(x)) & m);
            bits[i / 8] = static_cast<std::uint8_t>(set);
            if (count > 8) bits[i / 8 + 1] = static_cast<std::uint8_t>(set >> 8);
        }
        alignas(64) float lane[16];
        _mm512_store_ps(lane, acc);
        const float scale = sign_scale(lane, last - first);
        std::memcpy(out + 4 * b, &scale, 4);
    }
}

template <bool Add>
SHUNT_TARGET_AVX512 void unsign_avx512(const params& p, const std::byte* in, std::int64_t n, float* out) {
    const std::int64_t nb = blocks(p, n);
    const auto* bits = reinterpret_cast<const std::uint8_t*>(in + 4 * nb);
    for (std::int64_t b = 0; b < nb; ++b) {
        float scale;
        std::memcpy(&scale, in + 4 * b, 4);
        const __m512 plus = _mm512_set1_ps(scale), minus = _mm512_set1_ps(-scale);
        const std::int64_t first = b * p.block, last = first + p.block < n ? first + p.block : n;
        std::int64_t i = first;
        for (; i + 16 <= last; i += 16) {
            std::uint16_t set;
            std::memcpy(&set, bits + i / 8, 2);
            __m512 x = _mm512_mask_blend_ps(static_cast<__mmask16>(set), minus, plus);
            if (Add) x = _mm512_add_ps(_mm512_loadu_ps(out + i), x);
            _mm512_storeu_ps(out + i, x);
        }
        if (i < last) {
            const std::int64_t count = last - i;
            const __mmask16 m = first_lanes(count);
            const auto set = static_cast<__mmask16>(bits[i / 8] | (count > 8 ? bits[i / 8 + 1] << 8 : 0));
            __m512 x = _mm512_mask_blend_ps(set, minus, plus);
            if (Add) x = _mm512_add_ps(_mm512_maskz_loadu_ps(m, out + i), x);
            _mm512_mask_storeu_ps(out + i, m, x);
        }
    }
}
#endif

}  // namespace detail

/// The 1-bit form of n elements (float, f16 or bf16) at `out`, compressed_bytes(p, n) bytes:
/// p.block elements per scale. Blocking, on the calling thread; thread-safe for distinct outputs.
template <class T>
void sign(const params& p, const T* in, std::int64_t n, std::byte* out, isa path = active_isa()) {
    check_count(p, n);
    path = usable(path);
#if SHUNT_COMPRESS_X86
    if (path == isa::avx512) return detail::sign_avx512(p, in, n, out);
    if (path == isa::avx2) return detail::sign_avx2(p, in, n, out);
#endif
    detail::sign_scalar(p, in, n, out);
}

/// out[i] = +scale where element i's bit is set, -scale where not (Add: added to out[i]).
template <bool Add>
void unsign(const params& p, const std::byte* in, std::int64_t n, float* out, isa path = active_isa()) {
    check_count(p, n);
    path = usable(path);
#if SHUNT_COMPRESS_X86
    if (path == isa::avx512) return detail::unsign_avx512<Add>(p, in, n, out);
    if (path == isa::avx2) return detail::unsign_avx2<Add>(p, in, n, out);
#endif
    detail::unsign_scalar<Add>(p, in, n, out);
}

}  // namespace shunt::compress

SHUNT_SIMD_END
