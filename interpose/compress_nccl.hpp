// interpose/compress_nccl.hpp: ncclAllReduce under gradient compression (compress_nccl.cpp, built with NCCL): the function nccl.cpp's ncclAllReduce asks first, and the one its communicator teardown calls.
#pragma once

#include <nccl.h>

#include <cstddef>

namespace shunt::detail {

class runtime;
struct nccl_real;

/// Runs one ncclAllReduce compressed when the consent (SHUNT_COMPRESS, or the header API's for
/// the calling thread's scope or the communicator), the call (a sum of ncclFloat32, ncclFloat16 or
/// ncclBfloat16) and the communicator's plan allow it:
/// true with NCCL's result in `result`; false when the call is to run as without compression
/// (it then must, on every rank alike: the decision rests on what every rank knows alike). The
/// compressed form travels through NCCL's own collectives on `stream`: ncclAllReduce or
/// ncclAllGather, grouped ncclSend/ncclRecv (alltoall+allgather), and for the hierarchical
/// schemes ncclReduceScatter and ncclAllGather on the node communicator (nccl_executor's). Call
/// only outside a group and graph capture, on a blocking communicator that is not one of
/// ncclCommInitAll's. Thread-safe (a lock per communicator).
bool nccl_compressed_all_reduce(runtime& rt, const nccl_real& real, const void* sendbuff, void* recvbuff,
                                std::size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream, ncclResult_t& result) noexcept;

/// The header API's entry for NCCL communicators (shunt_compress_control_nccl): `what` 0 the
/// interface's version, 1 the communicator's consent (`text`), 3 save its error feedback into
/// `data` (*bytes: the room, then the size; 1 when the room is short), 4 restore it (now into the
/// plan, else at the next plan). Returns 0, or -1 for bad arguments. Thread-safe; not collective.
int nccl_compression_control(runtime& rt, int what, ncclComm_t comm, const char* text, void* data,
                             std::size_t* bytes) noexcept;

/// Forgets what the compression path keeps of `comm` (its communicator is being destroyed).
void nccl_compression_forget(ncclComm_t comm) noexcept;

}  // namespace shunt::detail
