// tests/unit/compress/test_error_feedback.cpp: error feedback: over many steps the decompressed values
// sum to the inputs' sum less the last residual (summed in double, independently), and the residual
// stays bounded; reset on a new shape; save and restore round trip, and every corrupt checkpoint
// refused with the state unchanged.
#include "helpers.hpp"

#include <shunt/compress/compress.hpp>
#include <shunt/compress/error_feedback.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace compress_test;

namespace {

params with(method m) {
    params p;
    p.kind = m;
    p.block = 64;
    p.stride = 20;
    p.seed = 11;
    return p;
}

double max_abs(std::span<const float> r) {
    double m = 0;
    for (const float x : r) m = std::max(m, std::fabs(static_cast<double>(x)));
    return m;
}

}  // namespace

TEST_CASE("error feedback: decompressed values sum to the inputs' sum, the residual bounded") {
    for (const method m : {method::sign, method::top_k, method::random_k, method::int4, method::int8, method::fp16}) {
        CAPTURE(to_string(m));
        const params p = with(m);
        const std::int64_t n = 64 * 16 + 5;
        error_feedback ef;
        std::vector<double> sum_in(static_cast<std::size_t>(n), 0.0), sum_out(sum_in.size(), 0.0);
        std::vector<std::byte> c(static_cast<std::size_t>(compressed_bytes(p, n)));
        std::vector<float> out(static_cast<std::size_t>(n));
        double worst_early = 0, worst_late = 0, grad_max = 0;
        const int steps = 400;
        for (int s = 0; s < steps; ++s) {
            auto g = gradients(n, static_cast<std::uint64_t>(s) + 1000);  // a fresh gradient every step
            for (auto& x : g) x = std::max(-10.0f, std::min(10.0f, x));
            for (std::size_t i = 0; i < g.size(); ++i)
                sum_in[i] += g[i], grad_max = std::max(grad_max, std::fabs(static_cast<double>(g[i])));
            ef.compress(p, g.data(), n, c.data(), static_cast<std::uint64_t>(s));
            decompress(p, c.data(), n, out.data(), static_cast<std::uint64_t>(s));
            for (std::size_t i = 0; i < out.size(); ++i) sum_out[i] += out[i];
            // the residual's size over the second quarter of the run and over the last
            if (s >= steps / 4 && s < steps / 2) worst_early = std::max(worst_early, max_abs(ef.residual()));
            if (s >= 3 * steps / 4) worst_late = std::max(worst_late, max_abs(ef.residual()));
        }
        // What was sent plus what is held back is what came in (to float rounding over the steps).
        const auto r = ef.residual();
        double err = 0;
        for (std::int64_t i = 0; i < n; ++i) err = std::max(err, std::fabs(sum_in[i] - sum_out[i] - r[i]));
        CHECK(err <= 1e-4 * steps * grad_max);
        // Bounded: the end of the run holds back about what its second quarter did (no growth),
        // a few dozen gradients' worth at most.
        CHECK(worst_late <= 3.0 * worst_early + 1e-6);
        CHECK(worst_late <= 60 * grad_max);
    }
}

TEST_CASE("error feedback: apply adds the residual, update keeps what compression dropped") {
    error_feedback ef;
    ef.prepare(4, element::f32);
    const float in[4] = {1, 2, 3, 4};
    float corrected[4], dec[4] = {0.5f, 2, 3.25f, 0};
    ef.apply(in, 4, corrected);
    CHECK(corrected[0] == 1.0f);
    ef.update(corrected, dec, 4);
    CHECK(ef.residual()[0] == 0.5f);
    CHECK(ef.residual()[2] == -0.25f);
    ef.apply(in, 4, corrected);
    CHECK(corrected[3] == 8.0f);
    CHECK_THROWS_AS(ef.apply(in, 3, corrected), shunt::error);  // not the prepared shape
}

TEST_CASE("error feedback: a new shape starts from zeros") {
    const params p = with(method::sign);
    error_feedback ef;
    const auto g = gradients(200, 1);
    std::vector<std::byte> c(static_cast<std::size_t>(compressed_bytes(p, 200)));
    ef.compress(p, g.data(), 200, c.data());
    CHECK(max_abs(ef.residual()) > 0);
    ef.prepare(200, element::f32);
    CHECK(max_abs(ef.residual()) > 0);  // the same shape keeps it
    ef.prepare(100, element::f32);
    CHECK(ef.count() == 100);
    CHECK(max_abs(ef.residual()) == 0);
    ef.compress(p, g.data(), 100, c.data());
    ef.prepare(100, element::bf16);  // another element type is another tensor
    CHECK(max_abs(ef.residual()) == 0);
    ef.reset();
    CHECK(ef.count() == -1);
    CHECK(ef.residual().empty());
}

TEST_CASE("error feedback: save and restore continue the same run; corrupt checkpoints are refused") {
    const params p = with(method::top_k);
    const std::int64_t n = 777;
    error_feedback a;
    std::vector<std::byte> ca(static_cast<std::size_t>(compressed_bytes(p, n))), cb(ca.size());
    for (int s = 0; s < 5; ++s) a.compress(p, gradients(n, static_cast<std::uint64_t>(s)).data(), n, ca.data());
    const std::vector<std::byte> saved = a.save();
    error_feedback b;
    b.restore(saved);
    CHECK(b.count() == n);
    CHECK(b.type() == element::f32);
    CHECK(std::memcmp(b.residual().data(), a.residual().data(), static_cast<std::size_t>(n) * 4) == 0);
    for (int s = 5; s < 9; ++s) {
        const auto g = gradients(n, static_cast<std::uint64_t>(s));
        a.compress(p, g.data(), n, ca.data());
        b.compress(p, g.data(), n, cb.data());
        CHECK(ca == cb);
    }
    // An empty state round-trips too.
    error_feedback e, f;
    f.restore(e.save());
    CHECK(f.count() == -1);

    const std::vector<float> before(b.residual().begin(), b.residual().end());
    auto refused = [&](std::vector<std::byte> bad, const char* what) {
        CAPTURE(what);
        CHECK_THROWS_AS(b.restore(bad), shunt::error);
        CHECK(b.count() == n);
        CHECK(std::memcmp(b.residual().data(), before.data(), before.size() * 4) == 0);
    };
    refused(std::vector<std::byte>(saved.begin(), saved.begin() + 10), "truncated header");
    refused(std::vector<std::byte>(saved.begin(), saved.end() - 4), "truncated residual");
    auto flipped = saved;
    flipped[100] ^= std::byte{1};
    refused(flipped, "a flipped bit");
    auto magic = saved;
    magic[0] = std::byte{'X'};
    refused(magic, "another format");
    auto version = saved;
    version[8] = std::byte{9};
    refused(version, "another version");
    auto huge = saved;
    const std::int64_t big = std::int64_t{1} << 60;
    std::memcpy(huge.data() + 16, &big, 8);
    refused(huge, "a count the bytes cannot hold");
    auto type = saved;
    type[12] = std::byte{7};
    refused(type, "an unknown element type");
    refused({}, "nothing");
}

TEST_CASE("error feedback: bf16 inputs keep float32 residuals") {
    const params p = with(method::sign);
    const std::int64_t n = 300;
    const auto v = gradients(n, 2);
    std::vector<bf16> b(static_cast<std::size_t>(n));
    std::vector<float> bv(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < v.size(); ++i)
        b[i].bits = reference_bf16(v[i]), bv[i] = from_bits(static_cast<std::uint32_t>(b[i].bits) << 16);
    error_feedback x, y;
    std::vector<std::byte> cx(static_cast<std::size_t>(compressed_bytes(p, n))), cy(cx.size());
    x.compress(p, b.data(), n, cx.data());
    y.compress(p, bv.data(), n, cy.data());
    CHECK(cx == cy);
    CHECK(x.type() == element::bf16);
    CHECK(std::memcmp(x.residual().data(), y.residual().data(), static_cast<std::size_t>(n) * 4) == 0);
}
