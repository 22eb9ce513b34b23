// interpose/runtime.hpp: the preload library's runtime: configuration, datatype cache, planner, counters, report.
#pragma once

#include <shunt/config.hpp>
#include <shunt/datatype/cache.hpp>
#include <shunt/datatype/type_info.hpp>
#include <shunt/model/model.hpp>
#include <shunt/plan/collective.hpp>
#include <shunt/plan/planner.hpp>

#include "counters.hpp"
#include "type_memo.hpp"

#include <mpi.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace shunt::detail {

/// Calls made while another shim is active on the same thread go straight to the library.
class reentry_guard {
public:
    reentry_guard() noexcept : outermost_(!active_) { active_ = true; }
    ~reentry_guard() {
        if (outermost_) active_ = false;
    }
    reentry_guard(const reentry_guard&) = delete;
    reentry_guard& operator=(const reentry_guard&) = delete;
    bool outermost() const noexcept { return outermost_; }

private:
    static inline thread_local bool active_ = false;
    bool outermost_;
};

/// Everything the shims delegate to, built lazily once. Every member is noexcept: shunt's
/// failures are logged once and the call goes to the library; the library's return code is
/// returned unchanged. Thread-safe under MPI_THREAD_MULTIPLE.
class runtime {
public:
    /// The runtime, or nullptr when SHUNT_DISABLE is set (pure pass-through) or it could not be
    /// built. Never destroyed: shims may run during static destruction.
    static runtime* instance() noexcept;

    int init(int* argc, char*** argv) noexcept;
    int init_thread(int* argc, char*** argv, int required, int* provided) noexcept;
    int finalize() noexcept;
    int type_commit(MPI_Datatype* type) noexcept;
    int type_free(MPI_Datatype* type) noexcept;
    int type_dup(MPI_Datatype oldtype, MPI_Datatype* newtype) noexcept;
    int pack(const void* inbuf, int incount, MPI_Datatype type, void* outbuf, int outsize, int* position,
             MPI_Comm comm) noexcept;
    int unpack(const void* inbuf, int insize, int* position, void* outbuf, int outcount, MPI_Datatype type,
               MPI_Comm comm) noexcept;
    int pack_size(int incount, MPI_Datatype type, MPI_Comm comm, int* size) noexcept;

    // Collectives (collectives.cpp): shunt's schedule where the planner chooses it, else the library.
    int allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) noexcept;
    int reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, int root,
               MPI_Comm comm) noexcept;
    int reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type, MPI_Op op,
                             MPI_Comm comm) noexcept;
    int reduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[], MPI_Datatype type, MPI_Op op,
                       MPI_Comm comm) noexcept;
    int allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm) noexcept;
    int allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                   const int displs[], MPI_Datatype recvtype, MPI_Comm comm) noexcept;
    int bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) noexcept;
    int alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                 MPI_Datatype recvtype, MPI_Comm comm) noexcept;

    /// A communicator's topology and collective planner (cached on it as an attribute).
    struct coll_context;

private:
    enum class state : int { before, running, finalized };

    explicit runtime(const settings& cfg);

    void count(shim s) noexcept { stats_.add(counter_index::calls(s)); }
    void count_pass(direction d, pass_reason why) noexcept { stats_.add(counter_index::passed(d, why)); }
    void count_done(direction d, std::int64_t bytes) noexcept {
        stats_.add(counter_index::handled(d));
        stats_.add(counter_index::bytes(d), static_cast<std::uint64_t>(bytes));
    }
    bool running() noexcept;
    void started(int thread_level) noexcept;
    /// What MPI_Pack and MPI_Unpack keep of a pack decision: enough to time the call.
    struct pack_plan {
        std::int64_t bytes = 0, blocks = 0;
        bool decided = false;  ///< the planner chose (not forced, not empty)
    };
    pass_reason prepare(direction d, MPI_Datatype type, int count, std::int64_t room, const type_info*& info,
                        std::int64_t& bytes, pack_plan& plan) noexcept;
    /// The part of MPI_Pack and MPI_Unpack after the argument checks: forced choice, the
    /// communicator probe, the plan, shunt's move or the library, counting and position.
    template <class Pass, class Probe, class Move>
    int transfer(direction d, MPI_Datatype type, int count, std::int64_t room, int* position, MPI_Comm comm,
                 Pass pass, Probe probe, Move move) noexcept;
    void internal_failure(shim s, const char* what) noexcept;
    void log_type(MPI_Datatype type, const char* event) noexcept;
    void report() noexcept;

    /// Times one call in `sample_period` of shunt's and the library's packing and feeds the
    /// model's online refinement.
    static constexpr std::uint32_t sample_period = 64;
    bool sample_now() noexcept;
    /// One timed call in explore_period runs the alternative the plan did not choose.
    static constexpr std::uint32_t explore_period = 8;
    bool explore_now() noexcept;
    void observe(bool library, direction d, const pack_plan& plan, double seconds) noexcept;
    std::string decisions_text(bool one_line) const;

    /// True when collectives on comm may go to shunt at all (MPI running, not SHUNT_COLL=library).
    bool collectives_on(MPI_Comm comm) noexcept;
    /// comm's context, built on first use (collective over comm); nullptr when comm is not valid.
    coll_context* context(MPI_Comm comm) noexcept;
    /// comm's context if it has one (never collective; cached per thread).
    coll_context* existing_context(MPI_Comm comm) noexcept;
    /// True when comm's planner has settled on the library for (op, bytes): the lock-free path
    /// taken before any other check (counted as a planned pass by the caller).
    bool settled_on_library(MPI_Comm comm, coll_op op, std::int64_t bytes) noexcept;
    /// The planner's choice, shunt's schedule (`run`) or the library (`library`), timing, counting.
    template <class Library, class Shunt>
    int collective(shim s, coll_op op, MPI_Comm comm, std::int64_t bytes, Library library, Shunt run) noexcept;
    void log_decision(const coll_context& ctx, coll_op op, std::int64_t bytes, const char* name) noexcept;

    const settings& cfg_;
    std::string model_note_;  ///< why the model file was not used, said once at start
    std::shared_ptr<cost_model> model_;
    type_cache types_;
    type_memo memo_{types_};
    planner planner_;
    counters stats_;
    std::atomic<state> state_{state::before};
    std::atomic<bool> started_{false};
    std::array<std::atomic<bool>, shim_count> failure_logged_{};
    std::atomic<bool> topology_warned_{false};
    /// Every communicator's collective planner, for the report (kept after the communicator is freed).
    mutable std::mutex tuners_mutex_;
    std::vector<std::shared_ptr<collective_tuner>> tuners_;
};

}  // namespace shunt::detail
