// shunt/collectives/reduce.hpp: hierarchical reduce to a root (partitioned reduce-scatter up the levels, then a gather of the parts).
#pragma once

#include <shunt/collectives/mpi_transport.hpp>
#include <shunt/collectives/schedule.hpp>
#include <shunt/collectives/transport.hpp>
#include <shunt/errors.hpp>
#include <shunt/topology/hierarchy.hpp>
#include <shunt/topology/topology.hpp>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace shunt {

/// Reduce: rank `root` ends with the reduction of all ranks' `count` elements in recvbuf
/// (significant at the root only).
///
/// Contract across ranks: every rank of t's group calls it, in the same order relative to
/// other collectives on t, with the same count, reduction, root, hierarchy and options;
/// blocking. At the root sendbuf == recvbuf means in place. The reduction must be
/// commutative. Schedule: the hierarchical reduce-scatter of allreduce (every rank reduces
/// one part, the outer levels carry the smallest parts), then every rank sends its reduced
/// part straight to the root, so the root's links carry the result once instead of the
/// inputs of a whole subtree. Deterministic.
template <transport T>
void reduce(T& t, const hierarchy& h, const void* sendbuf, void* recvbuf, std::int64_t count,
            const typename T::reduction_type& red, int root, const collective_options& opt = {}) {
    detail::check_hierarchy(t, h);
    const int p = t.size(), me = t.rank();
    if (root < 0 || root >= p) throw std::invalid_argument("reduce: root out of range");
    if (count <= 0) return;
    const std::int64_t es = red.element_size();
    if (p == 1) {
        t.copy(recvbuf, sendbuf, count * es);
        return;
    }
    auto work = t.scratch(count * es);
    t.copy(work.data(), sendbuf, count * es);
    const auto own = detail::free_ranges(h, count);
    detail::hierarchical_reduce_scatter(t, h, work.data(), own, red, opt.flat);
    const detail::owned_range mine = own[static_cast<std::size_t>(me)];
    if (me != root) {
        if (mine.count > 0) t.send(root, work.data() + mine.offset * es, mine.count * es);
        return;
    }
    auto* out = static_cast<std::byte*>(recvbuf);
    std::vector<recv_message> recvs;
    for (int r = 0; r < p; ++r) {
        const detail::owned_range& o = own[static_cast<std::size_t>(r)];
        if (r != me && o.count > 0) recvs.push_back({r, out + o.offset * es, o.count * es});
    }
    t.copy(out + mine.offset * es, work.data() + mine.offset * es, mine.count * es);
    t.exchange({}, recvs);
}

/// MPI form on a communicator's topology: like MPI_Reduce (sendbuf may be MPI_IN_PLACE at
/// the root). Throws shunt::unsupported for what it leaves to the library (see
/// mpi_reduction; negative counts, a root out of range).
inline void reduce(const topology& topo, const void* sendbuf, void* recvbuf, std::int64_t count, MPI_Datatype type,
                   MPI_Op op, int root, const collective_options& opt = {}) {
    if (count < 0) throw unsupported("reduce: negative count");
    if (root < 0 || root >= topo.size()) throw unsupported("reduce: root out of range");
    mpi_reduction red(type, op);
    mpi_transport t(topo.comm());
    reduce(t, topo.groups(opt.levels), sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, recvbuf, count, red, root, opt);
}

}  // namespace shunt
