// interpose/pack.hpp: the MPI_Pack / MPI_Unpack executor: the planner's choice per call, a kept decision for repeated calls, shunt's host packer or device kernels, or the library.
#pragma once

#include <shunt/datatype/type_info.hpp>
#include <shunt/plan/pass.hpp>
#include <shunt/plan/planner.hpp>
#include <shunt/plan/sampling.hpp>

#include "counters.hpp"
#include "per_thread.hpp"

#include <mpi.h>

#include <cstdint>

namespace shunt::detail {

class runtime;
class pack_program;

/// MPI_Pack and MPI_Unpack. A call is shunt's when the planner chooses shunt's host packer for
/// its layout (measuring both packers on a layout's first calls), or when a buffer is device
/// memory (device kernels, or the host packer and a copy). A repeated call (the common case: one
/// halo type packed step after step) takes the thread's kept call: its decision and built pack
/// program, without the type lookup, the planner or building the program again. Thread-safe.
class pack_executor {
public:
    /// Defined where repeat_calls is complete: per_thread deletes it at thread exit.
    explicit pack_executor(runtime& rt) noexcept;
    pack_executor(const pack_executor&) = delete;
    pack_executor& operator=(const pack_executor&) = delete;

    int pack(const void* inbuf, int incount, MPI_Datatype type, void* outbuf, int outsize, int* position,
             MPI_Comm comm) noexcept;
    int unpack(const void* inbuf, int insize, int* position, void* outbuf, int outcount, MPI_Datatype type,
               MPI_Comm comm) noexcept;

private:
    /// What a call keeps of its pack decision: enough to time the call.
    struct pack_plan {
        std::int64_t bytes = 0, blocks = 0;
        bool decided = false;  ///< the planner chose (not forced, not empty)
        bool measured = false;  ///< from the key's own measured times: the other method is not explored
        planner::measure_call measure;  ///< while the planner measures the key: this call's part
    };
    struct repeat_call;
    struct repeat_calls;

    /// The decision for MPI_Pack (or MPI_Unpack, by d) of `count` x `type` into `room` bytes:
    /// none (shunt's packer), planned (the planner chose the library), or why it passes. Sets
    /// `info` and `bytes` once the type is known, `plan`, and `program` where shunt packs and
    /// the thread keeps the call's built program (nullptr: pack_host builds one).
    pass_reason prepare(direction d, MPI_Datatype type, int count, std::int64_t room, const type_info*& info,
                        std::int64_t& bytes, pack_plan& plan, const pack_program*& program) noexcept;
    /// prepare for a call that is not the thread's kept one: looks the type up, asks the
    /// planner, and keeps the call where its decision is settled.
    pass_reason decide(direction d, MPI_Datatype type, int count, std::int64_t room, const type_info*& info,
                       std::int64_t& bytes, pack_plan& plan, const pack_program*& program) noexcept;
    /// This thread's kept call for direction d; nullptr without memory.
    repeat_call* kept_call(direction d) noexcept;
    /// The part of MPI_Pack and MPI_Unpack after the argument checks: forced choice, the
    /// communicator probe, the plan and its sampling, shunt's move or the library, counting and
    /// position.
    template <class Pass, class Probe, class Move>
    int transfer(direction d, MPI_Datatype type, int count, std::int64_t room, int* position, MPI_Comm comm, Pass pass,
                 Probe probe, Move move) noexcept;
    /// MPI_Pack / MPI_Unpack of a device buffer; false when neither buffer is on a device.
    bool device_pack(direction d, const void* in, void* out, int count, MPI_Datatype type, std::int64_t room,
                     int* position, MPI_Comm comm, int& rc) noexcept;
    /// This thread's sampler of direction d (plan/sampling.hpp).
    static call_sampler& sampler(direction d) noexcept;
    /// Passes a measuring call's seconds to the planner; logs the key's verdict when it settles.
    void measured(direction d, MPI_Datatype type, int count, const pack_plan& plan, double seconds) noexcept;
    /// Feeds a sampled call's seconds to the model's online refinement.
    void observe(bool library, direction d, const pack_plan& plan, double seconds) noexcept;

    runtime& rt_;
    per_thread<repeat_calls> repeats_;
};

}  // namespace shunt::detail
