// interpose/coll_kept.hpp: the thread's kept collective calls, and the check that a call repeats one, inlined into the shims (fast_path.hpp) and the collective executor.
#pragma once

#include <shunt/collectives/mpi_call.hpp>
#include <shunt/plan/collective.hpp>

#include "runtime.hpp"

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace shunt::detail {

/// Changes whenever a context is made or deleted, so that per-thread lookups cached by
/// communicator handle (which the library may reuse for a new communicator) are dropped.
inline std::atomic<std::uint64_t> context_epoch{0};

/// The float sums the compression executor may take (MPI_Allreduce, MPI_Reduce_scatter(_block)).
template <class Form>
constexpr bool compressible =
    Form::op == coll_op::allreduce || Form::op == coll_op::reduce_scatter_block || Form::op == coll_op::reduce_scatter;

/// Collectives whose settled decision depends only on (communicator, receive count and type,
/// reduction): the key of their kept calls.
template <class Form>
constexpr bool kept_by_recv =
    Form::op == coll_op::allreduce || Form::op == coll_op::reduce || Form::op == coll_op::reduce_scatter_block ||
    Form::op == coll_op::bcast || Form::op == coll_op::allgather || Form::op == coll_op::alltoall;

/// The thread's last call of each collective that went to the library by the planner's settled
/// decision: a repeat of it (same communicator, count, datatype and reduction, the same gate word
/// (gate.hpp: no communicator freed, no datatype committed, duplicated or freed, no device taken
/// up since)) goes straight to the library. Settled decisions never change, so the repeat would
/// be planned the same way.
struct kept_collective {
    MPI_Comm comm{};
    MPI_Datatype type{};
    MPI_Op op{};
    int count = -1;  ///< -1: nothing kept
    std::uint64_t gate = 0;  ///< fast_gate::kept() before the call was screened
    collective_tuner* tuner = nullptr;  ///< the communicator's, alive while `gate` holds
    std::int64_t bytes = 0;
    bool live = false;
    /// Nonblocking calls: kept by the settled decision (final), or by the plan made when the
    /// communicator was set up, which holds until a blocking call settles the size class.
    bool settled = true;
    /// Why the call went to the library: the planner's decision, or (nonblocking calls) no
    /// context of shunt's on the communicator, which only a blocking collective makes (making one
    /// advances the gate's word); `tuner` is then null.
    pass_reason why = pass_reason::planned;
};
inline thread_local kept_collective kept_collectives[coll_op_names.size()];
inline thread_local kept_collective kept_nonblocking[coll_op_names.size()];

/// The kept call `a` of Form repeats (blocking, or `nonblocking`) under gate word `gate`
/// (fast_gate::for_executor() for the executor; the shims' word, which stops at counting), or
/// nullptr where the full decision is due. Counts nothing.
template <class Form>
[[gnu::always_inline]] inline const kept_collective* kept_repeat(runtime& rt, const mpi_coll_args& a,
                                                                 bool nonblocking, std::uint64_t gate) noexcept {
    static_assert(kept_by_recv<Form>);
    const kept_collective& k = (nonblocking ? kept_nonblocking : kept_collectives)[static_cast<std::size_t>(Form::op)];
    if (k.count != a.recvcount || k.comm != a.comm || k.type != a.recvtype || k.op != a.op || k.gate != gate ||
        (compressible<Form> && !nonblocking && rt.compression().wanted()) ||
        (!k.settled && k.tuner->settled(Form::op, k.bytes, k.live)))
        return nullptr;
    return &k;
}

}  // namespace shunt::detail
