// shunt/config.hpp: the one registry of SHUNT_* environment variables, parsed strictly, once.
#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <unistd.h>  // environ

namespace shunt {

/// Severity of a log message; a message is written when its level is at or below the
/// threshold SHUNT_LOG sets for its category. `off` as a threshold silences everything.
enum class log_level : std::uint8_t { off, error, warn, info, debug, trace };

/// The subsystem a log message comes from, selectable by name in SHUNT_LOG. A new category is
/// one enumerator here and its name in log_category_names, at the same position.
enum class log_category : std::uint8_t { config, init, type, pack, decide, report };

inline constexpr std::array<std::string_view, 6> log_level_names = {"off", "error", "warn", "info", "debug", "trace"};
inline constexpr std::array<std::string_view, 6> log_category_names = {"config", "init",   "type",
                                                                       "pack",   "decide", "report"};
inline constexpr std::size_t log_category_count = log_category_names.size();
static_assert(static_cast<std::size_t>(log_category::report) + 1 == log_category_count,
              "every log_category needs a name");

/// What SHUNT_LOG selects: a level threshold per category.
struct log_spec {
    std::array<log_level, log_category_count> threshold{};

    /// A spec with the same threshold for every category.
    static constexpr log_spec all(log_level level) {
        log_spec s;
        s.threshold.fill(level);
        return s;
    }
    /// True when a message of `level` in `category` is written.
    constexpr bool enabled(log_level level, log_category category) const noexcept {
        return level != log_level::off && level <= threshold[static_cast<std::size_t>(category)];
    }
    /// True when any category is above the default (warn): "logging is on".
    constexpr bool verbose() const noexcept {
        for (log_level l : threshold)
            if (l > log_level::warn) return true;
        return false;
    }
    bool operator==(const log_spec&) const = default;
};

/// SHUNT_REPORT: what shunt prints at MPI_Finalize.
enum class report_mode : std::uint8_t { off, rank, summary };

/// SHUNT_PACK: who packs non-contiguous data (MPI_Pack / MPI_Unpack, point-to-point), and how
/// device buffers move: `device`, `one_shot` and `staged` force a method for device buffers
/// (host buffers then go by the cost model, as with `automatic`). `model` is `automatic`
/// without measuring the first calls of each MPI_Pack/MPI_Unpack layout (shunt::planner).
enum class pack_choice : std::uint8_t { automatic, library, host, device, one_shot, staged, model };

/// SHUNT_COLL: who runs the collectives shunt intercepts. `measure` is `automatic` with
/// floating-point reductions measured in the run too (their bits then may differ run to run).
enum class coll_choice : std::uint8_t { automatic, library, shunt, measure };

/// SHUNT_NCCL: who runs the NCCL collectives shunt intercepts. `auto` takes shunt's hierarchical
/// schedule only where measured nccl.* tables say it is faster (shunt/plan/nccl.hpp).
enum class nccl_choice : std::uint8_t { automatic, library, shunt };

/// SHUNT_COMPRESS (or the header API, per communicator or call site): whether float SUM
/// reductions may be compressed, and with which compressors. `methods` has bit m for
/// compress::method m (compress_method_names' order); `on` false is off whatever the bits.
struct compress_consent {
    bool on = false;
    std::uint8_t methods = 0;
    bool operator==(const compress_consent&) const = default;
};

/// The compressors' names in compress::method's order (plan/compress.hpp checks the two agree).
inline constexpr std::array<std::string_view, 7> compress_method_names = {"fp16",    "bf16", "int8", "int4",
                                                                          "randomk", "topk", "sign"};
/// The methods `auto` allows: FP16, BF16 and INT8, whose error needs no tuning (the others must be
/// listed by name).
inline constexpr std::uint8_t compress_auto_methods = 0b0000111;

namespace detail {

/// ASCII lower-case; the registry's keywords are matched case-insensitively.
constexpr char to_lower(char c) noexcept { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

constexpr bool iequals(std::string_view a, std::string_view b) noexcept {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (to_lower(a[i]) != to_lower(b[i])) return false;
    return true;
}

/// The names of an enumeration's values, in the order its text accepts them. Specialised next
/// to each enumeration used by a choice_kind.
template <class E>
struct choice_names;

template <>
struct choice_names<report_mode> {
    static constexpr std::array<std::pair<std::string_view, report_mode>, 3> values = {
        {{"off", report_mode::off}, {"rank", report_mode::rank}, {"summary", report_mode::summary}}};
};

template <>
struct choice_names<pack_choice> {
    static constexpr std::array<std::pair<std::string_view, pack_choice>, 7> values = {
        {{"auto", pack_choice::automatic},
         {"library", pack_choice::library},
         {"host", pack_choice::host},
         {"device", pack_choice::device},
         {"one-shot", pack_choice::one_shot},
         {"staged", pack_choice::staged},
         {"model", pack_choice::model}}};
};

template <>
struct choice_names<nccl_choice> {
    static constexpr std::array<std::pair<std::string_view, nccl_choice>, 3> values = {
        {{"auto", nccl_choice::automatic}, {"library", nccl_choice::library}, {"shunt", nccl_choice::shunt}}};
};

template <>
struct choice_names<coll_choice> {
    static constexpr std::array<std::pair<std::string_view, coll_choice>, 4> values = {
        {{"auto", coll_choice::automatic},
         {"library", coll_choice::library},
         {"shunt", coll_choice::shunt},
         {"measure", coll_choice::measure}}};
};

// A "kind" is the type of a variable: value_type, a type name, the accepted text, a strict
// parser (false on any bad text, `out` untouched) and a formatter whose output parses back.

/// A boolean switch.
struct flag_kind {
    using value_type = bool;
    static constexpr std::string_view type_name = "bool";
    static std::string accepted() { return "1, 0, true, false, yes, no, on, off"; }
    static bool parse(std::string_view text, bool& out) {
        for (std::string_view t : {"1", "true", "yes", "on"})
            if (iequals(text, t)) return out = true, true;
        for (std::string_view f : {"0", "false", "no", "off"})
            if (iequals(text, f)) return out = false, true;
        return false;
    }
    static std::string format(bool v) { return v ? "1" : "0"; }
};

/// One of the names in choice_names<E>.
template <class E>
struct choice_kind {
    using value_type = E;
    static constexpr std::string_view type_name = "choice";
    static std::string accepted() {
        std::string s;
        for (const auto& [name, value] : choice_names<E>::values) {
            if (!s.empty()) s += ", ";
            s += name;
        }
        return s;
    }
    static bool parse(std::string_view text, E& out) {
        for (const auto& [name, value] : choice_names<E>::values)
            if (iequals(text, name)) return out = value, true;
        return false;
    }
    /// The registry's word for a value ("?" for none), valid for the whole program.
    static constexpr std::string_view name(E v) {
        for (const auto& [word, value] : choice_names<E>::values)
            if (value == v) return word;
        return "?";
    }
    static std::string format(E v) { return std::string(name(v)); }
};

/// An integer in [Min, Max], decimal, optionally with a binary suffix K, M, G or T (x 1024^n).
/// A kind with template arguments needs an alias before it goes into the registry macro.
template <std::int64_t Min, std::int64_t Max>
struct integer_kind {
    using value_type = std::int64_t;
    static constexpr std::string_view type_name = "integer";
    static std::string accepted() {
        return "an integer from " + std::to_string(Min) + " to " + std::to_string(Max) +
               ", optionally with a suffix K, M, G or T (powers of 1024)";
    }
    static bool parse(std::string_view text, std::int64_t& out) {
        if (text.empty() || text.front() == '+') return false;
        std::int64_t v = 0;
        const char* end = text.data() + text.size();
        auto [p, ec] = std::from_chars(text.data(), end, v);
        if (ec != std::errc{}) return false;  // no digits, or out of range of 64 bits
        if (p != end) {
            if (end - p != 1) return false;
            int shift = 0;
            switch (to_lower(*p)) {
                case 'k': shift = 10; break;
                case 'm': shift = 20; break;
                case 'g': shift = 30; break;
                case 't': shift = 40; break;
                default: return false;
            }
            if (__builtin_mul_overflow(v, std::int64_t{1} << shift, &v)) return false;
        }
        if (v < Min || v > Max) return false;
        out = v;
        return true;
    }
    static std::string format(std::int64_t v) { return std::to_string(v); }
};

/// SHUNT_COMPRESS's grammar: off, auto, or a comma list of compressor names (e.g. fp16,int8).
struct compress_kind {
    using value_type = compress_consent;
    static constexpr std::string_view type_name = "compressors";
    static std::string accepted() {
        std::string s = "off, auto, or a comma list of ";
        for (std::size_t i = 0; i < compress_method_names.size(); ++i) {
            s += compress_method_names[i];
            s += i + 1 < compress_method_names.size() ? "|" : "";
        }
        return s;
    }
    static bool parse(std::string_view text, compress_consent& out) {
        if (iequals(text, "off")) return out = {}, true;
        if (iequals(text, "auto")) return out = {true, compress_auto_methods}, true;
        compress_consent c{true, 0};
        for (;;) {  // every item must name a compressor; empty items are errors
            const auto comma = text.find(',');
            const std::string_view item = text.substr(0, comma);
            bool known = false;
            for (std::size_t i = 0; i < compress_method_names.size() && !known; ++i)
                if (iequals(item, compress_method_names[i]))
                    c.methods |= static_cast<std::uint8_t>(1u << i), known = true;
            if (!known) return false;
            if (comma == std::string_view::npos) break;
            text.remove_prefix(comma + 1);
        }
        out = c;
        return true;
    }
    static std::string format(const compress_consent& c) {
        if (!c.on || c.methods == 0) return "off";
        if (c.methods == compress_auto_methods) return "auto";
        std::string s;
        for (std::size_t i = 0; i < compress_method_names.size(); ++i)
            if ((c.methods >> i) & 1u) {
                if (!s.empty()) s += ",";
                s += compress_method_names[i];
            }
        return s;
    }
};

/// Free text (a path); empty means unset.
struct text_kind {
    using value_type = std::string;
    static constexpr std::string_view type_name = "string";
    static std::string accepted() { return "any non-empty text"; }
    static bool parse(std::string_view text, std::string& out) {
        if (text.empty()) return false;
        out.assign(text);
        return true;
    }
    static std::string format(const std::string& v) { return v; }
};

/// SHUNT_LOG's grammar: LEVEL | LEVEL:CATEGORIES | CATEGORIES, CATEGORIES a comma list of
/// category names or `all`. Listed categories get LEVEL (debug when no level is given); the
/// others keep the default warn, or LEVEL when it is lower.
struct log_kind {
    using value_type = log_spec;
    static constexpr std::string_view type_name = "log spec";
    static std::string accepted() {
        std::string s = "LEVEL, LEVEL:CATEGORY[,CATEGORY...] or CATEGORY[,CATEGORY...] with LEVEL one of ";
        for (auto n : log_level_names) {
            s += n;
            s += n == log_level_names.back() ? " and CATEGORY one of " : "|";
        }
        for (auto n : log_category_names) {
            s += n;
            s += "|";
        }
        return s += "all";
    }
    static std::optional<log_level> level_of(std::string_view text) {
        for (std::size_t i = 0; i < log_level_names.size(); ++i)
            if (iequals(text, log_level_names[i])) return static_cast<log_level>(i);
        return std::nullopt;
    }
    static bool parse(std::string_view text, log_spec& out) {
        std::optional<log_level> level;
        std::string_view cats = text;
        if (auto colon = text.find(':'); colon != std::string_view::npos) {
            level = level_of(text.substr(0, colon));
            if (!level) return false;
            cats = text.substr(colon + 1);
        } else if ((level = level_of(text))) {
            out = log_spec::all(*level);
            return true;
        }
        const log_level chosen = level.value_or(log_level::debug);
        const log_level others = std::min(chosen, log_level::warn);
        log_spec spec = log_spec::all(others);
        for (;;) {  // every item must name a category; empty items are errors
            const auto comma = cats.find(',');
            const std::string_view item = cats.substr(0, comma);
            bool known = iequals(item, "all");
            if (known) spec.threshold.fill(chosen);
            for (std::size_t i = 0; i < log_category_names.size() && !known; ++i)
                if (iequals(item, log_category_names[i])) spec.threshold[i] = chosen, known = true;
            if (!known) return false;
            if (comma == std::string_view::npos) break;
            cats.remove_prefix(comma + 1);
        }
        out = spec;
        return true;
    }
    static std::string format(const log_spec& s) {
        log_level hi = log_level::off, lo = log_level::trace;
        for (log_level l : s.threshold) hi = std::max(hi, l), lo = std::min(lo, l);
        if (hi == lo) return std::string(log_level_names[static_cast<std::size_t>(hi)]);
        std::string cats;
        for (std::size_t i = 0; i < s.threshold.size(); ++i)
            if (s.threshold[i] == hi) {
                if (!cats.empty()) cats += ",";
                cats += log_category_names[i];
            }
        std::string out(log_level_names[static_cast<std::size_t>(hi)]);
        return out += ":" + cats;
    }
};

using report_kind = choice_kind<report_mode>;
using pack_kind = choice_kind<pack_choice>;
using coll_kind = choice_kind<coll_choice>;
using nccl_kind = choice_kind<nccl_choice>;
using compress_count_kind = integer_kind<0, 1000000000>;
using compress_bytes_kind = integer_kind<0, std::int64_t{1} << 50>;

}  // namespace detail
}  // namespace shunt

/// The registry: X(field, "SHUNT_NAME", kind, "default text", "one line of documentation").
/// Adding a variable is one entry here; it then appears in shunt::settings, shunt-info --config,
/// the strict parser and the unknown-variable check.
#define SHUNT_CONFIG_VARIABLES(X)                                                                          \
    X(disable, "SHUNT_DISABLE", ::shunt::detail::flag_kind, "0",                                           \
      "1 makes shunt a pure pass-through: every intercepted call goes straight to the MPI library")        \
    X(log, "SHUNT_LOG", ::shunt::detail::log_kind, "warn",                                                 \
      "what shunt writes to stderr: a level (e.g. info), LEVEL:CATEGORIES (e.g. debug:type,pack), "        \
      "or CATEGORIES alone at level debug (e.g. decide)")                                                  \
    X(log_file, "SHUNT_LOG_FILE", ::shunt::detail::text_kind, "",                                          \
      "append shunt's messages (log, warnings, report) to this file instead of stderr")                    \
    X(report, "SHUNT_REPORT", ::shunt::detail::report_kind, "off",                                         \
      "at MPI_Finalize print shunt's counters: rank = one line per rank, summary = one table by rank 0")   \
    X(pack, "SHUNT_PACK", ::shunt::detail::pack_kind, "auto",                                              \
      "who packs non-contiguous data in MPI_Pack/MPI_Unpack and point-to-point calls: auto = the cost "    \
      "model decides per call (MPI_Pack/MPI_Unpack measuring both packers on the first calls of each "     \
      "layout), model = auto without that measuring, library = always the MPI library, host = "            \
      "shunt's host packer whenever the type is supported; device, one-shot, staged = that method for "    \
      "device buffers (pack on the device for a CUDA-aware MPI, pack into mapped pinned memory, pack "     \
      "then copy to pinned memory)")                                                                       \
    X(cuda_aware, "SHUNT_CUDA_AWARE", ::shunt::detail::flag_kind, "0",                                     \
      "1: the MPI library accepts device pointers (overrides MPIX_Query_cuda_support where the MPI "       \
      "has it); 0 and unset without that query: device buffers are staged through host memory")            \
    X(coll, "SHUNT_COLL", ::shunt::detail::coll_kind, "auto",                                              \
      "who runs MPI_Allreduce, _Reduce, _Reduce_scatter(_block), _Allgather(v), _Bcast and _Alltoall: "    \
      "auto = the cost model decides per operation and size (measuring both on first use, except "         \
      "floating-point reductions, decided from the model alone so that their bits are the same in "        \
      "every run), measure = auto measuring floating-point reductions too, library = always the MPI "      \
      "library, shunt = shunt's hierarchical schedule wherever it applies")                                \
    X(nccl, "SHUNT_NCCL", ::shunt::detail::nccl_kind, "auto",                                              \
      "who runs ncclAllReduce, ncclReduceScatter, ncclAllGather, ncclBroadcast/ncclBcast and ncclReduce: " \
      "auto = shunt's hierarchical schedule where measured nccl.* tables of the model say it is faster, "  \
      "else NCCL, library = always NCCL, shunt = shunt's schedule wherever it applies")                    \
    X(compress, "SHUNT_COMPRESS", ::shunt::detail::compress_kind, "off",                                   \
      "lossy gradient compression of float, half and bfloat16 SUM reductions (MPI_Allreduce and "          \
      "MPI_Reduce_scatter(_block) of MPI_FLOAT or MPIX_C_FLOAT16, ncclAllReduce of ncclFloat32, "          \
      "ncclFloat16 or ncclBfloat16): off = never (exact "                                                  \
      "results), auto = the planner chooses per tensor among fp16, bf16 and int8 or keeps exact, "         \
      "LIST = among those named (fp16,bf16,int8,int4,randomk,topk,sign)")                                  \
    X(compress_warmup, "SHUNT_COMPRESS_WARMUP", ::shunt::detail::compress_count_kind, "3",                 \
      "exact calls at each call site (position in the iteration's repeating pattern of calls) before "     \
      "its first compressed one")                                                                          \
    X(compress_min_bytes, "SHUNT_COMPRESS_MIN_BYTES", ::shunt::detail::compress_bytes_kind, "0",           \
      "reductions smaller than this many bytes are never compressed; 0 = the smallest size at which "      \
      "the cost model predicts that compression pays")                                                     \
    X(compress_check, "SHUNT_COMPRESS_CHECK", ::shunt::detail::compress_count_kind, "0",                   \
      "shadow mode: every N-th compressed call also computes the exact result and logs the relative "      \
      "error (0 = never)")                                                                                 \
    X(model, "SHUNT_MODEL", ::shunt::detail::text_kind, "",                                                \
      "the cost model file written by shunt-measure (unset: $XDG_CACHE_HOME/shunt/model-HOST-MPI.json, "   \
      "else $HOME/.cache/shunt/model-HOST-MPI.json)")                                                      \
    X(topology, "SHUNT_TOPOLOGY", ::shunt::detail::text_kind, "",                                          \
      "a virtual topology that overrides the discovered levels (testing on one machine); "                 \
      "its syntax is checked where it is used (see shunt/topology/spec.hpp)")                              \
    X(flow, "SHUNT_FLOW", ::shunt::detail::text_kind, "",                                                  \
      "split transfers between hosts over several network flows, set up before MPI starts: off, auto "     \
      "(pinned where SHUNT_FABRIC's plane interfaces exist, else one connection per peer), "               \
      "hashed[:K] (K connections per peer, paths hashed by the switches) or pinned[:K] (each on one "      \
      "spine's address plane); K from the planner and SHUNT_FABRIC when not given (shunt/flow/lanes.hpp)") \
    X(fabric, "SHUNT_FABRIC", ::shunt::detail::text_kind, "",                                              \
      "the leaf-spine fabric SHUNT_FLOW plans for: spines=S;leaves={HOST,...|...}[;planes=PREFIX]; "       \
      "its syntax is checked where it is used (see shunt/flow/lanes.hpp)")

namespace shunt {
namespace detail {

/// The value of a default text; a default that does not parse is a bug caught by the tests.
template <class Kind>
typename Kind::value_type parse_default(std::string_view text) {
    typename Kind::value_type v{};
    if (!text.empty()) Kind::parse(text, v);
    return v;
}

}  // namespace detail

/// The effective value of every SHUNT_* variable.
struct settings {
#define SHUNT_CONFIG_FIELD_(field, name, kind, def, doc) \
    kind::value_type field = ::shunt::detail::parse_default<kind>(def);
    SHUNT_CONFIG_VARIABLES(SHUNT_CONFIG_FIELD_)
#undef SHUNT_CONFIG_FIELD_
};

/// One registry entry, as shunt-info and the parser see it.
struct config_variable {
    std::string_view name;
    std::string_view type;
    std::string_view default_text;
    std::string_view doc;
    std::string (*accepted)();
    bool (*parse_into)(std::string_view text, settings& into);  ///< false, `into` untouched, on bad text
    std::string (*format)(const settings& from);  ///< the effective value as text
};

/// Every SHUNT_* variable, in declaration order.
inline constexpr config_variable config_variables[] = {
#define SHUNT_CONFIG_ENTRY_(field, name, kind, def, doc)                                     \
    config_variable{name,                                                                    \
                    kind::type_name,                                                         \
                    def,                                                                     \
                    doc,                                                                     \
                    &kind::accepted,                                                         \
                    [](std::string_view t, settings& s) { return kind::parse(t, s.field); }, \
                    [](const settings& s) { return kind::format(s.field); }},
    SHUNT_CONFIG_VARIABLES(SHUNT_CONFIG_ENTRY_)
#undef SHUNT_CONFIG_ENTRY_
};
inline constexpr std::size_t config_variable_count = std::size(config_variables);

/// The configuration read from one environment.
struct config_snapshot {
    settings values;  ///< effective values
    std::array<std::optional<std::string>, config_variable_count> raw;  ///< text seen, per variable
    std::array<bool, config_variable_count> rejected{};  ///< bad text: default used
    std::vector<std::string> warnings;  ///< one line per bad or unknown variable, no prefix
};

namespace detail {

/// Printable, bounded form of user text for a warning: control bytes escaped, long text cut.
inline std::string printable(std::string_view text) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string q;
    for (std::size_t i = 0; i < text.size() && i < 80; ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            q += static_cast<char>(c);
        } else {
            q += "\\x";
            q += digits[c >> 4];
            q += digits[c & 15];
        }
    }
    if (text.size() > 80) q += "...";
    return q;
}

inline std::string quote(std::string_view text) {
    std::string q = "\"";
    q += printable(text);
    return q += "\"";
}

/// Case-insensitive edit distance, for "did you mean".
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diag = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (to_lower(a[i - 1]) == to_lower(b[j - 1]) ? 0 : 1)});
            diag = up;
        }
    }
    return row[b.size()];
}

/// The registered name closest to an unknown one, when it is close enough to be a typo.
inline std::optional<std::string_view> closest_variable(std::string_view name) {
    std::optional<std::string_view> best;
    std::size_t best_d = std::numeric_limits<std::size_t>::max();
    for (const auto& v : config_variables) {
        const std::size_t d = edit_distance(name, v.name);
        if (d < best_d) best_d = d, best = v.name;
    }
    // Up to two edits after the SHUNT_ prefix, and never most of the name.
    const std::size_t tail = name.size() > 6 ? name.size() - 6 : 0;
    if (best && best_d <= 2 && best_d * 2 < tail + 1) return best;
    return std::nullopt;
}

}  // namespace detail

/// Parses the registry from an environment given as "NAME=VALUE" entries (the first entry of a
/// name wins, as with getenv). An empty value counts as unset. A bad value keeps the default
/// and adds one warning naming the variable, the value and what is accepted; a SHUNT_* name
/// (any case) that is not registered adds one warning, with the closest name when obvious.
inline config_snapshot parse_config(std::span<const char* const> environment) {
    config_snapshot snap;
    std::vector<std::string> unknown_seen;
    for (const char* entry : environment) {
        if (entry == nullptr) continue;
        const std::string_view kv(entry);
        const auto eq = kv.find('=');
        if (eq == std::string_view::npos) continue;
        const std::string_view name = kv.substr(0, eq), value = kv.substr(eq + 1);
        if (!detail::iequals(name.substr(0, 6), "SHUNT_")) continue;
        std::size_t i = 0;
        while (i < config_variable_count && config_variables[i].name != name) ++i;
        if (i == config_variable_count) {
            bool seen = false;
            for (const auto& u : unknown_seen) seen = seen || u == name;
            if (seen) continue;
            unknown_seen.emplace_back(name);
            std::string w = detail::printable(name) + " is not a shunt variable";
            if (auto near = detail::closest_variable(name)) {
                w += " (did you mean ";
                w += *near;
                w += "?)";
            }
            w += "; it is ignored (shunt-info --config lists them all)";
            snap.warnings.push_back(std::move(w));
            continue;
        }
        if (snap.raw[i]) continue;  // a duplicate entry: getenv would see the first
        snap.raw[i].emplace(value);
        if (value.empty()) continue;
        const config_variable& v = config_variables[i];
        if (!v.parse_into(value, snap.values)) {
            snap.rejected[i] = true;
            std::string w(v.name);
            w += '=';
            w += detail::quote(value);
            w += " is not valid; accepted: ";
            w += v.accepted();
            w += "; using the default ";
            w += v.default_text.empty() ? std::string("(unset)") : detail::quote(v.default_text);
            snap.warnings.push_back(std::move(w));
        }
    }
    return snap;
}

/// The process environment as parse_config takes it. The only place shunt reads the environment.
inline std::span<const char* const> process_environment() noexcept {
    std::size_t n = 0;
    if (::environ != nullptr)
        while (::environ[n] != nullptr) ++n;
    return {const_cast<const char* const*>(::environ), n};
}

/// The process-wide configuration: parsed from the environment on first use, then cached.
/// Thread-safe; later changes to the environment are not seen.
inline const config_snapshot& config_state() {
    static const config_snapshot snap = parse_config(process_environment());
    return snap;
}

/// The effective settings (see config_state()).
inline const settings& config() { return config_state().values; }

}  // namespace shunt
