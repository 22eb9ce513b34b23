// tests/gpu/test_gpu_memory.cpp: pointer classification and the pools where there is no device (or no
// CUDA in the build): everything is host memory, nothing fails, nothing is printed. Runs everywhere.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <shunt/errors.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/gpu/pack.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

/// Runs `f` with stdout and stderr sent to a temporary file; returns how many bytes it printed.
template <class F>
long printed_by(F&& f) {
    std::fflush(stdout);
    std::fflush(stderr);
    std::FILE* tmp = std::tmpfile();
    REQUIRE(tmp != nullptr);
    const int out = dup(1), err = dup(2);
    dup2(fileno(tmp), 1);
    dup2(fileno(tmp), 2);
    f();
    std::fflush(stdout);
    std::fflush(stderr);
    dup2(out, 1);
    dup2(err, 2);
    close(out);
    close(err);
    std::fseek(tmp, 0, SEEK_END);
    const long n = std::ftell(tmp);
    std::fclose(tmp);
    return n;
}

}  // namespace

TEST_CASE("host pointers classify as host, silently, and are not cached") {
    int on_stack = 0;
    std::vector<char> on_heap(1 << 20);
    void* big = std::malloc(64 << 20);
    REQUIRE(big != nullptr);
    shunt::gpu::memory_kind a{}, b{}, c{}, d{}, e{};
    const long printed = printed_by([&] {
        a = shunt::gpu::classify(&on_stack);
        b = shunt::gpu::classify(on_heap.data() + 12345);
        c = shunt::gpu::classify(big);
        d = shunt::gpu::classify(nullptr);
        e = shunt::gpu::classify(reinterpret_cast<const void*>(std::uintptr_t{1} << 46));  // mapped by nobody
    });
    std::free(big);
    CHECK(printed == 0);
    CHECK(a == shunt::gpu::memory_kind::host);
    CHECK(b == shunt::gpu::memory_kind::host);
    CHECK(c == shunt::gpu::memory_kind::host);
    CHECK(d == shunt::gpu::memory_kind::host);
    CHECK(e == shunt::gpu::memory_kind::host);
    CHECK(shunt::gpu::classify_cache_size() == 0);
    shunt::gpu::forget(on_heap.data(), on_heap.size());  // harmless on unknown memory
    CHECK(std::strcmp(shunt::gpu::to_string(shunt::gpu::memory_kind::managed), "managed") == 0);
}

TEST_CASE("without a device: no device support is reported, as shunt::unsupported") {
    bool available = true;
    const long printed = printed_by([&] { available = shunt::gpu::device_available(); });
    CHECK(printed == 0);
    if (available) {
        MESSAGE("a CUDA device is present: the no-device checks do not apply (the gpu suite covers it)");
        return;
    }
    const shunt::layout form{{{4, 16}}, {{0, 4}}};
    const shunt::gpu::flat_form f(form, 64, 2);
    CHECK_THROWS_AS(shunt::gpu::device_form{f}, shunt::unsupported);
    CHECK_THROWS_AS(shunt::gpu::pool_acquire(shunt::gpu::pool_kind::device, 4096), shunt::unsupported);
    CHECK(shunt::gpu::pool_bytes(shunt::gpu::pool_kind::device).in_use == 0);
}

TEST_CASE("the pinned pool works without a device: reuse by size class, release at shutdown") {
    using shunt::gpu::pool_kind;
    {
        const auto a = shunt::gpu::pool_acquire(pool_kind::pinned, 1000);
        REQUIRE(a.ptr != nullptr);
        CHECK(a.bytes == 1024);
        CHECK(reinterpret_cast<std::uintptr_t>(a.ptr) % 256 == 0);
        std::memset(a.ptr, 0x3c, a.bytes);  // writable, all of it
        const auto b = shunt::gpu::pool_acquire(pool_kind::pinned, 10);
        CHECK(b.bytes == 256);
        CHECK(b.ptr != a.ptr);
        CHECK(shunt::gpu::pool_bytes(pool_kind::pinned).in_use == 1024 + 256);
        shunt::gpu::pool_release(a);
        CHECK(shunt::gpu::pool_bytes(pool_kind::pinned).cached == 1024);
        const auto c = shunt::gpu::pool_acquire(pool_kind::pinned, 1024);  // same class: the cached block
        CHECK(c.ptr == a.ptr);
        CHECK(shunt::gpu::pool_bytes(pool_kind::pinned).cached == 0);
        shunt::gpu::pool_release(b);
        shunt::gpu::pool_release(c);
        CHECK(shunt::gpu::pool_bytes(pool_kind::pinned).cached == 1024 + 256);
        shunt::gpu::release_pools();
        CHECK(shunt::gpu::pool_bytes(pool_kind::pinned).cached == 0);
        CHECK(shunt::gpu::pool_bytes(pool_kind::pinned).in_use == 0);
        // After shutdown blocks still work, and are freed when given back rather than cached.
        const auto d = shunt::gpu::pool_acquire(pool_kind::pinned, 300);
        CHECK(d.bytes == 512);
        shunt::gpu::pool_release(d);
        CHECK(shunt::gpu::pool_bytes(pool_kind::pinned).cached == 0);
        shunt::gpu::release_pools();  // idempotent
    }
    const long printed = printed_by([] {
        shunt::gpu::pool_release(shunt::gpu::pool_acquire(pool_kind::pinned, 5000));
        shunt::gpu::release_pools();
    });
    CHECK(printed == 0);
}
