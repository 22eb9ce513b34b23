// tests/unit/flow/test_planner.cpp: the planner's interface: the k and lanes a transfer is told, hashed against pinned fabrics, exact splitting of bytes.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <shunt/flow/fabric.hpp>
#include <shunt/flow/load.hpp>
#include <shunt/flow/pattern.hpp>
#include <shunt/flow/planner.hpp>

#include <numeric>
#include <vector>

using namespace shunt::flow;

namespace {

fabric make(path_control paths, int hosts = 48, int per_leaf = 12, int spines = 8) {
    fabric_spec s;
    s.hosts = hosts;
    s.hosts_per_leaf = per_leaf;
    s.spines = spines;
    s.paths = paths;
    return fabric(s);
}

}  // namespace

TEST_CASE("pinned fabric: every transfer of the phase is told the phase's k and its spines") {
    const fabric fab = make(path_control::pinned);
    const auto ranks = place(fab, placement::block);
    const phase ph = shift(fab, ranks, 8e6, 12)[0];  // every host to the same index one leaf on
    const phase_plan plan(fab, ph);
    CHECK(plan.pinned());
    CHECK(plan.k() == 2);  // 12 flows per leaf, 8 spines: 8 / gcd(12, 8)
    CHECK(plan.choice().reached);
    // The lanes a transfer gets are the assignment's, and loading them reaches spraying.
    routing r;
    r.first.push_back(0);
    for (const flow& f : ph.flows) {
        const transfer_plan t = plan.find(f.src, f.dst);
        REQUIRE(t.k == 2);
        REQUIRE(t.lanes.size() == 2);
        for (int s : t.lanes) {
            CHECK(s >= 0);
            CHECK(s < 8);
            r.spine.push_back(s);
        }
        r.first.push_back(r.first.back() + t.k);
    }
    CHECK(max_load(fab, link_loads(fab, ph, r)) == doctest::Approx(max_load(fab, spray_loads(fab, ph))));
    // A transfer the phase does not have goes unsplit.
    const transfer_plan none = plan.find(0, 1);
    CHECK(none.k == 1);
    CHECK(none.lanes.empty());
}

TEST_CASE("hashed fabric: lanes are left to the switches, k from the expected load") {
    const fabric fab = make(path_control::hashed);
    const auto ranks = place(fab, placement::block);
    const phase ph = shift(fab, ranks, 8e6, 12)[0];
    plan_options opt;
    opt.seeds = 32;
    const phase_plan plan(fab, ph, opt);
    CHECK_FALSE(plan.pinned());
    const transfer_plan t = plan.find(ph.flows[0].src, ph.flows[0].dst);
    CHECK(t.k == plan.k());
    for (int s : t.lanes) CHECK(s == -1);
    // The chosen k's expected load is no worse than ECMP's (k = 1).
    CHECK(plan.choice().load <= expected_random_load(fab, ph, 1, 32, opt.seed) * (1 + 1e-12));
    CHECK(plan.choice().load == doctest::Approx(expected_random_load(fab, ph, plan.k(), 32, opt.seed)));
}

TEST_CASE("a flow inside one leaf is never split") {
    const fabric fab = make(path_control::pinned);
    const auto ranks = place(fab, placement::block);
    const phase ph = shift(fab, ranks, 8e6, 1)[0];  // mostly neighbours on the same leaf
    const phase_plan plan(fab, ph);
    const transfer_plan inside = plan.find(ranks[0], ranks[1]);
    CHECK(inside.k == 1);
    REQUIRE(inside.lanes.size() == 1);
    CHECK(inside.lanes[0] == -1);
}

TEST_CASE("split_bytes cuts a transfer into k parts that reassemble it exactly") {
    for (std::int64_t bytes : {0LL, 1LL, 7LL, 1000LL, (1LL << 33) + 5}) {
        for (int k : {1, 2, 3, 7, 64}) {
            const auto parts = split_bytes(bytes, k);
            REQUIRE(parts.size() == static_cast<std::size_t>(k));
            CHECK(std::accumulate(parts.begin(), parts.end(), std::int64_t{0}) == bytes);
            CHECK(parts.front() - parts.back() <= 1);
        }
    }
    CHECK_THROWS_AS(split_bytes(10, 0), shunt::error);
    CHECK_THROWS_AS(split_bytes(-1, 2), shunt::error);
}

TEST_CASE("bad fabrics are refused with a clear error") {
    fabric_spec s;
    s.hosts = 0;
    CHECK_THROWS_AS(fabric{s}, shunt::error);
    s.hosts = 4;
    s.spines = 0;
    CHECK_THROWS_AS(fabric{s}, shunt::error);
    s.spines = 2;
    s.nic_gbps = -1;
    CHECK_THROWS_AS(fabric{s}, shunt::error);
}
