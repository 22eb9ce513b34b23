// tests/unit/pack/test_host.cpp: the host packer against bytes copied by hand: streaming, prefetched
// and permuted row loops, block lists, guarded pages. Regressions are named after what they guard.
#include <doctest/doctest.h>

#include "layout_string.hpp"

#include <shunt/datatype/layout.hpp>
#include <shunt/pack/host.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

using shunt::block;
using shunt::dim;
using shunt::layout;

namespace {

const layout byte_form{{}, {{0, 1}}};
const layout int_form{{}, {{0, 4}}};

}  // namespace

/// `rows` rows of `len` bytes `stride` apart as a layout, a typed buffer of seeded bytes, and
/// the packed bytes it must give (each row copied by hand).
struct strided_rows {
    /// What an unpack's target buffer holds before it, and must still hold between the rows.
    static constexpr std::byte gap{0x5a};
    std::int64_t len, stride;
    layout form;
    std::int64_t extent;
    std::vector<std::byte> typed, expect;
    strided_rows(std::int64_t len, std::int64_t stride, std::int64_t rows)
        : len(len),
          stride(stride),
          form(shunt::make_hvector(rows, len, stride, byte_form, 1)),
          extent(rows * stride),
          typed(static_cast<std::size_t>(extent)),
          expect(static_cast<std::size_t>(rows * len)) {
        for (std::size_t i = 0; i < typed.size(); ++i) typed[i] = static_cast<std::byte>((i * 131) >> 3);
        for (std::int64_t r = 0; r < rows; ++r)
            std::memcpy(expect.data() + r * len, typed.data() + r * stride, static_cast<std::size_t>(len));
    }
    /// Bytes of `back` (a buffer of `gap` bytes that the packed rows were unpacked into) that
    /// are not the typed bytes within a row, or not `gap` between rows.
    std::int64_t wrong_after_unpack(const std::vector<std::byte>& back) const {
        std::int64_t wrong = 0;
        for (std::int64_t i = 0; i < extent; ++i)
            wrong += back[static_cast<std::size_t>(i)] != (i % stride < len ? typed[static_cast<std::size_t>(i)] : gap);
        return wrong;
    }
};

TEST_CASE("host packer: rows that stream from memory pack and unpack like rows in cache") {
    // 200-byte rows 256 bytes apart: 131072 rows sweep 32 MiB, past streaming_bytes, so the
    // rows go through the C library's memcpy; the bytes must be the same as the cached path's.
    constexpr std::int64_t len = 200, stride = 256, rows = 131072;
    static_assert(rows * stride >= shunt::detail::pack_program::streaming_bytes);
    const strided_rows c(len, stride, rows);
    REQUIRE(shunt::detail::pack_program(c.form, c.extent, 1).streaming());
    REQUIRE_FALSE(
        shunt::detail::pack_program(shunt::make_hvector(64, len, stride, byte_form, 1), 64 * stride, 1).streaming());
    std::vector<std::byte> packed(c.expect.size());
    CHECK(shunt::pack_host(c.form, c.extent, 1, c.typed.data(), packed.data()) == rows * len);
    CHECK(packed == c.expect);
    // A window that starts and ends inside rows.
    std::vector<std::byte> window(1000);
    CHECK(shunt::pack_host(c.form, c.extent, 1, c.typed.data(), window.data(), 12345, 1000) == 1000);
    CHECK(std::memcmp(window.data(), c.expect.data() + 12345, 1000) == 0);
    // Unpacking scatters the rows back and leaves the gaps alone.
    std::vector<std::byte> back(c.typed.size(), strided_rows::gap);
    CHECK(shunt::unpack_host(c.form, c.extent, 1, packed.data(), back.data()) == rows * len);
    CHECK(c.wrong_after_unpack(back) == 0);
}

TEST_CASE("host packer: unpacking rows a batch behind their prefetches scatters like the plain loop") {
    using shunt::detail::prefetch_batch;
    using shunt::detail::prefetch_pays;
    constexpr std::int64_t wide = shunt::detail::pack_program::streaming_bytes;
    const bool intel = shunt::detail::tuned_as_intel();
    // Off Intel, short rows over 16 MiB prefetch only where AVX-512 is (Zen 4; not on a Zen 3).
    const bool wide_short = intel || shunt::detail::cpu_has_masked_blocks();
    CHECK(prefetch_pays(256, wide / 256, 100, false) == wide_short);  // 16 MiB of rows a line or more apart
    CHECK(prefetch_pays(256, 4096, 100, false) == intel);  // 1 MiB: on Intel only
    CHECK(prefetch_pays(256, wide / 256, 200, false) == intel);  // rows of 128 B or more: Intel only
    CHECK_FALSE(prefetch_pays(256, 4095, 200, false));  // a span under 1 MiB: cached
    CHECK_FALSE(prefetch_pays(256, wide / 256, 100, true));  // streaming stores read nothing first
    CHECK_FALSE(prefetch_pays(32, wide, 16, false));  // rows sharing lines: the hardware's
    CHECK_FALSE(prefetch_pays(128, wide, 128, false));  // no gaps: one sequential run
    // Row counts that leave a partial last batch and a last batch shorter than the prefetch
    // distance, rows from 1 byte to several lines at odd strides (row starts at every offset in
    // a line; rows past the 1 KiB that is prefetched): each row lands in place and the gaps keep
    // their bytes, through rows_prefetched itself (both prefetch localities) on every CPU and
    // through unpack_host (which takes it where prefetch_pays on this CPU; the last two shapes on
    // every CPU with AVX-512 or on Intel).
    struct shape {
        std::int64_t len, stride, rows;
    };
    for (const shape sh :
         {shape{1, 64, 20000}, shape{8, 512, 2 * prefetch_batch * 1000 + 3}, shape{63, 130, 9000},
          shape{200, 264, 4000 + prefetch_batch + 1}, shape{1000, 1096, 1000}, shape{3000, 3100, 400},
          shape{64, 128, 8192}, shape{8, 512, wide / 512 + prefetch_batch + 5}, shape{100, 260, wide / 260 + 7}}) {
        CAPTURE(sh.len);
        CAPTURE(sh.stride);
        CAPTURE(sh.rows);
        REQUIRE(prefetch_pays(sh.stride, sh.rows, sh.len, false) ==
                (intel || (wide_short && sh.stride * sh.rows >= wide)));
        const strided_rows c(sh.len, sh.stride, sh.rows);
        REQUIRE_FALSE(shunt::detail::pack_program(c.form, c.extent, 1).stream_stores());
        std::vector<std::byte> direct(c.typed.size(), strided_rows::gap), direct_l2(direct);
        std::vector<std::byte> packed(c.expect);
        shunt::detail::rows_prefetched<false>(direct.data(), packed.data(), sh.stride, sh.rows, sh.len, false);
        CHECK(c.wrong_after_unpack(direct) == 0);
        shunt::detail::rows_prefetched<false, 2>(direct_l2.data(), packed.data(), sh.stride, sh.rows, sh.len, false);
        CHECK(c.wrong_after_unpack(direct_l2) == 0);
        std::vector<std::byte> back(c.typed.size(), strided_rows::gap);
        CHECK(shunt::unpack_host(c.form, c.extent, 1, c.expect.data(), back.data()) == sh.rows * sh.len);
        CHECK(c.wrong_after_unpack(back) == 0);
        // A window that starts and ends inside rows touches only its own bytes.
        std::vector<std::byte> part(c.typed.size(), strided_rows::gap);
        const std::int64_t lo = sh.len * 37 + sh.len / 2, n = sh.len * (prefetch_batch * 5 + 3);
        CHECK(shunt::unpack_host(c.form, c.extent, 1, c.expect.data() + lo, part.data(), lo, n) == n);
        std::int64_t wrong = 0;
        for (std::int64_t i = 0; i < c.extent; ++i) {
            const std::int64_t row = i / sh.stride, in = i % sh.stride, at = row * sh.len + in;
            const bool mine = in < sh.len && at >= lo && at < lo + n;
            wrong +=
                part[static_cast<std::size_t>(i)] != (mine ? c.typed[static_cast<std::size_t>(i)] : strided_rows::gap);
        }
        CHECK(wrong == 0);
    }
}

TEST_CASE("host packer: short rows in cache lines of their own gather like the inline loop") {
    // 3-byte rows 4160 bytes apart: 2048 rows sweep 8 MiB, within sparse_gather's range on every
    // CPU, so packing calls the C library's memcpy per row; and a window starting and ending
    // inside rows.
    constexpr std::int64_t len = 3, stride = 4160, rows = 2048;
    REQUIRE(shunt::detail::sparse_gather(stride, rows, len));
    REQUIRE_FALSE(shunt::detail::sparse_gather(stride, 64, len));  // cached
    REQUIRE_FALSE(shunt::detail::sparse_gather(stride, rows * 16, len));  // beyond 64 MiB
    REQUIRE_FALSE(shunt::detail::sparse_gather(stride, rows, 32));  // long rows
    // Closer rows, the same span: the calls only from this CPU's stride (512 or 4096 bytes).
    const std::int64_t from = shunt::detail::sparse_gather_stride();
    REQUIRE((from == 512 || from == 4096));
    REQUIRE(shunt::detail::sparse_gather(from, (8 << 20) / from, len));
    REQUIRE_FALSE(shunt::detail::sparse_gather(from - 64, (8 << 20) / (from - 64), len));
    const strided_rows c(len, stride, rows);
    std::vector<std::byte> packed(c.expect.size());
    CHECK(shunt::pack_host(c.form, c.extent, 1, c.typed.data(), packed.data()) == rows * len);
    CHECK(packed == c.expect);
    std::vector<std::byte> window(1000);
    CHECK(shunt::pack_host(c.form, c.extent, 1, c.typed.data(), window.data(), 4001, 1000) == 1000);
    CHECK(std::memcmp(window.data(), c.expect.data() + 4001, 1000) == 0);
}

TEST_CASE("host packer: every row length below strides 8, 16 and 32, by byte compress and by moves") {
    // window_pays splits these between rows_window and the fixed moves; both must give the
    // rows' bytes and leave the gaps alone, with and without the AVX-512 paths.
    for (const bool masked : {true, false}) {
        shunt::detail::masked_blocks_allowed = masked;
        for (const std::int64_t stride : {8, 16, 32})
            for (std::int64_t len = 1; len < stride; ++len) {
                CAPTURE(masked);
                CAPTURE(stride);
                CAPTURE(len);
                const std::int64_t rows = 67;  // whole windows and a tail
                const strided_rows c(len, stride, rows);
                std::vector<std::byte> packed(c.expect.size());
                CHECK(shunt::pack_host(c.form, c.extent, 1, c.typed.data(), packed.data()) == rows * len);
                CHECK(packed == c.expect);
                std::vector<std::byte> back(c.typed.size(), strided_rows::gap);
                CHECK(shunt::unpack_host(c.form, c.extent, 1, packed.data(), back.data()) == rows * len);
                CHECK(c.wrong_after_unpack(back) == 0);
            }
    }
    shunt::detail::masked_blocks_allowed = true;
}

TEST_CASE("host packer: planes of rows (a halo face) pack and unpack as their rows, one choice of loop for all") {
    // Two strided levels over one block: rows_direct picks the loop of the first plane's rows
    // for every plane. Shapes for each of its loops (lane permutes and AVX2 shuffles, the tiny
    // gather, the byte window, fixed moves, copy_chunks, memcpy calls); odd plane strides move
    // every other plane off the alignment the tiny gather needs (those planes take the whole
    // choice on their own); a plane of 3 rows as in a halo face; windows that start and end
    // inside rows and planes.
    struct shape {
        std::int64_t len, stride, rows, planes, plane_stride;
    };
    for (const bool masked : {true, false}) {
        shunt::detail::masked_blocks_allowed = masked;
        for (const shape sh :
             {shape{1, 2, 200, 5, 401}, shape{2, 4, 64, 6, 259}, shape{2, 8, 40, 4, 330}, shape{4, 8, 33, 7, 267},
              shape{4, 16, 20, 5, 321}, shape{8, 16, 20, 4, 333}, shape{3, 8, 30, 4, 250}, shape{24, 40, 3, 9, 131},
              shape{64, 72, 3, 8, 229}, shape{100, 104, 5, 3, 530}, shape{300, 312, 3, 6, 1000},
              shape{1024, 1072, 3, 5, 3300}}) {
            CAPTURE(masked);
            CAPTURE(sh.len);
            CAPTURE(sh.stride);
            CAPTURE(sh.rows);
            CAPTURE(sh.plane_stride);
            const layout plane = shunt::make_hvector(sh.rows, sh.len, sh.stride, byte_form, 1);
            const layout form = shunt::make_hvector(sh.planes, 1, sh.plane_stride, plane, sh.plane_stride);
            REQUIRE(form.dims.size() == 2);
            REQUIRE(form.blocks.size() == 1);
            const std::int64_t extent = (sh.planes - 1) * sh.plane_stride + (sh.rows - 1) * sh.stride + sh.len;
            const std::int64_t total = sh.planes * sh.rows * sh.len;
            std::vector<std::byte> typed(static_cast<std::size_t>(extent)), expect;
            for (std::size_t i = 0; i < typed.size(); ++i) typed[i] = static_cast<std::byte>((i * 131) >> 3);
            std::vector<bool> mine(typed.size());
            for (std::int64_t p = 0; p < sh.planes; ++p)
                for (std::int64_t r = 0; r < sh.rows; ++r)
                    for (std::int64_t b = 0; b < sh.len; ++b) {
                        const auto at = static_cast<std::size_t>(p * sh.plane_stride + r * sh.stride + b);
                        expect.push_back(typed[at]);
                        mine[at] = true;
                    }
            // The typed buffer one byte past an aligned start too, so that the first plane is
            // the one off.
            for (const std::size_t skew : {0, 1}) {
                CAPTURE(skew);
                std::vector<std::byte> in(typed.size() + skew), packed(expect.size());
                std::memcpy(in.data() + skew, typed.data(), typed.size());
                CHECK(shunt::pack_host(form, extent, 1, in.data() + skew, packed.data()) == total);
                CHECK(packed == expect);
                std::vector<std::byte> back(typed.size() + skew, std::byte{0x5a});
                CHECK(shunt::unpack_host(form, extent, 1, expect.data(), back.data() + skew) == total);
                std::int64_t wrong = 0;
                for (std::size_t i = 0; i < typed.size(); ++i)
                    wrong += back[i + skew] != (mine[i] ? typed[i] : std::byte{0x5a});
                CHECK(wrong == 0);
            }
            const std::int64_t lo = sh.len / 2 + sh.len, n = total - lo - sh.len / 2 - 1;
            std::vector<std::byte> window(static_cast<std::size_t>(n));
            CHECK(shunt::pack_host(form, extent, 1, typed.data(), window.data(), lo, n) == n);
            CHECK(std::memcmp(window.data(), expect.data() + lo, static_cast<std::size_t>(n)) == 0);
        }
    }
    shunt::detail::masked_blocks_allowed = true;
}

TEST_CASE("host packer: a decoded type's overloads give the layout overloads' bytes") {
    // Three irregular blocks repeated in two dimensions, two elements, whole and in windows;
    // and a form whose dimension has no iterations.
    const layout form{{{3, 96}, {4, 24}}, {{0, 3}, {5, 7}, {17, 2}}};
    shunt::type_info t;
    t.form = form;
    t.size = form.size();
    t.extent = 3 * 96;
    REQUIRE(t.size == 3 * 4 * 12);
    std::vector<std::byte> typed(static_cast<std::size_t>(2 * t.extent));
    for (std::size_t i = 0; i < typed.size(); ++i) typed[i] = static_cast<std::byte>(i * 37 + 1);
    const auto total = static_cast<std::size_t>(2 * t.size);
    for (const std::int64_t first : {0, 1, 100, 287}) {
        CAPTURE(first);
        std::vector<std::byte> a(total), b(total);
        CHECK(shunt::pack_host(form, t.extent, 2, typed.data(), a.data(), first, 97) ==
              shunt::pack_host(t, 2, typed.data(), b.data(), first, 97));
        CHECK(a == b);
        std::vector<std::byte> ua(typed.size()), ub(typed.size());
        CHECK(shunt::unpack_host(form, t.extent, 2, a.data(), ua.data(), first, 97) ==
              shunt::unpack_host(t, 2, a.data(), ub.data(), first, 97));
        CHECK(ua == ub);
    }
    shunt::type_info none;
    none.form = layout{{{0, 8}}, {{0, 1}, {3, 1}}};
    none.extent = 8;
    std::byte out[8]{};
    CHECK(shunt::pack_host(none, 4, typed.data(), out) == 0);
}

TEST_CASE("host packer: the streaming-store threshold follows the last-level cache") {
    using shunt::detail::stream_store_threshold;
    constexpr std::int64_t mib = std::int64_t{1} << 20;
    CHECK(stream_store_threshold(480 * mib, 2) == 180 * mib);  // the development machine
    CHECK(stream_store_threshold(32 * mib, 32) == 16 * mib);  // a small share: the floor
    CHECK(stream_store_threshold(256 * mib, 8) == 24 * mib);
    CHECK(stream_store_threshold(0, 8) == 16 * mib);  // unknown: the floor
    CHECK(stream_store_threshold(256 * mib, -1) == 16 * mib);
    CHECK(shunt::detail::stream_store_bytes() >= 16 * mib);
}

TEST_CASE("host packer: long rows written past stream_store_bytes go through streaming stores") {
    // 1000-byte rows 1096 bytes apart: 17000 rows write 17 MB in one call, past a threshold of
    // 16 MiB (set here: this machine's own may be far higher), over a span past streaming_bytes;
    // row starts fall at every 8-byte offset within a cache line, so copy_wide<true>'s masked
    // head and tail are exercised.
    constexpr std::int64_t len = 1000, stride = 1096, rows = 17000, threshold = std::int64_t{16} << 20;
    static_assert(rows * len >= threshold);
    shunt::detail::stream_store_bytes_override = threshold;
    const strided_rows c(len, stride, rows);
    REQUIRE(shunt::detail::pack_program(c.form, c.extent, 1).stream_stores());
    // The same rows in a call that writes less stay in the cache.
    REQUIRE_FALSE(
        shunt::detail::pack_program(shunt::make_hvector(rows / 2, len, stride, byte_form, 1), rows / 2 * stride, 1)
            .stream_stores());
    std::vector<std::byte> packed(c.expect.size() + 1);
    // A packed stream one byte past an aligned start, so its rows' heads differ from the typed ones.
    CHECK(shunt::pack_host(c.form, c.extent, 1, c.typed.data(), packed.data() + 1) == rows * len);
    CHECK(std::memcmp(packed.data() + 1, c.expect.data(), c.expect.size()) == 0);
    std::vector<std::byte> back(c.typed.size(), strided_rows::gap);
    CHECK(shunt::unpack_host(c.form, c.extent, 1, packed.data() + 1, back.data()) == rows * len);
    CHECK(c.wrong_after_unpack(back) == 0);
    shunt::detail::stream_store_bytes_override = 0;
    // Past the override, the machine's own threshold: 17 MB streams only where it is 16 MiB.
    CHECK(shunt::detail::pack_program(c.form, c.extent, 1).stream_stores() ==
          (rows * len >= shunt::detail::stream_store_bytes()));
}

namespace {

/// `bytes` of memory that end where an inaccessible page begins: a read or write one byte past
/// the end faults.
struct guarded {
    std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE)), span;
    void* map;
    std::byte* data;
    explicit guarded(std::size_t bytes) : span((bytes + page - 1) / page * page + page) {
        map = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        REQUIRE(map != MAP_FAILED);
        REQUIRE(mprotect(static_cast<std::byte*>(map) + span - page, page, PROT_NONE) == 0);
        data = static_cast<std::byte*>(map) + (span - page - bytes);
    }
    ~guarded() { munmap(map, span); }
    guarded(const guarded&) = delete;
    guarded& operator=(const guarded&) = delete;
};

}  // namespace

TEST_CASE("host packer: rows of 1-8 bytes at 2 and 4 times their length, by lane permutes and AVX2 shuffles") {
    // rows_lanes moves groups of 64 / len rows a vector at a time. The typed rows end where a
    // guard page begins, so a load past the last row's end (into the gap that would follow it)
    // faults; the packed stream ends at one too. Row counts give whole groups, whole groups but
    // for one row, and a tail; the group loop must not take the last group's rows where no row
    // follows them.
    for (const bool masked : {true, false}) {
        shunt::detail::masked_blocks_allowed = masked;
        for (const std::int64_t len : {1, 2, 4, 8})
            for (const std::int64_t ratio : {2, 4}) {
                const std::int64_t group = 64 / len, stride = ratio * len;
                for (const std::int64_t rows : {2 * group, 2 * group + 1, 3 * group - 1, 5 * group + 7}) {
                    CAPTURE(masked);
                    CAPTURE(len);
                    CAPTURE(stride);
                    CAPTURE(rows);
                    const strided_rows c(len, stride, rows);
                    const auto span = static_cast<std::size_t>((rows - 1) * stride + len);
                    guarded typed(span), packed(c.expect.size());
                    std::memcpy(typed.data, c.typed.data(), span);
                    CHECK(shunt::pack_host(c.form, c.extent, 1, typed.data, packed.data) == rows * len);
                    CHECK(std::memcmp(packed.data, c.expect.data(), c.expect.size()) == 0);
                    // Unpacked into rows whose gaps hold `gap`: the rows come back, the gaps stay.
                    std::vector<std::byte> back(c.typed.size(), strided_rows::gap);
                    std::memcpy(typed.data, back.data(), span);
                    CHECK(shunt::unpack_host(c.form, c.extent, 1, packed.data, typed.data) == rows * len);
                    std::memcpy(back.data(), typed.data, span);
                    CHECK(c.wrong_after_unpack(back) == 0);
#ifdef SHUNT_HAVE_MASKED_BLOCKS
                    // 2-byte rows unpack by lanes only on CPUs without VBMI2's byte expand: here
                    // directly.
                    if (len == 2 && shunt::detail::masked_blocks_available()) {
                        std::fill(back.begin(), back.end(), strided_rows::gap);
                        std::memcpy(typed.data, back.data(), span);
                        (ratio == 2 ? shunt::detail::rows_lanes<false, 2, 2>
                                    : shunt::detail::rows_lanes<false, 2, 4>)(typed.data, packed.data, rows);
                        std::memcpy(back.data(), typed.data, span);
                        CHECK(c.wrong_after_unpack(back) == 0);
                    }
                    // The AVX2 packs, called directly: a CPU with AVX-512 never reaches them
                    // through pack_host.
                    if (__builtin_cpu_supports("avx2") && ((len == 1 && ratio == 2) || len == 2)) {
                        std::memset(packed.data, 0, c.expect.size());
                        std::memcpy(typed.data, c.typed.data(), span);
                        if (len == 1)
                            shunt::detail::rows_lanes_avx2<1, 2>(typed.data, packed.data, rows);
                        else
                            (ratio == 2 ? shunt::detail::rows_lanes_avx2<2, 2>
                                        : shunt::detail::rows_lanes_avx2<2, 4>)(typed.data, packed.data, rows);
                        CHECK(std::memcmp(packed.data, c.expect.data(), c.expect.size()) == 0);
                    }
#endif
                    // Rows of 1 and 2 bytes unpack from 8-byte loads where no AVX-512 path takes
                    // them, called directly (with AVX-512 pack_host never reaches them), from a
                    // packed stream at its own alignment and one byte off it, ending where a
                    // guard page begins (a load past the stream's end faults).
                    if (len <= 2) {
                        for (const std::size_t off : {0, 1}) {
                            CAPTURE(off);
                            guarded stream(c.expect.size() + off);
                            std::memcpy(stream.data + off, c.expect.data(), c.expect.size());
                            std::fill(back.begin(), back.end(), strided_rows::gap);
                            std::memcpy(typed.data, back.data(), span);
                            const std::byte* in = stream.data + off;
                            if (len == 1)
                                (ratio == 2 ? shunt::detail::unpack_narrow<1, 2>
                                            : shunt::detail::unpack_narrow<1, 4>)(typed.data, in, rows);
                            else
                                (ratio == 2 ? shunt::detail::unpack_narrow<2, 4>
                                            : shunt::detail::unpack_narrow<2, 8>)(typed.data, in, rows);
                            std::memcpy(back.data(), typed.data, span);
                            CHECK(c.wrong_after_unpack(back) == 0);
                        }
                    }
                }
            }
    }
    shunt::detail::masked_blocks_allowed = true;
}

TEST_CASE("host packer: irregular blocks and odd-length long rows touch their own bytes only") {
    // Block lists move each block by one masked move (up to 64 bytes) or by copy_wide (whole
    // vectors and a masked tail, from align_stores_from bytes after a masked head up to the
    // destination's alignment), unpacking far-apart blocks after prefetching the lines of the
    // block 16 ahead. Blocks of 1-300 bytes at gaps of 1-40, blocks of 1-700 bytes at gaps of
    // 256-855 (lengths mostly no multiple of 64), and rows of 65-4000 bytes 7 bytes apart (from
    // libc_rows_from, off Intel, one memcpy call per row), with and without the AVX-512 paths:
    // the typed buffer and the packed stream end where a guard page begins, and the gaps must
    // keep their bytes after an unpack.
    constexpr std::byte gap{0x5a};
    std::uint64_t seed = 12345;
    const auto next = [&](std::int64_t n) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        return static_cast<std::int64_t>((seed >> 33) % static_cast<std::uint64_t>(n));
    };
    std::vector<layout> forms;
    for (int list = 0; list < 8; ++list) {
        std::vector<block> blocks;
        std::int64_t at = 0;
        for (int i = 0; i < 60; ++i) {
            const std::int64_t len = 1 + next(300);
            blocks.push_back({at, len});
            at += len + 1 + next(40);
        }
        forms.push_back(layout{{}, blocks});
    }
    // Lists whose blocks lie 256 bytes or more apart on average, so that unpacking prefetches the
    // blocks 16 ahead of the copy (blocks_masked's Ahead).
    for (int list = 0; list < 3; ++list) {
        std::vector<block> blocks;
        std::int64_t at = next(64);
        for (int i = 0; i < 100 + list * 37; ++i) {
            const std::int64_t len = 1 + next(700);
            blocks.push_back({at, len});
            at += len + 256 + next(600);
        }
        REQUIRE(shunt::detail::prefetch_blocks_pay(blocks.data(), blocks.size()));
        forms.push_back(layout{{}, blocks});
    }
    // The first lists (under 64 blocks) do not prefetch, nor would two of them end to end (blocks
    // about 170 bytes apart), nor the far-apart lists' first 63 blocks.
    REQUIRE_FALSE(shunt::detail::prefetch_blocks_pay(forms[0].blocks.data(), forms[0].blocks.size()));
    std::vector<block> close = forms[0].blocks;
    const std::int64_t after = close.back().offset + close.back().length + 1;
    for (const block& b : forms[1].blocks) close.push_back({after + b.offset, b.length});
    REQUIRE(close.size() >= 64);
    REQUIRE_FALSE(shunt::detail::prefetch_blocks_pay(close.data(), close.size()));
    REQUIRE_FALSE(shunt::detail::prefetch_blocks_pay(forms[8].blocks.data(), 63));
    for (const std::int64_t len : {65, 100, 127, 129, 200, 255, 256, 263, 384, 511, 700, 1000, 4000})
        forms.push_back(shunt::make_hvector(50, len, len + 7, byte_form, 1));
    for (const bool masked : {true, false}) {
        shunt::detail::masked_blocks_allowed = masked;
        for (std::size_t f = 0; f < forms.size(); ++f) {
            CAPTURE(masked);
            CAPTURE(f);
            const auto flat = shunt::flatten(forms[f]);
            const std::int64_t span = flat.back().offset + flat.back().length;
            std::vector<std::byte> source(static_cast<std::size_t>(span)), expect, inside(source.size(), std::byte{0});
            for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<std::byte>((i * 131) >> 3);
            for (const auto& b : flat) {
                expect.insert(expect.end(), source.begin() + b.offset, source.begin() + b.offset + b.length);
                std::fill(inside.begin() + b.offset, inside.begin() + b.offset + b.length, std::byte{1});
            }
            const auto size = static_cast<std::int64_t>(expect.size());
            guarded typed(source.size()), packed(expect.size());
            std::memcpy(typed.data, source.data(), source.size());
            CHECK(shunt::pack_host(forms[f], span, 1, typed.data, packed.data) == size);
            CHECK(std::memcmp(packed.data, expect.data(), expect.size()) == 0);
            std::memset(typed.data, static_cast<int>(gap), source.size());
            CHECK(shunt::unpack_host(forms[f], span, 1, packed.data, typed.data) == size);
            std::int64_t wrong = 0;
            for (std::size_t i = 0; i < source.size(); ++i)
                wrong += typed.data[i] != (inside[i] == std::byte{1} ? source[i] : gap);
            CHECK(wrong == 0);
        }
    }
    shunt::detail::masked_blocks_allowed = true;
}

TEST_CASE("host packer: small irregular blocks across separate mappings, whole and windowed") {
    // Without AVX-512, lists of short blocks pack by over-wide moves (blocks_overwide): each
    // block of up to 32 bytes is one 16 or 32-byte load and store. The loads must not cross from
    // a block's page into the next, which here is a guard page: the list's first part lies in one
    // mapping, its last block ending where that mapping's guard page begins, and its second part
    // in another mapping (as with absolute addresses from MPI_BOTTOM). Many blocks start in the
    // last 32 bytes of a page. The stores must stay inside the packed bytes of their pass: the
    // stream ends at a guard page, and so does each window of it. With and without AVX-512.
    std::uint64_t seed = 777;
    const auto next = [&](std::int64_t n) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        return static_cast<std::int64_t>((seed >> 33) % static_cast<std::uint64_t>(n));
    };
    for (const std::int64_t longest : {15, 31, 47})
        for (const bool closed : {true, false}) {
            const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
            guarded first(8 * page), second(2 * page);
            const std::int64_t apart = second.data - first.data;  // may be negative
            std::vector<block> blocks;
            // First mapping: blocks up to its end, crowding each page's last 32 bytes.
            std::int64_t at = 0;
            while (true) {
                const std::int64_t len = 1 + next(longest);
                std::int64_t gap = 1 + next(24);
                const std::int64_t in_page = (at + gap) % static_cast<std::int64_t>(page);
                if (next(20) == 0 && in_page < static_cast<std::int64_t>(page) - 40)
                    gap += static_cast<std::int64_t>(page) - 32 + next(31) - in_page;  // into the last 32 bytes
                if (at + gap + len + 40 > static_cast<std::int64_t>(8 * page)) break;
                at += gap;
                blocks.push_back({at, len});
                at += len;
            }
            const std::int64_t closing = 1 + next(longest);
            blocks.push_back({static_cast<std::int64_t>(8 * page) - closing, closing});  // ends at the guard
            const std::size_t in_first = blocks.size();
            for (at = next(16); at < static_cast<std::int64_t>(2 * page) - 64;) {
                const std::int64_t len = 1 + next(longest);
                blocks.push_back({apart + at, len});
                at += len + 1 + next(24);
            }
            // Closed: the list's last block ends at the second guard page too. Open: it ends
            // mid-page, where only the packed stream's end bounds the last blocks' stores.
            const std::int64_t closing2 = 1 + next(longest);
            if (closed) blocks.push_back({apart + static_cast<std::int64_t>(2 * page) - closing2, closing2});
            // Source bytes and the expected stream.
            for (std::size_t i = 0; i < 8 * page; ++i) first.data[i] = static_cast<std::byte>(i * 7 + 1);
            for (std::size_t i = 0; i < 2 * page; ++i) second.data[i] = static_cast<std::byte>(i * 13 + 5);
            std::vector<std::byte> expect;
            for (const block& b : blocks)
                for (std::int64_t k = 0; k < b.length; ++k) expect.push_back(first.data[b.offset + k]);
            const auto size = static_cast<std::int64_t>(expect.size());
            REQUIRE(size <= shunt::detail::overwide_mean_bytes * static_cast<std::int64_t>(blocks.size()));
            REQUIRE(in_first > 50);
            std::size_t near_end = 0;  // blocks of the first mapping whose 32-byte load would cross a page
            for (std::size_t i = 0; i < in_first; ++i)
                near_end += blocks[i].offset % static_cast<std::int64_t>(page) > static_cast<std::int64_t>(page) - 32;
            REQUIRE(near_end >= 4);
            const layout form{{}, blocks};
            // Two passes too (an hvector of the list, the second pass at the same bytes: a zero
            // stride), so that a pass's over-wide stores could reach into the next pass's bytes.
            const layout twice = shunt::make_hvector(2, 1, 0, form, 1);
            for (const bool masked : {true, false}) {
                shunt::detail::masked_blocks_allowed = masked;
                CAPTURE(masked);
                CAPTURE(longest);
                CAPTURE(closed);
                {
                    guarded packed(expect.size());
                    CHECK(shunt::pack_host(form, 1, 1, first.data, packed.data) == size);
                    CHECK(std::memcmp(packed.data, expect.data(), expect.size()) == 0);
                }
                {
                    guarded packed(2 * expect.size());
                    CHECK(shunt::pack_host(twice, 1, 1, first.data, packed.data) == 2 * size);
                    CHECK(std::memcmp(packed.data, expect.data(), expect.size()) == 0);
                    CHECK(std::memcmp(packed.data + size, expect.data(), expect.size()) == 0);
                }
                {
                    // Unpacked back into mappings of `gap` bytes: the blocks come back, the gaps stay
                    // (blocks_unpack_short where AVX-512 is absent).
                    constexpr std::byte gap{0xa5};
                    std::vector<std::byte> keep_first(first.data, first.data + 8 * page),
                        keep_second(second.data, second.data + 2 * page);
                    std::memset(first.data, static_cast<int>(gap), 8 * page);
                    std::memset(second.data, static_cast<int>(gap), 2 * page);
                    guarded packed(expect.size());
                    std::memcpy(packed.data, expect.data(), expect.size());
                    CHECK(shunt::unpack_host(form, 1, 1, packed.data, first.data) == size);
                    std::vector<char> inside(10 * page, 0);  // first's bytes, then second's
                    for (const block& b : blocks)
                        for (std::int64_t k = 0; k < b.length; ++k) {
                            const std::int64_t o = b.offset + k;
                            inside[static_cast<std::size_t>(o >= 0 && o < static_cast<std::int64_t>(8 * page)
                                                                ? o
                                                                : 8 * static_cast<std::int64_t>(page) + o - apart)] = 1;
                        }
                    std::int64_t wrong = 0;
                    for (std::size_t i = 0; i < 10 * page; ++i) {
                        const std::byte got = i < 8 * page ? first.data[i] : second.data[i - 8 * page];
                        const std::byte was = i < 8 * page ? keep_first[i] : keep_second[i - 8 * page];
                        wrong += got != (inside[i] ? was : gap);
                    }
                    CHECK(wrong == 0);
                    std::memcpy(first.data, keep_first.data(), 8 * page);
                    std::memcpy(second.data, keep_second.data(), 2 * page);
                }
                for (const std::int64_t from : {std::int64_t{0}, std::int64_t{1}, size / 3, size - 40})
                    for (const std::int64_t bytes : {std::int64_t{1}, std::int64_t{33}, size / 2, 2 * size - from}) {
                        CAPTURE(from);
                        CAPTURE(bytes);
                        const std::int64_t got = std::min(bytes, 2 * size - from);
                        guarded packed(static_cast<std::size_t>(got));
                        CHECK(shunt::pack_host(twice, 1, 1, first.data, packed.data, from, bytes) == got);
                        std::int64_t wrong = 0;
                        for (std::int64_t k = 0; k < got; ++k)
                            wrong += packed.data[k] != expect[static_cast<std::size_t>((from + k) % size)];
                        CHECK(wrong == 0);
                    }
            }
            shunt::detail::masked_blocks_allowed = true;
        }
}

TEST_CASE("host packer: unpack_short writes exactly the block, for every length from 1 to 16") {
    // Four 4-byte moves at spread offsets (lengths 4-16) or three byte moves (1-3): together they
    // must cover the block and never touch the byte before or after it.
    constexpr std::byte gap{0x3c};
    for (std::int64_t len = 1; len <= 16; ++len)
        for (std::int64_t shift = 0; shift < 4; ++shift) {
            CAPTURE(len);
            CAPTURE(shift);
            std::vector<std::byte> packed(16), typed(40, gap);
            for (std::int64_t k = 0; k < 16; ++k) packed[static_cast<std::size_t>(k)] = static_cast<std::byte>(k + 1);
            shunt::detail::unpack_short(typed.data() + 8 + shift, packed.data(), len);
            std::int64_t wrong = 0;
            for (std::int64_t i = 0; i < 40; ++i) {
                const std::int64_t k = i - 8 - shift;
                wrong +=
                    typed[static_cast<std::size_t>(i)] != (k >= 0 && k < len ? static_cast<std::byte>(k + 1) : gap);
            }
            CHECK(wrong == 0);
        }
}

// Regressions found by tests/fuzz/fuzz_datatype (their inputs are replayed by the fuzz/datatype
// test): offsets, strides and sizes beyond 64 bits must be refused or kept exact, never wrapped.

TEST_CASE("simplify: blocks whose end passes 2^63 do not merge with a block at -2^63") {
    constexpr std::int64_t top = std::numeric_limits<std::int64_t>::max();
    constexpr std::int64_t bottom = std::numeric_limits<std::int64_t>::min();
    const layout l{{}, {{top, 1}, {bottom, 1}}};
    CHECK(shunt::simplify(l) == l);  // neither touching (the end wraps) nor periodic (the shift overflows)
}

TEST_CASE("make_hindexed: displacements 2^63 or more apart are no stride") {
    constexpr std::int64_t bottom = std::numeric_limits<std::int64_t>::min();
    const std::vector<std::int64_t> lengths{1, 1}, displs{bottom, 1};
    const layout l = shunt::make_hindexed(lengths, displs, int_form, 4);
    CHECK(shunt::flatten(l) == std::vector<block>{{bottom, 4}, {1, 4}});
}

TEST_CASE("simplify: dimensions tile only where the inner span fits in 64 bits") {
    // 2 x 2^62 wraps to -2^63, the outer stride: not a tiling.
    constexpr std::int64_t bottom = std::numeric_limits<std::int64_t>::min();
    const layout l{{{32768, bottom}, {2, std::int64_t{1} << 62}}, {{0, 1}}};
    CHECK(shunt::simplify(l) == l);
}

TEST_CASE("flatten: a block offset beyond 64 bits is unsupported") {
    constexpr std::int64_t top = std::numeric_limits<std::int64_t>::max();
    CHECK_THROWS_AS(shunt::flatten(layout{{{2, top}}, {{1, 1}}}), shunt::unsupported);
    CHECK_THROWS_AS(shunt::simplify(layout{{{2, top}}, {{1, 1}}}), shunt::unsupported);
}

TEST_CASE("make_darray: a block distribution's offset beyond 64 bits is unsupported") {
    // Rank 1 of 2 owns elements 2 and 3, at 2 x 2^62 bytes: past 2^63.
    const std::vector<shunt::darray_dim> dims{{4, shunt::distribution::block, 0, 2}};
    CHECK_THROWS_AS(shunt::make_darray(1, dims, true, byte_form, std::int64_t{1} << 62), shunt::unsupported);
}

TEST_CASE("make_darray: a cyclic distribution stops where the next block start passes 2^63") {
    // Blocks of 2^61 elements dealt to 2 ranks over 2^63 - 1: rank 1 owns 2^61.. and 3 x 2^61..
    // (one short, at the end); the next start, 5 x 2^61, is past 64 bits.
    constexpr std::int64_t b = std::int64_t{1} << 61;
    const std::vector<shunt::darray_dim> dims{
        {std::numeric_limits<std::int64_t>::max(), shunt::distribution::cyclic, b, 2}};
    CHECK(shunt::flatten(shunt::make_darray(1, dims, true, byte_form, 1)) ==
          std::vector<block>{{b, b}, {3 * b, b - 1}});
}

TEST_CASE("make_struct: a block count whose blocks pass 2^64 is unsupported, not flattened") {
    // 2^61 copies of a child of 8 separate blocks: 2^64 blocks, which wrapped to 0 in the cap's test.
    const layout eight{{}, {{0, 1}, {2, 1}, {4, 1}, {6, 1}, {8, 1}, {10, 1}, {12, 1}, {14, 1}}};
    const std::vector<std::int64_t> lengths{std::int64_t{1} << 61, 1}, displs{0, 0}, extents{16, 4};
    const std::vector<const layout*> children{&eight, &int_form};
    CHECK_THROWS_AS(shunt::make_struct(lengths, displs, children, extents), shunt::unsupported);
}
