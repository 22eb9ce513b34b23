// interpose/nbc.hpp: shunt's nonblocking and persistent collectives in flight: schedules suspended in fibers, the requests the application holds for them, and their progress from every completion call.
#pragma once

#include <shunt/collectives/mpi_transport.hpp>

#include "counters.hpp"
#include "fiber.hpp"

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

namespace shunt::detail {

class runtime;

/// The nonblocking collectives shunt runs (MPI_Iallreduce .. MPI_Ialltoallv) and the persistent
/// ones (MPI_Allreduce_init .., MPI_Start).
///
/// How one runs: the blocking schedule of the collective's MPI form, on a fiber, over a transport
/// whose waits suspend it (mpi_waiter): the call posts the first step's messages and returns; each
/// progress() tests the requests a suspended schedule waits for and resumes it when they are done,
/// up to its next wait or its end. The schedule's control flow (which may depend on data it
/// received, as alltoallv's sizes) and its scratch memory are the blocking one's. Each runs on the
/// communicator's private duplicate with a tag of its own, so several in flight on one
/// communicator, and blocking collectives beside them, never take each other's messages.
///
/// The application's request is a real library handle, so that it mixes with its other requests
/// in every completion call: a generalized request (MPI_Grequest_start) for a nonblocking call,
/// completed when the schedule ends; for a persistent one, a persistent zero-byte receive from
/// this process on a private MPI_COMM_SELF duplicate, started with it by MPI_Start(all) and
/// matched by a zero-byte send when the schedule ends. While any schedule is in flight, completion
/// calls, blocking point-to-point calls and shunt's own blocking schedules poll (progress, then the
/// library's test) instead of blocking in the library, so a rank waiting there keeps its schedules
/// moving. A blocking collective the library runs cannot: a nonblocking collective never matches a
/// blocking one, and the other ranks may have nothing in flight, so it stays the library's
/// blocking call (schedules move just before it).
/// MPI_Cancel and MPI_Request_free of these requests are refused as the libraries refuse them for
/// their own nonblocking collectives. Thread-safe: one thread at a time progresses a schedule.
class nbc_executor {
public:
    explicit nbc_executor(runtime& rt) noexcept : rt_(rt) {}
    nbc_executor(const nbc_executor&) = delete;
    nbc_executor& operator=(const nbc_executor&) = delete;

    /// The schedule of one call: runs the collective over a transport that waits with `waiter`.
    using schedule = std::function<void(mpi_waiter& waiter)>;
    /// What a running schedule holds on to until it ends (types, topology): released with the op.
    using keepalive = std::shared_ptr<void>;

    /// Starts `body` as the nonblocking collective `s` of `bytes` bytes and returns its request in
    /// `*request`. Throws where it cannot (no memory, the library's generalized requests fail).
    void launch(shim s, std::int64_t bytes, schedule body, keepalive keep, MPI_Request* request);
    /// Makes a persistent collective: its request in `*request`, run by start_persistent().
    /// Throws where it cannot.
    void make_persistent(shim s, std::int64_t bytes, schedule body, keepalive keep, MPI_Request* request);
    /// After MPI_Start / MPI_Startall started `requests` in the library: starts the schedules of
    /// shunt's persistent collectives among them (and counts them as the call's).
    void start_persistent(shim s, int n, const MPI_Request* requests) noexcept;

    /// True when a schedule is in flight: completion calls and blocking calls then poll.
    bool in_flight() const noexcept { return active_.load(std::memory_order_acquire) != 0; }
    /// True when `h` is a request of shunt's collectives (refused by MPI_Cancel, MPI_Request_free
    /// while active). Cheap while there is none.
    bool owns(MPI_Request h) const noexcept;
    /// MPI_Request_free of a request of shunt's: a persistent one that is not active is freed,
    /// anything else refused (returned error code, as the library's own, on MPI_COMM_WORLD).
    int request_free(MPI_Request* h) noexcept;
    /// MPI_Cancel of a request of shunt's: refused.
    int cancel(MPI_Request* h) noexcept;

    /// Moves every schedule in flight as far as it can go without waiting. Never blocks. Inline:
    /// every passed-through call asks, and with nothing in flight or released the answer is two loads.
    /// True when no schedule is in flight and none waits to be released: progress() has nothing to
    /// do (what a shim's unguarded fast path asks; fast_path.hpp).
    bool idle() const noexcept {
        return active_.load(std::memory_order_acquire) == 0 && released_n_.load(std::memory_order_acquire) == 0;
    }
    void progress() noexcept {
        if (active_.load(std::memory_order_acquire) != 0 || released_n_.load(std::memory_order_acquire) != 0)
            progress_slow();
    }
    /// Completes `*request` (the library's) while progressing: PMPI_Wait's result.
    int wait(MPI_Request* request, MPI_Status* status) noexcept;
    /// Completes requests[0..n) while progressing, as PMPI_Waitall would (statuses, result).
    int wait_all(int n, MPI_Request requests[], MPI_Status statuses[]) noexcept;
    /// Polls `test` (a call returning an MPI code and setting *done) with progress between tries,
    /// until done or an error: how shunt's blocking calls wait while schedules are in flight.
    template <class Test>
    int poll(Test test) noexcept {
        for (;;) {
            progress();
            int done = 0;
            const int rc = test(&done);
            if (rc != MPI_SUCCESS || done) return rc;
        }
    }
    /// The waiter of blocking schedules: PMPI_Waitall, or polling with progress while schedules
    /// are in flight.
    mpi_waiter& blocking_waiter() noexcept { return blocking_waiter_; }

    /// At MPI_Finalize: progresses until no schedule is in flight, then lets go of every
    /// collective's resources (persistent requests the application did not free included).
    void drain() noexcept;

    struct op;

private:
    /// progress() when something is in flight or released.
    void progress_slow() noexcept;

    class polling_waiter final : public mpi_waiter {
    public:
        explicit polling_waiter(nbc_executor& x) noexcept : x_(x) {}
        int wait_all(std::span<MPI_Request> requests) override;

    private:
        nbc_executor& x_;
    };

    /// Runs op's schedule from its start (a fresh fiber); true when it ended at once.
    bool begin(const std::shared_ptr<op>& o);
    /// Progresses one op (its busy flag held): true when its schedule has ended.
    bool advance(op& o) noexcept;
    /// The end of a schedule: the application's request completes.
    void finish(op& o) noexcept;
    void add(const std::shared_ptr<op>& o);
    /// Drops shunt's record of request `h` (its op is released by the next collect()).
    void forget(MPI_Request h) noexcept;
    /// Releases the ops forgotten since the last call.
    void collect() noexcept;
    /// The private MPI_COMM_SELF duplicate of persistent requests (made on first use).
    MPI_Comm self_comm();

    static int query_fn(void* extra, MPI_Status* status);
    static int free_fn(void* extra);
    static int cancel_fn(void* extra, int complete);

    runtime& rt_;
    mutable std::mutex mutex_;  ///< guards the tables below; never held across a schedule
    std::unordered_map<MPI_Request, std::shared_ptr<op>> ops_;  ///< every request of shunt's
    std::vector<std::shared_ptr<op>> running_;  ///< the ops in flight
    std::atomic<std::size_t> active_{0};  ///< running_.size()
    std::atomic<std::size_t> known_{0};  ///< ops_.size()
    std::vector<std::shared_ptr<op>> released_;  ///< forgotten, to be released outside the library
    std::atomic<std::size_t> released_n_{0};
    MPI_Comm self_ = MPI_COMM_NULL;
    int next_self_tag_ = 0;
    polling_waiter blocking_waiter_{*this};
};

}  // namespace shunt::detail
