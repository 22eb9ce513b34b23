// bench/nbc.cpp: bench-nbc, the overlap of nonblocking collectives with computation: the MPI library's (PMPI_I*) against shunt's (MPI_I* in libshunt), in one job.
#include "coll_timing.hpp"
#include "harness.hpp"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace shunt::bench;

constexpr std::array<const char*, 4> op_names = {"iallreduce", "ireduce_scatter", "iallgather", "ialltoall"};

/// The computation overlapped with a collective: `chunks` passes over a cache-resident array,
/// calling `test` after each one (how overlapping codes give MPI a chance to progress).
double compute(std::vector<double>& work, long chunks, const std::function<void()>& test) {
    double acc = 0;
    for (long c = 0; c < chunks; ++c) {
        for (double& x : work) {
            x = x * 0.999 + 0.5;
            acc += x;
        }
        test();
    }
    return acc;
}

}  // namespace

int main(int argc, char** argv) {
    bool quick = false;
    std::string only;
    cli line("bench-nbc",
             "Times nonblocking collectives overlapped with computation: the MPI library's (PMPI_I* and\n"
             "PMPI_Test) against shunt's (MPI_I* and MPI_Test in libshunt: shunt's schedule where its planner\n"
             "chooses it, progressed by every MPI_Test), in one job on MPI_COMM_WORLD. The computation of a\n"
             "row takes about as long as the library's collective alone and tests the request after each of\n"
             "its chunks. Every row first checks that shunt's results equal the library's.");
    line.flag("--quick", "small sizes for a CI smoke test: 64K..1M, 3 trials", [&] { quick = true; });
    line.option("--ops", "LIST", "comma-separated subset of iallreduce,ireduce_scatter,iallgather,ialltoall",
                [&](const std::string& v) { only = "," + v + ","; });
    line.epilog(
        "Columns: lib and shunt: the collective alone (started, then waited for); compute: the computation\n"
        "alone; lib+c and shunt+c: started, computed over, waited for; overlap: how much of the shorter of\n"
        "collective and computation the library (lib ov) and shunt (sh ov) hide, (comm + compute - both) /\n"
        "min(comm, compute); gain: lib+c / shunt+c (above 1: shunt's overlapped step is faster). Sizes: the\n"
        "reduced vector (iallreduce), the send buffer (ireduce_scatter = MPI_Ireduce_scatter_block,\n"
        "ialltoall), the receive buffer (iallgather). Best of interleaved trials, the slowest rank's time.\n"
        "shunt's decisions: SHUNT_COLL and SHUNT_TOPOLOGY as for any program (SHUNT_COLL=shunt forces its\n"
        "schedule).");
    options o = line.parse(argc, argv);
    if (!o.was_given("--trials")) o.trials = quick ? 3 : 10;
    if (!o.was_given("--time")) o.time_s = quick ? 0.3 : 3;
    std::vector<std::int64_t> sizes = o.sizes;
    if (sizes.empty())
        for (std::int64_t s = 64 << 10; s <= (quick ? std::int64_t{1} << 20 : std::int64_t{64} << 20); s *= 4)
            sizes.push_back(s);
    auto wanted = [&](const char* name) {
        return only.empty() || only.find("," + std::string(name) + ",") != std::string::npos;
    };
    if (o.list) {
        for (const char* op : op_names)
            for (auto s : sizes)
                if (wanted(op) && o.selected(std::string(op) + "/" + format_bytes(s)))
                    std::printf("%s/%s\n", op, format_bytes(s).c_str());
        return 0;
    }
    if (!calls_shunt("bench-nbc", "MPI_Iallreduce", reinterpret_cast<void*>(&MPI_Iallreduce),
                     reinterpret_cast<void*>(&PMPI_Iallreduce)))
        return 1;

    MPI_Init(&argc, &argv);
    int rank = 0, p = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    // A blocking collective first: shunt sets up a communicator's collectives there.
    double one = 1, sum = 0;
    MPI_Allreduce(&one, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    std::optional<table> out;
    if (rank == 0) {
        out.emplace(std::vector<column>{{"op", 15, "op", true},
                                        {"size", 6, "bytes"},
                                        {"lib us", 9, "library_us"},
                                        {"shunt us", 9, "shunt_us"},
                                        {"compute", 9, "compute_us"},
                                        {"lib+c us", 9, "library_overlapped_us"},
                                        {"shunt+c", 9, "shunt_overlapped_us"},
                                        {"lib ov", 6, "library_overlap"},
                                        {"sh ov", 6, "shunt_overlap"},
                                        {"gain", 6, "shunt_gain"}},
                    o);
        char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
        int len = 0;
        MPI_Get_library_version(version, &len);
        std::string v(version, static_cast<std::size_t>(len));
        out->note("bench-nbc: " + std::to_string(p) + " ranks; library = " + v.substr(0, v.find_first_of("\r\n")));
        out->note("best of up to " + std::to_string(o.trials) +
                  " interleaved trials (the slowest rank's time); gain = lib+c / shunt+c");
    }
    std::vector<double> work(8192, 1.0);  // 64 KiB: stays in cache
    int rc = 0;
    std::int64_t mismatches = 0;
    for (const char* op : op_names) {
        if (!wanted(op)) continue;
        const std::string name = op;
        for (std::int64_t size : sizes) {
            if (!o.selected(name + "/" + format_bytes(size))) continue;
            const std::int64_t unit = 8 * static_cast<std::int64_t>(p);
            const std::int64_t bytes = std::max(unit, size / unit * unit);
            const std::int64_t n = bytes / 8, per = n / p;
            const bool gather = name == "iallgather";
            std::vector<double> in(static_cast<std::size_t>(gather ? per : n)), lib(static_cast<std::size_t>(n)),
                mine(static_cast<std::size_t>(n));
            for (std::size_t i = 0; i < in.size(); ++i)
                in[i] = static_cast<double>((i * 7 + static_cast<std::size_t>(rank) * 3) % 11);
            // Starts the collective through the library (shunt false) or through shunt's shims.
            auto start = [&](bool shunt, MPI_Request* r) {
                double* o2 = shunt ? mine.data() : lib.data();
                const int cn = static_cast<int>(n), cp = static_cast<int>(per);
                if (name == "iallreduce")
                    shunt ? MPI_Iallreduce(in.data(), o2, cn, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, r)
                          : PMPI_Iallreduce(in.data(), o2, cn, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, r);
                else if (name == "ireduce_scatter")
                    shunt ? MPI_Ireduce_scatter_block(in.data(), o2, cp, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, r)
                          : PMPI_Ireduce_scatter_block(in.data(), o2, cp, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, r);
                else if (name == "iallgather")
                    shunt ? MPI_Iallgather(in.data(), cp, MPI_DOUBLE, o2, cp, MPI_DOUBLE, MPI_COMM_WORLD, r)
                          : PMPI_Iallgather(in.data(), cp, MPI_DOUBLE, o2, cp, MPI_DOUBLE, MPI_COMM_WORLD, r);
                else
                    shunt ? MPI_Ialltoall(in.data(), cp, MPI_DOUBLE, o2, cp, MPI_DOUBLE, MPI_COMM_WORLD, r)
                          : PMPI_Ialltoall(in.data(), cp, MPI_DOUBLE, o2, cp, MPI_DOUBLE, MPI_COMM_WORLD, r);
            };
            auto alone = [&](bool shunt) {
                MPI_Request r;
                start(shunt, &r);
                shunt ? MPI_Wait(&r, MPI_STATUS_IGNORE) : PMPI_Wait(&r, MPI_STATUS_IGNORE);
            };
            long chunks = 1;
            auto overlapped = [&](bool shunt) {
                MPI_Request r;
                start(shunt, &r);
                int flag = 0;
                compute(work, chunks, [&] {
                    if (r != MPI_REQUEST_NULL && !flag)
                        shunt ? MPI_Test(&r, &flag, MPI_STATUS_IGNORE) : PMPI_Test(&r, &flag, MPI_STATUS_IGNORE);
                });
                if (!flag) shunt ? MPI_Wait(&r, MPI_STATUS_IGNORE) : PMPI_Wait(&r, MPI_STATUS_IGNORE);
            };
            // The collectives alone first; then a computation as long as the library's.
            const auto comm = measure_collective({[&] { alone(false); }, [&] { alone(true); }}, o, 3);
            {
                // The time of one chunk: the best of 5 runs of about 5 ms each (ranks share cores).
                double chunk = 1e30;
                long n_cal = 16;
                for (int k = 0; k < 5; ++k) {
                    const double t0 = MPI_Wtime();
                    compute(work, n_cal, [] {});
                    const double took = MPI_Wtime() - t0;
                    chunk = std::min(chunk, took / static_cast<double>(n_cal));
                    if (took < 5e-3) n_cal = std::min(n_cal * 4, 1L << 20);
                }
                double want = std::ceil(comm[0] / std::max(chunk, 1e-9)), agreed = 0;
                PMPI_Allreduce(&want, &agreed, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                chunks = static_cast<long>(std::clamp(agreed, 1.0, 1e7));
            }
            const auto t = measure_collective(
                {[&] { overlapped(false); }, [&] { overlapped(true); }, [&] { compute(work, chunks, [] {}); }}, o, 2);
            const std::int64_t result = 8 * (name == "ireduce_scatter" ? per : n);  // the bytes each rank receives
            if (std::memcmp(lib.data(), mine.data(), static_cast<std::size_t>(result)) != 0) ++mismatches;
            const double c = t[2];
            auto ov = [&](double alone_s, double both) { return (alone_s + c - both) / std::min(alone_s, c); };
            if (rank == 0)
                out->row({text_cell(name), bytes_cell(bytes), number_cell(comm[0] * 1e6, 1),
                          number_cell(comm[1] * 1e6, 1), number_cell(c * 1e6, 1), number_cell(t[0] * 1e6, 1),
                          number_cell(t[1] * 1e6, 1), number_cell(ov(comm[0], t[0]), 2),
                          number_cell(ov(comm[1], t[1]), 2), number_cell(t[0] / t[1], 2)});
        }
    }
    std::int64_t all = 0;
    PMPI_Allreduce(&mismatches, &all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (all != 0) {
        if (rank == 0)
            std::fprintf(stderr, "bench-nbc: %lld rows where shunt's results differ from the library's\n",
                         static_cast<long long>(all));
        rc = 1;
    }
    MPI_Finalize();
    return rc;
}
