// tests/fuzz/fuzz_config.cpp: fuzz target of the SHUNT_* registry: parse_config over random
// environments (checked against a plain reading of the same entries), and every kind's strict
// parser and formatter (what parses must format to text that parses back to the same value).
#include "fuzz_input.hpp"

#include <shunt/config.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

[[noreturn]] void fail(const char* what, std::string_view text) {
    std::fprintf(stderr, "fuzz_config: check failed: %s (text \"%s\")\n", what, shunt::detail::printable(text).c_str());
    std::abort();
}
#define SHUNT_FUZZ_CHECK(cond, text)    \
    do {                                \
        if (!(cond)) fail(#cond, text); \
    } while (0)

/// Parse, format, parse again: the same value, and formatting is stable.
template <class Kind>
void round_trip(std::string_view text) {
    typename Kind::value_type v{}, w{};
    const typename Kind::value_type untouched{};
    if (!Kind::parse(text, v)) {
        SHUNT_FUZZ_CHECK(v == untouched, text);  // a rejected text leaves the value alone
        return;
    }
    const std::string f = Kind::format(v);
    SHUNT_FUZZ_CHECK(Kind::parse(f, w), f);
    SHUNT_FUZZ_CHECK(w == v, f);
    SHUNT_FUZZ_CHECK(Kind::format(w) == f, f);
}

using small_int = shunt::detail::integer_kind<-5, std::int64_t{1} << 40>;
using any_int = shunt::detail::integer_kind<INT64_MIN, INT64_MAX>;

/// Some text: random bytes, or a registry word with random case and affixes.
std::string some_text(shunt_fuzz::input& in) {
    static constexpr std::string_view words[] = {
        "1",     "0",     "yes",     "off",  "auto",    "library", "host",   "model", "one-shot",
        "debug", "trace", "warn",    "all",  "decide",  "k",       "M",      "-",     "16G",
        ":",     ",",     "summary", "rank", "measure", "shunt",   "config", "info:", "9223372036854775807"};
    std::string s;
    const int parts = static_cast<int>(in.range(0, 4));
    for (int i = 0; i < parts; ++i) {
        if (in.flag()) {
            std::string w(words[in.range(0, std::size(words) - 1)]);
            for (char& c : w)
                if (c >= 'a' && c <= 'z' && in.flag()) c = static_cast<char>(c - 'a' + 'A');
            s += w;
        } else {
            s += in.text(12);
        }
    }
    return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    shunt_fuzz::input in(data, size);

    // Every kind on its own.
    const std::string text = some_text(in);
    round_trip<shunt::detail::flag_kind>(text);
    round_trip<shunt::detail::report_kind>(text);
    round_trip<shunt::detail::pack_kind>(text);
    round_trip<shunt::detail::coll_kind>(text);
    round_trip<shunt::detail::log_kind>(text);
    round_trip<shunt::detail::text_kind>(text);
    round_trip<small_int>(text);
    round_trip<any_int>(text);
    (void)shunt::detail::quote(text);
    (void)shunt::detail::closest_variable(text);

    // A random environment: registered names (any case), near misses and plain junk.
    std::vector<std::string> entries;
    const int n = static_cast<int>(in.range(0, 12));
    for (int i = 0; i < n; ++i) {
        std::string name;
        switch (in.range(0, 3)) {
            case 0:
            case 1:
                name = std::string(shunt::config_variables[in.range(0, shunt::config_variable_count - 1)].name);
                break;
            case 2: name = "shunt_" + in.text(10); break;
            default: name = in.text(16); break;
        }
        if (in.range(0, 7) == 0 && !name.empty()) name[in.range(0, name.size() - 1)] ^= 0x20;  // a case slip
        entries.push_back(in.range(0, 15) == 0 ? name : name + "=" + some_text(in));
        for (char& c : entries.back())
            if (c == '\0') c = '@';  // an environment entry is a C string
    }
    std::vector<const char*> env;
    for (const auto& e : entries) env.push_back(e.c_str());
    if (in.flag()) env.push_back(nullptr);  // tolerated anywhere
    const shunt::config_snapshot snap = shunt::parse_config(env);

    // The same entries read plainly: the first of each registered name wins, empty means unset.
    std::size_t expected_warnings = 0;
    std::vector<std::string> unknown;
    std::vector<bool> seen(shunt::config_variable_count, false);
    for (const auto& e : entries) {
        const auto eq = e.find('=');
        if (eq == std::string::npos) continue;
        const std::string name = e.substr(0, eq), value = e.substr(eq + 1);
        if (!shunt::detail::iequals(std::string_view(name).substr(0, 6), "SHUNT_")) continue;
        std::size_t i = 0;
        while (i < shunt::config_variable_count && shunt::config_variables[i].name != name) ++i;
        if (i == shunt::config_variable_count) {
            bool again = false;
            for (const auto& u : unknown) again = again || u == name;
            if (!again) unknown.push_back(name), ++expected_warnings;
            continue;
        }
        if (seen[i]) continue;
        seen[i] = true;
        SHUNT_FUZZ_CHECK(snap.raw[i] && *snap.raw[i] == value, e);
        shunt::settings alone;
        const bool good = value.empty() || shunt::config_variables[i].parse_into(value, alone);
        SHUNT_FUZZ_CHECK(snap.rejected[i] == !good, e);
        expected_warnings += !good;
        // The effective value: the one parsed, or the default; either way it formats and parses back.
        const std::string effective = shunt::config_variables[i].format(snap.values);
        SHUNT_FUZZ_CHECK(effective == shunt::config_variables[i].format(good ? alone : shunt::settings{}), e);
        shunt::settings again;
        SHUNT_FUZZ_CHECK(effective.empty() || shunt::config_variables[i].parse_into(effective, again), effective);
        SHUNT_FUZZ_CHECK(shunt::config_variables[i].format(again) == effective, effective);
    }
    for (std::size_t i = 0; i < shunt::config_variable_count; ++i)
        if (!seen[i]) {
            SHUNT_FUZZ_CHECK(!snap.raw[i] && !snap.rejected[i], shunt::config_variables[i].name);
            SHUNT_FUZZ_CHECK(shunt::config_variables[i].format(snap.values) == shunt::config_variables[i].default_text,
                             shunt::config_variables[i].name);
        }
    SHUNT_FUZZ_CHECK(snap.warnings.size() == expected_warnings, "warnings");
    for (const auto& w : snap.warnings) SHUNT_FUZZ_CHECK(w.find('\n') == std::string::npos, w);  // one line each
    return 0;
}
