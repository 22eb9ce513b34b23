// interpose/nccl_calls.hpp: the one list of intercepted NCCL functions: the shim enum, its names, the exported shims, the real functions and the executor's entry points come from it.
#pragma once

#include <nccl.h>

// Functions of newer NCCL headers, listed where the header declares them.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 23, 0)
#define SHUNT_NCCL_SCALABLE_(X)                                                                             \
    X(comm_init_rank_scalable, CommInitRankScalable,                                                        \
      (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config), \
      (newcomm, nranks, myrank, nId, commIds, config))
#else
#define SHUNT_NCCL_SCALABLE_(X)
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
#define SHUNT_NCCL_SHRINK_(X)                                                                                    \
    X(comm_shrink, CommShrink,                                                                                   \
      (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config, \
       int shrinkFlags),                                                                                         \
      (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags))
#else
#define SHUNT_NCCL_SHRINK_(X)
#endif

/// X(name, Name, (parameters), (arguments)) per intercepted function ncclName, with the
/// parameters of nccl.h's prototype. `name` is the shim enumerator and the nccl_executor member
/// the shim calls. Where the process's NCCL lacks one (ncclCommInitRankScalable before NCCL 2.23,
/// ncclCommShrink before 2.27), the shim answers with an error and one warning (nccl_missing).
#define SHUNT_NCCL_CALLS(X)                                                                                          \
    X(all_reduce, AllReduce,                                                                                         \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, \
       cudaStream_t stream),                                                                                         \
      (sendbuff, recvbuff, count, datatype, op, comm, stream))                                                       \
    X(reduce_scatter, ReduceScatter,                                                                                 \
      (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,              \
       ncclComm_t comm, cudaStream_t stream),                                                                        \
      (sendbuff, recvbuff, recvcount, datatype, op, comm, stream))                                                   \
    X(all_gather, AllGather,                                                                                         \
      (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,             \
       cudaStream_t stream),                                                                                         \
      (sendbuff, recvbuff, sendcount, datatype, comm, stream))                                                       \
    X(broadcast, Broadcast,                                                                                          \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,       \
       cudaStream_t stream),                                                                                         \
      (sendbuff, recvbuff, count, datatype, root, comm, stream))                                                     \
    X(bcast, Bcast,                                                                                                  \
      (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream),           \
      (buff, count, datatype, root, comm, stream))                                                                   \
    X(reduce, Reduce,                                                                                                \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,        \
       ncclComm_t comm, cudaStream_t stream),                                                                        \
      (sendbuff, recvbuff, count, datatype, op, root, comm, stream))                                                 \
    X(send, Send,                                                                                                    \
      (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream), \
      (sendbuff, count, datatype, peer, comm, stream))                                                               \
    X(recv, Recv,                                                                                                    \
      (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream),       \
      (recvbuff, count, datatype, peer, comm, stream))                                                               \
    X(group_start, GroupStart, (), ())                                                                               \
    X(group_end, GroupEnd, (), ())                                                                                   \
    X(comm_init_rank, CommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank),                  \
      (comm, nranks, commId, rank))                                                                                  \
    X(comm_init_rank_config, CommInitRankConfig,                                                                     \
      (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config),                          \
      (comm, nranks, commId, rank, config))                                                                          \
    SHUNT_NCCL_SCALABLE_(X)                                                                                          \
    X(comm_init_all, CommInitAll, (ncclComm_t * comm, int ndev, const int* devlist), (comm, ndev, devlist))          \
    X(comm_split, CommSplit, (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config),       \
      (comm, color, key, newcomm, config))                                                                           \
    SHUNT_NCCL_SHRINK_(X)                                                                                            \
    X(comm_finalize, CommFinalize, (ncclComm_t comm), (comm))                                                        \
    X(comm_destroy, CommDestroy, (ncclComm_t comm), (comm))                                                          \
    X(comm_abort, CommAbort, (ncclComm_t comm), (comm))

/// NCCL functions shunt calls but does not intercept (resolved with the others).
#define SHUNT_NCCL_HELPERS(X)                                                         \
    X(comm_count, CommCount, (const ncclComm_t comm, int* count), (comm, count))      \
    X(comm_user_rank, CommUserRank, (const ncclComm_t comm, int* rank), (comm, rank)) \
    X(mem_alloc, MemAlloc, (void** ptr, size_t size), (ptr, size))                    \
    X(mem_free, MemFree, (void* ptr), (ptr))                                          \
    X(get_error_string, GetErrorString, (ncclResult_t result), (result))
