// shunt/compress/quantize.hpp: the INT8 and INT4 compressors: block-wise symmetric quantisation with
// one float scale per block (ZeRO++/CGX style), nearest or stochastic rounding, on the host (scalar,
// AVX2, AVX-512), the same codes and scales on every path.
//
// Per block: amax = the largest |x|; scale = amax / Q (Q = 127 for int8, 7 for int4); code =
// round(x * (Q / amax)) in [-Q, Q]; x is decompressed as code * scale. A block of zeros has scale 0;
// a block holding NaN or Inf has a NaN scale, so that all of it decompresses to NaN (never to a
// wrong finite value; the caller's guard sees it). Blocks whose amax is below 2^-60 are scaled by
// 2^64 first (exactly), so that subnormal inputs keep their precision.
#pragma once

#include <shunt/compress/simd.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>

SHUNT_SIMD_BEGIN

namespace shunt::compress {
namespace detail {

/// The code of one value: v = x * pre * inv rounded (nearest even, or down after adding the
/// draw u), clamped to [-q, q].
inline int code_of(float x, const block_scale& s, int q, bool stochastic, float u) {
    float v = x * s.pre;
    keep(v);
    v = v * s.inv;
    keep(v);
    float r;
    if (stochastic) {
        float w = v + u;
        keep(w);
        r = round_down(w);
    } else {
        r = round_even(v);
    }
    r = r < static_cast<float>(-q) ? static_cast<float>(-q) : r > static_cast<float>(q) ? static_cast<float>(q) : r;
    return static_cast<int>(r);
}

/// Stores the code of element i of the stream (int8: a byte; int4: a nibble, as code + 8).
template <int Q>
inline void put_code(std::byte* codes, std::int64_t i, int c) {
    if constexpr (Q == 127) {
        codes[i] = static_cast<std::byte>(static_cast<std::int8_t>(c));
    } else {
        auto& b = reinterpret_cast<std::uint8_t&>(codes[i / 2]);
        const auto nib = static_cast<std::uint8_t>(c + 8);
        b = (i & 1) ? static_cast<std::uint8_t>((b & 0x0f) | (nib << 4)) : static_cast<std::uint8_t>((b & 0xf0) | nib);
    }
}

template <int Q>
inline int get_code(const std::byte* codes, std::int64_t i) {
    if constexpr (Q == 127) {
        return static_cast<std::int8_t>(codes[i]);
    } else {
        const auto b = static_cast<std::uint8_t>(codes[i / 2]);
        return static_cast<int>((i & 1) ? (b >> 4) : (b & 0x0f)) - 8;
    }
}

/// The scalar reference of quantisation, block by block.
template <int Q, class T>
void quantize_scalar(const params& p, const T* in, std::int64_t n, std::byte* out, std::uint64_t step) {
    const std::int64_t nb = blocks(p, n);
    std::byte* codes = out + 4 * nb;
    if (Q == 7 && (n & 1)) codes[n / 2] = std::byte{0x80};  // the unused nibble: code 0
    const bool stochastic = p.round == rounding::stochastic;
    const std::uint32_t key = draw_key(p.seed, step, purpose::rounding);
    for (std::int64_t b = 0; b < nb; ++b) {
        const std::int64_t first = b * p.block, last = first + p.block < n ? first + p.block : n;
        std::uint32_t amax = 0;
        for (std::int64_t i = first; i < last; ++i) {
            const std::uint32_t a = bits_of(widen(in[i])) & 0x7fffffffu;
            amax = a > amax ? a : amax;
        }
        const block_scale s = scale_of(amax, Q);
        std::memcpy(out + 4 * b, &s.scale, 4);
        for (std::int64_t i = first; i < last; ++i) {
            const float u = stochastic ? unit_draw(draw(static_cast<std::uint32_t>(i), key)) : 0.0f;
            put_code<Q>(codes, i, s.inv == 0 ? 0 : code_of(widen(in[i]), s, Q, stochastic, u));
        }
    }
}

/// The scalar reference of decompression: out[i] = code * scale (Add: out[i] += code * scale,
/// the product rounded first).
template <int Q, bool Add>
void dequantize_scalar(const params& p, const std::byte* in, std::int64_t n, float* out) {
    const std::int64_t nb = blocks(p, n);
    const std::byte* codes = in + 4 * nb;
    for (std::int64_t b = 0; b < nb; ++b) {
        float scale;
        std::memcpy(&scale, in + 4 * b, 4);
        const std::int64_t first = b * p.block, last = first + p.block < n ? first + p.block : n;
        for (std::int64_t i = first; i < last; ++i) {
            float x = static_cast<float>(get_code<Q>(codes, i)) * scale;
            if (Add) {
                keep(x);
                out[i] += x;
            } else {
                out[i] = x;
            }
        }
    }
}

#if SHUNT_COMPRESS_X86

/// The codes of 8 values as int32 lanes; `idx` the elements' stream indices (stochastic draws).
SHUNT_TARGET_AVX2 inline __m256i codes8(__m256 x, const block_scale& s, int q, bool stochastic, __m256i idx,
                                        std::uint32_t key) {
    __m256 v = _mm256_mul_ps(x, _mm256_set1_ps(s.pre));
    keep(v);
    v = _mm256_mul_ps(v, _mm256_set1_ps(s.inv));
    keep(v);
    __m256 r;
    if (stochastic) {
        // draw(i, key) lane by lane, as in common.hpp
        __m256i h = _mm256_add_epi32(_mm256_mullo_epi32(idx, _mm256_set1_epi32(static_cast<int>(0x9e3779b1u))),
                                     _mm256_set1_epi32(static_cast<int>(key)));
        h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
        h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0x85ebca6bu)));
        h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
        h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0xc2b2ae35u)));
        h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
        const __m256 u =
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(h, 8)), _mm256_set1_ps(5.9604644775390625e-8f));
        __m256 w = _mm256_add_ps(v, u);
        keep(w);
        r = _mm256_round_ps(w, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    } else {
        r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(static_cast<float>(-q))), _mm256_set1_ps(static_cast<float>(q)));
    return _mm256_cvttps_epi32(r);
}

template <int Q, class T>
SHUNT_TARGET_AVX2 void quantize_avx2(const params& p, const T* in, std::int64_t n, std::byte* out, std::uint64_t step) {
    const std::int64_t nb = blocks(p, n);
    std::byte* codes = out + 4 * nb;
    if (Q == 7 && (n & 1)) codes[n / 2] = std::byte{0x80};
    const bool stochastic = p.round == rounding::stochastic;
    const std::uint32_t key = draw_key(p.seed, step, purpose::rounding);
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (std::int64_t b = 0; b < nb; ++b) {
        const std::int64_t first = b * p.block, last = first + p.block < n ? first + p.block : n;
        __m256i amax8 = _mm256_setzero_si256();
        const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
        std::int64_t i = first;
        for (; i + 8 <= last; i += 8)
            amax8 = _mm256_max_epu32(amax8, _mm256_and_si256(_mm256_castps_si256(load8(in + i)), abs_mask));
        std::uint32_t amax = max_u32(amax8);
        for (; i < last; ++i) {
            const std::uint32_t a = bits_of(widen(in[i])) & 0x7fffffffu;
            amax = a > amax ? a : amax;
        }
        const block_scale s = scale_of(amax, Q);
        std::memcpy(out + 4 * b, &s.scale, 4);
        if (s.inv == 0) {  // zero or non-finite block: every code 0
            if (Q == 127)
                std::memset(codes + first, 0, static_cast<std::size_t>(last - first));
            else
                std::memset(codes + first / 2, 0x88, static_cast<std::size_t>((last - first) / 2));
            if (Q == 7 && ((last - first) & 1)) put_code<Q>(codes, last - 1, 0);
            continue;
        }
        i = first;
        for (; i + 8 <= last; i += 8) {
            const __m256i idx =
                _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(i))), iota);
            const __m256i c = codes8(load8(in + i), s, Q, stochastic, idx, key);
            // 8 int32 codes to 8 bytes: pack to 16 bits, then to 8.
            const __m128i c16 = _mm_packs_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
            if constexpr (Q == 127) {
                const __m128i c8 = _mm_packs_epi16(c16, c16);
                _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i), c8);
            } else {
                // nibbles: (even + 8) | (odd + 8) << 4, four bytes
                const __m128i biased = _mm_add_epi16(c16, _mm_set1_epi16(8));
                const __m128i lo = _mm_and_si128(biased, _mm_set1_epi32(0xffff));
                const __m128i hi = _mm_srli_epi32(biased, 16);
                const __m128i pair = _mm_or_si128(lo, _mm_slli_epi32(hi, 4));  // 4 x 32-bit, each < 256
                const __m128i b8 = _mm_packus_epi16(_mm_packs_epi32(pair, pair), _mm_setzero_si128());
                const int four = _mm_cvtsi128_si32(b8);
                std::memcpy(codes + i / 2, &four, 4);
            }
        }
        for (; i < last; ++i) {
            const float u = stochastic ? unit_draw(draw(static_cast<std::uint32_t>(i), key)) : 0.0f;
            put_code<Q>(codes, i, code_of(widen(in[i]), s, Q, stochastic, u));
        }
    }
}

template <int Q, bool Add>
SHUNT_TARGET_AVX2 void dequantize_avx2(const params& p, const std::byte* in, std::int64_t n, float* out) {
    const std::int64_t nb = blocks(p, n);
    const std::byte* codes = in + 4 * nb;
    for (std::int64_t b = 0; b < nb; ++b) {
        float scale;
        std::memcpy(&scale, in + 4 * b, 4);
        const __m256 sv = _mm256_set1_ps(scale);
        const std::int64_t first = b * p.block, last = first + p.block < n ? first + p.block : n;
        std::int64_t i = first;
        for (; i + 8 <= last; i += 8) {
            __m256i c;
            if constexpr (Q == 127) {
                c = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)));
            } else {
                std::int32_t four;
                std::memcpy(&four, codes + i / 2, 4);
                const __m128i b8 = _mm_cvtsi32_si128(four);
                const __m128i lo = _mm_and_si128(b8, _mm_set1_epi8(0x0f));
                const __m128i hi = _mm_and_si128(_mm_srli_epi16(b8, 4), _mm_set1_epi8(0x0f));
                const __m128i nib = _mm_unpacklo_epi8(lo, hi);  // element order
                c = _mm256_sub_epi32(_mm256_cvtepu8_epi32(nib), _mm256_set1_epi32(8));
            }
            __m256 x = _mm256_mul_ps(_mm256_cvtepi32_ps(c), sv);
            if (Add) {
                keep(x);
                x = _mm256_add_ps(_mm256_loadu_ps(out + i), x);
            }
            _mm256_storeu_ps(out + i, x);
        }
        for (; i < last; ++i) {
            float x = static_cast<float>(get_code<Q>(codes, i)) * scale;
            if (Add) {
                keep(x);
                out[i] += x;
            } else {
                out[i] = x;
            }
        }
    }
}

SHUNT_TARGET_AVX512 inline __m512i codes16(__m512 x, const block_scale& s, int q, bool stochastic, __m512i idx,
                                           std::uint32_t key) {
    __m512 v = _mm512_mul_ps(x, _mm512_set1_ps(s.pre));
    keep(v);
    v = _mm512_mul_ps(v, _mm512_set1_ps(s.inv));
    keep(v);
    __m512 r;
    if (stochastic) {
        __m512i h = _mm512_add_epi32(_mm512_mullo_epi32(idx, _mm512_set1_epi32(static_cast<int>(0x9e3779b1u))),
                                     _mm512_set1_epi32(static_cast<int>(key)));
        h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
        h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(0x85ebca6bu)));
        h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 13));
        h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(0xc2b2ae35u)));
        h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
        const __m512 u =
            _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(h, 8)), _mm512_set1_ps(5.9604644775390625e-8f));
        __m512 w = _mm512_add_ps(v, u);
        keep(w);
        r = _mm512_roundscale_ps(w, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    } else {
        r = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(static_cast<float>(-q))), _mm512_set1_ps(static_cast<float>(q)));
    return _mm512_cvttps_epi32(r);
}

/// Stores the codes of elements i..i+count-1 (count at most 16; i even): int8 bytes, or int4
/// nibble pairs ((even + 8) | (odd + 8) << 4).
template <int Q>
SHUNT_TARGET_AVX512 inline void store_codes16(std::byte* codes, std::int64_t i, __m512i c, std::int64_t count) {
    if constexpr (Q == 127) {
        const __m128i b = _mm512_cvtepi32_epi8(c);
        if (count == 16)
            _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), b);
        else
            _mm_mask_storeu_epi8(codes + i, first_lanes(count), b);
    } else {
        // 16 bytes as 16-bit pairs (even | odd << 8), to (even | odd << 4), packed to 8 bytes.
        const __m128i b16 = _mm512_cvtepi32_epi8(_mm512_add_epi32(c, _mm512_set1_epi32(8)));
        const __m128i lo = _mm_and_si128(b16, _mm_set1_epi16(0x00ff));
        const __m128i hi = _mm_srli_epi16(b16, 8);
        const __m128i pairs = _mm_packus_epi16(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_setzero_si128());
        if (count == 16)
            _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i / 2), pairs);
        else
            _mm_mask_storeu_epi8(codes + i / 2, first_lanes((count + 1) / 2), pairs);
    }
}

/// The codes of elements i..i+count-1 as int32 lanes (lanes past count 0 for int8, -8 for int4).
template <int Q>
SHUNT_TARGET_AVX512 inline __m512i load_codes16(const std::byte* codes, std::int64_t i, std::int64_t count) {
    if constexpr (Q == 127) {
        return _mm512_cvtepi8_epi32(count == 16 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i))
                                                : _mm_maskz_loadu_epi8(first_lanes(count), codes + i));
    } else {
        const __m128i b8 = count == 16 ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i / 2))
                                       : _mm_maskz_loadu_epi8(first_lanes((count + 1) / 2), codes + i / 2);
        const __m128i lo = _mm_and_si128(b8, _mm_set1_epi8(0x0f));
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(b8, 4), _mm_set1_epi8(0x0f));
        return _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)), _mm512_set1_epi32(8));
    }
}

template <int Q, class T>
SHUNT_TARGET_AVX512 void quantize_avx512(const params& p, const T* in, std::int64_t n, std::byte* out,
                                         std::uint64_t step) {
    const std::int64_t nb = blocks(p, n);
    std::byte* codes = out + 4 * nb;
    if (Q == 7 && (n & 1)) codes[n / 2] = std::byte{0x80};
    const bool stochastic = p.round == rounding::stochastic;
    const std::uint32_t key = draw_key(p.seed, step, purpose::rounding);
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    for (std::int64_t b = 0; b < nb; ++b) {
        const std::int64_t first = b * p.block, last = first + p.block < n ? first + p.block : n;
        __m512i amax16 = _mm512_setzero_si512();
        std::int64_t i = first;
        for (; i + 16 <= last; i += 16)
            amax16 = _mm512_max_epu32(amax16, _mm512_and_si512(_mm512_castps_si512(load16(in + i)), abs_mask));
        if (i < last)
            amax16 = _mm512_max_epu32(
                amax16, _mm512_and_si512(_mm512_castps_si512(load16(in + i, first_lanes(last - i))), abs_mask));
        const block_scale s = scale_of(_mm512_reduce_max_epu32(amax16), Q);
        std::memcpy(out + 4 * b, &s.scale, 4);
        if (s.inv == 0) {
            if (Q == 127)
                std::memset(codes + first, 0, static_cast<std::size_t>(last - first));
            else
                std::memset(codes + first / 2, 0x88, static_cast<std::size_t>((last - first) / 2));
            if (Q == 7 && ((last - first) & 1)) put_code<Q>(codes, last - 1, 0);
            continue;
        }
        for (i = first; i + 16 <= last; i += 16) {
            const __m512i idx =
                _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(i))), iota);
            store_codes16<Q>(codes, i, codes16(load16(in + i), s, Q, stochastic, idx, key), 16);
        }
        if (i < last) {
            const __m512i idx =
                _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(i))), iota);
            store_codes16<Q>(codes, i, codes16(load16(in + i, first_lanes(last - i)), s, Q, stochastic, idx, key),
                             last - i);
        }
    }
}

template <int Q, bool Add>
SHUNT_TARGET_AVX512 void dequantize_avx512(const params& p, const std::byte* in, std::int64_t n, float* out) {
    const std::int64_t nb = blocks(p, n);
    const std::byte* codes = in + 4 * nb;
    for (std::int64_t b = 0; b < nb; ++b) {
        float scale;
        std::memcpy(&scale, in + 4 * b, 4);
        const __m512 sv = _mm512_set1_ps(scale);
        const std::int64_t first = b * p.block, last = first + p.block < n ? first + p.block : n;
        std::int64_t i = first;
        for (; i + 16 <= last; i += 16) {
            __m512 x = _mm512_mul_ps(_mm512_cvtepi32_ps(load_codes16<Q>(codes, i, 16)), sv);
            if (Add) {
                keep(x);
                x = _mm512_add_ps(_mm512_loadu_ps(out + i), x);
            }
            _mm512_storeu_ps(out + i, x);
        }
        if (i < last) {
            const __mmask16 m = first_lanes(last - i);
            __m512 x = _mm512_mul_ps(_mm512_cvtepi32_ps(load_codes16<Q>(codes, i, last - i)), sv);
            if (Add) {
                keep(x);
                x = _mm512_add_ps(_mm512_maskz_loadu_ps(m, out + i), x);
            }
            _mm512_mask_storeu_ps(out + i, m, x);
        }
    }
}
#endif

template <int Q, class T>
void quantize(const params& p, const T* in, std::int64_t n, std::byte* out, std::uint64_t step, isa path) {
#if SHUNT_COMPRESS_X86
    if (path == isa::avx512) return quantize_avx512<Q>(p, in, n, out, step);
    if (path == isa::avx2) return quantize_avx2<Q>(p, in, n, out, step);
#endif
    (void)path;
    quantize_scalar<Q>(p, in, n, out, step);
}

template <int Q, bool Add>
void dequantize(const params& p, const std::byte* in, std::int64_t n, float* out, isa path) {
#if SHUNT_COMPRESS_X86
    if (path == isa::avx512) return dequantize_avx512<Q, Add>(p, in, n, out);
    if (path == isa::avx2) return dequantize_avx2<Q, Add>(p, in, n, out);
#endif
    (void)path;
    dequantize_scalar<Q, Add>(p, in, n, out);
}

}  // namespace detail

/// Quantises n elements (float, f16 or bf16) into compressed_bytes(p, n) bytes at `out`: p.kind
/// int8 or int4, p.block elements per scale, p.round nearest or stochastic (draws from p.seed and
/// `step`, the caller's call number). Blocking, on the calling thread; thread-safe for distinct
/// outputs. Throws shunt::error for other methods or invalid parameters.
template <class T>
void quantize(const params& p, const T* in, std::int64_t n, std::byte* out, std::uint64_t step = 0,
              isa path = active_isa()) {
    check_count(p, n);
    if (p.kind == method::int8)
        detail::quantize<127>(p, in, n, out, step, usable(path));
    else if (p.kind == method::int4)
        detail::quantize<7>(p, in, n, out, step, usable(path));
    else
        throw error("compress::quantize: " + std::string(to_string(p.kind)) + " is not int8 or int4");
}

/// out[i] = code_i * scale of its block, for the n elements that `in` holds.
inline void dequantize(const params& p, const std::byte* in, std::int64_t n, float* out, isa path = active_isa()) {
    check_count(p, n);
    if (p.kind == method::int8)
        detail::dequantize<127, false>(p, in, n, out, usable(path));
    else if (p.kind == method::int4)
        detail::dequantize<7, false>(p, in, n, out, usable(path));
    else
        throw error("compress::dequantize: " + std::string(to_string(p.kind)) + " is not int8 or int4");
}

/// acc[i] += code_i * scale (the product rounded, then added).
inline void dequantize_accumulate(const params& p, const std::byte* in, std::int64_t n, float* acc,
                                  isa path = active_isa()) {
    check_count(p, n);
    if (p.kind == method::int8)
        detail::dequantize<127, true>(p, in, n, acc, usable(path));
    else if (p.kind == method::int4)
        detail::dequantize<7, true>(p, in, n, acc, usable(path));
    else
        throw error("compress::dequantize_accumulate: " + std::string(to_string(p.kind)) + " is not int8 or int4");
}

}  // namespace shunt::compress

SHUNT_SIMD_END
