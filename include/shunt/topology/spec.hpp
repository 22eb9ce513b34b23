// shunt/topology/spec.hpp: the topology description string (the value of SHUNT_TOPOLOGY): grammar, parser, printer.
#pragma once

#include <shunt/errors.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shunt {

/// How the ranks of one level are put into groups.
enum class grouping_kind {
    automatic,  ///< `auto`: discovered (node: shared memory; package, numa: hwloc; gpu: the device in use)
    sizes,  ///< `3,1`: consecutive world ranks in groups of these sizes, the list repeated
    labels,  ///< `[0,1,0,1]`: the group label of each world rank, in world rank order
    hosts,  ///< `{a,b|c*}`: groups of host names (MPI_Get_processor_name); `*` ends a prefix
    slurm,  ///< `slurm[:D]`: the D-th switch tier above the node in Slurm's topology address
};

/// One level of a topology description.
struct level_spec {
    std::string name;
    grouping_kind kind = grouping_kind::automatic;
    std::vector<std::int64_t> values;  ///< sizes, or labels, or the slurm tier
    std::vector<std::vector<std::string>> hosts;  ///< host patterns per group
    bool operator==(const level_spec&) const = default;
};

/// A parsed topology description: levels from the innermost (smallest groups) outward. Above the
/// last level is always the whole communicator.
///
/// Grammar (blanks around tokens are ignored; the empty string means the default
/// `gpu=auto;package=auto;node=auto;switch=slurm`):
///
///     spec     := level { ';' level }
///     level    := NAME '=' grouping                NAME: [A-Za-z_][A-Za-z0-9_-]*, unique
///     grouping := 'auto'                           NAME must be node, package, numa or gpu
///               | SIZE { ',' SIZE }                SIZE >= 1
///               | '[' LABEL { ',' LABEL } ']'      LABEL >= 0, one per world rank
///               | '{' HOSTS { '|' HOSTS } '}'      HOSTS := HOST { ',' HOST }
///               | 'slurm' [ ':' TIER ]             TIER >= 1 (default 1)
///
/// `node=auto` groups the ranks that share memory (MPI_COMM_TYPE_SHARED); `package=auto` and
/// `numa=auto` group the ranks of a node by the package or NUMA node their CPU binding lies in
/// (hwloc; the level is ignored when some rank is not bound inside one). `gpu=auto` groups the
/// ranks of a node that use the same GPU: the PCI bus id of each rank's current CUDA device when
/// the topology is built (a communicator's first collective), found where libshunt_gpu is built
/// with CUDA (see shunt/topology/gpu.hpp); its groups are also split by every level kept above
/// it, so it always nests. It is ignored when some rank uses no GPU and, like every level, when
/// its groups are single ranks or those of the level above (one GPU per rank, or one per node):
/// so the default describes exactly the levels it did before on machines without GPUs.
/// Sizes and labels are keyed by the rank in MPI_COMM_WORLD, so one description serves every
/// sub-communicator: `node=2` is nodes of 2 consecutive world ranks, `node=3,1` is groups of 3,
/// 1, 3, 1, ... ranks, `node=[0,1,0,1]` puts world ranks 0 and 2 on one node and 1 and 3 on
/// another. Host
/// groups name hosts (a trailing `*` matches any suffix) and suit the upper levels of a real
/// machine: `node=auto;switch={nid001,nid002|nid003,nid004}`; every host must be listed.
/// `slurm` takes the groups from the launcher: Slurm's topology/tree plugin gives each task
/// SLURM_TOPOLOGY_ADDR (e.g. `spine0.leaf3.nid017`) and SLURM_TOPOLOGY_ADDR_PATTERN (e.g.
/// `switch.switch.node`); tier 1 groups the ranks under the same switch directly above their
/// node, tier 2 under the same switch above that, and so on. Where some rank has no such
/// address (not under Slurm, no topology plugin, fewer tiers) the level is left out with a note,
/// so the default description works everywhere.
/// Virtual levels for tests on one machine: `package=1;node=2` (4 ranks: 2 nodes of 2
/// single-rank packages). Groups of a level must nest inside the groups of the next level.
struct topology_spec {
    std::vector<level_spec> levels;
    bool operator==(const topology_spec&) const = default;
};

namespace detail {

class spec_parser {
public:
    explicit spec_parser(std::string_view text) : text_(text) {}

    topology_spec parse() {
        topology_spec spec;
        skip_blanks();
        if (pos_ == text_.size()) return default_spec();
        for (;;) {
            spec.levels.push_back(parse_level());
            for (std::size_t i = 0; i + 1 < spec.levels.size(); ++i)
                if (spec.levels[i].name == spec.levels.back().name)
                    fail("level '" + spec.levels.back().name + "' is named twice");
            skip_blanks();
            if (pos_ == text_.size()) break;
            expect(';');
        }
        return spec;
    }

    static topology_spec default_spec() {
        return topology_spec{{level_spec{"gpu", grouping_kind::automatic, {}, {}},
                              level_spec{"package", grouping_kind::automatic, {}, {}},
                              level_spec{"node", grouping_kind::automatic, {}, {}},
                              level_spec{"switch", grouping_kind::slurm, {1}, {}}}};
    }

private:
    [[noreturn]] void fail(const std::string& why) const {
        throw error("topology description '" + std::string(text_) + "': " + why + " (at character " +
                    std::to_string(pos_ + 1) +
                    "); expected e.g. 'node=auto', 'package=1;node=2', "
                    "'node=[0,1,0,1]' or 'node=auto;switch={hostA,hostB|hostC*}'");
    }
    void skip_blanks() {
        while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
    }
    bool peek(char c) {
        skip_blanks();
        return pos_ < text_.size() && text_[pos_] == c;
    }
    void expect(char c) {
        if (!peek(c)) fail(std::string("expected '") + c + "'");
        ++pos_;
    }
    static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
    static bool is_digit(char c) { return c >= '0' && c <= '9'; }

    std::string parse_name() {
        skip_blanks();
        std::size_t start = pos_;
        if (pos_ >= text_.size() || !is_name_start(text_[pos_])) fail("expected a level name");
        while (pos_ < text_.size() && (is_name_start(text_[pos_]) || is_digit(text_[pos_]) || text_[pos_] == '-'))
            ++pos_;
        return std::string(text_.substr(start, pos_ - start));
    }

    std::int64_t parse_number(std::int64_t min) {
        skip_blanks();
        if (pos_ >= text_.size() || !is_digit(text_[pos_])) fail("expected a number");
        std::int64_t v = 0;
        while (pos_ < text_.size() && is_digit(text_[pos_])) {
            if (v > (INT32_MAX - (text_[pos_] - '0')) / 10) fail("number too large");
            v = v * 10 + (text_[pos_] - '0');
            ++pos_;
        }
        if (v < min) fail("number must be at least " + std::to_string(min));
        return v;
    }

    std::string parse_host() {
        skip_blanks();
        std::size_t start = pos_;
        while (pos_ < text_.size()) {
            char c = text_[pos_];
            if (c == ',' || c == '|' || c == '}' || c == ';' || c == ' ' || c == '\t' || c == '*') break;
            ++pos_;
        }
        if (pos_ < text_.size() && text_[pos_] == '*') ++pos_;
        if (pos_ == start) fail("expected a host name");
        return std::string(text_.substr(start, pos_ - start));
    }

    level_spec parse_level() {
        level_spec l;
        l.name = parse_name();
        expect('=');
        skip_blanks();
        if (peek('[')) {
            ++pos_;
            l.kind = grouping_kind::labels;
            l.values.push_back(parse_number(0));
            while (peek(',')) {
                ++pos_;
                l.values.push_back(parse_number(0));
            }
            expect(']');
        } else if (peek('{')) {
            ++pos_;
            l.kind = grouping_kind::hosts;
            l.hosts.emplace_back();
            l.hosts.back().push_back(parse_host());
            for (;;) {
                if (peek(',')) {
                    ++pos_;
                    l.hosts.back().push_back(parse_host());
                } else if (peek('|')) {
                    ++pos_;
                    l.hosts.emplace_back();
                    l.hosts.back().push_back(parse_host());
                } else {
                    break;
                }
            }
            expect('}');
        } else if (pos_ < text_.size() && is_digit(text_[pos_])) {
            l.kind = grouping_kind::sizes;
            l.values.push_back(parse_number(1));
            while (peek(',')) {
                ++pos_;
                l.values.push_back(parse_number(1));
            }
        } else {
            std::size_t at = pos_;
            std::string word = parse_name();
            if (word == "slurm") {
                l.kind = grouping_kind::slurm;
                l.values.push_back(1);
                if (peek(':')) {
                    ++pos_;
                    l.values.back() = parse_number(1);
                }
                return l;
            }
            if (word != "auto") {
                pos_ = at;
                fail("expected 'auto', 'slurm', sizes, [labels] or {hosts}");
            }
            if (l.name != "node" && l.name != "package" && l.name != "numa" && l.name != "gpu") {
                pos_ = at;
                fail("'auto' is known for levels node, package, numa and gpu only, not '" + l.name + "'");
            }
            l.kind = grouping_kind::automatic;
        }
        return l;
    }

    std::string_view text_;
    std::size_t pos_ = 0;
};

}  // namespace detail

/// Parses a topology description (grammar on topology_spec). Throws shunt::error naming the
/// position and what was expected.
inline topology_spec parse_topology_spec(std::string_view text) { return detail::spec_parser(text).parse(); }

namespace detail {
inline void append_list(std::string& out, const std::vector<std::int64_t>& values) {
    for (std::size_t i = 0; i < values.size(); ++i) {
        if (i) out += ',';
        out += std::to_string(values[i]);
    }
}
}  // namespace detail

/// The canonical text of a description; parse_topology_spec(to_string(s)) == s.
inline std::string to_string(const topology_spec& spec) {
    std::string out;
    for (const auto& l : spec.levels) {
        if (!out.empty()) out += ';';
        out += l.name + '=';
        switch (l.kind) {
            case grouping_kind::automatic: out += "auto"; break;
            case grouping_kind::sizes: detail::append_list(out, l.values); break;
            case grouping_kind::labels:
                out += '[';
                detail::append_list(out, l.values);
                out += ']';
                break;
            case grouping_kind::hosts:
                out += '{';
                for (std::size_t g = 0; g < l.hosts.size(); ++g) {
                    if (g) out += '|';
                    for (std::size_t i = 0; i < l.hosts[g].size(); ++i) {
                        if (i) out += ',';
                        out += l.hosts[g][i];
                    }
                }
                out += '}';
                break;
            case grouping_kind::slurm:
                out += "slurm";
                if (!l.values.empty() && l.values[0] != 1) out += ':' + std::to_string(l.values[0]);
                break;
        }
    }
    return out;
}

/// The group label of world rank `world_rank` (of `world_size`) at a sizes or labels level.
/// Throws shunt::error when a labels list does not name exactly world_size ranks.
inline std::int64_t rank_label(const level_spec& l, int world_rank, int world_size) {
    if (l.kind == grouping_kind::labels) {
        if (static_cast<std::int64_t>(l.values.size()) != world_size)
            throw error("topology level '" + l.name + "' lists " + std::to_string(l.values.size()) +
                        " rank labels but MPI_COMM_WORLD has " + std::to_string(world_size) + " ranks");
        return l.values[static_cast<std::size_t>(world_rank)];
    }
    if (l.kind != grouping_kind::sizes || l.values.empty())
        throw error("topology level '" + l.name + "' is not keyed by rank");
    std::int64_t period = 0;
    for (auto s : l.values) period += s;
    std::int64_t cycle = world_rank / period, rest = world_rank % period;
    std::int64_t g = 0;
    while (rest >= l.values[static_cast<std::size_t>(g)]) rest -= l.values[static_cast<std::size_t>(g++)];
    return cycle * static_cast<std::int64_t>(l.values.size()) + g;
}

/// The group label at a slurm level of tier `l.values[0]` for a task whose Slurm topology address
/// is `addr` with pattern `pattern` (both dot-separated, outermost first; an empty pattern means
/// every component but the last is a switch): a hash of the address up to that switch, or -1
/// when there is no address, no such tier or the two do not match.
inline std::int64_t slurm_label(const level_spec& l, std::string_view addr, std::string_view pattern) {
    const auto split = [](std::string_view text) {
        std::vector<std::string_view> parts;
        for (std::size_t start = 0;;) {
            const std::size_t dot = text.find('.', start);
            parts.push_back(text.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
            if (dot == std::string_view::npos) return parts;
            start = dot + 1;
        }
    };
    if (addr.empty() || l.values.empty()) return -1;
    const auto parts = split(addr);
    std::vector<std::size_t> switches;  // indices of the switch components, outermost first
    if (pattern.empty()) {
        for (std::size_t i = 0; i + 1 < parts.size(); ++i) switches.push_back(i);
    } else {
        const auto kinds = split(pattern);
        if (kinds.size() != parts.size()) return -1;
        for (std::size_t i = 0; i < kinds.size(); ++i)
            if (kinds[i] == "switch") switches.push_back(i);
    }
    const std::int64_t tier = l.values[0];
    if (tier < 1 || tier > static_cast<std::int64_t>(switches.size())) return -1;
    const std::size_t last = switches[switches.size() - static_cast<std::size_t>(tier)];
    // FNV-1a of the components up to that switch, kept non-negative.
    std::uint64_t h = 14695981039346656037ull;
    for (std::size_t i = 0; i <= last; ++i) {
        for (const char c : parts[i]) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
        h = (h ^ '.') * 1099511628211ull;
    }
    return static_cast<std::int64_t>(h >> 1);
}

/// The index of the host group of `host` at a hosts level, or -1 when no pattern matches.
inline std::int64_t host_label(const level_spec& l, std::string_view host) {
    for (std::size_t g = 0; g < l.hosts.size(); ++g) {
        for (const auto& pat : l.hosts[g]) {
            if (!pat.empty() && pat.back() == '*') {
                if (host.substr(0, pat.size() - 1) == std::string_view(pat).substr(0, pat.size() - 1))
                    return static_cast<std::int64_t>(g);
            } else if (host == pat) {
                return static_cast<std::int64_t>(g);
            }
        }
    }
    return -1;
}

}  // namespace shunt
