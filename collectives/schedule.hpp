// shunt/collectives/schedule.hpp: the hierarchical reduce-scatter and allgather engine shared by the partitioned collectives.
#pragma once

#include <shunt/collectives/flat_allgather.hpp>
#include <shunt/collectives/flat_reduce_scatter.hpp>
#include <shunt/collectives/transport.hpp>
#include <shunt/topology/hierarchy.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <numeric>
#include <span>
#include <stdexcept>
#include <vector>

namespace shunt::detail {

// The model. A vector of n elements is cut into one contiguous range per owner rank (possibly
// empty). Reduce-scatter goes up the hierarchy, step k = 0 .. levels(): inside each level-k
// group G, for every owner r, the representatives of r in the subgroups of G (level k-1
// groups; single ranks at step 0) each hold r's range reduced over their subgroup; they
// reduce-scatter so that the representative of r in G holds it reduced over G. At the top
// step the representative is r itself. Allgather runs the same steps downwards, the
// representative of r sending r's range to the others. Every rank is the representative of
// about the same number of owners, so every rank and link works and the outer (slower) levels
// carry 1/size-of-inner-groups of the data. Representatives with the same owners form one
// "op" (a flat reduce-scatter or allgather among them); a rank does its ops in a global order
// (step, then lowest owner), which makes the blocking schedule deadlock-free.

/// The range [offset, offset + count) of the vector owned by one rank (elements).
struct owned_range {
    std::int64_t offset = 0;
    std::int64_t count = 0;
};

/// One group exchange of a step.
struct schedule_op {
    std::vector<int> holders;  ///< one rank per subgroup, in subgroup order: the members
    std::vector<int> owners;  ///< owners whose ranges the op moves, by (receiver, offset)
    std::vector<int> receivers;  ///< member index receiving each owner's range (parallel)
};

/// The ops of step k (0 .. h.levels()) that rank `me` takes part in, in the global order.
inline std::vector<schedule_op> step_ops(const hierarchy& h, int k, int me, std::span<const owned_range> own) {
    std::vector<schedule_op> ops;
    const int group = h.group_of(k, me);
    const auto members = h.members(k, group);
    if (members.size() <= 1) return ops;
    std::vector<int> subs;  // the subgroups of `group` (level k-1), empty at step 0
    if (k > 0) {
        auto s = h.subgroups(k, group);
        subs.assign(s.begin(), s.end());
        if (subs.size() <= 1) return ops;
    }
    const int my_sub = k > 0 ? h.group_of(k - 1, me) : -1;
    std::map<std::vector<int>, std::size_t> index;
    std::vector<int> holders;
    for (int r = 0; r < h.size(); ++r) {
        if (own[static_cast<std::size_t>(r)].count <= 0) continue;
        if (k > 0 && h.representative(k - 1, my_sub, r) != me) continue;
        if (k == 0) {
            holders.assign(members.begin(), members.end());
        } else {
            holders.clear();
            for (int s : subs) holders.push_back(h.representative(k - 1, s, r));
        }
        const int recv_rank = h.representative(k, group, r);
        const int recv = static_cast<int>(std::find(holders.begin(), holders.end(), recv_rank) - holders.begin());
        auto [it, fresh] = index.try_emplace(holders, ops.size());
        if (fresh) ops.push_back(schedule_op{holders, {}, {}});
        ops[it->second].owners.push_back(r);
        ops[it->second].receivers.push_back(recv);
    }
    for (auto& op : ops) {
        std::vector<std::size_t> ord(op.owners.size());
        std::iota(ord.begin(), ord.end(), std::size_t{0});
        std::stable_sort(ord.begin(), ord.end(), [&](std::size_t a, std::size_t b) {
            if (op.receivers[a] != op.receivers[b]) return op.receivers[a] < op.receivers[b];
            return own[static_cast<std::size_t>(op.owners[a])].offset <
                   own[static_cast<std::size_t>(op.owners[b])].offset;
        });
        schedule_op sorted{op.holders, {}, {}};
        for (auto i : ord) {
            sorted.owners.push_back(op.owners[i]);
            sorted.receivers.push_back(op.receivers[i]);
        }
        op = std::move(sorted);
    }
    return ops;
}

/// How one op's data lies in the vector: per member, the elements it receives; and whether
/// the owners' ranges follow each other so the op can work on the vector in place.
struct op_layout {
    std::vector<std::int64_t> shares;  ///< elements per member
    std::int64_t first = 0;  ///< offset of the first range
    std::int64_t total = 0;
    bool contiguous = true;
};

inline op_layout layout_of(const schedule_op& op, std::span<const owned_range> own) {
    op_layout l;
    l.shares.assign(op.holders.size(), 0);
    std::int64_t expect = -1;
    for (std::size_t i = 0; i < op.owners.size(); ++i) {
        const owned_range& r = own[static_cast<std::size_t>(op.owners[i])];
        if (i == 0)
            l.first = r.offset;
        else if (r.offset != expect)
            l.contiguous = false;
        expect = r.offset + r.count;
        l.shares[static_cast<std::size_t>(op.receivers[i])] += r.count;
        l.total += r.count;
    }
    return l;
}

/// Hierarchical reduce-scatter of the vector at `work` (n elements, all owners' ranges) over
/// the ranks of t (whose group is the hierarchy's ranks). On return each rank's own range
/// holds the reduction over all ranks; the rest of `work` is clobbered. Collective: every rank
/// passes the same hierarchy, ranges, reduction and algorithm.
template <transport T>
void hierarchical_reduce_scatter(T& t, const hierarchy& h, std::byte* work, std::span<const owned_range> own,
                                 const typename T::reduction_type& red, flat_algorithm algo) {
    const std::int64_t es = red.element_size();
    const int me = t.rank();
    for (int k = 0; k <= h.levels(); ++k) {
        for (const schedule_op& op : step_ops(h, k, me, own)) {
            const op_layout l = layout_of(op, own);
            group_view<T> g(t, op.holders);
            if (l.contiguous) {
                flat_reduce_scatter(g, work + l.first * es, l.shares, red, algo);
                continue;
            }
            auto tmp = t.scratch(l.total * es);
            std::int64_t pos = 0;
            for (int r : op.owners) {
                const owned_range& o = own[static_cast<std::size_t>(r)];
                t.copy(tmp.data() + pos * es, work + o.offset * es, o.count * es);
                pos += o.count;
            }
            flat_reduce_scatter(g, tmp.data(), l.shares, red, algo);
            pos = 0;
            for (std::size_t i = 0; i < op.owners.size(); ++i) {
                const owned_range& o = own[static_cast<std::size_t>(op.owners[i])];
                if (op.receivers[i] == g.rank()) t.copy(work + o.offset * es, tmp.data() + pos * es, o.count * es);
                pos += o.count;
            }
        }
    }
}

/// Hierarchical allgather: on entry each rank's own range of `work` (elements of `es` bytes)
/// is filled in, on return every range is. Collective like hierarchical_reduce_scatter.
template <transport T>
void hierarchical_allgather(T& t, const hierarchy& h, std::byte* work, std::int64_t es,
                            std::span<const owned_range> own, flat_algorithm algo, const collective_options& opt) {
    const int me = t.rank();
    for (int k = h.levels(); k >= 0; --k) {
        for (const schedule_op& op : step_ops(h, k, me, own)) {
            const op_layout l = layout_of(op, own);
            group_view<T> g(t, op.holders);
            std::vector<std::int64_t> bytes(l.shares.size());
            for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = l.shares[i] * es;
            if (l.contiguous) {
                flat_allgather(g, work + l.first * es, bytes, algo, opt);
                continue;
            }
            auto tmp = t.scratch(l.total * es);
            std::int64_t pos = 0;
            for (std::size_t i = 0; i < op.owners.size(); ++i) {
                const owned_range& o = own[static_cast<std::size_t>(op.owners[i])];
                if (op.receivers[i] == g.rank()) t.copy(tmp.data() + pos * es, work + o.offset * es, o.count * es);
                pos += o.count;
            }
            flat_allgather(g, tmp.data(), bytes, algo, opt);
            pos = 0;
            for (int r : op.owners) {
                const owned_range& o = own[static_cast<std::size_t>(r)];
                t.copy(work + o.offset * es, tmp.data() + pos * es, o.count * es);
                pos += o.count;
            }
        }
    }
}

/// `n` elements cut into `parts` ranges as evenly as possible (the first n % parts one longer).
inline owned_range balanced_part(std::int64_t n, std::int64_t parts, std::int64_t i) {
    const std::int64_t base = n / parts, extra = n % parts;
    return {i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

/// Ranges for a reduction whose result placement is free (allreduce): one balanced range per
/// rank, ordered so that in a regular hierarchy every op works in place (innermost position
/// most significant, then the subgroup index at each level outward).
inline std::vector<owned_range> free_ranges(const hierarchy& h, std::int64_t n) {
    const int p = h.size(), L = h.levels();
    std::vector<std::vector<int>> key(static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r) {
        auto& kr = key[static_cast<std::size_t>(r)];
        kr.push_back(h.position(0, r));
        for (int k = 1; k <= L; ++k) kr.push_back(h.subgroup_index(k, r));
        kr.push_back(r);
    }
    std::vector<int> order(static_cast<std::size_t>(p));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return key[static_cast<std::size_t>(a)] < key[static_cast<std::size_t>(b)]; });
    std::vector<owned_range> own(static_cast<std::size_t>(p));
    for (int v = 0; v < p; ++v)
        own[static_cast<std::size_t>(order[static_cast<std::size_t>(v)])] = balanced_part(n, p, v);
    return own;
}

/// Checks that the transport and the hierarchy describe the same ranks.
template <transport T>
void check_hierarchy(const T& t, const hierarchy& h) {
    if (h.size() != t.size())
        throw std::invalid_argument("collective: the hierarchy does not match the transport's group size");
}

}  // namespace shunt::detail
