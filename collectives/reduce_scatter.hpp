// shunt/collectives/reduce_scatter.hpp: hierarchical reduce-scatter with a count per rank (MPI_Reduce_scatter).
#pragma once

#include <shunt/collectives/mpi_call.hpp>
#include <shunt/collectives/mpi_transport.hpp>
#include <shunt/collectives/pipeline.hpp>
#include <shunt/collectives/schedule.hpp>
#include <shunt/collectives/transport.hpp>
#include <shunt/errors.hpp>
#include <shunt/topology/hierarchy.hpp>
#include <shunt/topology/topology.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace shunt {

/// Reduce-scatter with counts[i] elements for rank i: rank i ends with elements
/// [sum(counts[0..i)), + counts[i]) of the reduction of all ranks' sum(counts) elements.
///
/// Contract across ranks: every rank of t's group calls it, in the same order relative to
/// other collectives on t, with the same counts, reduction, hierarchy and options; blocking.
/// sendbuf == recvbuf means in place (the input is read from recvbuf and the result is left
/// at its start; the rest of recvbuf is left as it was). The reduction must be commutative.
/// Schedule as reduce_scatter_block (each rank's range goes up through its representatives),
/// with ranges of any length, empty ones included. Deterministic.
template <transport T>
void reduce_scatter(T& t, const hierarchy& h, const void* sendbuf, void* recvbuf, std::span<const std::int64_t> counts,
                    const typename T::reduction_type& red, const collective_options& opt = {}) {
    detail::check_hierarchy(t, h);
    const int p = t.size();
    if (counts.size() != static_cast<std::size_t>(p)) throw std::invalid_argument("reduce_scatter: one count per rank");
    std::vector<detail::owned_range> own(static_cast<std::size_t>(p));
    std::int64_t n = 0;
    for (int r = 0; r < p; ++r) {
        own[static_cast<std::size_t>(r)] = {n, counts[static_cast<std::size_t>(r)]};
        n += counts[static_cast<std::size_t>(r)];
    }
    if (n <= 0) return;
    detail::reduce_scatter_owned(t, h, sendbuf, recvbuf, own, red, opt);
}

/// MPI form on a communicator's topology: like MPI_Reduce_scatter (sendbuf may be
/// MPI_IN_PLACE). Throws shunt::unsupported for what it leaves to the library (see
/// mpi_reduction; negative counts).
inline void reduce_scatter(const topology& topo, const void* sendbuf, void* recvbuf, const int* recvcounts,
                           MPI_Datatype type, MPI_Op op, const collective_options& opt = {}) {
    std::vector<std::int64_t> counts(static_cast<std::size_t>(topo.size()));
    for (int r = 0; r < topo.size(); ++r) {
        if (recvcounts[r] < 0) throw unsupported("reduce_scatter: negative count");
        counts[static_cast<std::size_t>(r)] = recvcounts[r];
    }
    mpi_reduction red(type, op);
    mpi_transport t(topo.comm(), opt);
    reduce_scatter(t, topo.groups(opt.levels), sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, recvbuf, counts, red, opt);
}

/// MPI_Reduce_scatter as the preload library runs it (see mpi_allreduce for the members). No
/// settled-decision lookup before the checks: the key needs every rank's count.
struct mpi_reduce_scatter {
    static constexpr coll_op op = coll_op::reduce_scatter;
    static mpi_coll_args describe(const void* sendbuf, void* recvbuf, const int recvcounts[], MPI_Datatype datatype,
                                  MPI_Op op, MPI_Comm comm) {
        return {.sendbuf = sendbuf,
                .recvbuf = recvbuf,
                .recvcounts = recvcounts,
                .recvtype = datatype,
                .op = op,
                .comm = comm};
    }
    static int library(const mpi_coll_args& a) {
        return PMPI_Reduce_scatter(a.sendbuf, a.recvbuf, a.recvcounts, a.recvtype, a.op, a.comm);
    }
    /// The library's nonblocking form of the call (MPI_Ireduce_scatter).
    static int ilibrary(const mpi_coll_args& a, MPI_Request* request) {
        return PMPI_Ireduce_scatter(a.sendbuf, a.recvbuf, a.recvcounts, a.recvtype, a.op, a.comm, request);
    }
#if MPI_VERSION >= 4
    /// The library's persistent form (MPI_Reduce_scatter_init) of the call.
    static int library_init(const mpi_coll_args& a, MPI_Info info, MPI_Request* request) {
        return PMPI_Reduce_scatter_init(a.sendbuf, a.recvbuf, a.recvcounts, a.recvtype, a.op, a.comm, info, request);
    }
#endif
    static pass_reason early(const mpi_coll_args& a, bool measure_all, mpi_coll_facts& f, std::int64_t& key) {
        int inter = 0;
        if (a.recvcounts == nullptr || a.sendbuf == a.recvbuf || PMPI_Comm_test_inter(a.comm, &inter) != MPI_SUCCESS ||
            inter || PMPI_Comm_size(a.comm, &f.size) != MPI_SUCCESS)
            return pass_reason::bad_argument;
        for (int r = 0; r < f.size; ++r) {
            if (a.recvcounts[r] < 0) return pass_reason::bad_argument;
            f.total += a.recvcounts[r];
        }
        if (f.total == 0) return pass_reason::empty;
        f.live = measure_all || detail::exact_reduction(a.recvtype, a.op);
        key = -1;
        return pass_reason::none;
    }
    static pass_reason check(const mpi_coll_args& a, type_source& types, mpi_coll_facts& f) {
        if (const pass_reason why = detail::reduction_element(a.recvtype, a.op, types, f.es); why != pass_reason::none)
            return why;
        f.bytes = f.es * f.total;
        return pass_reason::none;
    }
    static void spans(const mpi_coll_args& a, const mpi_coll_facts& f, mpi_coll_spans& out) {
        int me = 0;
        if (PMPI_Comm_rank(a.comm, &me) != MPI_SUCCESS) return;
        byte_span all, mine;
        all.add(a.recvtype, f.total);
        mine.add(a.recvtype, a.recvcounts[me]);
        const bool in_place = a.sendbuf == MPI_IN_PLACE;
        out.push_back({true, all, true, false});
        out.push_back({false, in_place ? all : mine, in_place, true});
    }
    static void run(const topology& topo, const mpi_coll_args& a, const mpi_coll_facts&,
                    const collective_options& opt) {
        reduce_scatter(topo, a.sendbuf, a.recvbuf, a.recvcounts, a.recvtype, a.op, opt);
    }
};

}  // namespace shunt
