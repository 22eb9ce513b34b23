// shunt/compress/control_nccl.hpp: the header API's switches of the preload library's gradient compression for NCCL communicators: consent per communicator and error feedback saved and restored for checkpoints (control.hpp's, for ncclComm_t). Without libshunt.so in the process, or in one built without NCCL, they change nothing and say so.
#pragma once

#include <shunt/compress/control_calls.hpp>
#include <shunt/errors.hpp>

#include <nccl.h>

#include <dlfcn.h>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shunt::compress {

namespace detail {

/// libshunt.so's entry, shunt_compress_control_nccl(what, comm, text, data, bytes): 0 the
/// interface's version, 1 a communicator's consent, 3 save, 4 restore; a negative number for bad
/// arguments (-2: shunt is disabled).
using nccl_control_fn = int (*)(int what, ncclComm_t comm, const char* text, void* data, std::size_t* bytes) noexcept;

/// The preload library's entry, found once in the process (nullptr without libshunt.so or NCCL).
inline nccl_control_fn nccl_control() noexcept {
    static const nccl_control_fn f =
        reinterpret_cast<nccl_control_fn>(dlsym(RTLD_DEFAULT, "shunt_compress_control_nccl"));
    return f;
}

}  // namespace detail

/// Sets which compressors the preload library may use for the ncclAllReduce sums on `comm`,
/// overriding SHUNT_COMPRESS for it: "off", "auto", a list such as "int8,int4", or "default" (the
/// environment's again). A scoped_consent (control.hpp) of the calling thread still wins.
/// Contract across ranks: every rank of comm sets the same consent before the same call on comm.
/// Not collective, not blocking; thread-safe. Returns false without libshunt.so (or one built
/// without NCCL); throws shunt::error for a consent it does not accept.
inline bool set_consent(ncclComm_t comm, std::string_view consent) {
    return detail::set_consent_with(detail::nccl_control(), comm, consent);
}

/// This rank's error feedback on `comm` (every call site's residuals and step) as bytes, in the
/// format of the MPI version; empty without libshunt.so. Not collective; call it between calls on
/// comm (device residuals are copied to the host, waiting for the work queued before).
inline std::vector<std::byte> save_feedback(ncclComm_t comm) { return detail::save_with(detail::nccl_control(), comm); }

/// Restores what save_feedback() wrote on this rank (the same communicator size and pattern of
/// calls): into the current plan at once, else at the next plan. Returns false without
/// libshunt.so or for bytes it does not read (the state is then unchanged). Not collective.
inline bool restore_feedback(ncclComm_t comm, std::span<const std::byte> bytes) {
    return detail::restore_with(detail::nccl_control(), comm, bytes);
}

}  // namespace shunt::compress
