// shunt/gpu/emulate.hpp: the CUDA pack kernels run on the host, one loop per emulated thread, with
// exactly the kernels' index math (shunt/gpu/index.hpp): how tests without a GPU check it.
#pragma once

#include <shunt/gpu/descriptor.hpp>
#include <shunt/gpu/index.hpp>
#include <shunt/gpu/staged.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace shunt::gpu {

/// The launch shape an emulated kernel walks: `threads` emulated threads, thread t moving words
/// t, t + threads, t + 2 threads, ... as a grid-stride kernel of that many threads does.
inline constexpr std::int64_t emulated_threads = 96;

namespace detail {

template <class Word, bool Pack>
inline void emulate_words(const pack_desc& d, std::uintptr_t typed, std::byte* packed, window w, std::int64_t threads) {
    const std::int64_t words = w.bytes / static_cast<std::int64_t>(sizeof(Word));
    const bool list = d.nblocks > 1;  // the block-list kernel, else the strided one
    for (std::int64_t t = 0; t < threads; ++t)
        for (std::int64_t j = t; j < words; j += threads)
            list ? move_word<Word, Pack, true>(d, typed, packed, w, j)
                 : move_word<Word, Pack, false>(d, typed, packed, w, j);
}

template <bool Pack>
inline void emulate_dispatch(const pack_desc& d, std::uintptr_t typed, std::byte* packed, window w, int word,
                             std::int64_t threads) {
    switch (word) {
        case 16: return emulate_words<word16, Pack>(d, typed, packed, w, threads);
        case 8: return emulate_words<std::uint64_t, Pack>(d, typed, packed, w, threads);
        case 4: return emulate_words<std::uint32_t, Pack>(d, typed, packed, w, threads);
        case 2: return emulate_words<std::uint16_t, Pack>(d, typed, packed, w, threads);
        default: return emulate_words<std::uint8_t, Pack>(d, typed, packed, w, threads);
    }
}

template <bool Pack>
inline std::int64_t emulate(const flat_form& f, std::uintptr_t typed, std::byte* packed, std::int64_t first,
                            std::int64_t max_bytes, int word, std::int64_t threads) {
    const window w = clamp_window(f.desc(), first, max_bytes);
    if (w.bytes == 0) return 0;
    const int widest = word_size(f.desc(), typed, reinterpret_cast<std::uintptr_t>(packed), w);
    if (word <= 0 || word > widest) word = widest;  // a narrower word is always valid
    emulate_dispatch<Pack>(f.desc(), typed, packed, w, word, threads);
    return w.bytes;
}

}  // namespace detail

/// What shunt::gpu::pack does, on host memory: packs stream bytes [first, first + max_bytes) of
/// `f` from the typed buffer `typed` into `out`, with words of `word` bytes (0: the widest the
/// alignment allows; a wider request than allowed falls back to the widest). Returns the bytes
/// written, as shunt::pack_host does.
inline std::int64_t pack_emulated(const flat_form& f, const void* typed, void* out, std::int64_t first = 0,
                                  std::int64_t max_bytes = std::numeric_limits<std::int64_t>::max(), int word = 0,
                                  std::int64_t threads = emulated_threads) {
    return detail::emulate<true>(f, reinterpret_cast<std::uintptr_t>(typed), static_cast<std::byte*>(out), first,
                                 max_bytes, word, threads);
}

/// The inverse of pack_emulated (what shunt::gpu::unpack does): returns the bytes read.
inline std::int64_t unpack_emulated(const flat_form& f, const void* in, void* typed, std::int64_t first = 0,
                                    std::int64_t max_bytes = std::numeric_limits<std::int64_t>::max(), int word = 0,
                                    std::int64_t threads = emulated_threads) {
    return detail::emulate<false>(f, reinterpret_cast<std::uintptr_t>(typed),
                                  const_cast<std::byte*>(static_cast<const std::byte*>(in)), first, max_bytes, word,
                                  threads);
}

namespace detail {

template <class Elem, bool Pack>
inline void emulate_staged_words(const staged_dims& f, std::uintptr_t typed, std::byte* packed, window w,
                                 std::int64_t threads, std::int64_t blocks, std::int64_t capacity) {
    const std::int64_t tile = threads * staged_bytes_per_thread;
    std::vector<word16> stage(static_cast<std::size_t>(capacity));
    for (std::int64_t b = 0; b < blocks; ++b)
        for (std::int64_t first = b * tile; first < w.bytes; first += blocks * tile) {
            const staged_tile s = plan_staged_tile<Pack>(f, typed, packed, w, first, tile, capacity);
            for (std::int64_t t = 0; t < threads; ++t) load_staged_tile(s, stage.data(), t, threads);
            for (std::int64_t t = 0; t < threads; ++t)  // after the block's barrier
                move_staged_tile<Elem, Pack>(f, s, stage.data(), typed, packed, w, t, threads);
        }
}

template <bool Pack>
inline std::int64_t emulate_staged(const flat_form& f, std::uintptr_t typed, std::byte* packed, std::int64_t first,
                                   std::int64_t max_bytes, int word, std::int64_t threads, std::int64_t blocks,
                                   std::int64_t capacity) {
    const window w = clamp_window(f.desc(), first, max_bytes);
    if (w.bytes == 0) return 0;
    const int widest = word_size(f.desc(), typed, reinterpret_cast<std::uintptr_t>(packed), w);
    if (word <= 0 || word > widest) word = widest;
    const staged_dims fd = make_staged_dims(make_fast_dims(f.desc()));
    if (f.contiguous() || word > staged_chunk || fd.fast.ndims < 1 || typed == 0)
        return emulate<Pack>(f, typed, packed, first, max_bytes, word, emulated_threads);
    if (capacity <= 0) capacity = staged_capacity(threads);
    switch (word) {
        case 4: emulate_staged_words<std::uint32_t, Pack>(fd, typed, packed, w, threads, blocks, capacity); break;
        case 2: emulate_staged_words<std::uint16_t, Pack>(fd, typed, packed, w, threads, blocks, capacity); break;
        default: emulate_staged_words<std::uint8_t, Pack>(fd, typed, packed, w, threads, blocks, capacity); break;
    }
    return w.bytes;
}

}  // namespace detail

/// What shunt::gpu::detail::pack_as with kernel_shape::staged does, on host memory: the staged
/// kernel's phases (shunt/gpu/staged.hpp), `blocks` launch blocks of `threads` threads staging at
/// most `capacity` words each (0: what the kernel stages), where the staged kernels apply (words
/// of `word` bytes, 4 or fewer; a fast path whose offsets grow; a typed base other than
/// MPI_BOTTOM's null), else what pack_emulated does.
/// Returns the bytes written.
inline std::int64_t pack_staged_emulated(const flat_form& f, const void* typed, void* out, std::int64_t first = 0,
                                         std::int64_t max_bytes = std::numeric_limits<std::int64_t>::max(),
                                         int word = 0, std::int64_t threads = emulated_threads, std::int64_t blocks = 3,
                                         std::int64_t capacity = 0) {
    return detail::emulate_staged<true>(f, reinterpret_cast<std::uintptr_t>(typed), static_cast<std::byte*>(out), first,
                                        max_bytes, word, threads, blocks, capacity);
}

/// The inverse of pack_staged_emulated: returns the bytes read.
inline std::int64_t unpack_staged_emulated(const flat_form& f, const void* in, void* typed, std::int64_t first = 0,
                                           std::int64_t max_bytes = std::numeric_limits<std::int64_t>::max(),
                                           int word = 0, std::int64_t threads = emulated_threads,
                                           std::int64_t blocks = 3, std::int64_t capacity = 0) {
    return detail::emulate_staged<false>(f, reinterpret_cast<std::uintptr_t>(typed),
                                         const_cast<std::byte*>(static_cast<const std::byte*>(in)), first, max_bytes,
                                         word, threads, blocks, capacity);
}

/// One input of a fused pack: `f`'s whole stream from `typed` into `out`.
struct fused_input {
    const flat_form* form = nullptr;
    const void* typed = nullptr;
    void* out = nullptr;
};

/// One item of a fused unpack: `f`'s whole stream from `in` into `typed`.
struct fused_output {
    const flat_form* form = nullptr;
    const void* in = nullptr;
    void* typed = nullptr;
};

namespace detail {

/// One emulated fused launch over `items` (blocks find their item by binary search, as on the
/// device).
inline void fused_emulated(std::vector<fused_item>& items, std::int64_t block_threads,
                           std::int64_t max_blocks_per_item) {
    const std::int64_t blocks = plan_fused(items, block_threads, max_blocks_per_item);
    std::vector<std::int64_t> begin(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) begin[i] = items[i].block_begin;
    const auto n = static_cast<std::int64_t>(items.size());
    for (std::int64_t b = 0; b < blocks; ++b) {
        const std::int64_t i = fused_item_of(begin.data(), n, b);
        const fused_item& it = items[static_cast<std::size_t>(i)];
        const std::int64_t end = i + 1 < n ? begin[static_cast<std::size_t>(i + 1)] : blocks;
        for (std::int64_t t = 0; t < block_threads; ++t) {
            switch (it.word) {
                case 16: fused_thread<word16>(it, b - it.block_begin, end - it.block_begin, block_threads, t); break;
                case 8:
                    fused_thread<std::uint64_t>(it, b - it.block_begin, end - it.block_begin, block_threads, t);
                    break;
                case 4:
                    fused_thread<std::uint32_t>(it, b - it.block_begin, end - it.block_begin, block_threads, t);
                    break;
                case 2:
                    fused_thread<std::uint16_t>(it, b - it.block_begin, end - it.block_begin, block_threads, t);
                    break;
                default:
                    fused_thread<std::uint8_t>(it, b - it.block_begin, end - it.block_begin, block_threads, t);
                    break;
            }
        }
    }
}

}  // namespace detail

/// What shunt::gpu::pack_fused does, on host memory: every input packed whole into its output in
/// one emulated launch.
inline void pack_fused_emulated(std::span<const fused_input> in, std::int64_t block_threads = 32,
                                std::int64_t max_blocks_per_item = 4) {
    std::vector<fused_item> items;
    for (const auto& x : in) items.push_back(whole_item(x.form->desc(), x.typed, x.out, true));
    detail::fused_emulated(items, block_threads, max_blocks_per_item);
}

/// What shunt::gpu::unpack_fused does, on host memory: every item unpacked whole into its typed
/// buffer in one emulated launch.
inline void unpack_fused_emulated(std::span<const fused_output> out, std::int64_t block_threads = 32,
                                  std::int64_t max_blocks_per_item = 4) {
    std::vector<fused_item> items;
    for (const auto& x : out) items.push_back(whole_item(x.form->desc(), x.typed, x.in, false));
    detail::fused_emulated(items, block_threads, max_blocks_per_item);
}

}  // namespace shunt::gpu
