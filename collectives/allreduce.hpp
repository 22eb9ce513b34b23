// shunt/collectives/allreduce.hpp: hierarchical allreduce (partitioned reduce-scatter up the levels, allgather back down).
#pragma once

#include <shunt/collectives/mpi_transport.hpp>
#include <shunt/collectives/schedule.hpp>
#include <shunt/collectives/transport.hpp>
#include <shunt/topology/hierarchy.hpp>
#include <shunt/topology/topology.hpp>

#include <cstddef>
#include <cstdint>

namespace shunt {

/// Allreduce: every rank ends with the reduction of all ranks' `count` elements.
///
/// Contract across ranks: every rank of t's group calls it, in the same order relative to
/// other collectives on t, with the same count, reduction (type and op), hierarchy (t.size()
/// ranks) and options; blocking. sendbuf == recvbuf means in place. The reduction must be
/// commutative. Schedule: reduce-scatter inside each innermost group, then at each level only
/// on the part each rank owns, the top level exchanging the smallest parts, then allgather
/// back down; every rank owns a part, none leads. The combination order depends only on the
/// hierarchy and count: results are identical run to run and on every rank.
template <transport T>
void allreduce(T& t, const hierarchy& h, const void* sendbuf, void* recvbuf, std::int64_t count,
               const typename T::reduction_type& red, const collective_options& opt = {}) {
    detail::check_hierarchy(t, h);
    const std::int64_t es = red.element_size();
    auto* work = static_cast<std::byte*>(recvbuf);
    if (count <= 0) return;
    if (sendbuf != recvbuf) t.copy(work, sendbuf, count * es);
    if (t.size() == 1) return;
    const auto own = detail::free_ranges(h, count);
    detail::hierarchical_reduce_scatter(t, h, work, own, red, opt.flat);
    detail::hierarchical_allgather(t, h, work, es, own, opt.flat, opt);
}

/// MPI form on a communicator's topology: like MPI_Allreduce on the communicator topo was
/// built for (sendbuf may be MPI_IN_PLACE), over topo.groups(opt.levels). Throws shunt::unsupported for
/// what it leaves to the library (see mpi_reduction; negative counts).
inline void allreduce(const topology& topo, const void* sendbuf, void* recvbuf, std::int64_t count, MPI_Datatype type,
                      MPI_Op op, const collective_options& opt = {}) {
    if (count < 0) throw unsupported("allreduce: negative count");
    mpi_reduction red(type, op);
    mpi_transport t(topo.comm());
    allreduce(t, topo.groups(opt.levels), sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, recvbuf, count, red, opt);
}

}  // namespace shunt
