// interpose/large_count.cpp: MPI 4's large-count forms (MPI_Send_c, MPI_Allreduce_c, ...): the int form's path where the counts fit in int, the library's _c form where they do not.
#include "runtime.hpp"

#if SHUNT_HAVE_LARGE_COUNT

#include <climits>
#include <vector>

namespace shunt::detail {
namespace {

bool fits(MPI_Count c) { return c >= 0 && c <= INT_MAX; }

/// Entries of a collective's per-peer arrays on comm: its size, the remote group's on an
/// inter-communicator (`remote`); -1 where the library must judge comm.
int peers(MPI_Comm comm, bool remote) {
    int inter = 0, n = -1;
    if (comm == MPI_COMM_NULL || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS) return -1;
    if (inter && remote ? PMPI_Comm_remote_size(comm, &n) != MPI_SUCCESS : PMPI_Comm_size(comm, &n) != MPI_SUCCESS)
        return -1;
    return n;
}

/// `n` counts as ints into `out`; false when one does not fit (or the array is missing).
bool narrow_counts(const MPI_Count* in, int n, std::vector<int>& out) {
    if (in == nullptr || n < 0) return false;
    out.resize(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
        if (!fits(in[i])) return false;
        out[static_cast<std::size_t>(i)] = static_cast<int>(in[i]);
    }
    return true;
}

/// `n` displacements as ints into `out`; false when one does not fit.
bool narrow_displs(const MPI_Aint* in, int n, std::vector<int>& out) {
    if (in == nullptr || n < 0) return false;
    out.resize(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
        if (in[i] < INT_MIN || in[i] > INT_MAX) return false;
        out[static_cast<std::size_t>(i)] = static_cast<int>(in[i]);
    }
    return true;
}

}  // namespace

// A call too large for the int form: counted as the int form's call, passed as too large.
#define SHUNT_LARGE_PASS_(shim_name, dir, call)             \
    do {                                                    \
        this->count(shim::shim_name);                       \
        count_pass(direction::dir, pass_reason::too_large); \
        return call;                                        \
    } while (0)

// ---- packing ----

int runtime::pack_c(const void* inbuf, MPI_Count incount, MPI_Datatype datatype, void* outbuf, MPI_Count outsize,
                    MPI_Count* position, MPI_Comm comm) noexcept {
    if (position != nullptr && fits(incount) && fits(outsize) && fits(*position)) {
        int pos = static_cast<int>(*position);
        const int rc = pack(inbuf, static_cast<int>(incount), datatype, outbuf, static_cast<int>(outsize), &pos, comm);
        *position = pos;
        return rc;
    }
    SHUNT_LARGE_PASS_(pack, pack, PMPI_Pack_c(inbuf, incount, datatype, outbuf, outsize, position, comm));
}

int runtime::unpack_c(const void* inbuf, MPI_Count insize, MPI_Count* position, void* outbuf, MPI_Count outcount,
                      MPI_Datatype datatype, MPI_Comm comm) noexcept {
    if (position != nullptr && fits(insize) && fits(outcount) && fits(*position)) {
        int pos = static_cast<int>(*position);
        const int rc =
            unpack(inbuf, static_cast<int>(insize), &pos, outbuf, static_cast<int>(outcount), datatype, comm);
        *position = pos;
        return rc;
    }
    SHUNT_LARGE_PASS_(unpack, unpack, PMPI_Unpack_c(inbuf, insize, position, outbuf, outcount, datatype, comm));
}

int runtime::pack_size_c(MPI_Count incount, MPI_Datatype datatype, MPI_Comm comm, MPI_Count* size) noexcept {
    count(shim::pack_size);  // the int form is the library's too; this one answers sizes past INT_MAX
    return PMPI_Pack_size_c(incount, datatype, comm, size);
}

// ---- point-to-point ----

#define SHUNT_LARGE_SEND_(name)                                                                       \
    int runtime::name##_c(const void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, \
                          MPI_Comm comm) noexcept {                                                   \
        if (fits(count)) return name(buf, static_cast<int>(count), datatype, dest, tag, comm);        \
        SHUNT_LARGE_PASS_(name, send, PMPI_##name##_c_(buf, count, datatype, dest, tag, comm));       \
    }
#define PMPI_send_c_ PMPI_Send_c
#define PMPI_ssend_c_ PMPI_Ssend_c
#define PMPI_rsend_c_ PMPI_Rsend_c
#define PMPI_bsend_c_ PMPI_Bsend_c
SHUNT_LARGE_SEND_(send)
SHUNT_LARGE_SEND_(ssend)
SHUNT_LARGE_SEND_(rsend)
SHUNT_LARGE_SEND_(bsend)
#undef SHUNT_LARGE_SEND_

#define SHUNT_LARGE_REQUEST_(name, dir, peer)                                                               \
    int runtime::name##_c(CONST_##dir void* buf, MPI_Count count, MPI_Datatype datatype, int peer, int tag, \
                          MPI_Comm comm, MPI_Request* request) noexcept {                                   \
        if (fits(count)) return name(buf, static_cast<int>(count), datatype, peer, tag, comm, request);     \
        SHUNT_LARGE_PASS_(name, dir, PMPI_##name##_c_(buf, count, datatype, peer, tag, comm, request));     \
    }
#define CONST_send const
#define CONST_recv
#define PMPI_isend_c_ PMPI_Isend_c
#define PMPI_issend_c_ PMPI_Issend_c
#define PMPI_irsend_c_ PMPI_Irsend_c
#define PMPI_ibsend_c_ PMPI_Ibsend_c
#define PMPI_send_init_c_ PMPI_Send_init_c
#define PMPI_ssend_init_c_ PMPI_Ssend_init_c
#define PMPI_rsend_init_c_ PMPI_Rsend_init_c
#define PMPI_bsend_init_c_ PMPI_Bsend_init_c
#define PMPI_irecv_c_ PMPI_Irecv_c
#define PMPI_recv_init_c_ PMPI_Recv_init_c
SHUNT_LARGE_REQUEST_(isend, send, dest)
SHUNT_LARGE_REQUEST_(issend, send, dest)
SHUNT_LARGE_REQUEST_(irsend, send, dest)
SHUNT_LARGE_REQUEST_(ibsend, send, dest)
SHUNT_LARGE_REQUEST_(send_init, send, dest)
SHUNT_LARGE_REQUEST_(ssend_init, send, dest)
SHUNT_LARGE_REQUEST_(rsend_init, send, dest)
SHUNT_LARGE_REQUEST_(bsend_init, send, dest)
SHUNT_LARGE_REQUEST_(irecv, recv, source)
SHUNT_LARGE_REQUEST_(recv_init, recv, source)
#undef SHUNT_LARGE_REQUEST_

int runtime::recv_c(void* buf, MPI_Count count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                    MPI_Status* status) noexcept {
    if (fits(count)) return recv(buf, static_cast<int>(count), datatype, source, tag, comm, status);
    SHUNT_LARGE_PASS_(recv, recv, PMPI_Recv_c(buf, count, datatype, source, tag, comm, status));
}

int runtime::sendrecv_c(const void* sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                        void* recvbuf, MPI_Count recvcount, MPI_Datatype recvtype, int source, int recvtag,
                        MPI_Comm comm, MPI_Status* status) noexcept {
    if (fits(sendcount) && fits(recvcount))
        return sendrecv(sendbuf, static_cast<int>(sendcount), sendtype, dest, sendtag, recvbuf,
                        static_cast<int>(recvcount), recvtype, source, recvtag, comm, status);
    SHUNT_LARGE_PASS_(sendrecv, send,
                      PMPI_Sendrecv_c(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source,
                                      recvtag, comm, status));
}

int runtime::sendrecv_replace_c(void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int sendtag, int source,
                                int recvtag, MPI_Comm comm, MPI_Status* status) noexcept {
    if (fits(count))
        return sendrecv_replace(buf, static_cast<int>(count), datatype, dest, sendtag, source, recvtag, comm, status);
    SHUNT_LARGE_PASS_(sendrecv_replace, send,
                      PMPI_Sendrecv_replace_c(buf, count, datatype, dest, sendtag, source, recvtag, comm, status));
}

int runtime::mrecv_c(void* buf, MPI_Count count, MPI_Datatype datatype, MPI_Message* message,
                     MPI_Status* status) noexcept {
    if (fits(count)) return mrecv(buf, static_cast<int>(count), datatype, message, status);
    SHUNT_LARGE_PASS_(mrecv, recv, PMPI_Mrecv_c(buf, count, datatype, message, status));
}

int runtime::imrecv_c(void* buf, MPI_Count count, MPI_Datatype datatype, MPI_Message* message,
                      MPI_Request* request) noexcept {
    if (fits(count)) return imrecv(buf, static_cast<int>(count), datatype, message, request);
    SHUNT_LARGE_PASS_(imrecv, recv, PMPI_Imrecv_c(buf, count, datatype, message, request));
}

// ---- collectives with one count (or two) ----

int runtime::allreduce_c(const void* sendbuf, void* recvbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op,
                         MPI_Comm comm) noexcept {
    if (fits(count)) return allreduce(sendbuf, recvbuf, static_cast<int>(count), datatype, op, comm);
    SHUNT_LARGE_PASS_(allreduce, collective, PMPI_Allreduce_c(sendbuf, recvbuf, count, datatype, op, comm));
}

int runtime::reduce_c(const void* sendbuf, void* recvbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op, int root,
                      MPI_Comm comm) noexcept {
    if (fits(count)) return reduce(sendbuf, recvbuf, static_cast<int>(count), datatype, op, root, comm);
    SHUNT_LARGE_PASS_(reduce, collective, PMPI_Reduce_c(sendbuf, recvbuf, count, datatype, op, root, comm));
}

int runtime::reduce_scatter_block_c(const void* sendbuf, void* recvbuf, MPI_Count recvcount, MPI_Datatype datatype,
                                    MPI_Op op, MPI_Comm comm) noexcept {
    if (fits(recvcount)) return reduce_scatter_block(sendbuf, recvbuf, static_cast<int>(recvcount), datatype, op, comm);
    SHUNT_LARGE_PASS_(reduce_scatter_block, collective,
                      PMPI_Reduce_scatter_block_c(sendbuf, recvbuf, recvcount, datatype, op, comm));
}

int runtime::allgather_c(const void* sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void* recvbuf,
                         MPI_Count recvcount, MPI_Datatype recvtype, MPI_Comm comm) noexcept {
    if (fits(sendcount) && fits(recvcount))
        return allgather(sendbuf, static_cast<int>(sendcount), sendtype, recvbuf, static_cast<int>(recvcount), recvtype,
                         comm);
    SHUNT_LARGE_PASS_(allgather, collective,
                      PMPI_Allgather_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm));
}

int runtime::bcast_c(void* buffer, MPI_Count count, MPI_Datatype datatype, int root, MPI_Comm comm) noexcept {
    if (fits(count)) return bcast(buffer, static_cast<int>(count), datatype, root, comm);
    SHUNT_LARGE_PASS_(bcast, collective, PMPI_Bcast_c(buffer, count, datatype, root, comm));
}

int runtime::alltoall_c(const void* sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void* recvbuf,
                        MPI_Count recvcount, MPI_Datatype recvtype, MPI_Comm comm) noexcept {
    if (fits(sendcount) && fits(recvcount))
        return alltoall(sendbuf, static_cast<int>(sendcount), sendtype, recvbuf, static_cast<int>(recvcount), recvtype,
                        comm);
    SHUNT_LARGE_PASS_(alltoall, collective,
                      PMPI_Alltoall_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm));
}

// ---- blocking collectives with per-rank arrays: narrowed into temporaries ----

int runtime::reduce_scatter_c(const void* sendbuf, void* recvbuf, const MPI_Count recvcounts[], MPI_Datatype datatype,
                              MPI_Op op, MPI_Comm comm) noexcept {
    try {
        std::vector<int> counts;
        if (narrow_counts(recvcounts, peers(comm, false), counts))
            return reduce_scatter(sendbuf, recvbuf, counts.data(), datatype, op, comm);
    } catch (...) {  // no memory: the library's form
    }
    SHUNT_LARGE_PASS_(reduce_scatter, collective,
                      PMPI_Reduce_scatter_c(sendbuf, recvbuf, recvcounts, datatype, op, comm));
}

int runtime::allgatherv_c(const void* sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void* recvbuf,
                          const MPI_Count recvcounts[], const MPI_Aint displs[], MPI_Datatype recvtype,
                          MPI_Comm comm) noexcept {
    try {
        std::vector<int> counts, at;
        const int n = peers(comm, true);
        if (fits(sendcount) && narrow_counts(recvcounts, n, counts) && narrow_displs(displs, n, at))
            return allgatherv(sendbuf, static_cast<int>(sendcount), sendtype, recvbuf, counts.data(), at.data(),
                              recvtype, comm);
    } catch (...) {}
    SHUNT_LARGE_PASS_(allgatherv, collective,
                      PMPI_Allgatherv_c(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm));
}

int runtime::alltoallv_c(const void* sendbuf, const MPI_Count sendcounts[], const MPI_Aint sdispls[],
                         MPI_Datatype sendtype, void* recvbuf, const MPI_Count recvcounts[], const MPI_Aint rdispls[],
                         MPI_Datatype recvtype, MPI_Comm comm) noexcept {
    try {
        std::vector<int> sc, sd, rc, rd;
        const int n = peers(comm, true);
        const bool in_place = sendbuf == MPI_IN_PLACE;  // the send arrays are ignored
        if (narrow_counts(recvcounts, n, rc) && narrow_displs(rdispls, n, rd) &&
            (in_place || (narrow_counts(sendcounts, n, sc) && narrow_displs(sdispls, n, sd))))
            return alltoallv(sendbuf, in_place ? nullptr : sc.data(), in_place ? nullptr : sd.data(), sendtype, recvbuf,
                             rc.data(), rd.data(), recvtype, comm);
    } catch (...) {}
    SHUNT_LARGE_PASS_(
        alltoallv, collective,
        PMPI_Alltoallv_c(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm));
}

// ---- nonblocking and persistent collectives with one count (or two) ----
// (Those with per-rank arrays are not intercepted: the library reads the application's arrays
// until the call completes, so narrowed temporaries would not do.)

int runtime::iallreduce_c(const void* sendbuf, void* recvbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op,
                          MPI_Comm comm, MPI_Request* request) noexcept {
    if (fits(count)) return iallreduce(sendbuf, recvbuf, static_cast<int>(count), datatype, op, comm, request);
    SHUNT_LARGE_PASS_(iallreduce, collective, PMPI_Iallreduce_c(sendbuf, recvbuf, count, datatype, op, comm, request));
}

int runtime::ireduce_c(const void* sendbuf, void* recvbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op, int root,
                       MPI_Comm comm, MPI_Request* request) noexcept {
    if (fits(count)) return ireduce(sendbuf, recvbuf, static_cast<int>(count), datatype, op, root, comm, request);
    SHUNT_LARGE_PASS_(ireduce, collective, PMPI_Ireduce_c(sendbuf, recvbuf, count, datatype, op, root, comm, request));
}

int runtime::ireduce_scatter_block_c(const void* sendbuf, void* recvbuf, MPI_Count recvcount, MPI_Datatype datatype,
                                     MPI_Op op, MPI_Comm comm, MPI_Request* request) noexcept {
    if (fits(recvcount))
        return ireduce_scatter_block(sendbuf, recvbuf, static_cast<int>(recvcount), datatype, op, comm, request);
    SHUNT_LARGE_PASS_(ireduce_scatter_block, collective,
                      PMPI_Ireduce_scatter_block_c(sendbuf, recvbuf, recvcount, datatype, op, comm, request));
}

int runtime::iallgather_c(const void* sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void* recvbuf,
                          MPI_Count recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) noexcept {
    if (fits(sendcount) && fits(recvcount))
        return iallgather(sendbuf, static_cast<int>(sendcount), sendtype, recvbuf, static_cast<int>(recvcount),
                          recvtype, comm, request);
    SHUNT_LARGE_PASS_(iallgather, collective,
                      PMPI_Iallgather_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request));
}

int runtime::ibcast_c(void* buffer, MPI_Count count, MPI_Datatype datatype, int root, MPI_Comm comm,
                      MPI_Request* request) noexcept {
    if (fits(count)) return ibcast(buffer, static_cast<int>(count), datatype, root, comm, request);
    SHUNT_LARGE_PASS_(ibcast, collective, PMPI_Ibcast_c(buffer, count, datatype, root, comm, request));
}

int runtime::ialltoall_c(const void* sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void* recvbuf,
                         MPI_Count recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) noexcept {
    if (fits(sendcount) && fits(recvcount))
        return ialltoall(sendbuf, static_cast<int>(sendcount), sendtype, recvbuf, static_cast<int>(recvcount), recvtype,
                         comm, request);
    SHUNT_LARGE_PASS_(ialltoall, collective,
                      PMPI_Ialltoall_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request));
}

int runtime::allreduce_init_c(const void* sendbuf, void* recvbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op,
                              MPI_Comm comm, MPI_Info info, MPI_Request* request) noexcept {
    if (fits(count))
        return allreduce_init(sendbuf, recvbuf, static_cast<int>(count), datatype, op, comm, info, request);
    SHUNT_LARGE_PASS_(allreduce_init, collective,
                      PMPI_Allreduce_init_c(sendbuf, recvbuf, count, datatype, op, comm, info, request));
}

int runtime::reduce_init_c(const void* sendbuf, void* recvbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op,
                           int root, MPI_Comm comm, MPI_Info info, MPI_Request* request) noexcept {
    if (fits(count))
        return reduce_init(sendbuf, recvbuf, static_cast<int>(count), datatype, op, root, comm, info, request);
    SHUNT_LARGE_PASS_(reduce_init, collective,
                      PMPI_Reduce_init_c(sendbuf, recvbuf, count, datatype, op, root, comm, info, request));
}

int runtime::reduce_scatter_block_init_c(const void* sendbuf, void* recvbuf, MPI_Count recvcount, MPI_Datatype datatype,
                                         MPI_Op op, MPI_Comm comm, MPI_Info info, MPI_Request* request) noexcept {
    if (fits(recvcount))
        return reduce_scatter_block_init(sendbuf, recvbuf, static_cast<int>(recvcount), datatype, op, comm, info,
                                         request);
    SHUNT_LARGE_PASS_(reduce_scatter_block_init, collective,
                      PMPI_Reduce_scatter_block_init_c(sendbuf, recvbuf, recvcount, datatype, op, comm, info, request));
}

int runtime::allgather_init_c(const void* sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void* recvbuf,
                              MPI_Count recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info,
                              MPI_Request* request) noexcept {
    if (fits(sendcount) && fits(recvcount))
        return allgather_init(sendbuf, static_cast<int>(sendcount), sendtype, recvbuf, static_cast<int>(recvcount),
                              recvtype, comm, info, request);
    SHUNT_LARGE_PASS_(
        allgather_init, collective,
        PMPI_Allgather_init_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, info, request));
}

int runtime::bcast_init_c(void* buffer, MPI_Count count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Info info,
                          MPI_Request* request) noexcept {
    if (fits(count)) return bcast_init(buffer, static_cast<int>(count), datatype, root, comm, info, request);
    SHUNT_LARGE_PASS_(bcast_init, collective, PMPI_Bcast_init_c(buffer, count, datatype, root, comm, info, request));
}

int runtime::alltoall_init_c(const void* sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void* recvbuf,
                             MPI_Count recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info,
                             MPI_Request* request) noexcept {
    if (fits(sendcount) && fits(recvcount))
        return alltoall_init(sendbuf, static_cast<int>(sendcount), sendtype, recvbuf, static_cast<int>(recvcount),
                             recvtype, comm, info, request);
    SHUNT_LARGE_PASS_(
        alltoall_init, collective,
        PMPI_Alltoall_init_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, info, request));
}

#undef SHUNT_LARGE_PASS_

}  // namespace shunt::detail

#endif
