// interpose/nccl_shims.cpp: the exported nccl* shims, one per entry of nccl_calls.hpp: re-entry guard, SHUNT_DISABLE, then the NCCL executor; no logic here.
#include "export.hpp"
#include "nccl.hpp"
#include "nccl_calls.hpp"
#include "runtime.hpp"

#include <nccl.h>

using shunt::detail::nccl_executor;
using shunt::detail::nccl_real;
using shunt::detail::nccl_shim;
using shunt::detail::reentry_guard;
using shunt::detail::runtime;

namespace {

/// The NCCL executor when this call is the thread's outermost shim and shunt is enabled, else
/// nullptr: the call goes to NCCL itself (through the real function).
nccl_executor* active(const reentry_guard& guard) noexcept {
    runtime* rt = guard.outermost() ? runtime::instance() : nullptr;
    return rt != nullptr ? rt->nccl() : nullptr;
}

}  // namespace

extern "C" {

// No `noexcept`: nccl.h declares these without one (see shims.cpp); they are noexcept in effect. A
// function the process's NCCL lacks never reaches the executor (nccl_missing answers).
#define SHUNT_NCCL_SHIM_(name, Name, params, args)                                \
    SHUNT_EXPORT ncclResult_t nccl##Name params {                                 \
        const reentry_guard guard;                                                \
        const auto real = nccl_real::get().name;                                  \
        if (real == nullptr) return shunt::detail::nccl_missing(nccl_shim::name); \
        if (nccl_executor* e = active(guard)) return e->name args;                \
        return real args;                                                         \
    }
SHUNT_NCCL_CALLS(SHUNT_NCCL_SHIM_)
#undef SHUNT_NCCL_SHIM_

}  // extern "C"
