// shunt/flow/pattern.hpp: flow sets of collective phases and point-to-point patterns, and the placement of ranks on a fabric's NICs.
#pragma once

#include <shunt/errors.hpp>
#include <shunt/flow/fabric.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace shunt::flow {

/// One flow: `bytes` from NIC `src` to NIC `dst` (endpoints of a fabric).
struct flow {
    int src = 0;
    int dst = 0;
    double bytes = 0;
};

/// The flows that run at once in one step of a collective, and how many steps have this same
/// flow set (a ring's steps all do). A phase completes when its last flow does.
struct phase {
    std::string name;
    std::vector<flow> flows;
    std::int64_t repeat = 1;
};

/// Where ranks go: one rank per NIC; `block` fills hosts and leaves in rank order, `spread`
/// deals consecutive hosts round-robin over the leaf groups, `random` shuffles hosts (seeded).
/// A host's ranks stay together, rank i of a host on its rail i.
enum class placement { block, spread, random };

/// The NIC of each rank (ranks = fab.endpoints()).
inline std::vector<int> place(const fabric& fab, placement how, std::uint64_t seed = 1) {
    const int hosts = fab.hosts(), rails = fab.rails();
    std::vector<int> host(static_cast<std::size_t>(hosts));
    std::iota(host.begin(), host.end(), 0);
    if (how == placement::spread) {
        // Hosts by (index in group, group): consecutive ranks' hosts sit on different groups.
        std::stable_sort(host.begin(), host.end(),
                         [&](int a, int b) { return a % fab.hosts_per_leaf() < b % fab.hosts_per_leaf(); });
    } else if (how == placement::random) {
        std::mt19937_64 rng(seed);
        std::shuffle(host.begin(), host.end(), rng);
    }
    std::vector<int> ep(static_cast<std::size_t>(hosts) * static_cast<std::size_t>(rails));
    for (int i = 0; i < hosts; ++i)
        for (int r = 0; r < rails; ++r)
            ep[static_cast<std::size_t>(i) * static_cast<std::size_t>(rails) + static_cast<std::size_t>(r)] =
                host[static_cast<std::size_t>(i)] * rails + r;
    return ep;
}

/// The flow patterns shunt-flows knows. Collectives (ring, halving, hierarchical) are
/// allreduces of `bytes` per rank; alltoall moves `bytes` per pair of ranks in pairwise
/// exchange steps (rank r sends to r + i at step i); the point-to-point patterns send `bytes`
/// per flow: shift (r to r + shift), xor (r to r ^ shift), permutation (r to a random rank).
enum class pattern_kind { ring, halving, hierarchical, alltoall, shift, xor_pairs, permutation };

namespace detail {

/// Appends the flow from rank a to rank b unless both sit on one host (no link crossed).
inline void add_flow(const fabric& fab, std::span<const int> rank_ep, int a, int b, double bytes,
                     std::vector<flow>& out) {
    const int ea = rank_ep[static_cast<std::size_t>(a)], eb = rank_ep[static_cast<std::size_t>(b)];
    if (fab.host_of(ea) == fab.host_of(eb) || bytes <= 0) return;
    out.push_back({ea, eb, bytes});
}

inline void check_ranks(const fabric& fab, std::span<const int> rank_ep) {
    if (rank_ep.empty()) throw error("flow pattern: no ranks");
    for (int e : rank_ep)
        if (e < 0 || e >= fab.endpoints()) throw error("flow pattern: a rank's NIC is not in the fabric");
}

}  // namespace detail

/// A ring allreduce over the ranks in rank order: 2 (p - 1) steps, each rank sending bytes / p
/// to the next. One phase (every step has the same flows).
inline std::vector<phase> ring_allreduce(const fabric& fab, std::span<const int> rank_ep, double bytes) {
    detail::check_ranks(fab, rank_ep);
    const int p = static_cast<int>(rank_ep.size());
    phase ph{"ring", {}, 2 * static_cast<std::int64_t>(p - 1)};
    for (int r = 0; p > 1 && r < p; ++r) detail::add_flow(fab, rank_ep, r, (r + 1) % p, bytes / p, ph.flows);
    return {ph};
}

/// A recursive halving reduce-scatter and recursive doubling allgather (p a power of two; a
/// ring otherwise, as shunt's flat algorithms do): for each mask m, ranks r and r ^ m exchange
/// m / p of the vector, once in each half: one phase per mask, repeated twice.
inline std::vector<phase> halving_allreduce(const fabric& fab, std::span<const int> rank_ep, double bytes) {
    detail::check_ranks(fab, rank_ep);
    const int p = static_cast<int>(rank_ep.size());
    if ((p & (p - 1)) != 0) return ring_allreduce(fab, rank_ep, bytes);
    std::vector<phase> out;
    for (int m = p / 2; m >= 1; m /= 2) {
        phase ph{"halving m=" + std::to_string(m), {}, 2};
        for (int r = 0; r < p; ++r) detail::add_flow(fab, rank_ep, r, r ^ m, bytes * m / p, ph.flows);
        out.push_back(std::move(ph));
    }
    return out;
}

/// Pairwise-exchange alltoall of `bytes` per pair: step i (1 .. p-1) sends r to r + i. With
/// more than `max_phases` steps, `max_phases` evenly spaced steps stand for all of them (their
/// repeats add up to p - 1).
inline std::vector<phase> alltoall(const fabric& fab, std::span<const int> rank_ep, double bytes, int max_phases = 16) {
    detail::check_ranks(fab, rank_ep);
    const std::int64_t p = static_cast<std::int64_t>(rank_ep.size());
    if (p < 2) return {};
    const std::int64_t steps = p - 1, m = std::min<std::int64_t>(steps, std::max(1, max_phases));
    std::vector<phase> out;
    for (std::int64_t j = 0; j < m; ++j) {
        const std::int64_t lo = j * steps / m, hi = (j + 1) * steps / m;  // steps lo+1 .. hi
        const std::int64_t i = 1 + (lo + hi - 1) / 2;
        phase ph{"alltoall shift " + std::to_string(i), {}, hi - lo};
        for (std::int64_t r = 0; r < p; ++r)
            detail::add_flow(fab, rank_ep, static_cast<int>(r), static_cast<int>((r + i) % p), bytes, ph.flows);
        out.push_back(std::move(ph));
    }
    return out;
}

/// One phase of point-to-point flows: rank r sends `bytes` to r + d (mod p).
inline std::vector<phase> shift(const fabric& fab, std::span<const int> rank_ep, double bytes, int d) {
    detail::check_ranks(fab, rank_ep);
    const int p = static_cast<int>(rank_ep.size());
    const int dd = ((d % p) + p) % p;
    phase ph{"shift " + std::to_string(d), {}, 1};
    for (int r = 0; r < p; ++r) detail::add_flow(fab, rank_ep, r, (r + dd) % p, bytes, ph.flows);
    return {ph};
}

/// One phase: rank r sends `bytes` to r ^ d where that rank exists.
inline std::vector<phase> xor_pairs(const fabric& fab, std::span<const int> rank_ep, double bytes, int d) {
    detail::check_ranks(fab, rank_ep);
    const int p = static_cast<int>(rank_ep.size());
    phase ph{"xor " + std::to_string(d), {}, 1};
    for (int r = 0; r < p; ++r)
        if ((r ^ d) < p) detail::add_flow(fab, rank_ep, r, r ^ d, bytes, ph.flows);
    return {ph};
}

/// One phase: every rank sends `bytes` to another rank, a random permutation without fixed
/// points (seeded).
inline std::vector<phase> permutation(const fabric& fab, std::span<const int> rank_ep, double bytes,
                                      std::uint64_t seed = 1) {
    detail::check_ranks(fab, rank_ep);
    const int p = static_cast<int>(rank_ep.size());
    std::vector<int> to(static_cast<std::size_t>(p));
    std::iota(to.begin(), to.end(), 0);
    std::mt19937_64 rng(seed);
    std::shuffle(to.begin(), to.end(), rng);
    // Fixed points swap with the next position: still a permutation, now without any.
    for (int r = 0; p > 1 && r < p; ++r)
        if (to[static_cast<std::size_t>(r)] == r)
            std::swap(to[static_cast<std::size_t>(r)], to[static_cast<std::size_t>((r + 1) % p)]);
    phase ph{"permutation", {}, 1};
    for (int r = 0; r < p; ++r) detail::add_flow(fab, rank_ep, r, to[static_cast<std::size_t>(r)], bytes, ph.flows);
    return {ph};
}

}  // namespace shunt::flow
