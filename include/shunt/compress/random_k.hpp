// shunt/compress/random_k.hpp: the random-k compressor: one element kept in every `stride`, at an
// index drawn from the seed, so that every rank with the same seed and step keeps the same indices
// and the compressed vectors sum directly (an allreduce of k floats). Host: scalar, AVX2, AVX-512.
//
// Element i's stratum is [i * stride, min(n, (i + 1) * stride)); the kept index is uniform over it
// (random_index in common.hpp), so the indices are distinct and ascending. The values are sent as
// they are (no rescaling by stride): use error feedback, which keeps what was not sent.
#pragma once

#include <shunt/compress/simd.hpp>

#include <cstdint>
#include <cstring>
#include <type_traits>

SHUNT_SIMD_BEGIN

namespace shunt::compress {
namespace detail {

template <class T>
void random_k_scalar(const params& p, const T* in, std::int64_t n, float* out, std::uint64_t step) {
    const std::int64_t k = kept(p, n);
    const std::uint32_t key = draw_key(p.seed, step, purpose::indices);
    for (std::int64_t i = 0; i < k; ++i) out[i] = widen(in[random_index(i, p.stride, n, key)]);
}

/// Writes or adds the k values at their indices (Add), or stores them there after zeroing the rest.
template <bool Add>
void random_k_scatter_scalar(const params& p, const float* in, std::int64_t n, float* out, std::uint64_t step) {
    const std::int64_t k = kept(p, n);
    const std::uint32_t key = draw_key(p.seed, step, purpose::indices);
    if (!Add) std::memset(out, 0, static_cast<std::size_t>(n) * 4);
    for (std::int64_t i = 0; i < k; ++i) {
        const std::int64_t j = random_index(i, p.stride, n, key);
        if (Add)
            out[j] += in[i];
        else
            out[j] = in[i];
    }
}

#if SHUNT_COMPRESS_X86
/// The indices of strata i..i+7 (all full: i + 8 <= n / stride), as 64-bit lanes in two halves.
/// draw(i, key) * stride >> 32 with 32x32->64 multiplies.
SHUNT_TARGET_AVX2 inline void random_index8(std::int64_t i, std::int64_t stride, std::uint32_t key, __m256i& lo,
                                            __m256i& hi) {
    const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(i))),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i h = _mm256_add_epi32(_mm256_mullo_epi32(idx, _mm256_set1_epi32(static_cast<int>(0x9e3779b1u))),
                                 _mm256_set1_epi32(static_cast<int>(key)));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
    h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0x85ebca6bu)));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
    h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0xc2b2ae35u)));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
    const __m256i s = _mm256_set1_epi64x(stride);
    // Even lanes (0, 2, 4, 6) and odd lanes (1, 3, 5, 7) multiplied as 64-bit products.
    const __m256i even = _mm256_srli_epi64(_mm256_mul_epu32(h, s), 32);
    const __m256i odd = _mm256_srli_epi64(_mm256_mul_epu32(_mm256_srli_epi64(h, 32), s), 32);
    // first = (i + lane) * stride
    const __m256i base_even = _mm256_mul_epu32(_mm256_setr_epi64x(0, 2, 4, 6), s);
    const __m256i base_odd = _mm256_mul_epu32(_mm256_setr_epi64x(1, 3, 5, 7), s);
    const __m256i origin = _mm256_set1_epi64x(i * stride);
    const __m256i e = _mm256_add_epi64(_mm256_add_epi64(origin, base_even), even);  // lanes 0 2 4 6
    const __m256i o = _mm256_add_epi64(_mm256_add_epi64(origin, base_odd), odd);  // lanes 1 3 5 7
    // Interleave back to lanes 0..3 and 4..7.
    const __m256i a = _mm256_unpacklo_epi64(e, o);  // 0 1 | 4 5
    const __m256i b = _mm256_unpackhi_epi64(e, o);  // 2 3 | 6 7
    lo = _mm256_permute2x128_si256(a, b, 0x20);  // 0 1 2 3
    hi = _mm256_permute2x128_si256(a, b, 0x31);  // 4 5 6 7
}

template <class T>
SHUNT_TARGET_AVX2 void random_k_avx2(const params& p, const T* in, std::int64_t n, float* out, std::uint64_t step) {
    const std::int64_t k = kept(p, n), full = n / p.stride;
    const std::uint32_t key = draw_key(p.seed, step, purpose::indices);
    std::int64_t i = 0;
    if constexpr (std::is_same_v<T, float>) {
        for (; i + 8 <= full && i + 8 <= k; i += 8) {
            __m256i lo, hi;
            random_index8(i, p.stride, key, lo, hi);
            const __m128 a = _mm256_i64gather_ps(in, lo, 4);
            const __m128 b = _mm256_i64gather_ps(in, hi, 4);
            _mm256_storeu_ps(out + i, _mm256_set_m128(b, a));
        }
    }
    for (; i < k; ++i) out[i] = widen(in[random_index(i, p.stride, n, key)]);
}

template <bool Add>
SHUNT_TARGET_AVX2 void random_k_scatter_avx2(const params& p, const float* in, std::int64_t n, float* out,
                                             std::uint64_t step) {
    // AVX2 has gathers but no scatters: the indices come eight at a time, the stores one by one.
    const std::int64_t k = kept(p, n), full = n / p.stride;
    const std::uint32_t key = draw_key(p.seed, step, purpose::indices);
    if (!Add) std::memset(out, 0, static_cast<std::size_t>(n) * 4);
    std::int64_t i = 0;
    alignas(32) std::int64_t j[8];
    for (; i + 8 <= full && i + 8 <= k; i += 8) {
        __m256i lo, hi;
        random_index8(i, p.stride, key, lo, hi);
        _mm256_store_si256(reinterpret_cast<__m256i*>(j), lo);
        _mm256_store_si256(reinterpret_cast<__m256i*>(j + 4), hi);
        for (int l = 0; l < 8; ++l) {
            if (Add)
                out[j[l]] += in[i + l];
            else
                out[j[l]] = in[i + l];
        }
    }
    for (; i < k; ++i) {
        const std::int64_t t = random_index(i, p.stride, n, key);
        if (Add)
            out[t] += in[i];
        else
            out[t] = in[i];
    }
}

/// The indices of strata i..i+15 (all full), as two vectors of eight 64-bit lanes.
SHUNT_TARGET_AVX512 inline void random_index16(std::int64_t i, std::int64_t stride, std::uint32_t key, __m512i& lo,
                                               __m512i& hi) {
    const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(i))),
                                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    __m512i h = _mm512_add_epi32(_mm512_mullo_epi32(idx, _mm512_set1_epi32(static_cast<int>(0x9e3779b1u))),
                                 _mm512_set1_epi32(static_cast<int>(key)));
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
    h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(0x85ebca6bu)));
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 13));
    h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(0xc2b2ae35u)));
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
    const __m512i s = _mm512_set1_epi64(stride);
    const __m512i h_lo = _mm512_cvtepu32_epi64(_mm512_castsi512_si256(h));
    const __m512i h_hi = _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(h, 1));
    const __m512i origin = _mm512_set1_epi64(i * stride);
    const __m512i lanes_lo = _mm512_mullo_epi64(_mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7), s);
    const __m512i lanes_hi = _mm512_mullo_epi64(_mm512_setr_epi64(8, 9, 10, 11, 12, 13, 14, 15), s);
    lo = _mm512_add_epi64(_mm512_add_epi64(origin, lanes_lo), _mm512_srli_epi64(_mm512_mul_epu32(h_lo, s), 32));
    hi = _mm512_add_epi64(_mm512_add_epi64(origin, lanes_hi), _mm512_srli_epi64(_mm512_mul_epu32(h_hi, s), 32));
}

template <class T>
SHUNT_TARGET_AVX512 void random_k_avx512(const params& p, const T* in, std::int64_t n, float* out, std::uint64_t step) {
    const std::int64_t k = kept(p, n), full = n / p.stride;
    const std::uint32_t key = draw_key(p.seed, step, purpose::indices);
    std::int64_t i = 0;
    if constexpr (std::is_same_v<T, float>) {
        for (; i + 16 <= full && i + 16 <= k; i += 16) {
            __m512i lo, hi;
            random_index16(i, p.stride, key, lo, hi);
            const __m256 a = _mm512_i64gather_ps(lo, in, 4);
            const __m256 b = _mm512_i64gather_ps(hi, in, 4);
            _mm512_storeu_ps(out + i, _mm512_insertf32x8(_mm512_castps256_ps512(a), b, 1));
        }
    }
    for (; i < k; ++i) out[i] = widen(in[random_index(i, p.stride, n, key)]);
}

#endif

}  // namespace detail

/// The kept(p, n) values of `in` at random_k's indices for (p.seed, step), into `out` (floats).
/// Every rank calling with the same seed, step, stride and n keeps the same indices. Blocking;
/// thread-safe for distinct outputs.
template <class T>
void random_k(const params& p, const T* in, std::int64_t n, float* out, std::uint64_t step = 0,
              isa path = active_isa()) {
    check_count(p, n);
    path = usable(path);
#if SHUNT_COMPRESS_X86
    if (path == isa::avx512) return detail::random_k_avx512(p, in, n, out, step);
    if (path == isa::avx2) return detail::random_k_avx2(p, in, n, out, step);
#endif
    detail::random_k_scalar(p, in, n, out, step);
}

/// The n-element vector of random_k's values (`in`, kept(p, n) floats) at their indices and
/// zeros elsewhere (Add false), or those values added to `out` (Add true).
template <bool Add>
void random_k_expand(const params& p, const float* in, std::int64_t n, float* out, std::uint64_t step = 0,
                     isa path = active_isa()) {
    check_count(p, n);
    path = usable(path);
#if SHUNT_COMPRESS_X86
    // AVX-512's scatters were slower than single stores (Zen 5): both paths take AVX2's.
    if (path >= isa::avx2) return detail::random_k_scatter_avx2<Add>(p, in, n, out, step);
#endif
    detail::random_k_scatter_scalar<Add>(p, in, n, out, step);
}

/// The indices random_k keeps of n elements for (p.seed, step), ascending (kept(p, n) of them).
inline void random_k_indices(const params& p, std::int64_t n, std::int64_t* out, std::uint64_t step = 0) {
    check_count(p, n);
    const std::uint32_t key = detail::draw_key(p.seed, step, detail::purpose::indices);
    for (std::int64_t i = 0, k = kept(p, n); i < k; ++i) out[i] = detail::random_index(i, p.stride, n, key);
}

}  // namespace shunt::compress

SHUNT_SIMD_END
