// shunt/collectives/allgatherv.hpp: hierarchical allgather with a size per rank (MPI_Allgatherv).
#pragma once

#include <shunt/collectives/mpi_transport.hpp>
#include <shunt/collectives/schedule.hpp>
#include <shunt/collectives/transport.hpp>
#include <shunt/errors.hpp>
#include <shunt/topology/hierarchy.hpp>
#include <shunt/topology/topology.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

namespace shunt {

/// Allgather of bytes[i] bytes from rank i, laid out in rank order without gaps in `buf`
/// (rank i's at sum(bytes[0..i))).
///
/// Contract across ranks: every rank of t's group calls it, in the same order relative to
/// other collectives on t, with the same sizes, hierarchy and options; blocking. On entry
/// the caller's own part of `buf` is filled in; on return every part is. Schedule: the
/// mirror of reduce_scatter (each part crosses the outer levels once, to one representative
/// per group, then spreads inward level by level); empty parts cost nothing.
template <transport T>
void allgatherv(T& t, const hierarchy& h, void* buf, std::span<const std::int64_t> bytes,
                const collective_options& opt = {}) {
    detail::check_hierarchy(t, h);
    const int p = t.size();
    if (bytes.size() != static_cast<std::size_t>(p)) throw std::invalid_argument("allgatherv: one size per rank");
    std::vector<detail::owned_range> own(static_cast<std::size_t>(p));
    std::int64_t n = 0;
    for (int r = 0; r < p; ++r) {
        own[static_cast<std::size_t>(r)] = {n, bytes[static_cast<std::size_t>(r)]};
        n += bytes[static_cast<std::size_t>(r)];
    }
    if (n <= 0 || p == 1) return;
    detail::hierarchical_allgather(t, h, static_cast<std::byte*>(buf), 1, own, opt.flat, opt);
}

}  // namespace shunt
