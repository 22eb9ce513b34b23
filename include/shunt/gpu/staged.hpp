// shunt/gpu/staged.hpp: the staged kernels for small elements (1, 2 and 4 bytes) on the fast index
// path, whose typed side is dense enough to read whole. A launch block takes a tile of the packed
// stream at a time: its threads first copy one side of the tile into shared memory in aligned
// 16-byte words (pack: the typed span the tile covers, gaps included, so every 32-byte sector is
// read whole and once; unpack: the tile's packed bytes), then move the elements from there. The
// bodies of both phases are here, host and device, so the host emulation runs exactly what the
// kernels run. Reading a pack's gaps needs the typed bytes in one object, as MPI requires of every
// buffer but MPI_BOTTOM: with a null typed base (absolute addresses, maybe in several allocations)
// the staged kernels are not used. No CUDA header, no MPI, no allocation.
#pragma once

#include <shunt/gpu/index.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDA_ARCH__)
#define SHUNT_UNROLL _Pragma("unroll")
#else
#define SHUNT_UNROLL
#endif

namespace shunt::gpu {

/// Packed bytes a staged tile holds per thread of the launch block.
inline constexpr std::int64_t staged_bytes_per_thread = 16;
/// Packed bytes a thread writes at once when packing (one 4-byte store: a warp stores whole
/// 128-byte lines, and its shared-memory reads stay within a few banks' conflicts).
inline constexpr std::int64_t staged_chunk = 4;

/// Shared-memory words (16 bytes each) a launch block of `threads` threads stages: a typed span
/// up to five times the tile (dense 2-D rows take twice it, 3-D faces with a plane gap four
/// times), plus the two words that alignment may add.
SHUNT_HD constexpr std::int64_t staged_capacity(std::int64_t threads) {
    return threads * staged_bytes_per_thread * 5 / 16 + 2;
}

/// A fast-path descriptor the staged kernels serve, with each dimension's iteration count inside
/// the one outside it (count[0] unused: the outermost runs to the window's end), so that moving a
/// cursor on is additions. ndims of `fast` is below 1 where they do not serve it.
struct staged_dims {
    fast_dims fast;
    std::int64_t count[fast_max_dims]{};
    std::int64_t block = 0;  ///< the block's bytes (the innermost dimension's inner size)
};

/// The staged form of `f`: served when `f` is a fast-path descriptor (ndims >= 1) whose typed
/// offsets grow strictly with the stream position (every stride at least the span of one
/// iteration of the dimensions inside it), so a tile's typed bytes lie in [offset of its first
/// byte, offset of its last byte]. Host only.
inline staged_dims make_staged_dims(const fast_dims& f) {
    staged_dims s;
    s.fast = f;
    auto refuse = [&] {
        s.fast.ndims = -1;
        return s;
    };
    if (f.ndims < 1 || f.ndims > fast_max_dims) return refuse();
    constexpr std::int64_t limit = std::int64_t{1} << 62;
    std::int64_t span = f.inner[f.ndims - 1];  // the block: a contiguous run
    s.block = span;
    for (std::int64_t k = f.ndims - 1; k >= 0; --k) {
        if (span < 1 || f.stride[k] < span || f.stride[k] > limit) return refuse();
        if (k == 0) break;
        if (f.inner[k] < 1 || f.inner[k - 1] % f.inner[k] != 0) return refuse();
        s.count[k] = f.inner[k - 1] / f.inner[k];
        if (s.count[k] - 1 > (limit - span) / f.stride[k]) return refuse();
        span += (s.count[k] - 1) * f.stride[k];
    }
    return s;
}

/// True when the staged kernels serve `f` (make_staged_dims). Host only.
inline bool staged_usable(const fast_dims& f) { return make_staged_dims(f).fast.ndims >= 1; }

/// A stream position on the fast path kept as its typed offset, its byte within the block and
/// each dimension's index: fast_offset's answer, moved on by additions.
struct fast_cursor {
    std::int64_t off = 0;
    std::int64_t rem = 0;
    std::int64_t index[fast_max_dims]{};
};

/// The cursor at stream byte `p` (fast_offset, keeping the quotients).
SHUNT_HD inline fast_cursor cursor_at(const staged_dims& d, std::int64_t p) {
    fast_cursor c;
    c.off = fast_offset(d.fast, p, c.index, &c.rem);
    return c;
}

/// Moves `c` on by `by` bytes, where `by` divides the block length and c.rem: within the block,
/// or to the next block (an innermost step, carried outwards where a dimension wraps). Every array
/// index is known at compile time, so the cursor and the dimensions stay in registers.
SHUNT_HD inline void advance(const staged_dims& d, fast_cursor& c, std::int64_t by) {
    const fast_dims& f = d.fast;
    c.rem += by;
    c.off += by;
    if (c.rem < d.block) return;
    c.rem = 0;
    c.off -= d.block;
    bool carry = true;
    SHUNT_UNROLL
    for (int k = fast_max_dims - 1; k >= 0; --k) {
        if (k >= f.ndims || !carry) continue;
        c.off += f.stride[k];
        ++c.index[k];
        carry = k > 0 && c.index[k] >= d.count[k];
        if (carry) {
            c.off -= d.count[k] * f.stride[k];
            c.index[k] = 0;
        }
    }
}

/// One tile, the same in every thread of the launch block: stream bytes [w.first + first,
/// w.first + first + bytes), and the 16-byte words staged for it: `words` words from the aligned
/// address `base`, of which only bytes in [lo, hi) are read (the edges go byte by byte, so
/// nothing outside the side's bytes is touched). `words` 0: the typed span does not fit the
/// stage, and the tile moves directly between global buffers.
struct staged_tile {
    std::int64_t first = 0;
    std::int64_t bytes = 0;
    std::uintptr_t base = 0, lo = 0, hi = 0;
    std::int64_t words = 0;
};

/// The tile at window offset `first` (tiles of `tile` bytes), staging at most `capacity` words:
/// the typed span of its bytes when packing, its packed bytes when unpacking.
template <bool Pack>
SHUNT_HD inline staged_tile plan_staged_tile(const staged_dims& d, std::uintptr_t typed, const std::byte* packed,
                                             window w, std::int64_t first, std::int64_t tile, std::int64_t capacity) {
    staged_tile s;
    s.first = first;
    s.bytes = w.bytes - first < tile ? w.bytes - first : tile;
    if constexpr (Pack) {
        const std::int64_t p = w.first + first;
        s.lo = typed + static_cast<std::uintptr_t>(fast_offset(d.fast, p));
        s.hi = typed + static_cast<std::uintptr_t>(fast_offset(d.fast, p + s.bytes - 1)) + 1;
    } else {
        s.lo = reinterpret_cast<std::uintptr_t>(packed) + static_cast<std::uintptr_t>(first);
        s.hi = s.lo + static_cast<std::uintptr_t>(s.bytes);
    }
    s.base = s.lo & ~std::uintptr_t{15};
    const std::uintptr_t words = (s.hi - s.base + 15) / 16;
    s.words = words <= static_cast<std::uintptr_t>(capacity) ? static_cast<std::int64_t>(words) : 0;
    return s;
}

/// Thread `t` of `threads` copies its staged words of `s` into `stage`: whole words with
/// 16-byte loads, four in flight, and the edge words' bytes in [lo, hi) one by one.
SHUNT_HD inline void load_staged_tile(const staged_tile& s, word16* stage, std::int64_t t, std::int64_t threads) {
    constexpr int in_flight = 4;
    for (std::int64_t i0 = t; i0 < s.words; i0 += in_flight * threads) {
        word16 v[in_flight] = {};
        SHUNT_UNROLL
        for (int u = 0; u < in_flight; ++u) {
            const std::int64_t i = i0 + u * threads;
            const std::uintptr_t a = s.base + static_cast<std::uintptr_t>(16 * i);
            if (i < s.words && a >= s.lo && a + 16 <= s.hi) copy_word<word16>(&v[u], reinterpret_cast<const void*>(a));
        }
        SHUNT_UNROLL
        for (int u = 0; u < in_flight; ++u) {
            const std::int64_t i = i0 + u * threads;
            const std::uintptr_t a = s.base + static_cast<std::uintptr_t>(16 * i);
            if (i >= s.words) {
            } else if (a >= s.lo && a + 16 <= s.hi) {
                stage[i] = v[u];
            } else {
                auto* to = reinterpret_cast<std::byte*>(&stage[i]);
                for (std::uintptr_t b = 0; b < 16; ++b)
                    if (a + b >= s.lo && a + b < s.hi) to[b] = *reinterpret_cast<const std::byte*>(a + b);
            }
        }
    }
}

namespace detail {

/// Where the bytes of typed or packed address `a` are read from while moving tile `s`: its place
/// in the stage (Staged), or `a` itself when the tile goes directly. A template, so that the
/// kernel's loads from the stage are shared-memory loads, not generic ones.
template <bool Staged>
SHUNT_HD inline const std::byte* staged_source(const staged_tile& s, const word16* stage, std::uintptr_t a) {
    if constexpr (Staged)
        return reinterpret_cast<const std::byte*>(stage) + (a - s.base);
    else
        return reinterpret_cast<const std::byte*>(a);
}

template <class Elem, bool Pack, bool Staged>
SHUNT_HD inline void move_tile(const staged_dims& d, const staged_tile& s, const word16* stage, std::uintptr_t typed,
                               std::byte* packed, window w, std::int64_t t, std::int64_t threads) {
    constexpr std::int64_t size = sizeof(Elem);
    static_assert(size <= staged_chunk && staged_chunk % size == 0, "staged elements are 1, 2 or 4 bytes");
    const std::int64_t p0 = w.first + s.first;
    std::byte* const out = packed + s.first;  // stream byte p0
    if constexpr (Pack) {
        const std::int64_t chunks = (s.bytes + staged_chunk - 1) / staged_chunk;
        for (std::int64_t c = t; c < chunks; c += threads) {
            const std::int64_t q = c * staged_chunk;
            const std::int64_t n = s.bytes - q < staged_chunk ? s.bytes - q : staged_chunk;
            fast_cursor at = cursor_at(d, p0 + q);
            if (n == staged_chunk && (reinterpret_cast<std::uintptr_t>(out + q) & (staged_chunk - 1)) == 0) {
                std::uint32_t v = 0;  // little-endian, as hosts and GPUs are: element e at bits 8e
                SHUNT_UNROLL
                for (std::int64_t e = 0; e < staged_chunk; e += size) {
                    if (e > 0) advance(d, at, size);
                    Elem x;
                    copy_word<Elem>(&x, staged_source<Staged>(s, stage, typed + static_cast<std::uintptr_t>(at.off)));
                    v |= static_cast<std::uint32_t>(x) << (8 * e);
                }
                copy_word<std::uint32_t>(out + q, &v);
            } else {
                for (std::int64_t e = 0; e < n; e += size) {
                    if (e > 0) advance(d, at, size);
                    copy_word<Elem>(out + q + e,
                                    staged_source<Staged>(s, stage, typed + static_cast<std::uintptr_t>(at.off)));
                }
            }
        }
    } else {
        for (std::int64_t e = t * size; e < s.bytes; e += threads * size) {
            const std::uintptr_t a = typed + static_cast<std::uintptr_t>(fast_offset(d.fast, p0 + e));
            copy_word<Elem>(reinterpret_cast<void*>(a),
                            staged_source<Staged>(s, stage, reinterpret_cast<std::uintptr_t>(out + e)));
        }
    }
}

}  // namespace detail

/// Thread `t` of `threads` moves its part of tile `s`, elements of Elem bytes (1, 2 or 4, the
/// window's word), after every thread has loaded the stage. Pack: chunks of staged_chunk packed
/// bytes, chunk c to thread c mod threads, each gathered from the stage (one cursor a chunk) and
/// stored at once where the output allows a 4-byte store. Unpack: element k to thread k mod
/// threads, read from the stage, stored at its typed offset (a warp stores consecutive elements).
/// A tile that was not staged (s.words 0) moves the same way between the global buffers.
template <class Elem, bool Pack>
SHUNT_HD inline void move_staged_tile(const staged_dims& d, const staged_tile& s, const word16* stage,
                                      std::uintptr_t typed, std::byte* packed, window w, std::int64_t t,
                                      std::int64_t threads) {
    if (s.words)
        detail::move_tile<Elem, Pack, true>(d, s, stage, typed, packed, w, t, threads);
    else
        detail::move_tile<Elem, Pack, false>(d, s, stage, typed, packed, w, t, threads);
}

}  // namespace shunt::gpu
