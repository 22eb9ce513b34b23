// tests/gpu/test_gpu_descriptor.cpp: unit tests of the flat GPU descriptor and its index math on hand-made
// layouts: folding and merging, many dimensions, 64-bit offsets, windows, word choice, the staged tiles.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "../../bench/gpu/shapes.hpp"

#include <shunt/datatype/layout.hpp>
#include <shunt/gpu/descriptor.hpp>
#include <shunt/gpu/emulate.hpp>
#include <shunt/gpu/index.hpp>
#include <shunt/gpu/staged.hpp>
#include <shunt/pack/host.hpp>

#include <algorithm>

#include <cstdint>
#include <numeric>
#include <vector>

using shunt::layout;
using shunt::gpu::flat_form;

namespace {

constexpr std::int64_t gib = std::int64_t{1} << 30;

/// Typed offsets of every packed byte, straight from the layout (the definition of the stream).
std::vector<std::int64_t> reference_offsets(const layout& l, std::int64_t extent, std::int64_t count) {
    std::vector<std::int64_t> out;
    const auto flat = shunt::flatten(l);
    for (std::int64_t i = 0; i < count; ++i)
        for (const auto& b : flat)
            for (std::int64_t k = 0; k < b.length; ++k) out.push_back(i * extent + b.offset + k);
    return out;
}

}  // namespace

TEST_CASE("a dense type, and a count of elements that tile, fold into one block (a plain copy)") {
    const flat_form a(layout{{}, {{8, 24}}}, 24, 5);
    CHECK(a.contiguous());
    CHECK(a.desc().total == 120);
    CHECK(shunt::gpu::typed_offset(a.desc(), 119) == 127);
    const flat_form b(layout{{{4, 16}}, {{0, 16}}}, 64, 3);  // simplify would fold it; flat_form folds it too
    CHECK(b.contiguous());
    const flat_form c(layout{{{4, 32}}, {{0, 16}}}, 128, 3);  // elements tile: 12 rows of 16 bytes, 32 apart
    CHECK(c.desc().ndims == 1);
    CHECK(c.desc().nblocks == 1);
    CHECK(c.table()[0] == 12);
}

TEST_CASE("five strided dimensions and a block list, count 3: every byte's offset") {
    const layout l{{{2, 100000}, {3, -7000}, {2, 900}, {3, 200}, {2, 48}}, {{0, 3}, {5, 8}, {20, 1}}};
    const flat_form f(l, 250000, 3);
    CHECK(f.desc().ndims == 6);
    CHECK(f.desc().nblocks == 3);
    const auto ref = reference_offsets(l, 250000, 3);
    REQUIRE(static_cast<std::int64_t>(ref.size()) == f.desc().total);
    for (std::int64_t p = 0; p < f.desc().total; ++p)
        REQUIRE(shunt::gpu::typed_offset(f.desc(), p) == ref[static_cast<std::size_t>(p)]);
}

TEST_CASE("offsets beyond 4 GiB, negative strides") {
    const layout l{{{3, -5 * gib}, {4, 3 * gib + 8}}, {{7 * gib, 16}}};
    const flat_form f(l, 40 * gib, 2);
    const auto ref = reference_offsets(l, 40 * gib, 2);
    for (std::int64_t p = 0; p < f.desc().total; ++p)
        REQUIRE(shunt::gpu::typed_offset(f.desc(), p) == ref[static_cast<std::size_t>(p)]);
    CHECK(shunt::gpu::typed_offset(f.desc(), f.desc().total - 1) ==
          40 * gib + 2 * -5 * gib + 3 * (3 * gib + 8) + 7 * gib + 15);
}

TEST_CASE("streams beyond 4 GiB: positions past 2^32 use the 64-bit division") {
    const std::int64_t rows = std::int64_t{1} << 34;
    const flat_form f(layout{{{rows, 24}, {2, 10}}, {{3, 4}}}, rows * 24, 1);
    REQUIRE(f.desc().total == rows * 8);
    for (std::int64_t p : {std::int64_t{0}, std::int64_t{7}, (std::int64_t{1} << 32) - 1, std::int64_t{1} << 32,
                           (std::int64_t{5} << 33) + 13, rows * 8 - 1}) {
        const std::int64_t row = p / 8, half = (p % 8) / 4, byte = p % 4;
        CHECK(shunt::gpu::typed_offset(f.desc(), p) == row * 24 + half * 10 + 3 + byte);
    }
}

TEST_CASE("windows are clamped as pack_host clamps them") {
    const flat_form f(layout{{{10, 8}}, {{0, 4}}}, 80, 1);
    using shunt::gpu::clamp_window;
    CHECK(clamp_window(f.desc(), 0, 1000).bytes == 40);
    CHECK(clamp_window(f.desc(), 38, 1000).bytes == 2);
    CHECK(clamp_window(f.desc(), 40, 1000).bytes == 0);
    CHECK(clamp_window(f.desc(), -1, 10).bytes == 0);
    CHECK(clamp_window(f.desc(), 5, 0).bytes == 0);
    CHECK(clamp_window(f.desc(), 5, 7).first == 5);
    CHECK(clamp_window(f.desc(), 5, 7).bytes == 7);
}

TEST_CASE("the word is the widest size every address, stride, length and window bound allows") {
    using shunt::gpu::window;
    using shunt::gpu::word_size;
    const flat_form f(layout{{{10, 64}}, {{0, 32}}}, 640, 1);
    CHECK(word_size(f.desc(), 4096, 8192, window{0, 320}) == 16);
    CHECK(word_size(f.desc(), 4096 + 8, 8192, window{0, 320}) == 8);
    CHECK(word_size(f.desc(), 4096, 8192 + 2, window{0, 320}) == 2);
    CHECK(word_size(f.desc(), 4096, 8192, window{4, 316}) == 4);
    CHECK(word_size(f.desc(), 4096, 8192, window{0, 319}) == 1);
    const flat_form g(layout{{{10, 36}}, {{0, 12}}}, 360, 1);  // stride 36: 4-byte words at most
    CHECK(word_size(g.desc(), 4096, 8192, window{0, 120}) == 4);
    const flat_form h(layout{{{10, 64}}, {{2, 32}}}, 640, 1);  // block offset 2
    CHECK(word_size(h.desc(), 4096, 8192, window{0, 320}) == 2);
}

TEST_CASE("empty types and counts give empty descriptors that move nothing") {
    const flat_form a(layout{}, 8, 4);
    CHECK(a.desc().total == 0);
    const flat_form b(layout{{{3, 8}}, {{0, 4}}}, 24, 0);
    CHECK(b.desc().total == 0);
    std::vector<unsigned char> in(64, 1), out(64, 0);
    CHECK(shunt::gpu::pack_emulated(b, in.data(), out.data()) == 0);
    CHECK(out[0] == 0);
}

TEST_CASE("emulated pack of a large 3-D object in every word size equals pack_host") {
    const layout l = shunt::simplify(layout{{{40, 64 * 48}, {48, 64}}, {{16, 32}}});
    std::vector<std::uint64_t> typed_words(40 * 48 * 64 / 8);
    std::iota(typed_words.begin(), typed_words.end(), 1);
    const flat_form f(l, 40 * 48 * 64, 1);
    std::vector<std::uint64_t> want(static_cast<std::size_t>(f.desc().total / 8) + 2), got(want.size());
    shunt::pack_host(l, 40 * 48 * 64, 1, typed_words.data(), want.data());
    for (int word : {16, 8, 4, 2, 1}) {
        std::fill(got.begin(), got.end(), 0);
        CHECK(shunt::gpu::pack_emulated(f, typed_words.data(), got.data(), 0, f.desc().total, word, 37) ==
              f.desc().total);
        CHECK(got == want);
    }
}

TEST_CASE("staged tiles of bench-gpu-pack's small-block shapes fit the stage and span exactly their bytes") {
    // The rows the staged kernels are for: 2-D rows of B bytes 2B apart, and 3-D planes of 16 such
    // rows a plane apart. With the kernel's launch block (256 threads), each tile goes through the
    // stage, and [lo, hi) is exactly the typed span of its bytes (the loads touch nothing else).
    constexpr std::int64_t threads = 256, tile = threads * shunt::gpu::staged_bytes_per_thread;
    for (const std::int64_t block : {1, 2, 4}) {
        for (const char* family : {"2d", "3d"}) {
            const shunt::bench::shape sh = shunt::bench::make_shape(family, block, 3 * tile + 5 * block);
            const bool planes = sh.planes > 1;
            const layout l = sh.form();
            const flat_form f(l, sh.span(), 1);
            const auto fd = shunt::gpu::make_staged_dims(shunt::gpu::make_fast_dims(f.desc()));
            REQUIRE(fd.fast.ndims >= 1);
            std::vector<std::byte> typed(static_cast<std::size_t>(sh.span())), packed(f.desc().total);
            const auto t = reinterpret_cast<std::uintptr_t>(typed.data());
            const shunt::gpu::window w{0, f.desc().total};
            const auto ref = reference_offsets(l, 0, 1);
            for (std::int64_t first = 0; first < w.bytes; first += tile) {
                const auto s = shunt::gpu::plan_staged_tile<true>(fd, t, packed.data(), w, first, tile,
                                                                  shunt::gpu::staged_capacity(threads));
                CAPTURE(block);
                CAPTURE(planes);
                CAPTURE(first);
                CHECK(s.words > 0);
                const std::int64_t last = std::min(first + tile, w.bytes) - 1;
                CHECK(s.lo == t + static_cast<std::uintptr_t>(ref[static_cast<std::size_t>(first)]));
                CHECK(s.hi == t + static_cast<std::uintptr_t>(ref[static_cast<std::size_t>(last)]) + 1);
            }
        }
    }
}

TEST_CASE("the staged kernels refuse offsets that do not grow with the stream") {
    // Overlapping rows (stride below the block), a negative stride, and planes whose rows reach
    // into the next plane: a tile's bytes would not lie between its first and last byte's offsets.
    const flat_form overlap(layout{{{8, 4}}, {{0, 6}}}, 64, 1);
    const flat_form negative(layout{{{8, -16}}, {{0, 4}}}, 16, 1);
    const flat_form reach(layout{{{4, 40}, {8, 8}}, {{0, 4}}}, 160, 1);
    const flat_form fine(layout{{{4, 64}, {8, 8}}, {{0, 4}}}, 256, 1);
    for (const flat_form* f : {&overlap, &negative, &reach}) {
        const auto fd = shunt::gpu::make_fast_dims(f->desc());
        CHECK((fd.ndims < 0 || !shunt::gpu::staged_usable(fd)));
    }
    CHECK(shunt::gpu::staged_usable(shunt::gpu::make_fast_dims(fine.desc())));
    // Where they are refused, the staged emulation still packs what pack_host packs.
    std::vector<unsigned char> typed(512);
    std::iota(typed.begin(), typed.end(), 0);
    for (const flat_form* f : {&overlap, &negative, &reach, &fine}) {
        const std::int64_t origin = f == &negative ? 200 : 0;
        std::vector<unsigned char> want(static_cast<std::size_t>(f->desc().total)), got(want.size());
        shunt::gpu::pack_emulated(*f, typed.data() + origin, want.data());
        CHECK(shunt::gpu::pack_staged_emulated(*f, typed.data() + origin, got.data()) == f->desc().total);
        CHECK(got == want);
    }
}
