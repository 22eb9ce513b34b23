// tests/unit/flow/test_fluid.cpp: the max-min fair fluid model against hand-computed schedules, its bounds, and its shortcut against full simulation.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <shunt/flow/assign.hpp>
#include <shunt/flow/fabric.hpp>
#include <shunt/flow/fluid.hpp>
#include <shunt/flow/load.hpp>
#include <shunt/flow/pattern.hpp>

#include <random>
#include <utility>
#include <vector>

using namespace shunt::flow;
using path = std::vector<std::pair<int, double>>;

TEST_CASE("two flows on one link: fair halves, then the survivor alone") {
    fluid_network net({1.0});
    net.add(1.0, path{{0, 1.0}});
    net.add(3.0, path{{0, 1.0}});
    // Both at 1/2 until t = 2 (the first done), then 2 bytes left at rate 1.
    CHECK(net.simulate() == doctest::Approx(4.0));
    CHECK(net.run() == doctest::Approx(4.0));
}

TEST_CASE("a flow held back on another link: rates from the textbook max-min example") {
    // Link 0: f1, f2. Link 1: f2, f3, f4. Max-min: f2, f3, f4 at 1/3 (link 1), f1 at 2/3.
    // Unit flows: f1 done at 1.5, the rest at 3.
    fluid_network net({1.0, 1.0});
    net.add(1.0, path{{0, 1.0}});
    net.add(1.0, path{{0, 1.0}, {1, 1.0}});
    net.add(1.0, path{{1, 1.0}});
    net.add(1.0, path{{1, 1.0}});
    CHECK(net.simulate() == doctest::Approx(3.0));
}

TEST_CASE("max-min can finish later than the most loaded link's bytes allow") {
    // Link A: f (1), g (0.9). Link B: f, h (1). Link C: h and nine flows of 0.1.
    // Until t = 1 C holds h at 0.1 and A holds f at 0.5, so B idles at 0.6; the loads are
    // A 1.9, B 2.0, C 1.9, but the last flow ends at 2.4 (computed by hand, event by event).
    fluid_network net({1.0, 1.0, 1.0});
    net.add(1.0, path{{0, 1.0}, {1, 1.0}});  // f
    net.add(0.9, path{{0, 1.0}});  // g
    net.add(1.0, path{{1, 1.0}, {2, 1.0}});  // h
    for (int i = 0; i < 9; ++i) net.add(0.1, path{{2, 1.0}});
    CHECK(net.simulate() == doctest::Approx(2.4));
    CHECK(net.run() == doctest::Approx(2.4));  // the bounds do not meet here: it simulates
    CHECK(net.events() > 0);
}

TEST_CASE("weights: a sprayed flow uses each of its links at a fraction of its rate") {
    // One flow sprayed half and half over links 0 and 1 (capacity 1 each): rate 2; another
    // flow alone on link 1 shares it.
    fluid_network net({1.0, 1.0, 10.0});
    net.add(2.0, path{{0, 0.5}, {1, 0.5}, {2, 1.0}});
    net.add(1.0, path{{1, 1.0}});
    // Water-filling: link 1 fills at level t with 0.5 t + t = 1 -> t = 2/3 for both; link 0
    // then has 2/3 of 1 used... the sprayed flow is frozen at 2/3 by link 1. The unit flow ends
    // at 1.5; then the sprayed flow (2 - 1 = 1 left) runs at 2: ends at 2.
    CHECK(net.simulate() == doctest::Approx(2.0));
}

TEST_CASE("random networks: the simulation lies between the bounds, and equal flows meet them") {
    std::mt19937 rng(5);
    for (int trial = 0; trial < 200; ++trial) {
        const int links = 2 + static_cast<int>(rng() % 6);
        std::vector<double> cap(static_cast<std::size_t>(links));
        for (auto& c : cap) c = 0.5 + (rng() % 4);
        const bool equal = trial % 2 == 0;
        fluid_network a(cap), b(cap);
        const int flows = 1 + static_cast<int>(rng() % 12);
        std::vector<double> load(cap.size(), 0.0);
        std::vector<double> size;
        std::vector<path> paths;
        for (int f = 0; f < flows; ++f) {
            path p;
            for (int l = 0; l < links; ++l)
                if (rng() % 3 == 0) p.push_back({l, 1.0});
            if (p.empty()) p.push_back({static_cast<int>(rng() % static_cast<unsigned>(links)), 1.0});
            const double s = equal ? 1.0 : 0.25 * (1 + rng() % 8);
            for (auto [l, w] : p) load[static_cast<std::size_t>(l)] += s / cap[static_cast<std::size_t>(l)];
            a.add(s, p);
            b.add(s, p);
            size.push_back(s);
            paths.push_back(p);
        }
        double lower = 0, upper = 0;
        for (double v : load) lower = std::max(lower, v);
        for (std::size_t f = 0; f < paths.size(); ++f) {
            double worst = 0;
            for (auto [l, w] : paths[f]) {
                double n = 0;
                for (const auto& q : paths)
                    for (auto [l2, w2] : q) n += l2 == l ? 1.0 : 0.0;
                worst = std::max(worst, n / cap[static_cast<std::size_t>(l)]);
            }
            upper = std::max(upper, size[f] * worst);
        }
        const double sim = a.simulate();
        CAPTURE(trial);
        CHECK(sim >= lower * (1 - 1e-9));
        CHECK(sim <= upper * (1 + 1e-9));
        CHECK(b.run() == doctest::Approx(sim).epsilon(1e-9));
        if (equal) CHECK(sim == doctest::Approx(lower).epsilon(1e-9));
    }
}

TEST_CASE("completion_time's shortcut equals the simulation on fabric phases") {
    fabric_spec s;
    s.hosts = 48;
    s.hosts_per_leaf = 6;
    s.spines = 4;
    s.uplink_gbps = 40;
    const fabric fab(s);
    const auto ranks = place(fab, placement::random, 3);
    for (const auto& ph : {permutation(fab, ranks, 1e6, 2)[0], shift(fab, ranks, 1e6, 5)[0]}) {
        for (int k : {1, 2, 3}) {
            const routing r = route_random(fab, ph, k, 9);
            std::vector<double> cap(static_cast<std::size_t>(fab.links()));
            for (int l = 0; l < fab.links(); ++l) cap[static_cast<std::size_t>(l)] = fab.capacity(l);
            fluid_network net(cap);
            for (std::size_t f = 0; f < ph.flows.size(); ++f)
                for (int j = r.first[f]; j < r.first[f + 1]; ++j) {
                    path p{{fab.nic_up(ph.flows[f].src), 1.0}, {fab.nic_down(ph.flows[f].dst), 1.0}};
                    const int sp = r.spine[static_cast<std::size_t>(j)];
                    if (sp >= 0) {
                        p.push_back({fab.uplink(fab.leaf_of(ph.flows[f].src), sp), 1.0});
                        p.push_back({fab.downlink(sp, fab.leaf_of(ph.flows[f].dst)), 1.0});
                    }
                    net.add(ph.flows[f].bytes / r.parts(f), p);
                }
            CAPTURE(k);
            const double sim = net.simulate();
            CHECK(completion_time(fab, ph, r) == doctest::Approx(sim).epsilon(1e-9));
            CHECK(sim >= max_load(fab, link_loads(fab, ph, r)) * (1 - 1e-9));
        }
        // Spraying: its completion is its most loaded link's (evenly spread flows).
        CHECK(spray_completion_time(fab, ph) >= max_load(fab, spray_loads(fab, ph)) * (1 - 1e-9));
    }
}
