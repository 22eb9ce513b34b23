// shunt/flow/fabric.hpp: a two-tier leaf-spine fabric for the flow model: leaves, spines, hosts and rails, link capacities, failed links.
#pragma once

#include <shunt/errors.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace shunt::flow {

/// Whether the spine a sub-flow crosses can be chosen by its sender (pinned: one address or
/// source port per spine plane) or is hashed by the leaf switches (ECMP on the 5-tuple).
enum class path_control { hashed, pinned };

/// What describes a fabric. Hosts sit in leaf groups of `hosts_per_leaf`; each host has `rails`
/// NICs (endpoints), and NIC r of every host of group g attaches to leaf g * rails + r (with one
/// rail, one leaf per group: the plain leaf-spine). Every leaf has one link to every spine.
struct fabric_spec {
    int hosts = 64;  ///< hosts in total (the last group may be partly filled)
    int hosts_per_leaf = 16;
    int rails = 1;  ///< NICs per host, each on its own leaf of the host's group
    int spines = 16;
    double nic_gbps = 100;  ///< each NIC link, each direction (Gbit/s)
    double uplink_gbps = 100;  ///< each leaf-spine link, each direction (Gbit/s)
    std::vector<std::pair<int, int>> failed;  ///< (leaf, spine) links that are down, both directions
    path_control paths = path_control::hashed;
};

/// The links of a leaf-spine fabric and their capacities. Links are directed: a NIC's up and
/// down links, each leaf's uplink to and downlink from each spine. An inter-leaf path is NIC up,
/// uplink (a, s), downlink (s, b), NIC down; a path inside a leaf is the two NIC links; a flow
/// between the NICs of one host (or one NIC) crosses no link. Value type, immutable.
class fabric {
public:
    /// Throws shunt::error on a spec that makes no fabric (counts out of range, capacities not
    /// positive, a failed link that does not exist).
    explicit fabric(fabric_spec spec) : spec_(std::move(spec)) {
        const auto& s = spec_;
        auto bad = [](const std::string& what) { throw error("flow fabric: " + what); };
        if (s.hosts < 1 || s.hosts > (1 << 22)) bad("hosts must be 1..4194304, not " + std::to_string(s.hosts));
        if (s.hosts_per_leaf < 1 || s.hosts_per_leaf > 4096)
            bad("hosts per leaf must be 1..4096, not " + std::to_string(s.hosts_per_leaf));
        if (s.rails < 1 || s.rails > 64) bad("rails must be 1..64, not " + std::to_string(s.rails));
        if (s.spines < 1 || s.spines > 4096) bad("spines must be 1..4096, not " + std::to_string(s.spines));
        if (!(s.nic_gbps > 0) || !(s.uplink_gbps > 0) || s.nic_gbps > 1e9 || s.uplink_gbps > 1e9)
            bad("link capacities must be positive Gbit/s");
        groups_ = (s.hosts + s.hosts_per_leaf - 1) / s.hosts_per_leaf;
        if (static_cast<std::int64_t>(groups_) * s.rails * s.spines > (std::int64_t{1} << 26))
            bad("leaves x spines is too large (at most 2^26 leaf-spine links)");
        if (static_cast<std::int64_t>(s.hosts) * s.rails > (std::int64_t{1} << 24)) bad("more than 2^24 NICs");
        leaves_ = groups_ * s.rails;
        alive_.assign(static_cast<std::size_t>(leaves_) * static_cast<std::size_t>(s.spines), 1);
        for (auto [l, sp] : s.failed) {
            if (l < 0 || l >= leaves_ || sp < 0 || sp >= s.spines)
                bad("failed link (" + std::to_string(l) + ", " + std::to_string(sp) + ") is not a leaf-spine link");
            alive_[static_cast<std::size_t>(l) * static_cast<std::size_t>(s.spines) + static_cast<std::size_t>(sp)] = 0;
        }
    }

    const fabric_spec& spec() const { return spec_; }
    int hosts() const { return spec_.hosts; }
    int hosts_per_leaf() const { return spec_.hosts_per_leaf; }
    int rails() const { return spec_.rails; }
    int spines() const { return spec_.spines; }
    int leaves() const { return leaves_; }
    /// Leaf groups (leaves / rails).
    int groups() const { return groups_; }
    /// NICs: host h's NIC r is endpoint h * rails + r.
    int endpoints() const { return spec_.hosts * spec_.rails; }
    bool pinned() const { return spec_.paths == path_control::pinned; }
    bool has_failures() const { return !spec_.failed.empty(); }

    int host_of(int endpoint) const { return endpoint / spec_.rails; }
    int rail_of(int endpoint) const { return endpoint % spec_.rails; }
    int leaf_of(int endpoint) const {
        return host_of(endpoint) / spec_.hosts_per_leaf * spec_.rails + rail_of(endpoint);
    }

    /// Number of directed links: 2 per NIC, 2 per leaf-spine pair.
    int links() const { return 2 * endpoints() + 2 * leaves_ * spec_.spines; }
    int nic_up(int endpoint) const { return endpoint; }
    int nic_down(int endpoint) const { return endpoints() + endpoint; }
    int uplink(int leaf, int spine) const { return 2 * endpoints() + leaf * spec_.spines + spine; }
    int downlink(int spine, int leaf) const {
        return 2 * endpoints() + leaves_ * spec_.spines + leaf * spec_.spines + spine;
    }
    bool is_fabric_link(int link) const { return link >= 2 * endpoints(); }
    /// Capacity of a link in bytes per second.
    double capacity(int link) const { return (is_fabric_link(link) ? spec_.uplink_gbps : spec_.nic_gbps) * (1e9 / 8); }
    /// Whether the link between a leaf and a spine is up (both directions).
    bool alive(int leaf, int spine) const {
        return alive_[static_cast<std::size_t>(leaf) * static_cast<std::size_t>(spec_.spines) +
                      static_cast<std::size_t>(spine)] != 0;
    }
    /// Spines a flow from leaf a to leaf b can cross (both links up), into `out` (cleared).
    void usable_spines(int a, int b, std::vector<int>& out) const {
        out.clear();
        for (int s = 0; s < spec_.spines; ++s)
            if (alive(a, s) && alive(b, s)) out.push_back(s);
    }

    /// One line: counts, capacities, oversubscription and failures.
    std::string describe() const {
        const double down = static_cast<double>(spec_.hosts_per_leaf) * spec_.nic_gbps;
        const double up = static_cast<double>(spec_.spines) * spec_.uplink_gbps;
        char over[32];
        std::snprintf(over, sizeof over, "%.3g:1", down / up);
        return std::to_string(spec_.hosts) + " hosts x " + std::to_string(spec_.rails) + " rail" +
               (spec_.rails == 1 ? "" : "s") + ", " + std::to_string(leaves_) + " leaves of " +
               std::to_string(spec_.hosts_per_leaf) + " hosts, " + std::to_string(spec_.spines) + " spines, NIC " +
               fmt(spec_.nic_gbps) + " Gbit/s, uplink " + fmt(spec_.uplink_gbps) + " Gbit/s (" + over + "), " +
               std::to_string(spec_.failed.size()) + " failed link" + (spec_.failed.size() == 1 ? "" : "s") +
               ", paths " + (pinned() ? "pinned" : "hashed");
    }

private:
    static std::string fmt(double v) {
        char b[32];
        std::snprintf(b, sizeof b, "%g", v);
        return b;
    }

    fabric_spec spec_;
    int groups_ = 0, leaves_ = 0;
    std::vector<unsigned char> alive_;
};

}  // namespace shunt::flow
