// tests/mpi/collectives/test_pipeline.cpp: pipelined hierarchical schedules equal the library's results and the unpipelined schedule's bit for bit.
#include "mpi_test_main.hpp"

#include <shunt/collectives/allgather.hpp>
#include <shunt/collectives/allreduce.hpp>
#include <shunt/collectives/bcast.hpp>
#include <shunt/collectives/mpi_transport.hpp>
#include <shunt/collectives/pipeline.hpp>
#include <shunt/collectives/reduce_scatter.hpp>
#include <shunt/collectives/reduce_scatter_block.hpp>
#include <shunt/topology/topology.hpp>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

int main(int argc, char** argv) { return run_mpi_doctest(argc, argv); }

namespace {

/// Options without pipelining, and pipelined ones with chunks of `chunk` bytes and `depth`.
shunt::collective_options plain(shunt::flat_algorithm algo) {
    shunt::collective_options o;
    o.flat = algo;
    o.pipeline_bytes = 0;
    return o;
}
shunt::collective_options piped(shunt::flat_algorithm algo, std::int64_t chunk, int depth) {
    shunt::collective_options o;
    o.flat = algo;
    o.pipeline_bytes = chunk;
    o.pipeline_depth = depth;
    return o;
}

/// Every (chunk bytes, depth) the tests run: chunks that do not divide the counts, one element a
/// chunk piece, the cap on chunks, depths 2 to above the lanes.
struct setting {
    std::int64_t chunk;
    int depth;
};
constexpr setting settings[] = {{24, 2}, {1000, 3}, {4096, 8}, {8, 40}};
constexpr shunt::flat_algorithm algos[] = {shunt::flat_algorithm::ring, shunt::flat_algorithm::halving,
                                           shunt::flat_algorithm::automatic};

/// Each virtual topology of the world and of the world in reverse order (the cyclic placements
/// are among test_specs: alternate and lonely).
template <class F>
void for_each_topology(F&& f) {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    static MPI_Comm rev = [&] {
        MPI_Comm c;
        MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &c);
        return c;
    }();
    for (MPI_Comm comm : {MPI_COMM_WORLD, rev})
        for (const auto& spec : test_specs(size)) {
            CAPTURE(spec);
            f(shunt::topology::of(comm, spec), comm);
        }
}

std::mt19937_64 rng_of(MPI_Comm comm, std::uint64_t salt) {
    int r = 0;
    MPI_Comm_rank(comm, &r);
    return std::mt19937_64(salt * 7919 + static_cast<std::uint64_t>(r));
}

template <class V>
bool same_bits(const std::vector<V>& a, const std::vector<V>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(V)) == 0;
}

/// Elements of `got` further from the library's `want` than reassociation explains.
std::int64_t far(const std::vector<double>& got, const std::vector<double>& want, int ranks) {
    std::int64_t bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
        bad += std::fabs(got[i] - want[i]) > 8 * ranks * DBL_EPSILON * std::max(1.0, std::fabs(want[i]));
    return bad;
}

}  // namespace

TEST_CASE("the chunk count: one without lanes or below two chunks, capped, equal for equal input") {
    shunt::mpi_transport t(MPI_COMM_WORLD);
    CHECK(t.lanes() > 0);
    auto o = piped(shunt::flat_algorithm::automatic, 1000, 3);
    CHECK(shunt::detail::pipeline_chunks(t, 1999, o) == 1);
    CHECK(shunt::detail::pipeline_chunks(t, 2000, o) == 2);
    CHECK(shunt::detail::pipeline_chunks(t, 7777, o) == 7);
    CHECK(shunt::detail::pipeline_chunks(t, 1 << 30, o) == shunt::detail::max_pipeline_chunks);
    CHECK(shunt::detail::pipeline_chunks(t, 1 << 30, plain(shunt::flat_algorithm::automatic)) == 1);
    // A nonblocking collective's transport (a tag of its own) has no lanes: not pipelined.
    shunt::mpi_transport nb(MPI_COMM_WORLD, 0x1000);
    CHECK(nb.lanes() == 0);
    CHECK(shunt::detail::pipeline_chunks(nb, 1 << 30, o) == 1);
    // Chunks of owner ranges: every element in exactly one chunk, in its owner's range.
    const std::vector<shunt::detail::owned_range> own = {{0, 7}, {7, 0}, {7, 1}, {8, 13}};
    std::vector<int> hits(21, 0);
    for (int c = 0; c < 5; ++c)
        for (std::size_t r = 0; r < own.size(); ++r) {
            const auto piece = shunt::detail::chunk_ranges(own, 5, c)[r];
            CHECK(piece.offset >= own[r].offset);
            CHECK(piece.offset + piece.count <= own[r].offset + own[r].count);
            for (std::int64_t i = piece.offset; i < piece.offset + piece.count; ++i)
                ++hits[static_cast<std::size_t>(i)];
        }
    for (int h : hits) CHECK(h == 1);
    // Packed chunks: ranges adjacent in the vector stay adjacent, in the same order.
    const std::vector<shunt::detail::owned_range> scattered = {{10, 4}, {0, 6}, {6, 4}, {14, 0}, {14, 9}};
    for (int c = 0; c < 3; ++c) {
        const auto pk = shunt::detail::pack_chunk(scattered, 3, c);
        CHECK(pk.local[1].offset == 0);
        CHECK(pk.local[2].offset == pk.local[1].offset + pk.local[1].count);
        CHECK(pk.local[0].offset == pk.local[2].offset + pk.local[2].count);
        CHECK(pk.local[4].offset == pk.local[0].offset + pk.local[0].count);
        CHECK(pk.total == pk.local[4].offset + pk.local[4].count);
        for (std::size_t r = 0; r < scattered.size(); ++r) CHECK(pk.local[r].count == pk.from[r].count);
    }
}

TEST_CASE("pipelined allreduce equals the library and the unpipelined schedule bit for bit") {
    for_each_topology([](const shunt::topology& topo, MPI_Comm comm) {
        const int p = topo.size();
        for (std::int64_t count : {std::int64_t{1}, std::int64_t{p + 1}, std::int64_t{1001}, std::int64_t{4099}}) {
            CAPTURE(count);
            auto rng = rng_of(comm, static_cast<std::uint64_t>(count));
            std::uniform_real_distribution<double> real(-1.0, 1.0);
            std::vector<double> in(static_cast<std::size_t>(count)), want(in.size());
            for (auto& v : in) v = real(rng);
            std::vector<std::int64_t> ii(in.size()), iwant(in.size());
            for (auto& v : ii) v = static_cast<std::int64_t>(rng());
            MPI_Allreduce(in.data(), want.data(), static_cast<int>(count), MPI_DOUBLE, MPI_SUM, comm);
            MPI_Allreduce(ii.data(), iwant.data(), static_cast<int>(count), MPI_INT64_T, MPI_SUM, comm);
            for (auto algo : algos) {
                CAPTURE(static_cast<int>(algo));
                std::vector<double> ref(in.size());
                shunt::allreduce(topo, in.data(), ref.data(), count, MPI_DOUBLE, MPI_SUM, plain(algo));
                for (const setting& s : settings) {
                    CAPTURE(s.chunk);
                    CAPTURE(s.depth);
                    std::vector<double> out(in.size()), io(in);
                    shunt::allreduce(topo, in.data(), out.data(), count, MPI_DOUBLE, MPI_SUM,
                                     piped(algo, s.chunk, s.depth));
                    CHECK(same_bits(out, ref));
                    CHECK(far(out, want, p) == 0);
                    shunt::allreduce(topo, MPI_IN_PLACE, io.data(), count, MPI_DOUBLE, MPI_SUM,
                                     piped(algo, s.chunk, s.depth));
                    CHECK(same_bits(io, ref));
                    std::vector<std::int64_t> iout(ii.size());
                    shunt::allreduce(topo, ii.data(), iout.data(), count, MPI_INT64_T, MPI_SUM,
                                     piped(algo, s.chunk, s.depth));
                    CHECK(iout == iwant);
                    // MIN of floats: signed zeros tell the order of the comparisons apart.
                    std::vector<float> fz(in.size()), fref(in.size()), fout(in.size());
                    for (std::size_t i = 0; i < fz.size(); ++i) fz[i] = rng() % 2 ? 0.0f : -0.0f;
                    shunt::allreduce(topo, fz.data(), fref.data(), count, MPI_FLOAT, MPI_MIN, plain(algo));
                    shunt::allreduce(topo, fz.data(), fout.data(), count, MPI_FLOAT, MPI_MIN,
                                     piped(algo, s.chunk, s.depth));
                    CHECK(same_bits(fout, fref));
                }
            }
        }
    });
}

TEST_CASE("pipelined reduce_scatter and reduce_scatter_block equal the library and the unpipelined schedule") {
    for_each_topology([](const shunt::topology& topo, MPI_Comm comm) {
        const int p = topo.size(), me = topo.rank();
        for (std::int64_t per : {std::int64_t{1}, std::int64_t{333}, std::int64_t{1025}}) {
            CAPTURE(per);
            auto rng = rng_of(comm, static_cast<std::uint64_t>(per) + 11);
            std::uniform_real_distribution<double> real(-1.0, 1.0);
            const std::int64_t n = per * p;
            std::vector<double> in(static_cast<std::size_t>(n)), want(static_cast<std::size_t>(per));
            for (auto& v : in) v = real(rng);
            MPI_Reduce_scatter_block(in.data(), want.data(), static_cast<int>(per), MPI_DOUBLE, MPI_SUM, comm);
            // Uneven counts (one rank empty) for MPI_Reduce_scatter, integers.
            std::vector<int> counts(static_cast<std::size_t>(p));
            std::int64_t total = 0;
            for (int r = 0; r < p; ++r)
                total += counts[static_cast<std::size_t>(r)] = r == 1 ? 0 : static_cast<int>(per + r);
            std::vector<std::int32_t> ii(static_cast<std::size_t>(total)),
                iwant(static_cast<std::size_t>(counts[static_cast<std::size_t>(me)]));
            for (auto& v : ii) v = static_cast<std::int32_t>(rng() % 100000);
            MPI_Reduce_scatter(ii.data(), iwant.data(), counts.data(), MPI_INT32_T, MPI_SUM, comm);
            for (auto algo : algos) {
                CAPTURE(static_cast<int>(algo));
                std::vector<double> ref(want.size());
                shunt::reduce_scatter_block(topo, in.data(), ref.data(), per, MPI_DOUBLE, MPI_SUM, plain(algo));
                for (const setting& s : settings) {
                    CAPTURE(s.chunk);
                    CAPTURE(s.depth);
                    const auto o = piped(algo, s.chunk, s.depth);
                    std::vector<double> out(want.size()), io(in);
                    shunt::reduce_scatter_block(topo, in.data(), out.data(), per, MPI_DOUBLE, MPI_SUM, o);
                    CHECK(same_bits(out, ref));
                    CHECK(far(out, want, p) == 0);
                    shunt::reduce_scatter_block(topo, MPI_IN_PLACE, io.data(), per, MPI_DOUBLE, MPI_SUM, o);
                    io.resize(want.size());
                    CHECK(same_bits(io, ref));
                    std::vector<std::int32_t> iout(iwant.size() + 1, -1);
                    shunt::reduce_scatter(topo, ii.data(), iout.data(), counts.data(), MPI_INT32_T, MPI_SUM, o);
                    CHECK(iout.back() == -1);
                    iout.pop_back();
                    CHECK(iout == iwant);
                }
            }
        }
    });
}

TEST_CASE("pipelined allgather and bcast equal the library") {
    for_each_topology([](const shunt::topology& topo, MPI_Comm comm) {
        const int p = topo.size(), me = topo.rank();
        for (std::int64_t count : {std::int64_t{1}, std::int64_t{777}, std::int64_t{2049}}) {
            CAPTURE(count);
            auto rng = rng_of(comm, static_cast<std::uint64_t>(count) + 5);
            std::vector<std::int32_t> mine(static_cast<std::size_t>(count)), want(static_cast<std::size_t>(count * p));
            for (auto& v : mine) v = static_cast<std::int32_t>(rng());
            MPI_Allgather(mine.data(), static_cast<int>(count), MPI_INT32_T, want.data(), static_cast<int>(count),
                          MPI_INT32_T, comm);
            for (auto algo : algos)
                for (const setting& s : settings) {
                    CAPTURE(static_cast<int>(algo));
                    CAPTURE(s.chunk);
                    CAPTURE(s.depth);
                    auto o = piped(algo, s.chunk, s.depth);
                    std::vector<std::int32_t> out(want.size(), -7), io(want.size(), -7);
                    shunt::allgather(topo, mine.data(), out.data(), count, MPI_INT32_T, o);
                    CHECK(out == want);
                    std::memcpy(io.data() + me * count, mine.data(), mine.size() * sizeof(std::int32_t));
                    shunt::allgather(topo, MPI_IN_PLACE, io.data(), count, MPI_INT32_T, o);
                    CHECK(io == want);
                    for (int root : {0, p - 1}) {
                        CAPTURE(root);
                        // Scatter-allgather above the tree threshold, trees below.
                        for (std::int64_t tree : {std::int64_t{64}, std::int64_t{1} << 30}) {
                            o.bcast_tree_bytes = tree;
                            std::vector<std::int32_t> b(want.size(), -3);
                            if (me == root) b = want;
                            shunt::bcast(topo, b.data(), count * p, MPI_INT32_T, root, o);
                            CHECK(b == want);
                        }
                    }
                }
        }
    });
}
