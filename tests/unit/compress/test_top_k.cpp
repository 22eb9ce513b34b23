// tests/unit/compress/test_top_k.cpp: top-k against brute force (a full sort by magnitude, ties to
// the lower index), with many ties, NaN, Inf and zeros; every path as the scalar one; expansion and
// accumulation of the form; a corrupt index skipped.
#include "helpers.hpp"

#include <shunt/compress/compress.hpp>
#include <shunt/compress/top_k.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

using namespace compress_test;

namespace {

params tk(std::int64_t stride) {
    params p;
    p.kind = method::top_k;
    p.stride = stride;
    return p;
}

/// The k indices of largest magnitude by a stable sort of the magnitudes, as doubles (NaN first,
/// then Inf), ascending.
std::vector<std::uint32_t> brute_force(const std::vector<float>& v, std::int64_t k) {
    std::vector<std::uint32_t> order(v.size());
    std::iota(order.begin(), order.end(), 0u);
    auto rank = [&](std::uint32_t i) {
        const double a = std::fabs(static_cast<double>(v[i]));
        return std::isnan(a) ? std::numeric_limits<double>::max() * 2 : a;  // +Inf; NaN above it
    };
    std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
        const bool na = std::isnan(v[a]), nb = std::isnan(v[b]);
        if (na != nb) return na;
        return rank(a) > rank(b);
    });
    order.resize(static_cast<std::size_t>(k));
    std::sort(order.begin(), order.end());
    return order;
}

std::vector<float> tricky(std::int64_t n, std::uint64_t seed, int kind) {
    auto v = gradients(n, seed);
    for (std::int64_t i = 0; i < n; ++i) {
        float& x = v[static_cast<std::size_t>(i)];
        if (kind == 1) x = static_cast<float>(static_cast<int>(x * 3) % 4);  // few distinct values: ties
        if (kind == 2) x = (i % 5 == 0) ? 1.0f : (i % 7 == 0 ? -1.0f : 0.0f);  // mostly zeros, many equal
        if (kind == 3 && i % 97 == 3) x = std::numeric_limits<float>::infinity() * ((i % 2) ? 1.0f : -1.0f);
        if (kind == 3 && i % 89 == 5) x = std::numeric_limits<float>::quiet_NaN();
        if (kind == 4) x = from_bits(to_bits(x) & 0xfff00000u);  // keys collide in the later radix rounds
    }
    return v;
}

}  // namespace

TEST_CASE("top_k: the k largest magnitudes, ties to the lower index, on every path") {
    std::vector<std::int64_t> counts = odd_counts();
    counts.push_back(9000);
    counts.push_back(70001);
    for (const std::int64_t stride : {1, 2, 10, 100, 1000})
        for (const std::int64_t n : counts)
            for (int kind = 0; kind < 5; ++kind) {
                CAPTURE(stride);
                CAPTURE(n);
                CAPTURE(kind);
                const params p = tk(stride);
                const std::int64_t k = kept(p, n);
                const auto v = tricky(n, static_cast<std::uint64_t>(n + kind), kind);
                const auto want = brute_force(v, k);
                for (const isa path : paths()) {
                    CAPTURE(to_string(path));
                    guarded c(compressed_bytes(p, n));
                    top_k(p, v.data(), n, c.data(), path);
                    REQUIRE(c.intact(compressed_bytes(p, n)));
                    std::vector<std::uint32_t> idx(static_cast<std::size_t>(k));
                    std::memcpy(idx.data(), c.data(), static_cast<std::size_t>(4 * k));
                    REQUIRE(idx == want);
                    for (std::int64_t i = 0; i < k; ++i) {
                        float x;
                        std::memcpy(&x, c.data() + 4 * k + 4 * i, 4);
                        REQUIRE(to_bits(x) == to_bits(v[idx[static_cast<std::size_t>(i)]]));
                    }
                }
            }
}

TEST_CASE("top_k: expansion and accumulation put the values at their indices") {
    const params p = tk(10);
    const std::int64_t n = 5003, k = kept(p, n);
    const auto v = gradients(n, 17);
    std::vector<std::byte> c(static_cast<std::size_t>(compressed_bytes(p, n)));
    top_k(p, v.data(), n, c.data());
    const auto idx = brute_force(v, k);
    std::vector<float> want(static_cast<std::size_t>(n), 0.0f), want_acc(static_cast<std::size_t>(n), 2.0f);
    for (const auto i : idx) want[i] = v[i], want_acc[i] += v[i];
    for (const isa path : paths()) {
        guarded_floats out(n, 7.0f), acc(n, 2.0f);
        decompress(p, c.data(), n, out.data(), 0, path);
        decompress_accumulate(p, c.data(), n, acc.data(), 0, path);
        CHECK(same_bits(out.data(), want.data(), n));
        CHECK(same_bits(acc.data(), want_acc.data(), n));
        CHECK(out.intact(n));
        CHECK(acc.intact(n));
    }
    // A corrupt index (beyond n) is skipped, never written.
    const std::uint32_t bad = static_cast<std::uint32_t>(n + 1000);
    std::memcpy(c.data() + 4 * (k - 1), &bad, 4);
    for (const isa path : paths()) {
        guarded_floats out(n);
        decompress(p, c.data(), n, out.data(), 0, path);
        CHECK(out.intact(n));
    }
}

TEST_CASE("top_k: f16 and bf16 inputs select and keep their float values") {
    const params p = tk(7);
    const std::int64_t n = 20011, k = kept(p, n);
    const auto v = gradients(n, 23);
    std::vector<bf16> b(static_cast<std::size_t>(n));
    std::vector<float> bv(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < v.size(); ++i)
        b[i].bits = reference_bf16(v[i]), bv[i] = from_bits(static_cast<std::uint32_t>(b[i].bits) << 16);
    std::vector<std::byte> want(static_cast<std::size_t>(compressed_bytes(p, n))), got(want.size());
    top_k(p, bv.data(), n, want.data(), isa::scalar);
    CHECK(std::vector<std::uint32_t>(reinterpret_cast<const std::uint32_t*>(want.data()),
                                     reinterpret_cast<const std::uint32_t*>(want.data()) + k) == brute_force(bv, k));
    for (const isa path : paths()) {
        top_k(p, b.data(), n, got.data(), path);
        CHECK(got == want);
    }
}
