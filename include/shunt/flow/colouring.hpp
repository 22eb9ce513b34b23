// shunt/flow/colouring.hpp: equitable edge colouring of a bipartite multigraph (the coordinated assignment of sub-flows to spines).
#pragma once

#include <shunt/errors.hpp>

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace shunt::flow {

/// One edge of a bipartite multigraph: left vertex u, right vertex v.
struct bipartite_edge {
    int u = 0;
    int v = 0;
};

/// Colours the edges of a bipartite multigraph (left vertices 0..left-1, right 0..right-1) with
/// `colours` colours so that every vertex of degree d has each colour on floor(d / colours) or
/// ceil(d / colours) of its edges (an equitable colouring; one exists for every bipartite
/// multigraph). Returns the colour of each edge. Deterministic.
///
/// Method: each vertex is cut into copies of `colours` edges each (the last copy takes the rest),
/// and the copies' graph, of degree at most `colours`, gets a proper edge colouring (Konig's
/// theorem) by alternating paths; a full copy then carries every colour once and the last copy
/// distinct colours, which is the equitable split. Time O(E * colours) plus the alternating
/// paths, memory O(E + vertices * colours).
inline std::vector<int> equitable_edge_colouring(int left, int right, std::span<const bipartite_edge> edges,
                                                 int colours) {
    if (colours < 1) throw error("edge colouring: at least one colour");
    const std::size_t E = edges.size();
    std::vector<int> colour(E, 0);
    if (colours == 1 || E == 0) return colour;
    const auto c = static_cast<std::size_t>(colours);
    // Copies: the j-th edge of a vertex goes to its copy j / colours.
    std::vector<int> seen_l(static_cast<std::size_t>(left), 0), seen_r(static_cast<std::size_t>(right), 0);
    std::vector<int> base_l(static_cast<std::size_t>(left) + 1, 0), base_r(static_cast<std::size_t>(right) + 1, 0);
    for (const auto& e : edges) {
        if (e.u < 0 || e.u >= left || e.v < 0 || e.v >= right) throw error("edge colouring: vertex out of range");
        ++seen_l[static_cast<std::size_t>(e.u)];
        ++seen_r[static_cast<std::size_t>(e.v)];
    }
    for (int i = 0; i < left; ++i)
        base_l[static_cast<std::size_t>(i) + 1] =
            base_l[static_cast<std::size_t>(i)] + (seen_l[static_cast<std::size_t>(i)] + colours - 1) / colours;
    for (int i = 0; i < right; ++i)
        base_r[static_cast<std::size_t>(i) + 1] =
            base_r[static_cast<std::size_t>(i)] + (seen_r[static_cast<std::size_t>(i)] + colours - 1) / colours;
    const std::size_t nl = static_cast<std::size_t>(base_l[static_cast<std::size_t>(left)]);
    const std::size_t nv = nl + static_cast<std::size_t>(base_r[static_cast<std::size_t>(right)]);
    std::vector<std::pair<std::uint32_t, std::uint32_t>> ends(E);  // (left copy, right copy)
    std::fill(seen_l.begin(), seen_l.end(), 0);
    std::fill(seen_r.begin(), seen_r.end(), 0);
    for (std::size_t i = 0; i < E; ++i) {
        const auto& e = edges[i];
        const int cu = base_l[static_cast<std::size_t>(e.u)] + seen_l[static_cast<std::size_t>(e.u)]++ / colours;
        const int cv = base_r[static_cast<std::size_t>(e.v)] + seen_r[static_cast<std::size_t>(e.v)]++ / colours;
        ends[i] = {static_cast<std::uint32_t>(cu), static_cast<std::uint32_t>(nl + static_cast<std::size_t>(cv))};
    }
    // at[x * c + a]: the edge of colour a at vertex x, or -1.
    constexpr std::int64_t none = -1;
    std::vector<std::int64_t> at(nv * c, none);
    auto slot = [&](std::size_t x, int a) -> std::int64_t& { return at[x * c + static_cast<std::size_t>(a)]; };
    auto free_colour = [&](std::size_t x) {
        for (int a = 0; a < colours; ++a)
            if (slot(x, a) == none) return a;
        return -1;  // unreachable: a copy has at most `colours` edges and one is still uncoloured
    };
    auto other = [&](std::size_t e, std::size_t x) {
        return ends[e].first == x ? static_cast<std::size_t>(ends[e].second) : static_cast<std::size_t>(ends[e].first);
    };
    std::vector<std::size_t> path;
    for (std::size_t e = 0; e < E; ++e) {
        const std::size_t x = ends[e].first, y = ends[e].second;
        const int a = free_colour(x), b = free_colour(y);
        if (a < 0 || b < 0) throw error("edge colouring: internal error (no free colour)");
        int use = a;
        if (slot(y, a) != none) {
            if (slot(x, b) == none) {
                use = b;
            } else {
                // The a/b alternating path from y (a first) cannot reach x in a bipartite graph;
                // swapping its colours frees a at y.
                path.clear();
                std::size_t z = y;
                int want = a;
                while (slot(z, want) != none) {
                    const auto f = static_cast<std::size_t>(slot(z, want));
                    path.push_back(f);
                    z = other(f, z);
                    want = want == a ? b : a;
                }
                for (std::size_t f : path) {
                    slot(ends[f].first, colour[f]) = none;
                    slot(ends[f].second, colour[f]) = none;
                }
                for (std::size_t f : path) {
                    colour[f] = colour[f] == a ? b : a;
                    slot(ends[f].first, colour[f]) = static_cast<std::int64_t>(f);
                    slot(ends[f].second, colour[f]) = static_cast<std::int64_t>(f);
                }
            }
        }
        colour[e] = use;
        slot(x, use) = static_cast<std::int64_t>(e);
        slot(y, use) = static_cast<std::int64_t>(e);
    }
    return colour;
}

}  // namespace shunt::flow
