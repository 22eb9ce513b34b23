// tests/fuzz/fuzz_topology.cpp: fuzz target of the SHUNT_TOPOLOGY parser: random text must parse
// or be refused with shunt::error, a parsed description must print to text that parses back to
// it, and its rank, host and Slurm labels must agree with plain readings of the grammar.
#include "fuzz_input.hpp"

#include <shunt/topology/spec.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

[[noreturn]] void fail(const char* what, std::string_view text) {
    std::fprintf(stderr, "fuzz_topology: check failed: %s (text \"%.*s\")\n", what, static_cast<int>(text.size()),
                 text.data());
    std::abort();
}
#define SHUNT_FUZZ_CHECK(cond, text)    \
    do {                                \
        if (!(cond)) fail(#cond, text); \
    } while (0)

/// The group of world rank r at a sizes level, by walking the groups one rank at a time.
std::int64_t walk_label(const shunt::level_spec& l, int r) {
    std::int64_t group = 0, left = l.values[0];
    std::size_t k = 0;
    for (int i = 0; i < r; ++i)
        if (--left == 0) ++group, k = (k + 1) % l.values.size(), left = l.values[k];
    return group;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    shunt_fuzz::input in(data, size);
    const int world = static_cast<int>(in.range(1, 64));
    const std::string host = in.text(16), addr = in.text(40), pattern = in.text(40);
    const std::string text = in.rest();

    shunt::topology_spec spec;
    try {
        spec = shunt::parse_topology_spec(text);
    } catch (const shunt::error& e) {
        SHUNT_FUZZ_CHECK(std::string_view(e.what()).starts_with("topology description '"), text);
        return 0;
    }
    SHUNT_FUZZ_CHECK(!spec.levels.empty(), text);
    const std::string printed = shunt::to_string(spec);
    shunt::topology_spec again;
    try {
        again = shunt::parse_topology_spec(printed);
    } catch (const shunt::error&) {
        fail("the printed description does not parse", printed);
    }
    SHUNT_FUZZ_CHECK(again == spec, printed);
    SHUNT_FUZZ_CHECK(shunt::to_string(again) == printed, printed);

    for (const auto& l : spec.levels) {
        SHUNT_FUZZ_CHECK(!l.name.empty(), text);
        switch (l.kind) {
            case shunt::grouping_kind::sizes:
                for (int r = 0; r < world; ++r)
                    SHUNT_FUZZ_CHECK(shunt::rank_label(l, r, world) == walk_label(l, r), text);
                break;
            case shunt::grouping_kind::labels:
                for (int r = 0; r < world; ++r) {
                    if (static_cast<std::size_t>(world) != l.values.size()) {
                        bool refused = false;
                        try {
                            (void)shunt::rank_label(l, r, world);
                        } catch (const shunt::error&) {
                            refused = true;
                        }
                        SHUNT_FUZZ_CHECK(refused, text);
                        break;
                    }
                    SHUNT_FUZZ_CHECK(shunt::rank_label(l, r, world) == l.values[static_cast<std::size_t>(r)], text);
                }
                break;
            case shunt::grouping_kind::hosts: {
                const std::int64_t g = shunt::host_label(l, host);
                SHUNT_FUZZ_CHECK(g >= -1 && g < static_cast<std::int64_t>(l.hosts.size()), text);
                // The first group with a pattern that matches (a trailing '*': any suffix).
                std::int64_t want = -1;
                for (std::size_t k = 0; k < l.hosts.size() && want < 0; ++k)
                    for (const auto& p : l.hosts[k]) {
                        const bool prefix = p.back() == '*';
                        const std::string_view stem = std::string_view(p).substr(0, p.size() - prefix);
                        if (prefix ? std::string_view(host).starts_with(stem) : host == p)
                            want = static_cast<std::int64_t>(k);
                    }
                SHUNT_FUZZ_CHECK(g == want, text);
                break;
            }
            case shunt::grouping_kind::slurm: {
                const std::int64_t label = shunt::slurm_label(l, addr, pattern);
                SHUNT_FUZZ_CHECK(label >= -1, text);
                SHUNT_FUZZ_CHECK(label == shunt::slurm_label(l, addr, pattern), text);  // a pure function
                break;
            }
            case shunt::grouping_kind::automatic: break;
        }
    }
    return 0;
}
