// shunt/collectives/allgather.hpp: hierarchical allgather (top level first on the smallest parts, then down the levels).
#pragma once

#include <shunt/collectives/mpi_transport.hpp>
#include <shunt/collectives/schedule.hpp>
#include <shunt/collectives/transport.hpp>
#include <shunt/errors.hpp>
#include <shunt/topology/hierarchy.hpp>
#include <shunt/topology/topology.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shunt {

/// Allgather of `bytes` bytes per rank: rank i's block lands at recvbuf + i*bytes on every
/// rank.
///
/// Contract across ranks: every rank of t's group calls it, in the same order relative to
/// other collectives on t, with the same bytes, hierarchy and options; blocking. sendbuf ==
/// recvbuf + rank*bytes means in place (as in NCCL; the MPI form maps MPI_IN_PLACE to it).
/// Schedule: the mirror
/// of reduce_scatter_block: each block first crosses the outermost level once, to one
/// representative per group, then spreads inside the groups level by level.
template <transport T>
void allgather(T& t, const hierarchy& h, const void* sendbuf, void* recvbuf, std::int64_t bytes,
               const collective_options& opt = {}) {
    detail::check_hierarchy(t, h);
    if (bytes <= 0) return;
    const int p = t.size(), me = t.rank();
    auto* out = static_cast<std::byte*>(recvbuf);
    t.copy(out + me * bytes, sendbuf, bytes);  // nothing to do in place
    std::vector<detail::owned_range> own(static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r) own[static_cast<std::size_t>(r)] = {r, 1};
    detail::hierarchical_allgather(t, h, out, bytes, own, opt.flat, opt);
}

/// MPI form on a communicator's topology: like MPI_Allgather with sendtype/sendcount equal to
/// recvtype/recvcount (sendbuf may be MPI_IN_PLACE). Throws shunt::unsupported for types whose
/// data is not dense and negative counts.
inline void allgather(const topology& topo, const void* sendbuf, void* recvbuf, std::int64_t count, MPI_Datatype type,
                      const collective_options& opt = {}) {
    if (count < 0) throw unsupported("allgather: negative count");
    const std::int64_t es = detail::dense_size(type);
    if (es <= 0) throw unsupported("allgather: datatype is not a dense element type");
    mpi_transport t(topo.comm());
    const void* mine =
        sendbuf == MPI_IN_PLACE ? static_cast<const std::byte*>(recvbuf) + topo.rank() * count * es : sendbuf;
    allgather(t, topo.groups(opt.levels), mine, recvbuf, count * es, opt);
}

}  // namespace shunt
