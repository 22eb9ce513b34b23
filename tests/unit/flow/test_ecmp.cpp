// tests/unit/flow/test_ecmp.cpp: random ECMP's expected maximum load against an exact balls-into-bins expectation and an independent Monte Carlo.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <shunt/flow/assign.hpp>
#include <shunt/flow/fabric.hpp>
#include <shunt/flow/load.hpp>
#include <shunt/flow/pattern.hpp>
#include <shunt/flow/planner.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace shunt::flow;

namespace {

// E[max bin] of n balls thrown uniformly into S bins, exactly: P(max <= m) is
// n! / S^n [x^n] (sum_{j<=m} x^j / j!)^S, and E[max] = sum_{m>=0} P(max > m).
double expected_max_bin(int n, int S) {
    double e = 0;
    for (int m = 0; m < n; ++m) {
        std::vector<double> term(static_cast<std::size_t>(n) + 1, 0.0), poly(static_cast<std::size_t>(n) + 1, 0.0);
        double f = 1;
        for (int j = 0; j <= std::min(m, n); ++j) {
            if (j > 0) f *= j;
            term[static_cast<std::size_t>(j)] = 1.0 / f;
        }
        poly[0] = 1;
        for (int b = 0; b < S; ++b) {
            std::vector<double> next(static_cast<std::size_t>(n) + 1, 0.0);
            for (int i = 0; i <= n; ++i)
                for (int j = 0; i + j <= n && j <= m; ++j)
                    next[static_cast<std::size_t>(i + j)] +=
                        poly[static_cast<std::size_t>(i)] * term[static_cast<std::size_t>(j)];
            poly = std::move(next);
        }
        // n! / S^n, in logs to stay in range.
        double lg = std::lgamma(n + 1.0) - n * std::log(static_cast<double>(S));
        const double p_le = std::exp(lg) * poly[static_cast<std::size_t>(n)];
        e += 1 - p_le;
    }
    return e;
}

fabric make(int leaves, int n, int spines) {
    fabric_spec s;
    s.hosts = leaves * n;
    s.hosts_per_leaf = n;
    s.spines = spines;
    return fabric(s);
}

}  // namespace

TEST_CASE("the exact reference itself: small cases by hand") {
    CHECK(expected_max_bin(1, 5) == doctest::Approx(1.0));
    CHECK(expected_max_bin(2, 2) == doctest::Approx(1.5));  // both in one bin with probability 1/2
    CHECK(expected_max_bin(3, 1) == doctest::Approx(3.0));
}

TEST_CASE("ECMP from one leaf to distinct leaves: expected maximum load is the expected fullest bin") {
    // Leaf 0's n hosts each send to a host on its own destination leaf: only leaf 0's uplinks
    // can collide, so the maximum leaf-spine load is the fullest of S bins holding n balls.
    for (const auto& c : {std::pair{8, 8}, {16, 8}, {12, 16}, {32, 24}}) {
        const int n = c.first, S = c.second;  // named copies: CAPTURE cannot take structured bindings (clang 14)
        CAPTURE(n);
        CAPTURE(S);
        const fabric fab = make(n + 1, n, S);
        phase ph;
        const double bytes = 1e6;
        for (int i = 0; i < n; ++i) ph.flows.push_back({i, (i + 1) * n, bytes});
        const int seeds = 3000;
        const double mean = expected_random_load(fab, ph, 1, seeds, 11, link_scope::fabric);
        const double unit = bytes / fab.capacity(fab.uplink(0, 0));
        CHECK(mean / unit == doctest::Approx(expected_max_bin(n, S)).epsilon(0.03));
    }
}

TEST_CASE("ECMP and random k-split on a random permutation: against an independent Monte Carlo") {
    const fabric fab = make(16, 8, 8);
    const auto ranks = place(fab, placement::block);
    const phase ph = permutation(fab, ranks, 1e6, 5)[0];
    for (int k : {1, 2, 4}) {
        CAPTURE(k);
        const int seeds = 2000;
        const double model = expected_random_load(fab, ph, k, seeds, 3, link_scope::fabric);
        // Reference: its own generator and counting, sub-flows of 1/k.
        std::minstd_rand rng(12345);
        double sum = 0;
        for (int t = 0; t < seeds; ++t) {
            std::vector<int> up(static_cast<std::size_t>(16 * 8), 0), down(up.size(), 0);
            int worst = 0;
            for (const flow& f : ph.flows) {
                const int a = f.src / 8, b = f.dst / 8;
                if (a == b) continue;
                for (int j = 0; j < k; ++j) {
                    const int s = static_cast<int>(rng() % 8);
                    worst = std::max({worst, ++up[static_cast<std::size_t>(a * 8 + s)],
                                      ++down[static_cast<std::size_t>(b * 8 + s)]});
                }
            }
            sum += static_cast<double>(worst) / k;
        }
        const double unit = 1e6 / fab.capacity(fab.uplink(0, 0));
        CHECK(model / unit == doctest::Approx(sum / seeds).epsilon(0.03));
    }
}

TEST_CASE("ECMP's ratio to spraying grows with collisions and coordination removes it") {
    // The paper's setting at 8..64 spines, n = S flows per leaf over 64 leaves.
    for (int S : {8, 16, 32, 64}) {
        const fabric fab = make(64, S, S);
        phase ph;
        for (int a = 0; a < 64; ++a)
            for (int i = 0; i < S; ++i) ph.flows.push_back({a * S + i, ((a + 1) % 64) * S + i, 1e6});
        const double spray = max_load(fab, spray_loads(fab, ph), link_scope::fabric);
        const double ecmp = expected_random_load(fab, ph, 1, 50, 1, link_scope::fabric);
        CAPTURE(S);
        CHECK(ecmp / spray > 3.0);  // the fullest of 64 x 2 groups of S balls in S bins
        CHECK(coordinated_max_load(fab, ph, 1, link_scope::fabric) == doctest::Approx(spray));
    }
}
