// interpose/runtime.hpp: the preload library's runtime: configuration, datatype cache, planner, counters, report.
#pragma once

#include <shunt/config.hpp>
#include <shunt/datatype/cache.hpp>
#include <shunt/datatype/type_info.hpp>
#include <shunt/model/model.hpp>
#include <shunt/plan/collective.hpp>
#include <shunt/plan/planner.hpp>

#include "counters.hpp"
#include "per_thread.hpp"
#include "type_memo.hpp"

#include <mpi.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace shunt::gpu {
class device_form;
}  // namespace shunt::gpu

namespace shunt::detail {

class pack_program;

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

/// Packs (`pack`) or unpacks `count` elements of `type` at `typed` to or from their raw bytes at
/// `packed` with the library's MPI_Pack / MPI_Unpack on `comm`, in pieces of at most INT_MAX
/// elements and bytes: how shunt moves a datatype it does not know. Throws mpi_error (the
/// library's error handler has run), or error where the packed form is not the raw data.
void library_move(bool pack, void* typed, std::int64_t count, MPI_Datatype type, std::byte* packed, MPI_Comm comm);

/// MPI_ERRORS_RETURN on a communicator (none for MPI_COMM_NULL) for this object's lifetime, its
/// handler restored after: for shunt's own calls whose errors the application must not see
/// through its handler. Other threads using the communicator meanwhile see it too.
class errors_returned {
public:
    explicit errors_returned(MPI_Comm comm) noexcept : comm_(comm) {
        swapped_ = comm != MPI_COMM_NULL && PMPI_Comm_get_errhandler(comm, &old_) == MPI_SUCCESS &&
                   PMPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN) == MPI_SUCCESS;
    }
    ~errors_returned() {
        if (swapped_) PMPI_Comm_set_errhandler(comm_, old_);
        if (old_ != MPI_ERRHANDLER_NULL) PMPI_Errhandler_free(&old_);
    }
    errors_returned(const errors_returned&) = delete;
    errors_returned& operator=(const errors_returned&) = delete;

private:
    MPI_Comm comm_;
    MPI_Errhandler old_ = MPI_ERRHANDLER_NULL;
    bool swapped_ = false;
};

/// Everything the shims delegate to, built lazily once. Every member is noexcept: shunt's
/// failures are logged once and the call goes to the library; the library's return code is
/// returned unchanged. Thread-safe under MPI_THREAD_MULTIPLE.
class runtime {
public:
    /// The runtime, or nullptr when SHUNT_DISABLE is set (pure pass-through) or it could not be
    /// built. Never destroyed: shims may run during static destruction.
    static runtime* instance() noexcept {
        static runtime* const rt = create();  // inline: every shim asks, so no call for it
        return rt;
    }

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
    /// One planner decision per communicator (not per size class): the sizes differ per rank, so
    /// no size is common to all ranks without a round of communication.
    int alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                  void* recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype,
                  MPI_Comm comm) noexcept;
    int alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                 MPI_Datatype recvtype, MPI_Comm comm) noexcept;
    // MPI_Alltoallw and MPI_Neighbor_alltoallw (alltoallw.cpp): every block packed in one fused
    // pass, the bytes moved by the library's own call with byte types, every block unpacked in
    // one pass; one decision per communicator, agreed by all ranks on its first call.
    int alltoallw(const void* sendbuf, const int sendcounts[], const int sdispls[], const MPI_Datatype sendtypes[],
                  void* recvbuf, const int recvcounts[], const int rdispls[], const MPI_Datatype recvtypes[],
                  MPI_Comm comm) noexcept;
    int neighbor_alltoallw(const void* sendbuf, const int sendcounts[], const MPI_Aint sdispls[],
                           const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[],
                           const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm) noexcept;
    /// One side (send or receive) of such a call as the library's byte exchange sees it, and
    /// how its packed bytes travel: host memory, or a device buffer by one of the device methods.
    struct w_side;
    /// What the report keeps of one MPI_Alltoallw / MPI_Neighbor_alltoallw decision on one
    /// communicator (alltoallw.cpp decides; kept after the communicator is freed).
    struct w_record {
        shim op = shim::alltoallw;
        int ranks = 0;
        bool to_shunt = false, forced = false;
        const char* why = "";  ///< a literal: why, when not measured
        double measured[2] = {-1, -1};  ///< library, shunt (seconds); negative: not measured
        std::atomic<std::uint64_t> taken{0};  ///< calls on the decided path
    };
    enum class device_way : std::uint8_t { host, device, one_shot, staged };

    /// A communicator's topology and collective planner (cached on it as an attribute).
    struct coll_context;
    /// The device buffers of one collective call, staged through host memory (collectives.cpp).
    class device_stage;

    // Point-to-point (p2p.cpp). A call is shunt's when its buffer is device or managed memory,
    // or host memory holding a non-contiguous supported type that shunt's packer should move:
    // shunt packs into a pool block and the library moves `bytes` elements of MPI_PACKED. Its
    // requests are the library's own handles, with what to do at completion in a side table.

    /// The send modes: MPI_Send, MPI_Ssend, MPI_Rsend, MPI_Bsend and their I and _init forms.
    enum class send_mode : std::uint8_t { standard, sync, ready, buffered };
    int send(shim s, send_mode m, const void* buf, int count, MPI_Datatype type, int dest, int tag,
             MPI_Comm comm) noexcept;
    int isend(shim s, send_mode m, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
              MPI_Request* request) noexcept;
    int send_init(shim s, send_mode m, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                  MPI_Request* request) noexcept;
    int recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Status* status) noexcept;
    int irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
              MPI_Request* request) noexcept;
    int recv_init(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                  MPI_Request* request) noexcept;
    int sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void* recvbuf,
                 int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm,
                 MPI_Status* status) noexcept;
    int sendrecv_replace(void* buf, int count, MPI_Datatype type, int dest, int sendtag, int source, int recvtag,
                         MPI_Comm comm, MPI_Status* status) noexcept;
    int mrecv(void* buf, int count, MPI_Datatype type, MPI_Message* message, MPI_Status* status) noexcept;
    int imrecv(void* buf, int count, MPI_Datatype type, MPI_Message* message, MPI_Request* request) noexcept;
    int start(MPI_Request* request) noexcept;
    int startall(int count, MPI_Request requests[]) noexcept;
    int wait(MPI_Request* request, MPI_Status* status) noexcept;
    int waitall(int count, MPI_Request requests[], MPI_Status statuses[]) noexcept;
    int waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) noexcept;
    int waitsome(int incount, MPI_Request requests[], int* outcount, int indices[], MPI_Status statuses[]) noexcept;
    int test(MPI_Request* request, int* flag, MPI_Status* status) noexcept;
    int testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) noexcept;
    int testany(int count, MPI_Request requests[], int* index, int* flag, MPI_Status* status) noexcept;
    int testsome(int incount, MPI_Request requests[], int* outcount, int indices[], MPI_Status statuses[]) noexcept;
    int request_free(MPI_Request* request) noexcept;
    int cancel(MPI_Request* request) noexcept;
    int request_get_status(MPI_Request request, int* flag, MPI_Status* status) noexcept;

    /// Point-to-point state: how device buffers move, the request side table (p2p.cpp).
    struct p2p_state;
    struct p2p_plan;
    struct p2p_request;

private:
    enum class state : int { before, running, finalized };

    explicit runtime(const settings& cfg);

    void count(shim s) noexcept { stats_.add(counter_index::calls(s)); }
    void count_pass(direction d, pass_reason why) noexcept { stats_.add(counter_index::passed(d, why)); }
    void count_done(direction d, std::int64_t bytes) noexcept {
        stats_.add(counter_index::handled(d), 1, counter_index::bytes(d), static_cast<std::uint64_t>(bytes));
    }
    /// True between MPI_Init (however MPI was started) and MPI_Finalize.
    bool running() noexcept {
        const state s = state_.load(std::memory_order_acquire);
        if (s != state::before) [[likely]]
            return s == state::running;
        return start_running();
    }
    /// running() before the runtime has seen MPI start: looks, and starts shunt if it has.
    bool start_running() noexcept;
    /// instance()'s one construction.
    static runtime* create() noexcept;
    void started(int thread_level) noexcept;
    /// What MPI_Pack and MPI_Unpack keep of a pack decision: enough to time the call.
    struct pack_plan {
        std::int64_t bytes = 0, blocks = 0;
        bool decided = false;  ///< the planner chose (not forced, not empty)
        bool measured = false;  ///< from the key's own measured times: the other method is not explored
        planner::measure_call measure;  ///< while the planner measures the key: this call's part
    };
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
    /// The thread's last settled MPI_Pack and MPI_Unpack (runtime.cpp), which prepare answers a
    /// repeated call from.
    struct repeat_call;
    struct repeat_calls;
    /// This thread's kept call for direction d; nullptr without memory.
    repeat_call* kept_call(direction d) noexcept;
    /// The part of MPI_Pack and MPI_Unpack after the argument checks: forced choice, the
    /// communicator probe, the plan, shunt's move or the library, counting and position.
    template <class Pass, class Probe, class Move>
    int transfer(direction d, MPI_Datatype type, int count, std::int64_t room, int* position, MPI_Comm comm, Pass pass,
                 Probe probe, Move move) noexcept;
    /// Passes a measuring call's seconds to the planner; logs the key's verdict when it settles.
    void measured(direction d, MPI_Datatype type, int count, const pack_plan& plan, double seconds) noexcept;
    void internal_failure(shim s, const char* what) noexcept;
    /// Inside a catch block of a planner (MPI_Pack's, point-to-point's): what the exception in
    /// flight makes of the call. A size or type shunt refuses goes to the library quietly
    /// (too_large, logged at debug); anything else is an internal failure, reported once.
    pass_reason plan_failure(shim s) noexcept;

    // Point-to-point internals (p2p.cpp).
    /// Decides whether `count` x `type` at `buf` (to or from `peer`) is shunt's; fills `plan`.
    pass_reason plan_p2p(shim s, direction d, const void* buf, int count, MPI_Datatype type, int peer, bool keep_type,
                         p2p_plan& plan) noexcept;
    /// The common point-to-point case, answered before a plan is built: `count` x `type` at
    /// `buf` is one contiguous run of host memory (no device in use), which the library moves as
    /// it is. True exactly where plan_p2p would pass the call as `contiguous`; false otherwise,
    /// and plan_p2p then decides (p2p.cpp).
    bool host_run(const void* buf, int count, MPI_Datatype type, int peer) noexcept;
    /// MPI_Pack / MPI_Unpack of a device buffer (p2p.cpp); false when neither buffer is on a device.
    bool device_pack(direction d, const void* in, void* out, int count, MPI_Datatype type, std::int64_t room,
                     int* position, MPI_Comm comm, int& rc) noexcept;
    /// Completes what shunt owes for a finished request (error code `err`): unpack what the
    /// library wrote (a receive, not cancelled), then release the block, or mark a persistent
    /// `handle` inactive.
    void finish(shim s, p2p_request& r, const MPI_Status& status, int err, MPI_Request handle) noexcept;
    /// The frame of every completion call: pure pass-through while shunt has no request alive;
    /// else claim shunt's requests among requests[0..n), call the library (`library(st)`, st the
    /// application's status (`array` false) or statuses, or local ones where it ignores them),
    /// and let `settle(claimed, rc, st)` finish or give back each claimed request, returning
    /// whether the call counts as handled. The waits also progress detached requests after.
    template <class Library, class Settle>
    int complete(shim s, int n, const MPI_Request* requests, MPI_Status* given, bool array, Library library,
                 Settle settle) noexcept;
    /// Waitsome/Testsome's settle: finishes the claimed requests among the completed indices.
    template <class Claimed>
    bool settle_some(shim s, std::vector<Claimed>& mine, int rc, const MPI_Status* st, const int* outcount,
                     const int* indices) noexcept;
    /// Tests the requests the application freed while active; finishes those that completed.
    void progress_detached() noexcept;
    /// Tests `h`, a request the application freed while active (without its error handlers);
    /// when it has completed, settles it and returns true; false while the transfer goes on.
    bool finish_freed(MPI_Request& h, p2p_request& r) noexcept;
    /// Finishes a completed freed request (unpack, release) and frees a persistent handle.
    void settle_freed(shim s, MPI_Request& h, p2p_request& r, const MPI_Status& st, int rc) noexcept;
    /// At MPI_Finalize: waits for every detached request (a receive that has not matched is
    /// cancelled first, so that it cannot hold MPI_Finalize), then releases the pools.
    void drain_p2p() noexcept;
    /// How the fused collectives move the packed bytes of `buf` (p2p.cpp): `host` when it is not
    /// device or managed memory, else the point-to-point rule for `bytes` packed bytes.
    device_way device_way_of(const void* buf, std::int64_t bytes) noexcept;
    /// The cached device form of `count` x `type` (decoded as `t`); throws as gpu::device_form does.
    std::shared_ptr<const gpu::device_form> device_form_of(const type_info* t, int count, MPI_Datatype type);
    /// MPI_Alltoallw / MPI_Neighbor_alltoallw after the argument checks: the communicator's
    /// decision, then fused_exchange or `library()`, or both, timed, while it measures
    /// (alltoallw.cpp).
    template <class Library, class Exchange>
    int fused_collective(shim s, MPI_Comm comm, w_side& send, w_side& recv, Library library,
                         Exchange exchange) noexcept;
    /// shunt's path: pack every send block in one pass, `exchange(send, recv)` (the library's
    /// call with byte types), unpack every received block in one pass; `pass(why)` where it
    /// cannot. Counted as handled unless `counted` is false (alltoallw.cpp).
    template <class Pass, class Exchange>
    int fused_exchange(shim s, MPI_Comm comm, w_side& send, w_side& recv, Pass pass, Exchange exchange,
                       bool counted) noexcept;
    /// Sets up device support and CUDA-awareness (once, when MPI is running).
    void start_p2p() noexcept;
    /// The point-to-point state, or nullptr without memory (point-to-point then passes through).
    static p2p_state* new_p2p_state() noexcept;
    /// MPI_Start (s = shim::start, one request) and MPI_Startall: pack shunt's sends, mark its requests active.
    int start_requests(shim s, int n, MPI_Request requests[]) noexcept;
    /// True when some request of shunt's is alive: completion calls are pure pass-through otherwise.
    bool p2p_live() const noexcept;
    /// True once a device is in use, so that buffers may be device memory (start_p2p decides).
    bool devices_in_use() const noexcept { return devices_.load(std::memory_order_acquire); }
    /// True when the MPI library takes device pointers itself (CUDA-aware, or SHUNT_CUDA_AWARE=1).
    bool library_takes_device() const noexcept;
    void log_type(MPI_Datatype type, const char* event) noexcept;
    void report() noexcept;

    /// Times one call in `sample_period` (on average, drawn at random) of shunt's and the
    /// library's packing and feeds the model's online refinement; one sample in
    /// `explore_period` runs the method not chosen for `explore_burst` calls of the same
    /// direction and times the last.
    static constexpr std::uint32_t sample_period = 256, explore_period = 4, explore_burst = 3;
    static_assert((explore_period & (explore_period - 1)) == 0, "a power of two: sample_now masks random bits");
    enum class sampling : std::uint8_t { none, timed, explore, explore_timed };
    /// What this thread's next decided MPI_Pack (or MPI_Unpack) does for the refinement: a
    /// countdown to the next sampled call, so that the calls between cost a decrement.
    sampling next_sample(direction d) noexcept;
    struct sample_state;
    static sample_state& sample_states(direction d) noexcept;
    /// The sampled call: a timed one, or a call of an exploring burst (the next calls too).
    static sampling sample_now(sample_state& st) noexcept;
    /// Draws the calls to the next sample.
    static std::uint32_t next_gap(sample_state& st) noexcept;
    static std::uint64_t next_random(sample_state& st) noexcept;
    void observe(bool library, direction d, const pack_plan& plan, double seconds) noexcept;
    std::string decisions_text(bool one_line) const;
    std::string fused_decisions_text(bool one_line) const;

    /// True when collectives on comm may go to shunt at all (MPI running, not SHUNT_COLL=library).
    bool collectives_on(MPI_Comm comm) noexcept;
    /// comm's context, built on first use (collective over comm); nullptr when comm is not valid.
    coll_context* context(MPI_Comm comm) noexcept;
    /// comm's context if it has one (never collective; cached per thread).
    coll_context* existing_context(MPI_Comm comm) noexcept;
    /// True when comm's planner has settled on the library for (op, bytes): the lock-free path
    /// taken before any other check (counted as a planned pass by the caller).
    bool settled_on_library(MPI_Comm comm, coll_op op, std::int64_t bytes, bool live = true) noexcept;
    /// settled_on_library for `count` elements of `type` (times comm's size when `per_rank`);
    /// false for a count of zero or less, or where the library rejects the type or communicator.
    bool settled_on_library(MPI_Comm comm, coll_op op, int count, MPI_Datatype type, bool per_rank,
                            bool live = true) noexcept;
    /// True when a reduction of `type` with `op` may be measured in the run: its result is the
    /// same whoever computes it (integers, MIN/MAX, logical and bitwise operations), or
    /// SHUNT_COLL=measure. Floating-point sums and products are decided from the model alone.
    bool measured_live(MPI_Datatype type, MPI_Op op) const noexcept;
    /// The planner's choice, shunt's schedule (`run`) or the library (`library`), timing, counting;
    /// `live` false: decided from the model without measuring (a floating-point reduction).
    template <class Library, class Shunt>
    int collective(shim s, coll_op op, MPI_Comm comm, std::int64_t bytes, bool live, device_stage& dev, Library library,
                   Shunt run) noexcept;
    void log_decision(const coll_context& ctx, coll_op op, std::int64_t bytes, bool live, const char* name) noexcept;

    const settings& cfg_;
    std::string model_note_;  ///< why the model file was not used, said once at start
    std::shared_ptr<cost_model> model_;
    type_cache types_;
    type_memo memo_{types_};
    per_thread<repeat_calls> repeats_;
    planner planner_;
    counters stats_;
    std::atomic<state> state_{state::before};
    std::atomic<bool> started_{false};
    std::array<std::atomic<bool>, shim_count> failure_logged_{};
    std::atomic<bool> topology_warned_{false};
    /// Every communicator's collective planner, for the report (kept after the communicator is freed).
    mutable std::mutex tuners_mutex_;
    std::vector<std::shared_ptr<collective_tuner>> tuners_;
    /// Registers a decision for the report (under tuners_mutex_).
    void keep_w_record(std::shared_ptr<w_record> r) noexcept;
    std::vector<std::shared_ptr<w_record>> w_records_;  ///< guarded by tuners_mutex_
    /// True once start_p2p found a usable device (and so a point-to-point state) and learned
    /// whether the MPI library is CUDA-aware: only then are buffers classified.
    std::atomic<bool> devices_{false};
    p2p_state* const p2p_ = new_p2p_state();  ///< never deleted (requests may complete during exit)
};

}  // namespace shunt::detail
