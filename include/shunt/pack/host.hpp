// shunt/pack/host.hpp: the host packer driven by the canonical layout: whole or partial packing and
// unpacking of any count of elements, with copy loops specialised by block length.
#pragma once

#include <shunt/datatype/layout.hpp>
#include <shunt/datatype/type_info.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace shunt {
namespace detail {

/// The bytes one call writes from which streaming stores beat cached ones, for a last-level
/// cache of `llc` bytes shared by `cpus` CPUs (either 0 where unknown): three quarters of one
/// CPU's share of that cache, as glibc 2.36 sets its memcpy's non-temporal threshold, and at
/// least 16 MiB. Streaming stores skip reading each written line first and leave the cache to
/// other data, but whoever reads the bytes next reads them from memory. Output that still fits
/// a CPU's share of the cache is better left there: on the development machine (480 MiB L3,
/// 2 CPUs, so 180 MiB here) 16 MiB objects of 64-512 B rows 2-4 times their length apart, in a
/// loop of their own, unpacked up to 1.3x faster with streaming stores than with cached stores
/// and prefetches (rows_prefetched) and packed 0.93-1.08x as fast, but a call followed by a read
/// of what it wrote took 1.4-1.9x longer with them.
constexpr std::int64_t stream_store_threshold(std::int64_t llc, std::int64_t cpus) {
    constexpr std::int64_t floor = std::int64_t{16} << 20;
    if (llc <= 0 || cpus <= 0) return floor;
    return std::max(floor, llc / cpus / 4 * 3);
}

/// Set by tests (> 0) to stand in for stream_store_bytes(): streaming stores on this machine
/// need hundreds of MiB of output otherwise.
inline std::atomic<std::int64_t> stream_store_bytes_override{0};

/// stream_store_threshold for this machine (the L3 size and the CPUs online, from sysconf, read
/// once), or the tests' override.
inline std::int64_t stream_store_bytes() {
    const std::int64_t forced = stream_store_bytes_override.load(std::memory_order_relaxed);
    if (forced > 0) return forced;
    static const std::int64_t bytes = [] {
#ifdef _SC_LEVEL3_CACHE_SIZE
        return stream_store_threshold(sysconf(_SC_LEVEL3_CACHE_SIZE), sysconf(_SC_NPROCESSORS_ONLN));
#else
        return stream_store_threshold(0, 0);
#endif
    }();
    return bytes;
}

/// One level of a pack program: `count` iterations `stride` bytes apart in the typed buffer,
/// each producing `inner` packed bytes.
struct pack_level {
    std::int64_t count;
    std::int64_t stride;
    std::int64_t inner;
};

/// Bytes one pass over form's block list packs, from the element size when the caller knows it
/// (a type_info's: no pass over a list of millions of blocks on every call), else summed.
inline std::int64_t block_bytes_of(const layout& form, std::int64_t element_size) {
    if (element_size < 0 || form.blocks.size() <= 1) return form.block_bytes();
    std::int64_t per = element_size;
    for (const auto& d : form.dims) per = d.count > 0 ? per / d.count : 0;
    return per;
}

/// True where unpacking a block list pays for prefetching the lines of the block
/// prefetch_blocks_ahead ahead of each copy (blocks_masked with Ahead): 64 blocks or more, on
/// average 256 bytes or more apart from the first to the last (the lines of one block are seldom
/// next to the previous one's). In bench-pack's irregular 512-byte blocks (gaps of 1 B-1 KiB), unpacking ran 1.7x faster in
/// 16 MiB (5.5 against 9.2-9.6 GB/s), 1.17x in 1 MiB, and 1.0-1.2x in 64 KiB; blocks of 8 and
/// 64 bytes (16 and 128 bytes apart), which the hardware fetches in sequence, lost up to a third
/// of their speed to the extra work when this was applied to them.
inline bool prefetch_blocks_pay(const block* b, std::size_t n) {
    if (n < 64) return false;
    const double span = std::fabs(static_cast<double>(b[n - 1].offset) - static_cast<double>(b[0].offset));
    return span >= 256.0 * static_cast<double>(n);  // no division: every call builds a pack_program
}

/// A layout with the element count folded in as its outermost dimension, merged where the
/// elements tile. Small programs live on the stack; deep ones spill to the heap.
/// `element_size`, when not negative, is form.size(), known to the caller.
class pack_program {
public:
    pack_program(const layout& form, std::int64_t extent, std::int64_t count, std::int64_t element_size = -1) {
        blocks_ = form.blocks.data();
        nblocks_ = form.blocks.size();
        block_bytes_ = block_bytes_of(form, element_size);
        const std::size_t n = form.dims.size() + 1;
        levels_ = n <= inline_levels ? inline_ : (heap_.resize(n), heap_.data());
        nlevels_ = 0;
        if (count != 1) levels_[nlevels_++] = {count, extent, 0};
        for (const auto& d : form.dims) levels_[nlevels_++] = {d.count, d.stride, 0};
        // The count dimension merges with a tiling outer dimension of the form, or folds into
        // a single contiguous block (a dense type packs as one copy).
        if (count != 1 && nlevels_ >= 2 && extent == levels_[1].count * levels_[1].stride) {
            levels_[1].count = checked_mul(levels_[1].count, count);
            std::copy(levels_ + 1, levels_ + nlevels_, levels_);
            --nlevels_;
        }
        if (nlevels_ == 1 && nblocks_ == 1 && levels_[0].stride == blocks_[0].length) {
            single_ = {blocks_[0].offset, checked_mul(blocks_[0].length, levels_[0].count)};
            blocks_ = &single_;
            block_bytes_ = single_.length;
            nlevels_ = 0;
        }
        std::int64_t inner = block_bytes_;
        for (std::size_t k = nlevels_; k-- > 0;) {
            levels_[k].inner = inner;
            inner = checked_mul(inner, levels_[k].count);
        }
        total_ = nblocks_ == 0 ? 0 : inner;
        // The typed span the outermost level sweeps (in double: no overflow): past streaming_bytes
        // the rows come from memory rather than cache.
        const double span =
            nlevels_ == 0 ? 0.0
                          : static_cast<double>(levels_[0].count) * std::fabs(static_cast<double>(levels_[0].stride));
        streaming_ = span >= static_cast<double>(streaming_bytes);
        stream_stores_ = streaming_ && total_ >= stream_store_bytes();
        prefetch_blocks_ = prefetch_blocks_pay(blocks_, nblocks_);
    }
    pack_program(const pack_program&) = delete;
    pack_program& operator=(const pack_program&) = delete;

    std::int64_t total() const { return total_; }
    std::size_t nlevels() const { return nlevels_; }
    const pack_level& level(std::size_t k) const { return levels_[k]; }
    const block* blocks() const { return blocks_; }
    std::size_t nblocks() const { return nblocks_; }
    std::int64_t block_bytes() const { return block_bytes_; }
    /// True when one pass sweeps 16 MiB of typed memory or more (half of a 32 MiB L3): long rows
    /// then go through rows_libc.
    bool streaming() const { return streaming_; }
    static constexpr std::int64_t streaming_bytes = std::int64_t{16} << 20;
    /// True when, besides streaming, one call writes at least stream_store_bytes(): rows of a
    /// cache line or more are then stored non-temporally (rows_wide with Stream), as glibc's
    /// memcpy does for copies past its own threshold. Shorter rows would stream partial lines,
    /// which is slower.
    bool stream_stores() const { return stream_stores_; }
    /// prefetch_blocks_pay for the block list, decided once rather than on every pass.
    bool prefetch_blocks() const { return prefetch_blocks_; }

private:
    static constexpr std::size_t inline_levels = 12;
    pack_level inline_[inline_levels];
    std::vector<pack_level> heap_;
    pack_level* levels_;
    std::size_t nlevels_;
    const block* blocks_;
    std::size_t nblocks_;
    std::int64_t block_bytes_;
    block single_{};
    std::int64_t total_;
    bool streaming_ = false;
    bool stream_stores_ = false;
    bool prefetch_blocks_ = false;
};

inline std::byte* at(std::uintptr_t base, std::int64_t offset) {
    return reinterpret_cast<std::byte*>(base + static_cast<std::uintptr_t>(offset));
}

/// Copies n bytes, n small: two possibly overlapping fixed-size moves instead of a call.
inline void copy_small(std::byte* dst, const std::byte* src, std::int64_t n) {
    if (n >= 8) {
        if (n > 16) {
            std::memcpy(dst, src, static_cast<std::size_t>(n));
            return;
        }
        std::uint64_t a, b;
        std::memcpy(&a, src, 8);
        std::memcpy(&b, src + n - 8, 8);
        std::memcpy(dst, &a, 8);
        std::memcpy(dst + n - 8, &b, 8);
    } else if (n >= 4) {
        std::uint32_t a, b;
        std::memcpy(&a, src, 4);
        std::memcpy(&b, src + n - 4, 4);
        std::memcpy(dst, &a, 4);
        std::memcpy(dst + n - 4, &b, 4);
    } else if (n >= 2) {
        std::uint16_t a, b;
        std::memcpy(&a, src, 2);
        std::memcpy(&b, src + n - 2, 2);
        std::memcpy(dst, &a, 2);
        std::memcpy(dst + n - 2, &b, 2);
    } else if (n == 1) {
        *dst = *src;
    }
}

/// The smallest page size: memory is mapped a page at a time, so a load that stays on the page
/// of a block's first byte cannot fault, whatever follows the block.
inline constexpr std::uintptr_t smallest_page = 4096;

/// Packs a block list with over-wide moves where no AVX-512 masked move is available: a block of
/// up to 16 (32) bytes is one 16 (32)-byte load and store whatever its length, and the bytes
/// stored past its end are overwritten by the blocks after it, so irregular lengths cost no
/// mispredicted branch (copy_small's length tests mispredict on about every block of a list too
/// long for the branch predictor to learn). A load reads up to 31 bytes past a block only where
/// they lie on the page of the block's first byte (no fault where the buffer ends; those bytes
/// are never stored anywhere they remain); the stores stay inside the pass's `bytes` packed
/// bytes: blocks that start within 32 bytes of its end take copy_small. On a Zen 3, against the
/// copy_small loop, interleaved in one process: lists of irregular 1-15-byte blocks (bench-pack's
/// indexed b8) packed 3.7-4.4x as fast in 1 MiB, 2.6x in 16 MiB and 1.2-1.5x in 64 KiB (whose
/// list the predictor partly learns); 1-23 to 1-63-byte blocks 1.1-2.1x in a loop of their own.
/// Lists of longer blocks gain nothing (1-127 bytes: 0.96-1.05x; 1-1023: 0.95-1.00x, the extra
/// length tests): blocks_all takes this loop where the blocks average overwide_mean_bytes or less.
inline constexpr std::int64_t overwide_mean_bytes = 32;

inline std::byte* blocks_overwide(const block* b, std::size_t n, std::uintptr_t base, std::byte* packed,
                                  std::int64_t bytes) {
    const std::byte* const end = packed + bytes;
    std::size_t i = 0;
    for (; i < n && end - packed >= 32; ++i) {
        const std::int64_t len = b[i].length;
        const std::byte* typed = at(base, b[i].offset);
        const std::uintptr_t in_page = reinterpret_cast<std::uintptr_t>(typed) & (smallest_page - 1);
        if (len <= 16 && in_page <= smallest_page - 16) {
            unsigned char v[16];
            std::memcpy(v, typed, 16);
            std::memcpy(packed, v, 16);
        } else if (len <= 32 && in_page <= smallest_page - 32) {
            unsigned char v[32];
            std::memcpy(v, typed, 32);
            std::memcpy(packed, v, 32);
        } else {
            copy_small(packed, typed, len);
        }
        packed += len;
    }
    for (; i < n; ++i) {
        copy_small(packed, at(base, b[i].offset), b[i].length);
        packed += b[i].length;
    }
    return packed;
}

/// Unpacks one block of 1-16 bytes with stores that never leave it and one length test: a block
/// of 4 bytes or more is four 4-byte moves at 0, (len - 4) / 3, 2 (len - 4) / 3 and len - 4
/// (each within 4 bytes of the one before, so together they cover the block; where they
/// overlap they write the same bytes), a shorter one three byte moves at 0, len / 2 and len - 1.
/// copy_small instead tests the length three times, and for irregular lengths mispredicts
/// about one test a block.
inline void unpack_short(std::byte* typed, const std::byte* packed, std::int64_t len) {
    if (len >= 4) {
        const std::int64_t r = len - 4, third = (r * 86) >> 8, two_thirds = (r * 171) >> 8;  // r <= 12
        std::uint32_t a, b, c, d;
        std::memcpy(&a, packed, 4);
        std::memcpy(&b, packed + third, 4);
        std::memcpy(&c, packed + two_thirds, 4);
        std::memcpy(&d, packed + r, 4);
        std::memcpy(typed, &a, 4);
        std::memcpy(typed + third, &b, 4);
        std::memcpy(typed + two_thirds, &c, 4);
        std::memcpy(typed + r, &d, 4);
    } else {
        const std::byte x = packed[0], y = packed[len >> 1], z = packed[len - 1];
        typed[0] = x;
        typed[len >> 1] = y;
        typed[len - 1] = z;
    }
}

/// Unpacks a block list by unpack_short where its blocks are 16 bytes or shorter (copy_small
/// otherwise). On a Zen 3, against the copy_small loop, interleaved in one process, lists of
/// irregular blocks (lengths uniform in 1 to 2m - 1, as bench-pack's indexed family) unpacked
/// 1.8-1.9x as fast for m = 8 in 1 and 16 MiB (1.0x in 64 KiB, whose list the predictor
/// learns), 1.1-1.5x for m = 16-64, but 0.91-0.99x for m = 128 and 512 in 16 MiB: blocks_all
/// takes it where blocks average short_unpack_mean_bytes or less.
inline constexpr std::int64_t short_unpack_mean_bytes = 64;

inline std::byte* blocks_unpack_short(const block* b, std::size_t n, std::uintptr_t base, std::byte* packed) {
    for (std::size_t i = 0; i < n; ++i) {
        const std::int64_t len = b[i].length;
        std::byte* typed = at(base, b[i].offset);
        if (len <= 16)
            unpack_short(typed, packed, len);
        else
            copy_small(typed, packed, len);
        packed += len;
    }
    return packed;
}

/// Moves one block between the typed buffer and the packed stream.
template <bool Pack>
inline void move_block(std::byte* typed, std::byte* packed, std::int64_t n) {
    if constexpr (Pack)
        copy_small(packed, typed, n);
    else
        copy_small(typed, packed, n);
}

/// n rows of a fixed block length L, `stride` bytes apart in the typed buffer, unrolled by four.
/// On the EPYC (Zen 4) the one-row loop ran at two speeds by where the linker put it: unpacking
/// 64 KiB of 16-byte rows 32 bytes apart ran at 37 GB/s in one build and 28.6 in the next, whose
/// loop straddled a 64-byte boundary, with no change to the loop (and packing them at 28.7 against
/// 37.5 in another pair of builds). Unrolled, a straddling loop ran that row at 35-37 GB/s;
/// bench-pack's packs of 4-32-byte rows 2 and 4 rows apart in 64 KiB and 1 MiB objects ran
/// 0.99-1.04x as fast as the previous build (both flavours), and MPICH's unpack of that row,
/// whose loop straddled in the previous build, 1.30x. In a loop of its own (both loops 64-byte
/// aligned) the unrolled copy ran 0.97-1.44x as fast in 64 KiB and 1 MiB, but packed 16 MiB of
/// 8 and 32-byte rows 4 and 2 rows apart at 0.84-0.92x (other 16 MiB rows 0.91-1.26x).
template <bool Pack, std::int64_t L>
inline void rows_fixed(std::byte* typed, std::byte* packed, std::int64_t stride, std::int64_t n) {
#pragma GCC unroll 4
    for (std::int64_t i = 0; i < n; ++i, typed += stride, packed += L) {
        if constexpr (Pack)
            std::memcpy(packed, typed, L);
        else
            std::memcpy(typed, packed, L);
    }
}

/// False makes block lists take the portable loop even where AVX-512 is available: how the
/// differential tests cover both paths on one machine.
inline std::atomic<bool> masked_blocks_allowed{true};

#if defined(__x86_64__) && defined(__GNUC__)
#define SHUNT_HAVE_MASKED_BLOCKS 1
/// From this many bytes, copy_wide first moves the bytes up to the destination's next 64-byte
/// boundary, so that no whole-vector store straddles two cache lines (such a store costs about
/// two). In a standalone loop on the development machine, block lists misaligned on both sides
/// (lengths 1-1023 B at random offsets, 64 KiB-16 MiB) copied 1.09-1.16x faster so, lists of
/// 1-511-byte blocks 1.08-1.22x; MPI_Pack of bench-pack's irregular 512-byte blocks
/// (SHUNT_PACK=host) 1.24x in 64 KiB and 1.12x in 16 MiB. Aligning from 65 bytes on cost lists of
/// 1-127-byte blocks up to a fifth of their speed in 1 MiB (one more masked move a block), hence
/// the threshold.
inline constexpr std::int64_t align_stores_from = 256;

/// True where copy_wide aligns its stores: from align_stores_from bytes, and always with Stream.
template <bool Stream>
constexpr bool aligns_stores(std::int64_t n) {
    return Stream || n >= align_stores_from;
}

/// Bytes [k, n) of copy_wide: whole 64-byte vector moves, then one masked move for the rest.
template <bool Stream>
__attribute__((target("avx512f,avx512bw,avx512vl,bmi2"))) inline void copy_vectors(std::byte* dst, const std::byte* src,
                                                                                   std::int64_t k, std::int64_t n) {
    for (; k + 64 <= n; k += 64) {
        if constexpr (Stream)
            _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + k), _mm512_loadu_si512(src + k));
        else
            _mm512_storeu_si512(dst + k, _mm512_loadu_si512(src + k));
    }
    if (k < n) {
        const __mmask64 m = _bzhi_u64(~0ULL, static_cast<unsigned>(n - k));
        _mm512_mask_storeu_epi8(dst + k, m, _mm512_maskz_loadu_epi8(m, src + k));
    }
}

/// copy_wide's copy from align_stores_from bytes (and of every length with Stream): one masked
/// move up to the destination's 64-byte alignment, then copy_vectors.
template <bool Stream>
__attribute__((target("avx512f,avx512bw,avx512vl,bmi2"))) inline void copy_aligned(std::byte* dst, const std::byte* src,
                                                                                   std::int64_t n) {
    const std::int64_t k = std::min<std::int64_t>((-reinterpret_cast<std::intptr_t>(dst)) & 63, n);
    if (k > 0) {
        const __mmask64 m = _bzhi_u64(~0ULL, static_cast<unsigned>(k));
        _mm512_mask_storeu_epi8(dst, m, _mm512_maskz_loadu_epi8(m, src));
    }
    copy_vectors<Stream>(dst, src, k, n);
}

/// Copies n > 0 bytes as whole 64-byte vector moves and one masked move for the rest (no
/// byte outside [0, n) is read or written); from align_stores_from bytes (and always with
/// Stream), one masked move up to the destination's 64-byte alignment comes first. With
/// Stream, the moves of the aligned body are streaming (non-temporal) stores: the written lines
/// are not read for ownership first and do not displace the cache; callers fence once after a
/// batch.
template <bool Stream = false>
__attribute__((target("avx512f,avx512bw,avx512vl,bmi2"))) inline void copy_wide(std::byte* dst, const std::byte* src,
                                                                                std::int64_t n) {
    // Two inlined loops rather than one after a conditional head: sharing one loop slowed lists
    // of 1-127-byte blocks, which never take the head, by 3-10%.
    if (!aligns_stores<Stream>(n)) return copy_vectors<Stream>(dst, src, 0, n);
    copy_aligned<Stream>(dst, src, n);
}

/// n strided rows of len >= 64 bytes as copy_wide copies them (whether to align is decided once
/// for all rows); with Stream, its streaming stores and then a store fence (so that the rows are
/// visible to whoever the caller hands them to, as after ordinary stores).
template <bool Pack, bool Stream = false>
__attribute__((target("avx512f,avx512bw,avx512vl,bmi2"))) inline void rows_wide(std::byte* typed, std::byte* packed,
                                                                                std::int64_t stride, std::int64_t n,
                                                                                std::int64_t len) {
    std::byte* const to = Pack ? packed : typed;
    const std::byte* const from = Pack ? typed : packed;
    const std::int64_t to_step = Pack ? len : stride, from_step = Pack ? stride : len;
    if (!aligns_stores<Stream>(len)) {
        for (std::int64_t i = 0; i < n; ++i) copy_vectors<Stream>(to + i * to_step, from + i * from_step, 0, len);
    } else {
        for (std::int64_t i = 0; i < n; ++i) copy_aligned<Stream>(to + i * to_step, from + i * from_step, len);
    }
    if constexpr (Stream) _mm_sfence();
}

/// How many bytes ahead of its stores an unpack of rows packed close together (rows_window,
/// rows_lanes) prefetches the typed lines for writing. Their masked stores write part of every
/// line, and each line is read for ownership first: without the prefetch each store waited on
/// that read. On the Xeon (Sapphire Rapids class), 1 KiB ahead, bench-pack unpacked 16 MiB of
/// 1-8-byte rows 2 or 4 rows apart 1.31-1.49x faster with it (both MPI flavours; 64 KiB and 1 MiB
/// objects 0.96-1.11x, noise), and a loop of rows_window calls on 16 MiB of 1-byte rows 2 bytes
/// apart, the caches flushed before each, took 3.4-3.5 ms against 4.6-4.7 without, 256 B to 4 KiB
/// ahead alike. On an AMD EPYC (Zen 4), in loops of rows calls on 1-8-byte rows 2 or 4 rows
/// apart, 256 B ahead ran 1.12-1.30x faster than 1 KiB in 1 MiB objects (as fast as no prefetch)
/// and 1.3-1.6x in 16 MiB (no prefetch 1.14-1.29x, 128 B as 256), 64 KiB alike.
inline constexpr std::int64_t unpack_claim_ahead = 256;

/// n rows of len bytes, `stride` bytes apart, where stride divides 64 and len < stride: each
/// 64-byte window of the typed buffer holds 64 / stride rows, selected by one fixed byte mask.
/// Packing gathers the masked bytes of a window into the stream, unpacking scatters stream bytes
/// to the masked positions; bytes outside the mask are neither read nor written. The mask is the
/// same in every window, so the byte compress (or expand) it stands for is one fixed byte
/// permute: its index is the compress (expand) of 0..63, made once per call, and each window
/// takes one permute (VBMI) instead of a compress or expand (VBMI2), which cost 1.6x as long on
/// an AMD Zen 4 (1.36 against 0.82 ns a window in a loop of their own). There, in a loop of
/// calls, 64 KiB objects of 1-20-byte rows 2-32 bytes apart packed and unpacked 1.4-1.9x faster,
/// 1 MiB 1.1-1.65x; in bench-pack, unpacks of 1-2-byte rows 2-4 rows apart 1.6-1.9x (64 KiB) and
/// 1.05-1.45x (1 MiB) with both MPI flavours, 16 MiB (memory-bound) 0.76-1.09x, median 0.96, in
/// five runs, within those rows' spread. Rows past the last whole window go row by row.
template <bool Pack>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2,bmi2"))) inline void rows_window(
    std::byte* typed, std::byte* packed, std::int64_t stride, std::int64_t n, std::int64_t len) {
    std::uint64_t row_mask = _bzhi_u64(~0ULL, static_cast<unsigned>(len)), mask = 0;
    for (std::int64_t at = 0; at < 64; at += stride) mask |= row_mask << at;
    const auto m = static_cast<__mmask64>(mask);
    const std::int64_t per_window = 64 / stride, bytes = per_window * len;
    const auto out_mask = static_cast<__mmask64>(_bzhi_u64(~0ULL, static_cast<unsigned>(bytes)));
    const __m512i iota =
        _mm512_set_epi64(0x3f3e3d3c3b3a3938, 0x3736353433323130, 0x2f2e2d2c2b2a2928, 0x2726252423222120,
                         0x1f1e1d1c1b1a1918, 0x1716151413121110, 0x0f0e0d0c0b0a0908, 0x0706050403020100);
    // Pack: byte k of the output is the k-th masked byte; unpack: masked byte j takes the packed
    // byte numbered by the masked bytes before it.
    const __m512i index = Pack ? _mm512_maskz_compress_epi8(m, iota) : _mm512_maskz_expand_epi8(m, iota);
    const std::int64_t windows = n / per_window;
    const std::int64_t claim_until = windows - unpack_claim_ahead / 64;  // no prefetch past the rows
    // The permutes zero-mask with the stores' own masks: the unmasked form draws GCC 12's
    // maybe-uninitialized warning on its undefined source.
    for (std::int64_t w = 0; w < windows; ++w, typed += 64, packed += bytes) {
        if constexpr (Pack) {
            _mm512_mask_storeu_epi8(packed, out_mask,
                                    _mm512_maskz_permutexvar_epi8(out_mask, index, _mm512_maskz_loadu_epi8(m, typed)));
        } else {
            if (w < claim_until) __builtin_prefetch(typed + unpack_claim_ahead, 1);
            _mm512_mask_storeu_epi8(typed, m,
                                    _mm512_maskz_permutexvar_epi8(m, index, _mm512_maskz_loadu_epi8(out_mask, packed)));
        }
    }
    for (std::int64_t i = windows * per_window; i < n; ++i, typed += stride, packed += len) {
        const auto r = static_cast<__mmask64>(row_mask);
        if constexpr (Pack)
            _mm512_mask_storeu_epi8(packed, r, _mm512_maskz_loadu_epi8(r, typed));
        else
            _mm512_mask_storeu_epi8(typed, r, _mm512_maskz_loadu_epi8(r, packed));
    }
}

/// Brings the lines of one typed row (its first 1 KiB: further on, the hardware has seen the
/// row's sequence) toward the core ahead of its copy: into every cache level with Locality 3
/// (prefetcht0 on x86), into the L2 and beyond with Locality 2 (prefetcht1).
template <int Locality = 3>
inline void prefetch_row(const std::byte* row, std::int64_t len) {
    const auto first = reinterpret_cast<std::uintptr_t>(row) & ~std::uintptr_t{63};
    const auto end =
        reinterpret_cast<std::uintptr_t>(row) + static_cast<std::uintptr_t>(std::min<std::int64_t>(len, 1024));
    for (std::uintptr_t line = first; line < end; line += 64)
        __builtin_prefetch(reinterpret_cast<const void*>(line), 1, Locality);
}

/// How many blocks ahead of its move blocks_masked with Ahead prefetches a block.
inline constexpr std::size_t prefetch_blocks_ahead = 16;

/// A block list with AVX-512 byte-masked moves: a block of up to 64 bytes is one masked load and
/// one masked store, whatever its length, so irregular lengths cost no mispredicted branch
/// (copy_small's length tests mispredict on every irregular block: about 5 ns a block once the
/// list outgrows what the branch predictor can learn, 0.7 ns this way). Masked-off bytes are
/// neither read (no fault past a buffer's end) nor written (bytes between blocks untouched).
/// With Ahead, each block's move follows a prefetch of the block prefetch_blocks_ahead further on.
template <bool Pack, bool Ahead = false>
__attribute__((target("avx512f,avx512bw,avx512vl,bmi2"))) inline std::byte* blocks_masked(const block* b, std::size_t n,
                                                                                          std::uintptr_t base,
                                                                                          std::byte* packed) {
    for (std::size_t i = 0; i < n; ++i) {
        const std::int64_t len = b[i].length;
        std::byte* typed = at(base, b[i].offset);
        if constexpr (Ahead) {
            if (const std::size_t k = i + prefetch_blocks_ahead; k < n)
                prefetch_row(at(base, b[k].offset), b[k].length);
        }
        if (len <= 16) {
            const auto m = static_cast<__mmask16>(_bzhi_u32(0xffffu, static_cast<unsigned>(len)));
            if constexpr (Pack)
                _mm_mask_storeu_epi8(packed, m, _mm_maskz_loadu_epi8(m, typed));
            else
                _mm_mask_storeu_epi8(typed, m, _mm_maskz_loadu_epi8(m, packed));
        } else if (len <= 64) {
            const __mmask64 m = _bzhi_u64(~0ULL, static_cast<unsigned>(len));
            if constexpr (Pack)
                _mm512_mask_storeu_epi8(packed, m, _mm512_maskz_loadu_epi8(m, typed));
            else
                _mm512_mask_storeu_epi8(typed, m, _mm512_maskz_loadu_epi8(m, packed));
        } else if constexpr (Pack) {
            copy_wide(packed, typed, len);
        } else {
            copy_wide(typed, packed, len);
        }
        packed += len;
    }
    return packed;
}

/// True when this CPU has the AVX-512 subsets blocks_masked uses (decided once), whatever the
/// tests allow.
inline bool cpu_has_masked_blocks() {
    static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("bmi2");
    return ok;
}

/// True when this CPU has the AVX-512 subsets blocks_masked uses and the tests have not switched
/// the path off (masked_blocks_allowed).
inline bool masked_blocks_available() {
    return cpu_has_masked_blocks() && masked_blocks_allowed.load(std::memory_order_relaxed);
}

/// The lane indices of rows_lanes for rows of L bytes every R * L bytes: `pack` picks every R-th
/// L-byte lane of two concatenated vectors into the first 64 / R bytes of the result (the rest
/// repeats them); `spread[r]` moves packed lanes r * E / R up to r * E / R + E / R - 1 (E lanes
/// of L bytes in a vector) to every R-th lane of the r-th typed vector.
template <std::int64_t L, std::int64_t R>
struct lane_index {
    static constexpr int E = static_cast<int>(64 / L);
    static constexpr std::array<std::uint8_t, 64> lanes(auto value) {
        std::array<std::uint8_t, 64> b{};
        for (int j = 0; j < E; ++j)
            for (int k = 0; k < L; ++k) b[j * L + k] = static_cast<std::uint8_t>(k < 2 ? value(j) >> (8 * k) : 0);
        return b;
    }
    alignas(64) static constexpr std::array<std::uint8_t, 64> pack = lanes([](int j) { return (j * R) % (2 * E); });
    alignas(64) static constexpr std::array<std::array<std::uint8_t, 64>, R> spread = [] {
        std::array<std::array<std::uint8_t, 64>, R> s{};
        for (int r = 0; r < R; ++r) s[r] = lanes([r](int j) { return r * (E / R) + j / R; });
        return s;
    }();
};

/// Lane permutes of L-byte lanes, L 2, 4 or 8 (AVX-512 F and BW; byte lanes would need VBMI).
template <std::int64_t L>
__attribute__((target("avx512f,avx512bw"))) inline __m512i permute2(__m512i a, __m512i idx, __m512i b) {
    static_assert(L == 2 || L == 4 || L == 8);
    if constexpr (L == 2)
        return _mm512_permutex2var_epi16(a, idx, b);
    else if constexpr (L == 4)
        return _mm512_permutex2var_epi32(a, idx, b);
    else
        return _mm512_permutex2var_epi64(a, idx, b);
}
template <std::int64_t L>
__attribute__((target("avx512f,avx512bw"))) inline __m512i permute1(__m512i idx, __m512i a) {
    static_assert(L == 2 || L == 4 || L == 8);
    if constexpr (L == 2) return _mm512_permutexvar_epi16(idx, a);
    // The full-mask forms: gcc 12's unmasked ones warn of an uninitialised (unused) operand.
    else if constexpr (L == 4)
        return _mm512_maskz_permutexvar_epi32(0xffff, idx, a);
    else
        return _mm512_maskz_permutexvar_epi64(0xff, idx, a);
}

/// Every R-th byte of the R vectors at `typed` (R 2 or 4), with AVX-512 F and BW only (CPUs
/// without VBMI's byte permutes, Skylake and Cascade Lake among them): at R = 2 the low bytes of
/// the words, packed with saturation within each 128-bit lane and the lanes put back in order;
/// at R = 4 the dwords truncated to bytes.
template <std::int64_t R>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512i gather_bytes(const std::byte* typed) {
    if constexpr (R == 2) {
        const __m512i low = _mm512_set1_epi16(0xff), order = _mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0);
        const __m512i packed = _mm512_packus_epi16(_mm512_and_si512(_mm512_loadu_si512(typed), low),
                                                   _mm512_and_si512(_mm512_loadu_si512(typed + 64), low));
        return _mm512_maskz_permutexvar_epi64(0xff, order, packed);
    } else {
        __m128i quarter[4];
        for (int k = 0; k < 4; ++k) quarter[k] = _mm512_maskz_cvtepi32_epi8(0xffff, _mm512_loadu_si512(typed + 64 * k));
        const __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(quarter[0]), quarter[1], 1);
        const __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(quarter[2]), quarter[3], 1);
        return _mm512_maskz_inserti64x4(0xff, _mm512_castsi256_si512(lo), hi, 1);
    }
}

/// n rows of L bytes (1, 2, 4 or 8) exactly R * L bytes apart (R 2 or 4), by lane permutes: packing
/// gathers every R-th lane of R vectors into one 64-byte store (one two-source permute per pair of
/// vectors, and at R = 4 one shuffle of their halves; bytes by gather_bytes); unpacking (L 2, 4 or
/// 8) spreads 64 packed bytes over R vectors, one permute each, stored under a mask of the row
/// lanes (the gaps are not written). A group of 64 / L rows is packed only while a row follows it,
/// so no load reaches past the last row's end; the rest go row by row. Packing 64 KiB of 2-byte
/// rows at stride 8 ran at 22.5 GB/s against 8.5 for the compiler's gather (x86-64 baseline), and
/// 16 MiB objects of 1-8-byte rows at stride 2 or 4 times the row packed 1.1-1.5x faster.
template <bool Pack, std::int64_t L, std::int64_t R>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void rows_lanes(std::byte* typed, std::byte* packed,
                                                                     std::int64_t n) {
    static_assert(Pack || L != 1, "byte rows unpack by rows_window");
    using idx = lane_index<L, R>;
    constexpr std::int64_t group = idx::E;  // rows per 64 packed bytes
    std::int64_t i = 0;
    if constexpr (Pack && L == 1) {
        for (; i + group < n; i += group, typed += 64 * R, packed += 64)
            _mm512_storeu_si512(packed, gather_bytes<R>(typed));
    } else if constexpr (Pack) {
        const __m512i pick = _mm512_load_si512(idx::pack.data());
        for (; i + group < n; i += group, typed += 64 * R, packed += 64) {
            __m512i out = permute2<L>(_mm512_loadu_si512(typed), pick, _mm512_loadu_si512(typed + 64));
            if constexpr (R == 4)
                out = _mm512_maskz_shuffle_i64x2(
                    0xff, out, permute2<L>(_mm512_loadu_si512(typed + 128), pick, _mm512_loadu_si512(typed + 192)),
                    0x44);
            _mm512_storeu_si512(packed, out);
        }
    } else {
        std::uint64_t row_lanes = 0;
        for (int j = 0; j < idx::E; j += R) row_lanes |= std::uint64_t{1} << j;
        const std::byte* const first = typed;
        const std::int64_t claim_until = n / group * 64 * R - unpack_claim_ahead;  // no prefetch past the rows
        for (; i + group <= n; i += group, typed += 64 * R, packed += 64) {
            const __m512i in = _mm512_loadu_si512(packed);
            for (int r = 0; r < R; ++r) {
                const __m512i v = permute1<L>(_mm512_load_si512(idx::spread[r].data()), in);
                std::byte* to = typed + 64 * r;
                if (to - first < claim_until) __builtin_prefetch(to + unpack_claim_ahead, 1);
                if constexpr (L == 2)
                    _mm512_mask_storeu_epi16(to, static_cast<__mmask32>(row_lanes), v);
                else if constexpr (L == 4)
                    _mm512_mask_storeu_epi32(to, static_cast<__mmask16>(row_lanes), v);
                else
                    _mm512_mask_storeu_epi64(to, static_cast<__mmask8>(row_lanes), v);
            }
        }
    }
    rows_fixed<Pack, L>(typed, packed, R * L, n - i);
}

/// True when the CPU also has AVX512-VBMI (byte permutes) and VBMI2 (byte compress and expand,
/// for the permute's index) for rows_window.
inline bool window_rows_available() {
    static const bool ok = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2");
    return ok && masked_blocks_available();
}

/// rows_lanes where it applies: packing rows of 1, 2, 4 or 8 bytes at 2 or 4 times their
/// length, and unpacking rows of 2, 4 or 8 bytes (byte rows, and 2-byte rows where the CPU has
/// VBMI and VBMI2, unpack by rows_window, whose byte expand ran as fast or faster on the Xeon;
/// its byte permute, which replaced the expand, ran faster than the expand on Zen 4). Returns
/// false where it does not.
template <bool Pack>
[[gnu::always_inline]] inline bool rows_permuted(std::byte* typed, std::byte* packed, std::int64_t stride,
                                                 std::int64_t n, std::int64_t len) {
    // The shape first, without a division: rows_direct calls this for every run of rows (and,
    // through rows_prefetched, for every batch of them). Always inline: as a call (which GCC
    // made of it once rows_loops grew) it cost about 18 instructions a call.
    if ((len != 1 && len != 2 && len != 4 && len != 8) || (stride != 2 * len && stride != 4 * len)) return false;
    if (n * len < 2 * 64 || !masked_blocks_available()) return false;
    if (!Pack && (len == 1 || (len == 2 && window_rows_available()))) return false;
    const bool two = stride == 2 * len;
    switch (len) {
        case 1:
            if constexpr (Pack) return (two ? rows_lanes<Pack, 1, 2> : rows_lanes<Pack, 1, 4>)(typed, packed, n), true;
            return false;
        case 2: return (two ? rows_lanes<Pack, 2, 2> : rows_lanes<Pack, 2, 4>)(typed, packed, n), true;
        case 4: return (two ? rows_lanes<Pack, 4, 2> : rows_lanes<Pack, 4, 4>)(typed, packed, n), true;
        case 8: return (two ? rows_lanes<Pack, 8, 2> : rows_lanes<Pack, 8, 4>)(typed, packed, n), true;
        default: return false;
    }
}

/// True where the CPU has AVX2 but not the AVX-512 subsets of masked_blocks_available() (AMD
/// Zen 2 and Zen 3, Intel's client cores; decided once), and the tests have not switched the
/// vector paths off (masked_blocks_allowed): packs of 1- and 2-byte rows then gather with AVX2
/// shuffles, which the x86-64 baseline that shunt is compiled for does not have.
inline bool avx2_rows_available() {
    static const bool ok = __builtin_cpu_supports("avx2") && !cpu_has_masked_blocks();
    return ok && masked_blocks_allowed.load(std::memory_order_relaxed);
}

/// The shuffles of rows_lanes_avx2 for rows of L bytes (1 or 2) every R * L bytes (R 2 or 4):
/// `bytes` moves the rows of each 16-byte lane to the lane's front (16 / R bytes), `dwords` then
/// brings the two lanes' fronts together at the vector's front.
template <std::int64_t L, std::int64_t R>
struct lane_index_avx2 {
    static_assert((L == 1 || L == 2) && (R == 2 || R == 4));
    static constexpr int per_lane = static_cast<int>(16 / R);
    alignas(32) static constexpr std::array<std::uint8_t, 32> bytes = [] {
        std::array<std::uint8_t, 32> b{};
        for (int lane = 0; lane < 2; ++lane)
            for (int j = 0; j < 16; ++j)
                b[lane * 16 + j] = j < per_lane ? static_cast<std::uint8_t>(j / L * R * L + j % L) : 0x80;
        return b;
    }();
    alignas(32) static constexpr std::array<std::int32_t, 8> dwords = [] {
        std::array<std::int32_t, 8> d{};
        for (int j = 0; j < per_lane / 4; ++j) {
            d[j] = j;
            d[per_lane / 4 + j] = 4 + j;
        }
        return d;
    }();
};

/// The rows of one 32-byte typed vector at its front: 32 / R bytes.
template <std::int64_t L, std::int64_t R>
__attribute__((target("avx2"))) inline __m256i front_avx2(const std::byte* typed) {
    using idx = lane_index_avx2<L, R>;
    const __m256i v = _mm256_shuffle_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(typed)),
                                          _mm256_load_si256(reinterpret_cast<const __m256i*>(idx::bytes.data())));
    return _mm256_permutevar8x32_epi32(v, _mm256_load_si256(reinterpret_cast<const __m256i*>(idx::dwords.data())));
}

/// Packs n rows of L bytes (1 or 2) exactly R * L bytes apart (R 2 or 4) with AVX2: each 32-byte
/// typed vector's rows go to its front (a byte shuffle within its lanes, then a dword permute),
/// and R of them make one 32-byte store. A group of 32 / L rows is packed only while a row
/// follows it, so no load reaches past the last row's end; the rest go row by row.
template <std::int64_t L, std::int64_t R>
__attribute__((target("avx2"))) void rows_lanes_avx2(std::byte* typed, std::byte* packed, std::int64_t n) {
    constexpr std::int64_t group = 32 / L;
    std::int64_t i = 0;
    for (; i + group < n; i += group, typed += 32 * R, packed += 32) {
        __m256i out;
        if constexpr (R == 2) {
            // Named first: with clang (and gcc at -O0) the intrinsic is a macro, and the template
            // arguments' comma would split its arguments.
            const __m256i a = front_avx2<L, R>(typed), b = front_avx2<L, R>(typed + 32);
            out = _mm256_permute2x128_si256(a, b, 0x20);
        } else {
            const __m256i ab = _mm256_unpacklo_epi64(front_avx2<L, R>(typed), front_avx2<L, R>(typed + 32));
            const __m256i cd = _mm256_unpacklo_epi64(front_avx2<L, R>(typed + 64), front_avx2<L, R>(typed + 96));
            out = _mm256_permute2x128_si256(ab, cd, 0x20);
        }
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(packed), out);
    }
    rows_fixed<true, L>(typed, packed, R * L, n - i);
}

/// rows_lanes_avx2 where it pays: packing byte rows 2 bytes apart and 2-byte rows 4 or 8 bytes
/// apart, two groups or more, on a CPU where avx2_rows_available(); false elsewhere. On an AMD
/// EPYC (Zen 3, AVX2 only), in loops of their own over 64 KiB (three runs) and 1 MiB, these ran
/// 1.05-1.9x (byte rows) and 1.33-1.96x (2-byte rows) as fast as the compiler's gather
/// (rows_tiny, x86-64 baseline); byte rows 4 bytes apart 0.92-1.06x, and rows of 4 and 8 bytes
/// 0.68-1.07x (four vectors a store, half of them across a cache line), so those keep it.
inline bool rows_permuted_avx2(std::byte* typed, std::byte* packed, std::int64_t stride, std::int64_t n,
                               std::int64_t len) {
    if (!((len == 1 && stride == 2) || (len == 2 && (stride == 4 || stride == 8)))) return false;
    if (n * len < 2 * 32 || !avx2_rows_available()) return false;
    if (len == 1) return rows_lanes_avx2<1, 2>(typed, packed, n), true;
    return (stride == 4 ? rows_lanes_avx2<2, 2> : rows_lanes_avx2<2, 4>)(typed, packed, n), true;
}
#endif

/// Copies n >= 64 bytes as 64-byte chunks and one overlapping 64-byte tail: inline moves,
/// cheaper than a library call for the block lengths of typical layouts.
inline void copy_chunks(std::byte* dst, const std::byte* src, std::int64_t n) {
    std::int64_t i = 0;
    for (; i + 64 <= n; i += 64) std::memcpy(dst + i, src + i, 64);
    if (i < n) std::memcpy(dst + n - 64, src + n - 64, 64);
}

/// n rows of len bytes through the C library's memcpy, a call per row (the length is not a
/// constant, so the compiler cannot expand it). For data that streams from memory its copy,
/// which loads a whole row before it stores, keeps more misses in flight than inline moves:
/// 16 MiB objects of 128-512-byte rows packed 10-25% faster here than with copy_wide.
template <bool Pack>
[[gnu::noinline]] void rows_libc(std::byte* typed, std::byte* packed, std::int64_t stride, std::int64_t n,
                                 std::int64_t len) {
    for (std::int64_t i = 0; i < n; ++i, typed += stride, packed += len) {
        if constexpr (Pack)
            std::memcpy(packed, typed, static_cast<std::size_t>(len));
        else
            std::memcpy(typed, packed, static_cast<std::size_t>(len));
    }
}

template <bool Pack>
inline void rows_any(std::byte* typed, std::byte* packed, std::int64_t stride, std::int64_t n, std::int64_t len) {
    if (len <= 16) {
        for (std::int64_t i = 0; i < n; ++i, typed += stride, packed += len) move_block<Pack>(typed, packed, len);
    } else if (len >= 64 && len <= 4096) {
        for (std::int64_t i = 0; i < n; ++i, typed += stride, packed += len) {
            if constexpr (Pack)
                copy_chunks(packed, typed, len);
            else
                copy_chunks(typed, packed, len);
        }
    } else {
        rows_libc<Pack>(typed, packed, stride, n, len);
    }
}

/// n rows of L bytes exactly S bytes apart: with both known at compile time the compiler
/// vectorises the gather (or scatter) of tiny blocks instead of moving them one by one.
template <bool Pack, std::int64_t L, std::int64_t S>
inline void rows_const(std::byte* typed, std::byte* packed, std::int64_t n) {
    using word = std::conditional_t<
        L == 1, std::uint8_t,
        std::conditional_t<L == 2, std::uint16_t, std::conditional_t<L == 4, std::uint32_t, std::uint64_t>>>;
    constexpr std::int64_t step = S / L;
    if constexpr (Pack) {
        word* __restrict out = reinterpret_cast<word*>(packed);
        const word* __restrict in = reinterpret_cast<const word*>(typed);
        for (std::int64_t i = 0; i < n; ++i) out[i] = in[i * step];
    } else {
        word* __restrict out = reinterpret_cast<word*>(typed);
        const word* __restrict in = reinterpret_cast<const word*>(packed);
        for (std::int64_t i = 0; i < n; ++i) out[i * step] = in[i];
    }
}

/// Unpacks n rows of L bytes (1 or 2), S bytes apart (S 2 or 4 times L), from 8-byte loads of
/// the packed stream, eight rows an iteration, one L-byte store per row from a shifted register;
/// only the rows' bytes are written. For rows_const the compiler (x86-64 baseline) extracted
/// every row from a vector register: on an AMD EPYC (Zen 3, AVX2 only), in loops of their own
/// over 64 KiB (two runs) and 1 MiB, the 8-byte loads unpacked byte rows 1.6-2.2x (stride 2) and
/// 1.9-3x (stride 4) as fast; 2-byte rows (two loads an iteration), best of 60 interleaved trials,
/// three runs, 1.12-1.47x at stride 4 in 64 KiB and 1 MiB (1.01-1.09x in 16 MiB), and at stride 8
/// 0.96-1.12x, median 1.01x, a tie taken with the rest (one load per four rows had run 0.66-0.88x,
/// sixteen rows an iteration 0.78-1.18x). CPUs with AVX-512 take rows_window or rows_lanes before
/// this; those without VBMI take it for byte rows unmeasured.
template <std::int64_t L, std::int64_t S>
inline void unpack_narrow(std::byte* typed, const std::byte* packed, std::int64_t n) {
    static_assert((L == 1 || L == 2) && (S == 2 * L || S == 4 * L));
    using row = std::conditional_t<L == 1, std::uint8_t, std::uint16_t>;
    std::int64_t i = 0;
    if constexpr (std::endian::native == std::endian::little) {
        for (; i + 8 <= n; i += 8, packed += 8 * L, typed += 8 * S) {
            std::uint64_t w[L];
            std::memcpy(w, packed, 8 * L);
#pragma GCC unroll 8
            for (int k = 0; k < 8; ++k) {
                const row r = static_cast<row>(w[k * L / 8] >> (8 * L * k % 64));
                std::memcpy(typed + k * S, &r, L);
            }
        }
    }
    for (; i < n; ++i, typed += S, packed += L) std::memcpy(typed, packed, L);
}

/// Tiny blocks at two or four times their length, when both buffers are aligned to the block
/// (rows of 1 and 2 bytes unpack by unpack_narrow).
template <bool Pack, std::int64_t L>
inline bool rows_tiny(std::byte* typed, std::byte* packed, std::int64_t stride, std::int64_t n) {
    if constexpr (!Pack && (L == 1 || L == 2)) {
        if (stride == 2 * L) return unpack_narrow<L, 2 * L>(typed, packed, n), true;
        if (stride == 4 * L) return unpack_narrow<L, 4 * L>(typed, packed, n), true;
        return false;
    }
    if ((reinterpret_cast<std::uintptr_t>(typed) | reinterpret_cast<std::uintptr_t>(packed)) % L != 0) return false;
    if (stride == 2 * L) return rows_const<Pack, L, 2 * L>(typed, packed, n), true;
    if (stride == 4 * L) return rows_const<Pack, L, 4 * L>(typed, packed, n), true;
    return false;
}

/// True where the rules below keep the figures of the Xeon (Sapphire Rapids class) they were
/// first measured on: Intel x86 CPUs, and CPUs off x86, where they stand unmeasured. False on
/// other x86 CPUs, whose rules were measured on an AMD EPYC (Zen 4). Decided once.
inline bool tuned_as_intel() {
#if defined(__x86_64__) && defined(__GNUC__)
    static const bool intel = __builtin_cpu_is("intel");
    return intel;
#else
    return true;
#endif
}

/// The least stride from which sparse_gather sends rows through rows_libc on this CPU: 512 bytes
/// where tuned_as_intel(), 4096 elsewhere. On the Xeon the calls gathered faster from 512 bytes
/// (below). On the EPYC, packing rows of 2-16 bytes whose span was 4-64 MiB, in a loop of its
/// own, the inline moves ran 1.7-3.6x faster than the calls at strides of 512-1536 bytes,
/// 1.15-1.7x at 2096 and 3072, and at 2048 from 0.66x to 1.3x; at strides of 4096, 8192 and
/// 16384 the calls ran faster by 1.2-2x in spans of 16-64 MiB (at 6144 from 0.74x to 1.07x), and
/// the two were within 25% of each other in 4 MiB.
inline std::int64_t sparse_gather_stride() { return tuned_as_intel() ? 512 : 4096; }

/// True for packing rows of at most 16 bytes, each in a cache line of its own (from
/// sparse_gather_stride() apart), that sweep 4 to 64 MiB: out of the core's caches but within
/// the reach of its TLB and the last-level cache. There a call of the C library's memcpy per row
/// gathered 1.04-1.4x faster than inline moves on the development machine (Xeon, Sapphire Rapids
/// class, rows 512 bytes or more apart: the same loads, yet the inline loop ran at 6.6-7 ns a row
/// against 4.9-6.7 ns; Open MPI's packer, a memcpy call per block too, ran as fast as the calls),
/// while below 4 MiB (cached) and above 64 MiB (page walks), and for unpacking at any size, the
/// inline moves were faster.
inline bool sparse_gather(std::int64_t stride, std::int64_t n, std::int64_t len) {
    constexpr std::int64_t lo = std::int64_t{4} << 20, hi = std::int64_t{64} << 20;
    if (len > 16 || stride < sparse_gather_stride() || n <= 0) return false;
    const double span = static_cast<double>(n) * static_cast<double>(stride);
    return span >= static_cast<double>(lo) && span <= static_cast<double>(hi);
}

/// Off Intel, rows of this many bytes or more that no AVX-512 loop takes (rows_wide) go through
/// rows_libc instead of rows_fixed or copy_chunks. On an AMD EPYC (Zen 3, AVX2 only), in loops of
/// their own, best of 80 interleaved trials, glibc's copy per row against the 16-byte moves of
/// copy_chunks (rows 1.05-4 row lengths apart, 64 KiB and 1 MiB, packing and unpacking):
/// - rows of 256-1024 bytes, typed rows and packed stream at six alignments (cache-line aligned,
///   16, 8 and 40 bytes off, one side only off), 336 shapes: median 1.12x, 0.88-1.61x, 59 below
///   1.0x and 17 below 0.95x; 256-byte rows alone 1.14x (120 shapes), 512-byte rows 2 apart in
///   1 MiB 1.09-1.54x;
/// - rows of 448-4000 bytes, cache-line aligned, 384 shapes: median 1.08x, 0.89-1.68x (the
///   slowest 4000- and 1536-byte rows nearly touching);
/// - rows of 320 bytes 0.97x (48 shapes), 264-352 0.97-1.16x: a tie, left to the calls with the
///   rest; rows of 128 bytes 0.75x, hence the threshold.
/// From pack_program::streaming_bytes both took the calls already. Intel keeps the inline moves,
/// which the Xeon measured faster.
inline constexpr std::int64_t libc_rows_from = 256;

/// True where rows_window beats one fixed move per row, from sweeps of every len < stride for
/// strides 8, 16 and 32 over 64 KiB and 1 MiB of rows. On the Xeon (tuned_as_intel()), when
/// rows_window made a byte compress per window (not swept with its permute): the compress paid
/// where a window holds many rows or lengths that take two moves each; a power-of-two length (or
/// 24) is one move per row, and at stride 32 a row of up to 16 bytes is one or two: there the
/// moves ran 1.1-2.5x faster (8-byte rows at stride 32: 27.8 against 14.9 GB/s packing, 15.5
/// against 10.2 unpacking); from 1 MiB, where the caches bound both, they tied within 1%. On the
/// EPYC, with the permute: at stride 16 the window ran faster at every length (1.35-4x in 64
/// KiB, 1.2-2.65x in 1 MiB, but for byte rows unpacking 1 MiB: 0.94-1.04x); at stride 32 at every
/// length but 1, 2, 4, 16 and 24 (rows of 5-15 bytes 1.1-1.9x in 64 KiB and 1.1-1.3x in 1 MiB, of
/// 3 and 12 bytes 0.92-1.31x, of 17 and more 4.2-7x), where the moves ran as fast or up to 1.4x
/// faster, or for rows of 1 and 2 bytes faster one way and slower the other. Stride 8: the
/// window, on both.
inline bool window_pays(std::int64_t stride, std::int64_t len) {
    const bool one_move = len == 1 || len == 2 || len == 4 || len == 8 || len == 16 || len == 24;
    if (stride <= 8) return true;
    if (!tuned_as_intel()) return stride == 16 || !one_move || len == 8;
    if (stride == 16) return !one_move;
    return len > 16 && len != 24;
}

/// Runs of rows that rows_direct_runs copies with one dispatch: `count` runs of the same n rows,
/// the typed start of each `stride` bytes after the previous one's, their packed bytes in
/// sequence. The two innermost levels of a program with one block (a 3-D halo face: a plane's
/// few rows, plane after plane) take them together: the choice of a loop, about 80
/// instructions, is then made once rather than for every plane.
struct row_runs {
    std::int64_t count = 1;
    std::int64_t stride = 0;
};

template <bool Pack>
inline void rows_direct(std::byte* typed, std::byte* packed, std::int64_t stride, std::int64_t n, std::int64_t len,
                        bool streaming, bool stream_stores);

/// n strided rows of one block length (with Runs, in each of `runs`): the hot loop of 2-D and
/// N-D layouts, dispatched to a loop whose copy the compiler turns into plain moves. Without
/// Runs, one run, compiled as if the runs were not there: a repeated 4 KiB pack of 16 rows of
/// 256 B took about 100 more instructions with the copies below as calls, 40 with them inline
/// but the runs passed along, 25 with rows_permuted a call, and takes 2-6 more as it stands
/// (cachegrind, against the loop before runs).
template <bool Pack, bool Runs>
[[gnu::always_inline]] inline void rows_loops(std::byte* typed, std::byte* packed, std::int64_t stride, std::int64_t n,
                                              std::int64_t len, bool streaming, bool stream_stores, row_runs runs) {
    // `copy` (typed, packed) on the runs from `first` on. Every choice below but the tiny one's
    // depends on the shape and the CPU alone, so the first run's holds for all of them.
    const auto each = [&](std::int64_t first, auto copy) __attribute__((always_inline)) {
        if constexpr (Runs) {
            for (std::int64_t j = first; j < runs.count; ++j) copy(typed + j * runs.stride, packed + j * n * len);
        } else if (first == 0) {
            copy(typed, packed);
        }
    };
    // Packing tiny aligned blocks where rows_lanes and rows_lanes_avx2 do not apply (neither
    // AVX-512 nor AVX2, other shapes, or fewer rows than two of their groups): the compiler's
    // vectorised gather beats the window compress. It needs both buffers aligned to the block:
    // a later run that is not goes through the whole choice on its own.
    const auto tiny_at = [&](std::byte * t, std::byte * q) __attribute__((always_inline)) {
        if (n < 16) return false;
        switch (len) {
            case 1: return rows_tiny<Pack, 1>(t, q, stride, n);
            case 2: return rows_tiny<Pack, 2>(t, q, stride, n);
            case 4: return rows_tiny<Pack, 4>(t, q, stride, n);
            default: return false;
        }
    };
    const auto tiny = [&]() __attribute__((always_inline)) {
        if (!tiny_at(typed, packed)) return false;
        each(
            1, [&](std::byte * t, std::byte * q) __attribute__((always_inline)) {
                if (!tiny_at(t, q)) rows_direct<Pack>(t, q, stride, n, len, streaming, stream_stores);
            });
        return true;
    };
#ifdef SHUNT_HAVE_MASKED_BLOCKS
    if (rows_permuted<Pack>(typed, packed, stride, n, len))
        return each(
            1, [&](std::byte * t, std::byte * q)
                   __attribute__((always_inline)) { rows_permuted<Pack>(t, q, stride, n, len); });
    if (Pack && rows_permuted_avx2(typed, packed, stride, n, len))
        return each(
            1, [&](std::byte * t, std::byte * q)
                   __attribute__((always_inline)) { rows_permuted_avx2(t, q, stride, n, len); });
#endif
    if (Pack && tiny()) return;
    if (Pack && sparse_gather(stride, n, len))
        return each(
            0, [&](std::byte * t, std::byte * q)
                   __attribute__((always_inline)) { rows_libc<Pack>(t, q, stride, n, len); });
#ifdef SHUNT_HAVE_MASKED_BLOCKS
    if (stream_stores && len >= 64 && masked_blocks_available())
        return each(
            0, [&](std::byte * t, std::byte * q)
                   __attribute__((always_inline)) { rows_wide<Pack, true>(t, q, stride, n, len); });
    if (streaming && len >= 128)
        return each(
            0, [&](std::byte * t, std::byte * q)
                   __attribute__((always_inline)) { rows_libc<Pack>(t, q, stride, n, len); });
    if (len >= 64 && masked_blocks_available())
        return each(
            0, [&](std::byte * t, std::byte * q)
                   __attribute__((always_inline)) { rows_wide<Pack>(t, q, stride, n, len); });
    if (n >= 16 && stride > len && stride <= 32 && 64 % stride == 0 && window_pays(stride, len) &&
        window_rows_available())
        return each(
            0, [&](std::byte * t, std::byte * q)
                   __attribute__((always_inline)) { rows_window<Pack>(t, q, stride, n, len); });
#endif
    if (!Pack && tiny()) return;
    if (len >= libc_rows_from && !tuned_as_intel())
        return each(
            0, [&](std::byte * t, std::byte * q)
                   __attribute__((always_inline)) { rows_libc<Pack>(t, q, stride, n, len); });
    each(
        0, [&](std::byte * t, std::byte * q) __attribute__((always_inline)) {
            switch (len) {
                case 1: return rows_fixed<Pack, 1>(t, q, stride, n);
                case 2: return rows_fixed<Pack, 2>(t, q, stride, n);
                case 3: return rows_fixed<Pack, 3>(t, q, stride, n);
                case 4: return rows_fixed<Pack, 4>(t, q, stride, n);
                case 6: return rows_fixed<Pack, 6>(t, q, stride, n);
                case 8: return rows_fixed<Pack, 8>(t, q, stride, n);
                case 12: return rows_fixed<Pack, 12>(t, q, stride, n);
                case 16: return rows_fixed<Pack, 16>(t, q, stride, n);
                case 24: return rows_fixed<Pack, 24>(t, q, stride, n);
                case 32: return rows_fixed<Pack, 32>(t, q, stride, n);
                case 48: return rows_fixed<Pack, 48>(t, q, stride, n);
                case 64: return rows_fixed<Pack, 64>(t, q, stride, n);
                case 128: return rows_fixed<Pack, 128>(t, q, stride, n);
                case 256: return rows_fixed<Pack, 256>(t, q, stride, n);
                default: return rows_any<Pack>(t, q, stride, n, len);
            }
        });
}

/// n strided rows of one block length (rows_loops for one run).
template <bool Pack>
inline void rows_direct(std::byte* typed, std::byte* packed, std::int64_t stride, std::int64_t n, std::int64_t len,
                        bool streaming, bool stream_stores) {
    rows_loops<Pack, false>(typed, packed, stride, n, len, streaming, stream_stores, {});
}

/// rows_loops for `runs` of n rows, the loop chosen once.
template <bool Pack>
inline void rows_direct_runs(std::byte* typed, std::byte* packed, std::int64_t stride, std::int64_t n, std::int64_t len,
                             bool streaming, bool stream_stores, row_runs runs) {
    rows_loops<Pack, true>(typed, packed, stride, n, len, streaming, stream_stores, runs);
}

/// Rows written per batch of rows_prefetched, which prefetches the batch after the one it writes.
/// 16 ran 1.03-1.6x faster than 8 on 1 MiB objects of 16-64-byte rows, and as fast on longer rows
/// and in 16 MiB objects.
inline constexpr std::int64_t prefetch_batch = 16;

/// True where unpacking strided rows pays for prefetching the typed rows a batch ahead: rows at
/// least a cache line apart (each row starts a line of its own, which the hardware prefetchers,
/// tracking sequential lines, do not fetch ahead) over a typed span of 1 MiB or more (beyond half
/// of the development machine's 2 MiB L2, where each written line waits for its read for
/// ownership from the L3 or memory), written with ordinary stores. In a loop of memcpy calls per
/// row, 8-512-byte rows 128 B-2 KiB apart unpacked 1.5-3x faster with the lines of the rows 8
/// ahead prefetched (16 MiB of 256 B rows 1 KiB apart, the output out of the caches: 5.1 against
/// 9.5 GB/s, as fast as streaming stores, which leave the rows out of the cache); packing, whose
/// strided side is only read, gained nothing. Off Intel (tuned_as_intel() false) only rows
/// shorter than 128 bytes over a span of pack_program::streaming_bytes or more take it: on the
/// EPYC (Zen 4, whose hardware prefetchers follow strides), in loops of unpacks run as bench-pack
/// runs them (two runs), the rows without the prefetch ran 1.1-1.4x faster in 1 MiB objects of
/// 16-64-byte rows and of 512-byte rows, 1.03-1.25x of 128-256-byte rows 4 rows apart, 0.96-1.12x
/// of the rest (1-8 bytes 512 B apart and 128-256 bytes 2 rows apart), and 1.13-1.41x in 16 MiB
/// objects of 128-512-byte rows; in 16 MiB of 16-64-byte rows they ran 0.78-0.99x, hence the
/// exception. That exception holds only where AVX-512 is (the Zen 4): on a Zen 3 (AVX2, no
/// AVX-512, a 32 MiB L3), rows_direct against rows_prefetched in one process, interleaved, best
/// of 60, unpacked 1-120-byte rows 64-512 B apart in 64 KiB, 1 MiB and 16 MiB of payload (26
/// shapes) 0.94-1.42x as fast, median 1.08 (1- and 2-byte rows 512 B apart in 64 KiB 1.24-1.42x,
/// 16-byte rows in 1 MiB 1.15-1.37x; 8-byte rows 64 B apart in 16 MiB 0.94x, 64-byte rows 256 B
/// apart in 1 MiB 0.97x): without AVX-512 no row prefetches off Intel.
inline bool prefetch_pays(std::int64_t stride, std::int64_t n, std::int64_t len, bool stream_stores) {
    if (stream_stores || stride < 64 || stride <= len || n <= 2 * prefetch_batch) return false;
    const double span = static_cast<double>(n) * static_cast<double>(stride);
    if (tuned_as_intel()) return span >= double(std::int64_t{1} << 20);
    return len < 128 && span >= double(pack_program::streaming_bytes) && cpu_has_masked_blocks();
}

/// rows_direct in batches of prefetch_batch rows, each batch copied after the lines of the next
/// one are prefetched (with prefetch_row's Locality). rows() prefetches into every level on Intel
/// and into the L2 elsewhere: on the EPYC (Zen 4), in bench-pack against prefetcht0 (3
/// interleaved runs per flavour), unpacks of 16 MiB of 8-64-byte rows 64-512 bytes apart ran
/// 0.95-1.38x as fast (median 1.23), of 1 MiB of 1-8-byte rows 512 bytes apart 1.07-1.21x.
template <bool Pack, int Locality = 3>
inline void rows_prefetched(std::byte* typed, std::byte* packed, std::int64_t stride, std::int64_t n, std::int64_t len,
                            bool streaming) {
    for (std::int64_t j = 0; j < std::min(n, prefetch_batch); ++j) prefetch_row<Locality>(typed + j * stride, len);
    for (std::int64_t i = 0; i < n; i += prefetch_batch) {
        const std::int64_t ahead = std::min(n, i + 2 * prefetch_batch);
        for (std::int64_t j = i + prefetch_batch; j < ahead; ++j) prefetch_row<Locality>(typed + j * stride, len);
        rows_direct<Pack>(typed + i * stride, packed + i * len, stride, std::min(prefetch_batch, n - i), len, streaming,
                          false);
    }
}

/// n strided rows of one block length: rows_direct, unpacking a batch ahead of prefetches where
/// prefetch_pays.
template <bool Pack>
inline void rows(std::byte* typed, std::byte* packed, std::int64_t stride, std::int64_t n, std::int64_t len,
                 bool streaming, bool stream_stores, row_runs runs = {}) {
    if (!Pack && prefetch_pays(stride, n, len, stream_stores)) {
        for (std::int64_t j = 0; j < runs.count; ++j, typed += runs.stride, packed += n * len)
            tuned_as_intel() ? rows_prefetched<Pack>(typed, packed, stride, n, len, streaming)
                             : rows_prefetched<Pack, 2>(typed, packed, stride, n, len, streaming);
        return;
    }
    if (runs.count == 1) return rows_direct<Pack>(typed, packed, stride, n, len, streaming, stream_stores);
    rows_direct_runs<Pack>(typed, packed, stride, n, len, streaming, stream_stores, runs);
}

/// Packed bytes [lo, hi) of one pass over the block list at typed base `base`.
template <bool Pack>
inline void blocks_range(const pack_program& p, std::uintptr_t base, std::byte* packed, std::int64_t lo,
                         std::int64_t hi) {
    std::int64_t pos = 0;
    for (std::size_t b = 0; b < p.nblocks() && pos < hi; ++b) {
        const block& blk = p.blocks()[b];
        const std::int64_t end = pos + blk.length;
        if (end > lo) {
            const std::int64_t from = std::max(lo, pos), to = std::min(hi, end);
            move_block<Pack>(at(base, blk.offset + (from - pos)), packed, to - from);
            packed += to - from;
        }
        pos = end;
    }
}

/// One whole pass over the block list at typed base `base` (no window to clip to); returns the
/// packed position after it.
template <bool Pack>
inline std::byte* blocks_all(const pack_program& p, std::uintptr_t base, std::byte* packed) {
    const block* b = p.blocks();
    const std::size_t n = p.nblocks();
#ifdef SHUNT_HAVE_MASKED_BLOCKS
    if (n >= 4 && masked_blocks_available())
        return !Pack && p.prefetch_blocks() ? blocks_masked<Pack, true>(b, n, base, packed)
                                            : blocks_masked<Pack>(b, n, base, packed);
#endif
    if constexpr (Pack) {
        if (p.block_bytes() <= overwide_mean_bytes * static_cast<std::int64_t>(n))
            return blocks_overwide(b, n, base, packed, p.block_bytes());
    } else if (p.block_bytes() <= short_unpack_mean_bytes * static_cast<std::int64_t>(n)) {
        return blocks_unpack_short(b, n, base, packed);
    }
    for (std::size_t i = 0; i < n; ++i) {
        move_block<Pack>(at(base, b[i].offset), packed, b[i].length);
        packed += b[i].length;
    }
    return packed;
}

/// Iterations [i0, i1) of level k, each complete.
template <bool Pack>
inline void full(const pack_program& p, std::size_t k, std::uintptr_t base, std::byte* packed, std::int64_t i0,
                 std::int64_t i1) {
    if (k == p.nlevels()) {  // no levels at all: one pass over the blocks
        blocks_all<Pack>(p, base, packed);
        return;
    }
    const pack_level& lv = p.level(k);
    if (k + 2 == p.nlevels() && p.nblocks() == 1) {  // the rows of each iteration, as runs of rows
        const pack_level& in = p.level(k + 1);
        const block& b = p.blocks()[0];
        rows<Pack>(at(base, b.offset + i0 * lv.stride), packed, in.stride, in.count, b.length, p.streaming(),
                   p.stream_stores(), {i1 - i0, lv.stride});
        return;
    }
    if (k + 1 == p.nlevels()) {
        if (p.nblocks() == 1) {
            const block& b = p.blocks()[0];
            rows<Pack>(at(base, b.offset + i0 * lv.stride), packed, lv.stride, i1 - i0, b.length, p.streaming(),
                       p.stream_stores());
            return;
        }
        for (std::int64_t i = i0; i < i1; ++i)
            packed = blocks_all<Pack>(p, base + static_cast<std::uintptr_t>(i * lv.stride), packed);
        return;
    }
    const std::int64_t count = p.level(k + 1).count;
    for (std::int64_t i = i0; i < i1; ++i, packed += lv.inner)
        full<Pack>(p, k + 1, base + static_cast<std::uintptr_t>(i * lv.stride), packed, 0, count);
}

/// Packed bytes [lo, hi) of level k (0 <= lo < hi <= that level's packed size).
template <bool Pack>
inline void range(const pack_program& p, std::size_t k, std::uintptr_t base, std::byte* packed, std::int64_t lo,
                  std::int64_t hi) {
    if (k == p.nlevels()) {
        blocks_range<Pack>(p, base, packed, lo, hi);
        return;
    }
    const pack_level& lv = p.level(k);
    const std::int64_t P = lv.inner;
    std::int64_t i = lo / P;
    if (lo != i * P || hi - i * P < P) {  // leading partial iteration
        const std::int64_t from = lo - i * P, to = std::min(hi - i * P, P);
        range<Pack>(p, k + 1, base + static_cast<std::uintptr_t>(i * lv.stride), packed, from, to);
        packed += to - from;
        ++i;
    }
    const std::int64_t iend = hi / P;
    if (i < iend) {
        full<Pack>(p, k, base, packed, i, iend);
        packed += (iend - i) * P;
        i = iend;
    }
    if (i * P < hi) range<Pack>(p, k + 1, base + static_cast<std::uintptr_t>(i * lv.stride), packed, 0, hi - i * P);
}

/// Every packed byte of a program at typed base `typed`: what pack_host and unpack_host do
/// for a whole, non-dense transfer, for callers that keep the program of a repeated call.
/// Returns the bytes moved (p.total()).
template <bool Pack>
inline std::int64_t run_program(const pack_program& p, std::uintptr_t typed, std::byte* packed) {
    if (p.total() > 0) full<Pack>(p, 0, typed, packed, 0, p.nlevels() == 0 ? 1 : p.level(0).count);
    return p.total();
}

template <bool Pack>
inline std::int64_t transfer(const layout& form, std::int64_t extent, std::int64_t count, std::int64_t element_size,
                             std::uintptr_t typed, std::byte* packed, std::int64_t first, std::int64_t max_bytes) {
    if (count <= 0 || first < 0 || max_bytes <= 0) return 0;
    // One contiguous run (a dense type, or one element of a single-block type): one copy,
    // without building a program.
    if (form.is_dense(extent, count)) {
        const std::int64_t total = checked_mul(form.blocks[0].length, count);
        if (first >= total) return 0;
        const std::int64_t n = std::min(max_bytes, total - first);
        std::byte* run = at(typed, form.blocks[0].offset + first);
        if constexpr (Pack)
            std::memcpy(packed, run, static_cast<std::size_t>(n));
        else
            std::memcpy(run, packed, static_cast<std::size_t>(n));
        return n;
    }
    const pack_program p(form, extent, count, element_size);
    const std::int64_t total = p.total();
    if (first >= total) return 0;
    const std::int64_t hi = max_bytes >= total - first ? total : first + max_bytes;
    if (first == 0 && hi == total) return run_program<Pack>(p, typed, packed);
    range<Pack>(p, 0, typed, packed, first, hi);
    return hi - first;
}

}  // namespace detail

/// Packs bytes [first, first + max_bytes) of the packed stream of `count` elements of a type
/// with canonical layout `form` and extent `extent`, element 0 at `inbuf` (block offsets are
/// relative to it: negative, or absolute with MPI_BOTTOM), into `out`. Returns the bytes
/// written: min(max_bytes, count * size - first), 0 when first is past the end. The bytes are
/// those MPI_Pack writes. Not synchronised: callers must not pack into overlapping outputs
/// from several threads. `out` must not overlap the typed buffer.
inline std::int64_t pack_host(const layout& form, std::int64_t extent, std::int64_t count, const void* inbuf, void* out,
                              std::int64_t first = 0,
                              std::int64_t max_bytes = std::numeric_limits<std::int64_t>::max()) {
    return detail::transfer<true>(form, extent, count, -1, reinterpret_cast<std::uintptr_t>(inbuf),
                                  static_cast<std::byte*>(out), first, max_bytes);
}

/// pack_host for a decoded type (t.size is t.form.size(), as decode() guarantees): the same
/// bytes, without summing a long block list on every call.
inline std::int64_t pack_host(const type_info& t, std::int64_t count, const void* inbuf, void* out,
                              std::int64_t first = 0,
                              std::int64_t max_bytes = std::numeric_limits<std::int64_t>::max()) {
    return detail::transfer<true>(t.form, t.extent, count, t.size, reinterpret_cast<std::uintptr_t>(inbuf),
                                  static_cast<std::byte*>(out), first, max_bytes);
}

/// The inverse of pack_host: reads packed bytes [first, first + max_bytes) from `in` and
/// scatters them into the typed buffer `outbuf` as MPI_Unpack does. Returns the bytes read.
inline std::int64_t unpack_host(const layout& form, std::int64_t extent, std::int64_t count, const void* in,
                                void* outbuf, std::int64_t first = 0,
                                std::int64_t max_bytes = std::numeric_limits<std::int64_t>::max()) {
    return detail::transfer<false>(form, extent, count, -1, reinterpret_cast<std::uintptr_t>(outbuf),
                                   const_cast<std::byte*>(static_cast<const std::byte*>(in)), first, max_bytes);
}

/// unpack_host for a decoded type (t.size is t.form.size()): the same bytes, without summing a
/// long block list on every call.
inline std::int64_t unpack_host(const type_info& t, std::int64_t count, const void* in, void* outbuf,
                                std::int64_t first = 0,
                                std::int64_t max_bytes = std::numeric_limits<std::int64_t>::max()) {
    return detail::transfer<false>(t.form, t.extent, count, t.size, reinterpret_cast<std::uintptr_t>(outbuf),
                                   const_cast<std::byte*>(static_cast<const std::byte*>(in)), first, max_bytes);
}

}  // namespace shunt
