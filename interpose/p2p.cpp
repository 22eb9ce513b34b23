// interpose/p2p.cpp: point-to-point calls with device buffers or non-contiguous host data: shunt packs
// into a pool block, the library moves MPI_PACKED bytes, completion calls unpack and release.
#include "p2p.hpp"
#include "p2p_kept.hpp"

#include <shunt/errors.hpp>
#include <shunt/gpu/descriptor.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/gpu/pack.hpp>
#include <shunt/log.hpp>
#include <shunt/model/device.hpp>
#include <shunt/pack/host.hpp>
#include <shunt/plan/p2p.hpp>

#include "runtime.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace shunt::detail {

// Why MPI_PACKED: MPI lets a message sent as MPI_PACKED be received with any datatype whose
// type signature matches, and a typed message be received as MPI_PACKED, so the peer may or
// may not run shunt. Both Open MPI and MPICH keep a byte count in the status, so
// MPI_Get_count(status, original type) and MPI_Get_elements answer as for a typed receive.

namespace {

/// Packed bytes of a status: what the library received (MPI_Get_count of MPI_BYTE), 0 when undefined.
std::int64_t received_bytes(const MPI_Status& st) {
    int n = 0;
    if (PMPI_Get_count(&st, MPI_BYTE, &n) != MPI_SUCCESS || n == MPI_UNDEFINED || n < 0) return 0;
    return n;
}

bool truncated(int rc) {
    int cls = MPI_SUCCESS;
    return rc != MPI_SUCCESS && PMPI_Error_class(rc, &cls) == MPI_SUCCESS && cls == MPI_ERR_TRUNCATE;
}

/// True when a receive that returned rc may have delivered data: success or truncation.
bool delivered(int rc) { return rc == MPI_SUCCESS || truncated(rc); }

#if defined(MPICH_VERSION)
/// True when the MPICH that runs (not the one built against) is 4.3 or later: its status of a
/// truncated receive counts the bytes it copied (the whole receive buffer), or the message's size
/// where it dropped the message. Earlier versions may leave an earlier message's count there.
bool mpich_counts_truncation() {
    static const bool counts = [] {
        char v[MPI_MAX_LIBRARY_VERSION_STRING] = {};
        int n = 0, major = 0, minor = 0;
        if (PMPI_Get_library_version(v, &n) != MPI_SUCCESS) return false;
        const char* p = std::strstr(v, "MPICH Version:");
        return p != nullptr && std::sscanf(p + std::strlen("MPICH Version:"), "%d.%d", &major, &minor) == 2 &&
               (major > 4 || (major == 4 && minor >= 3));
    }();
    return counts;
}
#endif

/// The packed bytes the library wrote into a receive block of `capacity` bytes, for a receive
/// on `comm` (MPI_COMM_NULL when unknown) that ended with error code `rc` and status `st`:
/// what MPI_Recv would have written into a typed buffer is their unpacking.
std::int64_t written_bytes(int rc, const MPI_Status& st, std::int64_t capacity, MPI_Comm comm) {
    if (rc == MPI_SUCCESS) return std::min(received_bytes(st), capacity);
    if (!truncated(rc)) return 0;
#if defined(MPICH_VERSION)
    // MPICH 4.3 and 5.0 copy the first bytes of a truncated message, but drop one above the
    // eager limit on an inter-communicator; the status tells which.
    if (mpich_counts_truncation()) {
        const std::int64_t n = received_bytes(st);
        return n <= capacity ? n : 0;
    }
    // Earlier: MPICH 4.0 (ch4, as Debian 12 builds it) drops a truncated message from another
    // process (nothing written, the status count unreliable) but copies the first bytes of one a
    // process sent itself. (Other builds of 4.0 to 4.2 copy messages below the eager limit too.)
    // On an inter-communicator the source is a rank of the other group: never this process.
    int me = MPI_PROC_NULL, inter = 1;
    const bool self = comm != MPI_COMM_NULL && PMPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS && !inter &&
                      PMPI_Comm_rank(comm, &me) == MPI_SUCCESS && st.MPI_SOURCE == me;
    return self ? capacity : 0;
#else
    // Open MPI 4.1 fills the receive buffer with the first bytes of the message (the status
    // counts the whole message).
    (void)st;
    (void)comm;
    return capacity;
#endif
}

/// `call()` (the library's test or wait of a request the application freed) without error
/// handlers: the error is the request's alone, which the application can no longer see, and
/// without shunt the library drops it (a fatal handler must not abort the job from an unrelated
/// call). On the request's communicator and on MPI_COMM_WORLD, where MPICH 4.0 raises errors of
/// MPI_Test and MPI_Wait.
template <class Call>
int without_errhandler(MPI_Comm comm, Call call) {
    const errors_returned world(MPI_COMM_WORLD);
    const errors_returned own(comm == MPI_COMM_WORLD ? MPI_COMM_NULL : comm);
    return call();
}

/// A data block for `plan`'s packed bytes: device memory for DEVICE, pinned (plain host memory
/// without a device) otherwise.
gpu::pool_block acquire(const p2p_executor::plan& plan) {
    const auto kind = plan.method == device_path::device ? gpu::pool_kind::device : gpu::pool_kind::pinned;
    return gpu::pool_acquire(kind, static_cast<std::size_t>(std::max<std::int64_t>(plan.bytes, 1)));
}

using gpu::scoped_block;  // pool blocks released on every path

/// Packs the application's buffer into `out` by plan's method; one stream synchronisation.
void pack_into(const p2p_executor::plan& plan, const void* buf, void* out) {
    std::int64_t done = 0;
    switch (plan.method) {
        case device_path::host: done = pack_host(*plan.t, plan.count, buf, out); break;
        case device_path::one_shot:
        case device_path::device:
            done = gpu::pack(*plan.form, buf, out, nullptr);
            gpu::synchronize(nullptr);
            break;
        case device_path::staged: {
            const scoped_block scratch(gpu::pool_acquire(gpu::pool_kind::device, static_cast<std::size_t>(plan.bytes)));
            done = gpu::pack(*plan.form, buf, scratch.b.ptr, nullptr);
            gpu::copy(out, scratch.b.ptr, static_cast<std::size_t>(plan.bytes), nullptr);
            gpu::synchronize(nullptr);
            break;
        }
    }
    if (done != plan.bytes)
        throw error("packed " + std::to_string(done) + " of " + std::to_string(plan.bytes) + " bytes");
}

/// One send of several started together: its plan, the application's buffer, its block.
struct pack_job {
    const p2p_executor::plan* plan;
    const void* buf;
    void* out;
};

/// Packs several sends at once (MPI_Startall): host plans on the host packer, device plans in
/// one fused kernel launch (a staged one into device scratch, copied to its block after) and
/// one stream synchronisation for all of them.
void pack_many(std::span<const pack_job> jobs) {
    std::vector<gpu::device_input> fused;
    std::deque<scoped_block> scratch;
    std::vector<const pack_job*> staged;
    for (const pack_job& j : jobs) {
        if (j.plan->method == device_path::host) {
            pack_into(*j.plan, j.buf, j.out);
            continue;
        }
        void* out = j.out;
        if (j.plan->method == device_path::staged) {
            out =
                scratch.emplace_back(gpu::pool_acquire(gpu::pool_kind::device, static_cast<std::size_t>(j.plan->bytes)))
                    .b.ptr;
            staged.push_back(&j);
        }
        fused.push_back({j.plan->form.get(), j.buf, out});
    }
    if (fused.empty()) return;
    gpu::pack_fused(fused, nullptr);
    for (std::size_t i = 0; i < staged.size(); ++i)
        gpu::copy(staged[i]->out, scratch[i].b.ptr, static_cast<std::size_t>(staged[i]->plan->bytes), nullptr);
    gpu::synchronize(nullptr);
}

/// Unpacks the first `n` received bytes from `in` into the application's buffer.
void unpack_from(const p2p_executor::plan& plan, const void* in, std::int64_t n, void* buf) {
    if (n <= 0) return;
    switch (plan.method) {
        case device_path::host: unpack_host(*plan.t, plan.count, in, buf, 0, n); break;
        case device_path::one_shot:
        case device_path::device:
            gpu::unpack(*plan.form, in, buf, nullptr, 0, n);
            gpu::synchronize(nullptr);
            break;
        case device_path::staged: {
            const scoped_block scratch(gpu::pool_acquire(gpu::pool_kind::device, static_cast<std::size_t>(n)));
            gpu::copy(scratch.b.ptr, in, static_cast<std::size_t>(n), nullptr);
            gpu::unpack(*plan.form, scratch.b.ptr, buf, nullptr, 0, n);
            gpu::synchronize(nullptr);
            break;
        }
    }
}

/// Unpacks a receive the library completed with error `err` and status `st` into the
/// application's buffer. Returns the bytes unpacked, or -1 when nothing is due: not a receive,
/// already unpacked by MPI_Request_get_status, an error other than truncation, or cancelled.
std::int64_t deliver(const p2p_executor::request& r, const MPI_Status& st, int err) {
    int cancelled = 0;
    if (!r.receive || r.unpacked || !delivered(err) || PMPI_Test_cancelled(&st, &cancelled) != MPI_SUCCESS || cancelled)
        return -1;
    const std::int64_t n = written_bytes(err, st, r.plan.bytes, r.comm);
    unpack_from(r.plan, r.block.ptr, n, r.buf);
    return n;
}

/// The library's nonblocking send of shim `s`'s mode.
int isend_call(shim s, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
               MPI_Request* r) {
    switch (s) {
        case shim::issend: return PMPI_Issend(buf, count, type, dest, tag, comm, r);
        case shim::irsend: return PMPI_Irsend(buf, count, type, dest, tag, comm, r);
        case shim::ibsend: return PMPI_Ibsend(buf, count, type, dest, tag, comm, r);
        default: return PMPI_Isend(buf, count, type, dest, tag, comm, r);
    }
}

// The library's blocking calls. While shunt's collectives are in flight each is its nonblocking
// form waited for polling, so that they move on while this rank waits (another rank may be
// waiting for them before it sends what this call waits for).

/// The library's blocking send of shim `s`'s mode (a buffered send returns at once anyway).
int send_call(nbc_executor& x, shim s, const void* buf, int count, MPI_Datatype type, int dest, int tag,
              MPI_Comm comm) {
    if (x.in_flight() && s != shim::bsend) {
        MPI_Request r = MPI_REQUEST_NULL;
        const shim mode = s == shim::ssend ? shim::issend : s == shim::rsend ? shim::irsend : shim::isend;
        const int rc = isend_call(mode, buf, count, type, dest, tag, comm, &r);
        return rc != MPI_SUCCESS ? rc : x.wait(&r, MPI_STATUS_IGNORE);
    }
    switch (s) {
        case shim::ssend: return PMPI_Ssend(buf, count, type, dest, tag, comm);
        case shim::rsend: return PMPI_Rsend(buf, count, type, dest, tag, comm);
        case shim::bsend: return PMPI_Bsend(buf, count, type, dest, tag, comm);
        default: return PMPI_Send(buf, count, type, dest, tag, comm);
    }
}

int recv_call(nbc_executor& x, void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
              MPI_Status* status) {
    if (!x.in_flight()) return PMPI_Recv(buf, count, type, source, tag, comm, status);
    MPI_Request r = MPI_REQUEST_NULL;
    const int rc = PMPI_Irecv(buf, count, type, source, tag, comm, &r);
    return rc != MPI_SUCCESS ? rc : x.wait(&r, status);
}

int sendrecv_call(nbc_executor& x, const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                  void* recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm,
                  MPI_Status* status) {
    if (!x.in_flight())
        return PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag,
                             comm, status);
    MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int rc = PMPI_Irecv(recvbuf, recvcount, recvtype, source, recvtag, comm, &r[0]);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Isend(sendbuf, sendcount, sendtype, dest, sendtag, comm, &r[1]);
    if (rc != MPI_SUCCESS) {
        PMPI_Cancel(&r[0]);
        PMPI_Wait(&r[0], MPI_STATUS_IGNORE);
        return rc;
    }
    MPI_Status st[2];
    rc = x.wait_all(2, r, st);
    if (status != MPI_STATUS_IGNORE) *status = st[0];
    // Waitall reports an entry's error in its status; MPI_Sendrecv returns it.
    return rc == MPI_ERR_IN_STATUS ? (st[0].MPI_ERROR != MPI_SUCCESS ? st[0].MPI_ERROR : st[1].MPI_ERROR) : rc;
}

int mrecv_call(nbc_executor& x, void* buf, int count, MPI_Datatype type, MPI_Message* message, MPI_Status* status) {
    if (!x.in_flight()) return PMPI_Mrecv(buf, count, type, message, status);
    MPI_Request r = MPI_REQUEST_NULL;
    const int rc = PMPI_Imrecv(buf, count, type, message, &r);
    return rc != MPI_SUCCESS ? rc : x.wait(&r, status);
}

/// The library's persistent send of shim `s`'s mode.
int send_init_call(shim s, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                   MPI_Request* r) {
    switch (s) {
        case shim::ssend_init: return PMPI_Ssend_init(buf, count, type, dest, tag, comm, r);
        case shim::rsend_init: return PMPI_Rsend_init(buf, count, type, dest, tag, comm, r);
        case shim::bsend_init: return PMPI_Bsend_init(buf, count, type, dest, tag, comm, r);
        default: return PMPI_Send_init(buf, count, type, dest, tag, comm, r);
    }
}

/// For Waitall/Testall and the *some calls: whether an entry completed and delivered data,
/// from the call's return code and the entry's status.
bool entry_completed(int rc, const MPI_Status& st) {
    if (rc == MPI_SUCCESS) return true;
    return rc == MPI_ERR_IN_STATUS && st.MPI_ERROR != MPI_ERR_PENDING;
}
/// The error code of one entry: its status's when the call reports MPI_ERR_IN_STATUS.
int entry_error(int rc, const MPI_Status& st) { return rc == MPI_ERR_IN_STATUS ? st.MPI_ERROR : rc; }

/// The status array a multiple completion call writes: the application's, or a local one when
/// it passes MPI_STATUSES_IGNORE and shunt needs them.
MPI_Status* statuses_for(MPI_Status* given, std::vector<MPI_Status>& local, int n) {
    if (given != MPI_STATUSES_IGNORE) return given;
    local.resize(static_cast<std::size_t>(std::max(n, 1)));
    return local.data();
}

}  // namespace

// ---- entry points ----

namespace {

/// A kept call's reason, its use counted (the use count only feeds SHUNT_REPORT).
[[gnu::always_inline]] inline pass_reason use(const runtime& rt, const kept_p2p& k) noexcept {
    if (k.taken != nullptr && rt.counting()) k.taken->fetch_add(1, std::memory_order_relaxed);
    return k.why;
}

}  // namespace

[[gnu::always_inline]] inline pass_reason p2p_executor::repeated(direction d, const void* buf, int count,
                                                                 MPI_Datatype type, int peer) noexcept {
    const kept_p2p* k = kept_for(rt_, d, buf, count, type, peer, fast_gate::for_executor());
    return k != nullptr ? use(rt_, *k) : pass_reason::none;
}

// Each data mover first asks quick() (p2p_kept.hpp): a repeat of a call the library took goes to
// it at once, uncounted (with SHUNT_REPORT on, the full path takes it, counting it).

// The entry points' full path, out of line and with the entry's own arguments: both of an entry's
// paths are then tail calls, and the repeat of a kept call needs no stack frame.
template <auto Member, shim S, direction D, class Buf, class... Rest>
int runtime::p2p_full(Buf buf, int count, MPI_Datatype type, int peer, Rest... rest) noexcept {
    this->count(S);
    return (p2p_.*Member)({S, D, buf, count, type, peer}, rest...);
}

#define SHUNT_SEND_ENTRY_(name)                                                                                       \
    int runtime::name(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm) noexcept { \
        if (p2p_.quick(*this, direction::send, buf, count, datatype, dest)) [[likely]]                                \
            return send_call(nbc_, shim::name, buf, count, datatype, dest, tag, comm);                                \
        return p2p_full<&p2p_executor::send, shim::name, direction::send>(buf, count, datatype, dest, tag, comm);     \
    }
SHUNT_SEND_ENTRY_(send)
SHUNT_SEND_ENTRY_(ssend)
SHUNT_SEND_ENTRY_(rsend)
SHUNT_SEND_ENTRY_(bsend)
#undef SHUNT_SEND_ENTRY_

#define SHUNT_REQUEST_ENTRY_(name, member, library)                                                                \
    int runtime::name(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,         \
                      MPI_Request* request) noexcept {                                                             \
        if (request != nullptr && p2p_.quick(*this, direction::send, buf, count, datatype, dest)) [[likely]]       \
            return library(shim::name, buf, count, datatype, dest, tag, comm, request);                            \
        return p2p_full<&p2p_executor::member, shim::name, direction::send>(buf, count, datatype, dest, tag, comm, \
                                                                            request);                              \
    }
SHUNT_REQUEST_ENTRY_(isend, isend, isend_call)
SHUNT_REQUEST_ENTRY_(issend, isend, isend_call)
SHUNT_REQUEST_ENTRY_(irsend, isend, isend_call)
SHUNT_REQUEST_ENTRY_(ibsend, isend, isend_call)
SHUNT_REQUEST_ENTRY_(send_init, send_init, send_init_call)
SHUNT_REQUEST_ENTRY_(ssend_init, send_init, send_init_call)
SHUNT_REQUEST_ENTRY_(rsend_init, send_init, send_init_call)
SHUNT_REQUEST_ENTRY_(bsend_init, send_init, send_init_call)
#undef SHUNT_REQUEST_ENTRY_

int runtime::recv(void* buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                  MPI_Status* status) noexcept {
    if (p2p_.quick(*this, direction::recv, buf, count, datatype, source)) [[likely]]
        return recv_call(nbc_, buf, count, datatype, source, tag, comm, status);
    return p2p_full<&p2p_executor::recv, shim::recv, direction::recv>(buf, count, datatype, source, tag, comm, status);
}

int runtime::irecv(void* buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                   MPI_Request* request) noexcept {
    if (request != nullptr && p2p_.quick(*this, direction::recv, buf, count, datatype, source)) [[likely]]
        return PMPI_Irecv(buf, count, datatype, source, tag, comm, request);
    return p2p_full<&p2p_executor::irecv, shim::irecv, direction::recv>(buf, count, datatype, source, tag, comm,
                                                                        request);
}

int runtime::recv_init(void* buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                       MPI_Request* request) noexcept {
    if (request != nullptr && p2p_.quick(*this, direction::recv, buf, count, datatype, source)) [[likely]]
        return PMPI_Recv_init(buf, count, datatype, source, tag, comm, request);
    return p2p_full<&p2p_executor::recv_init, shim::recv_init, direction::recv>(buf, count, datatype, source, tag, comm,
                                                                                request);
}

int runtime::sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void* recvbuf,
                      int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm,
                      MPI_Status* status) noexcept {
    if (p2p_.quick_pair(*this, sendbuf, sendcount, sendtype, dest, recvbuf, recvcount, recvtype, source)) [[likely]]
        return sendrecv_call(nbc_, sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source,
                             recvtag, comm, status);
    return p2p_full<&p2p_executor::sendrecv, shim::sendrecv, direction::send>(
        sendbuf, sendcount, sendtype, dest, sendtag,
        p2p_executor::call{shim::sendrecv, direction::recv, recvbuf, recvcount, recvtype, source}, recvtag, comm,
        status);
}

int runtime::sendrecv_replace(void* buf, int count, MPI_Datatype datatype, int dest, int sendtag, int source,
                              int recvtag, MPI_Comm comm, MPI_Status* status) noexcept {
    this->count(shim::sendrecv_replace);
    return p2p_.sendrecv_replace(buf, count, datatype, dest, sendtag, source, recvtag, comm, status);
}

int runtime::mrecv(void* buf, int count, MPI_Datatype datatype, MPI_Message* message, MPI_Status* status) noexcept {
    this->count(shim::mrecv);
    return p2p_.mrecv({shim::mrecv, direction::recv, buf, count, datatype, 0}, message, status);
}

int runtime::imrecv(void* buf, int count, MPI_Datatype datatype, MPI_Message* message, MPI_Request* request) noexcept {
    this->count(shim::imrecv);
    return p2p_.imrecv({shim::imrecv, direction::recv, buf, count, datatype, 0}, message, request);
}

int runtime::start(MPI_Request* request) noexcept {
    count(shim::start);
    const int rc = p2p_.start(shim::start, 1, request);
    if (rc == MPI_SUCCESS) nbc_.start_persistent(shim::start, 1, request);
    return rc;
}

int runtime::startall(int count, MPI_Request array_of_requests[]) noexcept {
    this->count(shim::startall);
    const int rc = p2p_.start(shim::startall, count, array_of_requests);
    if (rc == MPI_SUCCESS) nbc_.start_persistent(shim::startall, count, array_of_requests);
    return rc;
}

int runtime::wait(MPI_Request* request, MPI_Status* status) noexcept {
    count(shim::wait);
    return p2p_.wait(request, status);
}

int runtime::waitall(int count, MPI_Request array_of_requests[], MPI_Status array_of_statuses[]) noexcept {
    this->count(shim::waitall);
    return p2p_.waitall(count, array_of_requests, array_of_statuses);
}

int runtime::waitany(int count, MPI_Request array_of_requests[], int* index, MPI_Status* status) noexcept {
    this->count(shim::waitany);
    return p2p_.waitany(count, array_of_requests, index, status);
}

int runtime::waitsome(int incount, MPI_Request array_of_requests[], int* outcount, int array_of_indices[],
                      MPI_Status array_of_statuses[]) noexcept {
    count(shim::waitsome);
    return p2p_.waitsome(incount, array_of_requests, outcount, array_of_indices, array_of_statuses);
}

int runtime::test(MPI_Request* request, int* flag, MPI_Status* status) noexcept {
    count(shim::test);
    return p2p_.test(request, flag, status);
}

int runtime::testall(int count, MPI_Request array_of_requests[], int* flag, MPI_Status array_of_statuses[]) noexcept {
    this->count(shim::testall);
    return p2p_.testall(count, array_of_requests, flag, array_of_statuses);
}

int runtime::testany(int count, MPI_Request array_of_requests[], int* index, int* flag, MPI_Status* status) noexcept {
    this->count(shim::testany);
    return p2p_.testany(count, array_of_requests, index, flag, status);
}

int runtime::testsome(int incount, MPI_Request array_of_requests[], int* outcount, int array_of_indices[],
                      MPI_Status array_of_statuses[]) noexcept {
    count(shim::testsome);
    return p2p_.testsome(incount, array_of_requests, outcount, array_of_indices, array_of_statuses);
}

int runtime::request_free(MPI_Request* request) noexcept {
    count(shim::request_free);
    if (request != nullptr && nbc_.owns(*request)) return nbc_.request_free(request);
    return p2p_.request_free(request);
}

int runtime::cancel(MPI_Request* request) noexcept {
    count(shim::cancel);
    if (request != nullptr && nbc_.owns(*request)) return nbc_.cancel(request);  // refused, as the library's
    return PMPI_Cancel(request);  // a cancelled receive is not unpacked at its completion
}

int runtime::request_get_status(MPI_Request request, int* flag, MPI_Status* status) noexcept {
    count(shim::request_get_status);
    return p2p_.request_get_status(request, flag, status);
}

// ---- planning ----

pass_reason p2p_executor::plan_call(const call& c, bool keep_type, plan& p) noexcept {
    if (!rt_.running()) return pass_reason::not_running;
    if (c.count < 0) return pass_reason::bad_argument;
    if (c.count == 0 || c.peer == MPI_PROC_NULL) return pass_reason::empty;
    const settings& cfg = rt_.cfg();
    device_support& devices = rt_.devices();
    if (cfg.pack == pack_choice::library && !devices.in_use()) return pass_reason::forced;
    if (c.buf == nullptr) return pass_reason::bad_argument;  // MPI_BOTTOM: absolute addresses, the library's
    try {
        // Both generations before the lookup: a change meanwhile leaves the kept call stale.
        const std::uint64_t gate = fast_gate::kept(), generation = rt_.model().generation();
        const auto keep = [&](pass_reason why, std::atomic<std::uint64_t>* taken) {
            kept_slot(c.d, c.type) = {c.type, c.count, why, gate, generation, taken};
            return why;
        };
        const bool device = devices.on_device(c.buf);
        const type_info* t = rt_.memo().find(c.type);
        if (t == nullptr) return pass_reason::unknown_type;
        std::int64_t bytes = 0;
        if (__builtin_mul_overflow(static_cast<std::int64_t>(c.count), t->size, &bytes) || bytes > INT_MAX)
            return pass_reason::too_large;
        if (bytes == 0) return pass_reason::empty;
        const bool dense = t->dense(c.count);
        if (!device) {
            if (dense) return devices.in_use() ? pass_reason::contiguous : keep(pass_reason::contiguous, nullptr);
            if (cfg.pack == pack_choice::library) return pass_reason::forced;
            if (cfg.pack != pack_choice::host) {
                bool is_new = false;
                std::atomic<std::uint64_t>* taken = nullptr;
                const plan_decision pd = rt_.pack_planner().pack(*t, c.count, c.d == direction::recv, &is_new, &taken);
                const host_p2p_choice h = choose_host_p2p(rt_.model(), pd);
                if (is_new && cfg.log.enabled(log_level::debug, log_category::decide))
                    log_debug(log_category::decide,
                              "%s of %d elements (%lld bytes in %lld blocks): %s (predicted library %.3g us, "
                              "shunt's host packer and a copy %.3g us)",
                              shim_names[static_cast<std::size_t>(c.s)], c.count, static_cast<long long>(bytes),
                              static_cast<long long>(pd.blocks), h.shunt ? "shunt's host packer" : "the library",
                              h.library_s * 1e6, h.shunt_s * 1e6);
                if (!h.shunt)
                    return pd.measuring || devices.in_use() ? pass_reason::planned : keep(pass_reason::planned, taken);
            }
            p.method = device_path::host;
        } else {
            const bool aware = devices.library_takes_device();
            if (dense && aware) return pass_reason::contiguous;
            p.method = devices.path_for(rt_.model(), cfg.pack, bytes, planner::pack_blocks(*t, c.count),
                                        c.d == direction::recv);
            if (dense) p.method = device_path::one_shot;  // a plain copy to pinned memory
            p.form = devices.form_of(rt_.memo(), t, c.count, c.type);
        }
        p.t = t;
        p.bytes = bytes;
        p.count = c.count;
        if (keep_type) {
            p.keep = rt_.memo().find_shared(c.type);
            if (p.keep.get() != t) return pass_reason::internal;
        }
        return pass_reason::none;
    } catch (...) {
        return rt_.plan_failure(c.s);
    }
}

bool p2p_executor::passed(const call& c, bool keep_type, pass_reason early, plan& p) noexcept {
    pass_reason why = early != pass_reason::none ? early : repeated(c.d, c.buf, c.count, c.type, c.peer);
    if (why == pass_reason::none) why = plan_call(c, keep_type, p);
    if (why == pass_reason::none) return false;
    rt_.count_pass(c.d, why);
    return true;
}

namespace {

/// Puts `r` in the request table under `handle` (its lock held). An entry already under that
/// handle is done: the library reuses a handle only once its request is freed, and Open MPI 4.1
/// hands one shared handle (ompi_request_empty) to every send that completed at once, so another
/// thread's send may be recorded under it while this thread's completion call holds its own
/// claimed; the entry replaced releases its block.
template <class Table>
void record(Table& table, MPI_Request handle, p2p_executor::request&& r) {
    auto [it, fresh] = table.try_emplace(handle);
    if (!fresh) gpu::pool_release(it->second.block);
    it->second = std::move(r);
}

}  // namespace

void p2p_executor::keep(shim s, MPI_Request handle, request&& r) noexcept {
    try {
        const std::lock_guard lock(mutex_);
        if (r.serial == 0) r.serial = next_serial_++;
        record(requests_, handle, std::move(r));
        update_live();
    } catch (...) {
        rt_.internal_failure(s, "cannot record the request");  // the block is never reused: no harm but a leak
    }
}

// ---- sends ----

int p2p_executor::send(const call& c, int tag, MPI_Comm comm) noexcept {
    if (live()) progress_detached();
    const auto library = [&] { return send_call(rt_.nbc(), c.s, c.buf, c.count, c.type, c.peer, tag, comm); };
    plan p;
    if (passed(c, false, pass_reason::none, p)) return library();
    gpu::pool_block block;
    try {
        block = acquire(p);
        pack_into(p, c.buf, block.ptr);
    } catch (const std::exception& e) {
        gpu::pool_release(block);
        rt_.internal_failure(c.s, e.what());
        rt_.count_pass(direction::send, pass_reason::internal);
        return library();
    }
    // Buffered mode copies into the attached buffer before returning: the block is free after.
    const int rc = send_call(rt_.nbc(), c.s, block.ptr, static_cast<int>(p.bytes), MPI_PACKED, c.peer, tag, comm);
    gpu::pool_release(block);
    rt_.count_done(direction::send, p.bytes);
    rt_.count_handled(c.s);
    return rc;
}

int p2p_executor::isend(const call& c, int tag, MPI_Comm comm, MPI_Request* req) noexcept {
    if (live()) progress_detached();
    const auto library = [&] { return isend_call(c.s, c.buf, c.count, c.type, c.peer, tag, comm, req); };
    plan p;
    if (passed(c, false, req == nullptr ? pass_reason::bad_argument : pass_reason::none, p)) return library();
    request r;
    try {
        r.block = acquire(p);
        pack_into(p, c.buf, r.block.ptr);
        r.plan = std::move(p);
        r.plan.t = nullptr;  // not needed at completion: nothing to unpack
    } catch (const std::exception& e) {
        gpu::pool_release(r.block);
        rt_.internal_failure(c.s, e.what());
        rt_.count_pass(direction::send, pass_reason::internal);
        return library();
    }
    const int rc = isend_call(c.s, r.block.ptr, static_cast<int>(r.plan.bytes), MPI_PACKED, c.peer, tag, comm, req);
    if (rc != MPI_SUCCESS || *req == MPI_REQUEST_NULL) {
        gpu::pool_release(r.block);
        return rc;
    }
    r.origin = c.s;
    r.buf = const_cast<void*>(c.buf);
    r.comm = comm;
    rt_.count_done(direction::send, r.plan.bytes);
    rt_.count_handled(c.s);
    keep(c.s, *req, std::move(r));
    return rc;
}

int p2p_executor::send_init(const call& c, int tag, MPI_Comm comm, MPI_Request* req) noexcept {
    const auto library = [&] { return send_init_call(c.s, c.buf, c.count, c.type, c.peer, tag, comm, req); };
    plan p;
    if (passed(c, true, req == nullptr ? pass_reason::bad_argument : pass_reason::none, p)) return library();
    request r;
    try {
        r.block = acquire(p);
    } catch (const std::exception& e) {
        rt_.internal_failure(c.s, e.what());
        rt_.count_pass(direction::send, pass_reason::internal);
        return library();
    }
    r.plan = std::move(p);
    r.persistent = true;
    r.origin = c.s;
    r.buf = const_cast<void*>(c.buf);
    r.comm = comm;
    const int rc = send_init_call(c.s, r.block.ptr, static_cast<int>(r.plan.bytes), MPI_PACKED, c.peer, tag, comm, req);
    if (rc != MPI_SUCCESS) {
        gpu::pool_release(r.block);
        return rc;
    }
    rt_.count_handled(c.s);
    keep(c.s, *req, std::move(r));
    return rc;
}

// ---- receives ----

int p2p_executor::recv(const call& c, int tag, MPI_Comm comm, MPI_Status* status) noexcept {
    if (live()) progress_detached();
    void* const buf = const_cast<void*>(c.buf);
    const auto library = [&] { return recv_call(rt_.nbc(), buf, c.count, c.type, c.peer, tag, comm, status); };
    plan p;
    if (passed(c, false, pass_reason::none, p)) return library();
    gpu::pool_block block;
    try {
        block = acquire(p);
    } catch (const std::exception& e) {
        rt_.internal_failure(c.s, e.what());
        rt_.count_pass(direction::recv, pass_reason::internal);
        return library();
    }
    MPI_Status local;
    MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
    const int rc = recv_call(rt_.nbc(), block.ptr, static_cast<int>(p.bytes), MPI_PACKED, c.peer, tag, comm, st);
    if (delivered(rc)) {
        try {
            const std::int64_t n = written_bytes(rc, *st, p.bytes, comm);
            unpack_from(p, block.ptr, n, buf);
            rt_.count_done(direction::recv, n);
            rt_.count_handled(c.s);
        } catch (const std::exception& e) {
            rt_.internal_failure(c.s, e.what());
        }
    }
    gpu::pool_release(block);
    return rc;
}

int p2p_executor::irecv(const call& c, int tag, MPI_Comm comm, MPI_Request* req) noexcept {
    if (live()) progress_detached();
    void* const buf = const_cast<void*>(c.buf);
    const auto library = [&] { return PMPI_Irecv(buf, c.count, c.type, c.peer, tag, comm, req); };
    plan p;
    if (passed(c, true, req == nullptr ? pass_reason::bad_argument : pass_reason::none, p)) return library();
    request r;
    try {
        r.block = acquire(p);
        r.plan = std::move(p);
        r.receive = true;
        r.origin = c.s;
        r.buf = buf;
        r.comm = comm;
        const std::lock_guard lock(mutex_);  // reserve the entry before the library owns the block
        r.serial = next_serial_++;
    } catch (const std::exception& e) {
        gpu::pool_release(r.block);
        rt_.internal_failure(c.s, e.what());
        rt_.count_pass(direction::recv, pass_reason::internal);
        return library();
    }
    const int rc = PMPI_Irecv(r.block.ptr, static_cast<int>(r.plan.bytes), MPI_PACKED, c.peer, tag, comm, req);
    if (rc != MPI_SUCCESS) {
        gpu::pool_release(r.block);
        return rc;
    }
    rt_.count_handled(c.s);
    keep(c.s, *req, std::move(r));
    return rc;
}

int p2p_executor::recv_init(const call& c, int tag, MPI_Comm comm, MPI_Request* req) noexcept {
    void* const buf = const_cast<void*>(c.buf);
    const auto library = [&] { return PMPI_Recv_init(buf, c.count, c.type, c.peer, tag, comm, req); };
    plan p;
    if (passed(c, true, req == nullptr ? pass_reason::bad_argument : pass_reason::none, p)) return library();
    request r;
    try {
        r.block = acquire(p);
    } catch (const std::exception& e) {
        rt_.internal_failure(c.s, e.what());
        rt_.count_pass(direction::recv, pass_reason::internal);
        return library();
    }
    r.plan = std::move(p);
    r.receive = true;
    r.persistent = true;
    r.origin = c.s;
    r.buf = buf;
    r.comm = comm;
    const int rc = PMPI_Recv_init(r.block.ptr, static_cast<int>(r.plan.bytes), MPI_PACKED, c.peer, tag, comm, req);
    if (rc != MPI_SUCCESS) {
        gpu::pool_release(r.block);
        return rc;
    }
    rt_.count_handled(c.s);
    keep(c.s, *req, std::move(r));
    return rc;
}

int p2p_executor::sendrecv(const call& sc, int sendtag, const call& rc_, int recvtag, MPI_Comm comm,
                           MPI_Status* status) noexcept {
    if (live()) progress_detached();
    void* const recvbuf = const_cast<void*>(rc_.buf);
    const auto library = [&] {
        return sendrecv_call(rt_.nbc(), sc.buf, sc.count, sc.type, sc.peer, sendtag, recvbuf, rc_.count, rc_.type,
                             rc_.peer, recvtag, comm, status);
    };
    plan sp, rp;
    // The send plan's type stays valid through the second lookup: the type cache holds it, and
    // the application may not free a type during a call that uses it.
    pass_reason swhy = repeated(sc.d, sc.buf, sc.count, sc.type, sc.peer),
                rwhy = repeated(rc_.d, rc_.buf, rc_.count, rc_.type, rc_.peer);
    if (swhy == pass_reason::none) swhy = plan_call(sc, false, sp);
    if (rwhy == pass_reason::none) rwhy = plan_call(rc_, false, rp);
    if (swhy != pass_reason::none) rt_.count_pass(direction::send, swhy);
    if (rwhy != pass_reason::none) rt_.count_pass(direction::recv, rwhy);
    if (swhy != pass_reason::none && rwhy != pass_reason::none) return library();
    gpu::pool_block sblock, rblock;
    try {
        if (swhy == pass_reason::none) {
            sblock = acquire(sp);
            pack_into(sp, sc.buf, sblock.ptr);
        }
        if (rwhy == pass_reason::none) rblock = acquire(rp);
    } catch (const std::exception& e) {
        gpu::pool_release(sblock);
        gpu::pool_release(rblock);
        rt_.internal_failure(sc.s, e.what());
        return library();
    }
    MPI_Status local;
    MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
    const bool ss = swhy == pass_reason::none, rs = rwhy == pass_reason::none;
    const int rc = sendrecv_call(rt_.nbc(), ss ? sblock.ptr : sc.buf, ss ? static_cast<int>(sp.bytes) : sc.count,
                                 ss ? MPI_PACKED : sc.type, sc.peer, sendtag, rs ? rblock.ptr : recvbuf,
                                 rs ? static_cast<int>(rp.bytes) : rc_.count, rs ? MPI_PACKED : rc_.type, rc_.peer,
                                 recvtag, comm, st);
    if (ss) rt_.count_done(direction::send, sp.bytes);
    if (rs && delivered(rc)) {
        try {
            const std::int64_t n = written_bytes(rc, *st, rp.bytes, comm);
            unpack_from(rp, rblock.ptr, n, recvbuf);
            rt_.count_done(direction::recv, n);
        } catch (const std::exception& e) {
            rt_.internal_failure(sc.s, e.what());
        }
    }
    rt_.count_handled(sc.s);
    gpu::pool_release(sblock);
    gpu::pool_release(rblock);
    return rc;
}

int p2p_executor::sendrecv_replace(void* buf, int count, MPI_Datatype type, int dest, int sendtag, int source,
                                   int recvtag, MPI_Comm comm, MPI_Status* status) noexcept {
    if (live()) progress_detached();
    const auto library = [&] {
        return PMPI_Sendrecv_replace(buf, count, type, dest, sendtag, source, recvtag, comm, status);
    };
    plan p;
    // Both directions use the same buffer and type: shunt's when either peer is real.
    const int peer = dest != MPI_PROC_NULL ? dest : source;
    const pass_reason why = plan_call({shim::sendrecv_replace, direction::send, buf, count, type, peer}, false, p);
    if (why != pass_reason::none) {
        rt_.count_pass(direction::send, why);
        rt_.count_pass(direction::recv, why);
        return library();
    }
    gpu::pool_block block;
    try {
        block = acquire(p);
        pack_into(p, buf, block.ptr);
    } catch (const std::exception& e) {
        gpu::pool_release(block);
        rt_.internal_failure(shim::sendrecv_replace, e.what());
        return library();
    }
    MPI_Status local;
    MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
    const int rc = PMPI_Sendrecv_replace(block.ptr, static_cast<int>(p.bytes), MPI_PACKED, dest, sendtag, source,
                                         recvtag, comm, st);
    if (dest != MPI_PROC_NULL) rt_.count_done(direction::send, p.bytes);
    if (source != MPI_PROC_NULL && delivered(rc)) {
        try {
            const std::int64_t n = written_bytes(rc, *st, p.bytes, comm);
            unpack_from(p, block.ptr, n, buf);
            rt_.count_done(direction::recv, n);
        } catch (const std::exception& e) {
            rt_.internal_failure(shim::sendrecv_replace, e.what());
        }
    }
    rt_.count_handled(shim::sendrecv_replace);
    gpu::pool_release(block);
    return rc;
}

int p2p_executor::mrecv(const call& c, MPI_Message* message, MPI_Status* status) noexcept {
    if (live()) progress_detached();
    void* const buf = const_cast<void*>(c.buf);
    plan p;
    if (passed(c, false,
               message == nullptr || *message == MPI_MESSAGE_NO_PROC || *message == MPI_MESSAGE_NULL
                   ? pass_reason::empty
                   : pass_reason::none,
               p))
        return mrecv_call(rt_.nbc(), buf, c.count, c.type, message, status);
    gpu::pool_block block;
    try {
        block = acquire(p);
    } catch (const std::exception& e) {
        rt_.internal_failure(c.s, e.what());
        rt_.count_pass(direction::recv, pass_reason::internal);
        return mrecv_call(rt_.nbc(), buf, c.count, c.type, message, status);
    }
    MPI_Status local;
    MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
    const int rc = mrecv_call(rt_.nbc(), block.ptr, static_cast<int>(p.bytes), MPI_PACKED, message, st);
    if (delivered(rc)) {
        try {
            const std::int64_t n = written_bytes(rc, *st, p.bytes, MPI_COMM_NULL);
            unpack_from(p, block.ptr, n, buf);
            rt_.count_done(direction::recv, n);
            rt_.count_handled(c.s);
        } catch (const std::exception& e) {
            rt_.internal_failure(c.s, e.what());
        }
    }
    gpu::pool_release(block);
    return rc;
}

int p2p_executor::imrecv(const call& c, MPI_Message* message, MPI_Request* req) noexcept {
    if (live()) progress_detached();
    void* const buf = const_cast<void*>(c.buf);
    plan p;
    if (passed(c, true,
               req == nullptr || message == nullptr || *message == MPI_MESSAGE_NO_PROC || *message == MPI_MESSAGE_NULL
                   ? pass_reason::empty
                   : pass_reason::none,
               p))
        return PMPI_Imrecv(buf, c.count, c.type, message, req);
    request r;
    try {
        r.block = acquire(p);
        r.plan = std::move(p);
        r.receive = true;
        r.origin = c.s;
        r.buf = buf;
    } catch (const std::exception& e) {
        gpu::pool_release(r.block);
        rt_.internal_failure(c.s, e.what());
        rt_.count_pass(direction::recv, pass_reason::internal);
        return PMPI_Imrecv(buf, c.count, c.type, message, req);
    }
    const int rc = PMPI_Imrecv(r.block.ptr, static_cast<int>(r.plan.bytes), MPI_PACKED, message, req);
    if (rc != MPI_SUCCESS) {
        gpu::pool_release(r.block);
        return rc;
    }
    rt_.count_handled(c.s);
    keep(c.s, *req, std::move(r));
    return rc;
}

// ---- persistent requests ----

int p2p_executor::start(shim s, int n, MPI_Request requests[]) noexcept {
    if (!live() || requests == nullptr || n <= 0)
        return s == shim::start ? PMPI_Start(requests) : PMPI_Startall(n, requests);
    // Pack every shunt send before the library starts it, all together (one fused launch for
    // device buffers); mark shunt's requests active.
    std::vector<std::size_t> started;
    try {
        std::vector<request> sends;
        for (int i = 0; i < n; ++i) {
            request copy;
            {
                const std::lock_guard lock(mutex_);
                auto it = requests_.find(requests[i]);
                if (it == requests_.end() || !it->second.persistent) continue;
                it->second.active = true;
                it->second.unpacked = false;
                copy.receive = it->second.receive;
                copy.buf = it->second.buf;
                copy.block = it->second.block;
                copy.plan = it->second.plan;
            }
            started.push_back(static_cast<std::size_t>(i));
            if (!copy.receive) sends.push_back(std::move(copy));
        }
        std::vector<pack_job> jobs;
        for (const auto& r : sends) jobs.push_back({&r.plan, r.buf, r.block.ptr});
        pack_many(jobs);
        for (const auto& r : sends) rt_.count_done(direction::send, r.plan.bytes);
    } catch (const std::exception& e) {
        rt_.internal_failure(s, e.what());  // the message goes out unpacked: logged once
    }
    const int rc = s == shim::start ? PMPI_Start(requests) : PMPI_Startall(n, requests);
    if (rc != MPI_SUCCESS) {
        const std::lock_guard lock(mutex_);
        for (std::size_t i : started)
            if (auto it = requests_.find(requests[i]); it != requests_.end()) it->second.active = false;
    }
    if (!started.empty()) rt_.count_handled(s);
    return rc;
}

// ---- completion ----

void p2p_executor::finish(shim s, request& r, const MPI_Status& status, int err, MPI_Request handle) noexcept {
    try {
        if (const std::int64_t n = deliver(r, status, err); n >= 0) rt_.count_done(direction::recv, n);
    } catch (const std::exception& e) {
        rt_.internal_failure(s, e.what());
    }
    if (r.persistent) {  // the block stays with the request until MPI_Request_free
        const std::lock_guard lock(mutex_);
        if (auto it = requests_.find(handle); it != requests_.end() && it->second.serial == r.serial)
            it->second.active = false;
        return;
    }
    gpu::pool_release(r.block);
    r.block = {};
}

std::vector<p2p_executor::claimed> p2p_executor::claim(int n, const MPI_Request* requests) {
    // Non-persistent entries leave the table (so a handle value the library reuses after
    // completion never meets a stale entry), persistent ones are copied (their handles stay valid).
    std::vector<claimed> mine;
    if (requests == nullptr || n <= 0) return mine;
    const std::lock_guard lock(mutex_);
    for (int i = 0; i < n; ++i) {
        if (requests[i] == MPI_REQUEST_NULL) continue;
        auto it = requests_.find(requests[i]);
        if (it == requests_.end()) continue;
        if (it->second.persistent) {
            if (!it->second.active) continue;  // the library answers an inactive request itself
            mine.push_back({i, requests[i], it->second});
        } else {
            mine.push_back({i, requests[i], std::move(it->second)});
            requests_.erase(it);
        }
    }
    update_live();
    return mine;
}

void p2p_executor::unclaim(claimed& c) {
    if (c.r.persistent) return;
    const std::lock_guard lock(mutex_);
    record(requests_, c.handle, std::move(c.r));
    update_live();
}

void p2p_executor::settle_freed(shim s, MPI_Request& h, request& r, const MPI_Status& st, int rc) noexcept {
    finish(s, r, st, rc, MPI_REQUEST_NULL);
    if (r.persistent) {
        PMPI_Request_free(&h);
        gpu::pool_release(r.block);
    }
}

bool p2p_executor::finish_freed(MPI_Request& h, request& r) noexcept {
    int flag = 0;
    MPI_Status st;
    const int rc = without_errhandler(r.comm, [&] { return PMPI_Test(&h, &flag, &st); });
    if (!flag && rc == MPI_SUCCESS) return false;
    settle_freed(shim::request_free, h, r, st, rc);
    return true;
}

void p2p_executor::progress_detached() noexcept {
    if (detached_n_.load(std::memory_order_acquire) == 0) return;
    std::vector<std::pair<MPI_Request, request>> mine;
    {
        const std::lock_guard lock(mutex_);
        mine.swap(detached_);
        detached_n_.store(0, std::memory_order_release);
        update_live();
    }
    std::vector<std::pair<MPI_Request, request>> left;
    for (auto& [h, r] : mine) {
        if (finish_freed(h, r)) continue;
        try {
            left.emplace_back(h, std::move(r));
        } catch (...) {
            rt_.internal_failure(shim::request_free, "cannot keep a freed request");
        }
    }
    if (left.empty()) return;
    try {
        const std::lock_guard lock(mutex_);
        for (auto& e : left) detached_.push_back(std::move(e));
        detached_n_.store(detached_.size(), std::memory_order_release);
        update_live();
    } catch (...) {
        rt_.internal_failure(shim::request_free, "cannot keep a freed request");
    }
}

void p2p_executor::drain() noexcept {
    std::vector<std::pair<MPI_Request, request>> mine;
    {
        const std::lock_guard lock(mutex_);
        mine.swap(detached_);
        detached_n_.store(0, std::memory_order_release);
        update_live();
    }
    for (auto& entry : mine) {
        // Named, not a structured binding: clang before 16 cannot capture those in a lambda.
        MPI_Request& h = entry.first;
        request& r = entry.second;
        MPI_Status st;
        int flag = 0;
        // A freed receive that never matched would hold MPI_Finalize forever: cancel it (a
        // matched one completes anyway, and its data is unpacked).
        int rc = MPI_SUCCESS;
        if (r.receive) {
            rc = without_errhandler(r.comm, [&] { return PMPI_Test(&h, &flag, &st); });
            if (rc == MPI_SUCCESS && !flag) PMPI_Cancel(&h);
        }
        if (!flag) rc = without_errhandler(r.comm, [&] { return PMPI_Wait(&h, &st); });
        settle_freed(shim::finalize, h, r, st, rc);
    }
    gpu::release_pools();
}

template <class Library, class Settle>
int p2p_executor::complete(shim s, int n, const MPI_Request* requests, MPI_Status* given, bool array, Library library,
                           Settle settle) noexcept {
    rt_.nbc().progress();  // shunt's collectives in flight move on every completion call
    if (!live()) return library(given);
    const bool waits = s == shim::wait || s == shim::waitall || s == shim::waitany || s == shim::waitsome;
    progress_detached();
    std::vector<claimed> mine;
    try {
        mine = claim(n, requests);
    } catch (...) {
        rt_.internal_failure(s, "cannot read the request table");
    }
    int rc = MPI_SUCCESS;
    if (mine.empty()) {
        rc = library(given);
    } else {
        MPI_Status one;
        std::vector<MPI_Status> local;
        MPI_Status* st = array ? statuses_for(given, local, n) : given == MPI_STATUS_IGNORE ? &one : given;
        rc = library(st);
        if (settle(mine, rc, st)) rt_.count_handled(s);
    }
    if (waits) progress_detached();  // a test returns at once, as the library's does
    return rc;
}

bool p2p_executor::settle_some(shim s, std::vector<claimed>& mine, int rc, const MPI_Status* st, const int* outcount,
                               const int* indices) noexcept {
    bool any = false;
    for (auto& c : mine) {
        int j = -1;
        if (outcount != nullptr && *outcount != MPI_UNDEFINED && indices != nullptr)
            for (int k = 0; k < *outcount && j < 0; ++k)
                if (indices[k] == c.index) j = k;
        if (j >= 0 && entry_completed(rc, st[j])) {
            finish(s, c.r, st[j], entry_error(rc, st[j]), c.handle);
            any = true;
        } else {
            unclaim(c);
        }
    }
    return any;
}

int p2p_executor::wait(MPI_Request* request, MPI_Status* status) noexcept {
    return complete(
        shim::wait, 1, request, status, false,
        [&](MPI_Status* st) {
            nbc_executor& x = rt_.nbc();
            return x.in_flight() ? x.wait(request, st) : PMPI_Wait(request, st);
        },
        [&](std::vector<claimed>& mine, int rc, MPI_Status* st) {
            // MPI_Wait completes the request, with an error of its own or not.
            finish(shim::wait, mine[0].r, *st, rc, mine[0].handle);
            return true;
        });
}

int p2p_executor::test(MPI_Request* request, int* flag, MPI_Status* status) noexcept {
    return complete(
        shim::test, 1, request, status, false, [&](MPI_Status* st) { return PMPI_Test(request, flag, st); },
        [&](std::vector<claimed>& mine, int rc, MPI_Status* st) {
            if (flag == nullptr || !*flag) {
                unclaim(mine[0]);
                return false;
            }
            finish(shim::test, mine[0].r, *st, rc, mine[0].handle);
            return true;
        });
}

int p2p_executor::waitall(int n, MPI_Request requests[], MPI_Status statuses[]) noexcept {
    return complete(
        shim::waitall, n, requests, statuses, true,
        [&](MPI_Status* st) {
            nbc_executor& x = rt_.nbc();
            return x.in_flight() ? x.wait_all(n, requests, st) : PMPI_Waitall(n, requests, st);
        },
        [&](std::vector<claimed>& mine, int rc, MPI_Status* st) {
            for (auto& c : mine) {
                const MPI_Status& e = st[c.index];
                if (entry_completed(rc, e))
                    finish(shim::waitall, c.r, e, entry_error(rc, e), c.handle);
                else
                    unclaim(c);
            }
            return true;
        });
}

int p2p_executor::testall(int n, MPI_Request requests[], int* flag, MPI_Status statuses[]) noexcept {
    return complete(
        shim::testall, n, requests, statuses, true, [&](MPI_Status* st) { return PMPI_Testall(n, requests, flag, st); },
        [&](std::vector<claimed>& mine, int rc, MPI_Status* st) {
            const bool all = (flag != nullptr && *flag) || rc == MPI_ERR_IN_STATUS;
            bool any = false;
            for (auto& c : mine) {
                const MPI_Status& e = st[c.index];
                if (all && entry_completed(rc, e)) {
                    finish(shim::testall, c.r, e, entry_error(rc, e), c.handle);
                    any = true;
                } else {
                    unclaim(c);
                }
            }
            return any;
        });
}

int p2p_executor::waitany(int n, MPI_Request requests[], int* index, MPI_Status* status) noexcept {
    return complete(
        shim::waitany, n, requests, status, false,
        [&](MPI_Status* st) {
            nbc_executor& x = rt_.nbc();
            if (!x.in_flight()) return PMPI_Waitany(n, requests, index, st);
            return x.poll([&](int* done) { return PMPI_Testany(n, requests, index, done, st); });
        },
        [&](std::vector<claimed>& mine, int rc, MPI_Status* st) {
            bool any = false;
            for (auto& c : mine) {
                if (index != nullptr && *index == c.index) {
                    finish(shim::waitany, c.r, *st, rc, c.handle);
                    any = true;
                } else {
                    unclaim(c);
                }
            }
            return any;
        });
}

int p2p_executor::testany(int n, MPI_Request requests[], int* index, int* flag, MPI_Status* status) noexcept {
    return complete(
        shim::testany, n, requests, status, false,
        [&](MPI_Status* st) { return PMPI_Testany(n, requests, index, flag, st); },
        [&](std::vector<claimed>& mine, int rc, MPI_Status* st) {
            bool any = false;
            for (auto& c : mine) {
                if (flag != nullptr && *flag && index != nullptr && *index == c.index) {
                    finish(shim::testany, c.r, *st, rc, c.handle);
                    any = true;
                } else {
                    unclaim(c);
                }
            }
            return any;
        });
}

int p2p_executor::waitsome(int n, MPI_Request requests[], int* outcount, int indices[],
                           MPI_Status statuses[]) noexcept {
    return complete(
        shim::waitsome, n, requests, statuses, true,
        [&](MPI_Status* st) {
            nbc_executor& x = rt_.nbc();
            if (!x.in_flight()) return PMPI_Waitsome(n, requests, outcount, indices, st);
            return x.poll([&](int* done) {
                const int rc = PMPI_Testsome(n, requests, outcount, indices, st);
                *done = outcount == nullptr || *outcount != 0;  // some completed, or none active (MPI_UNDEFINED)
                return rc;
            });
        },
        [&](std::vector<claimed>& mine, int rc, MPI_Status* st) {
            return settle_some(shim::waitsome, mine, rc, st, outcount, indices);
        });
}

int p2p_executor::testsome(int n, MPI_Request requests[], int* outcount, int indices[],
                           MPI_Status statuses[]) noexcept {
    return complete(
        shim::testsome, n, requests, statuses, true,
        [&](MPI_Status* st) { return PMPI_Testsome(n, requests, outcount, indices, st); },
        [&](std::vector<claimed>& mine, int rc, MPI_Status* st) {
            return settle_some(shim::testsome, mine, rc, st, outcount, indices);
        });
}

int p2p_executor::request_free(MPI_Request* handle) noexcept {
    if (!live() || handle == nullptr || *handle == MPI_REQUEST_NULL) return PMPI_Request_free(handle);
    request r;
    bool ours = false, inactive = false;
    try {
        const std::lock_guard lock(mutex_);
        auto it = requests_.find(*handle);
        if (it != requests_.end()) {
            ours = true;
            inactive = it->second.persistent && !it->second.active;
            r = std::move(it->second);
            requests_.erase(it);
            update_live();
        }
    } catch (...) {
        rt_.internal_failure(shim::request_free, "cannot keep a freed request");
        return PMPI_Request_free(handle);
    }
    if (!ours) return PMPI_Request_free(handle);
    rt_.count_handled(shim::request_free);
    if (inactive) {
        const int rc = PMPI_Request_free(handle);
        gpu::pool_release(r.block);
        return rc;
    }
    // Active. Finished already: finish it now (a receive's data belongs in the application's
    // buffer as soon as it has arrived). Else the transfer goes on in the library: keep the
    // handle, test it in later calls and finish it (unpack, release) when it completes;
    // MPI_Finalize waits for it.
    MPI_Request h = *handle;
    *handle = MPI_REQUEST_NULL;
    if (finish_freed(h, r)) return MPI_SUCCESS;
    try {
        const std::lock_guard lock(mutex_);
        detached_.emplace_back(h, std::move(r));
        detached_n_.store(detached_.size(), std::memory_order_release);
        update_live();
    } catch (...) {
        rt_.internal_failure(shim::request_free, "cannot keep a freed request");
        PMPI_Request_free(&h);  // the library finishes the transfer; its block is never reused
    }
    return MPI_SUCCESS;
}

int p2p_executor::request_get_status(MPI_Request handle, int* flag, MPI_Status* status) noexcept {
    if (!live() || handle == MPI_REQUEST_NULL) return PMPI_Request_get_status(handle, flag, status);
    // The request stays alive (the Wait or Test that frees it still comes), but a receive that
    // is complete must show its data now: the application may read the buffer before freeing
    // the request. Its data is unpacked here, once, and not again at the Wait.
    request r;
    {
        const std::lock_guard lock(mutex_);
        auto it = requests_.find(handle);
        if (it == requests_.end() || !it->second.receive || it->second.unpacked ||
            (it->second.persistent && !it->second.active))
            return PMPI_Request_get_status(handle, flag, status);
        r = it->second;
    }
    MPI_Status one;
    MPI_Status* st = status == MPI_STATUS_IGNORE ? &one : status;
    const int rc = PMPI_Request_get_status(handle, flag, st);
    if (!delivered(rc) || !*flag) return rc;
    try {
        if (const std::int64_t n = deliver(r, *st, rc); n >= 0) rt_.count_done(direction::recv, n);
        const std::lock_guard lock(mutex_);
        if (auto it = requests_.find(handle); it != requests_.end() && it->second.serial == r.serial)
            it->second.unpacked = true;
        rt_.count_handled(shim::request_get_status);
    } catch (const std::exception& e) {
        rt_.internal_failure(shim::request_get_status, e.what());
    }
    return rc;
}

}  // namespace shunt::detail
