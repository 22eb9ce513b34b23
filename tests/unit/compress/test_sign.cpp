// tests/unit/compress/test_sign.cpp: the 1-bit sign compressor: every path as the scalar one, bit for
// bit (scales summed in the documented order); scales against the mean magnitude in double; bits
// against the sign bits; NaN and Inf blocks; unused bits zero; decompression to +-scale.
#include "helpers.hpp"

#include <shunt/compress/compress.hpp>
#include <shunt/compress/sign.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

using namespace compress_test;

namespace {

params sg(std::int64_t block) {
    params p;
    p.kind = method::sign;
    p.block = block;
    return p;
}

}  // namespace

TEST_CASE("sign: every path writes the scalar path's bytes and decompresses alike") {
    for (const std::int64_t block : {16, 48, 256, 4096}) {
        std::vector<std::int64_t> counts = odd_counts();
        counts.push_back(2 * block + 13);
        for (const std::int64_t n : counts) {
            CAPTURE(block);
            CAPTURE(n);
            const params p = sg(block);
            auto v = gradients(n, static_cast<std::uint64_t>(n + block));
            if (n > 3) v[2] = -0.0f;
            guarded want(compressed_bytes(p, n));
            sign(p, v.data(), n, want.data(), isa::scalar);
            CHECK(want.intact(compressed_bytes(p, n)));
            guarded_floats want_out(n), want_acc(n, 3.0f);
            unsign<false>(p, want.data(), n, want_out.data(), isa::scalar);
            unsign<true>(p, want.data(), n, want_acc.data(), isa::scalar);
            for (const isa path : paths()) {
                CAPTURE(to_string(path));
                guarded got(compressed_bytes(p, n));
                sign(p, v.data(), n, got.data(), path);
                CHECK(std::memcmp(got.data(), want.data(), static_cast<std::size_t>(compressed_bytes(p, n))) == 0);
                CHECK(got.intact(compressed_bytes(p, n)));
                guarded_floats out(n), acc(n, 3.0f);
                unsign<false>(p, want.data(), n, out.data(), path);
                unsign<true>(p, want.data(), n, acc.data(), path);
                CHECK(same_bits(out.data(), want_out.data(), n));
                CHECK(same_bits(acc.data(), want_acc.data(), n));
                CHECK(out.intact(n));
                CHECK(acc.intact(n));
            }
        }
    }
}

TEST_CASE("sign: scale is the block's mean magnitude, bits its signs, unused bits zero") {
    const params p = sg(64);
    const std::int64_t n = 64 * 7 + 13;
    auto v = gradients(n, 99);
    v[5] = -0.0f;
    v[6] = 0.0f;
    std::vector<std::byte> c(static_cast<std::size_t>(compressed_bytes(p, n)));
    compress(p, v.data(), n, c.data());
    const std::int64_t nb = blocks(p, n);
    CHECK(compressed_bytes(p, n) == 4 * nb + (n + 7) / 8);
    for (std::int64_t b = 0; b < nb; ++b) {
        const std::int64_t first = b * 64, last = std::min(n, first + 64);
        double sum = 0;
        for (std::int64_t i = first; i < last; ++i) sum += std::fabs(static_cast<double>(v[i]));
        float s;
        std::memcpy(&s, c.data() + 4 * b, 4);
        CHECK(s == doctest::Approx(sum / static_cast<double>(last - first)).epsilon(1e-5));
    }
    const auto* bits = reinterpret_cast<const std::uint8_t*>(c.data() + 4 * nb);
    for (std::int64_t i = 0; i < n; ++i) REQUIRE(((bits[i / 8] >> (i % 8)) & 1) == (std::signbit(v[i]) ? 0 : 1));
    CHECK((bits[(n - 1) / 8] >> (n % 8)) == 0);  // the unused bits of the last byte
    std::vector<float> out(static_cast<std::size_t>(n));
    decompress(p, c.data(), n, out.data());
    for (std::int64_t i = 0; i < n; ++i) {
        float s;
        std::memcpy(&s, c.data() + 4 * (i / 64), 4);
        REQUIRE(out[i] == (std::signbit(v[i]) ? -s : s));
    }
}

TEST_CASE("sign: a block with NaN or Inf, or an overflowing sum, gets a NaN scale") {
    const params p = sg(16);
    const std::int64_t n = 16 * 4;
    auto v = gradients(n, 5);
    v[3] = std::numeric_limits<float>::quiet_NaN();
    v[20] = std::numeric_limits<float>::infinity();
    for (std::int64_t i = 32; i < 48; ++i) v[static_cast<std::size_t>(i)] = 3e38f;  // sum overflows
    for (const isa path : paths()) {
        std::vector<std::byte> c(static_cast<std::size_t>(compressed_bytes(p, n)));
        sign(p, v.data(), n, c.data(), path);
        float s[4];
        std::memcpy(s, c.data(), 16);
        CHECK(std::isnan(s[0]));
        CHECK(std::isnan(s[1]));
        CHECK(std::isnan(s[2]));
        CHECK(std::isfinite(s[3]));
        CHECK_FALSE(compressed_finite(p, c.data(), n));
    }
}
