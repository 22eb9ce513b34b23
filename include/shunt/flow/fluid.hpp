// shunt/flow/fluid.hpp: fluid completion time of a phase: max-min fair sharing of the links, recomputed as flows finish.
#pragma once

#include <shunt/errors.hpp>
#include <shunt/flow/assign.hpp>
#include <shunt/flow/fabric.hpp>
#include <shunt/flow/pattern.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <queue>
#include <span>
#include <utility>
#include <vector>

namespace shunt::flow {

// Why max-min fair sharing: a phase of a collective starts all its flows together and ends when
// the last one does, and each flow (sub-flow) is its own TCP or RDMA connection, which share a
// link about fairly among those that it limits: max-min fairness is the fluid model of that.
// Recomputed whenever a flow finishes, it lets a flow speed up when its bottleneck empties. The
// bottleneck bound (most loaded link's bytes over its capacity, see load.hpp) is a lower bound
// on its result; the two agree when the most loaded link stays busy to the end (spraying and
// the coordinated assignment, whose links are evenly loaded), and max-min is later when a
// link's flows are held back elsewhere first (hashed collisions), which is what TCP shows.

/// Flows over links of given capacities, each flow using each of its links at `weight` times
/// its rate (1 for a link on its path; 1/m for each of m links it is sprayed over).
class fluid_network {
public:
    explicit fluid_network(std::vector<double> capacity) : cap_(std::move(capacity)) {}

    /// Adds a flow of `bytes` over the links of `path` ((link, weight) pairs). Not thread-safe.
    void add(double bytes, std::span<const std::pair<int, double>> path) {
        for (auto [l, w] : path) {
            if (l < 0 || static_cast<std::size_t>(l) >= cap_.size() || !(w > 0))
                throw error("fluid model: a flow names a link that does not exist");
            use_.push_back({l, w});
        }
        start_.push_back(use_.size());
        bytes_.push_back(bytes);
    }

    std::size_t flows() const { return bytes_.size(); }
    /// Rate computations the last run() made (one per group of flows finishing together).
    std::size_t events() const { return events_; }

    /// Runs every flow to completion under max-min fair rates, recomputed at each completion;
    /// returns the time the last flow finishes (seconds when capacities are bytes per second).
    /// Flows finishing within a relative 1e-9 of each other finish together. Where its bounds
    /// meet, the answer comes without simulating (events() is then 0).
    double run() { return run(false); }

    /// run(), always simulating (the bounds' shortcut off): for tests.
    double simulate() { return run(true); }

private:
    double run(bool force) {
        const std::size_t F = bytes_.size(), nl = cap_.size();
        if (F == 0) return 0;
        // Link -> flows.
        std::vector<std::size_t> lstart(nl + 1, 0);
        for (const auto& u : use_) ++lstart[static_cast<std::size_t>(u.first) + 1];
        for (std::size_t l = 0; l < nl; ++l) lstart[l + 1] += lstart[l];
        std::vector<std::uint32_t> lflow(use_.size());
        {
            std::vector<std::size_t> fill(lstart.begin(), lstart.end() - 1);
            for (std::size_t f = 0; f < F; ++f)
                for (std::size_t i = begin(f); i < end(f); ++i)
                    lflow[fill[static_cast<std::size_t>(use_[i].first)]++] = static_cast<std::uint32_t>(f);
        }
        events_ = 0;
        // Bounds: no flow is slower than the fair share of its most shared link at the start
        // (a link fills at a level of at least capacity / weight), so the last flow ends by
        // max_f bytes_f * max_{l in f} weight_l / capacity_l; and none ends before the most
        // loaded link has carried its bytes. Where the two meet (every link carries flows of
        // one size, e.g. the equal flows of a collective step) that is the answer.
        std::vector<double> wsum(nl, 0.0), busy(nl, 0.0);
        for (std::size_t f = 0; f < F; ++f)
            for (std::size_t i = begin(f); i < end(f); ++i) {
                wsum[static_cast<std::size_t>(use_[i].first)] += use_[i].second;
                busy[static_cast<std::size_t>(use_[i].first)] += use_[i].second * std::max(bytes_[f], 0.0);
            }
        double lower = 0, upper = 0;
        for (std::size_t l = 0; l < nl; ++l) lower = std::max(lower, busy[l] / cap_[l]);
        for (std::size_t f = 0; f < F; ++f) {
            double worst = 0;
            for (std::size_t i = begin(f); i < end(f); ++i) {
                const auto l = static_cast<std::size_t>(use_[i].first);
                worst = std::max(worst, wsum[l] / cap_[l]);
            }
            upper = std::max(upper, std::max(bytes_[f], 0.0) * worst);
        }
        if (!force && upper <= lower * (1 + 1e-12)) return lower;
        std::fill(wsum.begin(), wsum.end(), 0.0);
        std::vector<double> left(bytes_), rate(F, 0.0), rem(nl, 0.0);
        std::vector<unsigned char> done(F, 0), frozen(F, 0);
        std::vector<std::uint32_t> version(nl, 0);
        std::vector<std::size_t> active;
        for (std::size_t f = 0; f < F; ++f) {
            if (begin(f) == end(f) || left[f] <= 0)
                done[f] = 1;  // crosses no link, or nothing to send
            else
                active.push_back(f);
        }
        std::vector<std::size_t> touched;
        double now = 0;
        using entry = std::pair<double, std::pair<std::size_t, std::uint32_t>>;
        while (!active.empty()) {
            ++events_;
            // Water-filling over the active flows.
            touched.clear();
            for (std::size_t f : active) {
                frozen[f] = 0;
                for (std::size_t i = begin(f); i < end(f); ++i) {
                    const auto l = static_cast<std::size_t>(use_[i].first);
                    if (wsum[l] == 0 && rem[l] == 0) touched.push_back(l);
                    wsum[l] += use_[i].second;
                    rem[l] = cap_[l];
                }
            }
            std::priority_queue<entry, std::vector<entry>, std::greater<>> heap;
            for (std::size_t l : touched) heap.push({rem[l] / wsum[l], {l, ++version[l]}});
            while (!heap.empty()) {
                const auto [share, id] = heap.top();
                heap.pop();
                const std::size_t l = id.first;
                if (id.second != version[l] || wsum[l] <= 1e-12) continue;
                for (std::size_t i = lstart[l]; i < lstart[l + 1]; ++i) {
                    const std::size_t f = lflow[i];
                    if (done[f] || frozen[f]) continue;
                    frozen[f] = 1;
                    rate[f] = std::max(share, 0.0);
                    for (std::size_t u = begin(f); u < end(f); ++u) {
                        const auto l2 = static_cast<std::size_t>(use_[u].first);
                        rem[l2] -= use_[u].second * rate[f];
                        wsum[l2] -= use_[u].second;
                        if (l2 != l && wsum[l2] > 1e-12)
                            heap.push({std::max(rem[l2], 0.0) / wsum[l2], {l2, ++version[l2]}});
                    }
                }
                wsum[l] = 0;
            }
            for (std::size_t l : touched) rem[l] = wsum[l] = 0;
            // The next completions.
            double dt = std::numeric_limits<double>::infinity();
            for (std::size_t f : active)
                if (rate[f] > 0) dt = std::min(dt, left[f] / rate[f]);
            if (!(dt < std::numeric_limits<double>::infinity())) throw error("fluid model: flows make no progress");
            const double cut = dt * (1 + 1e-9);
            now += dt;
            std::size_t keep = 0;
            for (std::size_t f : active) {
                if (rate[f] > 0 && left[f] / rate[f] <= cut) {
                    done[f] = 1;
                    continue;
                }
                left[f] -= rate[f] * dt;
                active[keep++] = f;
            }
            active.resize(keep);
        }
        return now;
    }

    std::size_t begin(std::size_t f) const { return f == 0 ? 0 : start_[f - 1]; }
    std::size_t end(std::size_t f) const { return start_[f]; }

    std::vector<double> cap_;
    std::vector<std::pair<int, double>> use_;
    std::vector<std::size_t> start_;  // end of each flow's links in use_
    std::vector<double> bytes_;
    std::size_t events_ = 0;
};

/// Completion time of a phase (seconds) when each sub-flow follows its spine: every sub-flow
/// is its own connection in the max-min fair sharing. The bounds of fluid_network::run() are
/// checked first on the link counts alone, so phases whose links each carry one size of
/// sub-flow cost one pass.
inline double completion_time(const fabric& fab, const phase& ph, const routing& r) {
    const auto nl = static_cast<std::size_t>(fab.links());
    std::vector<double> count(nl, 0.0), busy(nl, 0.0);
    auto each_link = [&](auto&& fn) {
        for (std::size_t f = 0; f < ph.flows.size(); ++f) {
            const flow& fl = ph.flows[f];
            const double b = fl.bytes / r.parts(f);
            for (int j = r.first[f]; j < r.first[f + 1]; ++j) {
                const int s = r.spine[static_cast<std::size_t>(j)];
                fn(b, fab.nic_up(fl.src), fab.nic_down(fl.dst), s < 0 ? -1 : fab.uplink(fab.leaf_of(fl.src), s),
                   s < 0 ? -1 : fab.downlink(s, fab.leaf_of(fl.dst)));
            }
        }
    };
    each_link([&](double b, int l0, int l1, int l2, int l3) {
        for (int l : {l0, l1, l2, l3})
            if (l >= 0) {
                count[static_cast<std::size_t>(l)] += 1;
                busy[static_cast<std::size_t>(l)] += b;
            }
    });
    double lower = 0, upper = 0;
    for (std::size_t l = 0; l < nl; ++l) lower = std::max(lower, busy[l] / fab.capacity(static_cast<int>(l)));
    each_link([&](double b, int l0, int l1, int l2, int l3) {
        double worst = 0;
        for (int l : {l0, l1, l2, l3})
            if (l >= 0) worst = std::max(worst, count[static_cast<std::size_t>(l)] / fab.capacity(l));
        upper = std::max(upper, b * worst);
    });
    if (upper <= lower * (1 + 1e-12)) return lower;
    std::vector<double> cap(nl);
    for (std::size_t l = 0; l < nl; ++l) cap[l] = fab.capacity(static_cast<int>(l));
    fluid_network net(std::move(cap));
    std::vector<std::pair<int, double>> path;
    each_link([&](double b, int l0, int l1, int l2, int l3) {
        path.clear();
        for (int l : {l0, l1, l2, l3})
            if (l >= 0) path.push_back({l, 1.0});
        net.add(b, path);
    });
    return net.simulate();
}

/// Completion time of a phase (seconds) under ideal packet spraying: each flow is one
/// connection whose packets spread evenly over the usable spines, so it loads each of those
/// m uplinks and downlinks with 1/m of its rate. Without failed links a leaf's uplinks are
/// then one trunk of their summed capacity (the same constraint), which keeps the model small.
inline double spray_completion_time(const fabric& fab, const phase& ph) {
    std::vector<double> cap(static_cast<std::size_t>(fab.links()));
    for (int l = 0; l < fab.links(); ++l) cap[static_cast<std::size_t>(l)] = fab.capacity(l);
    const bool trunk = !fab.has_failures();
    if (trunk) {
        for (int a = 0; a < fab.leaves(); ++a) {
            cap[static_cast<std::size_t>(fab.uplink(a, 0))] *= fab.spines();
            cap[static_cast<std::size_t>(fab.downlink(0, a))] *= fab.spines();
        }
    }
    fluid_network net(std::move(cap));
    std::vector<std::pair<int, double>> path;
    std::vector<int> usable;
    for (const flow& fl : ph.flows) {
        path.assign({{fab.nic_up(fl.src), 1.0}, {fab.nic_down(fl.dst), 1.0}});
        if (crosses_spine(fab, fl)) {
            const int a = fab.leaf_of(fl.src), b = fab.leaf_of(fl.dst);
            if (trunk) {
                path.push_back({fab.uplink(a, 0), 1.0});
                path.push_back({fab.downlink(0, b), 1.0});
            } else {
                fab.usable_spines(a, b, usable);
                if (usable.empty()) detail::no_path(a, b);
                for (int s : usable) {
                    path.push_back({fab.uplink(a, s), 1.0 / static_cast<double>(usable.size())});
                    path.push_back({fab.downlink(s, b), 1.0 / static_cast<double>(usable.size())});
                }
            }
        }
        net.add(fl.bytes, path);
    }
    return net.run();
}

}  // namespace shunt::flow
