// shunt/compress/common.hpp: what every gradient compressor shares: the methods and their parameters,
// the compressed formats' sizes, how a compressed form sums, and the exact scalar conversions and
// hashes that the host and device versions both use (so that they agree bit for bit).
#pragma once

#include <shunt/errors.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#if defined(__CUDACC__)
#define SHUNT_HOST_DEVICE __host__ __device__
#else
#define SHUNT_HOST_DEVICE
#endif

namespace shunt::compress {

/// A compressor. Every one maps n input elements to compressed_bytes(p, n) bytes, the same on
/// every rank for the same parameters and n (no header: the receiver knows both).
///   fp16, bf16  IEEE binary16 / bfloat16 casts, round to nearest even (2 bytes an element)
///   int8, int4  block-wise symmetric quantisation, one float scale per block (ZeRO++, CGX)
///   random_k    one element in every `stride`, at indices drawn from the seed (summable)
///   top_k       the ceil(n / stride) largest magnitudes with their indices (allgather)
///   sign        1 bit an element and one float scale (mean magnitude) per block
enum class method : std::uint8_t { fp16, bf16, int8, int4, random_k, top_k, sign };

inline constexpr std::array<method, 7> all_methods = {method::fp16,     method::bf16,  method::int8, method::int4,
                                                      method::random_k, method::top_k, method::sign};

/// The method's name as SHUNT_COMPRESS lists and the model's tables spell it.
constexpr std::string_view to_string(method m) {
    switch (m) {
        case method::fp16: return "fp16";
        case method::bf16: return "bf16";
        case method::int8: return "int8";
        case method::int4: return "int4";
        case method::random_k: return "randomk";
        case method::top_k: return "topk";
        case method::sign: return "sign";
    }
    return "?";
}

/// The method named `name` (as to_string spells it), or nothing.
inline std::optional<method> method_from_string(std::string_view name) {
    for (method m : all_methods)
        if (to_string(m) == name) return m;
    return std::nullopt;
}

/// How int8 and int4 round a scaled value to its code: to nearest (ties to even), or
/// stochastically (up with probability equal to the fraction, from the seed: unbiased).
enum class rounding : std::uint8_t { nearest, stochastic };

/// An IEEE binary16 value, as its bits (an input element type).
struct f16 {
    std::uint16_t bits;
};
/// A bfloat16 value, as its bits (an input element type).
struct bf16 {
    std::uint16_t bits;
};

/// The element type of an input: float32, binary16 or bfloat16.
enum class element : std::uint8_t { f32, f16, bf16 };

template <class T>
constexpr element element_of();
template <>
constexpr element element_of<float>() {
    return element::f32;
}
template <>
constexpr element element_of<f16>() {
    return element::f16;
}
template <>
constexpr element element_of<bf16>() {
    return element::bf16;
}

/// How the compressed forms of several ranks combine into the compressed form of their sum.
///   none  not summable: gather the parts and decompress_accumulate each (allgather scheme), or
///         exchange slices, reduce and compress again (alltoall then allgather)
///   f32   a vector of floats: MPI_SUM on MPI_FLOAT, ncclSum on ncclFloat32
///   f16   binary16 halves added in float and rounded back (combine.hpp: an MPI user op; with NCCL,
///         ncclSum on ncclFloat16)
///   bf16  bfloat16 likewise (ncclSum on ncclBfloat16)
enum class sum_form : std::uint8_t { none, f32, f16, bf16 };

/// The collective scheme a method's form suits: an allreduce of the compressed form, an allgather
/// of compressed parts, or an alltoall of compressed slices then an allgather of the reduced ones.
enum class scheme : std::uint8_t { allreduce, allgather, alltoall_allgather };

/// A compressor and its parameters: must be the same on every rank of a collective.
struct params {
    method kind = method::fp16;
    /// int8, int4, sign: elements per scale, a multiple of 16 from 16 to 2^24.
    std::int64_t block = 256;
    /// random_k, top_k: one element kept in every `stride` (k = ceil(n / stride)), 1 to 2^31.
    std::int64_t stride = 100;
    /// int8, int4: nearest or stochastic rounding.
    rounding round = rounding::nearest;
    /// random_k's indices and stochastic rounding's draws: the same seed (and step) gives the same
    /// draws on every rank. Give each rank its own seed for stochastic rounding if the ranks'
    /// rounding errors should be independent; random_k needs one seed for all.
    std::uint64_t seed = 0;
    bool operator==(const params&) const = default;
};

/// The parameters of `m` unless told otherwise (the cost model's tables are measured with them):
/// blocks of 256, one element in 100 kept, nearest rounding, seed 0.
constexpr params defaults(method m) {
    params p;
    p.kind = m;
    return p;
}

inline constexpr std::int64_t max_block = std::int64_t{1} << 24;
inline constexpr std::int64_t max_stride = std::int64_t{1} << 31;
/// top_k's indices are 32-bit, and random_k draws one 32-bit hash per kept element.
inline constexpr std::int64_t max_indexed = (std::int64_t{1} << 32) - 1;

/// Throws shunt::error naming the bad field when `p` is not valid.
inline void validate(const params& p) {
    if (static_cast<unsigned>(p.kind) > static_cast<unsigned>(method::sign))
        throw error("compress: unknown method " + std::to_string(static_cast<unsigned>(p.kind)));
    if (p.block < 16 || p.block > max_block || p.block % 16 != 0)
        throw error("compress: block " + std::to_string(p.block) + " is not a multiple of 16 from 16 to 2^24");
    if (p.stride < 1 || p.stride > max_stride)
        throw error("compress: stride " + std::to_string(p.stride) + " is not from 1 to 2^31");
    if (p.round != rounding::nearest && p.round != rounding::stochastic)
        throw error("compress: unknown rounding " + std::to_string(static_cast<unsigned>(p.round)));
}

/// random_k and top_k: the elements kept of n, ceil(n / stride).
constexpr std::int64_t kept(const params& p, std::int64_t n) { return n <= 0 ? 0 : (n - 1) / p.stride + 1; }

/// int8, int4, sign: the blocks of n elements (the last may be partial).
constexpr std::int64_t blocks(const params& p, std::int64_t n) { return n <= 0 ? 0 : (n - 1) / p.block + 1; }

/// Bytes of the compressed form of n elements. Layouts (little-endian):
///   fp16, bf16  n 16-bit values
///   int8        blocks(n) float scales, then n signed bytes
///   int4        blocks(n) float scales, then ceil(n / 2) bytes: element i in the low nibble of
///               byte i / 2 when i is even, the high nibble when odd, as code + 8 (the unused
///               nibble of an odd n holds 8, code 0)
///   sign        blocks(n) float scales, then ceil(n / 8) bytes: element i is bit i % 8 of byte
///               i / 8, set when its sign bit is clear (unused bits 0)
///   random_k    kept(n) float values
///   top_k       kept(n) 32-bit indices (ascending), then kept(n) float values
constexpr std::int64_t compressed_bytes(const params& p, std::int64_t n) {
    if (n <= 0) return 0;
    switch (p.kind) {
        case method::fp16:
        case method::bf16: return 2 * n;
        case method::int8: return 4 * blocks(p, n) + n;
        case method::int4: return 4 * blocks(p, n) + (n + 1) / 2;
        case method::sign: return 4 * blocks(p, n) + (n + 7) / 8;
        case method::random_k: return 4 * kept(p, n);
        case method::top_k: return 8 * kept(p, n);
    }
    return 0;
}

/// Compressed bytes over the bytes of n float32 elements.
constexpr double ratio(const params& p, std::int64_t n) {
    return n <= 0 ? 1.0 : static_cast<double>(compressed_bytes(p, n)) / (4.0 * static_cast<double>(n));
}

/// How a method's compressed form sums (see sum_form).
constexpr sum_form summable(method m) {
    switch (m) {
        case method::fp16: return sum_form::f16;
        case method::bf16: return sum_form::bf16;
        case method::random_k: return sum_form::f32;
        default: return sum_form::none;
    }
}

/// The scheme a method suits: an allreduce of a summable form; sign's 1-bit form an alltoall of
/// slices (each rank reduces one and compresses it again) then an allgather; the others (scales
/// differ per rank, top_k's indices too) an allgather of compressed parts.
constexpr scheme preferred_scheme(method m) {
    return summable(m) != sum_form::none ? scheme::allreduce
           : m == method::sign           ? scheme::alltoall_allgather
                                         : scheme::allgather;
}

/// True for the methods whose error is too large to drop (1-bit, sparsification): use them with
/// error feedback (error_feedback.hpp).
constexpr bool needs_error_feedback(method m) {
    return m == method::sign || m == method::top_k || m == method::random_k;
}

/// The most elements any compressor takes (2^50: sizes in bytes stay far from overflowing).
inline constexpr std::int64_t max_count = std::int64_t{1} << 50;

/// True when `n` elements fit the method's format (top_k's 32-bit indices, random_k's draws).
constexpr bool fits(const params& p, std::int64_t n) {
    if (n < 0 || n > max_count) return false;
    if (p.kind == method::top_k) return n <= max_indexed;
    if (p.kind == method::random_k) return kept(p, n) <= max_indexed;
    return true;
}

/// Throws shunt::unsupported when n elements do not fit the method's format, shunt::error when
/// the parameters are not valid.
inline void check_count(const params& p, std::int64_t n) {
    validate(p);
    if (!fits(p, n))
        throw unsupported("compress: " + std::string(to_string(p.kind)) + " cannot hold " + std::to_string(n) +
                          " elements");
}

namespace detail {

SHUNT_HOST_DEVICE inline std::uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
#endif
}

SHUNT_HOST_DEVICE inline float float_of(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    std::memcpy(&f, &u, 4);
    return f;
#endif
}

/// The quiet NaN a non-finite block's scale holds: every element of the block decompresses to NaN.
inline constexpr std::uint32_t nan_bits = 0x7fc00000u;
/// Magnitudes at or above this (as bits of |x|) are Inf or NaN.
inline constexpr std::uint32_t inf_bits = 0x7f800000u;

/// float to binary16, round to nearest even, as x86's F16C (VCVTPS2PH) converts: overflow to
/// Inf, subnormal halves rounded exactly, NaN kept (quieted, its top payload bits kept).
SHUNT_HOST_DEVICE inline std::uint16_t to_f16_bits(float f) {
    const std::uint32_t x = bits_of(f);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    const std::uint32_t a = x & 0x7fffffffu;
    if (a > inf_bits) return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to 2^16 or more: Inf
    if (a >= 0x38800000u) {  // a normal half: rebias the exponent, round the 13 dropped bits
        const std::uint32_t r = a - 0x38000000u + 0xfffu + ((a >> 13) & 1u);
        return static_cast<std::uint16_t>(sign | (r >> 13));
    }
    // A subnormal half (or zero): the value in units of 2^-24, rounded to nearest even.
    const std::uint32_t e = a >> 23;
    const int shift = 126 - static_cast<int>(e);  // at least 14
    if (shift > 24) return static_cast<std::uint16_t>(sign);
    const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
    std::uint32_t q = m >> shift;
    const std::uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1u))) ++q;
    return static_cast<std::uint16_t>(sign | q);
}

/// binary16 to float, exactly; a NaN keeps its payload and is quieted (as VCVTPH2PS does).
SHUNT_HOST_DEVICE inline float from_f16_bits(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return float_of(sign | inf_bits | (m ? 0x400000u : 0u) | (m << 13));
    if (e != 0) return float_of(sign | ((e + 112u) << 23) | (m << 13));
    if (m == 0) return float_of(sign);
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // subnormal: m * 2^-24, exact
    return sign ? -v : v;
}

/// float to bfloat16, round to nearest even (overflow to Inf); a NaN is kept, quieted.
SHUNT_HOST_DEVICE inline std::uint16_t to_bf16_bits(float f) {
    const std::uint32_t x = bits_of(f);
    if ((x & 0x7fffffffu) > inf_bits) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
    return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/// bfloat16 to float, exactly.
SHUNT_HOST_DEVICE inline float from_bf16_bits(std::uint16_t h) { return float_of(static_cast<std::uint32_t>(h) << 16); }

/// An input element as a float (exact).
SHUNT_HOST_DEVICE inline float widen(float x) { return x; }
SHUNT_HOST_DEVICE inline float widen(f16 x) { return from_f16_bits(x.bits); }
SHUNT_HOST_DEVICE inline float widen(bf16 x) { return from_bf16_bits(x.bits); }

/// splitmix64's finaliser.
SHUNT_HOST_DEVICE constexpr std::uint64_t mix64(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/// What a stream of draws is for: the same seed gives independent streams.
enum class purpose : std::uint32_t { indices = 1, rounding = 2 };

/// The 32-bit key of one call's draws: from the seed, the caller's step (call number) and purpose.
SHUNT_HOST_DEVICE constexpr std::uint32_t draw_key(std::uint64_t seed, std::uint64_t step, purpose what) {
    return static_cast<std::uint32_t>(
        mix64(mix64(seed ^ (0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(what))) + step) >> 32);
}

/// The draw for item i under `key`: murmur3's 32-bit finaliser of an odd multiple of i plus the
/// key (a bijection of i for each key). Element indices enter modulo 2^32.
SHUNT_HOST_DEVICE constexpr std::uint32_t draw(std::uint32_t i, std::uint32_t key) {
    std::uint32_t h = i * 0x9e3779b1u + key;
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

/// random_k's index in stratum i (elements [i * stride, min(n, (i + 1) * stride))): uniform over
/// the stratum, by multiply-shift of the draw.
SHUNT_HOST_DEVICE constexpr std::int64_t random_index(std::int64_t i, std::int64_t stride, std::int64_t n,
                                                      std::uint32_t key) {
    const std::int64_t first = i * stride;
    const std::int64_t len = n - first < stride ? n - first : stride;
    return first + static_cast<std::int64_t>((static_cast<std::uint64_t>(draw(static_cast<std::uint32_t>(i), key)) *
                                              static_cast<std::uint64_t>(len)) >>
                                             32);
}

/// A uniform draw in [0, 1) with 24 bits (stochastic rounding).
SHUNT_HOST_DEVICE constexpr float unit_draw(std::uint32_t h) {
    return static_cast<float>(h >> 8) * 5.9604644775390625e-8f;
}

/// What a block's codes are computed with: codes = round(x * pre * inv), scale stored.
struct block_scale {
    float scale = 0;  ///< stored: amax / Q, 0 for a zero block, NaN for a non-finite block
    float pre = 1;  ///< 1, or 2^64 for a block of tiny values
    float inv = 0;  ///< Q / (amax * pre); 0 when every code is 0
};

/// The scale of a block from the bits of its largest magnitude.
SHUNT_HOST_DEVICE inline block_scale scale_of(std::uint32_t amax_bits, int q) {
    block_scale s;
    if (amax_bits >= inf_bits) {
        s.scale = float_of(nan_bits);
        return s;
    }
    if (amax_bits == 0) return s;
    const float amax = float_of(amax_bits);
    s.pre = amax < 0x1p-60f ? 0x1p64f : 1.0f;
    s.inv = static_cast<float>(q) / (amax * s.pre);
    s.scale = amax / static_cast<float>(q);
    return s;
}

/// The largest code of int8 (127) and int4 (7): codes are symmetric, -Q..Q.
constexpr int max_code(method m) { return m == method::int4 ? 7 : 127; }

}  // namespace detail
}  // namespace shunt::compress
