// shunt/collectives/reduce_scatter_block.hpp: hierarchical reduce-scatter with equal blocks (MPI_Reduce_scatter_block).
#pragma once

#include <shunt/collectives/mpi_call.hpp>
#include <shunt/collectives/mpi_transport.hpp>
#include <shunt/collectives/pipeline.hpp>
#include <shunt/collectives/schedule.hpp>
#include <shunt/collectives/transport.hpp>
#include <shunt/topology/hierarchy.hpp>
#include <shunt/topology/topology.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shunt {

/// Reduce-scatter with blocks of `count` elements: rank i ends with block i of the reduction
/// of all ranks' size()*count elements.
///
/// Contract across ranks: every rank of t's group calls it, in the same order relative to
/// other collectives on t, with the same count, reduction, hierarchy and options; blocking.
/// sendbuf == recvbuf means in place (the input is read from recvbuf, size()*count elements,
/// and the result is left in its first count elements; the rest is left as it was). Otherwise
/// recvbuf receives count elements. The reduction must be commutative. Schedule: each block
/// goes up the hierarchy through the representatives of its owner, reduced at each level over
/// a larger group, so the outer levels carry only the blocks of other groups. Deterministic.
template <transport T>
void reduce_scatter_block(T& t, const hierarchy& h, const void* sendbuf, void* recvbuf, std::int64_t count,
                          const typename T::reduction_type& red, const collective_options& opt = {}) {
    detail::check_hierarchy(t, h);
    if (count <= 0) return;
    const int p = t.size();
    std::vector<detail::owned_range> own(static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r) own[static_cast<std::size_t>(r)] = {r * count, count};
    detail::reduce_scatter_owned(t, h, sendbuf, recvbuf, own, red, opt);
}

/// MPI form on a communicator's topology: like MPI_Reduce_scatter_block (sendbuf may be
/// MPI_IN_PLACE). Throws shunt::unsupported for what it leaves to the library.
inline void reduce_scatter_block(const topology& topo, const void* sendbuf, void* recvbuf, std::int64_t count,
                                 MPI_Datatype type, MPI_Op op, const collective_options& opt = {}) {
    if (count < 0) throw unsupported("reduce_scatter_block: negative count");
    mpi_reduction red(type, op);
    mpi_transport t(topo.comm(), opt);
    reduce_scatter_block(t, topo.groups(opt.levels), sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, recvbuf, count, red,
                         opt);
}

/// MPI_Reduce_scatter_block as the preload library runs it (see mpi_allreduce for the members).
struct mpi_reduce_scatter_block {
    static constexpr coll_op op = coll_op::reduce_scatter_block;
    static mpi_coll_args describe(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype datatype, MPI_Op op,
                                  MPI_Comm comm) {
        return {.sendbuf = sendbuf,
                .recvbuf = recvbuf,
                .recvcount = recvcount,
                .recvtype = datatype,
                .op = op,
                .comm = comm};
    }
    static int library(const mpi_coll_args& a) {
        return PMPI_Reduce_scatter_block(a.sendbuf, a.recvbuf, a.recvcount, a.recvtype, a.op, a.comm);
    }
    /// The library's nonblocking form of the call (MPI_Ireduce_scatter_block).
    static int ilibrary(const mpi_coll_args& a, MPI_Request* request) {
        return PMPI_Ireduce_scatter_block(a.sendbuf, a.recvbuf, a.recvcount, a.recvtype, a.op, a.comm, request);
    }
#if MPI_VERSION >= 4
    /// The library's persistent form (MPI_Reduce_scatter_block_init) of the call.
    static int library_init(const mpi_coll_args& a, MPI_Info info, MPI_Request* request) {
        return PMPI_Reduce_scatter_block_init(a.sendbuf, a.recvbuf, a.recvcount, a.recvtype, a.op, a.comm, info,
                                              request);
    }
#endif
    static pass_reason early(const mpi_coll_args& a, bool measure_all, mpi_coll_facts& f, std::int64_t& key) {
        if (PMPI_Comm_size(a.comm, &f.size) != MPI_SUCCESS) return pass_reason::bad_argument;
        if (a.recvcount == 0) return pass_reason::empty;
        f.live = measure_all || detail::exact_reduction(a.recvtype, a.op);
        key = mpi_key_bytes(a.recvcount, a.recvtype, true, a.comm);
        return pass_reason::none;
    }
    static pass_reason check(const mpi_coll_args& a, type_source& types, mpi_coll_facts& f) {
        if (a.recvcount < 0 || a.recvbuf == nullptr || a.sendbuf == a.recvbuf) return pass_reason::bad_argument;
        if (const pass_reason why = detail::reduction_element(a.recvtype, a.op, types, f.es); why != pass_reason::none)
            return why;
        f.bytes = f.es * a.recvcount * f.size;
        return pass_reason::none;
    }
    static void spans(const mpi_coll_args& a, const mpi_coll_facts& f, mpi_coll_spans& out) {
        byte_span all, mine;
        all.add(a.recvtype, std::int64_t{a.recvcount} * f.size);
        mine.add(a.recvtype, a.recvcount);
        const bool in_place = a.sendbuf == MPI_IN_PLACE;
        out.push_back({true, all, true, false});
        out.push_back({false, in_place ? all : mine, in_place, true});
    }
    static void run(const topology& topo, const mpi_coll_args& a, const mpi_coll_facts&,
                    const collective_options& opt) {
        reduce_scatter_block(topo, a.sendbuf, a.recvbuf, a.recvcount, a.recvtype, a.op, opt);
    }
};

}  // namespace shunt
