// tests/unit/compress/test_cast.cpp: the FP16 and BF16 casts against references computed in double
// (nearest value by search, ties to even), against the CPU's own F16C conversion, and every host
// path against the scalar one, bit for bit, with NaN, Inf, subnormals and odd counts.
#include "helpers.hpp"

#include <shunt/compress/cast.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <ios>
#include <vector>

#if SHUNT_COMPRESS_X86
#include <immintrin.h>
#endif

using namespace compress_test;

namespace {

/// Sampled float bit patterns: a sweep over all 2^32 with an odd step, the special values, and
/// every float within 8 ulps of a binary16 rounding boundary in [2^-25, 2^16].
std::vector<float> sweep() {
    std::vector<float> v = special_floats();
    for (std::uint64_t u = 0; u < (std::uint64_t{1} << 32); u += 4099)
        v.push_back(from_bits(static_cast<std::uint32_t>(u)));
    for (std::uint32_t h = 0; h < 0x7c00; h += 7) {  // midpoints between neighbouring halves
        const double mid = (reference_from_f16(static_cast<std::uint16_t>(h)) +
                            reference_from_f16(static_cast<std::uint16_t>(h + 1))) /
                           2;
        const std::uint32_t c = to_bits(static_cast<float>(mid));
        for (std::uint32_t d = 0; d < 16; ++d) {
            v.push_back(from_bits(c - 8 + d));
            v.push_back(-from_bits(c - 8 + d));
        }
    }
    return v;
}

#if SHUNT_COMPRESS_X86
__attribute__((target("f16c"))) std::uint16_t hardware_f16(float x) {
    return static_cast<std::uint16_t>(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float hardware_from_f16(std::uint16_t h) { return _cvtsh_ss(h); }
#endif

}  // namespace

TEST_CASE("fp16: the scalar conversion is the nearest half, ties to even, NaN and Inf as IEEE") {
    const auto v = sweep();
    std::vector<std::uint16_t> out(v.size());
    to_f16(v.data(), static_cast<std::int64_t>(v.size()), out.data(), isa::scalar);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < v.size(); ++i)
        if (out[i] != reference_f16(v[i]) && bad++ < 5)
            FAIL_CHECK("to_f16(" << v[i] << " = 0x" << std::hex << to_bits(v[i]) << ") = 0x" << out[i]
                                 << ", expected 0x" << reference_f16(v[i]));
    CHECK(bad == 0);
    // Named cases.
    auto one = [](float x) {
        std::uint16_t h;
        to_f16(&x, 1, &h, isa::scalar);
        return h;
    };
    CHECK(one(65504.0f) == 0x7bff);
    CHECK(one(65519.99f) == 0x7bff);
    CHECK(one(65520.0f) == 0x7c00);
    CHECK(one(-std::numeric_limits<float>::infinity()) == 0xfc00);
    CHECK(one(2.98023223876953125e-08f) == 0x0000);  // half of the smallest subnormal: to even (0)
    CHECK(one(std::numeric_limits<float>::denorm_min()) == 0x0000);
    CHECK(one(-std::numeric_limits<float>::denorm_min()) == 0x8000);
    CHECK(one(1.00048828125f) == 0x3c00);  // tie, even
    CHECK(one(1.00146484375f) == 0x3c02);  // tie, odd: up
    CHECK((one(from_bits(0x7f800001u)) & 0x7e00) == 0x7e00);  // a signalling NaN comes out quiet
}

#if SHUNT_COMPRESS_X86
TEST_CASE("fp16: the scalar conversions agree with the CPU's F16C instructions") {
    if (cpu_isa() < isa::avx2) return;  // F16C comes with every CPU that has the AVX2 path
    const auto v = sweep();
    std::size_t bad = 0;
    for (const float x : v) {
        std::uint16_t h;
        to_f16(&x, 1, &h, isa::scalar);
        bad += h != hardware_f16(x);
    }
    CHECK(bad == 0);
    for (std::uint32_t h = 0; h < 65536; ++h) {
        const auto hb = static_cast<std::uint16_t>(h);
        float f;
        from_f16(&hb, 1, &f, isa::scalar);
        const float hw = hardware_from_f16(hb);
        REQUIRE_MESSAGE(to_bits(f) == to_bits(hw), "half 0x" << std::hex << h);
    }
}
#endif

TEST_CASE("fp16 and bf16: every path converts exactly as the scalar one, at every count") {
    const auto v = sweep();
    const auto n = static_cast<std::int64_t>(v.size());
    std::vector<std::uint16_t> want16(v.size()), wantb(v.size());
    to_f16(v.data(), n, want16.data(), isa::scalar);
    to_bf16(v.data(), n, wantb.data(), isa::scalar);
    for (const isa path : paths()) {
        CAPTURE(to_string(path));
        std::vector<std::uint16_t> got(v.size());
        to_f16(v.data(), n, got.data(), path);
        CHECK(got == want16);
        to_bf16(v.data(), n, got.data(), path);
        CHECK(got == wantb);
        for (const std::int64_t c : odd_counts()) {  // tails, and no write past the end
            std::vector<std::uint16_t> part(static_cast<std::size_t>(c) + 8, 0x5a5a);
            to_f16(v.data() + 3, c, part.data(), path);
            CHECK(std::equal(part.begin(), part.begin() + c, want16.begin() + 3));
            CHECK(std::all_of(part.begin() + c, part.end(), [](std::uint16_t x) { return x == 0x5a5a; }));
            std::fill(part.begin(), part.end(), 0x5a5a);
            to_bf16(v.data() + 5, c, part.data(), path);
            CHECK(std::equal(part.begin(), part.begin() + c, wantb.begin() + 5));
            CHECK(std::all_of(part.begin() + c, part.end(), [](std::uint16_t x) { return x == 0x5a5a; }));
        }
    }
}

TEST_CASE("bf16: the scalar conversion is the nearest bfloat16, ties to even, NaN quieted") {
    const auto v = sweep();
    std::vector<std::uint16_t> out(v.size());
    to_bf16(v.data(), static_cast<std::int64_t>(v.size()), out.data(), isa::scalar);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < v.size(); ++i)
        if (out[i] != reference_bf16(v[i]) && bad++ < 5)
            FAIL_CHECK("to_bf16(0x" << std::hex << to_bits(v[i]) << ") = 0x" << out[i] << ", expected 0x"
                                    << reference_bf16(v[i]));
    CHECK(bad == 0);
    auto one = [](std::uint32_t bits) {
        const float x = from_bits(bits);
        std::uint16_t h;
        to_bf16(&x, 1, &h, isa::scalar);
        return h;
    };
    CHECK(one(0x7f7f8000u) == 0x7f80);  // the largest tie rounds to Inf
    CHECK(one(0x7f7f7fffu) == 0x7f7f);
    CHECK(one(0x3f808000u) == 0x3f80);  // tie, even
    CHECK(one(0x3f818000u) == 0x3f82);  // tie, odd: up
    CHECK(one(0x00008000u) == 0x0000);  // subnormal tie, even (no flush of subnormals)
    CHECK(one(0x00018000u) == 0x0002);  // subnormal tie, odd: up
    CHECK(one(0x7f800001u) == 0x7fc0);  // signalling NaN: quiet
    CHECK(one(0xff800000u) == 0xff80);
}

TEST_CASE("fp16 and bf16: widening is exact, and accumulation adds the exact value once") {
    std::vector<std::uint16_t> all(65536);
    for (std::uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<std::uint16_t>(h);
    for (const isa path : paths()) {
        CAPTURE(to_string(path));
        std::vector<float> f(65536), b(65536);
        from_f16(all.data(), 65536, f.data(), path);
        from_bf16(all.data(), 65536, b.data(), path);
        for (std::uint32_t h = 0; h < 65536; ++h) {
            const double want = reference_from_f16(static_cast<std::uint16_t>(h));
            if (std::isnan(want))
                REQUIRE(std::isnan(f[h]));
            else
                REQUIRE(static_cast<double>(f[h]) == want);
            REQUIRE(to_bits(b[h]) == h << 16);
        }
        // acc + value, correctly rounded: the double sum of two floats rounded to float.
        const auto acc0 = gradients(65536, 5);
        std::vector<float> acc = acc0;
        accumulate_f16(all.data(), 65536, acc.data(), path);
        for (std::uint32_t h = 0; h < 65536; ++h) {
            const float want =
                static_cast<float>(static_cast<double>(acc0[h]) + reference_from_f16(static_cast<std::uint16_t>(h)));
            if (std::isnan(want))
                REQUIRE(std::isnan(acc[h]));
            else
                REQUIRE(acc[h] == want);
        }
        acc = acc0;
        accumulate_bf16(all.data(), 65536, acc.data(), path);
        for (std::uint32_t h = 0; h < 65536; ++h) {
            const float want =
                static_cast<float>(static_cast<double>(acc0[h]) + static_cast<double>(from_bits(h << 16)));
            if (std::isnan(want))
                REQUIRE(std::isnan(acc[h]));
            else
                REQUIRE(acc[h] == want);
        }
    }
}

TEST_CASE("fp16 and bf16: round trip error within half an ulp of the format") {
    const auto v = gradients(10000, 9);
    std::vector<std::uint16_t> h(v.size());
    std::vector<float> back(v.size());
    to_f16(v.data(), 10000, h.data());
    from_f16(h.data(), 10000, back.data());
    for (std::size_t i = 0; i < v.size(); ++i) {
        const double a = std::fabs(v[i]);
        if (a < 6.103515625e-05 || a > 65504) continue;  // normal halves only
        REQUIRE(std::fabs(static_cast<double>(back[i]) - v[i]) <= a * std::ldexp(1.0, -11));
    }
    to_bf16(v.data(), 10000, h.data());
    from_bf16(h.data(), 10000, back.data());
    for (std::size_t i = 0; i < v.size(); ++i)
        REQUIRE(std::fabs(static_cast<double>(back[i]) - v[i]) <= std::fabs(v[i]) * std::ldexp(1.0, -8));
}
