// shunt/compress/cast.hpp: the FP16 and BF16 compressors: float32 to IEEE binary16 or bfloat16 and
// back, round to nearest even, NaN and Inf as IEEE converts them, on the host (scalar, AVX2+F16C,
// AVX-512), the same bits on every path.
#pragma once

#include <shunt/compress/simd.hpp>

#include <cstdint>

SHUNT_SIMD_BEGIN

namespace shunt::compress {
namespace detail {

inline void to_f16_scalar(const float* in, std::int64_t n, std::uint16_t* out) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = to_f16_bits(in[i]);
}
inline void to_bf16_scalar(const float* in, std::int64_t n, std::uint16_t* out) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = to_bf16_bits(in[i]);
}
/// Widens n 16-bit values to float, stored (Add false) or added to `out` (Add true).
template <bool Add, bool Half>
void from_16_scalar(const std::uint16_t* in, std::int64_t n, float* out) {
    for (std::int64_t i = 0; i < n; ++i) {
        const float x = Half ? from_f16_bits(in[i]) : from_bf16_bits(in[i]);
        if (Add)
            out[i] += x;
        else
            out[i] = x;
    }
}

#if SHUNT_COMPRESS_X86
SHUNT_TARGET_AVX2 inline void to_f16_avx2(const float* in, std::int64_t n, std::uint16_t* out) {
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    to_f16_scalar(in + i, n - i, out + i);
}

SHUNT_TARGET_AVX512 inline void to_f16_avx512(const float* in, std::int64_t n, std::uint16_t* out) {
    std::int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i a = _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m256i b = _mm512_cvtps_ph(_mm512_loadu_ps(in + i + 16), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), a);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i + 16), b);
    }
    for (; i < n; i += 16) {
        const __mmask16 m = first_lanes(n - i);
        _mm256_mask_storeu_epi16(
            out + i, m,
            _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
}

/// bfloat16 by integer arithmetic (not VCVTNEPS2BF16, which flushes subnormal inputs to zero).
SHUNT_TARGET_AVX2 inline __m128i to_bf16_8(__m256 v) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    const __m256i a = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(static_cast<int>(inf_bits)));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
    // 32-bit lanes to 16 bits: values fit in 16 bits, so a signed pack would saturate the upper
    // half; mask and pack unsigned instead.
    const __m256i low = _mm256_and_si256(r, _mm256_set1_epi32(0xffff));
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(low), _mm256_extracti128_si256(low, 1));
    return packed;
}

SHUNT_TARGET_AVX2 inline void to_bf16_avx2(const float* in, std::int64_t n, std::uint16_t* out) {
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), to_bf16_8(_mm256_loadu_ps(in + i)));
    to_bf16_scalar(in + i, n - i, out + i);
}

SHUNT_TARGET_AVX512 inline __m256i to_bf16_16(__m512 v) {
    const __m512i x = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(static_cast<int>(inf_bits)));
    return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

SHUNT_TARGET_AVX512 inline void to_bf16_avx512(const float* in, std::int64_t n, std::uint16_t* out) {
    std::int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), to_bf16_16(_mm512_loadu_ps(in + i)));
    if (i < n) {
        const __mmask16 m = first_lanes(n - i);
        _mm256_mask_storeu_epi16(out + i, m, to_bf16_16(_mm512_maskz_loadu_ps(m, in + i)));
    }
}

template <bool Add, bool Half>
SHUNT_TARGET_AVX2 void from_16_avx2(const std::uint16_t* in, std::int64_t n, float* out) {
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x =
            Half ? load8(reinterpret_cast<const f16*>(in + i)) : load8(reinterpret_cast<const bf16*>(in + i));
        _mm256_storeu_ps(out + i, Add ? _mm256_add_ps(_mm256_loadu_ps(out + i), x) : x);
    }
    from_16_scalar<Add, Half>(in + i, n - i, out + i);
}

template <bool Add, bool Half>
SHUNT_TARGET_AVX512 void from_16_avx512(const std::uint16_t* in, std::int64_t n, float* out) {
    std::int64_t i = 0;
    for (; i + 16 <= n; i += 16) {  // whole vectors: masked stores cost streaming data its speed
        const __m512 x =
            Half ? load16(reinterpret_cast<const f16*>(in + i)) : load16(reinterpret_cast<const bf16*>(in + i));
        _mm512_storeu_ps(out + i, Add ? _mm512_add_ps(_mm512_loadu_ps(out + i), x) : x);
    }
    if (i < n) {
        const __mmask16 m = first_lanes(n - i);
        const __m512 x =
            Half ? load16(reinterpret_cast<const f16*>(in + i), m) : load16(reinterpret_cast<const bf16*>(in + i), m);
        _mm512_mask_storeu_ps(out + i, m, Add ? _mm512_add_ps(_mm512_maskz_loadu_ps(m, out + i), x) : x);
    }
}
#endif

template <bool Add, bool Half>
void from_16(const std::uint16_t* in, std::int64_t n, float* out, isa path) {
#if SHUNT_COMPRESS_X86
    if (path == isa::avx512) return from_16_avx512<Add, Half>(in, n, out);
    if (path == isa::avx2) return from_16_avx2<Add, Half>(in, n, out);
#endif
    (void)path;
    from_16_scalar<Add, Half>(in, n, out);
}

}  // namespace detail

/// Converts n floats to binary16 bits (round to nearest even; beyond 65504 to Inf; NaN quieted,
/// its top payload bits kept). Blocking, on the calling thread; thread-safe for distinct outputs.
/// `path` above what the CPU has falls back to the best it has.
inline void to_f16(const float* in, std::int64_t n, std::uint16_t* out, isa path = active_isa()) {
    path = usable(path);
#if SHUNT_COMPRESS_X86
    if (path == isa::avx512) return detail::to_f16_avx512(in, n, out);
    if (path == isa::avx2) return detail::to_f16_avx2(in, n, out);
#endif
    detail::to_f16_scalar(in, n, out);
}

/// Converts n floats to bfloat16 bits (round to nearest even, NaN quieted); as to_f16.
inline void to_bf16(const float* in, std::int64_t n, std::uint16_t* out, isa path = active_isa()) {
    path = usable(path);
#if SHUNT_COMPRESS_X86
    if (path == isa::avx512) return detail::to_bf16_avx512(in, n, out);
    if (path == isa::avx2) return detail::to_bf16_avx2(in, n, out);
#endif
    detail::to_bf16_scalar(in, n, out);
}

/// out[i] = the float value of binary16 in[i] (exact).
inline void from_f16(const std::uint16_t* in, std::int64_t n, float* out, isa path = active_isa()) {
    detail::from_16<false, true>(in, n, out, usable(path));
}
/// acc[i] += the float value of binary16 in[i].
inline void accumulate_f16(const std::uint16_t* in, std::int64_t n, float* acc, isa path = active_isa()) {
    detail::from_16<true, true>(in, n, acc, usable(path));
}
/// out[i] = the float value of bfloat16 in[i] (exact).
inline void from_bf16(const std::uint16_t* in, std::int64_t n, float* out, isa path = active_isa()) {
    detail::from_16<false, false>(in, n, out, usable(path));
}
/// acc[i] += the float value of bfloat16 in[i].
inline void accumulate_bf16(const std::uint16_t* in, std::int64_t n, float* acc, isa path = active_isa()) {
    detail::from_16<true, false>(in, n, acc, usable(path));
}

}  // namespace shunt::compress

SHUNT_SIMD_END
