// include/shunt/compress/control_calls.hpp: the calls the MPI and NCCL header APIs of compression (control.hpp, control_nccl.hpp) make of libshunt.so's entry, once for both communicator kinds.
#pragma once

#include <shunt/errors.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shunt::compress::detail {

/// set_consent() through entry `f` (nullptr: no libshunt.so): false without it or with shunt
/// disabled; throws shunt::error for a consent it does not accept.
template <class Fn, class Comm>
bool set_consent_with(Fn f, Comm comm, std::string_view consent) {
    if (f == nullptr) return false;
    const std::string text(consent);
    const int rc = f(1, comm, text.c_str(), nullptr, nullptr);
    if (rc == -2) return false;
    if (rc < 0)
        throw error("compress::set_consent: \"" + text + "\" is not off, auto, default or a list of compressors");
    return true;
}

/// save_feedback() through entry `f`: asks with a buffer grown to the size the entry says it
/// needs (it answers 1 while the room is short); empty without libshunt.so or on failure.
template <class Fn, class Comm>
std::vector<std::byte> save_with(Fn f, Comm comm) {
    if (f == nullptr) return {};
    std::vector<std::byte> out;
    for (int tries = 0; tries < 4; ++tries) {
        std::size_t size = out.size();
        const int rc = f(3, comm, nullptr, out.data(), &size);
        if (rc == 0) {
            out.resize(size);
            return out;
        }
        if (rc != 1) return {};
        out.resize(size);
    }
    return {};
}

/// restore_feedback() through entry `f`: false without libshunt.so or for bytes it does not read.
template <class Fn, class Comm>
bool restore_with(Fn f, Comm comm, std::span<const std::byte> bytes) {
    if (f == nullptr) return false;
    std::size_t size = bytes.size();
    return f(4, comm, nullptr, const_cast<std::byte*>(bytes.data()), &size) == 0;
}

}  // namespace shunt::compress::detail
