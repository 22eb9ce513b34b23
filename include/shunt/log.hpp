// shunt/log.hpp: shunt's logging: levels and categories chosen by SHUNT_LOG, printf-style, one write() per message.
#pragma once

#include <shunt/config.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <unistd.h>

#if defined(__GNUC__)
#define SHUNT_PRINTF_LIKE(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define SHUNT_PRINTF_LIKE(fmt, args)
#endif

namespace shunt {
namespace detail {

/// Process-wide logging state. Never calls MPI: the runtime hands over the rank.
struct log_globals {
    std::atomic<int> rank{-1};  ///< world rank, -1 until known
    std::atomic<int> fd{-1};  ///< where messages go, -1 until first use
    std::atomic<bool> config_warned{false};
    std::atomic<bool> config_echoed{false};
};

inline log_globals& log_state() noexcept {
    static log_globals g;  // trivially destructible members: safe to use during exit
    return g;
}

/// Writes all of [p, p + n) to fd, retrying on EINTR; keeps errno as it was.
inline void write_fully(int fd, const char* p, std::size_t n) noexcept {
    const int saved = errno;
    while (n > 0) {
        const ssize_t w = ::write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        p += w, n -= static_cast<std::size_t>(w);
    }
    errno = saved;
}

/// One message as written: every line starts with `shunt[rank R]: ` (or `shunt[pid P]: ` before
/// the rank is known); the first also names the level (for warnings and errors) and category.
inline std::string format_log_text(int rank, log_level level, log_category category, std::string_view message) {
    char prefix[48];
    if (rank >= 0)
        std::snprintf(prefix, sizeof prefix, "shunt[rank %d]: ", rank);
    else
        std::snprintf(prefix, sizeof prefix, "shunt[pid %ld]: ", static_cast<long>(::getpid()));
    std::string out = prefix;
    if (level == log_level::error) out += "error: ";
    if (level == log_level::warn) out += "warning: ";
    out += log_category_names[static_cast<std::size_t>(category)];
    out += ": ";
    while (!message.empty() && message.back() == '\n') message.remove_suffix(1);
    for (char c : message) {
        out += c;
        if (c == '\n') out += prefix;
    }
    out += '\n';
    return out;
}

/// The descriptor messages go to: SHUNT_LOG_FILE opened for append, else stderr.
inline int log_fd() noexcept {
    log_globals& g = log_state();
    int fd = g.fd.load(std::memory_order_acquire);
    if (fd >= 0) return fd;
    fd = STDERR_FILENO;
    const char* failure = nullptr;
    std::string path;
    try {
        path = config().log_file;
    } catch (...) {
        failure = "out of memory";
    }
    if (!path.empty()) {
        const int saved = errno;
        const int opened = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (opened >= 0)
            fd = opened;
        else
            failure = std::strerror(errno);
        errno = saved;
    }
    int expected = -1;
    if (!g.fd.compare_exchange_strong(expected, fd)) {  // another thread won: use its descriptor
        if (fd != STDERR_FILENO) ::close(fd);
        return expected;
    }
    if (failure != nullptr) {
        try {
            const std::string text =
                format_log_text(g.rank.load(std::memory_order_relaxed), log_level::warn, log_category::config,
                                "cannot open SHUNT_LOG_FILE=" + path + " (" + failure + "); logging to stderr");
            write_fully(STDERR_FILENO, text.data(), text.size());
        } catch (...) {}
    }
    return fd;
}

/// Writes one message unconditionally (the caller has checked the level). Never throws.
inline void vlog_write(log_level level, log_category category, const char* format, va_list args) noexcept {
    try {
        char small[512];
        va_list copy;
        va_copy(copy, args);
        const int n = std::vsnprintf(small, sizeof small, format, copy);
        va_end(copy);
        if (n < 0) return;
        std::string message;
        if (static_cast<std::size_t>(n) < sizeof small) {
            message.assign(small, static_cast<std::size_t>(n));
        } else {
            message.resize(static_cast<std::size_t>(n) + 1);
            std::vsnprintf(message.data(), message.size(), format, args);
            message.pop_back();
        }
        const std::string text =
            format_log_text(log_state().rank.load(std::memory_order_relaxed), level, category, message);
        write_fully(log_fd(), text.data(), text.size());
    } catch (...) {
        // Out of memory while logging: the message is dropped, the program goes on.
    }
}

inline void log_write(log_level level, log_category category, const char* format, ...) noexcept SHUNT_PRINTF_LIKE(3, 4);
inline void log_write(log_level level, log_category category, const char* format, ...) noexcept {
    va_list args;
    va_start(args, format);
    vlog_write(level, category, format, args);
    va_end(args);
}

}  // namespace detail

/// True when a message of `level` in `category` would be written under SHUNT_LOG. Thread-safe.
inline bool log_enabled(log_level level, log_category category) noexcept {
    try {
        return config().log.enabled(level, category);
    } catch (...) {
        return false;
    }
}

/// Writes a printf-style message when SHUNT_LOG enables `level` for `category`: one write()
/// to stderr (or SHUNT_LOG_FILE), prefixed `shunt[rank R]: `. Never calls MPI; never throws;
/// keeps errno. Thread-safe; messages from several threads never interleave within a line.
/// (Not named `log`: inside namespace shunt that would hide ::log from <cmath>.)
inline void log_printf(log_level level, log_category category, const char* format, ...) noexcept
    SHUNT_PRINTF_LIKE(3, 4);
inline void log_printf(log_level level, log_category category, const char* format, ...) noexcept {
    if (!log_enabled(level, category)) return;
    va_list args;
    va_start(args, format);
    detail::vlog_write(level, category, format, args);
    va_end(args);
}

#define SHUNT_LOG_AT_LEVEL_(fn, level)                                                               \
    inline void fn(log_category category, const char* format, ...) noexcept SHUNT_PRINTF_LIKE(2, 3); \
    inline void fn(log_category category, const char* format, ...) noexcept {                        \
        if (!log_enabled(level, category)) return;                                                   \
        va_list args;                                                                                \
        va_start(args, format);                                                                      \
        detail::vlog_write(level, category, format, args);                                           \
        va_end(args);                                                                                \
    }
/// log_printf at a fixed level: log_error(category, format, ...), log_warn, log_info, log_debug, log_trace.
SHUNT_LOG_AT_LEVEL_(log_error, log_level::error)
SHUNT_LOG_AT_LEVEL_(log_warn, log_level::warn)
SHUNT_LOG_AT_LEVEL_(log_info, log_level::info)
SHUNT_LOG_AT_LEVEL_(log_debug, log_level::debug)
SHUNT_LOG_AT_LEVEL_(log_trace, log_level::trace)
#undef SHUNT_LOG_AT_LEVEL_

/// Records the world rank shown in message prefixes and used to pick who writes once-per-job
/// messages. Called by the runtime after MPI is initialised (it asks PMPI_Comm_rank once).
inline void set_log_rank(int rank) noexcept { detail::log_state().rank.store(rank, std::memory_order_relaxed); }

/// The recorded world rank, -1 while unknown.
inline int log_rank() noexcept { return detail::log_state().rank.load(std::memory_order_relaxed); }

/// Writes the configuration warnings (bad values, unknown SHUNT_* names) once per process, and
/// only on world rank 0 once the rank is known (any process while it is unknown: tools).
inline void log_config_warnings() noexcept {
    const int rank = log_rank();
    if (rank > 0 || detail::log_state().config_warned.exchange(true)) return;
    if (!log_enabled(log_level::warn, log_category::config)) return;
    try {
        for (const std::string& w : config_state().warnings)
            detail::log_write(log_level::warn, log_category::config, "%s", w.c_str());
    } catch (...) {}
}

/// When logging is on (SHUNT_LOG above warn anywhere), writes the effective value of every
/// SHUNT_* variable once, on world rank 0 (any process while the rank is unknown).
inline void log_config_echo() noexcept {
    const int rank = log_rank();
    if (rank > 0 || detail::log_state().config_echoed.exchange(true)) return;
    try {
        const config_snapshot& c = config_state();
        if (!c.values.log.verbose()) return;
        std::string text = "effective configuration:";
        for (std::size_t i = 0; i < config_variable_count; ++i) {
            const config_variable& v = config_variables[i];
            text += "\n  ";
            const std::string value = v.format(c.values);
            text += v.name;
            if (value.empty()) {
                text += " unset";
            } else {
                text += '=';
                text += value;
            }
            text += !c.raw[i] || c.raw[i]->empty() ? " (default)"
                    : c.rejected[i]                ? " (default: the value set was rejected)"
                                                   : " (set)";
        }
        detail::log_write(log_level::info, log_category::config, "%s", text.c_str());
    } catch (...) {}
}

}  // namespace shunt
