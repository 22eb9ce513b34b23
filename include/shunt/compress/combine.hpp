// shunt/compress/combine.hpp: the reduction of summable compressed forms (sum_form): what an
// allreduce of the compressed vectors applies pairwise. binary16 and bfloat16 are added in float
// and rounded back to nearest even (the float accumulation those formats need); float32 is a
// plain sum. Host: scalar, AVX2, AVX-512, the same bits everywhere.
#pragma once

#include <shunt/compress/cast.hpp>
#include <shunt/compress/common.hpp>
#include <shunt/compress/simd.hpp>

#include <cstddef>
#include <cstdint>

SHUNT_SIMD_BEGIN

namespace shunt::compress {

/// Bytes of one element of a summable form (0 for sum_form::none).
constexpr std::int64_t element_bytes(sum_form f) { return f == sum_form::f32 ? 4 : f == sum_form::none ? 0 : 2; }

namespace detail {

template <bool Half>
void combine_16_scalar(const std::uint16_t* in, std::uint16_t* inout, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
        const float a = Half ? from_f16_bits(in[i]) : from_bf16_bits(in[i]);
        const float b = Half ? from_f16_bits(inout[i]) : from_bf16_bits(inout[i]);
        inout[i] = Half ? to_f16_bits(a + b) : to_bf16_bits(a + b);
    }
}

inline void combine_f32_scalar(const float* in, float* inout, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) inout[i] += in[i];
}

#if SHUNT_COMPRESS_X86
template <bool Half>
SHUNT_TARGET_AVX2 void combine_16_avx2(const std::uint16_t* in, std::uint16_t* inout, std::int64_t n) {
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        if constexpr (Half) {
            const __m256 s = _mm256_add_ps(load8(reinterpret_cast<const f16*>(in + i)),
                                           load8(reinterpret_cast<const f16*>(inout + i)));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(inout + i),
                             _mm256_cvtps_ph(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        } else {
            const __m256 s = _mm256_add_ps(load8(reinterpret_cast<const bf16*>(in + i)),
                                           load8(reinterpret_cast<const bf16*>(inout + i)));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(inout + i), to_bf16_8(s));
        }
    }
    combine_16_scalar<Half>(in + i, inout + i, n - i);
}

/// The sum of 16 halves of each (lanes outside `m` read nothing), rounded back to 16 bits.
template <bool Half>
SHUNT_TARGET_AVX512 inline __m256i sum16(const std::uint16_t* a, const std::uint16_t* b, __mmask16 m) {
    if constexpr (Half) {
        const __m512 s =
            _mm512_add_ps(load16(reinterpret_cast<const f16*>(a), m), load16(reinterpret_cast<const f16*>(b), m));
        return _mm512_cvtps_ph(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
        const __m512 s =
            _mm512_add_ps(load16(reinterpret_cast<const bf16*>(a), m), load16(reinterpret_cast<const bf16*>(b), m));
        return to_bf16_16(s);
    }
}

template <bool Half>
SHUNT_TARGET_AVX512 void combine_16_avx512(const std::uint16_t* in, std::uint16_t* inout, std::int64_t n) {
    std::int64_t i = 0;
    for (; i + 16 <= n; i += 16)  // whole vectors unmasked, the tail masked
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(inout + i), sum16<Half>(in + i, inout + i, 0xffff));
    if (i < n) {
        const __mmask16 m = first_lanes(n - i);
        _mm256_mask_storeu_epi16(inout + i, m, sum16<Half>(in + i, inout + i, m));
    }
}

SHUNT_TARGET_AVX2 inline void combine_f32_avx2(const float* in, float* inout, std::int64_t n) {
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(inout + i, _mm256_add_ps(_mm256_loadu_ps(inout + i), _mm256_loadu_ps(in + i)));
    combine_f32_scalar(in + i, inout + i, n - i);
}

SHUNT_TARGET_AVX512 inline void combine_f32_avx512(const float* in, float* inout, std::int64_t n) {
    std::int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(inout + i, _mm512_add_ps(_mm512_loadu_ps(inout + i), _mm512_loadu_ps(in + i)));
    if (i < n) {
        const __mmask16 m = first_lanes(n - i);
        _mm512_mask_storeu_ps(inout + i, m,
                              _mm512_add_ps(_mm512_maskz_loadu_ps(m, inout + i), _mm512_maskz_loadu_ps(m, in + i)));
    }
}
#endif

}  // namespace detail

/// inout[i] = inout[i] + in[i] for `count` elements of form `f` (halves added in float and
/// rounded to nearest even; NaN and Inf as IEEE adds them). Commutative (an MPI user op may be
/// created with commute = 1). Blocking, on the calling thread; buffers may be unaligned for the
/// 16-bit forms. sum_form::none does nothing.
inline void combine(sum_form f, const void* in, void* inout, std::int64_t count, isa path = active_isa()) {
    path = usable(path);
    const auto* a16 = static_cast<const std::uint16_t*>(in);
    auto* b16 = static_cast<std::uint16_t*>(inout);
    switch (f) {
        case sum_form::none: return;
        case sum_form::f16:
#if SHUNT_COMPRESS_X86
            if (path == isa::avx512) return detail::combine_16_avx512<true>(a16, b16, count);
            if (path == isa::avx2) return detail::combine_16_avx2<true>(a16, b16, count);
#endif
            return detail::combine_16_scalar<true>(a16, b16, count);
        case sum_form::bf16:
#if SHUNT_COMPRESS_X86
            if (path == isa::avx512) return detail::combine_16_avx512<false>(a16, b16, count);
            if (path == isa::avx2) return detail::combine_16_avx2<false>(a16, b16, count);
#endif
            return detail::combine_16_scalar<false>(a16, b16, count);
        case sum_form::f32:
#if SHUNT_COMPRESS_X86
            if (path == isa::avx512)
                return detail::combine_f32_avx512(static_cast<const float*>(in), static_cast<float*>(inout), count);
            if (path == isa::avx2)
                return detail::combine_f32_avx2(static_cast<const float*>(in), static_cast<float*>(inout), count);
#endif
            return detail::combine_f32_scalar(static_cast<const float*>(in), static_cast<float*>(inout), count);
    }
}

}  // namespace shunt::compress

SHUNT_SIMD_END
