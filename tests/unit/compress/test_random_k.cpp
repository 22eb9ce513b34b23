// tests/unit/compress/test_random_k.cpp: random-k: the same indices on two "ranks" with the same seed
// and step (so compressed vectors sum), others for another seed or step; one index per stratum,
// uniform within it; values and expansion against a plain gather; every path as the scalar one.
#include "helpers.hpp"

#include <shunt/compress/combine.hpp>
#include <shunt/compress/compress.hpp>
#include <shunt/compress/random_k.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

using namespace compress_test;

namespace {

params rk(std::int64_t stride, std::uint64_t seed) {
    params p;
    p.kind = method::random_k;
    p.stride = stride;
    p.seed = seed;
    return p;
}

std::vector<std::int64_t> indices(const params& p, std::int64_t n, std::uint64_t step) {
    std::vector<std::int64_t> idx(static_cast<std::size_t>(kept(p, n)));
    random_k_indices(p, n, idx.data(), step);
    return idx;
}

}  // namespace

TEST_CASE("random_k: one index per stratum, ascending; the same on every rank for a seed and step") {
    for (const std::int64_t stride : {1, 3, 16, 100, 1000})
        for (const std::int64_t n : {1, 2, 99, 100, 101, 1000, 12345}) {
            CAPTURE(stride);
            CAPTURE(n);
            const params rank0 = rk(stride, 42), rank1 = rk(stride, 42);
            const auto a = indices(rank0, n, 7), b = indices(rank1, n, 7);
            CHECK(a == b);
            CHECK(static_cast<std::int64_t>(a.size()) == (n + stride - 1) / stride);
            for (std::size_t i = 0; i < a.size(); ++i) {
                REQUIRE(a[i] >= static_cast<std::int64_t>(i) * stride);
                REQUIRE(a[i] < std::min(n, static_cast<std::int64_t>(i + 1) * stride));
            }
            if (stride >= 16 && n >= 1000) {
                CHECK(indices(rank0, n, 8) != a);  // another step
                CHECK(indices(rk(stride, 43), n, 7) != a);  // another seed
            }
        }
}

TEST_CASE("random_k: indices uniform within their stratum") {
    const params p = rk(10, 3);
    const std::int64_t n = 100000;
    std::vector<double> count(10, 0.0);
    for (std::uint64_t step = 0; step < 20; ++step)
        for (const std::int64_t j : indices(p, n, step)) count[static_cast<std::size_t>(j % 10)] += 1;
    // chi-square with 9 degrees of freedom: 27.9 is its 99.9th percentile
    const double expected = 20.0 * n / 10 / 10;
    double chi2 = 0;
    for (const double c : count) chi2 += (c - expected) * (c - expected) / expected;
    CHECK(chi2 < 27.9);
}

TEST_CASE("random_k: values gathered, expanded and accumulated as a plain loop does, on every path") {
    for (const std::int64_t stride : {1, 2, 7, 16, 100})
        for (const std::int64_t n : odd_counts()) {
            CAPTURE(stride);
            CAPTURE(n);
            const params p = rk(stride, 9);
            const auto v = gradients(n, static_cast<std::uint64_t>(n * 31 + stride));
            const auto idx = indices(p, n, 4);
            const std::int64_t k = kept(p, n);
            for (const isa path : paths()) {
                CAPTURE(to_string(path));
                guarded_floats c(k);
                random_k(p, v.data(), n, c.data(), 4, path);
                CHECK(c.intact(k));
                for (std::int64_t i = 0; i < k; ++i) REQUIRE(c.v[i] == v[idx[i]]);
                guarded_floats dense(n, 9.0f), acc(n, 0.5f);
                random_k_expand<false>(p, c.data(), n, dense.data(), 4, path);
                random_k_expand<true>(p, c.data(), n, acc.data(), 4, path);
                std::vector<float> want(static_cast<std::size_t>(n), 0.0f), want_acc(static_cast<std::size_t>(n), 0.5f);
                for (std::int64_t i = 0; i < k; ++i) want[idx[i]] = v[idx[i]], want_acc[idx[i]] += v[idx[i]];
                CHECK(same_bits(dense.data(), want.data(), n));
                CHECK(same_bits(acc.data(), want_acc.data(), n));
                CHECK(dense.intact(n));
                CHECK(acc.intact(n));
            }
        }
}

TEST_CASE("random_k: compressed vectors of two ranks sum directly (sum_form f32)") {
    const params p = rk(8, 1234);
    const std::int64_t n = 10007, k = kept(p, n);
    CHECK(summable(method::random_k) == sum_form::f32);
    const auto a = gradients(n, 1), b = gradients(n, 2);
    std::vector<std::byte> ca(static_cast<std::size_t>(compressed_bytes(p, n))), cb(ca.size());
    compress(p, a.data(), n, ca.data(), 5);
    compress(p, b.data(), n, cb.data(), 5);
    combine(sum_form::f32, ca.data(), cb.data(), k);  // what MPI_SUM on MPI_FLOAT does
    std::vector<float> sum(static_cast<std::size_t>(n));
    decompress(p, cb.data(), n, sum.data(), 5);
    const auto idx = indices(p, n, 5);
    std::vector<float> want(static_cast<std::size_t>(n), 0.0f);
    for (const auto j : idx) want[static_cast<std::size_t>(j)] = a[j] + b[j];
    CHECK(same_bits(sum.data(), want.data(), n));
}

TEST_CASE("random_k: f16 and bf16 inputs give their float values") {
    const params p = rk(5, 2);
    const std::int64_t n = 333;
    const auto v = gradients(n, 3);
    std::vector<bf16> b(static_cast<std::size_t>(n));
    std::vector<f16> h(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < v.size(); ++i) b[i].bits = reference_bf16(v[i]), h[i].bits = reference_f16(v[i]);
    const auto idx = indices(p, n, 0);
    for (const isa path : paths()) {
        std::vector<float> c(static_cast<std::size_t>(kept(p, n)));
        random_k(p, b.data(), n, c.data(), 0, path);
        for (std::size_t i = 0; i < c.size(); ++i)
            CHECK(to_bits(c[i]) == static_cast<std::uint32_t>(b[idx[i]].bits) << 16);
        random_k(p, h.data(), n, c.data(), 0, path);
        for (std::size_t i = 0; i < c.size(); ++i)
            CHECK(c[i] == static_cast<float>(reference_from_f16(h[idx[i]].bits)));
    }
}
