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
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace shunt {
struct compression_point;
}

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
    explicit compress_executor(runtime& rt) noexcept;
    compress_executor(const compress_executor&) = delete;
    compress_executor& operator=(const compress_executor&) = delete;

    /// The exact call: the path the call takes without compression.
    using exact_fn = int (*)(void* ctx) noexcept;

    /// True when compression may apply to calls on comm at all (a cheap check: off without
    /// consent from the environment or the header API).
    bool wanted() const noexcept { return environment_on_ || overridden_.load(std::memory_order_relaxed); }

    /// One call of `op` (allreduce, reduce_scatter_block or reduce_scatter), compressed or run by
    /// `exact(ctx)`; returns its MPI code.
    int run(shim s, coll_op op, const mpi_coll_args& a, exact_fn exact, void* ctx) noexcept;

    /// The header API's entry (libshunt.so's shunt_compress_control): see
    /// <shunt/compress/control.hpp> for `what`.
    int control(int what, MPI_Comm comm, const char* text, void* data, std::size_t* bytes) noexcept;

    /// SHUNT_REPORT's line of compression counters (empty when nothing was compressed or planned).
    std::string report_text() const;

    /// Counting for the NCCL path (compress_nccl.cpp): a call compressed with method `m` (`bytes`
    /// of data sent as `sent` bytes), kept exact by the plan, in the warm-up, outside a confirmed
    /// pattern, run exact after the guard, and a plan made.
    void count_compressed(std::size_t m, std::uint64_t bytes, std::uint64_t sent) noexcept;
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
    /// The consent of a call on a communicator whose own consent (header API) is `comm`: the
    /// calling thread's scope, else `comm`, else the environment's. Shared by the MPI and NCCL paths.
    compress_consent consent_for(const std::optional<compress_consent>& comm) const noexcept;
    /// The header API's consent text: "default" or null is none (the environment's again), else
    /// off, auto or a list. False for text it does not accept. Setting one on a communicator
    /// calls note_override(), so that wanted() looks further than the environment.
    static bool parse_consent(const char* text, std::optional<compress_consent>& out) noexcept;
    void note_override() noexcept { overridden_.store(true, std::memory_order_relaxed); }
    /// The SHUNT_COMPRESS_CHECK shadow mode's line (rank 0 of the call's communicator only):
    /// `call` of `count` elements at `position`, compressed as `option`, the relative L2 and the
    /// largest error of `got` against `exact` (n values each).
    static void log_check(const char* call, std::int64_t count, std::size_t position, const std::string& option,
                          std::uint64_t compressed, const float* got, const float* exact, std::int64_t n) noexcept;

    struct context;

private:
    context* context_of(MPI_Comm comm) noexcept;
    bool consent_of(MPI_Comm comm, compress_consent& out) const noexcept;
    void plan(context& c, MPI_Comm comm);

    runtime& rt_;
    const bool environment_on_;  ///< SHUNT_COMPRESS consents
    std::atomic<bool> overridden_{false};  ///< the header API set a consent somewhere
    std::atomic<bool> nonfinite_warned_{false};
    // Counters for the report.
    std::array<std::atomic<std::uint64_t>, 7> by_method_{};
    std::atomic<std::uint64_t> planned_exact_{0}, warmup_{0}, unlocked_{0}, fallbacks_{0}, plans_{0};
    std::atomic<std::uint64_t> bytes_in_{0}, bytes_sent_{0};
};

/// The header API's checkpoint of a communicator's error feedback (MPI and NCCL alike):
/// "shuntcf1", the count of points, then per point its position, step and two residuals as
/// compress::error_feedback::save() writes them. A null point saves as an empty one.
std::vector<std::byte> save_feedback_points(std::span<const compression_point* const> points);

/// Restores what save_feedback_points() wrote into `points` (null entries and positions beyond
/// them are read and dropped). Throws shunt::error for a malformed checkpoint, having changed
/// nothing only where the caller restores into copies (as both paths do).
void restore_feedback_points(std::span<const std::byte> blob, std::span<compression_point* const> points);

}  // namespace shunt::detail
