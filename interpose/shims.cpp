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

}  // extern "C"
