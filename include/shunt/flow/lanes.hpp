// shunt/flow/lanes.hpp: a job's lanes on a leaf-spine fabric: the SHUNT_FLOW and SHUNT_FABRIC texts, and the k and paths the transports are set up with before MPI starts.
#pragma once

#include <shunt/errors.hpp>
#include <shunt/flow/assign.hpp>
#include <shunt/flow/fabric.hpp>
#include <shunt/flow/hierarchical.hpp>
#include <shunt/flow/load.hpp>
#include <shunt/flow/pattern.hpp>
#include <shunt/flow/planner.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shunt::flow {

// A transport's lanes are fixed when it starts (Open MPI's TCP modules, UCX's lanes, NCCL's
// queue pairs), so one k serves the whole job: the planner takes the phases of the collectives
// the job may run on its placement (the library's flat ring, recursive halving and pairwise
// alltoall, shunt's hierarchical allreduce) and picks the k that reaches spraying on all of
// them. Where paths can be pinned (one address plane per spine), a host's lanes are the planes
// it *receives* on: a leaf routes by destination address, so the data a host receives crosses
// the spines of its own planes, whoever sends it. Host i of a leaf receives on spines
// (i k + j) mod S, j < k, which spreads every leaf's incoming sub-flows evenly over the spines,
// and its outgoing ones too when a leaf's hosts send to hosts of distinct indices (every
// pattern above on a block placement); the planner checks each phase against spraying and
// raises k where it does not hold (k = S sprays every flow evenly over every spine).

/// What SHUNT_FLOW asks for.
enum class lane_mode {
    off,  ///< the transports as the user set them
    automatic,  ///< pinned where the fabric has address planes and this host has their interfaces, else none
    hashed,  ///< k connections per peer, their spines left to the switches' hashing
    pinned,  ///< k connections per peer, each on a spine's address plane
};

/// SHUNT_FLOW parsed: `off` | `auto` | `hashed[:K]` | `pinned[:K]` (K: lanes per peer, 1..64;
/// without it the planner picks k from SHUNT_FABRIC).
struct flow_request {
    lane_mode mode = lane_mode::off;
    int k = 0;  ///< 0: the planner's
    bool operator==(const flow_request&) const = default;
};

/// SHUNT_FABRIC parsed: `spines=S;leaves={H,H,...|H,...|...}[;planes=PREFIX][;nic=G][;uplink=G]`.
/// Leaves list the host names (as gethostname gives them) under each leaf, in the order the
/// launcher fills them with ranks. `planes` names the interfaces of the pinned address planes:
/// PREFIX1 .. PREFIXS on every host, plane p reaching the other hosts only through spine p - 1.
/// nic and uplink are link capacities in Gbit/s (default 100; only their ratio matters).
struct fabric_description {
    int spines = 0;
    std::vector<std::vector<std::string>> leaves;
    std::string planes;
    double nic_gbps = 100;
    double uplink_gbps = 100;
    bool operator==(const fabric_description&) const = default;
};

namespace detail {

inline bool parse_int(std::string_view t, int lo, int hi, int& out) {
    int v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc{} || p != t.data() + t.size() || v < lo || v > hi) return false;
    out = v;
    return true;
}

inline std::string_view trim(std::string_view t) {
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
    return t;
}

/// Splits on `sep` (every piece kept, empty ones included).
inline std::vector<std::string_view> split(std::string_view t, char sep) {
    std::vector<std::string_view> out;
    for (;;) {
        const auto at = t.find(sep);
        out.push_back(t.substr(0, at));
        if (at == std::string_view::npos) return out;
        t.remove_prefix(at + 1);
    }
}

inline bool host_name_ok(std::string_view h) {
    if (h.empty() || h.size() > 255) return false;
    for (char c : h)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
              c == '_'))
            return false;
    return true;
}

}  // namespace detail

/// Parses SHUNT_FLOW's text (case-insensitive words; empty: off). Throws shunt::error naming
/// what is accepted.
inline flow_request parse_flow_request(std::string_view text) {
    const auto bad = [&] {
        throw error("SHUNT_FLOW: '" + std::string(text) + "' is not off, auto, hashed[:K] or pinned[:K] (K 1..64)");
    };
    std::string t(detail::trim(text));
    for (char& c : t)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    flow_request r;
    if (t.empty() || t == "off") return r;
    if (t == "auto") return r.mode = lane_mode::automatic, r;
    const auto colon = t.find(':');
    const std::string word = t.substr(0, colon);
    if (word == "hashed")
        r.mode = lane_mode::hashed;
    else if (word == "pinned")
        r.mode = lane_mode::pinned;
    else
        bad();
    if (colon != std::string::npos && !detail::parse_int(std::string_view(t).substr(colon + 1), 1, 64, r.k)) bad();
    return r;
}

/// Parses SHUNT_FABRIC's text. Throws shunt::error saying what is wrong.
inline fabric_description parse_fabric_description(std::string_view text) {
    const auto bad = [](const std::string& what) { throw error("SHUNT_FABRIC: " + what); };
    fabric_description d;
    bool have_spines = false, have_leaves = false;
    for (std::string_view item : detail::split(text, ';')) {
        item = detail::trim(item);
        if (item.empty()) continue;
        const auto eq = item.find('=');
        if (eq == std::string_view::npos) bad("'" + std::string(item) + "' is not NAME=VALUE");
        const std::string_view name = detail::trim(item.substr(0, eq)), value = detail::trim(item.substr(eq + 1));
        if (name == "spines") {
            if (!detail::parse_int(value, 1, 4096, d.spines)) bad("spines must be 1..4096");
            have_spines = true;
        } else if (name == "leaves") {
            if (value.size() < 2 || value.front() != '{' || value.back() != '}')
                bad("leaves must look like {h1,h2|h3,h4}");
            std::map<std::string, int> seen;
            for (std::string_view leaf : detail::split(value.substr(1, value.size() - 2), '|')) {
                std::vector<std::string> hosts;
                for (std::string_view h : detail::split(leaf, ',')) {
                    h = detail::trim(h);
                    if (!detail::host_name_ok(h)) bad("'" + std::string(h) + "' is not a host name");
                    if (!seen.emplace(std::string(h), 1).second) bad("host '" + std::string(h) + "' is listed twice");
                    hosts.emplace_back(h);
                }
                d.leaves.push_back(std::move(hosts));
            }
            if (d.leaves.size() > (1u << 16)) bad("too many leaves");
            have_leaves = true;
        } else if (name == "planes") {
            if (value.empty() || value.size() > 12 || !detail::host_name_ok(value))
                bad("planes must be an interface name prefix of 1..12 characters");
            d.planes = std::string(value);
        } else if (name == "nic" || name == "uplink") {
            double v = 0;
            auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
            if (ec != std::errc{} || p != value.data() + value.size() || !(v > 0) || v > 1e9)
                bad(std::string(name) + " must be a positive number of Gbit/s");
            (name == "nic" ? d.nic_gbps : d.uplink_gbps) = v;
        } else {
            bad("unknown item '" + std::string(name) + "' (spines, leaves, planes, nic, uplink)");
        }
    }
    if (!have_spines || !have_leaves) bad("needs spines=S and leaves={...}");
    return d;
}

/// The lanes a process sets up.
enum class lane_kind {
    none,  ///< one connection per peer: nothing is set
    hashed,  ///< k connections per peer, their spines hashed by the switches
    pinned,  ///< connections on the host's receive planes
};

/// What choose_lanes decided, and why where it sets up nothing.
struct lane_choice {
    lane_kind kind = lane_kind::none;
    std::string why;  ///< empty when lanes are set up or SHUNT_FLOW is off
    bool warn = false;  ///< `why` is a request that cannot be met (a warning), not auto keeping one lane
    bool job_wide = false;  ///< `why` holds on every rank alike (rank 0 says it alone)
};

/// Decides the kind of a process's lanes from SHUNT_FLOW's request, SHUNT_FABRIC (`fabric`,
/// null when unset), whether it lists this host (`host` is its name) and whether the host has
/// the plane interfaces `planes`1..S. `auto` pins where the planes exist and otherwise keeps
/// one connection per peer: hashed lanes gain nothing where no phase collides and their extra
/// connections cost more than hashing's collisions on the emulated fabric (bench/README.md), so
/// they come only when asked for (`hashed[:K]`). Called before MPI starts, by every process.
inline lane_choice choose_lanes(const flow_request& req, const fabric_description* fabric, std::string_view host,
                                bool host_has_planes) {
    lane_choice c;
    const bool is_auto = req.mode == lane_mode::automatic;
    const std::string hashed_note =
        "; hashed lanes (more connections whose spines the switches pick) only with SHUNT_FLOW=hashed[:K]";
    // `mistake`: SHUNT_FABRIC contradicts the job, a warning whatever the request.
    const auto keep_one = [&](std::string why, bool job_wide, bool mistake = false) {
        c.why = is_auto && !mistake ? "SHUNT_FLOW=auto keeps one connection per peer: " + why + hashed_note
                                    : std::move(why);
        c.warn = !is_auto || mistake;
        c.job_wide = job_wide;
        return c;
    };
    if (req.mode == lane_mode::off) return c;
    if (fabric == nullptr) {
        if (req.mode == lane_mode::hashed && req.k > 0) return c.kind = lane_kind::hashed, c;
        if (is_auto) return keep_one("SHUNT_FABRIC is not set, so there are no address planes to pin lanes to", true);
        return keep_one("SHUNT_FLOW=" + std::string(req.mode == lane_mode::hashed ? "hashed" : "pinned") +
                            " needs SHUNT_FABRIC (only hashed:K goes without it)",
                        true);
    }
    bool listed = false;
    for (const auto& leaf : fabric->leaves) listed = listed || std::find(leaf.begin(), leaf.end(), host) != leaf.end();
    if (!listed)
        return keep_one("host '" + std::string(host) + "' is not listed in SHUNT_FABRIC; its transfers are not split",
                        false, true);
    if (req.mode == lane_mode::hashed) return c.kind = lane_kind::hashed, c;
    if (fabric->planes.empty())
        return keep_one(is_auto ? "SHUNT_FABRIC names no address planes (planes=PREFIX)"
                                : "SHUNT_FLOW=pinned needs planes=PREFIX in SHUNT_FABRIC",
                        true);
    if (!host_has_planes)
        return keep_one("host '" + std::string(host) + "' lacks the plane interfaces " + fabric->planes + "1.." +
                            fabric->planes + std::to_string(fabric->spines),
                        false);
    c.kind = lane_kind::pinned;
    return c;
}

/// Hosts per leaf of the description's fabric: the largest leaf (smaller leaves leave slots empty).
inline int hosts_per_leaf(const fabric_description& d) {
    std::size_t h = 1;
    for (const auto& l : d.leaves) h = std::max(h, l.size());
    return static_cast<int>(h);
}

/// The fabric a description stands for, with `paths` pinned or hashed. Host i of leaf l is
/// endpoint l * hosts_per_leaf + i.
inline fabric make_fabric(const fabric_description& d, path_control paths) {
    fabric_spec s;
    s.hosts_per_leaf = hosts_per_leaf(d);
    s.hosts = static_cast<int>(d.leaves.size()) * s.hosts_per_leaf;
    s.spines = d.spines;
    s.nic_gbps = d.nic_gbps;
    s.uplink_gbps = d.uplink_gbps;
    s.paths = paths;
    return fabric(s);
}

/// The endpoint of the host named `name`, -1 when the description does not list it.
inline int host_endpoint(const fabric_description& d, std::string_view name) {
    const int per = hosts_per_leaf(d);
    for (std::size_t l = 0; l < d.leaves.size(); ++l)
        for (std::size_t i = 0; i < d.leaves[l].size(); ++i)
            if (d.leaves[l][i] == name) return static_cast<int>(l) * per + static_cast<int>(i);
    return -1;
}

/// The endpoint of each rank when `ranks` ranks fill the listed hosts in order, `per_host` on
/// each (a launcher's by-slot mapping over the hosts in that order). Throws when the hosts are
/// too few.
inline std::vector<int> job_ranks(const fabric_description& d, int ranks, int per_host) {
    if (ranks < 1 || per_host < 1) throw error("flow lanes: a job needs ranks");
    const int per = hosts_per_leaf(d);
    std::vector<int> hosts;
    for (std::size_t l = 0; l < d.leaves.size(); ++l)
        for (std::size_t i = 0; i < d.leaves[l].size(); ++i)
            hosts.push_back(static_cast<int>(l) * per + static_cast<int>(i));
    const std::int64_t need = (static_cast<std::int64_t>(ranks) + per_host - 1) / per_host;
    if (need > static_cast<std::int64_t>(hosts.size()))
        throw error("flow lanes: " + std::to_string(ranks) + " ranks at " + std::to_string(per_host) +
                    " per host need more hosts than SHUNT_FABRIC lists");
    std::vector<int> ep(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) ep[static_cast<std::size_t>(r)] = hosts[static_cast<std::size_t>(r / per_host)];
    return ep;
}

/// The phases a job's collectives make on its placement (`bytes` per rank; only ratios
/// matter): the flat ring and recursive-halving allreduces, the pairwise alltoall (at most 16
/// of its steps), and shunt's hierarchical allreduce over hosts and leaves. Phases without a
/// flow are left out; each phase's name starts with its collective's.
inline std::vector<phase> job_phases(const fabric& fab, std::span<const int> rank_ep, double bytes = 64.0 * 1048576) {
    std::vector<phase> out;
    auto take = [&](std::vector<phase> v, const char* what) {
        for (auto& ph : v) {
            if (ph.flows.empty()) continue;
            ph.name = std::string(what) + ": " + ph.name;
            out.push_back(std::move(ph));
        }
    };
    take(ring_allreduce(fab, rank_ep, bytes), "ring allreduce");
    take(halving_allreduce(fab, rank_ep, bytes), "halving allreduce");
    take(alltoall(fab, rank_ep, bytes / static_cast<double>(rank_ep.size())), "alltoall");
    take(hierarchical_allreduce(fab, rank_ep, fabric_hierarchy(fab, rank_ep), bytes), "hierarchical allreduce");
    return out;
}

/// The spines host `index` of its leaf receives on with k lanes: (index k + j) mod S, j < k.
inline std::vector<int> receive_spines(int index, int k, int spines) {
    if (k < 1 || k > spines || spines < 1 || index < 0) throw error("flow lanes: receive planes need 1 <= k <= spines");
    std::vector<int> out;
    for (int j = 0; j < k; ++j) out.push_back(static_cast<int>((static_cast<std::int64_t>(index) * k + j) % spines));
    return out;
}

/// The routing of a phase when every host receives on receive_spines(its index, k): each
/// spine-crossing flow becomes k equal sub-flows, one on each of its destination's spines.
inline routing route_receive_planes(const fabric& fab, const phase& ph, int k) {
    routing r = detail::cut(fab, ph, k);
    for (std::size_t f = 0; f < ph.flows.size(); ++f) {
        if (!crosses_spine(fab, ph.flows[f])) continue;
        const auto sp = receive_spines(fab.host_of(ph.flows[f].dst) % fab.hosts_per_leaf(), k, fab.spines());
        for (int j = 0; j < k; ++j) r.spine[static_cast<std::size_t>(r.first[f] + j)] = sp[static_cast<std::size_t>(j)];
    }
    return r;
}

/// One phase as the lane planner saw it (maximum loads in seconds, every link counted).
struct lane_phase {
    std::string name;
    int minimal_k = 1;  ///< the coordinated assignment's minimal k for this phase alone
    int k = 1;  ///< the k this phase needs with the job's kind of lanes
    double spray = 0;  ///< ideal spraying
    double ecmp = 0;  ///< random ECMP, expected
    double planned = 0;  ///< the plan's: receive planes (pinned) or random k-split, expected (hashed)
};

/// The lanes of a job: k per peer, pinned or hashed, and why.
struct lane_plan {
    bool pinned = false;
    int k = 1;
    bool reached = true;  ///< every phase's planned load is spraying's (pinned) or within the slack (hashed)
    std::vector<lane_phase> phases;
};

/// Knobs of plan_lanes.
struct lane_options {
    int max_k = 8;  ///< the most lanes per peer (hashed; pinned lanes are at most the spines)
    double hashed_slack = 0.25;  ///< hashed: expected load within this of spraying's
    int seeds = 16;
    std::uint64_t seed = 1;
    double tolerance = 1e-9;
};

/// Plans a job's lanes over `phases`. Pinned (fab.pinned()): the smallest k whose receive
/// planes reach spraying's maximum load on every phase (k = S always does); hashed: the largest
/// of the phases' smallest k whose expected random k-split load is within the slack of
/// spraying's (the k of least expected load where none is). `forced_k` > 0 takes that k (at
/// most S pinned, max_k hashed) and only evaluates it. Deterministic: every rank computes the
/// same plan.
inline lane_plan plan_lanes(const fabric& fab, std::span<const phase> phases, int forced_k = 0,
                            const lane_options& opt = {}) {
    lane_plan plan;
    plan.pinned = fab.pinned();
    const int top = plan.pinned ? fab.spines() : std::max(1, opt.max_k);
    const double slack = plan.pinned ? opt.tolerance : opt.hashed_slack;
    plan_options po;
    po.max_k = std::max(fab.spines(), 1);
    auto load_at = [&](const phase& ph, int k) {
        return plan.pinned ? max_load(fab, link_loads(fab, ph, route_receive_planes(fab, ph, k)))
                           : expected_random_load(fab, ph, k, opt.seeds, opt.seed);
    };
    for (const phase& ph : phases) {
        lane_phase lp;
        lp.name = ph.name;
        lp.spray = max_load(fab, spray_loads(fab, ph));
        lp.ecmp = expected_random_load(fab, ph, 1, opt.seeds, opt.seed);
        lp.minimal_k = minimal_k(fab, ph, po).k;
        if (forced_k <= 0) {
            // This phase alone: the smallest k that reaches the goal, else the least loaded.
            const double goal = lp.spray * (1 + slack) + 1e-15;
            double best = -1;
            for (int k = 1; k <= top; ++k) {
                const double l = load_at(ph, k);
                if (best < 0 || l < best - 1e-15) best = l, lp.k = k;
                if (l <= goal) {
                    lp.k = k;
                    break;
                }
            }
        }
        plan.phases.push_back(std::move(lp));
    }
    auto evaluate = [&](int k) {
        bool all = true;
        for (std::size_t i = 0; i < phases.size(); ++i) {
            lane_phase& lp = plan.phases[i];
            lp.planned = load_at(phases[i], k);
            if (lp.planned > lp.spray * (1 + slack) + 1e-15) all = false;
        }
        return all;
    };
    if (forced_k > 0) {
        plan.k = std::min(forced_k, top);
        plan.reached = evaluate(plan.k);
        return plan;
    }
    plan.k = 1;
    for (const lane_phase& lp : plan.phases) plan.k = std::max(plan.k, lp.k);
    plan.reached = evaluate(plan.k);
    // Pinned: a k one phase needs may unbalance another's receive planes; go up until all hold.
    while (plan.pinned && !plan.reached && plan.k < top) plan.reached = evaluate(++plan.k);
    return plan;
}

}  // namespace shunt::flow
