// interpose/shims.cpp: the exported MPI_* shims, one per entry of mpi_calls.hpp (large-count forms included): re-entry guard, SHUNT_DISABLE, a kept repeat's fast path, then the runtime.
//
// The shims cannot carry `noexcept`: mpi.h declares these functions without an exception
// specification and GCC 12 rejects a redeclaration that differs. They are noexcept in effect:
// each body calls only the library and runtime members, which are all noexcept.
#include "export.hpp"
#include "fast_path.hpp"
#include "mpi_calls.hpp"
#include "runtime.hpp"

#include <mpi.h>

using shunt::detail::fast_path;
using shunt::detail::reentry_guard;
using shunt::detail::runtime;
using shunt::detail::shim;

namespace {

/// The runtime when this call is the thread's outermost shim and shunt is enabled, else nullptr.
runtime* active(const reentry_guard& guard) noexcept { return guard.outermost() ? runtime::instance() : nullptr; }

}  // namespace

extern "C" {

// A call with a fast path (fast_path.hpp) that repeats a kept one goes to the library from here.
#define SHUNT_SHIM_(name, Name, params, args)                                          \
    SHUNT_EXPORT int MPI_##Name params {                                               \
        const reentry_guard guard;                                                     \
        runtime* rt = active(guard);                                                   \
        if (rt != nullptr && fast_path<shim::name>{*rt} args) return PMPI_##Name args; \
        return rt != nullptr ? rt->name args : PMPI_##Name args;                       \
    }
SHUNT_MPI_CALLS(SHUNT_SHIM_)
#undef SHUNT_SHIM_
#define SHUNT_LARGE_SHIM_(name, Name, params, args)              \
    SHUNT_EXPORT int MPI_##Name params {                         \
        const reentry_guard guard;                               \
        runtime* rt = active(guard);                             \
        return rt != nullptr ? rt->name args : PMPI_##Name args; \
    }
SHUNT_MPI_LARGE_CALLS(SHUNT_LARGE_SHIM_)
#undef SHUNT_LARGE_SHIM_

}  // extern "C"
