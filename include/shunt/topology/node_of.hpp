// shunt/topology/node_of.hpp: the node of a rank of an NCCL communicator as shunt's NCCL levels group the ranks (SHUNT_TOPOLOGY's node level, else the host name), and ncclCommSplit colours; calls no MPI or NCCL.
#pragma once

#include <shunt/topology/spec.hpp>

#include <unistd.h>
#include <cstddef>
#include <cstdint>
#include <string>

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

}  // namespace shunt
