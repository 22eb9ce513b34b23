// shunt/flow/planner.hpp: the flow-splitting planner: the minimal k of a phase, its sub-flows' lanes, and the lookup a transfer asks.
#pragma once

#include <shunt/errors.hpp>
#include <shunt/flow/assign.hpp>
#include <shunt/flow/fabric.hpp>
#include <shunt/flow/load.hpp>
#include <shunt/flow/pattern.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace shunt::flow {

/// Knobs of the planner.
struct plan_options {
    /// The largest k tried.
    int max_k = 64;
    /// A split reaches spraying when its maximum load is within this relative margin.
    double tolerance = 1e-9;
    /// The links whose maximum load counts: all of them (the phase's completion), or only the
    /// leaf-spine links (the paper's measure; there k = S / gcd(n, S) for n flows per leaf).
    link_scope scope = link_scope::all;
    /// Hashed paths: the smallest k whose expected maximum load (over `seeds` random hashings)
    /// is within this relative margin of spraying's; the k with the least expected load when
    /// none is.
    double hashed_slack = 0.25;
    int hashed_max_k = 16;
    int seeds = 16;
    std::uint64_t seed = 1;
};

/// The result of the search for a phase's k.
struct k_choice {
    int k = 1;
    bool reached = false;  ///< the load at k is spraying's (within the tolerance)
    double load = 0;  ///< maximum load at k (seconds)
    double spray = 0;  ///< maximum load under ideal spraying (seconds)
};

namespace detail {

/// Whether every spine-crossing flow of the phase has the same bytes (then the coordinated
/// load has a closed form).
inline bool uniform_crossing(const fabric& fab, const phase& ph, double& bytes) {
    bytes = -1;
    for (const flow& f : ph.flows) {
        if (!crosses_spine(fab, f)) continue;
        if (bytes < 0)
            bytes = f.bytes;
        else if (f.bytes != bytes)
            return false;
    }
    return true;
}

}  // namespace detail

/// Maximum load (seconds) of the coordinated assignment with k sub-flows per spine-crossing
/// flow. Without failed links and with equal flows (B bytes each) it is, per leaf with d
/// flows out (in), ceil(k d / S) sub-flows of B / k on its busiest uplink (downlink): what the
/// equitable colouring gives, and by pigeonhole the least any assignment can; else the
/// assignment is built and measured.
inline double coordinated_max_load(const fabric& fab, const phase& ph, int k, link_scope scope = link_scope::all) {
    double bytes = 0;
    if (fab.has_failures() || !detail::uniform_crossing(fab, ph, bytes))
        return max_load(fab, link_loads(fab, ph, route_coordinated(fab, ph, k)), scope);
    std::vector<std::int64_t> out(static_cast<std::size_t>(fab.leaves()), 0), in(out.size(), 0);
    std::vector<double> nic(2 * static_cast<std::size_t>(fab.endpoints()), 0.0);
    const double nic_cap = fab.capacity(fab.nic_up(0)), up_cap = fab.capacity(fab.uplink(0, 0));
    for (const flow& f : ph.flows) {
        nic[static_cast<std::size_t>(fab.nic_up(f.src))] += f.bytes / nic_cap;
        nic[static_cast<std::size_t>(fab.nic_down(f.dst))] += f.bytes / nic_cap;
        if (!crosses_spine(fab, f)) continue;
        ++out[static_cast<std::size_t>(fab.leaf_of(f.src))];
        ++in[static_cast<std::size_t>(fab.leaf_of(f.dst))];
    }
    std::int64_t d = 0;
    for (std::size_t l = 0; l < out.size(); ++l) d = std::max({d, out[l], in[l]});
    const std::int64_t S = fab.spines(), per = (k * d + S - 1) / S;
    double m = d == 0 ? 0.0 : static_cast<double>(per) * (bytes / k) / up_cap;
    if (scope == link_scope::all)
        for (double v : nic) m = std::max(m, v);
    return m;
}

/// The smallest k (1 .. max_k) whose coordinated assignment reaches the maximum load of ideal
/// spraying; `reached` false (and the k of least load) when none does within max_k.
inline k_choice minimal_k(const fabric& fab, const phase& ph, const plan_options& opt = {}) {
    k_choice best;
    best.spray = max_load(fab, spray_loads(fab, ph), opt.scope);
    const double goal = best.spray * (1 + opt.tolerance) + 1e-15;
    best.load = -1;
    for (int k = 1; k <= std::max(1, opt.max_k); ++k) {
        const double l = coordinated_max_load(fab, ph, k, opt.scope);
        if (best.load < 0 || l < best.load - 1e-15) {
            best.k = k;
            best.load = l;
        }
        if (l <= goal) {
            best.k = k;
            best.load = l;
            best.reached = true;
            break;
        }
    }
    return best;
}

/// Expected maximum load of random k-split (k = 1: ECMP) over `seeds` hashings.
inline double expected_random_load(const fabric& fab, const phase& ph, int k, int seeds, std::uint64_t seed,
                                   link_scope scope = link_scope::all) {
    double sum = 0;
    for (int i = 0; i < seeds; ++i)
        sum +=
            max_load(fab, link_loads(fab, ph, route_random(fab, ph, k, seed + static_cast<std::uint64_t>(i))), scope);
    return seeds > 0 ? sum / seeds : 0;
}

/// What one transfer of a phase is told: into how many sub-transfers to cut it, and the lane
/// of each (the spine it must cross: the address or source port of that spine's plane), or -1
/// where paths are hashed (k distinct connections, spines left to the switches) or the
/// transfer stays inside a leaf.
struct transfer_plan {
    int k = 1;
    std::span<const int> lanes;
};

/// The plan of one phase: its k, and every flow's sub-flows and lanes. Built once per phase
/// from the flows every rank knows (the schedule's), so every rank computes the same plan
/// without communicating. Read-only after construction: find() may be called from any thread.
class phase_plan {
public:
    phase_plan(const fabric& fab, const phase& ph, const plan_options& opt = {}) : pinned_(fab.pinned()) {
        if (pinned_) {
            choice_ = minimal_k(fab, ph, opt);
            routing_ = route_coordinated(fab, ph, choice_.k);
            choice_.load = max_load(fab, link_loads(fab, ph, routing_), opt.scope);
        } else {
            choice_.spray = max_load(fab, spray_loads(fab, ph), opt.scope);
            double best = -1;
            for (int k = 1; k <= std::max(1, opt.hashed_max_k); ++k) {
                const double l = expected_random_load(fab, ph, k, opt.seeds, opt.seed, opt.scope);
                if (best < 0 || l < best - 1e-15) {
                    best = l;
                    choice_.k = k;
                }
                if (l <= choice_.spray * (1 + opt.hashed_slack) + 1e-15) {
                    best = l;
                    choice_.k = k;
                    choice_.reached = true;
                    break;
                }
            }
            choice_.load = best;
            routing_ = detail::cut(fab, ph, choice_.k);  // spines -1: hashed
        }
        index_.reserve(ph.flows.size());
        for (std::size_t f = 0; f < ph.flows.size(); ++f) index_.try_emplace(key(ph.flows[f].src, ph.flows[f].dst), f);
    }

    /// The phase's k (sub-flows per spine-crossing flow).
    int k() const { return choice_.k; }
    bool pinned() const { return pinned_; }
    /// The search's result: k, whether it reaches spraying, the loads (expected load where hashed).
    const k_choice& choice() const { return choice_; }
    const routing& assignment() const { return routing_; }

    /// The plan of the transfer from NIC src to NIC dst in this phase; k = 1 with no lanes
    /// when the phase has no such flow (a transfer the schedule did not announce goes unsplit).
    transfer_plan find(int src, int dst) const {
        auto it = index_.find(key(src, dst));
        if (it == index_.end()) return {};
        const std::size_t f = it->second;
        const int n = routing_.parts(f);
        return {n, std::span<const int>(routing_.spine)
                       .subspan(static_cast<std::size_t>(routing_.first[f]), static_cast<std::size_t>(n))};
    }

private:
    static std::uint64_t key(int src, int dst) {
        return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(src)) << 32) | static_cast<std::uint32_t>(dst);
    }

    bool pinned_;
    k_choice choice_;
    routing routing_;
    std::unordered_map<std::uint64_t, std::size_t> index_;
};

/// The sizes of k sub-transfers of `bytes` (the first bytes % k one byte longer), in order:
/// concatenated they are the transfer, so the receiver reassembles it exactly.
inline std::vector<std::int64_t> split_bytes(std::int64_t bytes, int k) {
    if (k < 1 || bytes < 0) throw error("split_bytes: k must be at least 1 and bytes not negative");
    std::vector<std::int64_t> out(static_cast<std::size_t>(k), bytes / k);
    for (std::int64_t i = 0; i < bytes % k; ++i) ++out[static_cast<std::size_t>(i)];
    return out;
}

}  // namespace shunt::flow
