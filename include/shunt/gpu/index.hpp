// shunt/gpu/index.hpp: the index math shared by the CUDA pack kernels and their host emulation:
// a flat, device-friendly descriptor of a canonical layout and the map from a packed byte (or
// word) to its offset in the typed buffer. Host and device; no CUDA header, no MPI, no allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SHUNT_HD __host__ __device__
#else
#define SHUNT_HD
#endif

namespace shunt::gpu {

/// The pack program of `count` elements, flattened (built on the host by shunt::gpu::flat_form).
/// Plain data: copied by value into kernel parameters; `table` points into memory the code that
/// reads it can reach (host memory for the emulation, device memory for the kernels). The table
/// holds, in order:
///   dims:    ndims triples (count, stride, inner), dims[0] outermost; the element count is the
///            outermost dimension (stride = extent) unless it merged or folded away; `inner` is
///            the packed bytes of one iteration of that dimension;
///   offsets: nblocks block offsets, relative to the typed base (any sign, 64 bits);
///   prefix:  nblocks + 1 prefix sums of the block lengths (prefix[0] = 0, prefix[nblocks] =
///            block_bytes), strictly increasing: empty blocks are dropped.
/// The packed stream is: for each index tuple over dims in row-major order, the blocks in order.
struct pack_desc {
    const std::int64_t* table = nullptr;
    std::int64_t ndims = 0;
    std::int64_t nblocks = 0;
    std::int64_t block_bytes = 0;  ///< bytes of one pass over the block list
    std::int64_t total = 0;  ///< packed bytes of all elements (count * elem_size)
    std::int64_t elem_size = 0;  ///< MPI_Type_size of one element
    std::int64_t extent = 0;  ///< extent of one element
    std::int64_t count = 0;  ///< elements described
    std::int64_t single_offset = 0;  ///< offset of block 0 (the one-block fast path)
    std::int64_t align = 0;  ///< OR of every stride, block offset and block length
};

/// Start of the dims triples, the block offsets and the length prefix sums in d.table.
SHUNT_HD inline const std::int64_t* desc_dims(const pack_desc& d) { return d.table; }
SHUNT_HD inline const std::int64_t* desc_offsets(const pack_desc& d) { return d.table + 3 * d.ndims; }
SHUNT_HD inline const std::int64_t* desc_prefix(const pack_desc& d) { return d.table + 3 * d.ndims + d.nblocks; }
/// Table entries a descriptor of ndims dimensions and nblocks blocks needs.
SHUNT_HD inline std::int64_t desc_table_size(std::int64_t ndims, std::int64_t nblocks) {
    return 3 * ndims + 2 * nblocks + 1;
}

/// The largest i in [0, n) with sorted[i] <= x, for sorted[0] <= x (binary search: O(log n),
/// the same few loads in every thread).
SHUNT_HD inline std::int64_t last_at_most(const std::int64_t* sorted, std::int64_t n, std::int64_t x) {
    std::int64_t lo = 0, hi = n;  // invariant: sorted[lo] <= x, answer < hi
    while (hi - lo > 1) {
        const std::int64_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] <= x)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/// Typed-buffer offset of packed byte `p` (0 <= p < d.total): strided dims by division, then the
/// block, by binary search over the prefix sums when BlockList (d.nblocks > 1), directly
/// otherwise (the strided kernels). Bytes p .. p + w - 1 lie in the same block, at consecutive
/// offsets, whenever p and every block length are multiples of w.
template <bool BlockList>
SHUNT_HD inline std::int64_t typed_offset_as(const pack_desc& d, std::int64_t p) {
    const std::int64_t* dims = desc_dims(d);
    std::int64_t off = 0;
    for (std::int64_t k = 0; k < d.ndims; ++k) {
        const std::int64_t inner = dims[3 * k + 2];
        // 32-bit division where both fit (a few instructions on a GPU, where 64-bit division is
        // a long software sequence); the quotient is the same.
        const std::int64_t i =
            (static_cast<std::uint64_t>(p | inner) >> 32) == 0
                ? static_cast<std::int64_t>(static_cast<std::uint32_t>(p) / static_cast<std::uint32_t>(inner))
                : p / inner;
        p -= i * inner;
        off += i * dims[3 * k + 1];
    }
    if constexpr (!BlockList) {
        return off + d.single_offset + p;
    } else {
        const std::int64_t* prefix = desc_prefix(d);
        const std::int64_t b = last_at_most(prefix, d.nblocks, p);
        return off + desc_offsets(d)[b] + (p - prefix[b]);
    }
}

/// typed_offset_as for any descriptor.
SHUNT_HD inline std::int64_t typed_offset(const pack_desc& d, std::int64_t p) {
    return d.nblocks == 1 ? typed_offset_as<false>(d, p) : typed_offset_as<true>(d, p);
}

/// Up to this many strided dimensions go by the fast index path (2-D and 3-D objects: the
/// faces of halo codes), whose dimensions travel by value in the kernel's parameters.
inline constexpr int fast_max_dims = 3;

/// A one-block descriptor's dimensions by value, each with the reciprocal of its inner size for
/// division by one multiplication: the fast index path, for windows whose stream offsets fit 32
/// bits (fast_usable). Built on the host from the host table (make_fast_dims).
struct fast_dims {
    std::int64_t ndims = 0;
    std::int64_t stride[fast_max_dims]{};
    std::int64_t inner[fast_max_dims]{};
    std::uint64_t recip[fast_max_dims]{};  ///< ceil(2^64 / inner) for inner >= 2; 0 for inner 1
    std::int64_t base = 0;  ///< typed offset of the block (single_offset)
};

/// The fast path's dimensions of `d`, whose table must be readable here (a flat_form's host
/// table); ndims < 0 when `d` is not a one-block descriptor of at most fast_max_dims dimensions
/// whose stream fits 32 bits.
inline fast_dims make_fast_dims(const pack_desc& d) {
    fast_dims f;
    if (d.nblocks != 1 || d.ndims > fast_max_dims || d.total > (std::int64_t{1} << 32)) {
        f.ndims = -1;
        return f;
    }
    f.ndims = d.ndims;
    f.base = d.single_offset;
    for (std::int64_t k = 0; k < d.ndims; ++k) {
        f.stride[k] = desc_dims(d)[3 * k + 1];
        f.inner[k] = desc_dims(d)[3 * k + 2];
        f.recip[k] = f.inner[k] > 1 ? ~std::uint64_t{0} / static_cast<std::uint64_t>(f.inner[k]) + 1 : 0;
    }
    return f;
}

/// The high 64 bits of a * b.
SHUNT_HD inline std::uint64_t mul_high(std::uint64_t a, std::uint64_t b) {
#if defined(__CUDA_ARCH__)
    return __umul64hi(a, b);
#else
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
#endif
}

/// Typed offset of packed byte `p` (0 <= p < 2^32) by the fast path: typed_offset_as<false>'s
/// answer, each quotient floor(p * ceil(2^64 / inner) / 2^64), exact for p < 2^32 and inner
/// <= 2^32 (the error term stays below 1 / inner). Where given, index[k] receives dimension k's
/// quotient and *rem the byte within the block (the staged kernels' cursor); the kernels that
/// pass neither compile to the same code.
SHUNT_HD inline std::int64_t fast_offset(const fast_dims& f, std::int64_t p, std::int64_t* index = nullptr,
                                         std::int64_t* rem = nullptr) {
    std::int64_t off = f.base;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int k = 0; k < fast_max_dims; ++k) {
        if (k >= f.ndims) break;
        const std::int64_t i =
            f.recip[k] == 0 ? p : static_cast<std::int64_t>(mul_high(static_cast<std::uint64_t>(p), f.recip[k]));
        p -= i * f.inner[k];
        off += i * f.stride[k];
        if (index != nullptr) index[k] = i;
    }
    if (rem != nullptr) *rem = p;
    return off + p;
}

/// Packed bytes [first, first + bytes) of a transfer, clamped as the host packer does.
struct window {
    std::int64_t first = 0;
    std::int64_t bytes = 0;
};

/// The window pack_host would move for (first, max_bytes): empty when first < 0, max_bytes <= 0
/// or first >= total; otherwise [first, min(total, first + max_bytes)).
SHUNT_HD inline window clamp_window(const pack_desc& d, std::int64_t first, std::int64_t max_bytes) {
    if (first < 0 || max_bytes <= 0 || first >= d.total) return {};
    const std::int64_t left = d.total - first;
    return {first, max_bytes >= left ? left : max_bytes};
}

/// The widest word (16, 8, 4, 2 or 1 bytes) that divides the typed base, the packed pointer, the
/// window start and length, and every stride, block offset and block length: each thread then
/// moves whole aligned words that never straddle a block.
SHUNT_HD inline int word_size(const pack_desc& d, std::uintptr_t typed, std::uintptr_t packed, window w) {
    const std::uint64_t a = static_cast<std::uint64_t>(d.align) | static_cast<std::uint64_t>(typed) |
                            static_cast<std::uint64_t>(packed) | static_cast<std::uint64_t>(w.first) |
                            static_cast<std::uint64_t>(w.bytes) | 16u;
    return static_cast<int>(a & (~a + 1));  // lowest set bit
}

/// A 16-byte word: one vector load or store where aligned.
struct alignas(16) word16 {
    std::uint64_t lo, hi;
};

/// Copies one word: a single aligned load and store on the device, memcpy on the host (the
/// emulation's buffers are std::byte arrays; memcpy keeps it free of aliasing questions).
template <class Word>
SHUNT_HD inline void copy_word(void* dst, const void* src) {
#if defined(__CUDA_ARCH__)
    *static_cast<Word*>(dst) = *static_cast<const Word*>(src);
#else
    std::memcpy(dst, src, sizeof(Word));
#endif
}

/// The body of one kernel thread for word j of window w: packs (Pack) or unpacks the sizeof(Word)
/// bytes at stream position w.first + j * sizeof(Word), `packed` pointing at stream byte w.first.
/// BlockList as in typed_offset_as.
template <class Word, bool Pack, bool BlockList>
SHUNT_HD inline void move_word(const pack_desc& d, std::uintptr_t typed, std::byte* packed, window w, std::int64_t j) {
    const std::int64_t at = j * static_cast<std::int64_t>(sizeof(Word));
    std::byte* t =
        reinterpret_cast<std::byte*>(typed + static_cast<std::uintptr_t>(typed_offset_as<BlockList>(d, w.first + at)));
    if constexpr (Pack)
        copy_word<Word>(packed + at, t);
    else
        copy_word<Word>(t, packed + at);
}

/// One (typed buffer, descriptor, window) item of a fused launch, with its direction, its word
/// size and the first launch block that works on it. Launch blocks [block_begin, next item's
/// block_begin) stride over the item's words.
struct fused_item {
    pack_desc desc;
    std::uintptr_t typed = 0;
    std::byte* packed = nullptr;  ///< where stream byte win.first goes (unpack: comes from)
    window win;
    std::int64_t word = 1;
    std::int64_t block_begin = 0;
    bool pack = true;  ///< typed -> packed; false: packed -> typed
};

/// An item that moves the whole stream of `d` between `typed` and `packed`: packs (typed ->
/// packed) when `pack`, else unpacks. plan_fused fills in the window, word and first block.
inline fused_item whole_item(const pack_desc& d, const void* typed, const void* packed, bool pack) {
    fused_item it;
    it.desc = d;
    it.typed = reinterpret_cast<std::uintptr_t>(typed);
    it.packed = const_cast<std::byte*>(static_cast<const std::byte*>(packed));
    it.pack = pack;
    return it;
}

/// The item a launch block works on: the last with block_begin <= block (binary search over
/// `block_begin`, a sorted copy of the items' block_begin fields).
SHUNT_HD inline std::int64_t fused_item_of(const std::int64_t* block_begin, std::int64_t nitems, std::int64_t block) {
    return last_at_most(block_begin, nitems, block);
}

/// The words of one fused item that thread `thread` of its launch block `local_block` (of
/// `item_blocks` blocks of `block_threads` threads) moves, grid-stride, in direction Pack.
template <class Word, bool Pack>
SHUNT_HD inline void fused_words(const fused_item& it, std::int64_t local_block, std::int64_t item_blocks,
                                 std::int64_t block_threads, std::int64_t thread) {
    const std::int64_t words = it.win.bytes / static_cast<std::int64_t>(sizeof(Word));
    if (it.desc.nblocks == 1) {
        for (std::int64_t j = local_block * block_threads + thread; j < words; j += item_blocks * block_threads)
            move_word<Word, Pack, false>(it.desc, it.typed, it.packed, it.win, j);
    } else {
        for (std::int64_t j = local_block * block_threads + thread; j < words; j += item_blocks * block_threads)
            move_word<Word, Pack, true>(it.desc, it.typed, it.packed, it.win, j);
    }
}

/// The body of one fused-kernel thread: packs or unpacks (the item's direction) its words.
template <class Word>
SHUNT_HD inline void fused_thread(const fused_item& it, std::int64_t local_block, std::int64_t item_blocks,
                                  std::int64_t block_threads, std::int64_t thread) {
    if (it.pack)
        fused_words<Word, true>(it, local_block, item_blocks, block_threads, thread);
    else
        fused_words<Word, false>(it, local_block, item_blocks, block_threads, thread);
}

}  // namespace shunt::gpu
