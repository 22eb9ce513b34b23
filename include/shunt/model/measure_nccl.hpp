// shunt/model/measure_nccl.hpp: measuring the cost model's nccl.* tables: NCCL running each collective with each of
// its algorithms and protocols forced, on every rank of the job, timed as the other collective tables are.
#pragma once

#include <shunt/errors.hpp>
#include <shunt/model/measure.hpp>
#include <shunt/model/stats.hpp>
#include <shunt/plan/nccl_tuner.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace shunt {

/// What measuring the nccl tables needs from NCCL and the device, so that shunt-measure (NCCL and
/// device memory) and the tests (NCCL's CPU double, host memory) share one loop. Every rank calls
/// each function at the same point of the loop.
struct nccl_measure_ops {
    /// Makes the communicators opened after it run algorithm `a` with protocol `p` (NCCL reads
    /// NCCL_ALGO and NCCL_PROTO when it makes a communicator).
    std::function<void(nccl_algo a, nccl_proto p)> force;
    /// Makes a communicator over MPI_COMM_WORLD (collective); false, with `why`, where NCCL refuses.
    std::function<bool(std::string& why)> open;
    /// Frees the communicator open() made (collective).
    std::function<void()> close;
    /// Runs `reps` calls of `c` on the open communicator, each moving `bytes` as NCCL counts them
    /// for its tuner (float elements; the whole gathered or scattered buffer for allgather and
    /// reduce_scatter), and waits for them; false, with `why`, where NCCL refuses the call.
    std::function<bool(nccl_coll c, std::size_t bytes, int reps, std::string& why)> run;
};

namespace detail {
/// True on every rank when `ok` is true on every rank of MPI_COMM_WORLD.
inline bool all_ranks(bool ok) {
    int mine = ok ? 1 : 0, all = 0;
    SHUNT_CHECK_MPI(PMPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    return all != 0;
}
}  // namespace detail

/// Bytes of one measured call of `requested` bytes on `ranks` ranks: a whole number of float
/// elements per rank (at least one), so that every collective moves exactly that many bytes.
inline std::size_t nccl_measure_bytes(double requested, std::int64_t ranks) {
    const std::size_t unit = 4 * static_cast<std::size_t>(std::max<std::int64_t>(1, ranks));
    return std::max(unit, static_cast<std::size_t>(requested) / unit * unit);
}

/// Measures the nccl tables of `shape` (MPI_COMM_WORLD's ranks and nodes) that `wanted` selects
/// (on any rank), for the collectives `colls` at `sizes`: for each of NCCL's algorithms and
/// protocols a communicator with them forced, then per collective and size a warm-up call and
/// batches of calls after a barrier, each batch's time the slowest rank's. A combination NCCL
/// refuses (its communicator, or a collective with it: NCCL fails a call for which no forced
/// algorithm or protocol applies) is skipped, with a note on rank 0 through `note`. NCCL's choice
/// of algorithm depends only on what every rank agrees on, so its refusals come on every rank
/// alike; every step is agreed before the next. Collective; returns the same tables on every rank.
inline std::vector<std::pair<std::string, time_table>> measure_nccl_tables(
    const nccl_measure_ops& ops, const nccl_shape& shape, std::span<const nccl_coll> colls,
    std::span<const double> sizes, const timing_policy& pol, const std::function<bool(const std::string&)>& wanted,
    const std::function<void(const std::string&)>& note) {
    int rank = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::vector<std::pair<std::string, time_table>> out;
    const auto say = [&](const std::string& what) {
        if (rank == 0 && note) note(what);
    };
    for (std::size_t a = 0; a < nccl_algo_count; ++a)
        for (std::size_t p = 0; p < nccl_proto_count; ++p) {
            const auto algo = static_cast<nccl_algo>(a);
            const auto proto = static_cast<nccl_proto>(p);
            std::vector<nccl_coll> todo;
            for (const nccl_coll c : colls)
                if (!detail::all_ranks(!wanted(table_names::nccl(c, algo, proto, shape)))) todo.push_back(c);
            if (todo.empty()) continue;
            const std::string cell = nccl_cell_text(static_cast<int>(a), static_cast<int>(p));
            ops.force(algo, proto);
            std::string why;
            if (!detail::all_ranks(ops.open(why))) {
                say(cell + ": NCCL makes no communicator with it (" + (why.empty() ? "on another rank" : why) +
                    "); skipped");
                ops.close();
                continue;
            }
            for (const nccl_coll c : todo) {
                const std::string name = table_names::nccl(c, algo, proto, shape);
                std::vector<table_point> points;
                bool refused = false;
                for (const double requested : sizes) {
                    const std::size_t bytes = nccl_measure_bytes(requested, shape.ranks);
                    why.clear();
                    const double t0 = detail::now_s();
                    const bool ran = ops.run(c, bytes, 1, why);
                    double once = detail::now_s() - t0;
                    if (!detail::all_ranks(ran)) {
                        say(name + ": NCCL refuses it (" + (why.empty() ? "on another rank" : why) + "); skipped");
                        refused = true;
                        break;
                    }
                    SHUNT_CHECK_MPI(PMPI_Allreduce(MPI_IN_PLACE, &once, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
                    const int reps = static_cast<int>(
                        std::clamp<double>(pol.batch_s * 20 / std::max(once, 1e-9), 1, 1000));  // the same everywhere
                    std::vector<double> samples;
                    bool failed = false;
                    for (int k = 0; k < pol.warmup + pol.min_samples && !failed; ++k) {
                        SHUNT_CHECK_MPI(PMPI_Barrier(MPI_COMM_WORLD));
                        const double b0 = detail::now_s();
                        const bool ok = ops.run(c, bytes, reps, why);
                        double t = (detail::now_s() - b0) / reps;
                        failed = !detail::all_ranks(ok);
                        SHUNT_CHECK_MPI(PMPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
                        if (k >= pol.warmup) samples.push_back(t);
                    }
                    if (failed) {
                        say(name + ": NCCL failed a call (" + (why.empty() ? "on another rank" : why) + "); skipped");
                        refused = true;
                        break;
                    }
                    const robust_estimate e = robust_summary(samples);
                    points.push_back({static_cast<double>(bytes), e.value, e.spread});
                }
                if (refused) {  // a refused call may leave the communicator unusable: a fresh one
                    ops.close();
                    ops.force(algo, proto);
                    if (!detail::all_ranks(ops.open(why))) break;
                    continue;
                }
                out.emplace_back(name, time_table(std::move(points)));
            }
            ops.close();
        }
    return out;
}

}  // namespace shunt
