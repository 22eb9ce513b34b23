// bench/coll_timing.hpp: the timing of collective variants shared by the MPI benchmarks: interleaved trials, the slowest rank's time, best of each.
#pragma once

#include "harness.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace shunt::bench {

/// Times `variants` collectively: every trial runs each variant once (after a barrier), in a
/// balanced order (trial_order: the same on every rank, each variant right after each other one
/// equally often); a trial's time is the slowest rank's; the best trial is kept. The trial count
/// comes from the slowest rank's warm-up, so all ranks run the same calls.
inline std::vector<double> measure_collective(const std::vector<std::function<void()>>& variants, const options& o,
                                              int warmup) {
    const std::size_t n = variants.size();
    std::vector<double> local(n, 0);
    for (std::size_t v = 0; v < n; ++v)
        for (int w = 0; w < warmup; ++w) {
            PMPI_Barrier(MPI_COMM_WORLD);
            const double t0 = MPI_Wtime();
            variants[v]();
            local[v] = MPI_Wtime() - t0;
        }
    // Calls per trial (about 2 ms of the slowest variant, 1000 at most) and the number of trials
    // that fit --time: from the slowest rank's warm-up, the same on every rank.
    std::vector<double> slowest(n);
    PMPI_Allreduce(local.data(), slowest.data(), static_cast<int>(n), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const double call = std::max(*std::max_element(slowest.begin(), slowest.end()), 1e-7);
    const int reps = o.reps > 0 ? static_cast<int>(std::min<std::int64_t>(o.reps, 1 << 20))
                                : static_cast<int>(std::clamp(2e-3 / call, 1.0, 1000.0));
    const double per_trial = call * reps * static_cast<double>(n);
    const int trials = static_cast<int>(std::clamp<double>(o.time_s / per_trial, 3, o.trials));
    std::vector<double> best(n, std::numeric_limits<double>::infinity());
    std::vector<double> times(n), mx(n);
    trial_order order(n);
    for (int t = 0; t < trials; ++t) {
        for (const std::size_t v : order.next()) {
            PMPI_Barrier(MPI_COMM_WORLD);
            const double t0 = MPI_Wtime();
            for (int r = 0; r < reps; ++r) variants[v]();
            times[v] = (MPI_Wtime() - t0) / reps;
        }
        PMPI_Allreduce(times.data(), mx.data(), static_cast<int>(n), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        for (std::size_t v = 0; v < n; ++v) best[v] = std::min(best[v], mx[v]);
    }
    return best;
}

}  // namespace shunt::bench
