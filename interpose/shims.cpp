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
    return rt != nullptr ? rt->init_thread(argc, argv, required, provided) : PMPI_Init_thread(argc, argv, required, provided);
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
    return rt != nullptr ? rt->bcast(buffer, count, datatype, root, comm) : PMPI_Bcast(buffer, count, datatype, root, comm);
}

SHUNT_EXPORT int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                              MPI_Datatype recvtype, MPI_Comm comm) {
    const reentry_guard guard;
    runtime* rt = active(guard);
    return rt != nullptr ? rt->alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)
                         : PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

}  // extern "C"
