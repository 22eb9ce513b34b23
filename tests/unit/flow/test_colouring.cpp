// tests/unit/flow/test_colouring.cpp: the equitable edge colouring of bipartite multigraphs, checked by counting each vertex's colours.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <shunt/flow/colouring.hpp>

#include <random>
#include <vector>

using shunt::flow::bipartite_edge;
using shunt::flow::equitable_edge_colouring;

namespace {

// Every vertex of degree d must carry each colour floor(d/c) or ceil(d/c) times.
bool equitable(int left, int right, const std::vector<bipartite_edge>& edges, const std::vector<int>& colour, int c) {
    std::vector<std::vector<int>> lc(static_cast<std::size_t>(left), std::vector<int>(static_cast<std::size_t>(c))),
        rc(static_cast<std::size_t>(right), std::vector<int>(static_cast<std::size_t>(c)));
    for (std::size_t i = 0; i < edges.size(); ++i) {
        if (colour[i] < 0 || colour[i] >= c) return false;
        ++lc[static_cast<std::size_t>(edges[i].u)][static_cast<std::size_t>(colour[i])];
        ++rc[static_cast<std::size_t>(edges[i].v)][static_cast<std::size_t>(colour[i])];
    }
    for (const auto* side : {&lc, &rc})
        for (const auto& counts : *side) {
            int d = 0;
            for (int x : counts) d += x;
            for (int x : counts)
                if (x != d / c && x != (d + c - 1) / c) return false;
        }
    return true;
}

}  // namespace

TEST_CASE("random bipartite multigraphs get equitable colourings") {
    std::mt19937 rng(42);
    for (int trial = 0; trial < 300; ++trial) {
        const int left = 1 + static_cast<int>(rng() % 12), right = 1 + static_cast<int>(rng() % 12);
        const int c = 1 + static_cast<int>(rng() % 9);
        const int m = static_cast<int>(rng() % 200);
        std::vector<bipartite_edge> edges;
        for (int i = 0; i < m; ++i)
            edges.push_back({static_cast<int>(rng() % static_cast<unsigned>(left)),
                             static_cast<int>(rng() % static_cast<unsigned>(right))});
        const auto colour = equitable_edge_colouring(left, right, edges, c);
        REQUIRE(colour.size() == edges.size());
        CHECK_MESSAGE(equitable(left, right, edges, colour, c), "trial " << trial);
    }
}

TEST_CASE("heavy parallel edges and regular multigraphs") {
    // One pair with many parallel edges; a d-regular multigraph whose degree is a multiple of c
    // (every vertex sees every colour exactly d/c times).
    std::vector<bipartite_edge> pair(37, bipartite_edge{0, 0});
    auto c1 = equitable_edge_colouring(1, 1, pair, 5);
    CHECK(equitable(1, 1, pair, c1, 5));
    std::vector<bipartite_edge> reg;
    const int n = 8, d = 12;
    for (int s = 0; s < d; ++s)
        for (int u = 0; u < n; ++u) reg.push_back({u, (u + s * 3 + s / 2) % n});
    auto c2 = equitable_edge_colouring(n, n, reg, 4);
    CHECK(equitable(n, n, reg, c2, 4));
}

TEST_CASE("a large graph stays equitable") {
    std::mt19937 rng(7);
    std::vector<bipartite_edge> edges;
    const int L = 500;
    for (int i = 0; i < 60000; ++i) edges.push_back({static_cast<int>(rng() % L), static_cast<int>(rng() % L)});
    for (int c : {7, 24, 64}) {
        auto col = equitable_edge_colouring(L, L, edges, c);
        CHECK(equitable(L, L, edges, col, c));
    }
}

TEST_CASE("bad input is refused, not a crash") {
    std::vector<bipartite_edge> e{{0, 3}};
    CHECK_THROWS_AS(equitable_edge_colouring(1, 2, e, 2), shunt::error);
    CHECK_THROWS_AS(equitable_edge_colouring(1, 4, e, 0), shunt::error);
    CHECK(equitable_edge_colouring(0, 0, {}, 3).empty());
}
