// tests/fuzz/fuzz_datatype.cpp: fuzz target of the datatype decoder and canonical form: random
// constructor trees go to shunt::decode through a fake type source (no MPI call), and a plain
// recursive reference checks the result: size, true bounds and bytes of the typemap, the
// canonical form, and pack_host / unpack_host against a naive packer.
#include "fuzz_input.hpp"

#include <shunt/datatype/decode.hpp>
#include <shunt/pack/host.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace {

using shunt::block;
using shunt::layout;
using i128 = __int128;

/// What a failed check prints besides its condition: the tree and the forms (set per input).
void (*dump_context)() = nullptr;

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "fuzz_datatype: check failed: %s\n", what);
    if (dump_context) dump_context();
    std::abort();
}
#define SHUNT_FUZZ_CHECK(cond)    \
    do {                          \
        if (!(cond)) fail(#cond); \
    } while (0)

/// Typemap entries the reference lists per element; beyond it only sizes and bounds are checked.
constexpr std::size_t map_cap = std::size_t{1} << 14;
/// Bytes of typed buffer the pack check allocates at most.
constexpr i128 buffer_cap = i128{1} << 20;
/// Magnitude beyond which the reference stops trusting its 128-bit arithmetic.
constexpr i128 huge = i128{1} << 120;

/// One node as the fake source reports it (what MPI_Type_get_envelope / _contents / the bounds
/// calls would), and the reference's own view of its typemap.
struct fake_node {
    shunt::type_envelope env;
    MPI_Datatype named = MPI_DATATYPE_NULL;
    std::vector<int> ints;
    std::vector<MPI_Aint> addresses;
    std::vector<MPI_Count> counts;
    std::vector<int> kids;
    std::int64_t size = 0, lb = 0, extent = 0, true_lb = 0, true_extent = 0;

    // The reference: computed from the arguments above, never by shunt's code.
    bool ok = true;  ///< well formed and every bound fits in 64 bits
    i128 rsize = 0, rlb = 0, rub = 0, rtlb = 0, rtub = 0;
    bool bytes = false;  ///< the typemap has a byte
    bool map_ok = true;  ///< `map` is the whole typemap
    std::vector<block> map;  ///< (offset, length) entries in typemap order
};

/// The fake type source: handles are indices into `nodes`; counts every reference it hands out.
struct fake_source {
    using handle = int;
    std::vector<fake_node> nodes;
    std::vector<int> refs;  ///< derived references handed out and not yet released, per node

    static handle null_handle() noexcept { return -1; }
    void bounds(handle t, shunt::type_node& n) const {
        const fake_node& f = nodes.at(static_cast<std::size_t>(t));
        n.size = f.size, n.lb = f.lb, n.extent = f.extent, n.true_lb = f.true_lb, n.true_extent = f.true_extent;
    }
    int envelope(handle t, shunt::type_envelope& e) const noexcept {
        e = nodes[static_cast<std::size_t>(t)].env;
        return MPI_SUCCESS;
    }
    void contents(handle t, const shunt::type_envelope& e, shunt::type_node& n, handle* types) {
        const fake_node& f = nodes.at(static_cast<std::size_t>(t));
        // The decoder sized the arrays from the envelope; a lying envelope gets zeros or a cut list.
        SHUNT_FUZZ_CHECK(n.ints.size() == static_cast<std::size_t>(e.ints));
        SHUNT_FUZZ_CHECK(n.addresses.size() == static_cast<std::size_t>(e.addresses));
        SHUNT_FUZZ_CHECK(n.large_counts.size() == static_cast<std::size_t>(e.large_counts));
        for (std::size_t k = 0; k < n.ints.size() && k < f.ints.size(); ++k) n.ints[k] = f.ints[k];
        for (std::size_t k = 0; k < n.addresses.size() && k < f.addresses.size(); ++k) n.addresses[k] = f.addresses[k];
        for (std::size_t k = 0; k < n.large_counts.size() && k < f.counts.size(); ++k) n.large_counts[k] = f.counts[k];
        for (std::int64_t k = 0; k < e.types; ++k) {
            const int kid = static_cast<std::size_t>(k) < f.kids.size() ? f.kids[static_cast<std::size_t>(k)] : 0;
            types[k] = kid;
            if (!shunt::detail::is_predefined_combiner(nodes[static_cast<std::size_t>(kid)].env.combiner))
                ++refs[static_cast<std::size_t>(kid)];
        }
    }
    void release(handle t) noexcept {
        if (--refs[static_cast<std::size_t>(t)] < 0) fail("a handle was released more often than handed out");
    }
    MPI_Datatype named(handle t) const noexcept { return nodes[static_cast<std::size_t>(t)].named; }
};

struct predefined {
    MPI_Datatype handle;
    std::int64_t size, extent;
    std::vector<block> map;
};

const std::vector<predefined>& predefined_types() {
    static const std::vector<predefined> table = {
        {MPI_BYTE, 1, 1, {{0, 1}}},
        {MPI_CHAR, 1, 1, {{0, 1}}},
        {MPI_SHORT, 2, 2, {{0, 2}}},
        {MPI_INT, 4, 4, {{0, 4}}},
        {MPI_FLOAT, 4, 4, {{0, 4}}},
        {MPI_DOUBLE, 8, 8, {{0, 8}}},
        {MPI_SHORT_INT, 6, 8, {{0, 2}, {4, 4}}},
        {MPI_FLOAT_INT, 8, 8, {{0, 4}, {4, 4}}},
        {MPI_DOUBLE_INT, 12, 16, {{0, 8}, {8, 4}}},
        {MPI_LONG_INT, 12, 16, {{0, 8}, {8, 4}}},
        {MPI_2INT, 8, 8, {{0, 4}, {4, 4}}},
        {MPI_LONG_DOUBLE_INT, 20, 32, {{0, 16}, {16, 4}}},
    };
    return table;
}

/// Keeps i128 arithmetic honest: a value this large makes the node unchecked.
i128 tame(i128 v, bool& ok) {
    if (v > huge || v < -huge) {
        ok = false;
        return 0;
    }
    return v;
}

/// a * b, or 0 with `ok` cleared where that would leave the tame range.
i128 mul(i128 a, i128 b, bool& ok) {
    if (a == 0 || b == 0) return 0;
    const i128 ma = a < 0 ? -a : a, mb = b < 0 ? -b : b;
    if (ma > huge / mb) {
        ok = false;
        return 0;
    }
    return a * b;
}

bool fits64(i128 v) { return v >= INT64_MIN && v <= INT64_MAX; }

/// A repetition of a child: count copies `stride` bytes apart per dimension (outermost first),
/// the whole at `disp`.
struct grid {
    int child = 0;
    i128 disp = 0;
    std::vector<std::pair<i128, i128>> dims;  // (count, stride)
};

class tree_builder {
public:
    tree_builder(shunt_fuzz::input& in, fake_source& src) : in_(in), src_(src) {
        leaf(0);  // node 0: MPI_BYTE, what a lying envelope's extra children are
    }

    int build(int depth) {
        if (src_.nodes.size() >= 64 || depth >= max_depth_) return leaf(static_cast<int>(in_.range(0, 13)));
        const int kind = static_cast<int>(in_.range(0, 15));
        switch (kind) {
            case 0: return leaf(static_cast<int>(in_.range(0, 13)));
            case 1: return dup(build(depth + 1));
            case 2: return resized(build(depth + 1));
            case 3: return contiguous(build(depth + 1));
            case 4:
            case 5: return vector(build(depth + 1), kind == 5);
            case 6:
            case 7: return indexed(build(depth + 1), kind == 7);
            case 8:
            case 9: return indexed_block(build(depth + 1), kind == 9);
            case 10: return structure(depth);
            case 11: return subarray(build(depth + 1));
            case 12: return darray(build(depth + 1));
            case 13: {  // a chain of dups around the decoder's depth limit
                int t = build(depth + 1);
                const int n = static_cast<int>(in_.range(200, 300));
                for (int i = 0; i < n; ++i) t = dup(t);
                return t;
            }
            default: return leaf(static_cast<int>(in_.range(0, 13)));
        }
    }

    /// Damages some nodes' contents (the decoder must then refuse or survive, never crash).
    void damage() {
        const int n = static_cast<int>(in_.range(1, 4));
        for (int i = 0; i < n; ++i) {
            fake_node& f =
                src_.nodes[static_cast<std::size_t>(in_.range(0, static_cast<std::int64_t>(src_.nodes.size()) - 1))];
            switch (in_.range(0, 7)) {
                case 0: f.env.ints = in_.mostly(-2, 8); break;
                case 1: f.env.addresses = in_.mostly(-2, 8); break;
                case 2: f.env.large_counts = in_.mostly(-2, 8); break;
                case 3: f.env.types = in_.mostly(-2, 4, 64); break;
                case 4: f.env.combiner = static_cast<int>(in_.range(0, 40)); break;
                case 5:
                    if (!f.ints.empty())
                        f.ints[static_cast<std::size_t>(in_.range(0, f.ints.size() - 1))] =
                            static_cast<int>(in_.mostly(-3, 3));
                    break;
                case 6:
                    if (!f.counts.empty())
                        f.counts[static_cast<std::size_t>(in_.range(0, f.counts.size() - 1))] = in_.mostly(-3, 3);
                    break;
                default:
                    if (!f.addresses.empty())
                        f.addresses[static_cast<std::size_t>(in_.range(0, f.addresses.size() - 1))] =
                            in_.mostly(-64, 64);
                    break;
            }
        }
    }

    int max_depth_ = 5;

private:
    int add(fake_node f) {
        src_.nodes.push_back(std::move(f));
        src_.refs.push_back(0);
        return static_cast<int>(src_.nodes.size()) - 1;
    }
    fake_node& node(int t) { return src_.nodes[static_cast<std::size_t>(t)]; }

    /// Publishes the reference's bounds as the fake's MPI bounds.
    int finish(fake_node f) {
        // Bounds MPI can report, and bytes whose ends are 64-bit offsets too.
        if (f.ok)
            f.ok = fits64(f.rsize) && fits64(f.rlb) && fits64(f.rub - f.rlb) && fits64(f.rtlb) && fits64(f.rtub) &&
                   fits64(f.rtub - f.rtlb);
        if (f.ok) {
            f.size = static_cast<std::int64_t>(f.rsize);
            f.lb = static_cast<std::int64_t>(f.rlb);
            f.extent = static_cast<std::int64_t>(f.rub - f.rlb);
            f.true_lb = f.bytes ? static_cast<std::int64_t>(f.rtlb) : 0;
            f.true_extent = f.bytes ? static_cast<std::int64_t>(f.rtub - f.rtlb) : 0;
        }
        return add(std::move(f));
    }

    int leaf(int which) {
        fake_node f;
        f.env.combiner = MPI_COMBINER_NAMED;
        const auto& table = predefined_types();
        if (which < static_cast<int>(table.size())) {
            const predefined& p = table[static_cast<std::size_t>(which)];
            f.named = p.handle;
            f.rsize = p.size, f.rlb = 0, f.rub = p.extent;
            f.rtlb = p.map.front().offset, f.rtub = p.map.back().offset + p.map.back().length;
            f.bytes = true;
            f.map = p.map;
            return finish(std::move(f));
        }
        // A predefined type shunt must refuse: a bound marker (no bytes) or one with holes.
        f.named = MPI_INT;
        f.size = which == 12 ? 0 : 4;
        f.extent = which == 12 ? 0 : 8;
        f.true_extent = f.size;
        f.ok = false;
        return add(std::move(f));
    }

    /// The reference of a node made of grids of children: sizes, bounds and typemap.
    void place(fake_node& f, const std::vector<grid>& grids) {
        bool ok = f.ok;
        bool any = false;
        std::size_t entries = 0;
        f.map_ok = true;
        for (const grid& g : grids) {
            const fake_node& c = node(g.child);
            ok = ok && c.ok;
            f.map_ok = f.map_ok && c.map_ok;
            i128 copies = 1, lo = g.disp, hi = g.disp;
            for (auto [count, stride] : g.dims) {
                if (count < 0) ok = false;
                copies = mul(copies, count < 0 ? 0 : count, ok);
                const i128 span = mul(count > 0 ? count - 1 : 0, stride, ok);
                lo = tame(lo + std::min<i128>(0, span), ok);
                hi = tame(hi + std::max<i128>(0, span), ok);
            }
            if (copies == 0) continue;
            f.rsize = tame(f.rsize + mul(copies, c.rsize, ok), ok);
            const i128 clb = tame(lo + c.rlb, ok), cub = tame(hi + c.rub, ok);
            f.rlb = any ? std::min(f.rlb, clb) : clb;
            f.rub = any ? std::max(f.rub, cub) : cub;
            any = true;
            if (c.bytes) {
                const i128 tlb = tame(lo + c.rtlb, ok), tub = tame(hi + c.rtub, ok);
                f.rtlb = f.bytes ? std::min(f.rtlb, tlb) : tlb;
                f.rtub = f.bytes ? std::max(f.rtub, tub) : tub;
                f.bytes = true;
            }
            if (!f.map_ok || !ok || c.map.empty()) continue;
            const i128 more = mul(copies, static_cast<i128>(c.map.size()), ok);
            if (more > static_cast<i128>(map_cap - entries)) {
                f.map_ok = false;
                continue;
            }
            entries += static_cast<std::size_t>(more);
            // Every copy of the child in typemap order: the last dimension fastest.
            std::vector<i128> idx(g.dims.size(), 0);
            for (;;) {
                i128 base = g.disp;
                for (std::size_t k = 0; k < idx.size(); ++k) base += idx[k] * g.dims[k].second;
                for (const block& b : c.map) f.map.push_back({static_cast<std::int64_t>(base + b.offset), b.length});
                std::size_t k = idx.size();
                while (k > 0 && ++idx[k - 1] == g.dims[k - 1].first) idx[--k] = 0;
                if (k == 0) break;
            }
        }
        if (!any) f.rlb = f.rub = 0;
        f.ok = ok;
        if (!f.map_ok || !ok) f.map.clear();
    }

    /// A count-like argument: mostly small, now and then anything (stored as the form needs).
    std::int64_t small(std::int64_t lo, std::int64_t hi) { return in_.mostly(lo, hi, 24); }

    int dup(int c) {
        fake_node f;
        f.env = {0, 0, 0, 1, MPI_COMBINER_DUP};
        f.kids = {c};
        place(f, {{c, 0, {}}});
        return finish(std::move(f));
    }

    int resized(int c) {
        fake_node f;
        const bool large = in_.flag();
        const std::int64_t lb = small(-64, 64), extent = small(0, 128);
        f.env = {0, large ? 0 : 2, large ? 2 : 0, 1, MPI_COMBINER_RESIZED};
        if (large)
            f.counts = {lb, extent};
        else
            f.addresses = {lb, extent};
        f.kids = {c};
        place(f, {{c, 0, {}}});
        f.rlb = large ? f.counts[0] : f.addresses[0];
        f.rub = f.rlb + (large ? f.counts[1] : f.addresses[1]);
        return finish(std::move(f));
    }

    /// Stores `v` as an int (the classic constructors) or an MPI_Count (the large-count ones),
    /// returning what was stored.
    std::int64_t store(fake_node& f, bool large, std::int64_t v) {
        if (large) {
            f.counts.push_back(v);
            return v;
        }
        f.ints.push_back(static_cast<int>(v));
        return f.ints.back();
    }

    int contiguous(int c) {
        fake_node f;
        const bool large = in_.flag();
        const std::int64_t count = store(f, large, small(0, 6));
        f.env = {large ? 0 : 1, 0, large ? 1 : 0, 1, MPI_COMBINER_CONTIGUOUS};
        f.kids = {c};
        const i128 e = node(c).rub - node(c).rlb;
        place(f, {{c, 0, {{count, e}}}});
        return finish(std::move(f));
    }

    int vector(int c, bool bytes) {
        fake_node f;
        const bool large = in_.flag();
        const std::int64_t count = store(f, large, small(0, 5));
        const std::int64_t blocklength = store(f, large, small(0, 4));
        std::int64_t stride = 0;
        if (bytes && !large) {
            f.addresses.push_back(small(-128, 128));
            stride = f.addresses.back();
        } else {
            stride = store(f, large, small(-6, 6));
        }
        f.env = {large ? 0 : (bytes ? 2 : 3), bytes && !large ? 1 : 0, large ? 3 : 0, 1,
                 bytes ? MPI_COMBINER_HVECTOR : MPI_COMBINER_VECTOR};
        f.kids = {c};
        const i128 e = node(c).rub - node(c).rlb;
        bool ok = true;
        place(f, {{c, 0, {{count, bytes ? i128{stride} : mul(stride, e, ok)}, {blocklength, e}}}});
        f.ok = f.ok && ok;
        return finish(std::move(f));
    }

    int indexed(int c, bool bytes) {
        fake_node f;
        const bool large = in_.flag();
        const std::int64_t count = in_.range(0, 6);
        store(f, large, count);
        std::vector<std::int64_t> lengths, displs;
        for (std::int64_t j = 0; j < count; ++j) lengths.push_back(store(f, large, small(0, 4)));
        for (std::int64_t j = 0; j < count; ++j) {
            if (bytes && !large) {
                f.addresses.push_back(small(-128, 128));
                displs.push_back(f.addresses.back());
            } else {
                displs.push_back(store(f, large, small(-8, 8)));
            }
        }
        const std::int64_t nd = bytes && !large ? count : 0;
        f.env = {static_cast<std::int64_t>(f.ints.size()), nd, static_cast<std::int64_t>(f.counts.size()), 1,
                 bytes ? MPI_COMBINER_HINDEXED : MPI_COMBINER_INDEXED};
        f.kids = {c};
        const i128 e = node(c).rub - node(c).rlb;
        std::vector<grid> grids;
        for (std::size_t j = 0; j < lengths.size(); ++j)
            grids.push_back({c, bytes ? i128{displs[j]} : mul(displs[j], e, f.ok), {{lengths[j], e}}});
        place(f, grids);
        return finish(std::move(f));
    }

    int indexed_block(int c, bool bytes) {
        fake_node f;
        const bool large = in_.flag();
        const std::int64_t count = in_.range(0, 6);
        store(f, large, count);
        const std::int64_t blocklength = store(f, large, small(0, 4));
        std::vector<std::int64_t> displs;
        for (std::int64_t j = 0; j < count; ++j) {
            if (bytes && !large) {
                f.addresses.push_back(small(-128, 128));
                displs.push_back(f.addresses.back());
            } else {
                displs.push_back(store(f, large, small(-8, 8)));
            }
        }
        f.env = {static_cast<std::int64_t>(f.ints.size()), static_cast<std::int64_t>(f.addresses.size()),
                 static_cast<std::int64_t>(f.counts.size()), 1,
                 bytes ? MPI_COMBINER_HINDEXED_BLOCK : MPI_COMBINER_INDEXED_BLOCK};
        f.kids = {c};
        const i128 e = node(c).rub - node(c).rlb;
        std::vector<grid> grids;
        for (auto d : displs) grids.push_back({c, bytes ? i128{d} : mul(d, e, f.ok), {{blocklength, e}}});
        place(f, grids);
        return finish(std::move(f));
    }

    int structure(int depth) {
        fake_node f;
        const bool large = in_.flag();
        const std::int64_t count = in_.range(0, 4);
        store(f, large, count);
        std::vector<std::int64_t> lengths, displs;
        for (std::int64_t j = 0; j < count; ++j) lengths.push_back(store(f, large, small(0, 3)));
        for (std::int64_t j = 0; j < count; ++j) {
            if (large) {
                displs.push_back(store(f, true, small(-128, 128)));
            } else {
                f.addresses.push_back(small(-128, 128));
                displs.push_back(f.addresses.back());
            }
        }
        for (std::int64_t j = 0; j < count; ++j) f.kids.push_back(build(depth + 1));
        f.env = {static_cast<std::int64_t>(f.ints.size()), static_cast<std::int64_t>(f.addresses.size()),
                 static_cast<std::int64_t>(f.counts.size()), count, MPI_COMBINER_STRUCT};
        std::vector<grid> grids;
        for (std::size_t j = 0; j < lengths.size(); ++j) {
            const fake_node& c = node(f.kids[j]);
            grids.push_back({f.kids[j], displs[j], {{lengths[j], c.rub - c.rlb}}});
        }
        place(f, grids);
        return finish(std::move(f));
    }

    int subarray(int c) {
        fake_node f;
        const bool large = in_.flag();
        const std::int64_t ndims = in_.range(1, 3);
        const bool order_c = in_.flag();
        std::vector<std::int64_t> sizes, subsizes, starts;
        for (std::int64_t k = 0; k < ndims; ++k) {
            sizes.push_back(small(1, 5));
            subsizes.push_back(sizes.back() > 0 && sizes.back() < 64 ? in_.range(0, sizes.back()) : small(0, 5));
            starts.push_back(sizes.back() > 0 && sizes.back() < 64 ? in_.range(0, sizes.back() - subsizes.back())
                                                                   : small(0, 5));
        }
        f.ints.push_back(static_cast<int>(ndims));
        if (large) f.ints.push_back(order_c ? MPI_ORDER_C : MPI_ORDER_FORTRAN);
        for (auto* v : {&sizes, &subsizes, &starts})
            for (auto& x : *v) x = store(f, large, x);
        if (!large) f.ints.push_back(order_c ? MPI_ORDER_C : MPI_ORDER_FORTRAN);
        f.env = {static_cast<std::int64_t>(f.ints.size()), 0, static_cast<std::int64_t>(f.counts.size()), 1,
                 MPI_COMBINER_SUBARRAY};
        f.kids = {c};
        const i128 e = node(c).rub - node(c).rlb;
        // Dimensions in typemap order (outermost first), each stride the product of the inner sizes.
        grid g{c, 0, {}};
        std::vector<i128> stride(static_cast<std::size_t>(ndims));
        i128 s = e, whole = 1;
        bool ok = true;
        for (std::int64_t j = 0; j < ndims; ++j) {
            const auto k = static_cast<std::size_t>(order_c ? ndims - 1 - j : j);
            stride[k] = s;
            s = mul(s, sizes[k], ok);
            whole = mul(whole, sizes[k], ok);
        }
        for (std::int64_t j = 0; j < ndims; ++j) {
            const auto k = static_cast<std::size_t>(order_c ? j : ndims - 1 - j);
            if (sizes[k] <= 0 || subsizes[k] < 0 || starts[k] < 0 || i128{starts[k]} + subsizes[k] > sizes[k])
                ok = false;
            g.disp = tame(g.disp + mul(starts[k], stride[k], ok), ok);
            g.dims.push_back({subsizes[k], stride[k]});
        }
        f.ok = ok;
        place(f, {g});
        f.rlb = 0, f.rub = mul(whole, e, f.ok);
        return finish(std::move(f));
    }

    int darray(int c) {
        fake_node f;
        const bool large = in_.flag();
        const std::int64_t ndims = in_.range(1, 3);
        const bool order_c = in_.flag();
        std::vector<std::int64_t> gsizes, distribs, dargs, psizes;
        std::int64_t size = 1;
        for (std::int64_t k = 0; k < ndims; ++k) {
            gsizes.push_back(small(0, 7));
            const std::int64_t d = in_.range(0, 2);
            distribs.push_back(d == 0 ? MPI_DISTRIBUTE_NONE : d == 1 ? MPI_DISTRIBUTE_BLOCK : MPI_DISTRIBUTE_CYCLIC);
            psizes.push_back(d == 0 ? 1 : in_.range(1, 3));
            const bool dflt = in_.flag();
            dargs.push_back(dflt || d == 0 ? MPI_DISTRIBUTE_DFLT_DARG : small(1, 3));
            size *= psizes.back();
        }
        const std::int64_t rank = in_.range(0, size - 1);
        f.ints = {static_cast<int>(size), static_cast<int>(rank), static_cast<int>(ndims)};
        for (auto& g : gsizes) g = store(f, large, g);
        for (auto* v : {&distribs, &dargs, &psizes})
            for (auto& x : *v) x = static_cast<int>(x), f.ints.push_back(static_cast<int>(x));
        f.ints.push_back(order_c ? MPI_ORDER_C : MPI_ORDER_FORTRAN);
        f.env = {static_cast<std::int64_t>(f.ints.size()), 0, static_cast<std::int64_t>(f.counts.size()), 1,
                 MPI_COMBINER_DARRAY};
        f.kids = {c};
        // The indices this rank owns per dimension, straight from the standard's definition.
        bool ok = true;
        std::vector<std::int64_t> coords(static_cast<std::size_t>(ndims));
        for (std::int64_t k = ndims, r = rank; k-- > 0;)
            coords[static_cast<std::size_t>(k)] = r % psizes[static_cast<std::size_t>(k)],
            r /= psizes[static_cast<std::size_t>(k)];
        std::vector<std::vector<std::int64_t>> owned(static_cast<std::size_t>(ndims));
        for (std::size_t k = 0; k < owned.size(); ++k) {
            const std::int64_t g = gsizes[k], p = psizes[k];
            if (g < 0 || g > 64 || (dargs[k] <= 0 && dargs[k] != MPI_DISTRIBUTE_DFLT_DARG)) {
                ok = false;
                continue;
            }
            for (std::int64_t i = 0; i < g; ++i) {
                bool mine = true;
                if (distribs[k] == MPI_DISTRIBUTE_BLOCK) {
                    const std::int64_t b = dargs[k] == MPI_DISTRIBUTE_DFLT_DARG ? (g + p - 1) / p : dargs[k];
                    mine = i / b == coords[k];
                } else if (distribs[k] == MPI_DISTRIBUTE_CYCLIC) {
                    const std::int64_t b = dargs[k] == MPI_DISTRIBUTE_DFLT_DARG ? 1 : dargs[k];
                    mine = (i / b) % p == coords[k];
                }
                if (mine) owned[k].push_back(i);
            }
        }
        const i128 e = node(c).rub - node(c).rlb;
        std::vector<i128> stride(static_cast<std::size_t>(ndims));
        i128 s = e, whole = 1;
        for (std::int64_t j = 0; j < ndims; ++j) {
            const auto k = static_cast<std::size_t>(order_c ? ndims - 1 - j : j);
            stride[k] = s;
            s = mul(s, gsizes[k], ok);
            whole = mul(whole, gsizes[k], ok);
        }
        // One grid per owned element (typemap order: the outermost dimension first).
        std::vector<grid> grids;
        if (ok) {
            std::vector<std::size_t> order(static_cast<std::size_t>(ndims));
            for (std::int64_t j = 0; j < ndims; ++j)
                order[static_cast<std::size_t>(j)] = static_cast<std::size_t>(order_c ? j : ndims - 1 - j);
            std::vector<std::size_t> idx(order.size(), 0);
            bool none = false;
            for (auto& o : owned) none = none || o.empty();
            while (!none) {
                i128 d = 0;
                for (std::size_t j = 0; j < order.size(); ++j) d += owned[order[j]][idx[j]] * stride[order[j]];
                grids.push_back({c, d, {}});
                std::size_t j = idx.size();
                while (j > 0 && ++idx[j - 1] == owned[order[j - 1]].size()) idx[--j] = 0;
                if (j == 0) break;
            }
        }
        f.ok = ok;
        place(f, grids);
        f.rlb = 0, f.rub = mul(whole, e, f.ok);
        return finish(std::move(f));
    }

    shunt_fuzz::input& in_;
    fake_source& src_;
};

/// Merges touching entries and drops empty ones (the reference's own, not shunt's).
std::vector<block> merged(const std::vector<block>& map) {
    std::vector<block> out;
    for (const block& b : map) {
        if (b.length == 0) continue;
        if (!out.empty() && i128{out.back().offset} + out.back().length == b.offset)
            out.back().length += b.length;
        else
            out.push_back(b);
    }
    return out;
}

/// Packs and unpacks `count` elements with shunt's packer and compares with the typemap walked
/// byte by byte.
void check_pack(const shunt::type_info& info, const fake_node& ref, shunt_fuzz::input& in) {
    const std::int64_t count = in.range(1, 3);
    i128 lo = 0, hi = 0, total = 0;
    bool any = false;
    for (std::int64_t i = 0; i < count; ++i)
        for (const block& b : ref.map) {
            if (b.length == 0) continue;
            const i128 s = i128{i} * info.extent + b.offset;
            lo = any ? std::min(lo, s) : s;
            hi = any ? std::max(hi, s + b.length) : s + b.length;
            any = true;
            total += b.length;
        }
    if (!any || hi - lo > buffer_cap || total > buffer_cap) return;
    const auto span = static_cast<std::size_t>(hi - lo);
    // Exactly the bytes the typemap spans: AddressSanitizer sees any access outside them.
    std::vector<std::uint8_t> typed(span);
    for (std::size_t k = 0; k < span; ++k) typed[k] = static_cast<std::uint8_t>(k * 131 + 7);
    const auto origin =
        reinterpret_cast<std::uintptr_t>(typed.data()) - static_cast<std::uintptr_t>(static_cast<std::int64_t>(lo));
    const void* base = reinterpret_cast<const void*>(origin);
    std::vector<std::uint8_t> expect;
    expect.reserve(static_cast<std::size_t>(total));
    for (std::int64_t i = 0; i < count; ++i)
        for (const block& b : ref.map)
            for (std::int64_t k = 0; k < b.length; ++k)
                expect.push_back(typed[static_cast<std::size_t>(i128{i} * info.extent + b.offset + k - lo)]);
    const auto n = static_cast<std::int64_t>(total);
    auto out = std::make_unique<std::uint8_t[]>(static_cast<std::size_t>(n));
    SHUNT_FUZZ_CHECK(shunt::pack_host(info, count, base, out.get()) == n);
    SHUNT_FUZZ_CHECK(std::memcmp(out.get(), expect.data(), static_cast<std::size_t>(n)) == 0);
    // A window of the packed stream, as partial sends and MPI_Pack with a position do.
    const std::int64_t first = in.range(0, n - 1), len = in.range(1, n - first);
    auto window = std::make_unique<std::uint8_t[]>(static_cast<std::size_t>(len));
    SHUNT_FUZZ_CHECK(shunt::pack_host(info.form, info.extent, count, base, window.get(), first, len) == len);
    SHUNT_FUZZ_CHECK(std::memcmp(window.get(), expect.data() + first, static_cast<std::size_t>(len)) == 0);

    // Unpacking into overlapping entries is erroneous in MPI: only typemaps without overlap.
    std::vector<std::uint8_t> hit(span, 0);
    for (std::int64_t i = 0; i < count; ++i)
        for (const block& b : ref.map)
            for (std::int64_t k = 0; k < b.length; ++k)
                if (hit[static_cast<std::size_t>(i128{i} * info.extent + b.offset + k - lo)]++) return;
    std::vector<std::uint8_t> stream(static_cast<std::size_t>(n));
    for (std::size_t k = 0; k < stream.size(); ++k) stream[k] = static_cast<std::uint8_t>(k * 17 + 3);
    std::vector<std::uint8_t> want = typed;
    std::size_t pos = 0;
    for (std::int64_t i = 0; i < count; ++i)
        for (const block& b : ref.map)
            for (std::int64_t k = 0; k < b.length; ++k)
                want[static_cast<std::size_t>(i128{i} * info.extent + b.offset + k - lo)] = stream[pos++];
    SHUNT_FUZZ_CHECK(shunt::unpack_host(info, count, stream.data(), reinterpret_cast<void*>(origin)) == n);
    SHUNT_FUZZ_CHECK(typed == want);  // every byte outside the typemap untouched
    // A window: only its bytes change.
    std::vector<std::uint8_t> before = typed;
    for (std::size_t k = 0; k < span; ++k) typed[k] = static_cast<std::uint8_t>(k * 29 + 1);
    want = typed;
    pos = 0;
    for (std::int64_t i = 0; i < count; ++i)
        for (const block& b : ref.map)
            for (std::int64_t k = 0; k < b.length; ++k, ++pos)
                if (static_cast<std::int64_t>(pos) >= first && static_cast<std::int64_t>(pos) < first + len)
                    want[static_cast<std::size_t>(i128{i} * info.extent + b.offset + k - lo)] = stream[pos];
    SHUNT_FUZZ_CHECK(shunt::unpack_host(info.form, info.extent, count, stream.data() + first,
                                        reinterpret_cast<void*>(origin), first, len) == len);
    SHUNT_FUZZ_CHECK(typed == want);
}

/// The input being checked, for dump().
const fake_source* current_src = nullptr;
const shunt::type_info* current_info = nullptr;

void print_blocks(const char* what, const std::vector<block>& bs) {
    std::fprintf(stderr, "  %s (%zu):", what, bs.size());
    for (std::size_t k = 0; k < bs.size() && k < 32; ++k)
        std::fprintf(stderr, " {%lld,%lld}", static_cast<long long>(bs[k].offset),
                     static_cast<long long>(bs[k].length));
    std::fprintf(stderr, "%s\n", bs.size() > 32 ? " ..." : "");
}

void dump() {
    for (std::size_t t = 0; t < current_src->nodes.size(); ++t) {
        const fake_node& f = current_src->nodes[t];
        std::fprintf(stderr, "node %zu: combiner %d ints", t, f.env.combiner);
        for (int v : f.ints) std::fprintf(stderr, " %d", v);
        std::fprintf(stderr, " addresses");
        for (auto v : f.addresses) std::fprintf(stderr, " %lld", static_cast<long long>(v));
        std::fprintf(stderr, " counts");
        for (auto v : f.counts) std::fprintf(stderr, " %lld", static_cast<long long>(v));
        std::fprintf(stderr, " kids");
        for (int v : f.kids) std::fprintf(stderr, " %d", v);
        std::fprintf(stderr, " | size %lld lb %lld extent %lld true %lld+%lld%s\n", static_cast<long long>(f.size),
                     static_cast<long long>(f.lb), static_cast<long long>(f.extent), static_cast<long long>(f.true_lb),
                     static_cast<long long>(f.true_extent), f.ok ? "" : " (unchecked)");
    }
    if (!current_info) return;
    const layout& l = current_info->form;
    std::fprintf(stderr, "  form dims:");
    for (const auto& d : l.dims)
        std::fprintf(stderr, " {%lld,%lld}", static_cast<long long>(d.count), static_cast<long long>(d.stride));
    std::fprintf(stderr, "\n");
    print_blocks("form blocks", l.blocks);
    print_blocks("reference typemap", current_src->nodes.back().map);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    shunt_fuzz::input in(data, size);
    fake_source src;
    const bool damaged = in.range(0, 7) == 0;
    tree_builder builder(in, src);
    builder.max_depth_ = static_cast<int>(in.range(1, 6));
    const int root = builder.build(0);
    if (damaged) builder.damage();
    const fake_node& ref = src.nodes[static_cast<std::size_t>(root)];
    const bool checked = !damaged && ref.ok;
    current_src = &src;
    current_info = nullptr;
    dump_context = dump;

    shunt::type_info info;
    bool decoded = false;
    try {
        info = shunt::decode(src, root);
        decoded = true;
    } catch (const shunt::error&) {
        // unsupported: left to the library (checked below against what the reference knows)
    }
    // Every derived handle the source handed out was released, on success and on every throw.
    for (int r : src.refs) SHUNT_FUZZ_CHECK(r == 0);
    if (!decoded || !checked) return 0;
    current_info = &info;

    SHUNT_FUZZ_CHECK(info.size == ref.size);
    SHUNT_FUZZ_CHECK(info.form.size() == ref.size);
    SHUNT_FUZZ_CHECK(info.extent == ref.extent && info.lb == ref.lb);
    SHUNT_FUZZ_CHECK(shunt::simplify(info.form) == info.form);  // canonical: simplify is idempotent
    if (!ref.map_ok) return 0;
    std::vector<block> flat;
    try {
        flat = shunt::flatten(info.form);
    } catch (const shunt::unsupported&) {
        return 0;
    }
    const std::vector<block> want = merged(ref.map);
    SHUNT_FUZZ_CHECK(flat == want);  // the same bytes in the same order
    if (!want.empty()) {  // so the form's true bounds are the tree's
        i128 lo = want[0].offset, hi = lo + want[0].length;
        for (const block& b : want)
            lo = std::min<i128>(lo, b.offset), hi = std::max<i128>(hi, i128{b.offset} + b.length);
        SHUNT_FUZZ_CHECK(lo == ref.true_lb && hi - lo == ref.true_extent);
    }
    // Canonical: the form of the same bytes given as a plain block list is the same form.
    if (ref.map.size() <= shunt::canonical_flatten_limit)
        SHUNT_FUZZ_CHECK(shunt::simplify(layout{{}, ref.map}) == info.form);
    check_pack(info, ref, in);
    return 0;
}
