// interpose/p2p_kept.hpp: the thread's kept point-to-point calls, and the check that a call repeats one, inlined into the shims (fast_path.hpp) and the executor.
#pragma once

#include "runtime.hpp"

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace shunt::detail {

/// One of the thread's recent calls that went to the library as one contiguous run or by the
/// planner's settled choice, per direction and a few datatypes: a repeat (same datatype handle and
/// count, the same gate word (gate.hpp: no datatype committed, duplicated or freed, no device
/// taken up since) and, for a planned one, the model unchanged) passes without a type lookup or a
/// plan. Calls the planner still measures are not kept.
struct kept_p2p {
    MPI_Datatype type{};
    int count = -1;  ///< -1: nothing kept
    std::uint64_t gate = 0, generation = 0;
    pass_reason why = pass_reason::none;
    std::atomic<std::uint64_t>* taken = nullptr;  ///< the planner's use count (planned ones)
};
inline constexpr std::size_t kept_ways = 4;
inline thread_local kept_p2p kept_p2ps[2 * kept_ways];

/// The slot of `(d, t)`: written by p2p_executor::plan_call, read by kept_for.
inline kept_p2p& kept_slot(direction d, MPI_Datatype t) noexcept {
    std::uint64_t h = 0;
    std::memcpy(&h, &t, sizeof t < sizeof h ? sizeof t : sizeof h);
    const std::size_t way = static_cast<std::size_t>((h * 0x9E3779B97F4A7C15ull) >> 62);
    return kept_p2ps[(d == direction::recv ? kept_ways : 0) + way];
}

/// The kept call `(d, count, type)` repeats under gate word `gate` (fast_gate::now() for the
/// shims, fast_gate::for_executor() for the executor), or nullptr where the full decision is due.
[[gnu::always_inline]] inline const kept_p2p* kept_for(runtime& rt, direction d, const void* buf, int count,
                                                       MPI_Datatype type, int peer, std::uint64_t gate) noexcept {
    const kept_p2p& k = kept_slot(d, type);
    if (k.count != count || k.type != type || k.gate != gate || buf == nullptr || peer == MPI_PROC_NULL)
        return nullptr;
    // A contiguous run is one whatever the model says.
    if (k.why != pass_reason::contiguous && k.generation != rt.model().generation()) return nullptr;
    return &k;
}

// The gate's word holds live() (its `requests` blocker) and counting() (`counting`).
[[gnu::always_inline]] inline bool p2p_executor::quick(runtime& rt, direction d, const void* buf, int count,
                                                       MPI_Datatype type, int peer) noexcept {
    return kept_for(rt, d, buf, count, type, peer, fast_gate::now()) != nullptr;
}

[[gnu::always_inline]] inline bool p2p_executor::quick_pair(runtime& rt, const void* sendbuf, int sendcount,
                                                            MPI_Datatype sendtype, int dest, const void* recvbuf,
                                                            int recvcount, MPI_Datatype recvtype, int source) noexcept {
    const std::uint64_t gate = fast_gate::now();
    return kept_for(rt, direction::send, sendbuf, sendcount, sendtype, dest, gate) != nullptr &&
           kept_for(rt, direction::recv, recvbuf, recvcount, recvtype, source, gate) != nullptr;
}

}  // namespace shunt::detail
