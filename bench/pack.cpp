// bench/pack.cpp: bench-pack, MPI_Pack and MPI_Unpack of the MPI library against shunt's, per datatype family.
#include "harness.hpp"

#include <shunt/plan/planner.hpp>

#include <mpi.h>

#include <time.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace shunt::bench;

/// A stride between blocks: a multiple of the block length ("2x") or bytes ("512").
struct stride_spec {
    std::int64_t value = 0;
    bool times = false;
    std::int64_t bytes(std::int64_t block) const { return times ? value * block : value; }
};

/// The families and shapes to run; --quick changes the defaults of what is not given.
struct settings {
    bool quick = false;
    std::vector<std::int64_t> blocks = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
    std::vector<stride_spec> strides = {{2, true}, {4, true}, {512, false}};
    std::vector<std::int64_t> cubes = {128, 256};
    std::vector<std::int64_t> indexed = {8, 64, 512};
    std::vector<std::int64_t> sizes = {64 << 10, 1 << 20, 16 << 20};
    std::int64_t max_footprint = std::int64_t{1} << 30;
};

std::vector<stride_spec> parse_strides(const std::string& text) {
    std::vector<stride_spec> out;
    std::size_t start = 0;
    while (start <= text.size()) {
        const std::size_t comma = std::min(text.find(',', start), text.size());
        const std::string item = text.substr(start, comma - start);
        if (!item.empty() && (item.back() == 'x' || item.back() == 'X'))
            out.push_back(
                {parse_int(item.substr(0, item.size() - 1), "--strides (multiple of the block)", 1, 1 << 20), true});
        else
            out.push_back({parse_size(item, "--strides"), false});
        start = comma + 1;
    }
    return out;
}

/// One datatype to benchmark: its row name (without the operation), what the table shows of
/// it, and how to build it (only when one of its rows is selected).
struct pack_case {
    std::string name;
    std::string family;
    std::int64_t block = 0;  // bytes per block (the mean for indexed)
    std::int64_t stride = 0;  // bytes from block to block; 0: irregular
    std::int64_t footprint = 0;  // bytes the typed buffer spans (MPI's true extent)
    std::function<MPI_Datatype()> make;
};

MPI_Datatype commit(MPI_Datatype t) {
    SHUNT_CHECK_MPI(MPI_Type_commit(&t));
    return t;
}

std::vector<pack_case> make_cases(const settings& s) {
    std::vector<pack_case> cases;
    // 2-D objects: `size` bytes in blocks of `b` bytes, `stride` bytes apart.
    for (const std::int64_t size : s.sizes) {
        for (const std::int64_t b : s.blocks) {
            std::vector<std::int64_t> done;
            for (const auto& st : s.strides) {
                const std::int64_t stride = st.bytes(b);
                const std::int64_t count = size / b;
                // A stride below the block overlaps blocks (erroneous for unpack): not a 2-D object.
                if (stride < b || count == 0 || std::find(done.begin(), done.end(), stride) != done.end()) continue;
                done.push_back(stride);
                std::int64_t footprint = 0;  // an absurd stride overflows: then the case is skipped as too big
                if (__builtin_mul_overflow(count - 1, stride, &footprint) ||
                    __builtin_add_overflow(footprint, b, &footprint))
                    footprint = std::numeric_limits<std::int64_t>::max();
                cases.push_back(
                    {"vector/b" + std::to_string(b) + "/s" + std::to_string(stride) + "/" + format_bytes(count * b),
                     "vector", b, stride, footprint, [=] {
                         MPI_Datatype t;
                         SHUNT_CHECK_MPI(MPI_Type_create_hvector(static_cast<int>(count), static_cast<int>(b), stride,
                                                                 MPI_BYTE, &t));
                         return commit(t);
                     }});
            }
        }
    }
    // 3-D halo faces: radius-3 faces of an n^3 cube of doubles stored with its halo, (n+6)^3.
    constexpr int r = 3;
    for (const std::int64_t n64 : s.cubes) {
        const int n = static_cast<int>(n64), full = n + 2 * r;
        const std::int64_t row = std::int64_t{full} * 8;
        struct face {
            const char* family;
            int sub[3];  // z, y, x (C order)
            std::int64_t block;
        };
        const face faces[] = {
            {"halo-x", {n, n, r}, r * 8}, {"halo-y", {n, r, n}, n64 * 8}, {"halo-z", {r, n, n}, n64 * 8}};
        for (const face& f : faces) {
            const std::int64_t footprint = ((std::int64_t{f.sub[0]} - 1) * full + f.sub[1] - 1) * row + f.sub[2] * 8;
            cases.push_back({std::string(f.family) + "/n" + std::to_string(n), f.family, f.block, row, footprint, [=] {
                                 const int sizes[3] = {full, full, full}, starts[3] = {r, r, r};
                                 MPI_Datatype t;
                                 SHUNT_CHECK_MPI(
                                     MPI_Type_create_subarray(3, sizes, f.sub, starts, MPI_ORDER_C, MPI_DOUBLE, &t));
                                 return commit(t);
                             }});
        }
    }
    // Indexed: irregular blocks of mean length m (uniform in [1, 2m-1]) separated by irregular
    // gaps (uniform in [1, 2m]), in increasing order, up to `size` bytes; fixed seeds.
    for (const std::int64_t size : s.sizes) {
        for (const std::int64_t m : s.indexed) {
            // Blocks average m bytes and gaps m + 1/2: the span is about (2 + 1/2m) size.
            cases.push_back({"indexed/b" + std::to_string(m) + "/" + format_bytes(size), "indexed", m, 0,
                             2 * size + size / m + 2 * m, [=] {
                                 std::mt19937_64 rng(static_cast<std::uint64_t>(size * 131 + m));
                                 std::uniform_int_distribution<std::int64_t> len(1, 2 * m - 1), gap(1, 2 * m);
                                 std::vector<int> lens;
                                 std::vector<MPI_Aint> displs;
                                 std::int64_t total = 0, at = 0;
                                 while (total < size) {
                                     const std::int64_t l = std::min(len(rng), size - total);
                                     lens.push_back(static_cast<int>(l));
                                     displs.push_back(at);
                                     total += l;
                                     at += l + gap(rng);
                                 }
                                 if (lens.size() > INT_MAX) throw shunt::error("indexed type has too many blocks");
                                 MPI_Datatype t;
                                 SHUNT_CHECK_MPI(MPI_Type_create_hindexed(static_cast<int>(lens.size()), lens.data(),
                                                                          displs.data(), MPI_BYTE, &t));
                                 return commit(t);
                             }});
        }
    }
    return cases;
}

/// A 64-byte aligned heap buffer.
class buffer {
public:
    explicit buffer(std::int64_t n) {
        const std::size_t bytes = (static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) + 63) / 64 * 64;
        data_.reset(static_cast<std::byte*>(std::aligned_alloc(64, bytes)));
        if (!data_) throw std::bad_alloc();
    }
    std::byte* data() const { return data_.get(); }

private:
    struct release {
        void operator()(std::byte* p) const { std::free(p); }
    };
    std::unique_ptr<std::byte, release> data_;
};

void fill(std::byte* p, std::int64_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (std::int64_t i = 0; i < n; i += 8) {
        const std::uint64_t v = rng();
        std::memcpy(p + i, &v, static_cast<std::size_t>(std::min<std::int64_t>(8, n - i)));
    }
}

/// Writes bytes [from, to) of the 64-byte aligned `p` with streaming (non-temporal) stores where
/// the machine has them, and ordinary ones at the unaligned ends; the caller fences.
void stream_fill(std::byte* p, std::int64_t from, std::int64_t to) {
#if defined(__SSE2__)
    const std::int64_t head = std::min(to, (from + 15) / 16 * 16), body = std::max(head, to / 16 * 16);
    std::memset(p + from, 0x5a, static_cast<std::size_t>(head - from));
    const __m128i v = _mm_set1_epi8(0x5a);
    for (std::int64_t at = head; at < body; at += 16) _mm_stream_si128(reinterpret_cast<__m128i*>(p + at), v);
    std::memset(p + body, 0x5a, static_cast<std::size_t>(to - body));
#else
    std::memset(p + from, 0x5a, static_cast<std::size_t>(to - from));
#endif
}

/// Orders streaming stores before what follows.
void stream_fence() {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

/// Throws shunt::error naming the first differing byte of two buffers that should be equal.
void expect_equal(const std::byte* library, const std::byte* shunt_bytes, std::int64_t n, const std::string& what) {
    if (std::memcmp(library, shunt_bytes, static_cast<std::size_t>(n)) == 0) return;
    std::int64_t i = 0;
    while (library[i] == shunt_bytes[i]) ++i;
    char msg[256];
    std::snprintf(msg, sizeof msg, ": byte %lld of %lld differs (library 0x%02x, shunt 0x%02x)",
                  static_cast<long long>(i), static_cast<long long>(n), static_cast<unsigned>(library[i]),
                  static_cast<unsigned>(shunt_bytes[i]));
    throw shunt::error("MISMATCH in " + what + msg);
}

/// Calls of a layout after which shunt's planner has settled it for good: the first look (two
/// warm-ups and the timed calls), the wait for a second look, and the second look. Shunt's variant
/// runs them before its trials, so that its row shows the settled choice, not the best of the
/// calls that measured both packers.
constexpr int settle_calls = 2 * (2 + 2 * shunt::planner::measure_trials) + shunt::planner::recheck_after;

/// The least a packer must do, as loops that move only that traffic, in address order, without
/// gathering anything: a pack loads one byte of each cache line the type touches in the typed
/// buffer and writes the packed bytes whole; an unpack loads one byte of each packed line and
/// rewrites one byte of each touched line (loaded first, which ran faster than a blind store).
/// The packed bytes go along with the lines, 64 lines at a time, their share in proportion. Each
/// runs with and without a prefetch 16 lines ahead (which shunt issues for blocks far apart,
/// where the hardware prefetcher does not follow, and which can also slow the loop), and a pack
/// also with streaming stores, which skip reading the lines they write. The fastest of them,
/// `bound`, estimates what a packer can gain on the library (lib/bound): a packer near it moves
/// data about as fast as this machine's memory system does. It is not a ceiling: shunt's packer
/// runs faster than these loops on some rows.
class traffic_bound {
public:
    /// `marked`: a typed-size buffer whose nonzero bytes are the type's (an unpack of 0xff bytes
    /// into zeros); the lines holding any of them are the touched lines.
    traffic_bound(const std::byte* marked, const std::byte* typed, const std::byte* packed, std::int64_t size,
                  std::int64_t true_extent)
        : typed_(typed), packed_(packed), packed_out_(size), typed_out_(true_extent) {
        if (true_extent / 64 > std::numeric_limits<std::uint32_t>::max())
            throw shunt::error("bench-pack: a typed buffer of " + std::to_string(true_extent) +
                               " bytes has more lines than the bound counts");
        // Line numbers of 4 bytes: the list is read alongside the lines, and its traffic counts.
        for (std::int64_t at = 0; at < true_extent; at += 64) {
            const std::byte* const line_end = marked + std::min<std::int64_t>(at + 64, true_extent);
            if (std::any_of(marked + at, line_end, [](std::byte b) { return b != std::byte{0}; }))
                lines_.push_back(static_cast<std::uint32_t>(at / 64));
        }
        n_ = static_cast<std::int64_t>(lines_.size());
        lines_.resize(lines_.size() + prefetch_ahead, lines_.empty() ? 0 : lines_.back());
        for (std::int64_t i = 0; i < n_; i += 64) share_.push_back(size * i / n_);
        share_.push_back(size);
        fill(packed_out_.data(), size, 7);
        fill(typed_out_.data(), true_extent, 8);
    }

    /// The pack variants (cached and streaming stores, each without and with prefetching).
    std::vector<std::function<void()>> pack_variants() {
        return {[this] { pack<false, false>(); }, [this] { pack<true, false>(); }, [this] { pack<false, true>(); },
                [this] { pack<true, true>(); }};
    }
    /// The unpack variants (without and with prefetching).
    std::vector<std::function<void()>> unpack_variants() {
        return {[this] { unpack<false>(); }, [this] { unpack<true>(); }};
    }

private:
    template <bool Prefetch, bool Stream>
    void pack() {
        unsigned sum = 0;
        for (std::int64_t i = 0, k = 0; i < n_; i += 64, ++k) {
            for (std::int64_t j = i, end = std::min(i + 64, n_); j < end; ++j) {
                if constexpr (Prefetch) __builtin_prefetch(line(typed_, j + prefetch_ahead));
                sum += static_cast<unsigned>(*line(typed_, j));
            }
            if constexpr (Stream)
                stream_fill(packed_out_.data(), share_[k], share_[k + 1]);
            else
                std::memset(packed_out_.data() + share_[k], 0x5a, static_cast<std::size_t>(share_[k + 1] - share_[k]));
        }
        if constexpr (Stream) stream_fence();
        sink_ = sum;
    }
    template <bool Prefetch>
    void unpack() {
        unsigned sum = 0;
        std::byte* const out = typed_out_.data();
        for (std::int64_t i = 0, k = 0; i < n_; i += 64, ++k) {
            for (std::int64_t at = share_[k] / 64 * 64; at < share_[k + 1]; at += 64)
                sum += static_cast<unsigned>(packed_[at]);
            for (std::int64_t j = i, end = std::min(i + 64, n_); j < end; ++j) {
                if constexpr (Prefetch) __builtin_prefetch(line(out, j + prefetch_ahead), 1);
                *line(out, j) ^= std::byte{1};
            }
        }
        sink_ = sum;
    }

    static constexpr std::int64_t prefetch_ahead = 16;
    template <class Byte>
    Byte* line(Byte* base, std::int64_t j) const {
        return base + std::int64_t{lines_[static_cast<std::size_t>(j)]} * 64;
    }

    std::int64_t n_ = 0;  ///< touched lines
    std::vector<std::uint32_t> lines_;  ///< their numbers, then prefetch_ahead copies of the last
    std::vector<std::int64_t> share_;  ///< share_[k]: the packed bytes before line 64k; last: all
    const std::byte* typed_;  ///< the pack variants' input
    const std::byte* packed_;  ///< the unpack variants' input
    buffer packed_out_, typed_out_;  ///< their outputs, of their own
    volatile unsigned sink_ = 0;
};

/// Verifies shunt against the library for one type, then times pack and unpack (the rows that
/// are selected) with memcpy of the same bytes interleaved.
void run_case(const pack_case& c, MPI_Datatype type, table& out, const options& o) {
    MPI_Count size = 0, true_lb = 0, true_extent = 0;
    SHUNT_CHECK_MPI(MPI_Type_size_x(type, &size));
    SHUNT_CHECK_MPI(MPI_Type_get_true_extent_x(type, &true_lb, &true_extent));
    if (size > INT_MAX)
        throw shunt::error(c.name + ": " + std::to_string(size) + " bytes is beyond MPI_Pack's int sizes");
    const int isize = static_cast<int>(size);
    // Typed buffers span the type's true extent; element 0 sits at span - true_lb.
    buffer typed(true_extent), typed_library(true_extent), typed_shunt(true_extent), typed_again(true_extent);
    buffer packed_library(size), packed_shunt(size), packed_again(size), copy_src(size), copy_dst(size);
    buffer span_src(true_extent), span_dst(true_extent);
    std::byte* const in = typed.data() - true_lb;
    std::byte* const out_library = typed_library.data() - true_lb;
    std::byte* const out_shunt = typed_shunt.data() - true_lb;
    std::byte* const out_again = typed_again.data() - true_lb;
    fill(typed.data(), true_extent, 1);
    fill(copy_src.data(), size, 2);
    fill(copy_dst.data(), size, 3);
    fill(span_src.data(), true_extent, 5);
    fill(span_dst.data(), true_extent, 6);

    // Once per row: shunt's bytes must be the library's, both ways.
    int pos_library = 0, pos_shunt = 0;
    SHUNT_CHECK_MPI(PMPI_Pack(in, 1, type, packed_library.data(), isize, &pos_library, MPI_COMM_SELF));
    SHUNT_CHECK_MPI(MPI_Pack(in, 1, type, packed_shunt.data(), isize, &pos_shunt, MPI_COMM_SELF));
    if (pos_library != isize || pos_shunt != isize)
        throw shunt::error("MISMATCH in pack/" + c.name + ": position after MPI_Pack is " + std::to_string(pos_shunt) +
                           " (shunt) and " + std::to_string(pos_library) + " (library), expected " +
                           std::to_string(isize));
    expect_equal(packed_library.data(), packed_shunt.data(), size, "pack/" + c.name);
    fill(typed_library.data(), true_extent, 4);
    fill(typed_shunt.data(), true_extent, 4);
    pos_library = pos_shunt = 0;
    SHUNT_CHECK_MPI(PMPI_Unpack(packed_library.data(), isize, &pos_library, out_library, 1, type, MPI_COMM_SELF));
    SHUNT_CHECK_MPI(MPI_Unpack(packed_library.data(), isize, &pos_shunt, out_shunt, 1, type, MPI_COMM_SELF));
    if (pos_library != isize || pos_shunt != isize)
        throw shunt::error("MISMATCH in unpack/" + c.name + ": position after MPI_Unpack is " +
                           std::to_string(pos_shunt) + " (shunt) and " + std::to_string(pos_library) +
                           " (library), expected " + std::to_string(isize));
    expect_equal(typed_library.data(), typed_shunt.data(), true_extent, "unpack/" + c.name + " (typed buffer)");

    // The least traffic a packer moves: the cache lines the type touches, marked by the library's
    // unpack of 0xff bytes into zeros, and the packed bytes (traffic_bound).
    std::memset(typed_again.data(), 0, static_cast<std::size_t>(true_extent));
    std::memset(packed_again.data(), 0xff, static_cast<std::size_t>(size));
    {
        int pos = 0;
        SHUNT_CHECK_MPI(PMPI_Unpack(packed_again.data(), isize, &pos, out_again, 1, type, MPI_COMM_SELF));
    }
    traffic_bound bound(typed_again.data(), typed.data(), packed_library.data(), size, true_extent);
    auto memcpy_fn = [&] { std::memcpy(copy_dst.data(), copy_src.data(), static_cast<std::size_t>(size)); };
    // memcpy of the type's footprint (its true extent): where the blocks are spread out, the packer's
    // data leaves a cache level that a memcpy of the same bytes still fits in; this copy works on
    // as much memory as the packer's typed buffer, in GB/s of its own bytes.
    auto span_memcpy_fn = [&] { std::memcpy(span_dst.data(), span_src.data(), static_cast<std::size_t>(true_extent)); };
    auto report = [&](const char* op, const std::vector<timing>& t) {
        // t: the library, shunt, memcpy, the library again, the footprint's memcpy, then the bounds
        const double library_s = t[0].best_s, shunt_s = t[1].best_s, memcpy_s = t[2].best_s, again_s = t[3].best_s,
                     span_s = t[4].best_s,
                     bound_s = std::min_element(t.begin() + 5, t.end(), [](const timing&a, const timing&b) {
                                   return a.best_s < b.best_s;
                               })->best_s;
        out.row({text_cell(op), text_cell(c.family), bytes_cell(c.block),
                 c.stride ? bytes_cell(c.stride) : cell{"rand", ""}, bytes_cell(size), gbs_cell(size, library_s),
                 gbs_cell(size, shunt_s), number_cell(library_s / shunt_s, 2), gbs_cell(size, memcpy_s),
                 number_cell(memcpy_s / shunt_s, 2), number_cell(library_s / again_s, 2),
                 number_cell(library_s / bound_s, 1), gbs_cell(true_extent, span_s),
                 number_cell((static_cast<double>(size) / shunt_s) / (static_cast<double>(true_extent) / span_s), 2)});
    };
    // Timed, the library, shunt and the library again each write their own output buffer. One
    // shared buffer let shunt's streaming stores leave it in memory rather than in cache for the
    // library's next call, which then ran slower and made shunt look faster than it is. Separate
    // buffers lie on different physical pages, whose cache sets and TLB reach differ: the library
    // again writes a third buffer, so lib/lib shows that spread too.
    const std::byte* const packed_in = packed_library.data();  // the packed bytes, for unpacking
    if (o.selected("pack/" + c.name)) {
        std::vector<std::function<void()>> variants = {
            [&] {
                int pos = 0;
                SHUNT_CHECK_MPI(PMPI_Pack(in, 1, type, packed_library.data(), isize, &pos, MPI_COMM_SELF));
            },
            [&] {
                int pos = 0;
                SHUNT_CHECK_MPI(MPI_Pack(in, 1, type, packed_shunt.data(), isize, &pos, MPI_COMM_SELF));
            },
            memcpy_fn,
            [&] {
                int pos = 0;
                SHUNT_CHECK_MPI(PMPI_Pack(in, 1, type, packed_again.data(), isize, &pos, MPI_COMM_SELF));
            },
            span_memcpy_fn};
        for (auto& v : bound.pack_variants()) variants.push_back(std::move(v));
        for (int i = 0; i < settle_calls; ++i) variants[1]();
        report("pack", measure(variants, o));
    }
    if (o.selected("unpack/" + c.name)) {
        std::vector<std::function<void()>> variants = {
            [&] {
                int pos = 0;
                SHUNT_CHECK_MPI(PMPI_Unpack(packed_in, isize, &pos, out_library, 1, type, MPI_COMM_SELF));
            },
            [&] {
                int pos = 0;
                SHUNT_CHECK_MPI(MPI_Unpack(packed_in, isize, &pos, out_shunt, 1, type, MPI_COMM_SELF));
            },
            memcpy_fn,
            [&] {
                int pos = 0;
                SHUNT_CHECK_MPI(PMPI_Unpack(packed_in, isize, &pos, out_again, 1, type, MPI_COMM_SELF));
            },
            span_memcpy_fn};
        for (auto& v : bound.unpack_variants()) variants.push_back(std::move(v));
        for (int i = 0; i < settle_calls; ++i) variants[1]();
        report("unpack", measure(variants, o));
    }
}

}  // namespace

int main(int argc, char** argv) {
    settings s;
    cli line("bench-pack",
             "Times MPI_Pack and MPI_Unpack of the MPI library (PMPI_*) against shunt's (MPI_* in libshunt) in\n"
             "one process, for 2-D vectors, 3-D halo faces and irregular indexed types, with memcpy of the\n"
             "same bytes as the bound. Every row first checks that shunt's bytes equal the library's.");
    line.flag("--quick",
              "a small set that runs in seconds (CI smoke test): 64K objects, blocks\n"
              "1,8,64,512, stride 2x, cube 32, indexed 8,64; 5 trials",
              [&] { s.quick = true; });
    line.option("--blocks", "LIST", "block lengths of the vector family (default 1:512, doubling)",
                [&](const std::string& v) { s.blocks = parse_size_list(v, "--blocks"); });
    line.option("--strides", "LIST",
                "strides of the vector family: Nx (N times the block) or bytes (default 2x,4x,512)",
                [&](const std::string& v) { s.strides = parse_strides(v); });
    line.option("--cubes", "LIST", "cube edges n of the halo family, n^3 doubles plus the halo (default 128,256)",
                [&](const std::string& v) { s.cubes = parse_size_list(v, "--cubes"); });
    line.option("--indexed", "LIST", "mean block lengths of the indexed family (default 8,64,512)",
                [&](const std::string& v) { s.indexed = parse_size_list(v, "--indexed"); });
    line.option("--max-footprint", "BYTES",
                "skip types whose buffer spans more (7 such buffers are held;\n"
                "default 1G)",
                [&](const std::string& v) { s.max_footprint = parse_size(v, "--max-footprint"); });
    line.epilog(
        "Rows are named OP/FAMILY/..., e.g. pack/vector/b8/s16/1M, unpack/halo-x/n128, pack/indexed/b64/64K.\n"
        "--sizes sets the object sizes (packed bytes) of the vector and indexed families (default\n"
        "64K,1M,16M). Columns: block and stride in bytes (rand: irregular), object = packed bytes; library\n"
        "and shunt in GB/s of packed bytes; shunt/lib = library time / shunt time (above 1: shunt is\n"
        "faster); memcpy = a contiguous copy of the same bytes; shunt/memcpy = memcpy time / shunt time;\n"
        "lib/lib = the library against a second run of itself, interleaved the same way: a control whose\n"
        "spread is how far this machine moves two identical runs apart (a shunt/lib within it is noise);\n"
        "lib/bound = library time / the time of a loop that moves only the traffic a packer must: it\n"
        "loads one byte of each cache line the type touches, in address order, and writes the packed\n"
        "bytes (pack), or reads the packed bytes and rewrites one byte of each touched line (unpack).\n"
        "An estimate of what a packer can gain on the library, not a ceiling: a packer can run somewhat\n"
        "faster than such loops;\n"
        "fp-memcpy = memcpy of the type's footprint (its true extent: as much memory as the typed\n"
        "buffer spans) in GB/s of its own bytes; shunt/fp-memcpy = shunt's GB/s / fp-memcpy's.\n"
        "Runs on rank 0 of MPI_COMM_WORLD (run it alone, or with mpiexec -n 1).");
    // 40 trials (at most 3 s a row): rows whose data sits near a cache's capacity alternate between
    // two speeds of the same code for runs of calls, and with fewer trials the library against
    // itself (lib/lib) was off by more than 5% on many more rows.
    line.trial_defaults(40, 3.0);
    options o = line.parse(argc, argv);
    if (s.quick) {
        if (!o.was_given("--sizes")) o.sizes = {64 << 10};
        if (!o.was_given("--blocks")) s.blocks = {1, 8, 64, 512};
        if (!o.was_given("--strides")) s.strides = {{2, true}};
        if (!o.was_given("--cubes")) s.cubes = {32};
        if (!o.was_given("--indexed")) s.indexed = {8, 64};
        if (!o.was_given("--trials")) o.trials = 5;
        if (!o.was_given("--warmup")) o.warmup = 1;
        if (!o.was_given("--time")) o.time_s = 0.2;
    }
    if (!o.sizes.empty()) s.sizes = o.sizes;
    for (const std::int64_t c : s.cubes)
        if (c > 1000) {
            std::fprintf(stderr, "bench-pack: --cubes: edge %lld is above 1000\n", static_cast<long long>(c));
            return 2;
        }
    for (const std::int64_t v : s.sizes)
        if (v > INT_MAX) {
            std::fprintf(stderr, "bench-pack: --sizes: %lld bytes is beyond MPI_Pack's int sizes (at most %d)\n",
                         static_cast<long long>(v), INT_MAX);
            return 2;
        }
    std::vector<pack_case> cases = make_cases(s);
    std::vector<std::string> too_big;
    std::erase_if(cases, [&](const pack_case& c) {
        if (c.footprint <= s.max_footprint) return false;
        too_big.push_back(c.name + " (" + format_bytes(c.footprint) + ")");
        return true;
    });
    if (o.list) {
        for (const auto& c : cases)
            for (const char* op : {"pack/", "unpack/"})
                if (o.selected(op + c.name)) std::printf("%s%s\n", op, c.name.c_str());
        return 0;
    }

    // The shunt column must reach libshunt's shims; if MPI_Pack is the library's own, every
    // "shunt" figure would silently be the library's.
    void* const shim_pack = reinterpret_cast<void*>(&MPI_Pack);
    void* const shim_unpack = reinterpret_cast<void*>(&MPI_Unpack);
    void* const real_pack = reinterpret_cast<void*>(&PMPI_Pack);
    void* const real_unpack = reinterpret_cast<void*>(&PMPI_Unpack);
    if (!calls_shunt("bench-pack", "MPI_Pack", shim_pack, real_pack) ||
        !calls_shunt("bench-pack", "MPI_Unpack", shim_unpack, real_unpack))
        return 1;

    MPI_Init(&argc, &argv);
    int rank = 0, ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    int rc = 0;
    if (rank == 0) {
        try {
            table out({{"op", 6, "op", true},
                       {"family", 7, "family", true},
                       {"block", 5, "block_bytes"},
                       {"stride", 6, "stride_bytes"},
                       {"object", 6, "object_bytes"},
                       {"lib GB/s", 8, "library_gbs"},
                       {"shunt GB/s", 10, "shunt_gbs"},
                       {"shunt/lib", 9, "shunt_over_library"},
                       {"memcpy GB/s", 11, "memcpy_gbs"},
                       {"shunt/memcpy", 12, "shunt_over_memcpy"},
                       {"lib/lib", 7, "library_over_library_again"},
                       {"lib/bound", 9, "library_over_bound"},
                       {"fp-memcpy GB/s", 14, "footprint_memcpy_gbs"},
                       {"shunt/fp-memcpy", 15, "shunt_over_footprint_memcpy"}},
                      o);
            char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
            int len = 0;
            MPI_Get_library_version(version, &len);
            std::string v(version, static_cast<std::size_t>(len));
            v = v.substr(0, v.find_first_of("\r\n"));
            out.note("bench-pack: library = " + v);
            out.note("library = PMPI_Pack/PMPI_Unpack in " + object_of(real_pack));
            out.note("shunt   = MPI_Pack/MPI_Unpack in " + object_of(shim_pack));
            out.note("best of up to " + std::to_string(o.trials) + " interleaved trials per variant, shunt's after " +
                     std::to_string(settle_calls) + " calls that let its planner settle the layout" +
                     (ranks > 1 ? "; ranks other than 0 stay idle" : ""));
            for (const auto& name : too_big)
                if (o.selected("pack/" + name) || o.selected("unpack/" + name))
                    out.note("skipped " + name + ": buffer above --max-footprint " + format_bytes(s.max_footprint));
            for (const auto& c : cases) {
                if (!o.selected("pack/" + c.name) && !o.selected("unpack/" + c.name)) continue;
                MPI_Datatype type = c.make();
                try {
                    run_case(c, type, out, o);
                } catch (...) {
                    MPI_Type_free(&type);
                    throw;
                }
                MPI_Type_free(&type);
            }
        } catch (const std::bad_alloc&) {
            std::fprintf(stderr, "bench-pack: out of memory (try smaller --sizes or --cubes)\n");
            rc = 1;
        } catch (const std::exception& e) {
            std::fprintf(stderr, "bench-pack: %s\n", e.what());
            rc = 1;
        }
    }
    if (rc != 0) MPI_Abort(MPI_COMM_WORLD, rc);
    // Idle ranks sleep instead of spinning in MPI_Barrier, which would take cores from rank 0.
    // (A nonblocking barrier matches only nonblocking barriers, so rank 0 uses one too.)
    MPI_Request done_req;
    MPI_Ibarrier(MPI_COMM_WORLD, &done_req);
    for (int done = 0; MPI_Test(&done_req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done;) {
        const timespec pause{0, 1000000};
        nanosleep(&pause, nullptr);
    }
    MPI_Finalize();
    return 0;
}
