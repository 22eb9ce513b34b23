// interpose/p2p.hpp: the point-to-point executor: device buffers and non-contiguous host data packed into pool blocks, the library moving MPI_PACKED bytes, and the request table its completion calls settle.
#pragma once

#include <shunt/datatype/type_info.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/model/device.hpp>
#include <shunt/plan/pass.hpp>

#include "counters.hpp"
#include "gate.hpp"

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace shunt::gpu {
class device_form;
}  // namespace shunt::gpu

namespace shunt::detail {

class runtime;

/// Point-to-point calls. A call is shunt's when its buffer is device or managed memory, or host
/// memory holding a non-contiguous supported type that shunt's packer should move (plan/p2p.hpp):
/// shunt packs into a pool block and the library moves `bytes` elements of MPI_PACKED. Its
/// requests are the library's own handles, with what to do at completion in a side table that
/// every completion call consults (a pure pass-through while the table is empty). Thread-safe.
class p2p_executor {
public:
    explicit p2p_executor(runtime& rt) noexcept : rt_(rt) {}
    p2p_executor(const p2p_executor&) = delete;
    p2p_executor& operator=(const p2p_executor&) = delete;

    /// One point-to-point call as the executor sees it: which shim, and its buffer side.
    struct call {
        shim s;
        direction d;  ///< send or recv
        const void* buf;
        int count;
        MPI_Datatype type;
        int peer;  ///< destination or source (0 for matched receives)
    };

    /// The fast path every data mover takes first, before counting its call: true where the call
    /// repeats one of this thread's that the library took as one contiguous run or by the
    /// planner's settled choice, no request of shunt's is alive and nothing is counted (no
    /// SHUNT_REPORT); the caller then passes it on itself, uncounted. `rt` is the runtime (the
    /// caller's `*this`, so that the check needs no load for it).
    bool quick(runtime& rt, direction d, const void* buf, int count, MPI_Datatype type, int peer) noexcept;
    /// quick() for MPI_Sendrecv: both sides repeat calls the library took.
    bool quick_pair(runtime& rt, const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest,
                    const void* recvbuf, int recvcount, MPI_Datatype recvtype, int source) noexcept;

    /// MPI_Send, MPI_Ssend, MPI_Rsend, MPI_Bsend (by `c.s`).
    int send(const call& c, int tag, MPI_Comm comm) noexcept;
    /// MPI_Isend, MPI_Issend, MPI_Irsend, MPI_Ibsend.
    int isend(const call& c, int tag, MPI_Comm comm, MPI_Request* request) noexcept;
    /// MPI_Send_init, MPI_Ssend_init, MPI_Rsend_init, MPI_Bsend_init.
    int send_init(const call& c, int tag, MPI_Comm comm, MPI_Request* request) noexcept;
    int recv(const call& c, int tag, MPI_Comm comm, MPI_Status* status) noexcept;
    int irecv(const call& c, int tag, MPI_Comm comm, MPI_Request* request) noexcept;
    int recv_init(const call& c, int tag, MPI_Comm comm, MPI_Request* request) noexcept;
    int sendrecv(const call& s, int sendtag, const call& r, int recvtag, MPI_Comm comm, MPI_Status* status) noexcept;
    int sendrecv_replace(void* buf, int count, MPI_Datatype type, int dest, int sendtag, int source, int recvtag,
                         MPI_Comm comm, MPI_Status* status) noexcept;
    int mrecv(const call& c, MPI_Message* message, MPI_Status* status) noexcept;
    int imrecv(const call& c, MPI_Message* message, MPI_Request* request) noexcept;
    /// MPI_Start (s = shim::start, one request) and MPI_Startall: pack shunt's sends, mark its
    /// requests active.
    int start(shim s, int n, MPI_Request requests[]) noexcept;
    int wait(MPI_Request* request, MPI_Status* status) noexcept;
    int waitall(int count, MPI_Request requests[], MPI_Status statuses[]) noexcept;
    int waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) noexcept;
    int waitsome(int incount, MPI_Request requests[], int* outcount, int indices[], MPI_Status statuses[]) noexcept;
    int test(MPI_Request* request, int* flag, MPI_Status* status) noexcept;
    int testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) noexcept;
    int testany(int count, MPI_Request requests[], int* index, int* flag, MPI_Status* status) noexcept;
    int testsome(int incount, MPI_Request requests[], int* outcount, int indices[], MPI_Status statuses[]) noexcept;
    int request_free(MPI_Request* request) noexcept;
    int request_get_status(MPI_Request request, int* flag, MPI_Status* status) noexcept;

    /// At MPI_Finalize: waits for every request the application freed while active (a receive
    /// that has not matched is cancelled first, so that it cannot hold MPI_Finalize), then
    /// releases the pools.
    void drain() noexcept;

    /// What shunt does with one buffer of a point-to-point call.
    struct plan {
        const type_info* t = nullptr;  ///< valid for the call
        std::shared_ptr<const type_info> keep;  ///< for requests: keeps `t` alive after MPI_Type_free
        std::shared_ptr<const gpu::device_form> form;  ///< device methods
        std::int64_t bytes = 0;  ///< count * size
        int count = 0;
        device_path method = device_path::host;
    };
    /// One request of shunt's: the library's handle moves a pool block; this says what is owed.
    struct request {
        std::uint64_t serial = 0;
        bool receive = false;
        bool persistent = false;
        bool active = false;  ///< persistent: started and not yet completed
        bool unpacked = false;  ///< a receive whose data MPI_Request_get_status already unpacked
        shim origin = shim::isend;
        void* buf = nullptr;  ///< the application's buffer (const for sends)
        MPI_Comm comm = MPI_COMM_NULL;  ///< the communicator (MPI_COMM_NULL for MPI_Imrecv)
        struct plan plan;
        gpu::pool_block block;
    };
    /// A request of shunt's taken out of the table for a completion call: its index in the
    /// caller's array, its handle before the call (the library nulls completed ones), the entry.
    struct claimed {
        int index;
        MPI_Request handle;
        request r;
    };

private:
    /// True when some request of shunt's is alive: completion calls are pure pass-through otherwise.
    bool live() const noexcept { return live_.load(std::memory_order_acquire) != 0; }
    /// The common case, answered before a plan is built: the call repeats one of this thread's that
    /// plan_call passed as one contiguous run of host memory or by the planner's settled choice
    /// (no device in use). That reason, exactly what plan_call would answer; none otherwise.
    pass_reason repeated(direction d, const void* buf, int count, MPI_Datatype type, int peer) noexcept;
    /// Decides whether `c` is shunt's; fills `p`. `keep_type`: the plan holds the type (requests).
    pass_reason plan_call(const call& c, bool keep_type, plan& p) noexcept;
    /// The checks every call starts with: `early` (a reason found by the caller), a contiguous host
    /// run, then plan_call. True where the library takes the call (the reason counted); false
    /// with `p` filled where shunt's path does.
    bool passed(const call& c, bool keep_type, pass_reason early, plan& p) noexcept;
    /// Records a request of shunt's under `handle` (a serial is drawn unless `r` has one).
    void keep(shim s, MPI_Request handle, request&& r) noexcept;
    /// Completes what shunt owes for a finished request (error code `err`): unpack what the
    /// library wrote (a receive, not cancelled), then release the block, or mark a persistent
    /// `handle` inactive.
    void finish(shim s, request& r, const MPI_Status& status, int err, MPI_Request handle) noexcept;
    /// Claims shunt's active requests among requests[0..n) (see claimed).
    std::vector<claimed> claim(int n, const MPI_Request* requests);
    /// Puts back a claimed request the call did not complete.
    void unclaim(claimed& c);
    /// The frame of every completion call: pure pass-through while shunt has no request alive;
    /// else claim shunt's requests among requests[0..n), call the library (`library(st)`, st the
    /// application's status (`array` false) or statuses, or local ones where it ignores them),
    /// and let `settle(claimed, rc, st)` finish or give back each claimed request, returning
    /// whether the call counts as handled. The waits also progress detached requests after.
    template <class Library, class Settle>
    int complete(shim s, int n, const MPI_Request* requests, MPI_Status* given, bool array, Library library,
                 Settle settle) noexcept;
    /// Waitsome/Testsome's settle: finishes the claimed requests among the completed indices.
    bool settle_some(shim s, std::vector<claimed>& mine, int rc, const MPI_Status* st, const int* outcount,
                     const int* indices) noexcept;
    /// Tests the requests the application freed while active; finishes those that completed.
    void progress_detached() noexcept;
    /// Tests `h`, a request the application freed while active (without its error handlers);
    /// when it has completed, settles it and returns true; false while the transfer goes on.
    bool finish_freed(MPI_Request& h, request& r) noexcept;
    /// Finishes a completed freed request (unpack, release) and frees a persistent handle.
    void settle_freed(shim s, MPI_Request& h, request& r, const MPI_Status& st, int rc) noexcept;
    /// Under mutex_: live_ anew, and the gate's `requests` blocker when it turns zero or non-zero.
    void update_live() noexcept {
        const std::size_t n = requests_.size() + detached_.size();
        if ((live_.exchange(n, std::memory_order_acq_rel) == 0) != (n == 0))
            n != 0 ? fast_gate::block(fast_gate::requests) : fast_gate::unblock(fast_gate::requests);
    }

    runtime& rt_;
    mutable std::mutex mutex_;  ///< guards the tables below; never held across a PMPI call
    std::unordered_map<MPI_Request, request> requests_;
    std::vector<std::pair<MPI_Request, request>> detached_;  ///< freed by the application while active
    std::uint64_t next_serial_ = 1;
    std::atomic<std::size_t> live_{0};  ///< requests_.size() + detached_.size()
    std::atomic<std::size_t> detached_n_{0};
};

}  // namespace shunt::detail
