// tests/unit/flow/test_lanes.cpp: a job's lanes: SHUNT_FLOW and SHUNT_FABRIC texts, the job's placement, receive planes, and the k the planner picks, against counts made here.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <shunt/flow/lanes.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

using namespace shunt::flow;

namespace {

/// A description of L leaves of n hosts named "l<leaf>h<index>".
fabric_description grid(int leaves, int n, int spines, bool planes = true) {
    fabric_description d;
    d.spines = spines;
    for (int l = 0; l < leaves; ++l) {
        d.leaves.emplace_back();
        for (int i = 0; i < n; ++i) {
            std::string name = "l";  // appended piece by piece: GCC 12 warns (-Wrestrict) on "l" + std::string
            name += std::to_string(l);
            name += 'h';
            name += std::to_string(i);
            d.leaves.back().push_back(name);
        }
    }
    if (planes) d.planes = "pl";
    return d;
}

/// Bytes per (leaf, spine) uplink and downlink when every crossing flow of the phase is cut into
/// k pieces on its destination's planes (i k + j) mod S, counted here from scratch, and per NIC.
struct counts {
    std::map<std::pair<int, int>, double> up, down;  // (leaf, spine) -> bytes
    std::map<int, double> nic_out, nic_in;  // host -> bytes
};
counts count_receive_planes(const fabric& fab, const phase& ph, int k) {
    counts c;
    const int S = fab.spines(), H = fab.hosts_per_leaf();
    for (const flow& f : ph.flows) {
        c.nic_out[f.src] += f.bytes;
        c.nic_in[f.dst] += f.bytes;
        const int a = f.src / H, b = f.dst / H;
        if (a == b) continue;
        for (int j = 0; j < k; ++j) {
            const int s = ((f.dst % H) * k + j) % S;
            c.up[{a, s}] += f.bytes / k;
            c.down[{b, s}] += f.bytes / k;
        }
    }
    return c;
}

/// The largest load (seconds) of those counts over every link, NICs included (a phase cannot end
/// before its busiest NIC), and the same with each leaf's outgoing and incoming bytes spread
/// evenly over all spines (spraying's).
double nic_worst(const fabric& fab, const counts& c) {
    double m = 0;
    for (auto& [h, b] : c.nic_out) m = std::max(m, b);
    for (auto& [h, b] : c.nic_in) m = std::max(m, b);
    return m / fab.capacity(fab.nic_up(0));
}
double worst(const fabric& fab, const counts& c) {
    double m = 0;
    for (auto& [key, b] : c.up) m = std::max(m, b);
    for (auto& [key, b] : c.down) m = std::max(m, b);
    return std::max(m / fab.capacity(fab.uplink(0, 0)), nic_worst(fab, c));
}
double even(const fabric& fab, const phase& ph) {
    std::map<int, double> out, in;
    const int H = fab.hosts_per_leaf();
    for (const flow& f : ph.flows)
        if (f.src / H != f.dst / H) out[f.src / H] += f.bytes, in[f.dst / H] += f.bytes;
    double m = 0;
    for (auto& [l, b] : out) m = std::max(m, b);
    for (auto& [l, b] : in) m = std::max(m, b);
    return std::max(m / fab.spines() / fab.capacity(fab.uplink(0, 0)),
                    nic_worst(fab, count_receive_planes(fab, ph, 1)));
}

}  // namespace

TEST_CASE("SHUNT_FLOW: off, auto, hashed[:K], pinned[:K]; anything else is an error") {
    CHECK(parse_flow_request("") == flow_request{});
    CHECK(parse_flow_request("off") == flow_request{});
    CHECK(parse_flow_request("Auto").mode == lane_mode::automatic);
    CHECK(parse_flow_request("hashed") == flow_request{lane_mode::hashed, 0});
    CHECK(parse_flow_request(" PINNED:2 ") == flow_request{lane_mode::pinned, 2});
    CHECK(parse_flow_request("hashed:64") == flow_request{lane_mode::hashed, 64});
    for (const char* bad : {"on", "hashed:0", "hashed:65", "hashed:", "pinned:x", "hashed:2:3", "spray", "auto:2"})
        CHECK_THROWS_AS(parse_flow_request(bad), shunt::error);
}

TEST_CASE("SHUNT_FABRIC: spines, leaves of hosts, planes and capacities") {
    const auto d = parse_fabric_description(" spines=4 ; leaves={a,b|c , d,e} ;planes=pl;nic=25;uplink=100");
    CHECK(d.spines == 4);
    REQUIRE(d.leaves.size() == 2);
    CHECK(d.leaves[0] == std::vector<std::string>{"a", "b"});
    CHECK(d.leaves[1] == std::vector<std::string>{"c", "d", "e"});
    CHECK(d.planes == "pl");
    CHECK(d.nic_gbps == 25);
    CHECK(d.uplink_gbps == 100);
    CHECK(hosts_per_leaf(d) == 3);
    CHECK(host_endpoint(d, "a") == 0);
    CHECK(host_endpoint(d, "b") == 1);
    CHECK(host_endpoint(d, "c") == 3);  // leaf 1 starts at 1 x 3
    CHECK(host_endpoint(d, "e") == 5);
    CHECK(host_endpoint(d, "x") == -1);
    for (const char* bad : {"leaves={a}", "spines=2", "spines=0;leaves={a}", "spines=2;leaves=a,b",
                            "spines=2;leaves={a,a}", "spines=2;leaves={a|a}", "spines=2;leaves={a,}",
                            "spines=2;leaves={a b}", "spines=2;leaves={a};planes=", "spines=2;leaves={a};nic=0",
                            "spines=2;leaves={a};uplink=-1", "spines=2;leaves={a};colour=red", "spines=2;leaves={a};x"})
        CHECK_THROWS_AS(parse_fabric_description(bad), shunt::error);
}

TEST_CASE("the job's ranks fill the listed hosts in order, ranks-per-host at a time") {
    const auto d = parse_fabric_description("spines=2;leaves={a,b,c|d}");
    // Leaf 1 has one host of 3 slots: endpoints 0, 1, 2 and 3.
    CHECK(job_ranks(d, 4, 1) == std::vector<int>{0, 1, 2, 3});
    CHECK(job_ranks(d, 7, 2) == std::vector<int>{0, 0, 1, 1, 2, 2, 3});
    CHECK(job_ranks(d, 2, 1) == std::vector<int>{0, 1});
    CHECK_THROWS_AS(job_ranks(d, 9, 2), shunt::error);
    CHECK_THROWS_AS(job_ranks(d, 0, 1), shunt::error);
}

TEST_CASE("receive planes: host i of a leaf receives on spines (i k + j) mod S") {
    CHECK(receive_spines(0, 1, 4) == std::vector<int>{0});
    CHECK(receive_spines(3, 1, 4) == std::vector<int>{3});
    CHECK(receive_spines(5, 1, 4) == std::vector<int>{1});
    CHECK(receive_spines(1, 2, 4) == std::vector<int>{2, 3});
    CHECK(receive_spines(3, 3, 4) == std::vector<int>{1, 2, 3});
    CHECK(receive_spines(2, 4, 4) == std::vector<int>{0, 1, 2, 3});
    CHECK_THROWS_AS(receive_spines(0, 5, 4), shunt::error);
    CHECK_THROWS_AS(receive_spines(0, 0, 4), shunt::error);
    // The routing puts each crossing flow's k pieces on exactly its destination's planes.
    const fabric fab = make_fabric(grid(3, 3, 4), path_control::pinned);
    const auto ranks = job_ranks(grid(3, 3, 4), 9, 1);
    const phase ph = shift(fab, ranks, 6e6, 4)[0];
    const routing r = route_receive_planes(fab, ph, 2);
    for (std::size_t f = 0; f < ph.flows.size(); ++f) {
        if (!crosses_spine(fab, ph.flows[f])) {
            CHECK(r.parts(f) == 1);
            continue;
        }
        REQUIRE(r.parts(f) == 2);
        const auto want = receive_spines(ph.flows[f].dst % 3, 2, 4);
        CHECK(r.spine[static_cast<std::size_t>(r.first[f])] == want[0]);
        CHECK(r.spine[static_cast<std::size_t>(r.first[f] + 1)] == want[1]);
    }
}

TEST_CASE("pinned plans reach spraying on every phase of the job, at the k counted here") {
    // (leaves, hosts per leaf, spines, the smallest k whose receive planes bring every phase's
    // busiest link down to spraying's, from the counts below, written down). Below S / gcd(n, S)
    // where a phase is bound by its NICs; 4 for 6 hosts on 4 spines, where the alltoall's step 5
    // sends 5 flows out of each leaf (S / gcd(5, 4)).
    struct cse {
        int leaves, n, spines, k;
    };
    for (const cse c : {cse{4, 2, 2, 1}, cse{4, 3, 2, 2}, cse{4, 2, 4, 1}, cse{4, 4, 4, 1}, cse{3, 4, 8, 1},
                        cse{4, 6, 4, 4}, cse{2, 3, 3, 1}, cse{5, 4, 2, 2}}) {
        CAPTURE(c.leaves);
        CAPTURE(c.n);
        CAPTURE(c.spines);
        const auto d = grid(c.leaves, c.n, c.spines);
        const fabric fab = make_fabric(d, path_control::pinned);
        const auto ranks = job_ranks(d, c.leaves * c.n, 1);
        const auto phases = job_phases(fab, ranks);
        REQUIRE(!phases.empty());
        // The counts: the smallest k spreading every phase's leaf-spine bytes evenly.
        int want = 0;
        for (int k = 1; k <= c.spines && want == 0; ++k) {
            bool all = true;
            for (const auto& ph : phases)
                all = all && worst(fab, count_receive_planes(fab, ph, k)) <= even(fab, ph) * (1 + 1e-9) + 1e-15;
            if (all) want = k;
        }
        CHECK(want == c.k);
        const lane_plan plan = plan_lanes(fab, phases);
        CHECK(plan.pinned);
        CHECK(plan.k == want);
        CHECK(plan.reached);
        for (const auto& p : plan.phases) {
            CAPTURE(p.name);
            CHECK(p.planned == doctest::Approx(p.spray));
            CHECK(p.ecmp >= p.spray * (1 - 1e-9));
        }
    }
}

TEST_CASE("k = S spreads any phase evenly; a forced k is evaluated as given") {
    const auto d = grid(5, 3, 4);
    const fabric fab = make_fabric(d, path_control::pinned);
    const auto ranks = job_ranks(d, 15, 1);
    auto phases = job_phases(fab, ranks);
    phases.push_back(permutation(fab, ranks, 3e6, 7)[0]);
    for (const auto& ph : phases) CHECK(worst(fab, count_receive_planes(fab, ph, 4)) == doctest::Approx(even(fab, ph)));
    const lane_plan forced = plan_lanes(fab, phases, 1);
    CHECK(forced.k == 1);
    CHECK_FALSE(forced.reached);  // one plane per host cannot spread 3 hosts over 4 spines
    CHECK(plan_lanes(fab, phases, 9).k == 4);  // at most S pinned
}

TEST_CASE("hashed plans: k = 1 where no link can carry two flows, more lanes where ECMP collides") {
    {
        // One host per leaf: every phase has at most one flow out of and into each leaf.
        const auto d = grid(4, 1, 2, false);
        const fabric fab = make_fabric(d, path_control::hashed);
        const lane_plan plan = plan_lanes(fab, job_phases(fab, job_ranks(d, 4, 1)));
        CHECK_FALSE(plan.pinned);
        CHECK(plan.k == 1);
        CHECK(plan.reached);
        for (const auto& p : plan.phases) CHECK(p.ecmp == doctest::Approx(p.spray));
    }
    {
        const auto d = grid(4, 2, 2, false);
        const fabric fab = make_fabric(d, path_control::hashed);
        lane_options opt;
        opt.max_k = 8;
        const lane_plan plan = plan_lanes(fab, job_phases(fab, job_ranks(d, 8, 1)), 0, opt);
        CHECK(plan.k > 1);
        CHECK(plan.k <= 8);
        // Every phase's expected load falls with more lanes and never below spraying.
        for (const auto& p : plan.phases) {
            CHECK(p.planned <= p.ecmp * (1 + 1e-9));
            CHECK(p.planned >= p.spray * (1 - 1e-9));
        }
        CHECK(plan_lanes(fab, job_phases(fab, job_ranks(d, 8, 1)), 3, opt).k == 3);
    }
}

TEST_CASE("auto pins where the planes exist and otherwise keeps one lane; hashed only when asked for") {
    const auto with_planes = parse_fabric_description("spines=2;leaves={a,b|c,d};planes=pl");
    const auto no_planes = parse_fabric_description("spines=2;leaves={a,b|c,d}");
    const flow_request automatic{lane_mode::automatic, 0}, hashed{lane_mode::hashed, 0}, hashed4{lane_mode::hashed, 4},
        pinned{lane_mode::pinned, 0};
    // (request, fabric, host, host has the plane interfaces) -> (kind, said as a warning, said by rank 0 alone)
    struct cse {
        const char* what;
        flow_request req;
        const fabric_description* fabric;
        const char* host;
        bool has_planes;
        lane_kind kind;
        bool warn, job_wide;
    };
    const lane_kind none = lane_kind::none;
    for (const cse c : {
             cse{"off", flow_request{}, &with_planes, "a", true, none, false, false},
             cse{"auto, planes here", automatic, &with_planes, "c", true, lane_kind::pinned, false, false},
             cse{"auto, no fabric", automatic, nullptr, "a", false, none, false, true},
             cse{"auto, fabric without planes", automatic, &no_planes, "a", false, none, false, true},
             cse{"auto, fabric without planes, interfaces anyway", automatic, &no_planes, "a", true, none, false, true},
             cse{"auto, this host lacks the planes", automatic, &with_planes, "b", false, none, false, false},
             cse{"auto, host not listed", automatic, &with_planes, "x", true, none, true, false},
             cse{"hashed:4, no fabric", hashed4, nullptr, "a", false, lane_kind::hashed, false, false},
             cse{"hashed, no fabric, no K", hashed, nullptr, "a", false, none, true, true},
             cse{"hashed, fabric without planes", hashed, &no_planes, "d", false, lane_kind::hashed, false, false},
             cse{"hashed, planes here", hashed, &with_planes, "d", true, lane_kind::hashed, false, false},
             cse{"pinned, planes here", pinned, &with_planes, "a", true, lane_kind::pinned, false, false},
             cse{"pinned, no fabric", pinned, nullptr, "a", true, none, true, true},
             cse{"pinned, fabric without planes", pinned, &no_planes, "a", true, none, true, true},
             cse{"pinned, this host lacks the planes", pinned, &with_planes, "a", false, none, true, false},
         }) {
        CAPTURE(c.what);
        const lane_choice got = choose_lanes(c.req, c.fabric, c.host, c.has_planes);
        CHECK(got.kind == c.kind);
        if (c.kind != none || c.req.mode == lane_mode::off) {
            CHECK(got.why.empty());
            continue;
        }
        CHECK(!got.why.empty());
        CHECK(got.warn == c.warn);
        CHECK(got.job_wide == c.job_wide);
        // auto says that it keeps one connection and that hashed lanes must be asked for (a
        // SHUNT_FABRIC that does not list the host is a warning of its own).
        const bool says_auto = got.why.find("auto keeps one connection") != std::string::npos &&
                               got.why.find("hashed[:K]") != std::string::npos;
        CHECK(says_auto == (c.req.mode == lane_mode::automatic && !c.warn));
    }
}
