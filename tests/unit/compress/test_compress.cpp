// tests/unit/compress/test_compress.cpp: what every compressor shares: compressed sizes (written
// exactly, never past), parameter checks, the summable forms and schemes, names, the finiteness
// guard, and compress/decompress of every method through the common entry points on every path.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "helpers.hpp"

#include <shunt/compress/compress.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

using namespace compress_test;

TEST_CASE("compress: sizes of the formats") {
    params p;
    p.block = 256;
    p.stride = 100;
    const std::int64_t n = 1000;
    p.kind = method::fp16;
    CHECK(compressed_bytes(p, n) == 2000);
    p.kind = method::bf16;
    CHECK(compressed_bytes(p, n) == 2000);
    p.kind = method::int8;
    CHECK(compressed_bytes(p, n) == 4 * 4 + 1000);
    p.kind = method::int4;
    CHECK(compressed_bytes(p, n) == 4 * 4 + 500);
    CHECK(compressed_bytes(p, 1001) == 4 * 4 + 501);
    p.kind = method::sign;
    CHECK(compressed_bytes(p, n) == 4 * 4 + 125);
    CHECK(compressed_bytes(p, 1001) == 4 * 4 + 126);
    p.kind = method::random_k;
    CHECK(compressed_bytes(p, n) == 4 * 10);
    CHECK(compressed_bytes(p, 1001) == 4 * 11);
    p.kind = method::top_k;
    CHECK(compressed_bytes(p, n) == 8 * 10);
    CHECK(compressed_bytes(p, 0) == 0);
    CHECK(ratio(p, n) == doctest::Approx(80.0 / 4000.0));
}

TEST_CASE("compress: every method writes exactly its size and decompresses on every path") {
    for (const method m : all_methods)
        for (const std::int64_t n : {0, 1, 5, 17, 300, 1031}) {
            CAPTURE(to_string(m));
            CAPTURE(n);
            params p;
            p.kind = m;
            p.block = 32;
            p.stride = 3;
            p.seed = 8;
            const auto v = gradients(n, 3);
            guarded want(compressed_bytes(p, n));
            compress(p, v.data(), n, want.data(), 2, isa::scalar);
            guarded_floats dec(n), acc(n, 1.0f);
            decompress(p, want.data(), n, dec.data(), 2, isa::scalar);
            decompress_accumulate(p, want.data(), n, acc.data(), 2, isa::scalar);
            for (std::int64_t i = 0; i < n; ++i) REQUIRE(acc.v[i] == dec.v[i] + 1.0f);
            for (const isa path : paths()) {
                guarded got(compressed_bytes(p, n));
                compress(p, v.data(), n, got.data(), 2, path);
                CHECK(std::memcmp(got.data(), want.data(), static_cast<std::size_t>(compressed_bytes(p, n))) == 0);
                CHECK(got.intact(compressed_bytes(p, n)));
                guarded_floats d(n);
                decompress(p, got.data(), n, d.data(), 2, path);
                CHECK(same_bits(d.data(), dec.data(), n));
                CHECK(d.intact(n));
            }
        }
}

TEST_CASE("compress: parameters and counts are checked") {
    const float x[4] = {};
    std::byte out[64];
    params p;
    p.kind = method::int8;
    p.block = 24;  // not a multiple of 16
    CHECK_THROWS_AS(compress(p, x, 4, out), shunt::error);
    p.block = 0;
    CHECK_THROWS_AS(compress(p, x, 4, out), shunt::error);
    p.block = std::int64_t{1} << 25;
    CHECK_THROWS_AS(compress(p, x, 4, out), shunt::error);
    p.block = 16;
    p.stride = 0;
    CHECK_THROWS_AS(compress(p, x, 4, out), shunt::error);
    p.stride = 1;
    p.kind = static_cast<method>(99);
    CHECK_THROWS_AS(compress(p, x, 4, out), shunt::error);
    p.kind = method::int8;
    CHECK_THROWS_AS(compress(p, x, -1, out), shunt::error);
    p.kind = method::top_k;  // 32-bit indices
    CHECK_FALSE(fits(p, std::int64_t{1} << 32));
    CHECK_THROWS_AS(check_count(p, std::int64_t{1} << 32), shunt::unsupported);
    CHECK(fits(p, (std::int64_t{1} << 32) - 1));
    p.kind = method::random_k;
    CHECK_FALSE(fits(p, std::int64_t{1} << 33));
    p.stride = 4;
    CHECK(fits(p, std::int64_t{1} << 33));
    p.kind = method::int8;
    CHECK(fits(p, std::int64_t{1} << 40));
    CHECK_FALSE(fits(p, std::numeric_limits<std::int64_t>::max()));  // no size overflows
    CHECK_THROWS_AS(check_count(p, std::numeric_limits<std::int64_t>::max()), shunt::unsupported);
}

TEST_CASE("compress: summable forms, schemes and names") {
    CHECK(summable(method::fp16) == sum_form::f16);
    CHECK(summable(method::bf16) == sum_form::bf16);
    CHECK(summable(method::random_k) == sum_form::f32);
    for (const method m : {method::int8, method::int4, method::top_k, method::sign})
        CHECK(summable(m) == sum_form::none);
    CHECK(preferred_scheme(method::fp16) == scheme::allreduce);
    CHECK(preferred_scheme(method::int8) == scheme::allgather);
    CHECK(preferred_scheme(method::top_k) == scheme::allgather);
    CHECK(preferred_scheme(method::sign) == scheme::alltoall_allgather);
    CHECK(needs_error_feedback(method::sign));
    CHECK_FALSE(needs_error_feedback(method::fp16));
    for (const method m : all_methods) CHECK(method_from_string(to_string(m)) == m);
    CHECK_FALSE(method_from_string("int9").has_value());
}

TEST_CASE("compress: the finiteness guard sees NaN and Inf in inputs and in compressed forms") {
    auto v = gradients(1000, 1);
    CHECK(all_finite(v.data(), 1000));
    std::vector<f16> h(1000);
    for (std::size_t i = 0; i < h.size(); ++i) h[i].bits = reference_f16(v[i]);
    CHECK(all_finite(h.data(), 1000));
    for (const method m : all_methods) {
        params p;
        p.kind = m;
        p.block = 32;
        p.stride = 1;
        std::vector<std::byte> c(static_cast<std::size_t>(compressed_bytes(p, 1000)));
        compress(p, v.data(), 1000, c.data());
        CHECK(compressed_finite(p, c.data(), 1000));
    }
    v[500] = std::numeric_limits<float>::infinity();
    CHECK_FALSE(all_finite(v.data(), 1000));
    v[500] = 1e30f;  // finite, but beyond binary16: the FP16 form holds Inf
    CHECK(all_finite(v.data(), 1000));
    params p;
    p.kind = method::fp16;
    std::vector<std::byte> c(2000);
    compress(p, v.data(), 1000, c.data());
    CHECK_FALSE(compressed_finite(p, c.data(), 1000));
    h[3].bits = 0x7e00;
    CHECK_FALSE(all_finite(h.data(), 1000));
}

TEST_CASE("compress: f16 and bf16 inputs to the casts") {
    const std::int64_t n = 3001;
    const auto v = gradients(n, 4);
    std::vector<f16> h(static_cast<std::size_t>(n));
    std::vector<bf16> b(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < v.size(); ++i) h[i].bits = reference_f16(v[i]), b[i].bits = reference_bf16(v[i]);
    params p;
    std::vector<std::uint16_t> out(static_cast<std::size_t>(n));
    p.kind = method::fp16;
    compress(p, h.data(), n, reinterpret_cast<std::byte*>(out.data()));  // the same format: copied
    for (std::size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == h[i].bits);
    compress(p, b.data(), n, reinterpret_cast<std::byte*>(out.data()));  // bf16 to binary16
    for (std::size_t i = 0; i < out.size(); ++i)
        REQUIRE(out[i] == reference_f16(from_bits(static_cast<std::uint32_t>(b[i].bits) << 16)));
    p.kind = method::bf16;
    compress(p, h.data(), n, reinterpret_cast<std::byte*>(out.data()));
    for (std::size_t i = 0; i < out.size(); ++i)
        REQUIRE(out[i] == reference_bf16(static_cast<float>(reference_from_f16(h[i].bits))));
}
