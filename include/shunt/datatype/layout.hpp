// shunt/datatype/layout.hpp: the canonical form of a datatype (strided dimensions around a block
// list), its simplifier, and the MPI type constructors expressed on it. Free of MPI.
#pragma once

#include <shunt/errors.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace shunt {

/// A run of contiguous bytes at `offset` from the base of an element.
struct block {
    std::int64_t offset = 0;
    std::int64_t length = 0;
    bool operator==(const block&) const = default;
};

/// A repetition of everything inside it: `count` copies, `stride` bytes apart (any sign).
struct dim {
    std::int64_t count = 0;
    std::int64_t stride = 0;
    bool operator==(const dim&) const = default;
};

/// The pack program of one element of a datatype. The packed stream is: for each index tuple
/// (i_0, ..., i_{n-1}) over `dims` in row-major order (dims[0] outermost), for each block b in
/// `blocks` in order, the b.length bytes at base + sum_k i_k * dims[k].stride + b.offset.
/// This is exactly the MPI typemap order. After simplify() the form is canonical: equivalent
/// types (same bytes in the same order) give equal layouts.
struct layout {
    std::vector<dim> dims;
    std::vector<block> blocks;

    bool operator==(const layout&) const = default;

    /// Bytes packed by one pass over `blocks`.
    std::int64_t block_bytes() const {
        std::int64_t s = 0;
        for (const auto& b : blocks) s += b.length;
        return s;
    }
    /// Bytes packed per element (MPI_Type_size).
    std::int64_t size() const {
        std::int64_t s = block_bytes();
        for (const auto& d : dims) s *= d.count;
        return s;
    }
    /// True when the element is one contiguous run of bytes.
    bool is_contiguous() const { return dims.empty() && blocks.size() == 1; }
    /// True when `count` elements `extent` bytes apart are one contiguous run: one copy moves them.
    bool is_dense(std::int64_t extent, std::int64_t count) const {
        return is_contiguous() && (count == 1 || extent == blocks[0].length);
    }
    /// True when the element packs nothing.
    bool empty() const { return blocks.empty(); }
};

/// Cap on the number of blocks a layout may be flattened to; beyond it a constructor throws
/// shunt::unsupported and the type is left to the library.
inline constexpr std::size_t max_flat_blocks = std::size_t{1} << 23;

/// Layouts of at most this many flat blocks are canonicalised through their flat block list.
inline constexpr std::size_t canonical_flatten_limit = std::size_t{1} << 14;

inline layout simplify(layout l);
inline std::vector<block> flatten(const layout& l, std::size_t cap = max_flat_blocks);

namespace detail {

inline std::int64_t checked_mul(std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r)) throw unsupported("datatype offset overflows 64 bits");
    return r;
}
inline std::int64_t checked_add(std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    if (__builtin_add_overflow(a, b, &r)) throw unsupported("datatype offset overflows 64 bits");
    return r;
}

/// layout::size() for a layout from untrusted arguments: throws shunt::unsupported where the
/// bytes do not fit in 64 bits.
inline std::int64_t checked_size(const layout& l) {
    std::int64_t s = 0;
    for (const auto& b : l.blocks) s = checked_add(s, b.length);
    for (const auto& d : l.dims) s = checked_mul(s, d.count);
    return s;
}

/// Merges blocks that touch (b.offset + b.length == next.offset) and drops empty ones.
inline void merge_blocks(std::vector<block>& bs) {
    std::size_t out = 0;
    for (std::size_t i = 0; i < bs.size(); ++i) {
        if (bs[i].length == 0) continue;
        std::int64_t end = 0;
        if (out > 0 && !__builtin_add_overflow(bs[out - 1].offset, bs[out - 1].length, &end) && end == bs[i].offset)
            bs[out - 1].length = checked_add(bs[out - 1].length, bs[i].length);
        else
            bs[out++] = bs[i];
    }
    bs.resize(out);
}

/// Finds the smallest period m < n of a block list: blocks[i + m] == blocks[i] shifted by a
/// constant delta, for all i. Returns 0 when the list is aperiodic.
inline std::size_t find_period(const std::vector<block>& bs, std::int64_t& delta) {
    const std::size_t n = bs.size();
    for (std::size_t m = 1; m <= n / 2; ++m) {
        if (n % m != 0) continue;
        // A shift beyond 64 bits is no period (it would not fit a dimension's stride).
        std::int64_t d = 0, e = 0;
        bool ok = !__builtin_sub_overflow(bs[m].offset, bs[0].offset, &d);
        for (std::size_t i = m; i < n && ok; ++i)
            ok = bs[i].length == bs[i - m].length && !__builtin_sub_overflow(bs[i].offset, bs[i - m].offset, &e) &&
                 e == d;
        if (ok) {
            delta = d;
            return m;
        }
    }
    return 0;
}

}  // namespace detail

/// Brings a layout to canonical form: no empty blocks or count-1 dimensions, touching blocks
/// merged, periodic block lists turned into dimensions (smallest period first), an innermost
/// dimension over a single block whose stride equals its length folded into the block, and
/// nested dimensions that tile each other merged. An element that packs nothing becomes {}.
inline layout simplify(layout l) {
    detail::merge_blocks(l.blocks);
    if (l.blocks.empty()) return {};
    for (const auto& d : l.dims)
        if (d.count <= 0) return {};
    std::erase_if(l.dims, [](const dim& d) { return d.count == 1; });
    // Blocks may touch across iterations of a dimension (a {0,4},{8,4} pattern repeated every 12
    // bytes), which only the flat list shows. Small layouts are therefore rebuilt from their
    // flat block list, so the same bytes always give the same form; large ones keep their
    // structure (canonical except for such cross-iteration merges).
    if (!l.dims.empty()) {
        std::size_t total = l.blocks.size();
        for (const auto& d : l.dims)
            total = static_cast<std::size_t>(d.count) > canonical_flatten_limit
                        ? canonical_flatten_limit + 1
                        : std::min(total * static_cast<std::size_t>(d.count), canonical_flatten_limit + 1);
        if (total <= canonical_flatten_limit) l = layout{{}, flatten(l)};
    }
    for (bool changed = true; changed;) {
        changed = false;
        if (l.blocks.size() >= 2) {
            std::int64_t delta = 0;
            if (std::size_t m = detail::find_period(l.blocks, delta)) {
                l.dims.push_back({static_cast<std::int64_t>(l.blocks.size() / m), delta});
                l.blocks.resize(m);
                changed = true;
            }
        }
        if (l.blocks.size() == 1 && !l.dims.empty() && l.dims.back().stride == l.blocks[0].length) {
            l.blocks[0].length = detail::checked_mul(l.blocks[0].length, l.dims.back().count);
            l.dims.pop_back();
            changed = true;
        }
        for (std::size_t k = l.dims.size(); k-- > 1;) {
            const dim inner = l.dims[k];
            dim& outer = l.dims[k - 1];
            std::int64_t tile = 0;  // what the inner dimension spans; beyond 64 bits, no tiling
            if (!__builtin_mul_overflow(inner.count, inner.stride, &tile) && outer.stride == tile) {
                outer = {detail::checked_mul(outer.count, inner.count), inner.stride};
                l.dims.erase(l.dims.begin() + static_cast<std::ptrdiff_t>(k));
                changed = true;
            }
        }
    }
    return l;
}

/// All blocks of one element in pack order, touching ones merged. Throws shunt::unsupported
/// beyond `cap` blocks.
inline std::vector<block> flatten(const layout& l, std::size_t cap) {
    std::vector<block> out;
    if (l.blocks.empty()) return out;
    for (const auto& d : l.dims)
        if (d.count <= 0) return out;
    std::size_t total = l.blocks.size();
    for (const auto& d : l.dims) {
        if (d.count != 0 && total > cap / static_cast<std::size_t>(d.count))
            throw unsupported("datatype has too many blocks to flatten");
        total *= static_cast<std::size_t>(d.count);
    }
    if (total > cap) throw unsupported("datatype has too many blocks to flatten");
    out.reserve(total);
    std::vector<std::int64_t> idx(l.dims.size(), 0);
    for (;;) {
        std::int64_t base = 0;
        for (std::size_t k = 0; k < idx.size(); ++k)
            base = detail::checked_add(base, detail::checked_mul(idx[k], l.dims[k].stride));
        for (const auto& b : l.blocks) out.push_back({detail::checked_add(base, b.offset), b.length});
        std::size_t k = idx.size();
        while (k > 0 && ++idx[k - 1] == l.dims[k - 1].count) idx[--k] = 0;
        if (k == 0) break;
    }
    detail::merge_blocks(out);
    return out;
}

/// The layout moved by `offset` bytes.
inline layout shift(layout l, std::int64_t offset) {
    for (auto& b : l.blocks) b.offset = detail::checked_add(b.offset, offset);
    return l;
}

/// `count` copies of `child`, `stride` bytes apart (MPI_Type_create_hvector of blocklength 1).
inline layout repeat(const layout& child, std::int64_t count, std::int64_t stride) {
    if (count > 1) {  // the last copy's offset, and every block in it, must stay within 64 bits
        const std::int64_t span = detail::checked_mul(count - 1, stride);
        for (const auto& b : child.blocks) detail::checked_add(detail::checked_add(b.offset, span), b.length);
    }
    layout l;
    l.dims.reserve(child.dims.size() + 1);
    l.dims.push_back({count, stride});
    l.dims.insert(l.dims.end(), child.dims.begin(), child.dims.end());
    l.blocks = child.blocks;
    return simplify(std::move(l));
}

/// MPI_Type_contiguous(count, child) for a child of extent `extent`.
inline layout make_contiguous(std::int64_t count, const layout& child, std::int64_t extent) {
    return repeat(child, count, extent);
}

/// MPI_Type_create_hvector(count, blocklength, stride in bytes, child).
inline layout make_hvector(std::int64_t count, std::int64_t blocklength, std::int64_t stride, const layout& child,
                           std::int64_t extent) {
    return repeat(repeat(child, blocklength, extent), count, stride);
}

/// MPI_Type_create_struct: entry i is blocklengths[i] copies of children[i] (extent extents[i])
/// at byte displacement displs[i]. Also serves hindexed (all children equal).
inline layout make_struct(std::span<const std::int64_t> blocklengths, std::span<const std::int64_t> displs,
                          std::span<const layout* const> children, std::span<const std::int64_t> extents) {
    const std::size_t n = blocklengths.size();
    // One entry keeps its structure, so a huge strided child is never flattened.
    std::size_t live = 0, last = 0;
    for (std::size_t i = 0; i < n; ++i)
        if (blocklengths[i] > 0 && !children[i]->empty()) ++live, last = i;
    if (live == 0) return {};
    if (live == 1) return simplify(shift(repeat(*children[last], blocklengths[last], extents[last]), displs[last]));
    layout l;
    for (std::size_t i = 0; i < n; ++i) {
        if (blocklengths[i] <= 0 || children[i]->empty()) continue;
        const auto flat = flatten(*children[i]);
        if (flat.size() == 1 && flat[0].length == extents[i]) {  // a dense child: the copies are one run
            if (l.blocks.size() + 1 > max_flat_blocks) throw unsupported("datatype has too many blocks to flatten");
            l.blocks.push_back(
                {detail::checked_add(displs[i], flat[0].offset), detail::checked_mul(blocklengths[i], extents[i])});
            continue;
        }
        std::size_t more = 0;  // a product past 64 bits would wrap below the cap
        if (__builtin_mul_overflow(flat.size(), static_cast<std::size_t>(blocklengths[i]), &more) ||
            l.blocks.size() + more > max_flat_blocks)
            throw unsupported("datatype has too many blocks to flatten");
        for (std::int64_t j = 0; j < blocklengths[i]; ++j) {
            const std::int64_t base = detail::checked_add(displs[i], detail::checked_mul(j, extents[i]));
            for (const auto& b : flat) l.blocks.push_back({detail::checked_add(base, b.offset), b.length});
        }
    }
    return simplify(std::move(l));
}

/// MPI_Type_create_hindexed(count, blocklengths, byte displacements, child); indexed,
/// indexed_block and hindexed_block reduce to it.
inline layout make_hindexed(std::span<const std::int64_t> blocklengths, std::span<const std::int64_t> displs,
                            const layout& child, std::int64_t extent) {
    const std::size_t n = blocklengths.size();
    // Uniform entries (same length, constant step) are a strided dimension: no flattening.
    if (n >= 2) {
        // A step beyond 64 bits is no stride: such entries go through make_struct's checks.
        std::int64_t step = 0, d = 0;
        bool uniform = !__builtin_sub_overflow(displs[1], displs[0], &step);
        for (std::size_t i = 1; i < n && uniform; ++i)
            uniform = blocklengths[i] == blocklengths[0] && !__builtin_sub_overflow(displs[i], displs[i - 1], &d) &&
                      d == step;
        if (uniform && blocklengths[0] > 0)
            return simplify(
                shift(repeat(repeat(child, blocklengths[0], extent), static_cast<std::int64_t>(n), step), displs[0]));
    }
    std::vector<const layout*> children(n, &child);
    std::vector<std::int64_t> extents(n, extent);
    return make_struct(blocklengths, displs, children, extents);
}

/// MPI_Type_create_subarray: `order_c` is MPI_ORDER_C (dimension 0 outermost) or, when false,
/// MPI_ORDER_FORTRAN (dimension 0 innermost).
inline layout make_subarray(std::span<const std::int64_t> sizes, std::span<const std::int64_t> subsizes,
                            std::span<const std::int64_t> starts, bool order_c, const layout& child,
                            std::int64_t extent) {
    const std::size_t n = sizes.size();
    layout l = child;
    std::int64_t stride = extent, offset = 0;
    for (std::size_t j = 0; j < n; ++j) {  // innermost first
        const std::size_t k = order_c ? n - 1 - j : j;
        offset = detail::checked_add(offset, detail::checked_mul(starts[k], stride));
        l = repeat(l, subsizes[k], stride);
        stride = detail::checked_mul(stride, sizes[k]);
    }
    return simplify(shift(std::move(l), offset));
}

/// Distribution of one dimension of MPI_Type_create_darray.
enum class distribution { none, block, cyclic };

/// One dimension of a darray: global size, distribution, distribution argument (<= 0 for
/// MPI_DISTRIBUTE_DFLT_DARG) and number of processes.
struct darray_dim {
    std::int64_t gsize = 0;
    distribution distrib = distribution::none;
    std::int64_t darg = 0;
    std::int64_t psize = 1;
};

/// MPI_Type_create_darray for process `rank`: processes form a row-major grid over psizes, each
/// dimension holds the runs of global indices that `rank` owns, in increasing order.
inline layout make_darray(std::int64_t rank, std::span<const darray_dim> dims, bool order_c, const layout& child,
                          std::int64_t extent) {
    const std::size_t n = dims.size();
    std::vector<std::int64_t> coords(n);
    for (std::size_t k = n, r = static_cast<std::size_t>(rank); k-- > 0;) {
        coords[k] = static_cast<std::int64_t>(r % static_cast<std::size_t>(dims[k].psize));
        r /= static_cast<std::size_t>(dims[k].psize);
    }
    layout l = child;
    std::int64_t stride = extent;
    for (std::size_t j = 0; j < n; ++j) {  // innermost first
        const std::size_t k = order_c ? n - 1 - j : j;
        const darray_dim& d = dims[k];
        std::vector<std::int64_t> lens, displs;
        if (d.distrib == distribution::none) {
            lens.push_back(d.gsize), displs.push_back(0);
        } else if (d.distrib == distribution::block) {  // ceil(gsize / psize) by default
            const std::int64_t b = d.darg > 0 ? d.darg : d.gsize / d.psize + (d.gsize % d.psize != 0);
            const std::int64_t start = detail::checked_mul(coords[k], b);
            const std::int64_t len = std::min(b, d.gsize - start);
            if (len > 0) lens.push_back(len), displs.push_back(detail::checked_mul(start, stride));
        } else {
            const std::int64_t b = d.darg > 0 ? d.darg : 1;
            const std::int64_t step = detail::checked_mul(b, d.psize);
            for (std::int64_t start = detail::checked_mul(coords[k], b); start < d.gsize;) {
                lens.push_back(std::min(b, d.gsize - start));
                displs.push_back(detail::checked_mul(start, stride));
                if (lens.size() > max_flat_blocks) throw unsupported("darray has too many blocks");
                if (__builtin_add_overflow(start, step, &start)) break;  // past any gsize
            }
        }
        l = make_hindexed(lens, displs, l, stride);
        stride = detail::checked_mul(stride, d.gsize);
    }
    return l;
}

}  // namespace shunt
