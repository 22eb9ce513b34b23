// tests/unit/flow/test_theorem.cpp: the coordinated k-split against brute force (no assignment of the sub-flows beats it; its minimal k reaches spraying), k = S / gcd(n, S), and the edge cases.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <shunt/flow/assign.hpp>
#include <shunt/flow/fabric.hpp>
#include <shunt/flow/load.hpp>
#include <shunt/flow/pattern.hpp>
#include <shunt/flow/planner.hpp>

#include <algorithm>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

using namespace shunt::flow;

namespace {

// The least maximum load (seconds) over every assignment of k sub-flows per spine-crossing flow
// to usable spines, by exhaustive search (branch and bound: a partial assignment is dropped only
// when it is already no better than the best complete one). Loads over `scope`.
double brute_force(const fabric& fab, const phase& ph, int k, link_scope scope) {
    struct sub {
        int a, b;
        double t;
        std::vector<int> usable;
    };
    std::vector<sub> subs;
    const double up = fab.capacity(fab.uplink(0, 0)), nic = fab.capacity(fab.nic_up(0));
    std::vector<double> nic_load(2 * static_cast<std::size_t>(fab.endpoints()), 0.0);
    for (const flow& f : ph.flows) {
        nic_load[static_cast<std::size_t>(f.src)] += f.bytes / nic;
        nic_load[static_cast<std::size_t>(fab.endpoints() + f.dst)] += f.bytes / nic;
        const int a = fab.leaf_of(f.src), b = fab.leaf_of(f.dst);
        if (a == b) continue;
        std::vector<int> u;
        for (int s = 0; s < fab.spines(); ++s)
            if (fab.alive(a, s) && fab.alive(b, s)) u.push_back(s);
        for (int j = 0; j < k; ++j) subs.push_back({a, b, f.bytes / k / up, u});
    }
    double floor_load = 0;
    if (scope == link_scope::all)
        for (double v : nic_load) floor_load = std::max(floor_load, v);
    const auto S = static_cast<std::size_t>(fab.spines());
    std::vector<double> U(static_cast<std::size_t>(fab.leaves()) * S, 0.0), D(U.size(), 0.0);
    double best = 1e300;
    auto rec = [&](auto&& self, std::size_t i, double cur) -> void {
        if (cur >= best * (1 - 1e-12)) return;
        if (i == subs.size()) {
            best = cur;
            return;
        }
        const sub& x = subs[i];
        for (int s : x.usable) {
            auto& u = U[static_cast<std::size_t>(x.a) * S + static_cast<std::size_t>(s)];
            auto& d = D[static_cast<std::size_t>(x.b) * S + static_cast<std::size_t>(s)];
            u += x.t;
            d += x.t;
            self(self, i + 1, std::max({cur, u, d}));
            u -= x.t;
            d -= x.t;
        }
    };
    rec(rec, 0, floor_load);
    return best;
}

// A fabric of `leaves` leaves of n hosts and S spines; every host of leaf a sends `bytes` to the
// host at the same index of leaf a + 1: n equal flows out of and into every leaf (the paper's
// setting).
phase next_leaf(const fabric& fab, double bytes) {
    phase ph;
    const int n = fab.hosts_per_leaf(), L = fab.leaves();
    for (int a = 0; a < L; ++a)
        for (int i = 0; i < n; ++i) ph.flows.push_back({a * n + i, ((a + 1) % L) * n + i, bytes});
    return ph;
}

fabric make(int leaves, int n, int spines, double nic = 100, double uplink = 100,
            std::vector<std::pair<int, int>> failed = {}) {
    fabric_spec s;
    s.hosts = leaves * n;
    s.hosts_per_leaf = n;
    s.spines = spines;
    s.nic_gbps = nic;
    s.uplink_gbps = uplink;
    s.failed = std::move(failed);
    return fabric(s);
}

bool near(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b)) + 1e-18; }

}  // namespace

TEST_CASE("no assignment beats the coordinated one, and its minimal k reaches spraying (brute force)") {
    // (leaves, hosts per leaf, spines, largest k searched by brute force)
    struct shape {
        int L, n, S, kmax;
    };
    for (shape sh : {shape{2, 3, 2, 3}, shape{2, 2, 3, 3}, shape{3, 2, 4, 2}, shape{2, 3, 2, 2}, shape{3, 1, 3, 3},
                     shape{2, 1, 4, 4}, shape{2, 2, 2, 3}}) {
        CAPTURE(sh.L);
        CAPTURE(sh.n);
        CAPTURE(sh.S);
        const fabric fab = make(sh.L, sh.n, sh.S);
        const phase ph = next_leaf(fab, 1e6);
        const double spray = max_load(fab, spray_loads(fab, ph), link_scope::fabric);
        int brute_k = 0;
        for (int k = 1; k <= sh.kmax; ++k) {
            CAPTURE(k);
            const double best = brute_force(fab, ph, k, link_scope::fabric);
            const double coord = max_load(fab, link_loads(fab, ph, route_coordinated(fab, ph, k)), link_scope::fabric);
            CHECK(near(coord, best));  // the colouring is optimal among all assignments
            CHECK(near(coordinated_max_load(fab, ph, k, link_scope::fabric), best));  // and the closed form too
            CHECK(best >= spray * (1 - 1e-9));  // nothing beats spraying
            if (brute_k == 0 && near(best, spray)) brute_k = k;
        }
        plan_options opt;
        opt.scope = link_scope::fabric;
        const k_choice c = minimal_k(fab, ph, opt);
        CHECK(c.reached);
        CHECK(c.k == brute_k);
        CHECK(c.k == sh.S / std::gcd(sh.n, sh.S));
    }
}

TEST_CASE("random small phases: coordinated equals the brute-force optimum for every k") {
    std::mt19937 rng(2024);
    for (int trial = 0; trial < 40; ++trial) {
        const int L = 2 + static_cast<int>(rng() % 3), n = 1 + static_cast<int>(rng() % 3),
                  S = 2 + static_cast<int>(rng() % 2);
        const fabric fab = make(L, n, S);
        phase ph;
        const int flows = 2 + static_cast<int>(rng() % 4);
        for (int i = 0; i < flows; ++i) {
            const int src = static_cast<int>(rng() % static_cast<unsigned>(fab.endpoints()));
            int dst = static_cast<int>(rng() % static_cast<unsigned>(fab.endpoints()));
            if (dst == src) dst = (dst + 1) % fab.endpoints();
            ph.flows.push_back({src, dst, 4e6});
        }
        for (int k = 1; k <= 3; ++k) {
            int crossing = 0;
            for (const flow& f : ph.flows) crossing += crosses_spine(fab, f) ? k : 0;
            if (crossing > 12) continue;
            CAPTURE(trial);
            CAPTURE(k);
            for (link_scope scope : {link_scope::fabric, link_scope::all}) {
                const double best = brute_force(fab, ph, k, scope);
                CHECK(near(max_load(fab, link_loads(fab, ph, route_coordinated(fab, ph, k)), scope), best));
                CHECK(near(coordinated_max_load(fab, ph, k, scope), best));
            }
        }
    }
}

TEST_CASE("k = S / gcd(n, S) on the paper's setting, for n flows per leaf and S spines") {
    plan_options opt;
    opt.scope = link_scope::fabric;
    for (int S : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64}) {
        for (int n = 1; n <= 40; ++n) {
            CAPTURE(S);
            CAPTURE(n);
            const fabric fab = make(4, n, S);
            const phase ph = next_leaf(fab, 1e6);
            const k_choice c = minimal_k(fab, ph, opt);
            CHECK(c.reached);
            CHECK(c.k == S / std::gcd(n, S));
            // The assignment the planner builds has the closed form's load.
            const double built =
                max_load(fab, link_loads(fab, ph, route_coordinated(fab, ph, c.k)), link_scope::fabric);
            CHECK(near(built, c.spray));
        }
    }
}

TEST_CASE("edge cases: n a multiple of S, gcd cases, undersubscribed and oversubscribed uplinks") {
    plan_options all;  // every link counts: the phase's completion
    // n a multiple of S: no split needed, but the coordination is.
    {
        const fabric fab = make(4, 16, 8);
        const phase ph = next_leaf(fab, 1e6);
        CHECK(minimal_k(fab, ph, all).k == 1);
        CHECK(near(coordinated_max_load(fab, ph, 1), max_load(fab, spray_loads(fab, ph))));
    }
    // gcd cases: (n, S) -> k.
    for (const auto& c : {std::tuple{12, 8, 2}, {6, 4, 2}, {5, 3, 3}, {9, 6, 2}, {10, 4, 2}, {7, 7, 1}}) {
        const int n = std::get<0>(c), S = std::get<1>(c), k = std::get<2>(c);  // CAPTURE takes no structured bindings
        CAPTURE(n);
        CAPTURE(S);
        // Uplinks as fast as the NICs and n > S: the leaf-spine links are the bottleneck.
        const fabric fab = make(3, n, S);
        CHECK(minimal_k(fab, next_leaf(fab, 1e6), all).k == k);
    }
    // n < S with uplinks as fast as NICs: the NIC links carry the most, so k = 1 already gives the
    // phase's best completion, though the leaf-spine links alone would want S / gcd(n, S).
    {
        const fabric fab = make(3, 3, 12);
        const phase ph = next_leaf(fab, 1e6);
        CHECK(minimal_k(fab, ph, all).k == 1);
        plan_options core;
        core.scope = link_scope::fabric;
        CHECK(minimal_k(fab, ph, core).k == 4);
    }
    // Oversubscribed uplinks (4:1): the core dominates and k = S / gcd(n, S) again.
    {
        const fabric fab = make(3, 3, 12, 100, 100.0 * 3 / (4 * 12));
        CHECK(minimal_k(fab, next_leaf(fab, 1e6), all).k == 4);
    }
    // Undersubscribed (uplinks 4x a leaf's NIC total): k = 1 whatever n and S.
    {
        const fabric fab = make(3, 5, 3, 100, 100.0 * 5 * 4 / 3);
        CHECK(minimal_k(fab, next_leaf(fab, 1e6), all).k == 1);
    }
}

TEST_CASE("failed links: the assignment uses only the links that remain and matches brute force") {
    std::mt19937 rng(99);
    int checked = 0;
    for (int trial = 0; trial < 30; ++trial) {
        const int L = 2 + static_cast<int>(rng() % 2), n = 1 + static_cast<int>(rng() % 3), S = 3;
        std::vector<std::pair<int, int>> failed{
            {static_cast<int>(rng() % static_cast<unsigned>(L)), static_cast<int>(rng() % 3u)}};
        if (rng() % 2)
            failed.push_back({static_cast<int>(rng() % static_cast<unsigned>(L)), static_cast<int>(rng() % 3u)});
        const fabric fab = make(L, n, S, 100, 100, failed);
        const phase ph = next_leaf(fab, 1e6);
        for (int k = 1; k <= 2; ++k) {
            if (static_cast<int>(ph.flows.size()) * k > 12) continue;
            CAPTURE(trial);
            CAPTURE(k);
            const routing r = route_coordinated(fab, ph, k);
            for (std::size_t f = 0; f < ph.flows.size(); ++f)
                for (int j = r.first[f]; j < r.first[f + 1]; ++j) {
                    const int s = r.spine[static_cast<std::size_t>(j)];
                    REQUIRE(s >= 0);
                    CHECK(fab.alive(fab.leaf_of(ph.flows[f].src), s));
                    CHECK(fab.alive(fab.leaf_of(ph.flows[f].dst), s));
                }
            const double best = brute_force(fab, ph, k, link_scope::fabric);
            CHECK(near(max_load(fab, link_loads(fab, ph, r), link_scope::fabric), best));
            ++checked;
        }
    }
    CHECK(checked > 20);
}

TEST_CASE("failed links: a leaf cut off from every common spine is an error, not a crash") {
    // Leaf 0 keeps only spine 0, leaf 1 only spine 1: no path between them.
    const fabric fab = make(2, 1, 2, 100, 100, {{0, 1}, {1, 0}});
    const phase ph = next_leaf(fab, 1e6);
    CHECK_THROWS_AS(route_coordinated(fab, ph, 1), shunt::error);
    CHECK_THROWS_AS(route_random(fab, ph, 1, 1), shunt::error);
    CHECK_THROWS_AS(spray_loads(fab, ph), shunt::error);
    fabric_spec bad;
    bad.failed = {{99, 0}};
    CHECK_THROWS_AS(fabric{bad}, shunt::error);
}
