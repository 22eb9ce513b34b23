// tests/unit/compress/helpers.hpp: what the compressor tests share: test data with special values,
// the host paths this CPU can run, and references computed independently of the code under test
// (in double, by search or by brute force).
#pragma once

#include <shunt/compress/common.hpp>
#include <shunt/compress/simd.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace compress_test {

using namespace shunt::compress;

/// The host paths this CPU runs, scalar first.
inline std::vector<isa> paths() {
    std::vector<isa> v{isa::scalar};
    if (cpu_isa() >= isa::avx2) v.push_back(isa::avx2);
    if (cpu_isa() >= isa::avx512) v.push_back(isa::avx512);
    return v;
}

inline float from_bits(std::uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline std::uint32_t to_bits(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

/// Gradient-like values: normal draws scaled by 10^[-3, 3], the scale changing every 64 elements,
/// so that blocks differ in range.
inline std::vector<float> gradients(std::int64_t n, std::uint64_t seed) {
    std::mt19937_64 g(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> decade(-3.0f, 3.0f);
    std::vector<float> v(static_cast<std::size_t>(n));
    float scale = 1;
    for (std::int64_t i = 0; i < n; ++i) {
        if (i % 64 == 0) scale = std::pow(10.0f, decade(g));
        v[static_cast<std::size_t>(i)] = normal(g) * scale;
    }
    return v;
}

/// Random float bit patterns of every kind (NaN, Inf, subnormals, zeros included).
inline std::vector<float> any_floats(std::int64_t n, std::uint64_t seed) {
    std::mt19937_64 g(seed);
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = from_bits(static_cast<std::uint32_t>(g()));
    return v;
}

/// The values every conversion must get right.
inline std::vector<float> special_floats() {
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> v = {0.0f,
                            -0.0f,
                            inf,
                            -inf,
                            std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(),
                            from_bits(0x7f800001u),  // signalling NaN
                            from_bits(0xffbfffffu),
                            std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(),
                            65504.0f,
                            65519.99f,
                            65520.0f,
                            -65520.0f,
                            6.103515625e-05f,  // smallest normal half
                            5.9604644775390625e-08f,  // smallest subnormal half
                            2.98023223876953125e-08f,  // half of it: ties to even (0)
                            2.98023259e-08f,  // just above: rounds up
                            1.0f,
                            -1.0f,
                            1.00048828125f,  // 1 + 2^-11: a tie
                            1.00146484375f,  // 1 + 3 * 2^-11: a tie, rounds up
                            3.3895314e38f,
                            from_bits(0x7f7f8000u),  // bf16 tie at the top: rounds to Inf
                            from_bits(0x3f808000u),  // bf16 tie, even
                            from_bits(0x3f818000u),  // bf16 tie, odd: rounds up
                            from_bits(0x00008000u)};  // subnormal bf16 tie
    return v;
}

/// Every finite non-negative binary16 value, ascending, as doubles, with its bits.
struct half_table {
    std::vector<double> value;
    std::vector<std::uint16_t> bits;
    half_table() {
        for (std::uint32_t h = 0; h < 0x7c00; ++h) {
            const std::uint32_t e = h >> 10, m = h & 0x3ff;
            value.push_back(e == 0 ? std::ldexp(static_cast<double>(m), -24)
                                   : std::ldexp(1.0 + static_cast<double>(m) / 1024.0, static_cast<int>(e) - 15));
            bits.push_back(static_cast<std::uint16_t>(h));
        }
    }
};

/// float to binary16 by search among all halves (nearest, ties to the even bits), in double.
inline std::uint16_t reference_f16(float x) {
    static const half_table t;
    const std::uint32_t u = to_bits(x);
    const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
    if (std::isnan(x)) return static_cast<std::uint16_t>(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
    const double a = std::fabs(static_cast<double>(x));
    if (a >= 65520.0) return static_cast<std::uint16_t>(sign | 0x7c00u);
    const auto hi = std::lower_bound(t.value.begin(), t.value.end(), a);
    if (hi == t.value.end()) return static_cast<std::uint16_t>(sign | 0x7bffu);
    const std::size_t j = static_cast<std::size_t>(hi - t.value.begin());
    if (*hi == a || j == 0) return static_cast<std::uint16_t>(sign | t.bits[j]);
    const double dl = a - t.value[j - 1], dh = *hi - a;
    const std::size_t pick = dl < dh ? j - 1 : dh < dl ? j : (t.bits[j] % 2 == 0 ? j : j - 1);
    return static_cast<std::uint16_t>(sign | t.bits[pick]);
}

/// binary16 bits to their value, in double (NaN: any NaN).
inline double reference_from_f16(std::uint16_t h) {
    const double s = (h & 0x8000) ? -1.0 : 1.0;
    const std::uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) return m ? std::numeric_limits<double>::quiet_NaN() : s * std::numeric_limits<double>::infinity();
    if (e == 0) return s * std::ldexp(static_cast<double>(m), -24);
    return s * std::ldexp(1.0 + static_cast<double>(m) / 1024.0, static_cast<int>(e) - 15);
}

/// float to bfloat16, nearest of the two bfloat16 neighbours in double (ties to the even bits).
inline std::uint16_t reference_bf16(float x) {
    const std::uint32_t u = to_bits(x);
    if (std::isnan(x)) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
    const std::uint32_t down = u & 0xffff0000u;  // towards zero
    const std::uint32_t up = down + 0x10000u;  // away from zero (may be Inf)
    const double a = std::fabs(static_cast<double>(x));
    const double lo = std::fabs(static_cast<double>(from_bits(down)));
    // The value past the largest finite bfloat16 (0x7f7f) rounds as if to 2^128.
    const double hi =
        (up & 0x7fffffffu) == 0x7f800000u ? std::ldexp(1.0, 128) : std::fabs(static_cast<double>(from_bits(up)));
    if (a - lo < hi - a) return static_cast<std::uint16_t>(down >> 16);
    if (hi - a < a - lo) return static_cast<std::uint16_t>(up >> 16);
    return static_cast<std::uint16_t>(((down >> 16) & 1u) ? up >> 16 : down >> 16);
}

/// A buffer with guard bytes after `n` bytes, to catch writes past the end.
struct guarded {
    static constexpr std::size_t guard = 64;
    static constexpr std::byte fill{0xa5};
    std::vector<std::byte> bytes;
    explicit guarded(std::int64_t n) : bytes(static_cast<std::size_t>(n) + guard, fill) {}
    std::byte* data() { return bytes.data(); }
    bool intact(std::int64_t n) const {
        for (std::size_t i = static_cast<std::size_t>(n); i < bytes.size(); ++i)
            if (bytes[i] != fill) return false;
        return true;
    }
};

/// Float buffers with a guard of 16 sentinel floats after n.
struct guarded_floats {
    std::vector<float> v;
    explicit guarded_floats(std::int64_t n, float init = 0) : v(static_cast<std::size_t>(n) + 16, init) {
        for (std::size_t i = static_cast<std::size_t>(n); i < v.size(); ++i) v[i] = 1234.5f;
    }
    float* data() { return v.data(); }
    bool intact(std::int64_t n) const {
        for (std::size_t i = static_cast<std::size_t>(n); i < v.size(); ++i)
            if (v[i] != 1234.5f) return false;
        return true;
    }
};

/// Same bits, NaN or not.
inline bool same_bits(const float* a, const float* b, std::int64_t n) {
    return std::memcmp(a, b, static_cast<std::size_t>(n) * 4) == 0;
}

/// Counts that are not multiples of the vector widths or blocks.
inline const std::vector<std::int64_t>& odd_counts() {
    static const std::vector<std::int64_t> v = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 63, 100, 255, 256, 257, 1000, 4099};
    return v;
}

}  // namespace compress_test
