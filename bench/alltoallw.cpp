// bench/alltoallw.cpp: bench-alltoallw, the MPI library's MPI_Neighbor_alltoallw (a 3-D halo of subarray faces) and MPI_Alltoallw (vector types) against shunt's fused packing, in one job.
#include "coll_timing.hpp"
#include "harness.hpp"

#include <mpi.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace shunt::bench;

/// The buffers and datatypes of one row; `call(v)` runs the library's call (v = 0) or shunt's
/// (v = 1) into its own receive buffer.
struct row_case {
    std::vector<double> send, recv[2];
    std::vector<MPI_Datatype> sendtypes, recvtypes, owned;
    std::vector<int> counts;
    std::vector<int> isd, ird;  // Alltoallw: byte displacements
    std::vector<MPI_Aint> asd, ard;  // Neighbor_alltoallw
    std::int64_t bytes = 0;  // packed bytes this rank sends per call
    ~row_case() {
        for (auto& t : owned) MPI_Type_free(&t);
    }
};

/// A halo exchange of one field of n^3 doubles with one ghost layer on a periodic 3-D cart: the
/// six faces as subarray types, one MPI_Neighbor_alltoallw.
void halo(row_case& c, int n) {
    const int m = n + 2;
    c.send.resize(static_cast<std::size_t>(m) * m * m);
    for (std::size_t i = 0; i < c.send.size(); ++i) c.send[i] = static_cast<double>(i % 1009);
    c.recv[0] = c.recv[1] = c.send;
    const int sizes[3] = {m, m, m};
    for (int d = 0; d < 3; ++d)
        for (int side = 0; side < 2; ++side) {  // below, then above: MPI's neighbour order
            int sub[3] = {n, n, n}, from[3] = {1, 1, 1}, to[3] = {1, 1, 1};
            sub[d] = 1;
            from[d] = side == 0 ? 1 : n;  // the interior face sent that way
            to[d] = side == 0 ? 0 : n + 1;  // the ghost face received from that way
            MPI_Datatype s, r;
            MPI_Type_create_subarray(3, sizes, sub, from, MPI_ORDER_C, MPI_DOUBLE, &s);
            MPI_Type_create_subarray(3, sizes, sub, to, MPI_ORDER_C, MPI_DOUBLE, &r);
            MPI_Type_commit(&s);
            MPI_Type_commit(&r);
            c.owned.push_back(s);
            c.owned.push_back(r);
            c.sendtypes.push_back(s);
            c.recvtypes.push_back(r);
            c.counts.push_back(1);
            c.asd.push_back(0);
            c.ard.push_back(0);
            c.bytes += std::int64_t{n} * n * 8;
        }
}

/// An MPI_Alltoallw of `per` bytes to each of p ranks: `block`-byte blocks every other block of
/// the send buffer (a vector type), received as another vector (stride of three blocks).
void vectors(row_case& c, int p, std::int64_t per, int block) {
    const int dbl = block / 8, nblocks = static_cast<int>(per / block);
    MPI_Datatype s, r;
    MPI_Type_vector(nblocks, dbl, 2 * dbl, MPI_DOUBLE, &s);
    MPI_Type_vector(nblocks, dbl, 3 * dbl, MPI_DOUBLE, &r);
    MPI_Type_commit(&s);
    MPI_Type_commit(&r);
    c.owned = {s, r};
    const std::size_t sspan = static_cast<std::size_t>(nblocks) * 2 * dbl;
    const std::size_t rspan = static_cast<std::size_t>(nblocks) * 3 * dbl;
    c.send.resize(sspan * static_cast<std::size_t>(p));
    for (std::size_t i = 0; i < c.send.size(); ++i) c.send[i] = static_cast<double>(i % 1013);
    c.recv[0].assign(rspan * static_cast<std::size_t>(p), -1.0);
    c.recv[1] = c.recv[0];
    for (int j = 0; j < p; ++j) {
        c.sendtypes.push_back(s);
        c.recvtypes.push_back(r);
        c.counts.push_back(1);
        c.isd.push_back(static_cast<int>(static_cast<std::size_t>(j) * sspan * 8));
        c.ird.push_back(static_cast<int>(static_cast<std::size_t>(j) * rspan * 8));
    }
    c.bytes = per * p;
}

}  // namespace

int main(int argc, char** argv) {
    bool quick = false;
    cli line("bench-alltoallw",
             "Times the MPI library's MPI_Neighbor_alltoallw and MPI_Alltoallw (PMPI_*) against shunt's (MPI_* in\n"
             "libshunt: every non-contiguous block packed by shunt's host packer in one pass, the bytes moved by\n"
             "the library's own call with byte types), in one job on MPI_COMM_WORLD, after checking that both\n"
             "deliver the same bytes.");
    line.flag("--quick", "small sizes for a CI smoke test, 3 trials", [&] { quick = true; });
    line.epilog(
        "Rows: halo/N, one MPI_Neighbor_alltoallw of the six faces (subarray types) of an N^3 field of\n"
        "doubles with one ghost layer on a periodic 3-D cart (MPI_Dims_create); vecB/S, one MPI_Alltoallw\n"
        "of S bytes to every rank in blocks of B bytes (vector types, stride 2 blocks sent, 3 received).\n"
        "--sizes sets S (default 4K..1M, x4). bytes: what a rank sends per call; lib and shunt: the best\n"
        "time of a call (the slowest rank's); shunt/lib: library time / shunt's (above 1: faster). Each row\n"
        "has a communicator of its own, on which shunt measures both paths during the warm-up and keeps the\n"
        "faster (SHUNT_LOG=decide shows it); SHUNT_COLL=shunt times shunt's path itself.");
    options o = line.parse(argc, argv);
    if (!o.was_given("--trials")) o.trials = quick ? 3 : 15;
    if (!o.was_given("--time")) o.time_s = quick ? 0.2 : 2;
    std::vector<std::int64_t> sizes = o.sizes;
    if (sizes.empty())
        for (std::int64_t s = 4 << 10; s <= (quick ? std::int64_t{16} << 10 : std::int64_t{1} << 20); s *= 4)
            sizes.push_back(s);
    const std::vector<int> halos = quick ? std::vector<int>{8, 16} : std::vector<int>{16, 32, 64, 128};
    const std::array<int, 2> blocks = {8, 64};
    std::vector<std::string> rows;
    for (int n : halos) rows.push_back("halo/" + std::to_string(n));
    for (int b : blocks)
        for (auto s : sizes) rows.push_back("vec" + std::to_string(b) + "/" + format_bytes(s));
    if (o.list) {
        for (const auto& r : rows)
            if (o.selected(r)) std::printf("%s\n", r.c_str());
        return 0;
    }
    if (!calls_shunt("bench-alltoallw", "MPI_Alltoallw", reinterpret_cast<void*>(&MPI_Alltoallw),
                     reinterpret_cast<void*>(&PMPI_Alltoallw)))
        return 1;

    MPI_Init(&argc, &argv);
    int rank = 0, p = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    int rc = 0;
    try {
        int dims[3] = {0, 0, 0}, periods[3] = {1, 1, 1};
        MPI_Dims_create(p, 3, dims);
        std::optional<table> out;  // rank 0 prints
        if (rank == 0) {
            out.emplace(std::vector<column>{{"row", 12, "row", true},
                                            {"bytes", 7, "bytes"},
                                            {"lib us", 9, "library_us"},
                                            {"shunt us", 9, "shunt_us"},
                                            {"shunt/lib", 9, "shunt_over_library"}},
                        o);
            char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
            int len = 0;
            MPI_Get_library_version(version, &len);
            std::string v(version, static_cast<std::size_t>(len));
            out->note("bench-alltoallw: " + std::to_string(p) + " ranks (cart " + std::to_string(dims[0]) + "x" +
                      std::to_string(dims[1]) + "x" + std::to_string(dims[2]) +
                      "); library = " + v.substr(0, v.find_first_of("\r\n")));
            out->note("best of up to " + std::to_string(o.trials) +
                      " interleaved trials of about 2 ms or more (the slowest rank's time)");
        }
        std::int64_t mismatches = 0;
        for (const auto& r : rows) {
            if (!o.selected(r)) continue;
            row_case c;
            std::function<void(int)> call;
            // A communicator per row: shunt decides once per communicator (measuring both paths
            // on its first calls, here the warm-up), as an application using one per pattern.
            MPI_Comm comm = MPI_COMM_NULL;
            if (r.rfind("halo/", 0) == 0)
                MPI_Cart_create(MPI_COMM_WORLD, 3, dims, periods, 0, &comm);
            else
                MPI_Comm_dup(MPI_COMM_WORLD, &comm);
            if (r.rfind("halo/", 0) == 0) {
                halo(c, std::stoi(r.substr(5)));
                call = [&](int v) {
                    auto* dst = c.recv[v].data();
                    if (v == 0)
                        PMPI_Neighbor_alltoallw(c.send.data(), c.counts.data(), c.asd.data(), c.sendtypes.data(), dst,
                                                c.counts.data(), c.ard.data(), c.recvtypes.data(), comm);
                    else
                        MPI_Neighbor_alltoallw(c.send.data(), c.counts.data(), c.asd.data(), c.sendtypes.data(), dst,
                                               c.counts.data(), c.ard.data(), c.recvtypes.data(), comm);
                };
            } else {
                const int block = std::stoi(r.substr(3, r.find('/') - 3));
                std::int64_t per = 0;
                for (auto s : sizes)
                    if ("vec" + std::to_string(block) + "/" + format_bytes(s) == r) per = s;
                vectors(c, p, std::max<std::int64_t>(block, per / block * block), block);
                call = [&](int v) {
                    auto* dst = c.recv[v].data();
                    if (v == 0)
                        PMPI_Alltoallw(c.send.data(), c.counts.data(), c.isd.data(), c.sendtypes.data(), dst,
                                       c.counts.data(), c.ird.data(), c.recvtypes.data(), comm);
                    else
                        MPI_Alltoallw(c.send.data(), c.counts.data(), c.isd.data(), c.sendtypes.data(), dst,
                                      c.counts.data(), c.ird.data(), c.recvtypes.data(), comm);
                };
            }
            const std::vector<std::function<void()>> variants = {[&] { call(0); }, [&] { call(1); }};
            const auto best = measure_collective(variants, o, 5);
            if (std::memcmp(c.recv[0].data(), c.recv[1].data(), c.recv[0].size() * sizeof(double)) != 0) ++mismatches;
            if (rank == 0)
                out->row({text_cell(r), bytes_cell(c.bytes), number_cell(best[0] * 1e6, 1),
                          number_cell(best[1] * 1e6, 1), number_cell(best[0] / best[1], 2)});
            MPI_Comm_free(&comm);
        }
        std::int64_t all = 0;
        PMPI_Allreduce(&mismatches, &all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        if (all != 0) {
            if (rank == 0)
                std::fprintf(stderr, "bench-alltoallw: %lld rows where shunt's results differ from the library's\n",
                             static_cast<long long>(all));
            rc = 1;
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench-alltoallw: %s\n", e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
    return rc;
}
