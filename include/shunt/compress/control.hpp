// shunt/compress/control.hpp: the header API's switches of the preload library's gradient compression: consent per communicator or per call site, and a communicator's error feedback saved and restored for checkpoints. Without libshunt.so in the process they change nothing and say so.
#pragma once

#include <shunt/compress/control_calls.hpp>
#include <shunt/errors.hpp>

#include <mpi.h>

#include <dlfcn.h>

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shunt::compress {

namespace detail {

/// libshunt.so's entry, shunt_compress_control(what, comm, text, data, bytes): 0 the interface's
/// version, 1 a communicator's consent, 2 the calling thread's, 3 save, 4 restore; returns a
/// negative number for bad arguments (-2: shunt is disabled).
using control_fn = int (*)(int what, MPI_Comm comm, const char* text, void* data, std::size_t* bytes) noexcept;

/// The preload library's entry, found once in the process (nullptr without libshunt.so).
inline control_fn control() noexcept {
    static const control_fn f = reinterpret_cast<control_fn>(dlsym(RTLD_DEFAULT, "shunt_compress_control"));
    return f;
}

}  // namespace detail

/// True when libshunt.so is loaded into the process and running (not SHUNT_DISABLE).
inline bool preloaded() noexcept {
    const detail::control_fn f = detail::control();
    return f != nullptr && f(0, MPI_COMM_NULL, nullptr, nullptr, nullptr) >= 1;
}

/// Sets which compressors the preload library may use for the reductions on `comm`, overriding
/// SHUNT_COMPRESS for it: "off", "auto", a list such as "fp16,int8", or "default" (the
/// environment's again). Lossy compression is then consented for this communicator only.
/// Contract across ranks: every rank of comm sets the same consent before the same call on comm
/// (the consent is part of what the ranks must agree on). Not collective, not blocking;
/// thread-safe. Returns false without libshunt.so; throws shunt::error for a consent it does not
/// accept.
inline bool set_consent(MPI_Comm comm, std::string_view consent) {
    return detail::set_consent_with(detail::control(), comm, consent);
}

/// Per call site: while it lives, the calling thread's reductions (on every communicator) use
/// `consent` (as set_consent), above the communicator's and the environment's. Every rank must
/// open the same scope around the same calls. Nests (the inner scope wins; the outer one is back
/// after it).
class scoped_consent {
public:
    explicit scoped_consent(std::string_view consent) : text_(consent) { apply(text_.c_str()); }
    ~scoped_consent() { apply(nullptr); }
    scoped_consent(const scoped_consent&) = delete;
    scoped_consent& operator=(const scoped_consent&) = delete;

private:
    void apply(const char* text) {
        const detail::control_fn f = detail::control();
        if (f == nullptr) return;
        if (text != nullptr) {
            previous_ = current();
            if (f(2, MPI_COMM_NULL, text, nullptr, nullptr) == -1)
                throw error("compress::scoped_consent: \"" + text_ + "\" is not off, auto or a list of compressors");
            current() = text_;
        } else {
            f(2, MPI_COMM_NULL, previous_ ? previous_->c_str() : nullptr, nullptr, nullptr);
            current() = previous_;
        }
    }
    static std::optional<std::string>& current() {
        static thread_local std::optional<std::string> c;
        return c;
    }
    std::string text_;
    std::optional<std::string> previous_;
};

/// This rank's error feedback on `comm` (every call site's residuals and step) as bytes, for a
/// checkpoint; empty without libshunt.so. Not collective; call it between calls on comm.
inline std::vector<std::byte> save_feedback(MPI_Comm comm) { return detail::save_with(detail::control(), comm); }

/// Restores what save_feedback() wrote on this rank (the same communicator shape and pattern of
/// calls): into the current plan at once, else at the next plan. Returns false without
/// libshunt.so or for bytes it does not read (the state is then unchanged). Not collective.
inline bool restore_feedback(MPI_Comm comm, std::span<const std::byte> bytes) {
    return detail::restore_with(detail::control(), comm, bytes);
}

}  // namespace shunt::compress
