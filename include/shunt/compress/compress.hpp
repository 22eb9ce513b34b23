// shunt/compress/compress.hpp: one entry for every host compressor, chosen by params::kind:
// compress, decompress, and decompress-and-accumulate (what the receiver of an allgather of
// compressed parts does with each part), plus the finiteness checks of the planner's guard.
#pragma once

#include <shunt/compress/cast.hpp>
#include <shunt/compress/common.hpp>
#include <shunt/compress/quantize.hpp>
#include <shunt/compress/random_k.hpp>
#include <shunt/compress/sign.hpp>
#include <shunt/compress/simd.hpp>
#include <shunt/compress/top_k.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace shunt::compress {
namespace detail {

/// Casts T elements (f16 or bf16) through floats, a chunk at a time on the stack.
template <class T>
void cast_via_float(const params& p, const T* in, std::int64_t n, std::uint16_t* out, isa path) {
    float chunk[1024];
    for (std::int64_t i = 0; i < n; i += 1024) {
        const std::int64_t m = n - i < 1024 ? n - i : 1024;
        for (std::int64_t j = 0; j < m; ++j) chunk[j] = widen(in[i + j]);
        if (p.kind == method::fp16)
            to_f16(chunk, m, out + i, path);
        else
            to_bf16(chunk, m, out + i, path);
    }
}

}  // namespace detail

/// Compresses n elements of `in` (float, f16 or bf16) into compressed_bytes(p, n) bytes at `out`
/// (4-byte aligned for random_k and top_k; any alignment otherwise). `step` is the caller's call
/// number at this compression point: random_k's indices and stochastic rounding's draws depend on
/// (p.seed, step), so every rank must pass the same. Blocking, on the calling thread; thread-safe
/// for distinct outputs. Throws shunt::error for invalid parameters, shunt::unsupported when n
/// does not fit the format.
template <class T>
void compress(const params& p, const T* in, std::int64_t n, std::byte* out, std::uint64_t step = 0,
              isa path = active_isa()) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, f16> || std::is_same_v<T, bf16>,
                  "inputs are float, f16 or bf16");
    check_count(p, n);
    if (n == 0) return;
    path = usable(path);
    auto* halves = reinterpret_cast<std::uint16_t*>(out);
    switch (p.kind) {
        case method::fp16:
        case method::bf16:
            if constexpr (std::is_same_v<T, float>) {
                if (p.kind == method::fp16)
                    to_f16(in, n, halves, path);
                else
                    to_bf16(in, n, halves, path);
            } else if ((std::is_same_v<T, f16> && p.kind == method::fp16) ||
                       (std::is_same_v<T, bf16> && p.kind == method::bf16)) {
                std::memcpy(out, in, static_cast<std::size_t>(n) * 2);
            } else {
                detail::cast_via_float(p, in, n, halves, path);
            }
            return;
        case method::int8:
        case method::int4: return quantize(p, in, n, out, step, path);
        case method::random_k: return random_k(p, in, n, reinterpret_cast<float*>(out), step, path);
        case method::top_k: return top_k(p, in, n, out, path);
        case method::sign: return sign(p, in, n, out, path);
    }
}

/// out[0..n) = the values the compressed form `in` stands for (zeros where random_k or top_k
/// kept nothing). The same p, n and step as compress. Blocking; thread-safe for distinct outputs.
inline void decompress(const params& p, const std::byte* in, std::int64_t n, float* out, std::uint64_t step = 0,
                       isa path = active_isa()) {
    check_count(p, n);
    if (n == 0) return;
    path = usable(path);
    const auto* halves = reinterpret_cast<const std::uint16_t*>(in);
    switch (p.kind) {
        case method::fp16: return from_f16(halves, n, out, path);
        case method::bf16: return from_bf16(halves, n, out, path);
        case method::int8:
        case method::int4: return dequantize(p, in, n, out, path);
        case method::random_k: return random_k_expand<false>(p, reinterpret_cast<const float*>(in), n, out, step, path);
        case method::top_k: return top_k_expand<false>(p, in, n, out, path);
        case method::sign: return unsign<false>(p, in, n, out, path);
    }
}

/// acc[0..n) += the values the compressed form `in` stands for: what a rank does with each part
/// of an allgather of compressed parts. Each value is rounded to float first, then added.
inline void decompress_accumulate(const params& p, const std::byte* in, std::int64_t n, float* acc,
                                  std::uint64_t step = 0, isa path = active_isa()) {
    check_count(p, n);
    if (n == 0) return;
    path = usable(path);
    const auto* halves = reinterpret_cast<const std::uint16_t*>(in);
    switch (p.kind) {
        case method::fp16: return accumulate_f16(halves, n, acc, path);
        case method::bf16: return accumulate_bf16(halves, n, acc, path);
        case method::int8:
        case method::int4: return dequantize_accumulate(p, in, n, acc, path);
        case method::random_k: return random_k_expand<true>(p, reinterpret_cast<const float*>(in), n, acc, step, path);
        case method::top_k: return top_k_expand<true>(p, in, n, acc, path);
        case method::sign: return unsign<true>(p, in, n, acc, path);
    }
}

/// True when none of n elements is NaN or Inf (the planner's guard: such a call runs exact).
template <class T>
bool all_finite(const T* in, std::int64_t n) {
    std::uint32_t bad = 0;
    for (std::int64_t i = 0; i < n; ++i)  // one branch-free pass, vectorised by the compiler
        bad |= static_cast<std::uint32_t>((detail::bits_of(detail::widen(in[i])) & 0x7fffffffu) >= detail::inf_bits);
    return bad == 0;
}

/// True when the compressed form stands for finite values only: casts without NaN or Inf, scales
/// and kept values finite (a block with NaN or Inf has a NaN scale).
inline bool compressed_finite(const params& p, const std::byte* in, std::int64_t n) {
    if (n <= 0) return true;
    auto finite_floats = [](const std::byte* at, std::int64_t count) {
        std::uint32_t bad = 0;
        for (std::int64_t i = 0; i < count; ++i) {
            std::uint32_t u;
            std::memcpy(&u, at + 4 * i, 4);
            bad |= static_cast<std::uint32_t>((u & 0x7fffffffu) >= detail::inf_bits);
        }
        return bad == 0;
    };
    switch (p.kind) {
        case method::fp16:
        case method::bf16: {
            const std::uint16_t exp = p.kind == method::fp16 ? 0x7c00 : 0x7f80;
            std::uint32_t bad = 0;
            for (std::int64_t i = 0; i < n; ++i) {
                std::uint16_t h;
                std::memcpy(&h, in + 2 * i, 2);
                bad |= static_cast<std::uint32_t>((h & exp) == exp);
            }
            return bad == 0;
        }
        case method::int8:
        case method::int4:
        case method::sign: return finite_floats(in, blocks(p, n));
        case method::random_k: return finite_floats(in, kept(p, n));
        case method::top_k: return finite_floats(in + 4 * kept(p, n), kept(p, n));
    }
    return true;
}

}  // namespace shunt::compress
