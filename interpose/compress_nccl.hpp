// interpose/compress_nccl.hpp: ncclAllReduce under gradient compression (compress_nccl.cpp, built with NCCL): the function nccl.cpp's ncclAllReduce asks first, and the one its communicator teardown calls.
#pragma once

#include <nccl.h>

#include <cstddef>

namespace shunt::detail {

class runtime;
struct nccl_real;

/// Runs one ncclAllReduce compressed when the consent (SHUNT_COMPRESS, or the calling thread's
/// scope from the header API), the call (a float32 sum) and the communicator's plan allow it:
/// true with NCCL's result in `result`; false when the call is to run as without compression
/// (it then must, on every rank alike: the decision rests on what every rank knows alike). The
/// compressed form travels through NCCL's own ncclAllReduce or ncclAllGather on `stream`. Call
/// only outside a group and graph capture, on a blocking communicator that is not one of
/// ncclCommInitAll's. Thread-safe (a lock per communicator).
bool nccl_compressed_all_reduce(runtime& rt, const nccl_real& real, const void* sendbuff, void* recvbuff,
                                std::size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream, ncclResult_t& result) noexcept;

/// Forgets what the compression path keeps of `comm` (its communicator is being destroyed).
void nccl_compression_forget(ncclComm_t comm) noexcept;

}  // namespace shunt::detail
