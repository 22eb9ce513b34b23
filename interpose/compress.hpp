// interpose/compress.hpp: the compression executor: lossy gradient compression of float SUM reductions (MPI_Allreduce, MPI_Reduce_scatter(_block)) where SHUNT_COMPRESS or the header API consents: the iteration's call pattern, the agreed plan, error feedback per call site, the NaN/Inf guard, shadow checks.
#pragma once

#include <shunt/collectives/mpi_call.hpp>
#include <shunt/config.hpp>
#include <shunt/plan/collective.hpp>

#include "counters.hpp"

#include <mpi.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace shunt::detail {

class runtime;

/// Runs the MPI_Allreduce, MPI_Reduce_scatter_block and MPI_Reduce_scatter calls that may be
/// compressed: MPI_FLOAT with MPI_SUM on an intra-communicator of several ranks, under consent
/// (SHUNT_COMPRESS, or the header API for a communicator or a thread's call site). Everything
/// else, and every call the plan keeps exact, runs as without compression (`exact`).
///
/// Every decision is the same on every rank: a call's signature (operation, count, element type,
/// consent) is what every rank of a valid call passes alike, so the pattern of calls on a
/// communicator (plan/call_pattern.hpp) locks, breaks and numbers the calls alike on every rank;
/// the plan is made at the same call everywhere, from the ranks' gaps and predictions agreed with
/// an element-wise maximum (the ranks' models may differ), and rank 0's choices are broadcast;
/// the NaN/Inf guard's verdict travels with the compressed data. Thread-safe: one lock per
/// communicator (collectives on one communicator do not run concurrently).
class compress_executor {
public:
    explicit compress_executor(runtime& rt) noexcept : rt_(rt) {}
    compress_executor(const compress_executor&) = delete;
    compress_executor& operator=(const compress_executor&) = delete;

    /// The exact call: the path the call takes without compression.
    using exact_fn = int (*)(void* ctx) noexcept;

    /// True when compression may apply to calls on comm at all (a cheap check: off without
    /// consent from the environment or the header API).
    bool wanted() const noexcept;

    /// One call of `op` (allreduce, reduce_scatter_block or reduce_scatter), compressed or run by
    /// `exact(ctx)`; returns its MPI code.
    int run(shim s, coll_op op, const mpi_coll_args& a, exact_fn exact, void* ctx) noexcept;

    /// The header API's entry (libshunt.so's shunt_compress_control): see
    /// <shunt/compress/control.hpp> for `what`.
    int control(int what, MPI_Comm comm, const char* text, void* data, std::size_t* bytes) noexcept;

    /// SHUNT_REPORT's line of compression counters (empty when nothing was compressed or planned).
    std::string report_text() const;

    /// Counting for the NCCL path (compress_nccl.cpp): a call compressed with method `m` (`floats`
    /// elements sent as `sent` bytes), kept exact by the plan, in the warm-up, outside a confirmed
    /// pattern, run exact after the guard, and a plan made.
    void count_compressed(std::size_t m, std::uint64_t floats, std::uint64_t sent) noexcept;
    void count_planned_exact() noexcept { planned_exact_.fetch_add(1, std::memory_order_relaxed); }
    void count_warmup() noexcept { warmup_.fetch_add(1, std::memory_order_relaxed); }
    void count_unlocked() noexcept { unlocked_.fetch_add(1, std::memory_order_relaxed); }
    void count_fallback() noexcept { fallbacks_.fetch_add(1, std::memory_order_relaxed); }
    void count_plan() noexcept { plans_.fetch_add(1, std::memory_order_relaxed); }
    /// True the first time (the one warning about NaN or Inf).
    bool first_nonfinite() noexcept { return !nonfinite_warned_.exchange(true); }
    /// The consent of the calling thread's scope, else the environment's (the NCCL path: no
    /// MPI communicator to carry one).
    compress_consent thread_or_environment() const noexcept;

    struct context;

private:
    context* context_of(MPI_Comm comm) noexcept;
    bool consent_of(MPI_Comm comm, compress_consent& out) const noexcept;
    void plan(context& c, MPI_Comm comm);

    runtime& rt_;
    std::atomic<bool> overridden_{false};  ///< the header API set a consent somewhere
    std::atomic<bool> nonfinite_warned_{false};
    // Counters for the report.
    std::array<std::atomic<std::uint64_t>, 7> by_method_{};
    std::atomic<std::uint64_t> planned_exact_{0}, warmup_{0}, unlocked_{0}, fallbacks_{0}, plans_{0};
    std::atomic<std::uint64_t> bytes_in_{0}, bytes_sent_{0};
};

}  // namespace shunt::detail
