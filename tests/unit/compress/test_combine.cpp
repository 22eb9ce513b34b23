// tests/unit/compress/test_combine.cpp: the reduction of summable forms: binary16 and bfloat16 halves
// added in float and rounded to nearest even (against the double sum rounded by the search
// references), float32 a plain sum; every path as the scalar one; commutative.
#include "helpers.hpp"

#include <shunt/compress/combine.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

using namespace compress_test;

TEST_CASE("combine: f16 and bf16 add in float and round to nearest even, on every path") {
    std::mt19937 g(3);
    const std::int64_t n = 100003;
    std::vector<std::uint16_t> a(static_cast<std::size_t>(n)), b(a.size());
    for (auto& x : a) x = static_cast<std::uint16_t>(g());
    for (auto& x : b) x = static_cast<std::uint16_t>(g());
    for (const bool half : {true, false}) {
        CAPTURE(half);
        a[0] = half ? 0x7c00 : 0x7f80, b[0] = half ? 0xfc00 : 0xff80;  // Inf + -Inf: NaN
        a[1] = half ? 0x7bff : 0x7f7f, b[1] = a[1];  // the largest finite, twice: Inf
        a[2] = 0x0001, b[2] = 0x8001;  // subnormals cancel to +0
        std::vector<std::uint16_t> want(a.size());
        for (std::size_t i = 0; i < a.size(); ++i) {
            const float x =
                half ? static_cast<float>(reference_from_f16(a[i])) : from_bits(static_cast<std::uint32_t>(a[i]) << 16);
            const float y =
                half ? static_cast<float>(reference_from_f16(b[i])) : from_bits(static_cast<std::uint32_t>(b[i]) << 16);
            const float s = static_cast<float>(static_cast<double>(x) + static_cast<double>(y));  // the float sum
            want[i] = half ? reference_f16(s) : reference_bf16(s);
        }
        CHECK((want[0] & 0x7fff) == (half ? 0x7e00 : 0x7fc0));  // a quiet NaN (its sign is the CPU's)
        CHECK(want[1] == (half ? 0x7c00 : 0x7f80));
        CHECK(want[2] == 0);
        for (const isa path : paths()) {
            CAPTURE(to_string(path));
            std::vector<std::uint16_t> io = b;
            combine(half ? sum_form::f16 : sum_form::bf16, a.data(), io.data(), n, path);
            // Which operand's NaN an addition returns is the compiler's choice (it may swap them):
            // a NaN result only has to be a quiet NaN.
            const std::uint16_t exp = half ? 0x7c00 : 0x7f80, quiet = half ? 0x7e00 : 0x7fc0;
            auto nan = [&](std::uint16_t x) { return (x & exp) == exp && (x & ~exp & 0x7fff) != 0; };
            auto same = [&](std::uint16_t x, std::uint16_t y) {
                return nan(x) ? nan(y) && (y & quiet) == quiet : x == y;
            };
            std::size_t bad = 0;
            for (std::size_t i = 0; i < io.size(); ++i) bad += !same(want[i], io[i]);
            CHECK(bad == 0);
            std::vector<std::uint16_t> swapped = a;  // commutative
            combine(half ? sum_form::f16 : sum_form::bf16, b.data(), swapped.data(), n, path);
            for (std::size_t i = 0; i < io.size(); ++i) REQUIRE(same(io[i], swapped[i]));
        }
    }
    CHECK(element_bytes(sum_form::f16) == 2);
    CHECK(element_bytes(sum_form::f32) == 4);
    CHECK(element_bytes(sum_form::none) == 0);
}

TEST_CASE("combine: f32 is a plain sum, on every path and count") {
    for (const std::int64_t n : odd_counts()) {
        const auto a = gradients(n, 1), b = gradients(n, 2);
        for (const isa path : paths()) {
            guarded_floats io(n);
            std::copy(b.begin(), b.end(), io.v.begin());
            combine(sum_form::f32, a.data(), io.data(), n, path);
            for (std::int64_t i = 0; i < n; ++i)
                REQUIRE(io.v[i] == static_cast<float>(static_cast<double>(a[i]) + b[i]));
            CHECK(io.intact(n));
        }
    }
}
