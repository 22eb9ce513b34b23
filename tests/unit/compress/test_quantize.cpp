// tests/unit/compress/test_quantize.cpp: INT8 and INT4 block quantisation: every path against the
// scalar one byte for byte; the scalar codes against nearest rounding computed in double; the
// error bound (half a step of the block's scale); zero, NaN, Inf and subnormal blocks; stochastic
// rounding unbiased over many draws; the nibble layout decoded by hand.
#include "helpers.hpp"

#include <shunt/compress/compress.hpp>
#include <shunt/compress/quantize.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

using namespace compress_test;

namespace {

params quant(method m, std::int64_t block, rounding r = rounding::nearest, std::uint64_t seed = 0) {
    params p;
    p.kind = m;
    p.block = block;
    p.round = r;
    p.seed = seed;
    return p;
}

float scale_at(const std::vector<std::byte>& c, std::int64_t b) {
    float s;
    std::memcpy(&s, c.data() + 4 * b, 4);
    return s;
}

/// Element i's code, decoded by hand from the documented layout.
int code_at(const params& p, const std::vector<std::byte>& c, std::int64_t n, std::int64_t i) {
    const std::byte* codes = c.data() + 4 * blocks(p, n);
    if (p.kind == method::int8) return static_cast<std::int8_t>(codes[i]);
    const auto b = static_cast<std::uint8_t>(codes[i / 2]);
    return static_cast<int>(i % 2 ? b >> 4 : b & 15) - 8;
}

/// Round half to even in double.
double nearest_even(double v) {
    const double f = std::floor(v), d = v - f;
    if (d > 0.5) return f + 1;
    if (d < 0.5) return f;
    return std::fmod(f, 2.0) == 0 ? f : f + 1;
}

}  // namespace

TEST_CASE("int8 and int4: every path writes the scalar path's bytes, at every count and block") {
    for (const method m : {method::int8, method::int4})
        for (const std::int64_t block : {16, 32, 256, 2048})
            for (const rounding r : {rounding::nearest, rounding::stochastic}) {
                const params p = quant(m, block, r, 77);
                std::vector<std::int64_t> counts = odd_counts();
                counts.push_back(3 * block + 5);
                for (const std::int64_t n : counts) {
                    CAPTURE(to_string(m));
                    CAPTURE(block);
                    CAPTURE(n);
                    auto v = gradients(n, static_cast<std::uint64_t>(n));
                    if (n > 40) v[static_cast<std::size_t>(n / 2)] = 0;
                    guarded want(compressed_bytes(p, n));
                    quantize(p, v.data(), n, want.data(), 3, isa::scalar);
                    CHECK(want.intact(compressed_bytes(p, n)));
                    guarded_floats want_out(n), want_acc(n, 0.25f);
                    dequantize(p, want.data(), n, want_out.data(), isa::scalar);
                    dequantize_accumulate(p, want.data(), n, want_acc.data(), isa::scalar);
                    for (const isa path : paths()) {
                        CAPTURE(to_string(path));
                        guarded got(compressed_bytes(p, n));
                        quantize(p, v.data(), n, got.data(), 3, path);
                        CHECK(std::memcmp(got.data(), want.data(), static_cast<std::size_t>(compressed_bytes(p, n))) ==
                              0);
                        CHECK(got.intact(compressed_bytes(p, n)));
                        guarded_floats out(n), acc(n, 0.25f);
                        dequantize(p, want.data(), n, out.data(), path);
                        dequantize_accumulate(p, want.data(), n, acc.data(), path);
                        CHECK(same_bits(out.data(), want_out.data(), n));
                        CHECK(same_bits(acc.data(), want_acc.data(), n));
                        CHECK(out.intact(n));
                        CHECK(acc.intact(n));
                    }
                }
            }
}

TEST_CASE("int8 and int4: codes are the nearest, the error at most half a step, decompression exact") {
    for (const method m : {method::int8, method::int4}) {
        const params p = quant(m, 256);
        const int q = m == method::int8 ? 127 : 7;
        const std::int64_t n = 256 * 40 + 77;
        const auto v = gradients(n, 11);
        std::vector<std::byte> c(static_cast<std::size_t>(compressed_bytes(p, n)));
        quantize(p, v.data(), n, c.data());
        std::vector<float> out(static_cast<std::size_t>(n)), acc(static_cast<std::size_t>(n), 1.5f);
        dequantize(p, c.data(), n, out.data());
        dequantize_accumulate(p, c.data(), n, acc.data());
        std::int64_t near_ties = 0;
        for (std::int64_t b = 0; b < blocks(p, n); ++b) {
            const std::int64_t first = b * p.block, last = std::min(n, first + p.block);
            double amax = 0;
            for (std::int64_t i = first; i < last; ++i) amax = std::max(amax, std::fabs(static_cast<double>(v[i])));
            const float s = scale_at(c, b);
            CHECK(s == static_cast<float>(amax / q));
            for (std::int64_t i = first; i < last; ++i) {
                const int code = code_at(p, c, n, i);
                REQUIRE(std::abs(code) <= q);
                const double exact = v[i] * q / amax;
                if (std::fabs(std::fabs(exact - std::floor(exact)) - 0.5) < 1e-4)
                    ++near_ties;  // float and double may round a near-tie apart
                else
                    REQUIRE(code == nearest_even(exact));
                REQUIRE(std::fabs(v[i] - static_cast<double>(code) * s) <= 0.5 * s * (1 + 1e-5));
                REQUIRE(out[i] == static_cast<float>(static_cast<double>(code) * s));
                REQUIRE(acc[i] == static_cast<float>(
                                      1.5 + static_cast<double>(static_cast<float>(code * static_cast<double>(s)))));
            }
        }
        CHECK(near_ties < n / 100);
    }
}

TEST_CASE("int8 and int4: zero blocks, NaN and Inf blocks, subnormal blocks") {
    for (const method m : {method::int8, method::int4}) {
        CAPTURE(to_string(m));
        const params p = quant(m, 32);
        const int q = m == method::int8 ? 127 : 7;
        const std::int64_t n = 32 * 5 + 3;
        std::vector<float> v = gradients(n, 4);
        for (std::int64_t i = 0; i < 32; ++i)
            v[static_cast<std::size_t>(i)] = (i % 2) ? 0.0f : -0.0f;  // block 0: zeros
        v[40] = std::numeric_limits<float>::quiet_NaN();  // block 1
        v[70] = -std::numeric_limits<float>::infinity();  // block 2
        for (std::int64_t i = 96; i < 128; ++i)  // block 3: subnormals
            v[static_cast<std::size_t>(i)] =
                from_bits(static_cast<std::uint32_t>(1 + 97 * i)) * ((i % 3) ? 1.0f : -1.0f);
        for (const isa path : paths()) {
            CAPTURE(to_string(path));
            std::vector<std::byte> c(static_cast<std::size_t>(compressed_bytes(p, n)));
            quantize(p, v.data(), n, c.data(), 0, path);
            std::vector<float> out(static_cast<std::size_t>(n));
            dequantize(p, c.data(), n, out.data(), path);
            CHECK(scale_at(c, 0) == 0.0f);
            for (std::int64_t i = 0; i < 32; ++i) CHECK(out[static_cast<std::size_t>(i)] == 0.0f);
            CHECK(std::isnan(scale_at(c, 1)));
            CHECK(std::isnan(scale_at(c, 2)));
            for (std::int64_t i = 32; i < 96; ++i) CHECK(std::isnan(out[static_cast<std::size_t>(i)]));
            const float s = scale_at(c, 3);
            CHECK(s > 0.0f);
            for (std::int64_t i = 96; i < 128; ++i) {
                const double err = std::fabs(static_cast<double>(v[i]) - static_cast<double>(out[i]));
                // half a step, plus the scale's own rounding to a subnormal (q codes of it)
                CHECK(err <= 0.5 * s + q * static_cast<double>(std::numeric_limits<float>::denorm_min()));
            }
            for (std::int64_t i = 128; i < n; ++i) CHECK(std::isfinite(out[static_cast<std::size_t>(i)]));
            CHECK_FALSE(compressed_finite(p, c.data(), n));
        }
    }
}

TEST_CASE("int4: the nibble layout, and the unused nibble of an odd count holds code 0") {
    const params p = quant(method::int4, 16);
    const std::vector<float> v = {7, -7, 1, 0, 3, -3, 2, 5, 6, -1, 4, -4, -2, -5, -6, 0.4f, 7};  // 17 elements
    const std::int64_t n = static_cast<std::int64_t>(v.size());
    for (const isa path : paths()) {
        std::vector<std::byte> c(static_cast<std::size_t>(compressed_bytes(p, n)));
        quantize(p, v.data(), n, c.data(), 0, path);
        CHECK(compressed_bytes(p, n) == 8 + 9);
        CHECK(scale_at(c, 0) == 1.0f);  // amax 7, scale 7 / 7
        CHECK(scale_at(c, 1) == 1.0f);
        CHECK(static_cast<int>(c[8]) == ((-7 + 8) << 4 | (7 + 8)));
        CHECK(static_cast<int>(c[9]) == ((0 + 8) << 4 | (1 + 8)));
        CHECK(static_cast<int>(c[15]) == ((0 + 8) << 4 | (-6 + 8)));  // 0.4 rounds to 0
        CHECK(static_cast<int>(c[16]) == (8 << 4 | (7 + 8)));
    }
}

TEST_CASE("int8 and int4: stochastic rounding picks a neighbouring code and is unbiased") {
    for (const method m : {method::int8, method::int4}) {
        CAPTURE(to_string(m));
        const params p = quant(m, 64, rounding::stochastic, 5);
        const std::int64_t n = 64 * 4;
        const auto v = gradients(n, 8);
        std::vector<double> mean(static_cast<std::size_t>(n), 0.0);
        std::vector<std::byte> c(static_cast<std::size_t>(compressed_bytes(p, n))), c2(c.size());
        std::vector<float> out(static_cast<std::size_t>(n));
        const int steps = 4000;
        int differing_steps = 0;
        for (int s = 0; s < steps; ++s) {
            quantize(p, v.data(), n, c.data(), static_cast<std::uint64_t>(s));
            if (s > 0) differing_steps += c != c2;
            c2 = c;
            dequantize(p, c.data(), n, out.data());
            for (std::int64_t i = 0; i < n; ++i) {
                const float scale = scale_at(c, i / 64);
                const double exact = v[i] / static_cast<double>(scale);
                const int code = code_at(p, c, n, i);
                REQUIRE(std::fabs(code - exact) < 1.0 + 1e-5);  // floor or ceil
                mean[i] += out[i];
            }
        }
        CHECK(differing_steps == steps - 1);  // each step draws afresh
        for (std::int64_t i = 0; i < n; ++i) {
            const double scale = scale_at(c, i / 64);
            // each draw's error is within one step: 5 standard errors of a uniform step
            CHECK(std::fabs(mean[i] / steps - v[i]) <=
                  5 * scale * 0.5 / std::sqrt(static_cast<double>(steps)) + 1e-6 * scale);
        }
        // Another seed draws otherwise.
        params other = p;
        other.seed = 6;
        quantize(other, v.data(), n, c2.data(), 0);
        quantize(p, v.data(), n, c.data(), 0);
        CHECK(c != c2);
    }
}

TEST_CASE("int8 and int4: f16 and bf16 inputs quantise as their float values") {
    for (const method m : {method::int8, method::int4}) {
        const params p = quant(m, 32);
        const std::int64_t n = 32 * 3 + 9;
        const auto v = gradients(n, 13);
        std::vector<f16> h(static_cast<std::size_t>(n));
        std::vector<bf16> b(static_cast<std::size_t>(n));
        std::vector<float> hv(static_cast<std::size_t>(n)), bv(static_cast<std::size_t>(n));
        for (std::size_t i = 0; i < v.size(); ++i) {
            h[i].bits = reference_f16(v[i]);
            hv[i] = static_cast<float>(reference_from_f16(h[i].bits));
            b[i].bits = reference_bf16(v[i]);
            bv[i] = from_bits(static_cast<std::uint32_t>(b[i].bits) << 16);
        }
        std::vector<std::byte> want(static_cast<std::size_t>(compressed_bytes(p, n))), got(want.size());
        for (const isa path : paths()) {
            quantize(p, hv.data(), n, want.data(), 0, isa::scalar);
            quantize(p, h.data(), n, got.data(), 0, path);
            CHECK(got == want);
            quantize(p, bv.data(), n, want.data(), 0, isa::scalar);
            quantize(p, b.data(), n, got.data(), 0, path);
            CHECK(got == want);
        }
    }
}
