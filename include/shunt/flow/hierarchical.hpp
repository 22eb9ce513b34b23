// shunt/flow/hierarchical.hpp: the flow sets of each phase of shunt's hierarchical allreduce (collectives/schedule.hpp) for ranks placed on a fabric.
#pragma once

#include <shunt/collectives/transport.hpp>
#include <shunt/flow/fabric.hpp>
#include <shunt/flow/pattern.hpp>
#include <shunt/topology/hierarchy.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace shunt::flow {

/// The levels shunt's schedules would run over for ranks placed on a fabric: the ranks of one
/// host, then those of one leaf group (the hosts under one leaf, or one rail group), trivial
/// levels dropped as shunt's topology drops them.
inline hierarchy fabric_hierarchy(const fabric& fab, std::span<const int> rank_ep) {
    detail::check_ranks(fab, rank_ep);
    const int p = static_cast<int>(rank_ep.size());
    std::vector<std::vector<std::int64_t>> labels(2, std::vector<std::int64_t>(static_cast<std::size_t>(p)));
    for (int r = 0; r < p; ++r) {
        const int h = fab.host_of(rank_ep[static_cast<std::size_t>(r)]);
        labels[0][static_cast<std::size_t>(r)] = h;
        labels[1][static_cast<std::size_t>(r)] = h / fab.hosts_per_leaf();
    }
    return hierarchy(p, std::move(labels), {"host", "leaf"}).without_trivial_levels();
}

namespace detail {

/// One group exchange of a hierarchical step as the flow model sees it: the holders (ranks, in
/// member order) and the bytes each receives in the reduce-scatter.
struct hier_op {
    std::vector<int> holders;
    std::vector<double> shares;
};

/// owners_of[k][y]: how many owners' ranges rank y receives at step k (inside its level-k group),
/// from the representatives' rule (hierarchy::representative) without visiting every owner in
/// every group: the count at level k is a sum over the parent's members by position modulo the
/// group size. O(p * levels).
inline std::vector<std::vector<double>> owner_counts(const hierarchy& h) {
    const int p = h.size(), L = h.levels();
    std::vector<std::vector<double>> cnt(static_cast<std::size_t>(L) + 1,
                                         std::vector<double>(static_cast<std::size_t>(p)));
    std::fill(cnt[static_cast<std::size_t>(L)].begin(), cnt[static_cast<std::size_t>(L)].end(), 1.0);
    for (int k = L - 1; k >= 0; --k) {
        const auto& up = cnt[static_cast<std::size_t>(k) + 1];
        auto& here = cnt[static_cast<std::size_t>(k)];
        for (int P = 0; P < h.groups(k + 1); ++P) {
            std::map<std::size_t, std::vector<double>> by_size;  // child group size -> sums by position mod size
            auto mem = h.members(k + 1, P);
            for (int x : mem) {
                const std::size_t m = h.members(k, h.group_of(k, x)).size();
                by_size.try_emplace(m, std::vector<double>(m, 0.0));
            }
            for (auto& [m, sums] : by_size)
                for (int x : mem)
                    sums[static_cast<std::size_t>(h.position(k, x)) % m] += up[static_cast<std::size_t>(x)];
            for (int y : mem) {
                const std::size_t m = h.members(k, h.group_of(k, y)).size();
                here[static_cast<std::size_t>(y)] = by_size[m][static_cast<std::size_t>(h.position(k, y))];
            }
        }
    }
    return cnt;
}

/// The ops of step k (0 .. levels) over all groups, with bytes per owner `unit`: the same
/// holders and shares as step_ops and layout_of in collectives/schedule.hpp give, for owners
/// of equal ranges.
inline std::vector<hier_op> step_ops_all(const hierarchy& h, int k, const std::vector<std::vector<double>>& cnt,
                                         double unit) {
    std::vector<hier_op> ops;
    const auto& c = cnt[static_cast<std::size_t>(k)];
    for (int G = 0; G < h.groups(k); ++G) {
        auto mem = h.members(k, G);
        if (mem.size() <= 1) continue;
        if (k == 0) {
            hier_op op;
            for (int y : mem) {
                op.holders.push_back(y);
                op.shares.push_back(c[static_cast<std::size_t>(y)] * unit);
            }
            ops.push_back(std::move(op));
            continue;
        }
        auto subs = h.subgroups(k, G);
        if (subs.size() <= 1) continue;
        std::size_t widest = 0;
        for (int s : subs) widest = std::max(widest, h.members(k - 1, s).size());
        for (std::size_t q = 0; q < widest; ++q) {
            hier_op op;
            double total = 0;
            for (int s : subs) {
                auto sm = h.members(k - 1, s);
                const int y = sm[q % sm.size()];
                op.holders.push_back(y);
                const double share = q < sm.size() ? c[static_cast<std::size_t>(y)] * unit : 0.0;
                op.shares.push_back(share);
                total += share;
            }
            if (total > 0) ops.push_back(std::move(op));
        }
    }
    return ops;
}

/// One op's flows as segments of equal steps: (steps, flows between member indices).
struct op_segment {
    std::int64_t steps = 0;
    std::vector<std::pair<std::pair<int, int>, double>> flows;  ///< ((from, to) member, bytes)
};

/// The segments of one op's flat reduce-scatter (gather = false) or allgather (true), as
/// flat_reduce_scatter and flat_allgather run them. A ring's steps move different shares when
/// the shares differ; the model gives each ring flow its mean over the steps.
inline std::vector<op_segment> op_segments(const hier_op& op, bool gather, flat_algorithm algo) {
    const int q = static_cast<int>(op.holders.size());
    std::vector<double> off(static_cast<std::size_t>(q) + 1, 0.0);
    for (int i = 0; i < q; ++i)
        off[static_cast<std::size_t>(i) + 1] =
            off[static_cast<std::size_t>(i)] + op.shares[static_cast<std::size_t>(i)];
    auto sum = [&](int lo, int hi) { return off[static_cast<std::size_t>(hi)] - off[static_cast<std::size_t>(lo)]; };
    std::vector<op_segment> segs;
    const bool pow2 = (q & (q - 1)) == 0;
    if (pow2 && algo != flat_algorithm::ring) {
        std::vector<int> masks;
        for (int m = q / 2; m >= 1; m /= 2) masks.push_back(m);
        if (gather) std::reverse(masks.begin(), masks.end());
        for (int m : masks) {
            op_segment s{1, {}};
            for (int i = 0; i < q; ++i) {
                // Halving: member i sends the half of its current block it does not keep (block of 2m
                // members); doubling: the m members' shares gathered so far.
                const int lo = i & ~(2 * m - 1);
                const int send_lo = (i - lo) < m ? lo + m : lo;
                const double b = gather ? sum(i & ~(m - 1), (i & ~(m - 1)) + m) : sum(send_lo, send_lo + m);
                s.flows.push_back({{i, i ^ m}, b});
            }
            segs.push_back(std::move(s));
        }
        return segs;
    }
    op_segment s{q - 1, {}};
    const double total = off[static_cast<std::size_t>(q)];
    for (int i = 0; i < q; ++i) {
        // Over its q-1 steps, member i sends every share but its own (reduce-scatter) or but its
        // successor's (allgather).
        const int skip = gather ? (i + 1) % q : i;
        s.flows.push_back({{i, (i + 1) % q}, (total - op.shares[static_cast<std::size_t>(skip)]) / (q - 1)});
    }
    segs.push_back(std::move(s));
    return segs;
}

/// Lays the segments of concurrent ops over one step timeline and cuts it into phases where
/// the set of flows changes.
inline void merge_ops(const fabric& fab, std::span<const int> rank_ep, const std::vector<hier_op>& ops,
                      const std::vector<std::vector<op_segment>>& segs, const std::string& name,
                      std::vector<phase>& out) {
    std::set<std::int64_t> cuts{0};
    for (const auto& os : segs) {
        std::int64_t t = 0;
        for (const auto& s : os) cuts.insert(t += s.steps);
    }
    std::vector<std::int64_t> cv(cuts.begin(), cuts.end());
    for (std::size_t c = 0; c + 1 < cv.size(); ++c) {
        phase ph{name, {}, cv[c + 1] - cv[c]};
        for (std::size_t o = 0; o < ops.size(); ++o) {
            std::int64_t t = 0;
            for (const auto& s : segs[o]) {
                if (t <= cv[c] && cv[c] < t + s.steps) {
                    for (const auto& [pair, b] : s.flows)
                        add_flow(fab, rank_ep, ops[o].holders[static_cast<std::size_t>(pair.first)],
                                 ops[o].holders[static_cast<std::size_t>(pair.second)], b, ph.flows);
                    break;
                }
                t += s.steps;
            }
        }
        if (!ph.flows.empty()) out.push_back(std::move(ph));
    }
}

}  // namespace detail

/// The phases of shunt's hierarchical allreduce of `bytes` per rank over hierarchy h (ranks
/// placed at rank_ep): the reduce-scatter's steps 0 .. levels, then the allgather's steps
/// levels .. 0, each step's group exchanges (flat ring or recursive halving/doubling, as
/// `algo` and the group sizes choose) running at once. Every owner's range is bytes / p.
/// Phases whose flows all stay inside hosts are left out (the network carries nothing).
inline std::vector<phase> hierarchical_allreduce(const fabric& fab, std::span<const int> rank_ep, const hierarchy& h,
                                                 double bytes, flat_algorithm algo = flat_algorithm::automatic) {
    detail::check_ranks(fab, rank_ep);
    if (h.size() != static_cast<int>(rank_ep.size())) throw error("flow pattern: hierarchy and ranks differ in size");
    const auto cnt = detail::owner_counts(h);
    const double unit = bytes / h.size();
    std::vector<phase> out;
    for (int pass = 0; pass < 2; ++pass) {
        const bool gather = pass == 1;
        for (int i = 0; i <= h.levels(); ++i) {
            const int k = gather ? h.levels() - i : i;
            const auto ops = detail::step_ops_all(h, k, cnt, unit);
            std::vector<std::vector<detail::op_segment>> segs;
            for (const auto& op : ops) segs.push_back(detail::op_segments(op, gather, algo));
            detail::merge_ops(fab, rank_ep, ops, segs,
                              std::string(gather ? "allgather" : "reduce-scatter") + " step " + std::to_string(k) +
                                  " (" + h.name(std::min(k, h.levels())) + ")",
                              out);
        }
    }
    return out;
}

}  // namespace shunt::flow
