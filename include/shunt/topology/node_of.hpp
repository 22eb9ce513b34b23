// shunt/topology/node_of.hpp: the node and GPU domain of a rank of an NCCL communicator as shunt's NCCL levels group the ranks (SHUNT_TOPOLOGY's levels, else the host name), and ncclCommSplit colours; calls no MPI or NCCL.
#pragma once

#include <shunt/topology/spec.hpp>

#include <unistd.h>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace shunt {

/// A colour for ncclCommSplit from any number (non-negative, never NCCL_SPLIT_NOCOLOR): ranks that
/// pass equal numbers get equal colours.
inline int split_color(std::uint64_t v) {
    v ^= v >> 33;
    v *= 0xff51afd7ed558ccdull;
    v ^= v >> 33;
    return static_cast<int>(v & 0x3fffffff);
}

/// The node of `rank` in a communicator of `nranks` by the node level of the topology description
/// `topology` (SHUNT_TOPOLOGY: sizes or labels, keyed by the rank in this communicator), else by
/// host name; -1 where the description does not cover the communicator. Every rank of a
/// communicator calls it with the same `topology` and its own rank; equal results mean one node.
/// Throws shunt::error for a malformed description. Thread-safe.
inline std::int64_t node_of_rank(const std::string& topology, int rank, int nranks) {
    if (!topology.empty()) {
        const topology_spec spec = parse_topology_spec(topology);
        for (const level_spec& l : spec.levels) {
            if (l.name != "node") continue;
            if (l.kind == grouping_kind::labels)
                return rank < static_cast<int>(l.values.size()) && static_cast<int>(l.values.size()) == nranks
                           ? l.values[static_cast<std::size_t>(rank)]
                           : -1;
            if (l.kind == grouping_kind::sizes) {
                std::int64_t start = 0, group = 0;
                for (std::size_t i = 0;; ++i, ++group) {
                    const std::int64_t n = l.values[i % l.values.size()];
                    if (rank < start + n) return group;
                    start += n;
                }
            }
            break;  // auto (and the host and Slurm forms): by host name, below
        }
    }
    char host[256] = {0};
    if (::gethostname(host, sizeof host - 1) != 0) return -1;
    std::uint64_t h = 1469598103934665603ull;
    for (const char* c = host; *c != '\0'; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
    return static_cast<std::int64_t>(h >> 1);
}

/// How the GPU domain inside a node is known for shunt's NCCL levels.
enum class domain_source : std::uint8_t {
    none,  ///< no domain level: the nodes are not divided
    described,  ///< SHUNT_TOPOLOGY's level just inside its node level, by sizes or labels
    discovered,  ///< no such description: from the GPU each rank uses (hwloc, NVML), where found
};

/// The GPU domain of `rank` in a communicator of `nranks` (ranks sharing a label and a node share
/// a domain) and where it comes from. From the topology description `topology` (SHUNT_TOPOLOGY)
/// when it has a node level and a level just inside it given by sizes or labels, keyed by the
/// rank in this communicator as the node level is (`domain=2;node=4`: nodes of 4 ranks in two
/// domains of 2); a label of -1 where labels do not cover the communicator. Without such a level
/// (no description, or that level is `auto`) the source is `discovered` and the label -1: the
/// caller asks the GPU. Throws shunt::error for a malformed description. Thread-safe.
inline std::pair<domain_source, std::int64_t> domain_of_rank(const std::string& topology, int rank, int nranks) {
    if (topology.empty()) return {domain_source::discovered, -1};
    const topology_spec spec = parse_topology_spec(topology);
    for (std::size_t i = 0; i < spec.levels.size(); ++i) {
        if (spec.levels[i].name != "node") continue;
        if (i == 0) return {domain_source::discovered, -1};
        const level_spec& l = spec.levels[i - 1];
        if (l.kind == grouping_kind::labels)
            return {domain_source::described, static_cast<int>(l.values.size()) == nranks && rank < nranks
                                                  ? l.values[static_cast<std::size_t>(rank)]
                                                  : -1};
        if (l.kind == grouping_kind::sizes) return {domain_source::described, rank_label(l, rank, nranks)};
        return {domain_source::discovered, -1};
    }
    return {domain_source::discovered, -1};
}

/// The ranks per GPU domain where the domains of a job apply to shunt's three-level schedules, from
/// every rank's node (node[r]) and domain label (domain[r]): every node's ranks, in rank order, are
/// blocks of the same size P >= 2, each block one label of its own (no label negative), and every
/// node holds two blocks or more. 0 where they do not (no domains, single-rank domains, one domain
/// per node, unequal or interleaved domains). Pure: every rank given the same arrays gets the same.
inline int domain_block_size(const std::vector<std::int64_t>& node, const std::vector<std::int64_t>& domain) {
    if (node.size() != domain.size() || node.empty()) return 0;
    std::map<std::int64_t, std::vector<std::int64_t>> by_node;  // each node's labels in rank order
    for (std::size_t r = 0; r < node.size(); ++r) {
        if (domain[r] < 0) return 0;
        by_node[node[r]].push_back(domain[r]);
    }
    std::size_t per = 0;
    for (const auto& [n, labels] : by_node) {
        std::size_t run = 1;
        while (run < labels.size() && labels[run] == labels[0]) ++run;
        if (per == 0) per = run;
        if (run != per || run < 2 || labels.size() % per != 0 || labels.size() / per < 2) return 0;
        std::set<std::int64_t> seen;
        for (std::size_t b = 0; b < labels.size(); b += per) {
            for (std::size_t i = b; i < b + per; ++i)
                if (labels[i] != labels[b]) return 0;
            if (!seen.insert(labels[b]).second) return 0;
        }
    }
    return static_cast<int>(per);
}

}  // namespace shunt
