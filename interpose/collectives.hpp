// interpose/collectives.hpp: the collective executor: one path for every collective (descriptor, checks, per-communicator topology and planner, shunt's schedule or the library).
#pragma once

#include <shunt/collectives/mpi_call.hpp>
#include <shunt/plan/collective.hpp>
#include <shunt/plan/pass.hpp>
#include <shunt/topology/topology.hpp>

#include "counters.hpp"

#include <mpi.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>

namespace shunt::detail {

class runtime;
class device_stage;

/// The collectives shunt can run (MPI_Allreduce .. MPI_Alltoallv). Each is one MPI form in
/// collectives/ (mpi_allreduce, ...: the library's call, the checks that leave a call to the
/// library, the device spans, shunt's schedule); run() is the one path every call takes:
/// eligibility, the lock-free settled decision, the form's checks, device staging, the
/// communicator's planner, shunt's schedule or the library, timing and counting.
///
/// Every decision must come out the same on every rank of a call, or ranks run different
/// algorithms and hang. So a call goes to shunt or to the library only on what every rank knows
/// alike: the communicator (inter or intra, size), the operation and the reduction's datatype
/// (the same on every rank by MPI's rules), the byte count of the whole operation (the type
/// signatures match), and the planner's agreed choice. What differs between ranks (a datatype
/// with gaps on one rank, dense on another) is bridged locally by packing.
class coll_executor {
public:
    explicit coll_executor(runtime& rt) noexcept : rt_(rt) {}
    coll_executor(const coll_executor&) = delete;
    coll_executor& operator=(const coll_executor&) = delete;

    /// A communicator's state for collectives: its topology and planners, or why it has none.
    struct context {
        bool usable = false;
        pass_reason why = pass_reason::unsupported;  ///< when not usable
        const topology* topo = nullptr;  ///< cached on the same communicator, freed with it
        std::shared_ptr<const topology> topo_owner;  ///< topo, for schedules that outlive a call
        std::shared_ptr<collective_tuner> tuner;
        /// The decisions of nonblocking and persistent calls (nullptr: they go to the library).
        std::unique_ptr<nonblocking_plan> nbc;
        /// Tags of nonblocking and persistent schedules: [first, first + span) and the span after
        /// it, handed out in call order (the same on every rank).
        int tag_first = 0, tag_span = 0;
        std::atomic<std::uint64_t> nbc_calls{0}, persistent_calls{0};
        /// Nonblocking and persistent decisions already logged, per shim and size class.
        std::array<std::atomic<bool>,
                   (static_cast<std::size_t>(last_collective) - static_cast<std::size_t>(first_collective) + 1) *
                       nonblocking_plan::max_class>
            nbc_logged{};
    };

    /// Why `a` went to the library, where it repeats a call of this thread that went there by the
    /// planner's settled decision or (nonblocking) for want of a context (and nothing it depends
    /// on changed since): the caller counts it and passes it on at once; else pass_reason::none.
    /// Before run(), which decides and counts every other call. `nonblocking`: a call of the
    /// nonblocking form (MPI_I<name>), whose kept calls are its own.
    template <class Form>
    pass_reason kept(const mpi_coll_args& a, bool nonblocking) noexcept;
    /// Runs one call of the collective whose MPI form is `Form`, intercepted as shim `s`: the
    /// float sums that may be compressed through the compression executor, which runs them
    /// compressed or as run_exact().
    template <class Form>
    int run(shim s, mpi_coll_args a) noexcept;
    /// Starts one nonblocking call (MPI_I<name>) of `Form`, its request into `*request`.
    template <class Form>
    int start(shim s, mpi_coll_args a, MPI_Request* request) noexcept;
    /// Makes one persistent collective (MPI_<Name>_init) of `Form`.
    template <class Form>
    int init(shim s, mpi_coll_args a, MPI_Info info, MPI_Request* request) noexcept;
    /// Runs one call without compression.
    template <class Form>
    int run_exact(shim s, mpi_coll_args a) noexcept;

    /// True when collectives on comm may go to shunt at all (MPI running, not SHUNT_COLL=library).
    bool enabled(MPI_Comm comm) noexcept;
    /// comm's context, built on first use (collective over comm); nullptr when comm is not valid.
    context* context_of(MPI_Comm comm) noexcept;

private:
    /// comm's context if it has one (never collective; cached per thread).
    context* existing_context(MPI_Comm comm) noexcept;
    /// True when comm's planner has settled on the library for (op, bytes): the lock-free path
    /// taken before any other check (counted as a planned pass by the caller).
    bool settled_on_library(MPI_Comm comm, coll_op op, std::int64_t bytes, bool live) noexcept;
    /// The planner's choice, shunt's schedule (`run`) or the library (`library`), timing, counting;
    /// `live` false: decided from the model without measuring (a floating-point reduction).
    template <class Library, class Shunt>
    int collective(shim s, coll_op op, MPI_Comm comm, std::int64_t bytes, bool live, device_stage& dev, Library library,
                   Shunt run) noexcept;
    void log_decision(const context& ctx, coll_op op, std::int64_t bytes, bool live, const char* name) noexcept;
    /// The decision of a nonblocking or persistent call of `op` (see nonblocking_plan), or the
    /// library with why (`why` set) where shunt cannot run it; logs it on first use.
    nonblocking_plan::pick nonblocking_pick(shim s, context& ctx, coll_op op, const mpi_coll_facts& f,
                                            pass_reason& why) noexcept;
    /// The checks of a nonblocking or persistent call of `Form` before shunt's schedule may run it:
    /// none with `f`, `ctx` and `pick` filled, else why the library takes it. `settled`: a call
    /// whose size class the planner settled on the library passes (nonblocking calls; persistent
    /// ones are planned when made).
    template <class Form>
    pass_reason screen_nonblocking(shim s, const mpi_coll_args& a, bool settled, mpi_coll_facts& f, context*& ctx,
                                   nonblocking_plan::pick& pick) noexcept;
    /// Keeps a nonblocking call the library took by the planner's decision (see kept()), with
    /// the gate's word (fast_gate::kept()) read before it was screened.
    template <class Form>
    void keep_nonblocking(const mpi_coll_args& a, std::uint64_t gate, pass_reason why) noexcept;
    /// The agreement of the planners (element-wise maximum over comm's ranks), progressing
    /// nonblocking schedules while it waits.
    collective_tuner::agree_fn agree_on(MPI_Comm comm) noexcept;

    runtime& rt_;
};

}  // namespace shunt::detail
