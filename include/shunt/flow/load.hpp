// shunt/flow/load.hpp: link loads of a phase (seconds of each link's capacity) under a routing and under ideal packet spraying.
#pragma once

#include <shunt/flow/assign.hpp>
#include <shunt/flow/fabric.hpp>
#include <shunt/flow/pattern.hpp>

#include <algorithm>
#include <vector>

namespace shunt::flow {

/// Which links a maximum is taken over: all of them, or only the leaf-spine links (the
/// fabric's core, where the choice of spine matters; the paper's measure).
enum class link_scope { all, fabric };

/// The load of every link (bytes over capacity: the seconds the link needs for the phase's
/// bytes) when each sub-flow follows its spine.
inline std::vector<double> link_loads(const fabric& fab, const phase& ph, const routing& r) {
    std::vector<double> load(static_cast<std::size_t>(fab.links()), 0.0);
    const double nic = fab.capacity(fab.nic_up(0)), up = fab.capacity(fab.uplink(0, 0));
    for (std::size_t f = 0; f < ph.flows.size(); ++f) {
        const flow& fl = ph.flows[f];
        load[static_cast<std::size_t>(fab.nic_up(fl.src))] += fl.bytes / nic;
        load[static_cast<std::size_t>(fab.nic_down(fl.dst))] += fl.bytes / nic;
        const double part = fl.bytes / r.parts(f) / up;
        for (int j = r.first[f]; j < r.first[f + 1]; ++j) {
            const int s = r.spine[static_cast<std::size_t>(j)];
            if (s < 0) continue;
            load[static_cast<std::size_t>(fab.uplink(fab.leaf_of(fl.src), s))] += part;
            load[static_cast<std::size_t>(fab.downlink(s, fab.leaf_of(fl.dst)))] += part;
        }
    }
    return load;
}

/// The load of every link under ideal packet spraying: each spine-crossing flow spread evenly
/// over the spines whose links are up at both ends (a fluid split, no packet granularity).
/// Without failed links no assignment of the bytes does better on any link: each leaf's
/// uplinks share its outgoing bytes exactly evenly, its downlinks its incoming ones.
inline std::vector<double> spray_loads(const fabric& fab, const phase& ph) {
    std::vector<double> load(static_cast<std::size_t>(fab.links()), 0.0);
    const double nic = fab.capacity(fab.nic_up(0)), up = fab.capacity(fab.uplink(0, 0));
    std::vector<int> usable;
    for (const flow& fl : ph.flows) {
        load[static_cast<std::size_t>(fab.nic_up(fl.src))] += fl.bytes / nic;
        load[static_cast<std::size_t>(fab.nic_down(fl.dst))] += fl.bytes / nic;
        if (!crosses_spine(fab, fl)) continue;
        const int a = fab.leaf_of(fl.src), b = fab.leaf_of(fl.dst);
        fab.usable_spines(a, b, usable);
        if (usable.empty()) detail::no_path(a, b);
        const double part = fl.bytes / static_cast<double>(usable.size()) / up;
        for (int s : usable) {
            load[static_cast<std::size_t>(fab.uplink(a, s))] += part;
            load[static_cast<std::size_t>(fab.downlink(s, b))] += part;
        }
    }
    return load;
}

/// The largest load over the links in `scope`.
inline double max_load(const fabric& fab, const std::vector<double>& load, link_scope scope = link_scope::all) {
    double m = 0;
    const std::size_t from = scope == link_scope::all ? 0 : static_cast<std::size_t>(fab.uplink(0, 0));
    for (std::size_t l = from; l < load.size(); ++l) m = std::max(m, load[l]);
    return m;
}

}  // namespace shunt::flow
