// shunt/collectives/reduce.hpp: hierarchical reduce to a root (partitioned reduce-scatter up the levels, then a gather of the parts).
#pragma once

#include <shunt/collectives/mpi_call.hpp>
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
    mpi_transport t(topo.comm(), opt);
    reduce(t, topo.groups(opt.levels), sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, recvbuf, count, red, root, opt);
}

/// MPI_Reduce as the preload library runs it (see mpi_allreduce for the members).
struct mpi_reduce {
    static constexpr coll_op op = coll_op::reduce;
    static mpi_coll_args describe(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                                  int root, MPI_Comm comm) {
        return {.sendbuf = sendbuf,
                .recvbuf = recvbuf,
                .recvcount = count,
                .recvtype = datatype,
                .op = op,
                .root = root,
                .comm = comm};
    }
    static int library(const mpi_coll_args& a) {
        return PMPI_Reduce(a.sendbuf, a.recvbuf, a.recvcount, a.recvtype, a.op, a.root, a.comm);
    }
    /// The library's nonblocking form of the call (MPI_Ireduce).
    static int ilibrary(const mpi_coll_args& a, MPI_Request* request) {
        return PMPI_Ireduce(a.sendbuf, a.recvbuf, a.recvcount, a.recvtype, a.op, a.root, a.comm, request);
    }
#if MPI_VERSION >= 4
    /// The library's persistent form (MPI_Reduce_init) of the call.
    static int library_init(const mpi_coll_args& a, MPI_Info info, MPI_Request* request) {
        return PMPI_Reduce_init(a.sendbuf, a.recvbuf, a.recvcount, a.recvtype, a.op, a.root, a.comm, info, request);
    }
#endif
    static pass_reason early(const mpi_coll_args& a, bool measure_all, mpi_coll_facts& f, std::int64_t& key) {
        if (PMPI_Comm_size(a.comm, &f.size) != MPI_SUCCESS || PMPI_Comm_rank(a.comm, &f.me) != MPI_SUCCESS)
            return pass_reason::bad_argument;
        if (a.recvcount == 0) return pass_reason::empty;
        f.live = measure_all || detail::exact_reduction(a.recvtype, a.op);
        key = mpi_key_bytes(a.recvcount, a.recvtype, false, a.comm);
        return pass_reason::none;
    }
    static pass_reason check(const mpi_coll_args& a, type_source& types, mpi_coll_facts& f) {
        if (a.recvcount < 0 || a.root < 0 || a.root >= f.size || a.sendbuf == nullptr ||
            (f.me == a.root && (a.recvbuf == nullptr || a.sendbuf == a.recvbuf)))
            return pass_reason::bad_argument;
        if (const pass_reason why = detail::reduction_element(a.recvtype, a.op, types, f.es); why != pass_reason::none)
            return why;
        f.bytes = f.es * a.recvcount;
        return pass_reason::none;
    }
    static void spans(const mpi_coll_args& a, const mpi_coll_facts& f, mpi_coll_spans& out) {
        byte_span span;
        span.add(a.recvtype, a.recvcount);
        out.push_back({true, span, true, false});
        if (f.me == a.root) out.push_back({false, span, a.sendbuf == MPI_IN_PLACE, true});
    }
    static void run(const topology& topo, const mpi_coll_args& a, const mpi_coll_facts&,
                    const collective_options& opt) {
        reduce(topo, a.sendbuf, a.recvbuf, a.recvcount, a.recvtype, a.op, a.root, opt);
    }
};

}  // namespace shunt
