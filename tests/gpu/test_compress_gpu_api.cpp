// tests/gpu/test_compress_gpu_api.cpp: the device compressors' API where no device can run them (no
// GPU, or a build without CUDA and its stub library): every call reports shunt::unsupported, bad
// parameters shunt::error, and nothing is printed; top-k's workspace size. Runs everywhere.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <shunt/compress/gpu.hpp>
#include <shunt/errors.hpp>
#include <shunt/gpu/pack.hpp>

#include <cstdint>

namespace sc = shunt::compress;

TEST_CASE("compress gpu: top-k alone needs a workspace, growing with the count") {
    for (const sc::method m : sc::all_methods) {
        const sc::params p = sc::defaults(m);
        if (m != sc::method::top_k) {
            CHECK(sc::gpu::workspace_bytes(p, 1 << 20) == 0);
            continue;
        }
        CHECK(sc::gpu::workspace_bytes(p, 0) == 0);
        CHECK(sc::gpu::workspace_bytes(p, 1) >= 4 * 2048);
        CHECK(sc::gpu::workspace_bytes(p, std::int64_t{1} << 30) > sc::gpu::workspace_bytes(p, 1 << 20));
    }
}

TEST_CASE("compress gpu: without a device every call reports unsupported") {
    if (shunt::gpu::device_available()) {
        MESSAGE("a device is present: the gpu suite's gpu_compress checks the kernels");
        return;
    }
    float in[64] = {};
    float out[64] = {};
    std::byte packed[512] = {};
    for (const sc::method m : sc::all_methods) {
        const sc::params p = sc::defaults(m);
        CHECK_THROWS_AS(sc::gpu::compress(p, in, 64, packed, packed, nullptr), shunt::unsupported);
        CHECK_THROWS_AS(sc::gpu::decompress(p, packed, 64, out, nullptr), shunt::unsupported);
        CHECK_THROWS_AS(sc::gpu::decompress_accumulate(p, packed, 64, out, nullptr), shunt::unsupported);
    }
    CHECK_THROWS_AS(sc::gpu::combine(sc::sum_form::f16, packed, packed, 8, nullptr), shunt::unsupported);
    CHECK_THROWS_AS(sc::gpu::feedback_apply(in, in, out, 64, nullptr), shunt::unsupported);
    CHECK_THROWS_AS(sc::gpu::feedback_update(in, in, out, 64, nullptr), shunt::unsupported);
    sc::params bad = sc::defaults(sc::method::int8);
    bad.block = 7;
    CHECK_THROWS_AS(sc::gpu::compress(bad, in, 64, packed, nullptr, nullptr), shunt::error);
}
