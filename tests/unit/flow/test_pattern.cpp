// tests/unit/flow/test_pattern.cpp: flow sets of the patterns: the hierarchical allreduce's phases against what shunt's own schedule sends (recorded), placements, flat patterns.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <shunt/collectives/schedule.hpp>
#include <shunt/flow/fabric.hpp>
#include <shunt/flow/hierarchical.hpp>
#include <shunt/flow/pattern.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

using namespace shunt::flow;

namespace {

// A transport that moves nothing and records the bytes each rank sends to each other rank:
// running shunt's schedule on it, rank by rank, gives the schedule's traffic as an oracle.
struct recording_transport {
    struct reduction_type {
        std::int64_t element_size() const { return 1; }
    };
    int me = 0, p = 1;
    std::map<std::pair<int, int>, double>* sent = nullptr;

    int size() const { return p; }
    int rank() const { return me; }
    void note(int peer, std::int64_t n) {
        if (n > 0) (*sent)[{me, peer}] += static_cast<double>(n);
    }
    void send(int peer, const void*, std::int64_t n) { note(peer, n); }
    void recv(int, void*, std::int64_t) {}
    void sendrecv(int dst, const void*, std::int64_t sn, int, void*, std::int64_t) { note(dst, sn); }
    void exchange(std::span<const shunt::send_message> sends, std::span<const shunt::recv_message>) {
        for (const auto& m : sends) note(m.peer, m.bytes);
    }
    void reduce(const reduction_type&, const void*, void*, std::int64_t) {}
    void copy(void*, const void*, std::int64_t) {}
    std::vector<std::byte> scratch(std::int64_t n) { return std::vector<std::byte>(static_cast<std::size_t>(n)); }
};

// Bytes rank a sends to rank b over shunt's hierarchical allreduce (reduce-scatter, then
// allgather) of n one-byte elements, pairs on one host left out.
std::map<std::pair<int, int>, double> schedule_traffic(const fabric& fab, const std::vector<int>& ranks,
                                                       const shunt::hierarchy& h, std::int64_t n,
                                                       shunt::flat_algorithm algo) {
    std::map<std::pair<int, int>, double> sent;
    const auto own = shunt::detail::free_ranges(h, n);
    for (int r = 0; r < h.size(); ++r) {
        recording_transport t{r, h.size(), &sent};
        std::vector<std::byte> work(static_cast<std::size_t>(n));
        shunt::detail::hierarchical_reduce_scatter(t, h, work.data(), own, {}, algo);
        shunt::collective_options opt;
        opt.flat = algo;
        shunt::detail::hierarchical_allgather(t, h, work.data(), 1, own, algo, opt);
    }
    std::map<std::pair<int, int>, double> out;
    for (auto [pair, b] : sent)
        if (fab.host_of(ranks[static_cast<std::size_t>(pair.first)]) !=
            fab.host_of(ranks[static_cast<std::size_t>(pair.second)]))
            out[{ranks[static_cast<std::size_t>(pair.first)], ranks[static_cast<std::size_t>(pair.second)]}] += b;
    return out;
}

// The same from the model's phases: sum over phases of repeat x bytes, per (src, dst) NIC.
std::map<std::pair<int, int>, double> model_traffic(const std::vector<phase>& phases) {
    std::map<std::pair<int, int>, double> out;
    for (const auto& ph : phases)
        for (const flow& f : ph.flows) out[{f.src, f.dst}] += static_cast<double>(ph.repeat) * f.bytes;
    return out;
}

fabric make(int hosts, int per_leaf, int rails = 1) {
    fabric_spec s;
    s.hosts = hosts;
    s.hosts_per_leaf = per_leaf;
    s.rails = rails;
    s.spines = 4;
    return fabric(s);
}

}  // namespace

TEST_CASE("owner counts equal the representatives' rule applied owner by owner") {
    for (const auto& c : {std::tuple{8, 4, 1}, {12, 4, 2}, {7, 3, 2}, {10, 4, 3}}) {
        const int hosts = std::get<0>(c), per_leaf = std::get<1>(c), rails = std::get<2>(c);
        const fabric fab = make(hosts, per_leaf, rails);
        for (placement pl : {placement::block, placement::spread, placement::random}) {
            const auto ranks = place(fab, pl, 4);
            const auto h = fabric_hierarchy(fab, ranks);
            const auto cnt = shunt::flow::detail::owner_counts(h);
            for (int k = 0; k <= h.levels(); ++k)
                for (int y = 0; y < h.size(); ++y) {
                    int brute = 0;
                    for (int r = 0; r < h.size(); ++r) brute += h.representative(k, h.group_of(k, y), r) == y ? 1 : 0;
                    CHECK(cnt[static_cast<std::size_t>(k)][static_cast<std::size_t>(y)] == brute);
                }
        }
    }
}

TEST_CASE("hierarchical allreduce phases carry exactly the bytes shunt's schedule sends, pair by pair") {
    // Regular and irregular groups (a partly filled last leaf), several rails, every placement,
    // ring and halving inside the groups.
    for (const auto& c :
         {std::tuple{8, 4, 1}, {16, 4, 1}, {8, 2, 2}, {12, 4, 2}, {6, 4, 1}, {9, 3, 1}, {10, 4, 2}, {32, 8, 1}}) {
        // Named copies: CAPTURE cannot take structured bindings (clang 14).
        const int hosts = std::get<0>(c), per_leaf = std::get<1>(c), rails = std::get<2>(c);
        const fabric fab = make(hosts, per_leaf, rails);
        for (placement pl : {placement::block, placement::spread, placement::random}) {
            for (auto algo : {shunt::flat_algorithm::automatic, shunt::flat_algorithm::ring}) {
                CAPTURE(hosts);
                CAPTURE(per_leaf);
                CAPTURE(rails);
                CAPTURE(static_cast<int>(pl));
                CAPTURE(static_cast<int>(algo));
                const auto ranks = place(fab, pl, 7);
                const auto h = fabric_hierarchy(fab, ranks);
                const std::int64_t n = static_cast<std::int64_t>(ranks.size()) * 64;
                const auto want = schedule_traffic(fab, ranks, h, n, algo);
                const auto got = model_traffic(hierarchical_allreduce(fab, ranks, h, static_cast<double>(n), algo));
                REQUIRE(got.size() == want.size());
                for (const auto& [pair, b] : want) {
                    const int src = pair.first, dst = pair.second;
                    CAPTURE(src);
                    CAPTURE(dst);
                    REQUIRE(got.count(pair) == 1);
                    CHECK(got.at(pair) == doctest::Approx(b));
                }
            }
        }
    }
}

TEST_CASE("placements put every rank on its own NIC; spread deals hosts over leaves") {
    const fabric fab = make(12, 4, 2);
    for (placement pl : {placement::block, placement::spread, placement::random}) {
        const auto ranks = place(fab, pl, 3);
        REQUIRE(ranks.size() == 24);
        CHECK(std::set<int>(ranks.begin(), ranks.end()).size() == 24);
        for (std::size_t r = 0; r < ranks.size(); ++r) CHECK(fab.rail_of(ranks[r]) == static_cast<int>(r % 2));
    }
    const auto spread = place(fab, placement::spread);
    // Consecutive hosts (every rails-th rank) on different leaf groups.
    CHECK(fab.host_of(spread[0]) / 4 != fab.host_of(spread[2]) / 4);
    CHECK(fab.host_of(spread[2]) / 4 != fab.host_of(spread[4]) / 4);
}

TEST_CASE("flat patterns: ring, halving, alltoall and point-to-point volumes") {
    const fabric fab = make(16, 4);
    const auto ranks = place(fab, placement::block);
    const double B = 1 << 20;
    auto volume = [](const std::vector<phase>& ps) {
        double v = 0;
        for (const auto& p : ps)
            for (const auto& f : p.flows) v += static_cast<double>(p.repeat) * f.bytes;
        return v;
    };
    // Allreduce: every rank sends 2 (p - 1) / p of the vector, in both algorithms.
    CHECK(volume(ring_allreduce(fab, ranks, B)) == doctest::Approx(16 * 2.0 * 15 / 16 * B));
    CHECK(volume(halving_allreduce(fab, ranks, B)) == doctest::Approx(16 * 2.0 * 15 / 16 * B));
    CHECK(halving_allreduce(fab, ranks, B).size() == 4);
    // Alltoall: p - 1 steps in all, whatever the sampling.
    for (int m : {1, 4, 15, 100}) {
        std::int64_t steps = 0;
        for (const auto& p : alltoall(fab, ranks, B, m)) steps += p.repeat;
        CHECK(steps == 15);
    }
    CHECK(volume(alltoall(fab, ranks, B, 100)) == doctest::Approx(16.0 * 15 * B));
    // Point to point: one flow per rank; a permutation has no fixed point.
    CHECK(shift(fab, ranks, B, 4)[0].flows.size() == 16);
    CHECK(xor_pairs(fab, ranks, B, 4)[0].flows.size() == 16);
    const auto perm = permutation(fab, ranks, B, 9)[0];
    std::set<int> dsts;
    for (const auto& f : perm.flows) {
        CHECK(f.src != f.dst);
        dsts.insert(f.dst);
    }
    CHECK(dsts.size() == perm.flows.size());
}
