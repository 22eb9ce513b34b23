// tests/mpi/test_gpu_index.cpp: the GPU kernels' index math (shunt/gpu/index.hpp, staged.hpp), run on the host
// through the kernel emulation, against the host packer over the random datatype pool.
//
// usage: test_gpu_index [N] [--seed S] [--only I]
//   N random types (default 10000), the pool of tests/mpi/test_pack_diff.cpp. For every type and
//   for counts 1 and 2..4: the typed offset of every packed byte against the flattened layout,
//   pack_emulated against pack_host (whole, random windows, chunks) with the widest word and with
//   every narrower one, unpack_emulated against unpack_host (whole buffer compared, untouched
//   bytes included), fused emulated launches of several items against separate host packs and
//   unpacks, and, where they apply, the staged kernels' phases (shunt/gpu/staged.hpp) against both
//   (random launch shapes and stage capacities).
#include "probe.hpp"
#include "random_types.hpp"

#include <shunt/datatype/decode.hpp>
#include <shunt/gpu/emulate.hpp>
#include <shunt/pack/host.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using shunt_test::rng;
using shunt_test::typed_buffer;

constexpr std::int64_t max_span = 16 << 20;
constexpr unsigned char sentinel = 0x5a;

struct stats {
    std::int64_t types = 0, unsupported = 0, cases = 0, skipped = 0, windows = 0, unpacks = 0, fused = 0,
                 fused_unpacks = 0;
    std::int64_t multi_block = 0, multi_dim = 0, fast = 0, staged = 0, words[17] = {};
    std::int64_t failed_types = 0;
};

class type_check {
public:
    type_check(const shunt_test::random_type& t, std::uint64_t seed, stats& st) : t_(t), r_(seed ^ 0x6e0ULL), st_(st) {}

    std::vector<std::string> run() {
        try {
            info_ = shunt::decode(t_.type);
        } catch (const shunt::unsupported&) {
            ++st_.unsupported;  // left to the library; test_pack_diff checks that this is right
            return failures_;
        }
        std::vector<std::int64_t> counts{1, r_.range(2, 4)};
        for (std::int64_t c : counts)
            if (c <= t_.max_count) check_count(c);
        return failures_;
    }

private:
    void fail(std::string what) {
        if (failures_.size() < 8) failures_.push_back(std::move(what));
    }

    void check_count(std::int64_t count) {
        const std::int64_t extent = info_.extent, total = info_.size * count;
        std::int64_t lo = 0, hi = 0;
        if (total > 0) {
            lo = std::min(info_.true_lb, info_.true_lb + (count - 1) * extent);
            hi = std::max(info_.true_lb + info_.true_extent, info_.true_lb + (count - 1) * extent + info_.true_extent);
        }
        if (!t_.bottom && hi - lo > max_span) {
            ++st_.skipped;
            return;
        }
        typed_buffer buf = t_.bottom ? typed_buffer(t_.memory.get(), t_.memory_bytes) : typed_buffer(lo, hi);
        if (!buf.covers(lo, hi)) {
            ++st_.skipped;
            return;
        }
        ++st_.cases;
        const std::string at = " (count " + std::to_string(count) + ")";
        const shunt::gpu::flat_form f(info_.form, extent, count);
        const shunt::gpu::pack_desc& d = f.desc();
        if (d.total != total) {
            fail("descriptor packs " + std::to_string(d.total) + " bytes, expected " + std::to_string(total) + at);
            return;
        }
        st_.multi_block += d.nblocks > 1;
        st_.multi_dim += d.ndims > 1;

        // The index math alone: every packed byte's typed offset against the flat layout, by the
        // table (typed_offset) and, where it applies, by the fast path (one block, up to three dims).
        const auto pos = shunt_test::layout_positions(info_.form, extent, count);
        auto offsets_match = [&](const char* what, auto&& offset_of) {
            for (std::int64_t p = 0; p < total; ++p)
                if (offset_of(p) != pos[static_cast<std::size_t>(p)]) {
                    fail(std::string(what) + " of packed byte " + std::to_string(p) + " is " +
                         std::to_string(offset_of(p)) + ", the layout says " +
                         std::to_string(pos[static_cast<std::size_t>(p)]) + at);
                    return false;
                }
            return true;
        };
        if (!offsets_match("typed_offset", [&](std::int64_t p) { return shunt::gpu::typed_offset(d, p); })) return;
        const shunt::gpu::fast_dims fd = shunt::gpu::make_fast_dims(d);
        if (fd.ndims >= 0) {
            ++st_.fast;
            if (!offsets_match("fast_offset", [&](std::int64_t p) { return shunt::gpu::fast_offset(fd, p); })) return;
            // The staged kernels' cursor: from stream byte 0 and from a random element, moved on one
            // element at a time (elements: the widest power of two up to 4 dividing the block).
            const auto sd = shunt::gpu::make_staged_dims(fd);
            if (sd.fast.ndims >= 1 && total > 0) {
                const std::int64_t block = fd.inner[fd.ndims - 1];
                const std::int64_t elem = std::min<std::int64_t>(block & -block, 4);
                for (const std::int64_t start : {std::int64_t{0}, r_.range(0, (total - 1) / elem) * elem}) {
                    shunt::gpu::fast_cursor c = shunt::gpu::cursor_at(sd, start);
                    for (std::int64_t p = start; p < total; p += elem) {
                        if (p > start) shunt::gpu::advance(sd, c, elem);
                        if (c.off != pos[static_cast<std::size_t>(p)]) {
                            fail("cursor from " + std::to_string(start) + " at packed byte " + std::to_string(p) +
                                 " is " + std::to_string(c.off) + ", the layout says " +
                                 std::to_string(pos[static_cast<std::size_t>(p)]) + at);
                            return;
                        }
                    }
                }
            }
        }

        // Whole pack with each word size the alignment allows (the widest first).
        buf.fill(r_.next());
        std::vector<unsigned char> ref(static_cast<std::size_t>(total) + 32, sentinel);
        if (shunt::pack_host(info_.form, extent, count, buf.origin(), ref.data()) != total) fail("pack_host size" + at);
        // The output sits at a random offset in a 16-byte aligned buffer, so every word size occurs.
        std::vector<shunt::gpu::word16> storage(static_cast<std::size_t>(total / 16 + 4));
        unsigned char* out = reinterpret_cast<unsigned char*>(storage.data()) + (r_.chance(50) ? 0 : r_.range(0, 15));
        const shunt::gpu::window whole{0, total};
        const int widest = total == 0 ? 1
                                      : shunt::gpu::word_size(d, reinterpret_cast<std::uintptr_t>(buf.origin()),
                                                              reinterpret_cast<std::uintptr_t>(out), whole);
        ++st_.words[widest];
        for (int word = widest; word >= 1; word /= 2) {
            std::memset(out, sentinel, static_cast<std::size_t>(total) + 16);
            const std::int64_t threads = r_.range(1, 200);
            const std::int64_t got =
                shunt::gpu::pack_emulated(f, buf.origin(), out, 0, total + r_.range(0, 9), word, threads);
            if (got != total || std::memcmp(out, ref.data(), static_cast<std::size_t>(total)) != 0 ||
                !untouched(out + total, 16))
                fail("pack_emulated (word " + std::to_string(word) + ", " + std::to_string(threads) +
                     " threads) differs from pack_host" + at);
        }

        // The staged kernels' phases, where they apply: every word size of 4 bytes or fewer, random
        // launch shapes, and stages of random capacity, so tiles both go through the stage and,
        // where the typed span outgrows it, directly; whole streams and random windows.
        const bool staged = fd.ndims >= 0 && shunt::gpu::staged_usable(fd) && !f.contiguous();
        if (staged) {
            ++st_.staged;
            for (int word = std::min(widest, 4); word >= 1; word /= 2) {
                const std::int64_t threads = r_.range(1, 64), blocks = r_.range(1, 4);
                const std::int64_t capacity = r_.chance(50) ? 0 : r_.range(1, threads * 2 + 2);
                std::memset(out, sentinel, static_cast<std::size_t>(total) + 16);
                const std::int64_t got =
                    shunt::gpu::pack_staged_emulated(f, buf.origin(), out, 0, total, word, threads, blocks, capacity);
                if (got != total || std::memcmp(out, ref.data(), static_cast<std::size_t>(total)) != 0 ||
                    !untouched(out + total, 16))
                    fail("pack_staged_emulated (word " + std::to_string(word) + ", " + std::to_string(blocks) + "x" +
                         std::to_string(threads) + " threads, capacity " + std::to_string(capacity) +
                         ") differs from pack_host" + at);
            }
            std::vector<unsigned char> want_win(static_cast<std::size_t>(total) + 16);
            for (int w = 0; w < 2; ++w) {
                const std::int64_t first = r_.range(0, total), len = r_.range(0, total - first + 4);
                std::fill(want_win.begin(), want_win.end(), sentinel);
                std::memset(out, sentinel, static_cast<std::size_t>(total) + 16);
                const std::int64_t want =
                    shunt::pack_host(info_.form, extent, count, buf.origin(), want_win.data(), first, len);
                const std::int64_t got =
                    shunt::gpu::pack_staged_emulated(f, buf.origin(), out, first, len, 0, r_.range(1, 64));
                if (got != want || std::memcmp(out, want_win.data(), static_cast<std::size_t>(total) + 16) != 0)
                    fail("pack_staged_emulated window [" + std::to_string(first) + ",+" + std::to_string(len) +
                         ") differs" + at);
            }
        }

        // Windows [first, first + len), compared with pack_host's window (sentinels after it).
        std::vector<unsigned char> host_win(static_cast<std::size_t>(total) + 16);
        for (int w = 0; w < 4; ++w) {
            ++st_.windows;
            const std::int64_t first = r_.range(-1, total), len = r_.range(-1, total - first + 4);
            std::fill(host_win.begin(), host_win.end(), sentinel);
            std::memset(out, sentinel, static_cast<std::size_t>(total) + 16);
            const std::int64_t want =
                shunt::pack_host(info_.form, extent, count, buf.origin(), host_win.data(), first, len);
            const std::int64_t got = shunt::gpu::pack_emulated(f, buf.origin(), out, first, len);
            if (got != want || std::memcmp(out, host_win.data(), static_cast<std::size_t>(total) + 16) != 0)
                fail("pack_emulated window [" + std::to_string(first) + ",+" + std::to_string(len) + ") differs" + at);
        }
        std::vector<unsigned char> chunked(static_cast<std::size_t>(total) + 1);
        for (std::int64_t first = 0; first < total;) {
            const std::int64_t len = r_.range(1, std::max<std::int64_t>(1, total / 3 + 1));
            const std::int64_t n = shunt::gpu::pack_emulated(f, buf.origin(), chunked.data() + first, first, len);
            if (n <= 0) {
                fail("pack_emulated chunk at " + std::to_string(first) + " moved nothing" + at);
                break;
            }
            first += n;
        }
        if (!std::equal(chunked.begin(), chunked.begin() + total, ref.begin()))
            fail("pack_emulated in chunks differs" + at);

        // Fused: the whole stream, its first element and a second copy in one launch, into two
        // outputs (the first holding two items back to back).
        if (total > 0) {
            ++st_.fused;
            const shunt::gpu::flat_form one(info_.form, extent, 1);
            const std::int64_t size1 = info_.size;
            std::vector<unsigned char> a(static_cast<std::size_t>(total + size1) + 8, sentinel),
                b(ref.size(), sentinel);
            std::vector<unsigned char> ref1(static_cast<std::size_t>(size1));
            shunt::pack_host(info_.form, extent, 1, buf.origin(), ref1.data());
            const shunt::gpu::fused_input in[3] = {
                {&f, buf.origin(), a.data()}, {&one, buf.origin(), a.data() + total}, {&f, buf.origin(), b.data() + 1}};
            shunt::gpu::pack_fused_emulated(in, r_.range(1, 64), r_.range(1, 5));
            if (std::memcmp(a.data(), ref.data(), static_cast<std::size_t>(total)) != 0 ||
                std::memcmp(a.data() + total, ref1.data(), static_cast<std::size_t>(size1)) != 0 ||
                std::memcmp(b.data() + 1, ref.data(), static_cast<std::size_t>(total)) != 0 ||
                a[static_cast<std::size_t>(total + size1)] != sentinel || b[0] != sentinel ||
                b[static_cast<std::size_t>(total) + 1] != sentinel)
                fail("pack_fused_emulated differs from pack_host" + at);
        }

        // Unpack (typemaps without repeated bytes: threads would race on the others).
        if (!shunt_test::distinct(pos)) return;
        ++st_.unpacks;
        const std::uint64_t before = r_.next();
        buf.fill(before);
        shunt::unpack_host(info_.form, extent, count, ref.data(), buf.origin());
        const auto expect = buf.snapshot();
        for (int word = widest; word >= 1; word /= 2) {
            buf.fill(before);
            const std::int64_t got =
                shunt::gpu::unpack_emulated(f, ref.data(), buf.origin(), 0, total, word, r_.range(1, 200));
            if (got != total || buf.snapshot() != expect)
                fail("unpack_emulated (word " + std::to_string(word) + ") differs from unpack_host" + at);
        }
        for (int w = 0; w < 2; ++w) {
            const std::int64_t first = r_.range(0, total), len = r_.range(0, total - first + 4);
            buf.fill(before);
            const std::int64_t want =
                shunt::unpack_host(info_.form, extent, count, ref.data() + first, buf.origin(), first, len);
            const auto host_window = buf.snapshot();
            buf.fill(before);
            const std::int64_t got = shunt::gpu::unpack_emulated(f, ref.data() + first, buf.origin(), first, len);
            if (got != want || buf.snapshot() != host_window)
                fail("unpack_emulated window [" + std::to_string(first) + ",+" + std::to_string(len) + ") differs" +
                     at);
            if (staged) {
                buf.fill(before);
                const std::int64_t got_staged = shunt::gpu::unpack_staged_emulated(
                    f, ref.data() + first, buf.origin(), first, len, 0, r_.range(1, 64), r_.range(1, 4));
                if (got_staged != want || buf.snapshot() != host_window)
                    fail("unpack_staged_emulated window [" + std::to_string(first) + ",+" + std::to_string(len) +
                         ") differs" + at);
            }
        }
        if (staged)
            for (int word = std::min(widest, 4); word >= 1; word /= 2) {
                buf.fill(before);
                const std::int64_t got = shunt::gpu::unpack_staged_emulated(f, ref.data(), buf.origin(), 0, total, word,
                                                                            r_.range(1, 64), r_.range(1, 4));
                if (got != total || buf.snapshot() != expect)
                    fail("unpack_staged_emulated (word " + std::to_string(word) + ") differs from unpack_host" + at);
            }

        // Fused unpack: the whole stream into this buffer and the stream's first element into a
        // second typed buffer, in one emulated launch, each against unpack_host.
        if (total > 0 && !t_.bottom) {
            ++st_.fused_unpacks;
            const shunt::gpu::flat_form one(info_.form, extent, 1);
            typed_buffer second(lo, hi);
            second.fill(before);
            shunt::unpack_host(info_.form, extent, 1, ref.data(), second.origin());
            const auto expect_one = second.snapshot();
            buf.fill(before);
            second.fill(before);
            const shunt::gpu::fused_output items[2] = {{&f, ref.data(), buf.origin()},
                                                       {&one, ref.data(), second.origin()}};
            shunt::gpu::unpack_fused_emulated(items, r_.range(1, 64), r_.range(1, 5));
            if (buf.snapshot() != expect || second.snapshot() != expect_one)
                fail("unpack_fused_emulated differs from unpack_host" + at);
        }
    }

    static bool untouched(const unsigned char* p, std::int64_t n) {
        return std::all_of(p, p + n, [](unsigned char c) { return c == sentinel; });
    }

    const shunt_test::random_type& t_;
    rng r_;
    stats& st_;
    shunt::type_info info_;
    std::vector<std::string> failures_;
};

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    std::int64_t types = 10000, only = -1;
    std::uint64_t seed = 20261122;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--seed" && i + 1 < argc) {
            seed = std::strtoull(argv[++i], nullptr, 0);
        } else if (a == "--only" && i + 1 < argc) {
            only = std::strtoll(argv[++i], nullptr, 0);
        } else if (!a.empty() && a[0] != '-' && std::strtoll(a.c_str(), nullptr, 0) > 0) {
            types = std::strtoll(a.c_str(), nullptr, 0);
        } else {
            std::fprintf(stderr, "usage: %s [N] [--seed S] [--only I]\n", argv[0]);
            MPI_Finalize();
            return 2;
        }
    }
    // The fast path's division by multiplication, at its edges: divisors up to 2^32 (small, near
    // powers of two, random) and numerators up to 2^32 - 1 around their multiples.
    std::int64_t division_failures = 0;
    {
        rng r(seed ^ 0xd1ULL);
        std::vector<std::uint64_t> divisors{2,
                                            3,
                                            5,
                                            6,
                                            7,
                                            24,
                                            48,
                                            96,
                                            100,
                                            1000,
                                            4095,
                                            4097,
                                            65535,
                                            65537,
                                            (1ULL << 31) - 1,
                                            1ULL << 31,
                                            (1ULL << 31) + 1,
                                            (1ULL << 32) - 1,
                                            1ULL << 32};
        for (int i = 0; i < 2000; ++i) divisors.push_back(2 + r.next() % ((1ULL << (2 + r.next() % 31)) - 1));
        constexpr std::uint64_t top = (1ULL << 32) - 1;
        for (const std::uint64_t d : divisors) {
            const std::uint64_t recip = ~std::uint64_t{0} / d + 1;
            std::vector<std::uint64_t> ps{0, 1, d - 1, d, d + 1, top, top - 1, top / d * d, top / d * d - 1};
            for (int i = 0; i < 50; ++i) {
                const std::uint64_t k = r.next() % (top / d + 1);
                ps.push_back(k * d);
                ps.push_back(k * d + d - 1 > top ? top : k * d + d - 1);
                ps.push_back(r.next() % (top + 1));
            }
            for (const std::uint64_t p : ps)
                if (p <= top && shunt::gpu::mul_high(p, recip) != p / d && division_failures++ < 5)
                    std::printf("FAIL: %llu / %llu by multiplication gives %llu\n", static_cast<unsigned long long>(p),
                                static_cast<unsigned long long>(d),
                                static_cast<unsigned long long>(shunt::gpu::mul_high(p, recip)));
        }
    }
    shunt_test::type_generator gen(0, 1);
    stats st;
    const std::int64_t begin = only >= 0 ? only : 0, end = only >= 0 ? only + 1 : types;
    for (std::int64_t i = begin; i < end; ++i) {
        const std::uint64_t item = shunt_test::item_seed(seed, 0, static_cast<std::uint64_t>(i));
        const shunt_test::random_type t = gen.make(item);
        ++st.types;
        type_check check(t, item, st);
        const auto failures = check.run();
        if (!failures.empty()) {
            ++st.failed_types;
            std::printf("FAIL type %lld: %s\n", static_cast<long long>(i), t.desc.c_str());
            for (const auto& f : failures) std::printf("  %s\n", f.c_str());
            std::printf("  reproduce: %s --seed %llu --only %lld\n", argv[0], static_cast<unsigned long long>(seed),
                        static_cast<long long>(i));
        }
    }
    std::printf(
        "gpu_index seed %llu: %lld types (%lld left to the library), %lld cases (%lld skipped for memory; "
        "%lld with several blocks, %lld with several dims, %lld with the fast path, %lld staged), widest words "
        "1/2/4/8/16 B: "
        "%lld/%lld/%lld/%lld/%lld, "
        "%lld pack windows, %lld fused launches, %lld unpacks, %lld fused unpack launches: %lld failed\n",
        static_cast<unsigned long long>(seed), static_cast<long long>(st.types), static_cast<long long>(st.unsupported),
        static_cast<long long>(st.cases), static_cast<long long>(st.skipped), static_cast<long long>(st.multi_block),
        static_cast<long long>(st.multi_dim), static_cast<long long>(st.fast), static_cast<long long>(st.staged),
        static_cast<long long>(st.words[1]), static_cast<long long>(st.words[2]), static_cast<long long>(st.words[4]),
        static_cast<long long>(st.words[8]), static_cast<long long>(st.words[16]), static_cast<long long>(st.windows),
        static_cast<long long>(st.fused), static_cast<long long>(st.unpacks), static_cast<long long>(st.fused_unpacks),
        static_cast<long long>(st.failed_types));
    if (division_failures)
        std::printf("%lld divisions by multiplication failed\n", static_cast<long long>(division_failures));
    MPI_Finalize();
    return st.failed_types == 0 && division_failures == 0 ? 0 : 1;
}
