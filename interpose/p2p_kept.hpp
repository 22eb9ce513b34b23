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
struct alignas(64) kept_p2p {
    MPI_Datatype type{};
    int count = -1;  ///< -1: nothing kept
    pass_reason why = pass_reason::none;
    std::uint64_t gate = fast_gate::stale;  ///< no word matches it
    std::uint64_t generation = 0;
    std::atomic<std::uint64_t>* taken = nullptr;  ///< the planner's use count (planned ones)
};
/// What a call of no data repeats: plan_call passes any call of count 0 to the library
/// (pass_reason::empty) whatever its datatype, buffer and peer, so it needs no slot.
inline constexpr kept_p2p kept_empty{{}, 0, pass_reason::empty};
inline constexpr std::size_t kept_ways = 4;
inline thread_local kept_p2p kept_p2ps[2 * kept_ways];

/// The slot of `(d, t)`: written by p2p_executor::plan_call, read by kept_for. The way is the top
/// two bits of a multiplicative hash of the handle's low 32 bits (an MPICH handle is 32 bits; an
/// Open MPI handle is a pointer, whose low bits differ between types): a 32-bit immediate
/// multiply, so the shims' check needs no register for the constant.
[[gnu::always_inline]] inline kept_p2p& kept_slot(direction d, MPI_Datatype t) noexcept {
    std::uint64_t h = 0;
    std::memcpy(&h, &t, sizeof t < sizeof h ? sizeof t : sizeof h);
    const std::size_t way = static_cast<std::uint32_t>(static_cast<std::uint32_t>(h) * 0x9E3779B9u) >> 30;
    return kept_p2ps[(d == direction::recv ? kept_ways : 0) + way];
}

/// The slot of the kept call `(d, count, type)` when the call repeats it under gate word `gate`
/// (fast_gate::now() for the shims, fast_gate::for_executor() for the executor) with a model of
/// generation `generation()` (called only for a planned one), or nullptr where the full decision
/// is due. An empty slot's gate is no word's, so nothing repeats before the runtime has kept a
/// call, and nothing after a blocker is set. A call of count 0 (never in a slot) repeats
/// kept_empty under any word without a blocker.
template <class Generation>
[[gnu::always_inline]] inline const kept_p2p* kept_for(direction d, const void* buf, int count, MPI_Datatype type,
                                                       int peer, std::uint64_t gate, Generation generation) noexcept {
    const kept_p2p& k = kept_slot(d, type);
    if (k.count != count || k.type != type || k.gate != gate || buf == nullptr || peer == MPI_PROC_NULL) [[unlikely]]
        return count == 0 && fast_gate::clear(gate) ? &kept_empty : nullptr;
    // A contiguous run is one whatever the model says.
    if (k.why != pass_reason::contiguous && k.generation != generation()) return nullptr;
    return &k;
}

[[gnu::always_inline]] inline const kept_p2p* kept_for(runtime& rt, direction d, const void* buf, int count,
                                                       MPI_Datatype type, int peer, std::uint64_t gate) noexcept {
    return kept_for(d, buf, count, type, peer, gate, [&] { return rt.model().generation(); });
}

/// The shims' check of MPI_Isend and MPI_Irecv (fast_path.hpp), before the runtime is looked
/// up: the slot and the gate's word first, the runtime (built by then: a slot is written only by
/// a running runtime, which is never destroyed) only for a planned call's model generation. A
/// null request goes to the library as the runtime would send it (pass_reason::bad_argument,
/// counted only under SHUNT_REPORT, which blocks this path).
[[gnu::always_inline]] inline bool repeats_kept_p2p(direction d, const void* buf, int count, MPI_Datatype type,
                                                    int peer) noexcept {
    return kept_for(d, buf, count, type, peer, fast_gate::now(),
                    [] { return runtime::built()->model().generation(); }) != nullptr;
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
