// interpose/text.hpp: small text helpers for the preload library's messages: MPI handles and bounded formatting.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <string>
#include <type_traits>

namespace shunt::detail {

/// An MPI handle for messages: a pointer (Open MPI) or an integer (MPICH).
template <class Handle>
std::string handle_text(Handle h) {
    char buf[32];
    if constexpr (std::is_pointer_v<Handle>)
        std::snprintf(buf, sizeof buf, "%p", static_cast<const void*>(h));
    else
        std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(static_cast<unsigned>(h)));
    return buf;
}

/// printf-style text of at most 255 characters.
template <class... Args>
std::string format_text(const char* fmt, Args... args) {
    char buf[256];
    const int n = std::snprintf(buf, sizeof buf, fmt, args...);
    return std::string(buf, n < 0 ? 0 : std::min<std::size_t>(static_cast<std::size_t>(n), sizeof buf - 1));
}

}  // namespace shunt::detail
