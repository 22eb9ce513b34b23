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

/// Bytes the busiest node's link must carry in each direction for one call of `op` on `bytes`
/// (nccl-tests' size) with ranks_per_node[j] ranks on node j (m nodes, p ranks): the bound of
/// the bandwidth-optimal schedules across nodes. 0 on one node (no link to cross).
double link_bytes(const std::string& op, std::int64_t bytes, const std::vector<int>& ranks_per_node, int p) {
    const auto m = static_cast<double>(ranks_per_node.size());
    const auto n = static_cast<double>(bytes);
    if (m < 2) return 0;
    if (op == "allreduce") return 2 * (m - 1) / m * n;  // reduce-scatter, then allgather, across nodes
    if (op == "reduce_scatter" || op == "allgather") return (m - 1) / m * n;
    if (op == "alltoall") {
        double most = 0;  // each of a node's ranks sends its blocks for the other nodes' ranks
        for (int r : ranks_per_node) most = std::max(most, r * static_cast<double>(p - r) / p * n);
        return most;
    }
    return n;  // bcast, reduce: the whole message reaches (leaves) the root's node once
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
    double link_bits = 0;  // bits/s of a node's link, each direction; 0: unknown
    shunt::collective_options piped;  // the hierarchical schedule's options (pipelined by default)
    shunt::collective_options unpiped;
    unpiped.pipeline_bytes = 0;
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
    line.option("--link", "RATE",
                "rate of each node's link, each direction, as tc writes it (1gbit, 500mbit) or in Gbit/s:\n"
                "prints each row's fraction of its link bound (default: CLUSTER_RATE, set by\n"
                "bench/cluster/cluster.sh; without either, no bound)",
                [&](const std::string& v) { link_bits = parse_link_rate(v, "--link"); });
    line.option("--pipeline", "BYTES",
                "chunk size of the pipelined hierarchical schedule (default 2M; 0: not pipelined)",
                [&](const std::string& v) { piped.pipeline_bytes = parse_size(v, "--pipeline", 0); });
    line.option("--depth", "N", "chunks of the pipelined schedule in flight at once (default 4)",
                [&](const std::string& v) { piped.pipeline_depth = static_cast<int>(parse_int(v, "--depth", 2, 16)); });
    line.epilog(
        "Sizes are nccl-tests' (default 4K..256M, x4): the reduced vector (allreduce, reduce), the whole\n"
        "send buffer (reduce_scatter = MPI_Reduce_scatter_block, alltoall), the whole receive buffer\n"
        "(allgather), the message (bcast). algbw = size / time; busbw = algbw * 2(p-1)/p (allreduce),\n"
        "(p-1)/p (reduce_scatter, allgather, alltoall), 1 (bcast, reduce). lib, shunt and hier are the\n"
        "library, shunt's planner (through the shims) and shunt's hierarchical schedule forced, pipelined;\n"
        "hier0 the same schedule unpipelined (shunt before pipelining). shunt/lib, hier/lib and\n"
        "hier0/lib are library time / their time (above 1: faster than the library);\n"
        "lib/lib is the library against a second run of itself, interleaved the same way: a control\n"
        "whose spread is how far this machine moves two identical runs apart. The\n"
        "planner measures both methods on its first calls of each size class (its warm-up here). The\n"
        "topology is SHUNT_TOPOLOGY's, else discovered (nodes by shared memory).\n"
        "With a link rate (--link or CLUSTER_RATE), `link` columns give each variant's fraction of\n"
        "the link bound: the time the busiest node's link needs at that rate (nodes by shared\n"
        "memory; bench/README.md gives the bytes per collective) / the variant's time.");
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
    if (link_bits == 0 && rank == 0)
        if (const char* r = std::getenv("CLUSTER_RATE"); r != nullptr && *r != '\0') {
            try {
                link_bits = parse_link_rate(r, "CLUSTER_RATE");
            } catch (const std::exception& e) {
                std::fprintf(stderr, "bench-coll: %s (no link bound)\n", e.what());
            }
        }
    // The nodes: ranks that share memory, counted on rank 0.
    std::vector<int> ranks_per_node;
    {
        MPI_Comm node;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
        int node_rank = 0, lead = rank;
        MPI_Comm_rank(node, &node_rank);
        MPI_Bcast(&lead, 1, MPI_INT, 0, node);
        MPI_Comm_free(&node);
        std::vector<int> leads(static_cast<std::size_t>(p));
        MPI_Gather(&lead, 1, MPI_INT, leads.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
        for (int r = 0; r < p; ++r)
            if (leads[static_cast<std::size_t>(r)] == r)
                ranks_per_node.push_back(static_cast<int>(std::count(leads.begin(), leads.end(), r)));
    }
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
                                            {"hier0/lib", 9, "hier_unpipelined_over_library"},
                                            {"lib/lib", 7, "library_over_library_again"},
                                            {"lib link", 8, "library_link_fraction"},
                                            {"shunt link", 10, "shunt_link_fraction"},
                                            {"hier link", 9, "hier_link_fraction"},
                                            {"hier0 link", 10, "hier_unpipelined_link_fraction"}},
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
            std::string nodes;
            for (int r : ranks_per_node) nodes += (nodes.empty() ? "" : ",") + std::to_string(r);
            char rate[64] = "unknown (no link bound)";
            if (link_bits > 0) std::snprintf(rate, sizeof rate, "%.4g Gbit/s each way", link_bits / 1e9);
            out->note("nodes (ranks sharing memory): " + std::to_string(ranks_per_node.size()) + " of " + nodes +
                      " ranks; link " + rate + "; hier pipelined in chunks of " +
                      (piped.pipeline_bytes > 0 ? format_bytes(piped.pipeline_bytes) : std::string("- (off)")) + ", " +
                      std::to_string(piped.pipeline_depth) + " in flight");
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
                    again(static_cast<std::size_t>(n)), hier0(static_cast<std::size_t>(n));
                for (std::size_t i = 0; i < in.size(); ++i)
                    in[i] = static_cast<double>((i * 7 + static_cast<std::size_t>(rank) * 3) % 11);
                // 0 library, 1 shunt's shims, 2 hierarchical forced (pipelined), 3 the library again (a
                // control: how far two identical variants' bests differ on this machine), 4 hierarchical
                // unpipelined.
                double* const outs[5] = {lib.data(), mine.data(), hier.data(), again.data(), hier0.data()};
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
                            shunt::allreduce(topo, in.data(), o2, n, MPI_DOUBLE, MPI_SUM, v == 2 ? piped : unpiped);
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
                            shunt::reduce_scatter_block(topo, in.data(), o2, per, MPI_DOUBLE, MPI_SUM,
                                                        v == 2 ? piped : unpiped);
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
                            shunt::allgather(topo, in.data(), o2, per, MPI_DOUBLE, v == 2 ? piped : unpiped);
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
                            shunt::alltoall(topo, in.data(), o2, per, MPI_DOUBLE, v == 2 ? piped : unpiped);
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
                            shunt::bcast(topo, o2, n, MPI_DOUBLE, 0, v == 2 ? piped : unpiped);
                    };
                else
                    call = [&](int v) {
                        double* o2 = outs[v];
                        if (v == 0 || v == 3)
                            PMPI_Reduce(in.data(), o2, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
                        else if (v == 1)
                            MPI_Reduce(in.data(), o2, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
                        else
                            shunt::reduce(topo, in.data(), o2, n, MPI_DOUBLE, MPI_SUM, 0, v == 2 ? piped : unpiped);
                    };
                std::vector<std::function<void()>> variants = {[&] { call(0); }, [&] { call(1); }, [&] { call(2); },
                                                               [&] { call(3); }, [&] { call(4); }};
                // Warm-up: 7 calls let the planner measure both methods (3 each) and decide.
                const auto best = measure_collective(variants, o, 7);
                const bool rooted = name == "reduce";
                if ((!rooted || rank == 0) &&
                    (std::memcmp(lib.data(), mine.data(), static_cast<std::size_t>(bytes)) != 0 ||
                     std::memcmp(lib.data(), hier.data(), static_cast<std::size_t>(bytes)) != 0 ||
                     std::memcmp(lib.data(), again.data(), static_cast<std::size_t>(bytes)) != 0 ||
                     std::memcmp(lib.data(), hier0.data(), static_cast<std::size_t>(bytes)) != 0))
                    ++mismatches;
                const double f = bus_factor(op, p);
                auto bw = [&](double s) { return static_cast<double>(bytes) / s / 1e9; };
                const double bound_s = link_bits > 0 ? link_bytes(name, bytes, ranks_per_node, p) * 8 / link_bits : 0;
                auto link = [&](double s) { return bound_s > 0 ? number_cell(bound_s / s, 2) : text_cell("-"); };
                if (rank == 0)
                    out->row({text_cell(name), bytes_cell(bytes), number_cell(bw(best[0]), 3),
                              number_cell(bw(best[0]) * f, 3), number_cell(bw(best[1]) * f, 3),
                              number_cell(bw(best[2]) * f, 3), number_cell(best[0] / best[1], 2),
                              number_cell(best[0] / best[2], 2), number_cell(best[0] / best[4], 2),
                              number_cell(best[0] / best[3], 2), link(best[0]), link(best[1]), link(best[2]),
                              link(best[4])});
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
