// interpose/shims.cpp: the exported MPI_* shims: re-entry guard, SHUNT_DISABLE, then the runtime; no logic here.
//
// The shims cannot carry `noexcept`: mpi.h declares these functions without an exception
// specification and GCC 12 rejects a redeclaration that differs. They are noexcept in effect:
// each body calls only the library and runtime members, which are all noexcept.
#include "export.hpp"
#include "runtime.hpp"

#include <mpi.h>

using shunt::detail::reentry_guard;
using shunt::detail::runtime;
using shunt::detail::shim;

namespace {

/// The runtime when this call is the thread's outermost shim and shunt is enabled, else nullptr.
runtime* active(const reentry_guard& guard) noexcept { return guard.outermost() ? runtime::instance() : nullptr; }

}  // namespace

extern "C" {

SHUNT_EXPORT int MPI_Init(int* argc, char*** argv) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->init(argc, argv) : PMPI_Init(argc, argv);
}

SHUNT_EXPORT int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->init_thread(argc, argv, required, provided)
                         : PMPI_Init_thread(argc, argv, required, provided);
}

SHUNT_EXPORT int MPI_Finalize(void) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->finalize() : PMPI_Finalize();
}

SHUNT_EXPORT int MPI_Type_commit(MPI_Datatype* type) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->type_commit(type) : PMPI_Type_commit(type);
}

SHUNT_EXPORT int MPI_Type_free(MPI_Datatype* type) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->type_free(type) : PMPI_Type_free(type);
}

SHUNT_EXPORT int MPI_Type_dup(MPI_Datatype oldtype, MPI_Datatype* newtype) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->type_dup(oldtype, newtype) : PMPI_Type_dup(oldtype, newtype);
}

SHUNT_EXPORT int MPI_Pack(const void* inbuf, int incount, MPI_Datatype datatype, void* outbuf, int outsize,
                          int* position, MPI_Comm comm) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->pack(inbuf, incount, datatype, outbuf, outsize, position, comm)
                         : PMPI_Pack(inbuf, incount, datatype, outbuf, outsize, position, comm);
}

SHUNT_EXPORT int MPI_Unpack(const void* inbuf, int insize, int* position, void* outbuf, int outcount,
                            MPI_Datatype datatype, MPI_Comm comm) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->unpack(inbuf, insize, position, outbuf, outcount, datatype, comm)
                         : PMPI_Unpack(inbuf, insize, position, outbuf, outcount, datatype, comm);
}

SHUNT_EXPORT int MPI_Pack_size(int incount, MPI_Datatype datatype, MPI_Comm comm, int* size) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->pack_size(incount, datatype, comm, size) : PMPI_Pack_size(incount, datatype, comm, size);
}

SHUNT_EXPORT int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                               MPI_Comm comm) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->allreduce(sendbuf, recvbuf, count, datatype, op, comm)
                         : PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

SHUNT_EXPORT int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
                            MPI_Comm comm) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->reduce(sendbuf, recvbuf, count, datatype, op, root, comm)
                         : PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
}

SHUNT_EXPORT int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype datatype,
                                          MPI_Op op, MPI_Comm comm) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm)
                         : PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
}

SHUNT_EXPORT int MPI_Reduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[], MPI_Datatype datatype,
                                    MPI_Op op, MPI_Comm comm) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm)
                         : PMPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm);
}

SHUNT_EXPORT int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                               MPI_Datatype recvtype, MPI_Comm comm) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)
                         : PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

SHUNT_EXPORT int MPI_Allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm)
                         : PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
}

SHUNT_EXPORT int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->bcast(buffer, count, datatype, root, comm)
                         : PMPI_Bcast(buffer, count, datatype, root, comm);
}

SHUNT_EXPORT int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                              MPI_Datatype recvtype, MPI_Comm comm) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)
                         : PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

SHUNT_EXPORT int MPI_Alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                               void* recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype,
                               MPI_Comm comm) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr
               ? rt->alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm)
               : PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm);
}

SHUNT_EXPORT int MPI_Alltoallw(const void* sendbuf, const int sendcounts[], const int sdispls[],
                               const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[],
                               const int rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr
               ? rt->alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm)
               : PMPI_Alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm);
}

SHUNT_EXPORT int MPI_Neighbor_alltoallw(const void* sendbuf, const int sendcounts[], const MPI_Aint sdispls[],
                                        const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[],
                                        const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->neighbor_alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls,
                                                  recvtypes, comm)
                         : PMPI_Neighbor_alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts,
                                                   rdispls, recvtypes, comm);
}

// Point-to-point: shunt packs device buffers and non-contiguous data; completion calls finish its requests.

SHUNT_EXPORT int MPI_Send(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->send(shim::send, runtime::send_mode::standard, buf, count, datatype, dest, tag, comm)
                         : PMPI_Send(buf, count, datatype, dest, tag, comm);
}

SHUNT_EXPORT int MPI_Ssend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->send(shim::ssend, runtime::send_mode::sync, buf, count, datatype, dest, tag, comm)
                         : PMPI_Ssend(buf, count, datatype, dest, tag, comm);
}

SHUNT_EXPORT int MPI_Rsend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->send(shim::rsend, runtime::send_mode::ready, buf, count, datatype, dest, tag, comm)
                         : PMPI_Rsend(buf, count, datatype, dest, tag, comm);
}

SHUNT_EXPORT int MPI_Bsend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->send(shim::bsend, runtime::send_mode::buffered, buf, count, datatype, dest, tag, comm)
                         : PMPI_Bsend(buf, count, datatype, dest, tag, comm);
}

SHUNT_EXPORT int MPI_Isend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                           MPI_Request* request) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr
               ? rt->isend(shim::isend, runtime::send_mode::standard, buf, count, datatype, dest, tag, comm, request)
               : PMPI_Isend(buf, count, datatype, dest, tag, comm, request);
}

SHUNT_EXPORT int MPI_Issend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                            MPI_Request* request) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr
               ? rt->isend(shim::issend, runtime::send_mode::sync, buf, count, datatype, dest, tag, comm, request)
               : PMPI_Issend(buf, count, datatype, dest, tag, comm, request);
}

SHUNT_EXPORT int MPI_Irsend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                            MPI_Request* request) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr
               ? rt->isend(shim::irsend, runtime::send_mode::ready, buf, count, datatype, dest, tag, comm, request)
               : PMPI_Irsend(buf, count, datatype, dest, tag, comm, request);
}

SHUNT_EXPORT int MPI_Ibsend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                            MPI_Request* request) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr
               ? rt->isend(shim::ibsend, runtime::send_mode::buffered, buf, count, datatype, dest, tag, comm, request)
               : PMPI_Ibsend(buf, count, datatype, dest, tag, comm, request);
}

SHUNT_EXPORT int MPI_Send_init(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                               MPI_Request* request) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->send_init(shim::send_init, runtime::send_mode::standard, buf, count, datatype, dest, tag,
                                         comm, request)
                         : PMPI_Send_init(buf, count, datatype, dest, tag, comm, request);
}

SHUNT_EXPORT int MPI_Ssend_init(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                                MPI_Request* request) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->send_init(shim::ssend_init, runtime::send_mode::sync, buf, count, datatype, dest, tag,
                                         comm, request)
                         : PMPI_Ssend_init(buf, count, datatype, dest, tag, comm, request);
}

SHUNT_EXPORT int MPI_Rsend_init(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                                MPI_Request* request) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->send_init(shim::rsend_init, runtime::send_mode::ready, buf, count, datatype, dest, tag,
                                         comm, request)
                         : PMPI_Rsend_init(buf, count, datatype, dest, tag, comm, request);
}

SHUNT_EXPORT int MPI_Bsend_init(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                                MPI_Request* request) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->send_init(shim::bsend_init, runtime::send_mode::buffered, buf, count, datatype, dest,
                                         tag, comm, request)
                         : PMPI_Bsend_init(buf, count, datatype, dest, tag, comm, request);
}

SHUNT_EXPORT int MPI_Recv(void* buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                          MPI_Status* status) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->recv(buf, count, datatype, source, tag, comm, status)
                         : PMPI_Recv(buf, count, datatype, source, tag, comm, status);
}

SHUNT_EXPORT int MPI_Irecv(void* buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                           MPI_Request* request) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->irecv(buf, count, datatype, source, tag, comm, request)
                         : PMPI_Irecv(buf, count, datatype, source, tag, comm, request);
}

SHUNT_EXPORT int MPI_Recv_init(void* buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                               MPI_Request* request) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->recv_init(buf, count, datatype, source, tag, comm, request)
                         : PMPI_Recv_init(buf, count, datatype, source, tag, comm, request);
}

SHUNT_EXPORT int MPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                              void* recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag,
                              MPI_Comm comm, MPI_Status* status) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype,
                                        source, recvtag, comm, status)
                         : PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype,
                                         source, recvtag, comm, status);
}

SHUNT_EXPORT int MPI_Sendrecv_replace(void* buf, int count, MPI_Datatype datatype, int dest, int sendtag, int source,
                                      int recvtag, MPI_Comm comm, MPI_Status* status) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->sendrecv_replace(buf, count, datatype, dest, sendtag, source, recvtag, comm, status)
                         : PMPI_Sendrecv_replace(buf, count, datatype, dest, sendtag, source, recvtag, comm, status);
}

SHUNT_EXPORT int MPI_Mrecv(void* buf, int count, MPI_Datatype datatype, MPI_Message* message, MPI_Status* status) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->mrecv(buf, count, datatype, message, status)
                         : PMPI_Mrecv(buf, count, datatype, message, status);
}

SHUNT_EXPORT int MPI_Imrecv(void* buf, int count, MPI_Datatype datatype, MPI_Message* message, MPI_Request* request) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->imrecv(buf, count, datatype, message, request)
                         : PMPI_Imrecv(buf, count, datatype, message, request);
}

SHUNT_EXPORT int MPI_Start(MPI_Request* request) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->start(request) : PMPI_Start(request);
}

SHUNT_EXPORT int MPI_Startall(int count, MPI_Request array_of_requests[]) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->startall(count, array_of_requests) : PMPI_Startall(count, array_of_requests);
}

SHUNT_EXPORT int MPI_Wait(MPI_Request* request, MPI_Status* status) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->wait(request, status) : PMPI_Wait(request, status);
}

SHUNT_EXPORT int MPI_Waitall(int count, MPI_Request array_of_requests[], MPI_Status array_of_statuses[]) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->waitall(count, array_of_requests, array_of_statuses)
                         : PMPI_Waitall(count, array_of_requests, array_of_statuses);
}

SHUNT_EXPORT int MPI_Waitany(int count, MPI_Request array_of_requests[], int* index, MPI_Status* status) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->waitany(count, array_of_requests, index, status)
                         : PMPI_Waitany(count, array_of_requests, index, status);
}

SHUNT_EXPORT int MPI_Waitsome(int incount, MPI_Request array_of_requests[], int* outcount, int array_of_indices[],
                              MPI_Status array_of_statuses[]) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->waitsome(incount, array_of_requests, outcount, array_of_indices, array_of_statuses)
                         : PMPI_Waitsome(incount, array_of_requests, outcount, array_of_indices, array_of_statuses);
}

SHUNT_EXPORT int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->test(request, flag, status) : PMPI_Test(request, flag, status);
}

SHUNT_EXPORT int MPI_Testall(int count, MPI_Request array_of_requests[], int* flag, MPI_Status array_of_statuses[]) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->testall(count, array_of_requests, flag, array_of_statuses)
                         : PMPI_Testall(count, array_of_requests, flag, array_of_statuses);
}

SHUNT_EXPORT int MPI_Testany(int count, MPI_Request array_of_requests[], int* index, int* flag, MPI_Status* status) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->testany(count, array_of_requests, index, flag, status)
                         : PMPI_Testany(count, array_of_requests, index, flag, status);
}

SHUNT_EXPORT int MPI_Testsome(int incount, MPI_Request array_of_requests[], int* outcount, int array_of_indices[],
                              MPI_Status array_of_statuses[]) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->testsome(incount, array_of_requests, outcount, array_of_indices, array_of_statuses)
                         : PMPI_Testsome(incount, array_of_requests, outcount, array_of_indices, array_of_statuses);
}

SHUNT_EXPORT int MPI_Request_free(MPI_Request* request) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->request_free(request) : PMPI_Request_free(request);
}

SHUNT_EXPORT int MPI_Cancel(MPI_Request* request) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->cancel(request) : PMPI_Cancel(request);
}

SHUNT_EXPORT int MPI_Request_get_status(MPI_Request request, int* flag, MPI_Status* status) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->request_get_status(request, flag, status)
                         : PMPI_Request_get_status(request, flag, status);
}

}  // extern "C"
