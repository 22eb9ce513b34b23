// shunt/compress/top_k.hpp: the top-k compressor: the k = ceil(n / stride) elements of largest
// magnitude with their indices, for an allgather of compressed parts; exact selection by radix
// select on the magnitudes' bits (ties to the lower index), on the host (scalar, AVX2, AVX-512).
//
// Magnitudes compare as the bits of |x| (NaN above Inf above every finite value), so the choice
// is exact and the same on every path and on the device. The compressed form holds the k indices
// (32-bit, ascending) and then the k values as they were (float).
#pragma once

#include <shunt/compress/simd.hpp>

#include <array>
#include <cstdint>
#include <cstring>

SHUNT_SIMD_BEGIN

namespace shunt::compress {
namespace detail {

/// Which elements top_k keeps: those whose key >> shift is above `prefix`, and the first `need`
/// (in index order) of those whose key >> shift equals it.
struct top_k_cut {
    int shift = 0;
    std::uint32_t prefix = 0;
    std::int64_t need = 0;
    bool operator==(const top_k_cut&) const = default;
};

/// The radix rounds: round r histograms bits [shift, shift + width) of the keys whose higher
/// bits equal the prefix found so far. Keys are below 2^31, so 11 + 10 + 10 bits.
inline constexpr int top_k_shifts[3] = {20, 10, 0};
inline constexpr std::uint32_t top_k_bins[3] = {2048, 1024, 1024};

template <class T>
inline std::uint32_t key_of(T x) {
    return bits_of(widen(x)) & 0x7fffffffu;
}

/// From a round's histogram: the bin holding the remaining'th largest key, and how many keys lie
/// in the bins above it (subtracted from `remaining`).
inline std::uint32_t pick_bin(const std::int64_t* h, std::uint32_t bins, std::int64_t& remaining) {
    for (std::uint32_t b = bins; b-- > 0;) {
        if (h[b] >= remaining) return b;
        remaining -= h[b];
    }
    return 0;  // not reached: the histogram holds at least `remaining` keys
}

/// Round r's histogram of keys matching `prefix` (every key in round 0): the plain loop.
template <class T>
void top_k_histogram_scalar(const T* in, std::int64_t n, int r, std::uint32_t prefix, std::int64_t* h) {
    const int shift = top_k_shifts[r];
    const std::uint32_t mask = top_k_bins[r] - 1;
    for (std::int64_t i = 0; i < n; ++i) {
        const std::uint32_t k = key_of(in[i]);
        if (r == 0 || (k >> (shift + 10)) == prefix) ++h[(k >> shift) & mask];
    }
}

#if SHUNT_COMPRESS_X86
/// Round r's histogram with AVX2: keys eight at a time; round 0 counts into four histograms in
/// turn (no store-to-load chain on a popular bin), later rounds count only the matching lanes.
template <class T>
SHUNT_TARGET_AVX2 void top_k_histogram_avx2(const T* in, std::int64_t n, int r, std::uint32_t prefix, std::int64_t* h) {
    const int shift = top_k_shifts[r];
    const std::uint32_t mask = top_k_bins[r] - 1;
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    std::int64_t i = 0;
    if (r == 0 && n >= 8192) {
        // Four 32-bit histograms on the stack (none is given more than n / 4 < 2^30 keys), no allocation.
        std::uint32_t hs[4][2048] = {};
        alignas(32) std::uint32_t b[8];
        for (; i + 8 <= n; i += 8) {
            const __m256i k = _mm256_and_si256(_mm256_castps_si256(load8(in + i)), abs_mask);
            _mm256_store_si256(reinterpret_cast<__m256i*>(b), _mm256_srli_epi32(k, 20));
            for (int l = 0; l < 8; ++l) ++hs[l & 3][b[l]];
        }
        for (int j = 0; j < 4; ++j)
            for (std::uint32_t x = 0; x < 2048; ++x) h[x] += hs[j][x];
    } else if (r > 0) {
        const __m256i want = _mm256_set1_epi32(static_cast<int>(prefix));
        alignas(32) std::uint32_t kk[8];
        for (; i + 8 <= n; i += 8) {
            const __m256i k = _mm256_and_si256(_mm256_castps_si256(load8(in + i)), abs_mask);
            const __m256i hit = _mm256_cmpeq_epi32(_mm256_srli_epi32(k, shift + 10), want);
            unsigned m = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(hit)));
            if (!m) continue;
            _mm256_store_si256(reinterpret_cast<__m256i*>(kk), k);
            for (; m; m &= m - 1) ++h[(kk[__builtin_ctz(m)] >> shift) & mask];
        }
    }
    top_k_histogram_scalar(in + i, n - i, r, prefix, h);
}

template <class T>
SHUNT_TARGET_AVX512 void top_k_histogram_avx512(const T* in, std::int64_t n, int r, std::uint32_t prefix,
                                                std::int64_t* h) {
    const int shift = top_k_shifts[r];
    const std::uint32_t mask = top_k_bins[r] - 1;
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    std::int64_t i = 0;
    if (r == 0 && n >= 8192) {
        // Four 32-bit histograms on the stack (none is given more than n / 4 < 2^30 keys), no allocation.
        std::uint32_t hs[4][2048] = {};
        alignas(64) std::uint32_t b[16];
        for (; i + 16 <= n; i += 16) {
            const __m512i k = _mm512_and_si512(_mm512_castps_si512(load16(in + i)), abs_mask);
            _mm512_store_si512(b, _mm512_srli_epi32(k, 20));
            for (int l = 0; l < 16; ++l) ++hs[l & 3][b[l]];
        }
        for (int j = 0; j < 4; ++j)
            for (std::uint32_t x = 0; x < 2048; ++x) h[x] += hs[j][x];
    } else if (r > 0) {
        const __m512i want = _mm512_set1_epi32(static_cast<int>(prefix));
        alignas(64) std::uint32_t kk[16];
        for (; i + 16 <= n; i += 16) {
            const __m512i k = _mm512_and_si512(_mm512_castps_si512(load16(in + i)), abs_mask);
            unsigned m = _mm512_cmpeq_epu32_mask(_mm512_srli_epi32(k, shift + 10), want);
            if (!m) continue;
            _mm512_store_si512(kk, k);
            for (; m; m &= m - 1) ++h[(kk[__builtin_ctz(m)] >> shift) & mask];
        }
    }
    top_k_histogram_scalar(in + i, n - i, r, prefix, h);
}
#endif

/// The cut that keeps the k largest keys of n (1 <= k <= n): up to three radix rounds, stopping
/// early when the chosen bin is taken whole.
template <class T>
top_k_cut find_cut(const T* in, std::int64_t n, std::int64_t k, isa path) {
    std::array<std::int64_t, 2048> h;
    top_k_cut cut;
    std::int64_t remaining = k;
    for (int r = 0; r < 3; ++r) {
        h.fill(0);
#if SHUNT_COMPRESS_X86
        if (path == isa::avx512)
            top_k_histogram_avx512(in, n, r, cut.prefix, h.data());
        else if (path == isa::avx2)
            top_k_histogram_avx2(in, n, r, cut.prefix, h.data());
        else
#endif
            top_k_histogram_scalar(in, n, r, cut.prefix, h.data());
        const std::uint32_t b = pick_bin(h.data(), top_k_bins[r], remaining);
        cut.prefix = r == 0 ? b : (cut.prefix << 10) | b;
        cut.shift = top_k_shifts[r];
        cut.need = remaining;
        if (h[b] == remaining) break;
    }
    (void)path;
    return cut;
}

template <class T>
void top_k_select_scalar(const T* in, std::int64_t n, const top_k_cut& cut, std::byte* out, std::int64_t k) {
    std::byte* values = out + 4 * k;
    std::int64_t taken = 0, o = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        const std::uint32_t kk = key_of(in[i]) >> cut.shift;
        bool keep_it = kk > cut.prefix;
        if (kk == cut.prefix && taken < cut.need) keep_it = true, ++taken;
        if (!keep_it) continue;
        const auto idx = static_cast<std::uint32_t>(i);
        const float v = widen(in[i]);
        std::memcpy(out + 4 * o, &idx, 4);
        std::memcpy(values + 4 * o, &v, 4);
        ++o;
    }
}

#if SHUNT_COMPRESS_X86
/// The 8-lane left-packing permutations of AVX2: for each mask, the lanes set, in order.
struct compact_table {
    alignas(32) std::array<std::array<std::uint32_t, 8>, 256> perm{};
    constexpr compact_table() {
        for (unsigned m = 0; m < 256; ++m) {
            unsigned o = 0;
            for (unsigned l = 0; l < 8; ++l)
                if (m & (1u << l)) perm[m][o++] = l;
        }
    }
};
inline constexpr compact_table compact_lanes{};

template <class T>
SHUNT_TARGET_AVX2 void top_k_select_avx2(const T* in, std::int64_t n, const top_k_cut& cut, std::byte* out,
                                         std::int64_t k) {
    std::byte* values = out + 4 * k;
    std::int64_t taken = 0, o = 0, i = 0;
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    // Unsigned compares of keys below 2^31: signed compares give the same order.
    const __m256i p = _mm256_set1_epi32(static_cast<int>(cut.prefix));
    const __m128i sh = _mm_cvtsi32_si128(cut.shift);
    for (; i + 8 <= n && o + 8 <= k; i += 8) {
        const __m256 x = load8(in + i);
        const __m256i kk = _mm256_srl_epi32(_mm256_and_si256(_mm256_castps_si256(x), abs_mask), sh);
        unsigned gt = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(kk, p))));
        unsigned eq = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(kk, p))));
        if (eq) {
            const std::int64_t allowed = cut.need - taken;
            const int c = __builtin_popcount(eq);
            if (c > allowed) eq = _pdep_u32((1u << allowed) - 1u, eq);
            taken += __builtin_popcount(eq);
        }
        const unsigned sel = gt | eq;
        if (!sel) continue;
        const __m256i perm = _mm256_load_si256(reinterpret_cast<const __m256i*>(compact_lanes.perm[sel].data()));
        const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(i))),
                                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        // Writes 8 lanes: room is left by o + 8 <= k; the lanes past the kept ones are rewritten.
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 4 * o), _mm256_permutevar8x32_epi32(idx, perm));
        _mm256_storeu_ps(reinterpret_cast<float*>(values + 4 * o), _mm256_permutevar8x32_ps(x, perm));
        o += __builtin_popcount(sel);
    }
    // The rest, one by one, with the state reached.
    for (; i < n && o < k; ++i) {
        const std::uint32_t kk = key_of(in[i]) >> cut.shift;
        bool keep_it = kk > cut.prefix;
        if (kk == cut.prefix && taken < cut.need) keep_it = true, ++taken;
        if (!keep_it) continue;
        const auto idx = static_cast<std::uint32_t>(i);
        const float v = widen(in[i]);
        std::memcpy(out + 4 * o, &idx, 4);
        std::memcpy(values + 4 * o, &v, 4);
        ++o;
    }
}

template <class T>
SHUNT_TARGET_AVX512 void top_k_select_avx512(const T* in, std::int64_t n, const top_k_cut& cut, std::byte* out,
                                             std::int64_t k) {
    std::byte* values = out + 4 * k;
    std::int64_t taken = 0, o = 0;
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    const __m512i p = _mm512_set1_epi32(static_cast<int>(cut.prefix));
    const __m128i sh = _mm_cvtsi32_si128(cut.shift);
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (std::int64_t i = 0; i < n && o < k; i += 16) {
        const __mmask16 m = first_lanes(n - i);
        const __m512 x = load16(in + i, m);
        const __m512i kk = _mm512_srl_epi32(_mm512_and_si512(_mm512_castps_si512(x), abs_mask), sh);
        const unsigned gt = _mm512_mask_cmpgt_epu32_mask(m, kk, p);
        unsigned eq = _mm512_mask_cmpeq_epu32_mask(m, kk, p);
        if (eq) {
            const std::int64_t allowed = cut.need - taken;
            if (__builtin_popcount(eq) > allowed) eq = _pdep_u32((1u << allowed) - 1u, eq);
            taken += __builtin_popcount(eq);
        }
        const auto sel = static_cast<__mmask16>(gt | eq);
        if (!sel) continue;
        const int c = __builtin_popcount(sel);
        const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(i))), iota);
        // Compress into a register, then a masked store of the c lanes (stores outside the mask
        // touch nothing, so the output needs no room beyond k).
        _mm512_mask_storeu_epi32(out + 4 * o, first_lanes(c), _mm512_maskz_compress_epi32(sel, idx));
        _mm512_mask_storeu_ps(values + 4 * o, first_lanes(c), _mm512_maskz_compress_ps(sel, x));
        o += c;
    }
}
#endif

/// Writes the k values of `in` (top_k's form: indices then values) at their indices into `out`
/// (n floats): added (Add), or stored after zeroing the rest.
template <bool Add>
void top_k_expand_scalar(const std::byte* in, std::int64_t n, std::int64_t k, float* out) {
    if (!Add) std::memset(out, 0, static_cast<std::size_t>(n) * 4);
    const std::byte* values = in + 4 * k;
    for (std::int64_t i = 0; i < k; ++i) {
        std::uint32_t idx;
        float v;
        std::memcpy(&idx, in + 4 * i, 4);
        std::memcpy(&v, values + 4 * i, 4);
        if (idx >= static_cast<std::uint64_t>(n)) continue;  // a corrupt index writes nothing
        if (Add)
            out[idx] += v;
        else
            out[idx] = v;
    }
}

}  // namespace detail

/// The k = kept(p, n) elements of `in` of largest magnitude (ties to the lower index; NaN above
/// Inf), as compressed_bytes(p, n) bytes at `out` (4-byte aligned): their indices, ascending,
/// then their values. Blocking, on the calling thread; thread-safe for distinct outputs.
template <class T>
void top_k(const params& p, const T* in, std::int64_t n, std::byte* out, isa path = active_isa()) {
    check_count(p, n);
    const std::int64_t k = kept(p, n);
    if (k == 0) return;
    path = usable(path);
    const detail::top_k_cut cut = detail::find_cut(in, n, k, path);
#if SHUNT_COMPRESS_X86
    if (path == isa::avx512) return detail::top_k_select_avx512(in, n, cut, out, k);
    if (path == isa::avx2) return detail::top_k_select_avx2(in, n, cut, out, k);
#endif
    detail::top_k_select_scalar(in, n, cut, out, k);
}

/// The n-element vector of a top_k form (zeros where nothing was kept), or (Add) its values added
/// to `out`. Indices at or beyond n (a corrupt form) are skipped.
template <bool Add>
void top_k_expand(const params& p, const std::byte* in, std::int64_t n, float* out, isa path = active_isa()) {
    check_count(p, n);
    // One path: k scattered stores, where AVX-512's scatters were slower (Zen 5).
    (void)path;
    detail::top_k_expand_scalar<Add>(in, n, kept(p, n), out);
}

}  // namespace shunt::compress

SHUNT_SIMD_END
