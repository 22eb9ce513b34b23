// bench/coll.cpp: bench-coll, the MPI library's collectives against shunt's (the planner's choice, and its hierarchical schedule forced), in one job, with nccl-tests' algorithm and bus bandwidth.
#include "coll_timing.hpp"
#include "harness.hpp"

#include <shunt/collectives/allgather.hpp>
#include <shunt/collectives/allreduce.hpp>
#include <shunt/collectives/alltoall.hpp>
#include <shunt/collectives/bcast.hpp>
#include <shunt/collectives/mpi_transport.hpp>
#include <shunt/collectives/reduce.hpp>
#include <shunt/collectives/reduce_scatter_block.hpp>
#include <shunt/topology/topology.hpp>

#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace shunt::bench;

struct op_info {
    const char* name;
    double bus_factor_num;  ///< busbw = algbw * factor(p), nccl-tests' conventions
    int kind;  ///< 0: (p-1)/p * 2 (allreduce), 1: (p-1)/p, 2: 1
};
constexpr std::array<op_info, 6> ops = {{{"allreduce", 2, 0},
                                         {"reduce_scatter", 1, 1},
                                         {"allgather", 1, 1},
                                         {"alltoall", 1, 1},
                                         {"bcast", 1, 2},
                                         {"reduce", 1, 2}}};

double bus_factor(const op_info& op, int p) {
    if (op.kind == 2 || p <= 1) return 1;
    return op.bus_factor_num * static_cast<double>(p - 1) / p;
}

/// The buffers of one (operation, size): `bytes` is nccl-tests' size (the whole vector of a
/// reduction, the gathered buffer, alltoall's send buffer), a multiple of 8 * ranks.
struct buffers {
    std::vector<double> in, out, check;
};

}  // namespace

int main(int argc, char** argv) {
    bool quick = false;
    std::string only;
    cli line("bench-coll",
             "Times the collectives of the MPI library (PMPI_*) against shunt's (MPI_* in libshunt: the cost\n"
             "model's choice between the library and shunt's hierarchical schedule) and against shunt's\n"
             "hierarchical schedule forced (the header API), in one job on MPI_COMM_WORLD. Every row first checks\n"
             "that shunt's results equal the library's (the data are small integers, so sums are exact).");
    line.flag("--quick", "small sizes for a CI smoke test: 4K..256K, 3 trials", [&] { quick = true; });
    line.option("--ops", "LIST",
                "comma-separated subset of allreduce,reduce_scatter,allgather,alltoall,\n"
                "bcast,reduce (default all)",
                [&](const std::string& v) { only = "," + v + ","; });
    line.epilog(
        "Sizes are nccl-tests' (default 4K..256M, x4): the reduced vector (allreduce, reduce), the whole\n"
        "send buffer (reduce_scatter = MPI_Reduce_scatter_block, alltoall), the whole receive buffer\n"
        "(allgather), the message (bcast). algbw = size / time; busbw = algbw * 2(p-1)/p (allreduce),\n"
        "(p-1)/p (reduce_scatter, allgather, alltoall), 1 (bcast, reduce). lib, shunt and hier are the\n"
        "library, shunt's planner (through the shims) and shunt's hierarchical schedule forced;\n"
        "shunt/lib and hier/lib are library time / their time (above 1: faster than the library);\n"
        "lib/lib is the library against a second run of itself, interleaved the same way: a control\n"
        "whose spread is how far this machine moves two identical runs apart. The\n"
        "planner measures both methods on its first calls of each size class (its warm-up here). The\n"
        "topology is SHUNT_TOPOLOGY's, else discovered (nodes by shared memory).");
    options o = line.parse(argc, argv);
    if (!o.was_given("--trials")) o.trials = quick ? 3 : 10;
    if (!o.was_given("--time")) o.time_s = quick ? 0.3 : 3;
    std::vector<std::int64_t> sizes = o.sizes;
    if (sizes.empty()) {
        for (std::int64_t s = 4 << 10; s <= (quick ? std::int64_t{256} << 10 : std::int64_t{256} << 20); s *= 4)
            sizes.push_back(s);
    }
    auto wanted = [&](const char* name) {
        return only.empty() || only.find("," + std::string(name) + ",") != std::string::npos;
    };
    if (o.list) {
        for (const auto& op : ops)
            for (auto s : sizes)
                if (wanted(op.name) && o.selected(std::string(op.name) + "/" + format_bytes(s)))
                    std::printf("%s/%s\n", op.name, format_bytes(s).c_str());
        return 0;
    }
    if (!calls_shunt("bench-coll", "MPI_Allreduce", reinterpret_cast<void*>(&MPI_Allreduce),
                     reinterpret_cast<void*>(&PMPI_Allreduce)))
        return 1;

    MPI_Init(&argc, &argv);
    int rank = 0, p = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    int rc = 0;
    try {
        const char* spec = std::getenv("SHUNT_TOPOLOGY");
        const shunt::topology& topo = shunt::topology::of(MPI_COMM_WORLD, spec ? spec : "");
        std::optional<table> out;  // rank 0 prints
        if (rank == 0)
            out.emplace(std::vector<column>{{"op", 14, "op", true},
                                            {"size", 6, "bytes"},
                                            {"lib algbw", 9, "library_algbw_gbs"},
                                            {"lib busbw", 9, "library_busbw_gbs"},
                                            {"shunt busbw", 11, "shunt_busbw_gbs"},
                                            {"hier busbw", 10, "hier_busbw_gbs"},
                                            {"shunt/lib", 9, "shunt_over_library"},
                                            {"hier/lib", 8, "hier_over_library"},
                                            {"lib/lib", 7, "library_over_library_again"}},
                        o);
        if (rank == 0) {
            char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
            int len = 0;
            MPI_Get_library_version(version, &len);
            std::string v(version, static_cast<std::size_t>(len));
            out->note("bench-coll: " + std::to_string(p) + " ranks; library = " + v.substr(0, v.find_first_of("\r\n")));
            std::string d = topo.describe();
            for (std::size_t at = 0; (at = d.find('\n', at)) != std::string::npos && at + 1 < d.size();)
                d.replace(at, 1, "; ");
            if (!d.empty() && d.back() == '\n') d.pop_back();
            out->note(d);
            out->note("best of up to " + std::to_string(o.trials) +
                      " interleaved trials of about 2 ms or more (the slowest rank's time), GB/s = 1e9 B/s");
            out->note(
                "lib/lib: the library against itself, run as a fourth variant: ratios within its spread are noise");
        }
        shunt::mpi_transport t(topo.comm());
        std::int64_t mismatches = 0;
        for (const auto& op : ops) {
            if (!wanted(op.name)) continue;
            for (std::int64_t size : sizes) {
                const std::string row = std::string(op.name) + "/" + format_bytes(size);
                if (!o.selected(row)) continue;
                const std::int64_t unit = 8 * static_cast<std::int64_t>(p);
                const std::int64_t bytes = std::max(unit, size / unit * unit);
                const std::int64_t n = bytes / 8, per = n / p;
                const bool gather = std::string(op.name) == "allgather";
                std::vector<double> in(static_cast<std::size_t>(gather ? per : n)), lib(static_cast<std::size_t>(n)),
                    mine(static_cast<std::size_t>(n)), hier(static_cast<std::size_t>(n)),
                    again(static_cast<std::size_t>(n));
                for (std::size_t i = 0; i < in.size(); ++i)
                    in[i] = static_cast<double>((i * 7 + static_cast<std::size_t>(rank) * 3) % 11);
                // 0 library, 1 shunt's shims, 2 hierarchical forced, 3 the library again (a control:
                // how far two identical variants' bests differ on this machine).
                double* const outs[4] = {lib.data(), mine.data(), hier.data(), again.data()};
                std::function<void(int)> call;
                const std::string name = op.name;
                if (name == "allreduce")
                    call = [&](int v) {
                        double* o2 = outs[v];
                        if (v == 0 || v == 3)
                            PMPI_Allreduce(in.data(), o2, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
                        else if (v == 1)
                            MPI_Allreduce(in.data(), o2, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
                        else
                            shunt::allreduce(topo, in.data(), o2, n, MPI_DOUBLE, MPI_SUM);
                    };
                else if (name == "reduce_scatter")
                    call = [&](int v) {
                        double* o2 = outs[v];
                        if (v == 0 || v == 3)
                            PMPI_Reduce_scatter_block(in.data(), o2, static_cast<int>(per), MPI_DOUBLE, MPI_SUM,
                                                      MPI_COMM_WORLD);
                        else if (v == 1)
                            MPI_Reduce_scatter_block(in.data(), o2, static_cast<int>(per), MPI_DOUBLE, MPI_SUM,
                                                     MPI_COMM_WORLD);
                        else
                            shunt::reduce_scatter_block(topo, in.data(), o2, per, MPI_DOUBLE, MPI_SUM);
                    };
                else if (name == "allgather")
                    call = [&](int v) {
                        double* o2 = outs[v];
                        if (v == 0 || v == 3)
                            PMPI_Allgather(in.data(), static_cast<int>(per), MPI_DOUBLE, o2, static_cast<int>(per),
                                           MPI_DOUBLE, MPI_COMM_WORLD);
                        else if (v == 1)
                            MPI_Allgather(in.data(), static_cast<int>(per), MPI_DOUBLE, o2, static_cast<int>(per),
                                          MPI_DOUBLE, MPI_COMM_WORLD);
                        else
                            shunt::allgather(topo, in.data(), o2, per, MPI_DOUBLE);
                    };
                else if (name == "alltoall")
                    call = [&](int v) {
                        double* o2 = outs[v];
                        if (v == 0 || v == 3)
                            PMPI_Alltoall(in.data(), static_cast<int>(per), MPI_DOUBLE, o2, static_cast<int>(per),
                                          MPI_DOUBLE, MPI_COMM_WORLD);
                        else if (v == 1)
                            MPI_Alltoall(in.data(), static_cast<int>(per), MPI_DOUBLE, o2, static_cast<int>(per),
                                         MPI_DOUBLE, MPI_COMM_WORLD);
                        else
                            shunt::alltoall(topo, in.data(), o2, per, MPI_DOUBLE);
                    };
                else if (name == "bcast")
                    call = [&](int v) {
                        double* o2 = outs[v];
                        if (rank == 0) std::memcpy(o2, in.data(), static_cast<std::size_t>(bytes));
                        if (v == 0 || v == 3)
                            PMPI_Bcast(o2, static_cast<int>(n), MPI_DOUBLE, 0, MPI_COMM_WORLD);
                        else if (v == 1)
                            MPI_Bcast(o2, static_cast<int>(n), MPI_DOUBLE, 0, MPI_COMM_WORLD);
                        else
                            shunt::bcast(topo, o2, n, MPI_DOUBLE, 0);
                    };
                else
                    call = [&](int v) {
                        double* o2 = outs[v];
                        if (v == 0 || v == 3)
                            PMPI_Reduce(in.data(), o2, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
                        else if (v == 1)
                            MPI_Reduce(in.data(), o2, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
                        else
                            shunt::reduce(topo, in.data(), o2, n, MPI_DOUBLE, MPI_SUM, 0);
                    };
                std::vector<std::function<void()>> variants = {[&] { call(0); }, [&] { call(1); }, [&] { call(2); },
                                                               [&] { call(3); }};
                // Warm-up: 7 calls let the planner measure both methods (3 each) and decide.
                const auto best = measure_collective(variants, o, 7);
                const bool rooted = name == "reduce";
                if ((!rooted || rank == 0) &&
                    (std::memcmp(lib.data(), mine.data(), static_cast<std::size_t>(bytes)) != 0 ||
                     std::memcmp(lib.data(), hier.data(), static_cast<std::size_t>(bytes)) != 0 ||
                     std::memcmp(lib.data(), again.data(), static_cast<std::size_t>(bytes)) != 0))
                    ++mismatches;
                const double f = bus_factor(op, p);
                auto bw = [&](double s) { return static_cast<double>(bytes) / s / 1e9; };
                if (rank == 0)
                    out->row({text_cell(name), bytes_cell(bytes), number_cell(bw(best[0]), 3),
                              number_cell(bw(best[0]) * f, 3), number_cell(bw(best[1]) * f, 3),
                              number_cell(bw(best[2]) * f, 3), number_cell(best[0] / best[1], 2),
                              number_cell(best[0] / best[2], 2), number_cell(best[0] / best[3], 2)});
            }
        }
        std::int64_t all_mismatches = 0;
        PMPI_Allreduce(&mismatches, &all_mismatches, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        if (all_mismatches != 0) {
            if (rank == 0)
                std::fprintf(stderr, "bench-coll: %lld rows where shunt's results differ from the library's\n",
                             static_cast<long long>(all_mismatches));
            rc = 1;
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench-coll: %s\n", e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
    return rc;
}
