// interpose/shims.cpp: the exported MPI_* shims, one per entry of mpi_calls.hpp (large-count forms included): a kept repeat's fast path, re-entry guard, SHUNT_DISABLE, then the runtime.
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

// The guarded path of a shim: the re-entry guard, SHUNT_DISABLE, a kept collective while shunt's
// schedules are in flight, then the runtime. Out of line, so that the unguarded fast path needs no
// frame.
#define SHUNT_GUARDED_(name, Name, params, args)                                                   \
    [[gnu::noinline]] static int guarded_##name params {                                           \
        const reentry_guard guard;                                                                 \
        runtime* rt = active(guard);                                                               \
        if constexpr (fast_path<shim::name>::any) {                                                \
            if (rt != nullptr && fast_path<shim::name>{*rt}.guarded args) return PMPI_##Name args; \
        }                                                                                          \
        return rt != nullptr ? rt->name args : PMPI_##Name args;                                   \
    }
SHUNT_MPI_CALLS(SHUNT_GUARDED_)
#undef SHUNT_GUARDED_

// A call with a fast path (fast_path.hpp) that repeats a kept one goes to the library from here,
// before the guard, as a tail call.
#define SHUNT_SHIM_(name, Name, params, args)                                   \
    SHUNT_EXPORT int MPI_##Name params {                                        \
        if constexpr (fast_path<shim::name>::any) {                             \
            if (fast_path<shim::name>::unguarded args) return PMPI_##Name args; \
        }                                                                       \
        return guarded_##name args;                                             \
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
