// shunt/model/measure_nccl_methods.hpp: measuring the NCCL executor's tables nccl.<op>.<method>.r<R>n<N>: NCCL's
// own collective and shunt's schedules over node and rail (and GPU domain) communicators, interleaved, on every rank.
#pragma once

#include <shunt/errors.hpp>
#include <shunt/model/measure.hpp>
#include <shunt/model/measure_nccl.hpp>
#include <shunt/model/stats.hpp>
#include <shunt/plan/nccl.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace shunt {

/// Runs `reps` calls of `op` by `method` on the job's communicator (and its levels), each moving
/// `bytes` as table_names::nccl counts them (float elements), and waits for them; false, with
/// `why`, where NCCL fails a call. Every rank calls it at the same point of the loop.
using nccl_method_run =
    std::function<bool(nccl_op op, nccl_method method, std::size_t bytes, int reps, std::string& why)>;

/// Measures the tables of `shape` (MPI_COMM_WORLD's ranks and nodes) that `wanted` selects (on any
/// rank), for the operations `ops` at `sizes` (each rounded by nccl_measure_bytes): per operation
/// and size one call of each wanted method (a warm-up, which also sets the batch length from the
/// slower of them on the slowest rank), then warmup + min_samples trials, each timing a batch of
/// every wanted method in turn after a barrier (interleaved, so that a slow spell of the machine
/// falls on both), a batch's time the slowest rank's; a point is the best trial. A method whose
/// call fails on some rank loses its table for that operation, with a note on rank 0 through
/// `note`. `methods`: those the job's levels allow (NCCL and the two-level schedule by default;
/// hierarchical3 is measured for allreduce only). Collective over MPI_COMM_WORLD; returns the
/// same tables on every rank.
inline std::vector<std::pair<std::string, time_table>> measure_nccl_method_tables(
    const nccl_method_run& run, const nccl_shape& shape, std::span<const nccl_op> ops, std::span<const double> sizes,
    const timing_policy& pol, const std::function<bool(const std::string&)>& wanted,
    const std::function<void(const std::string&)>& note, std::span<const nccl_method> methods = {}) {
    int rank = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    constexpr nccl_method two_levels[] = {nccl_method::library, nccl_method::hierarchical};
    if (methods.empty()) methods = two_levels;
    std::vector<std::pair<std::string, time_table>> out;
    for (const nccl_op op : ops) {
        std::vector<nccl_method> todo;
        for (const nccl_method m : methods)
            if ((m != nccl_method::hierarchical3 || op == nccl_op::allreduce) &&
                !detail::all_ranks(!wanted(table_names::nccl(op, m, shape))))
                todo.push_back(m);
        std::vector<std::vector<table_point>> points(todo.size());
        std::vector<bool> failed(todo.size(), false);
        const auto attempt = [&](std::size_t i, std::size_t bytes, int reps) {
            std::string why;
            const bool ok = detail::all_ranks(run(op, todo[i], bytes, reps, why));
            if (!ok && !failed[i] && rank == 0 && note)
                note(table_names::nccl(op, todo[i], shape) + ": a call failed (" +
                     (why.empty() ? "on another rank" : why) + "); not measured");
            if (!ok) failed[i] = true;
            return ok;
        };
        for (const double requested : sizes) {
            const std::size_t bytes = nccl_measure_bytes(requested, shape.ranks);
            double once = 0;
            for (std::size_t i = 0; i < todo.size(); ++i) {
                if (failed[i]) continue;
                SHUNT_CHECK_MPI(PMPI_Barrier(MPI_COMM_WORLD));
                const double t0 = detail::now_s();
                if (attempt(i, bytes, 1)) once = std::max(once, detail::now_s() - t0);
            }
            SHUNT_CHECK_MPI(PMPI_Allreduce(MPI_IN_PLACE, &once, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
            const int reps = static_cast<int>(std::clamp<double>(pol.batch_s * 20 / std::max(once, 1e-9), 1, 1000));
            std::vector<std::vector<double>> samples(todo.size());
            for (int k = 0; k < pol.warmup + pol.min_samples; ++k)
                for (std::size_t i = 0; i < todo.size(); ++i) {
                    if (failed[i]) continue;
                    SHUNT_CHECK_MPI(PMPI_Barrier(MPI_COMM_WORLD));
                    const double t0 = detail::now_s();
                    const bool ok = attempt(i, bytes, reps);
                    double t = (detail::now_s() - t0) / reps;
                    SHUNT_CHECK_MPI(PMPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
                    if (ok && k >= pol.warmup) samples[i].push_back(t);
                }
            for (std::size_t i = 0; i < todo.size(); ++i) {
                if (failed[i] || samples[i].empty()) continue;
                const double best = *std::min_element(samples[i].begin(), samples[i].end());
                points[i].push_back({static_cast<double>(bytes), best, robust_summary(samples[i]).spread});
            }
        }
        for (std::size_t i = 0; i < todo.size(); ++i)
            if (!failed[i]) out.emplace_back(table_names::nccl(op, todo[i], shape), time_table(std::move(points[i])));
    }
    return out;
}

}  // namespace shunt
