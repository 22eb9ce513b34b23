// shunt/compress/simd.hpp: the host compressors' vector units: which this CPU has (AVX2, AVX-512,
// detected once at run time as pack/host.hpp does), a ceiling that tests and benchmarks set, and
// the loads and barriers the vectorised compressors share.
#pragma once

#include <shunt/compress/common.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define SHUNT_COMPRESS_X86 1
// The instruction sets of each tier, for functions compiled for it (dispatched at run time).
#define SHUNT_TARGET_AVX2 __attribute__((target("avx2,fma,f16c,bmi,bmi2,popcnt")))
#define SHUNT_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2,popcnt")))
#else
#define SHUNT_COMPRESS_X86 0
#endif

// Around the vectorised code: GCC 12 warns ((maybe-)uninitialized) inside its own AVX-512
// intrinsics, on the undefined sources of their unmasked forms.
#if defined(__GNUC__) && !defined(__clang__)
#define SHUNT_SIMD_BEGIN                                                                       \
    _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"") \
        _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define SHUNT_SIMD_END _Pragma("GCC diagnostic pop")
#else
#define SHUNT_SIMD_BEGIN
#define SHUNT_SIMD_END
#endif

namespace shunt::compress {

/// The host code paths: the plain scalar loops (the reference every other path matches bit for
/// bit), AVX2 (with FMA and F16C) and AVX-512 (F, BW, VL, DQ).
enum class isa : std::uint8_t { scalar, avx2, avx512 };

constexpr std::string_view to_string(isa i) { return i == isa::avx512 ? "avx512" : i == isa::avx2 ? "avx2" : "scalar"; }

/// The best path this CPU supports, decided once.
inline isa cpu_isa() {
#if SHUNT_COMPRESS_X86
    static const isa best = [] {
        __builtin_cpu_init();
        // F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know it.
        unsigned a = 0, b = 0, c = 0, d = 0;
        const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
        const bool avx2 = f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt");
        const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
        return avx512 ? isa::avx512 : avx2 ? isa::avx2 : isa::scalar;
    }();
    return best;
#else
    return isa::scalar;
#endif
}

namespace detail {
/// The highest path the compressors may take (tests and benchmarks lower it); the CPU's best
/// still bounds it.
inline std::atomic<isa> isa_ceiling{isa::avx512};
}  // namespace detail

/// Lets the compressors take at most `ceiling` (for tests and benchmarks; thread-safe).
inline void set_isa_ceiling(isa ceiling) { detail::isa_ceiling.store(ceiling, std::memory_order_relaxed); }

/// `wanted` where this CPU has it, else the best it has below.
inline isa usable(isa wanted) { return std::min(wanted, cpu_isa()); }

/// The path the compressors take by default: the CPU's best under the ceiling.
inline isa active_isa() { return usable(detail::isa_ceiling.load(std::memory_order_relaxed)); }

namespace detail {

/// Keeps a product from being fused with the addition that uses it (GCC contracts a * b + c into
/// one FMA even across intrinsics): every path rounds the product first, so all agree bit for bit.
inline void keep(float& v) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    asm("" : "+x"(v));
#else
    volatile float t = v;
    v = t;
#endif
}

/// Round to nearest, ties to even, whatever the floating-point environment: |v| < 2^31.
inline float round_even(float v) {
    const std::int32_t t = static_cast<std::int32_t>(v);  // towards zero
    const float d = v - static_cast<float>(t);  // exact
    std::int32_t r = t;
    if (d > 0.5f || (d == 0.5f && (t & 1)))
        ++r;
    else if (d < -0.5f || (d == -0.5f && (t & 1)))
        --r;
    return static_cast<float>(r);
}

/// Round towards minus infinity, whatever the floating-point environment: |v| < 2^31.
inline float round_down(float v) {
    const std::int32_t t = static_cast<std::int32_t>(v);
    return static_cast<float>(v < static_cast<float>(t) ? t - 1 : t);
}

#if SHUNT_COMPRESS_X86
SHUNT_TARGET_AVX2 inline void keep(__m256& v) { asm("" : "+x"(v)); }
SHUNT_TARGET_AVX512 inline void keep(__m512& v) { asm("" : "+v"(v)); }

/// 8 elements from p as floats (exact).
SHUNT_TARGET_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
SHUNT_TARGET_AVX2 inline __m256 load8(const f16* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
SHUNT_TARGET_AVX2 inline __m256 load8(const bf16* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/// 16 elements from p as floats (exact); lanes outside `m` read nothing and are 0.
SHUNT_TARGET_AVX512 inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
SHUNT_TARGET_AVX512 inline __m512 load16(const f16* p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}
SHUNT_TARGET_AVX512 inline __m512 load16(const bf16* p, __mmask16 m) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
SHUNT_TARGET_AVX512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
SHUNT_TARGET_AVX512 inline __m512 load16(const f16* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
SHUNT_TARGET_AVX512 inline __m512 load16(const bf16* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/// The mask of the first `count` lanes of 16 (count at most 16).
SHUNT_TARGET_AVX512 inline __mmask16 first_lanes(std::int64_t count) {
    return count >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << count) - 1u);
}

/// The horizontal max of 8 unsigned 32-bit lanes.
SHUNT_TARGET_AVX2 inline std::uint32_t max_u32(__m256i v) {
    __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1));
    return static_cast<std::uint32_t>(_mm_cvtsi128_si32(m));
}
#endif

}  // namespace detail
}  // namespace shunt::compress
