// shunt/flow/assign.hpp: sub-flows and their spines for a phase: random hashing (ECMP, random k-split) and the coordinated assignment.
#pragma once

#include <shunt/errors.hpp>
#include <shunt/flow/colouring.hpp>
#include <shunt/flow/fabric.hpp>
#include <shunt/flow/pattern.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace shunt::flow {

/// The sub-flows of a phase and the spine each crosses. Flow f of the phase is cut into the
/// sub-flows first[f] .. first[f+1]-1 of equal bytes; a flow inside one leaf is never cut (no
/// spine to choose) and its sub-flow's spine is -1.
struct routing {
    std::vector<int> first;  ///< flows + 1 offsets
    std::vector<int> spine;  ///< per sub-flow: spine index, or -1 inside a leaf
    int parts(std::size_t f) const { return first[f + 1] - first[f]; }
};

/// Whether a flow crosses the spines.
inline bool crosses_spine(const fabric& fab, const flow& f) { return fab.leaf_of(f.src) != fab.leaf_of(f.dst); }

namespace detail {

/// The sub-flow offsets for k parts per spine-crossing flow.
inline routing cut(const fabric& fab, const phase& ph, int k) {
    if (k < 1 || k > 4096) throw error("flow routing: k must be 1..4096, not " + std::to_string(k));
    routing r;
    r.first.resize(ph.flows.size() + 1, 0);
    for (std::size_t f = 0; f < ph.flows.size(); ++f)
        r.first[f + 1] = r.first[f] + (crosses_spine(fab, ph.flows[f]) ? k : 1);
    r.spine.assign(static_cast<std::size_t>(r.first.back()), -1);
    return r;
}

[[noreturn]] inline void no_path(int a, int b) {
    throw error("flow routing: leaves " + std::to_string(a) + " and " + std::to_string(b) +
                " share no spine whose links are up");
}

}  // namespace detail

/// Every sub-flow (k per spine-crossing flow) hashed to a uniformly random spine among those
/// whose links are up at both ends, independently: ECMP's hashing of distinct 5-tuples. k = 1
/// is plain ECMP, k > 1 the random k-split.
inline routing route_random(const fabric& fab, const phase& ph, int k, std::uint64_t seed) {
    routing r = detail::cut(fab, ph, k);
    std::mt19937_64 rng(seed);
    std::vector<int> usable;
    for (std::size_t f = 0; f < ph.flows.size(); ++f) {
        if (!crosses_spine(fab, ph.flows[f])) continue;
        const int a = fab.leaf_of(ph.flows[f].src), b = fab.leaf_of(ph.flows[f].dst);
        if (fab.has_failures()) {
            fab.usable_spines(a, b, usable);
            if (usable.empty()) detail::no_path(a, b);
        }
        for (int j = r.first[f]; j < r.first[f + 1]; ++j) {
            if (!fab.has_failures()) {
                r.spine[static_cast<std::size_t>(j)] =
                    static_cast<int>(rng() % static_cast<std::uint64_t>(fab.spines()));
            } else {
                r.spine[static_cast<std::size_t>(j)] = usable[rng() % usable.size()];
            }
        }
    }
    return r;
}

namespace detail {

/// Coordinated assignment on a fabric without failed links: the sub-flows of each size class
/// are the edges of the leaf-to-leaf multigraph (source leaf on the left, destination leaf on
/// the right), coloured equitably with one colour per spine, so each leaf's uplinks and
/// downlinks carry as equal a number of the class's sub-flows as can be (their counts differ
/// by at most one). Classes after the first are rotated over the spines so the larger counts
/// do not pile onto the same spines.
inline void coordinate_whole(const fabric& fab, const phase& ph, routing& r) {
    std::map<double, std::vector<int>> classes;  // sub-flow bytes -> sub-flows
    for (std::size_t f = 0; f < ph.flows.size(); ++f) {
        if (!crosses_spine(fab, ph.flows[f])) continue;
        const double b = ph.flows[f].bytes / r.parts(f);
        auto& v = classes[b];
        for (int j = r.first[f]; j < r.first[f + 1]; ++j) v.push_back(j);
    }
    std::vector<int> owner(r.spine.size());
    for (std::size_t f = 0; f < ph.flows.size(); ++f)
        for (int j = r.first[f]; j < r.first[f + 1]; ++j) owner[static_cast<std::size_t>(j)] = static_cast<int>(f);
    int rotate = 0;
    std::vector<bipartite_edge> edges;
    for (auto it = classes.rbegin(); it != classes.rend(); ++it) {
        const auto& subs = it->second;
        edges.clear();
        for (int j : subs) {
            const flow& fl = ph.flows[static_cast<std::size_t>(owner[static_cast<std::size_t>(j)])];
            edges.push_back({fab.leaf_of(fl.src), fab.leaf_of(fl.dst)});
        }
        const auto col = equitable_edge_colouring(fab.leaves(), fab.leaves(), edges, fab.spines());
        for (std::size_t i = 0; i < subs.size(); ++i)
            r.spine[static_cast<std::size_t>(subs[i])] = (col[i] + rotate) % fab.spines();
        rotate = static_cast<int>((rotate + subs.size()) % static_cast<std::size_t>(fab.spines()));
    }
}

/// Coordinated assignment where links have failed: no colouring applies to the remaining
/// links, so sub-flows are placed greedily (those with the fewest usable spines and the most
/// bytes first, each on the usable spine whose two links end least loaded), then moved one at
/// a time off the most loaded link while that lowers it (a bounded local search).
inline void coordinate_failed(const fabric& fab, const phase& ph, routing& r) {
    const int S = fab.spines();
    struct sub {
        int j, a, b;
        double t;  // seconds on a leaf-spine link
        std::vector<int> usable;
    };
    std::vector<sub> subs;
    const double cap = fab.capacity(fab.uplink(0, 0));
    for (std::size_t f = 0; f < ph.flows.size(); ++f) {
        const flow& fl = ph.flows[f];
        if (!crosses_spine(fab, fl)) continue;
        const int a = fab.leaf_of(fl.src), b = fab.leaf_of(fl.dst);
        std::vector<int> u;
        fab.usable_spines(a, b, u);
        if (u.empty()) no_path(a, b);
        for (int j = r.first[f]; j < r.first[f + 1]; ++j) subs.push_back({j, a, b, fl.bytes / r.parts(f) / cap, u});
    }
    std::stable_sort(subs.begin(), subs.end(), [](const sub& x, const sub& y) {
        if (x.usable.size() != y.usable.size()) return x.usable.size() < y.usable.size();
        return x.t > y.t;
    });
    const auto L = static_cast<std::size_t>(fab.leaves());
    std::vector<double> up(L * static_cast<std::size_t>(S), 0.0), down(L * static_cast<std::size_t>(S), 0.0);
    auto U = [&](int a, int s) -> double& {
        return up[static_cast<std::size_t>(a) * static_cast<std::size_t>(S) + static_cast<std::size_t>(s)];
    };
    auto D = [&](int b, int s) -> double& {
        return down[static_cast<std::size_t>(b) * static_cast<std::size_t>(S) + static_cast<std::size_t>(s)];
    };
    std::vector<int> where(subs.size());
    for (std::size_t i = 0; i < subs.size(); ++i) {
        const sub& x = subs[i];
        int best = -1;
        double best_max = 0, best_sum = 0;
        for (int s : x.usable) {
            const double m = std::max(U(x.a, s), D(x.b, s)) + x.t, sum = U(x.a, s) + D(x.b, s);
            if (best < 0 || m < best_max - 1e-15 || (m <= best_max + 1e-15 && sum < best_sum - 1e-15)) {
                best = s;
                best_max = m;
                best_sum = sum;
            }
        }
        where[i] = best;
        U(x.a, best) += x.t;
        D(x.b, best) += x.t;
    }
    // Local search: take the most loaded leaf-spine link and move one of its sub-flows to a spine
    // where both its links stay below that load; stop when no move lowers it.
    const std::size_t LS = L * static_cast<std::size_t>(S);
    auto id_up = [&](int a, int s) {
        return static_cast<std::size_t>(a) * static_cast<std::size_t>(S) + static_cast<std::size_t>(s);
    };
    auto id_down = [&](int b, int s) { return LS + id_up(b, s); };
    auto load = [&](std::size_t id) { return id < LS ? up[id] : down[id - LS]; };
    std::vector<std::vector<std::size_t>> on(2 * LS);
    std::set<std::pair<double, std::size_t>> by_load;  // links carrying sub-flows, by load
    for (std::size_t i = 0; i < subs.size(); ++i) {
        on[id_up(subs[i].a, where[i])].push_back(i);
        on[id_down(subs[i].b, where[i])].push_back(i);
    }
    for (std::size_t id = 0; id < 2 * LS; ++id)
        if (!on[id].empty()) by_load.insert({load(id), id});
    auto shift = [&](std::size_t id, double dt, std::size_t i, bool add) {
        if (!on[id].empty()) by_load.erase({load(id), id});
        (id < LS ? up[id] : down[id - LS]) += dt;
        if (add)
            on[id].push_back(i);
        else
            on[id].erase(std::find(on[id].begin(), on[id].end(), i));
        if (!on[id].empty()) by_load.insert({load(id), id});
    };
    const std::size_t budget = 64 + 8 * subs.size();
    for (std::size_t iter = 0; iter < budget && !by_load.empty(); ++iter) {
        const auto [peak, hot] = *by_load.rbegin();
        bool moved = false;
        for (std::size_t i : on[hot]) {
            const sub& x = subs[i];
            for (int s : x.usable) {
                if (s == where[i] || std::max(U(x.a, s), D(x.b, s)) + x.t >= peak - 1e-12) continue;
                const int o = where[i];
                shift(id_up(x.a, o), -x.t, i, false);
                shift(id_down(x.b, o), -x.t, i, false);
                where[i] = s;
                shift(id_up(x.a, s), x.t, i, true);
                shift(id_down(x.b, s), x.t, i, true);
                moved = true;
                break;
            }
            if (moved) break;
        }
        if (!moved) break;
    }
    for (std::size_t i = 0; i < subs.size(); ++i) r.spine[static_cast<std::size_t>(subs[i].j)] = where[i];
}

}  // namespace detail

/// The coordinated assignment of k sub-flows per spine-crossing flow: an equitable edge
/// colouring of the leaf-to-leaf multigraph, one spine per colour class (without failed links;
/// optimal for sub-flows of equal size: no assignment has a lower maximum leaf-spine load),
/// or a greedy placement with local search over the links that remain. Deterministic.
inline routing route_coordinated(const fabric& fab, const phase& ph, int k) {
    routing r = detail::cut(fab, ph, k);
    if (fab.has_failures())
        detail::coordinate_failed(fab, ph, r);
    else
        detail::coordinate_whole(fab, ph, r);
    return r;
}

}  // namespace shunt::flow
