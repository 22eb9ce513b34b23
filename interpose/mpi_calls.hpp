// interpose/mpi_calls.hpp: the one list of intercepted MPI functions: the shim enum, its names, the shims and the runtime's entry points all come from it.
#pragma once

#include <mpi.h>

/// X(name, Name, (parameters), (arguments)) per intercepted function MPI_Name, in report order:
/// `name` is its shim enumerator and the runtime member the shim calls, with the parameters of
/// mpi.h's prototype (the same types, or GCC rejects the redeclaration). One list per family, in
/// this order (counters.hpp names the boundaries): setup and datatypes; the collectives shunt runs
/// with its schedules, whose runtime members are generated (collectives.cpp: each names its MPI
/// form mpi_<name> in collectives/<name>.hpp, so adding one is an entry here, its header and its
/// test); their nonblocking forms (the request last) and persistent forms (info and request
/// last, MPI 4), generated likewise from the blocking form; the fused collectives; point-to-point
/// data movers (send .. imrecv) and completion calls (wait .. request_get_status). Adding another function is one entry and the runtime member
/// that handles it.
#define SHUNT_MPI_SETUP_CALLS(X)                                                                        \
    X(pack, Pack,                                                                                       \
      (const void* inbuf, int incount, MPI_Datatype datatype, void* outbuf, int outsize, int* position, \
       MPI_Comm comm),                                                                                  \
      (inbuf, incount, datatype, outbuf, outsize, position, comm))                                      \
    X(unpack, Unpack,                                                                                   \
      (const void* inbuf, int insize, int* position, void* outbuf, int outcount, MPI_Datatype datatype, \
       MPI_Comm comm),                                                                                  \
      (inbuf, insize, position, outbuf, outcount, datatype, comm))                                      \
    X(pack_size, Pack_size, (int incount, MPI_Datatype datatype, MPI_Comm comm, int* size),             \
      (incount, datatype, comm, size))                                                                  \
    X(type_commit, Type_commit, (MPI_Datatype * type), (type))                                          \
    X(type_dup, Type_dup, (MPI_Datatype oldtype, MPI_Datatype * newtype), (oldtype, newtype))           \
    X(type_free, Type_free, (MPI_Datatype * type), (type))                                              \
    X(init, Init, (int* argc, char*** argv), (argc, argv))                                              \
    X(init_thread, Init_thread, (int* argc, char*** argv, int required, int* provided),                 \
      (argc, argv, required, provided))                                                                 \
    X(finalize, Finalize, (), ())

#define SHUNT_MPI_COLL_CALLS(X)                                                                                        \
    X(allreduce, Allreduce,                                                                                            \
      (const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm),                \
      (sendbuf, recvbuf, count, datatype, op, comm))                                                                   \
    X(reduce, Reduce,                                                                                                  \
      (const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm),      \
      (sendbuf, recvbuf, count, datatype, op, root, comm))                                                             \
    X(reduce_scatter_block, Reduce_scatter_block,                                                                      \
      (const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm),            \
      (sendbuf, recvbuf, recvcount, datatype, op, comm))                                                               \
    X(reduce_scatter, Reduce_scatter,                                                                                  \
      (const void* sendbuf, void* recvbuf, const int recvcounts[], MPI_Datatype datatype, MPI_Op op, MPI_Comm comm),   \
      (sendbuf, recvbuf, recvcounts, datatype, op, comm))                                                              \
    X(allgather, Allgather,                                                                                            \
      (const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount, MPI_Datatype recvtype, \
       MPI_Comm comm),                                                                                                 \
      (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm))                                              \
    X(allgatherv, Allgatherv,                                                                                          \
      (const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],               \
       const int displs[], MPI_Datatype recvtype, MPI_Comm comm),                                                      \
      (sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm))                                     \
    X(bcast, Bcast, (void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm),                         \
      (buffer, count, datatype, root, comm))                                                                           \
    X(alltoall, Alltoall,                                                                                              \
      (const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount, MPI_Datatype recvtype, \
       MPI_Comm comm),                                                                                                 \
      (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm))                                              \
    X(alltoallv, Alltoallv,                                                                                            \
      (const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype, void* recvbuf,         \
       const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm),                             \
      (sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm))

#define SHUNT_MPI_NBC_CALLS(X)                                                                                         \
    X(iallreduce, Iallreduce,                                                                                          \
      (const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,                 \
       MPI_Request* request),                                                                                          \
      (sendbuf, recvbuf, count, datatype, op, comm, request))                                                          \
    X(ireduce, Ireduce,                                                                                                \
      (const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm,       \
       MPI_Request* request),                                                                                          \
      (sendbuf, recvbuf, count, datatype, op, root, comm, request))                                                    \
    X(ireduce_scatter_block, Ireduce_scatter_block,                                                                    \
      (const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,             \
       MPI_Request* request),                                                                                          \
      (sendbuf, recvbuf, recvcount, datatype, op, comm, request))                                                      \
    X(ireduce_scatter, Ireduce_scatter,                                                                                \
      (const void* sendbuf, void* recvbuf, const int recvcounts[], MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,    \
       MPI_Request* request),                                                                                          \
      (sendbuf, recvbuf, recvcounts, datatype, op, comm, request))                                                     \
    X(iallgather, Iallgather,                                                                                          \
      (const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount, MPI_Datatype recvtype, \
       MPI_Comm comm, MPI_Request* request),                                                                           \
      (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request))                                     \
    X(iallgatherv, Iallgatherv,                                                                                        \
      (const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],               \
       const int displs[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request),                                \
      (sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, request))                            \
    X(ibcast, Ibcast, (void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request* request), \
      (buffer, count, datatype, root, comm, request))                                                                  \
    X(ialltoall, Ialltoall,                                                                                            \
      (const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount, MPI_Datatype recvtype, \
       MPI_Comm comm, MPI_Request* request),                                                                           \
      (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request))                                     \
    X(ialltoallv, Ialltoallv,                                                                                          \
      (const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype, void* recvbuf,         \
       const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request),       \
      (sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, request))

/// MPI 4's persistent collectives, where the library's mpi.h declares them (MPICH 4; Open MPI 4.1
/// has only its MPIX_ extension, which goes to the library untouched).
#if MPI_VERSION >= 4
#define SHUNT_HAVE_PERSISTENT_COLLECTIVES 1
#define SHUNT_MPI_PERSISTENT_CALLS(X)                                                                                  \
    X(allreduce_init, Allreduce_init,                                                                                  \
      (const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Info info,  \
       MPI_Request* request),                                                                                          \
      (sendbuf, recvbuf, count, datatype, op, comm, info, request))                                                    \
    X(reduce_init, Reduce_init,                                                                                        \
      (const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm,       \
       MPI_Info info, MPI_Request* request),                                                                           \
      (sendbuf, recvbuf, count, datatype, op, root, comm, info, request))                                              \
    X(reduce_scatter_block_init, Reduce_scatter_block_init,                                                            \
      (const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,             \
       MPI_Info info, MPI_Request* request),                                                                           \
      (sendbuf, recvbuf, recvcount, datatype, op, comm, info, request))                                                \
    X(reduce_scatter_init, Reduce_scatter_init,                                                                        \
      (const void* sendbuf, void* recvbuf, const int recvcounts[], MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,    \
       MPI_Info info, MPI_Request* request),                                                                           \
      (sendbuf, recvbuf, recvcounts, datatype, op, comm, info, request))                                               \
    X(allgather_init, Allgather_init,                                                                                  \
      (const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount, MPI_Datatype recvtype, \
       MPI_Comm comm, MPI_Info info, MPI_Request* request),                                                            \
      (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, info, request))                               \
    X(allgatherv_init, Allgatherv_init,                                                                                \
      (const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],               \
       const int displs[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request* request),                 \
      (sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, info, request))                      \
    X(bcast_init, Bcast_init,                                                                                          \
      (void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Info info, MPI_Request* request),  \
      (buffer, count, datatype, root, comm, info, request))                                                            \
    X(alltoall_init, Alltoall_init,                                                                                    \
      (const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount, MPI_Datatype recvtype, \
       MPI_Comm comm, MPI_Info info, MPI_Request* request),                                                            \
      (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, info, request))                               \
    X(alltoallv_init, Alltoallv_init,                                                                                  \
      (const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype, void* recvbuf,         \
       const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info,               \
       MPI_Request* request),                                                                                          \
      (sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, info, request))
#else
#define SHUNT_HAVE_PERSISTENT_COLLECTIVES 0
#define SHUNT_MPI_PERSISTENT_CALLS(X)
#endif

#define SHUNT_MPI_FUSED_CALLS(X)                                                                                   \
    X(alltoallw, Alltoallw,                                                                                        \
      (const void* sendbuf, const int sendcounts[], const int sdispls[], const MPI_Datatype sendtypes[],           \
       void* recvbuf, const int recvcounts[], const int rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm), \
      (sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm))                    \
    X(neighbor_alltoallw, Neighbor_alltoallw,                                                                      \
      (const void* sendbuf, const int sendcounts[], const MPI_Aint sdispls[], const MPI_Datatype sendtypes[],      \
       void* recvbuf, const int recvcounts[], const MPI_Aint rdispls[], const MPI_Datatype recvtypes[],            \
       MPI_Comm comm),                                                                                             \
      (sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm))

#define SHUNT_MPI_P2P_CALLS(X)                                                                                         \
    X(send, Send, (const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm),               \
      (buf, count, datatype, dest, tag, comm))                                                                         \
    X(recv, Recv,                                                                                                      \
      (void* buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Status* status),           \
      (buf, count, datatype, source, tag, comm, status))                                                               \
    X(isend, Isend,                                                                                                    \
      (const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request* request),     \
      (buf, count, datatype, dest, tag, comm, request))                                                                \
    X(irecv, Irecv,                                                                                                    \
      (void* buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Request* request),         \
      (buf, count, datatype, source, tag, comm, request))                                                              \
    X(sendrecv, Sendrecv,                                                                                              \
      (const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void* recvbuf, int recvcount, \
       MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Status* status),                             \
      (sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag, comm, status))      \
    X(sendrecv_replace, Sendrecv_replace,                                                                              \
      (void* buf, int count, MPI_Datatype datatype, int dest, int sendtag, int source, int recvtag, MPI_Comm comm,     \
       MPI_Status* status),                                                                                            \
      (buf, count, datatype, dest, sendtag, source, recvtag, comm, status))                                            \
    X(ssend, Ssend, (const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm),             \
      (buf, count, datatype, dest, tag, comm))                                                                         \
    X(rsend, Rsend, (const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm),             \
      (buf, count, datatype, dest, tag, comm))                                                                         \
    X(bsend, Bsend, (const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm),             \
      (buf, count, datatype, dest, tag, comm))                                                                         \
    X(issend, Issend,                                                                                                  \
      (const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request* request),     \
      (buf, count, datatype, dest, tag, comm, request))                                                                \
    X(irsend, Irsend,                                                                                                  \
      (const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request* request),     \
      (buf, count, datatype, dest, tag, comm, request))                                                                \
    X(ibsend, Ibsend,                                                                                                  \
      (const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request* request),     \
      (buf, count, datatype, dest, tag, comm, request))                                                                \
    X(send_init, Send_init,                                                                                            \
      (const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request* request),     \
      (buf, count, datatype, dest, tag, comm, request))                                                                \
    X(recv_init, Recv_init,                                                                                            \
      (void* buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Request* request),         \
      (buf, count, datatype, source, tag, comm, request))                                                              \
    X(ssend_init, Ssend_init,                                                                                          \
      (const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request* request),     \
      (buf, count, datatype, dest, tag, comm, request))                                                                \
    X(rsend_init, Rsend_init,                                                                                          \
      (const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request* request),     \
      (buf, count, datatype, dest, tag, comm, request))                                                                \
    X(bsend_init, Bsend_init,                                                                                          \
      (const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request* request),     \
      (buf, count, datatype, dest, tag, comm, request))                                                                \
    X(start, Start, (MPI_Request * request), (request))                                                                \
    X(startall, Startall, (int count, MPI_Request array_of_requests[]), (count, array_of_requests))                    \
    X(mrecv, Mrecv, (void* buf, int count, MPI_Datatype datatype, MPI_Message* message, MPI_Status* status),           \
      (buf, count, datatype, message, status))                                                                         \
    X(imrecv, Imrecv, (void* buf, int count, MPI_Datatype datatype, MPI_Message* message, MPI_Request* request),       \
      (buf, count, datatype, message, request))                                                                        \
    X(wait, Wait, (MPI_Request * request, MPI_Status * status), (request, status))                                     \
    X(waitall, Waitall, (int count, MPI_Request array_of_requests[], MPI_Status array_of_statuses[]),                  \
      (count, array_of_requests, array_of_statuses))                                                                   \
    X(waitany, Waitany, (int count, MPI_Request array_of_requests[], int* index, MPI_Status* status),                  \
      (count, array_of_requests, index, status))                                                                       \
    X(waitsome, Waitsome,                                                                                              \
      (int incount, MPI_Request array_of_requests[], int* outcount, int array_of_indices[],                            \
       MPI_Status array_of_statuses[]),                                                                                \
      (incount, array_of_requests, outcount, array_of_indices, array_of_statuses))                                     \
    X(test, Test, (MPI_Request * request, int* flag, MPI_Status* status), (request, flag, status))                     \
    X(testall, Testall, (int count, MPI_Request array_of_requests[], int* flag, MPI_Status array_of_statuses[]),       \
      (count, array_of_requests, flag, array_of_statuses))                                                             \
    X(testany, Testany, (int count, MPI_Request array_of_requests[], int* index, int* flag, MPI_Status* status),       \
      (count, array_of_requests, index, flag, status))                                                                 \
    X(testsome, Testsome,                                                                                              \
      (int incount, MPI_Request array_of_requests[], int* outcount, int array_of_indices[],                            \
       MPI_Status array_of_statuses[]),                                                                                \
      (incount, array_of_requests, outcount, array_of_indices, array_of_statuses))                                     \
    X(request_free, Request_free, (MPI_Request * request), (request))                                                  \
    X(cancel, Cancel, (MPI_Request * request), (request))                                                              \
    X(request_get_status, Request_get_status, (MPI_Request request, int* flag, MPI_Status* status),                    \
      (request, flag, status))

/// MPI 4's large-count forms (MPI_Send_c, ...) where mpi.h declares them. Not shims of their own
/// in the report: a call whose counts fit in int takes its int form's path (and is counted as
/// that call), a larger one goes to the library's _c form (counted as the int form's, passed as
/// too large). Their runtime members are in large_count.cpp.
#if MPI_VERSION >= 4
#define SHUNT_HAVE_LARGE_COUNT 1
#define SHUNT_MPI_LARGE_CALLS(X)                                                                                       \
    X(pack_c, Pack_c,                                                                                                  \
      (const void* inbuf, MPI_Count incount, MPI_Datatype datatype, void* outbuf, MPI_Count outsize,                   \
       MPI_Count* position, MPI_Comm comm),                                                                            \
      (inbuf, incount, datatype, outbuf, outsize, position, comm))                                                     \
    X(unpack_c, Unpack_c,                                                                                              \
      (const void* inbuf, MPI_Count insize, MPI_Count* position, void* outbuf, MPI_Count outcount,                     \
       MPI_Datatype datatype, MPI_Comm comm),                                                                          \
      (inbuf, insize, position, outbuf, outcount, datatype, comm))                                                     \
    X(pack_size_c, Pack_size_c, (MPI_Count incount, MPI_Datatype datatype, MPI_Comm comm, MPI_Count * size),           \
      (incount, datatype, comm, size))                                                                                 \
    X(send_c, Send_c, (const void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm),     \
      (buf, count, datatype, dest, tag, comm))                                                                         \
    X(ssend_c, Ssend_c, (const void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm),   \
      (buf, count, datatype, dest, tag, comm))                                                                         \
    X(rsend_c, Rsend_c, (const void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm),   \
      (buf, count, datatype, dest, tag, comm))                                                                         \
    X(bsend_c, Bsend_c, (const void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm),   \
      (buf, count, datatype, dest, tag, comm))                                                                         \
    X(isend_c, Isend_c,                                                                                                \
      (const void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,                      \
       MPI_Request* request),                                                                                          \
      (buf, count, datatype, dest, tag, comm, request))                                                                \
    X(issend_c, Issend_c,                                                                                              \
      (const void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,                      \
       MPI_Request* request),                                                                                          \
      (buf, count, datatype, dest, tag, comm, request))                                                                \
    X(irsend_c, Irsend_c,                                                                                              \
      (const void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,                      \
       MPI_Request* request),                                                                                          \
      (buf, count, datatype, dest, tag, comm, request))                                                                \
    X(ibsend_c, Ibsend_c,                                                                                              \
      (const void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,                      \
       MPI_Request* request),                                                                                          \
      (buf, count, datatype, dest, tag, comm, request))                                                                \
    X(send_init_c, Send_init_c,                                                                                        \
      (const void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,                      \
       MPI_Request* request),                                                                                          \
      (buf, count, datatype, dest, tag, comm, request))                                                                \
    X(ssend_init_c, Ssend_init_c,                                                                                      \
      (const void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,                      \
       MPI_Request* request),                                                                                          \
      (buf, count, datatype, dest, tag, comm, request))                                                                \
    X(rsend_init_c, Rsend_init_c,                                                                                      \
      (const void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,                      \
       MPI_Request* request),                                                                                          \
      (buf, count, datatype, dest, tag, comm, request))                                                                \
    X(bsend_init_c, Bsend_init_c,                                                                                      \
      (const void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,                      \
       MPI_Request* request),                                                                                          \
      (buf, count, datatype, dest, tag, comm, request))                                                                \
    X(recv_c, Recv_c,                                                                                                  \
      (void* buf, MPI_Count count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Status* status),     \
      (buf, count, datatype, source, tag, comm, status))                                                               \
    X(irecv_c, Irecv_c,                                                                                                \
      (void* buf, MPI_Count count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Request* request),   \
      (buf, count, datatype, source, tag, comm, request))                                                              \
    X(recv_init_c, Recv_init_c,                                                                                        \
      (void* buf, MPI_Count count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Request* request),   \
      (buf, count, datatype, source, tag, comm, request))                                                              \
    X(sendrecv_c, Sendrecv_c,                                                                                          \
      (const void* sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, int dest, int sendtag, void* recvbuf,          \
       MPI_Count recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Status* status),        \
      (sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag, comm, status))      \
    X(sendrecv_replace_c, Sendrecv_replace_c,                                                                          \
      (void* buf, MPI_Count count, MPI_Datatype datatype, int dest, int sendtag, int source, int recvtag,              \
       MPI_Comm comm, MPI_Status* status),                                                                             \
      (buf, count, datatype, dest, sendtag, source, recvtag, comm, status))                                            \
    X(mrecv_c, Mrecv_c, (void* buf, MPI_Count count, MPI_Datatype datatype, MPI_Message* message, MPI_Status* status), \
      (buf, count, datatype, message, status))                                                                         \
    X(imrecv_c, Imrecv_c,                                                                                              \
      (void* buf, MPI_Count count, MPI_Datatype datatype, MPI_Message* message, MPI_Request* request),                 \
      (buf, count, datatype, message, request))                                                                        \
    X(allreduce_c, Allreduce_c,                                                                                        \
      (const void* sendbuf, void* recvbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm),          \
      (sendbuf, recvbuf, count, datatype, op, comm))                                                                   \
    X(reduce_c, Reduce_c,                                                                                              \
      (const void* sendbuf, void* recvbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op, int root,                \
       MPI_Comm comm),                                                                                                 \
      (sendbuf, recvbuf, count, datatype, op, root, comm))                                                             \
    X(reduce_scatter_block_c, Reduce_scatter_block_c,                                                                  \
      (const void* sendbuf, void* recvbuf, MPI_Count recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm),      \
      (sendbuf, recvbuf, recvcount, datatype, op, comm))                                                               \
    X(reduce_scatter_c, Reduce_scatter_c,                                                                              \
      (const void* sendbuf, void* recvbuf, const MPI_Count recvcounts[], MPI_Datatype datatype, MPI_Op op,             \
       MPI_Comm comm),                                                                                                 \
      (sendbuf, recvbuf, recvcounts, datatype, op, comm))                                                              \
    X(allgather_c, Allgather_c,                                                                                        \
      (const void* sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void* recvbuf, MPI_Count recvcount,            \
       MPI_Datatype recvtype, MPI_Comm comm),                                                                          \
      (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm))                                              \
    X(allgatherv_c, Allgatherv_c,                                                                                      \
      (const void* sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void* recvbuf, const MPI_Count recvcounts[],   \
       const MPI_Aint displs[], MPI_Datatype recvtype, MPI_Comm comm),                                                 \
      (sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm))                                     \
    X(bcast_c, Bcast_c, (void* buffer, MPI_Count count, MPI_Datatype datatype, int root, MPI_Comm comm),               \
      (buffer, count, datatype, root, comm))                                                                           \
    X(alltoall_c, Alltoall_c,                                                                                          \
      (const void* sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void* recvbuf, MPI_Count recvcount,            \
       MPI_Datatype recvtype, MPI_Comm comm),                                                                          \
      (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm))                                              \
    X(alltoallv_c, Alltoallv_c,                                                                                        \
      (const void* sendbuf, const MPI_Count sendcounts[], const MPI_Aint sdispls[], MPI_Datatype sendtype,             \
       void* recvbuf, const MPI_Count recvcounts[], const MPI_Aint rdispls[], MPI_Datatype recvtype, MPI_Comm comm),   \
      (sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm))                          \
    X(iallreduce_c, Iallreduce_c,                                                                                      \
      (const void* sendbuf, void* recvbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,           \
       MPI_Request* request),                                                                                          \
      (sendbuf, recvbuf, count, datatype, op, comm, request))                                                          \
    X(ireduce_c, Ireduce_c,                                                                                            \
      (const void* sendbuf, void* recvbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm, \
       MPI_Request* request),                                                                                          \
      (sendbuf, recvbuf, count, datatype, op, root, comm, request))                                                    \
    X(ireduce_scatter_block_c, Ireduce_scatter_block_c,                                                                \
      (const void* sendbuf, void* recvbuf, MPI_Count recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,       \
       MPI_Request* request),                                                                                          \
      (sendbuf, recvbuf, recvcount, datatype, op, comm, request))                                                      \
    X(iallgather_c, Iallgather_c,                                                                                      \
      (const void* sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void* recvbuf, MPI_Count recvcount,            \
       MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request),                                                    \
      (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request))                                     \
    X(ibcast_c, Ibcast_c,                                                                                              \
      (void* buffer, MPI_Count count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request* request),           \
      (buffer, count, datatype, root, comm, request))                                                                  \
    X(ialltoall_c, Ialltoall_c,                                                                                        \
      (const void* sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void* recvbuf, MPI_Count recvcount,            \
       MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request),                                                    \
      (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request))                                     \
    X(allreduce_init_c, Allreduce_init_c,                                                                              \
      (const void* sendbuf, void* recvbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,           \
       MPI_Info info, MPI_Request* request),                                                                           \
      (sendbuf, recvbuf, count, datatype, op, comm, info, request))                                                    \
    X(reduce_init_c, Reduce_init_c,                                                                                    \
      (const void* sendbuf, void* recvbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm, \
       MPI_Info info, MPI_Request* request),                                                                           \
      (sendbuf, recvbuf, count, datatype, op, root, comm, info, request))                                              \
    X(reduce_scatter_block_init_c, Reduce_scatter_block_init_c,                                                        \
      (const void* sendbuf, void* recvbuf, MPI_Count recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,       \
       MPI_Info info, MPI_Request* request),                                                                           \
      (sendbuf, recvbuf, recvcount, datatype, op, comm, info, request))                                                \
    X(allgather_init_c, Allgather_init_c,                                                                              \
      (const void* sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void* recvbuf, MPI_Count recvcount,            \
       MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request* request),                                     \
      (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, info, request))                               \
    X(bcast_init_c, Bcast_init_c,                                                                                      \
      (void* buffer, MPI_Count count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Info info,                   \
       MPI_Request* request),                                                                                          \
      (buffer, count, datatype, root, comm, info, request))                                                            \
    X(alltoall_init_c, Alltoall_init_c,                                                                                \
      (const void* sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void* recvbuf, MPI_Count recvcount,            \
       MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request* request),                                     \
      (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, info, request))
#else
#define SHUNT_HAVE_LARGE_COUNT 0
#define SHUNT_MPI_LARGE_CALLS(X)
#endif

/// Every intercepted function, in report order.
#define SHUNT_MPI_CALLS(X)   \
    SHUNT_MPI_SETUP_CALLS(X) \
    SHUNT_MPI_COLL_CALLS(X)  \
    SHUNT_MPI_NBC_CALLS(X) SHUNT_MPI_PERSISTENT_CALLS(X) SHUNT_MPI_FUSED_CALLS(X) SHUNT_MPI_P2P_CALLS(X)
