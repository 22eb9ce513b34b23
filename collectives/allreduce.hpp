// shunt/collectives/allreduce.hpp: hierarchical allreduce (partitioned reduce-scatter up the levels, allgather back down).
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

namespace shunt {

/// Allreduce: every rank ends with the reduction of all ranks' `count` elements.
///
/// Contract across ranks: every rank of t's group calls it, in the same order relative to
/// other collectives on t, with the same count, reduction (type and op), hierarchy (t.size()
/// ranks) and options; blocking. sendbuf == recvbuf means in place. The reduction must be
/// commutative. Schedule: reduce-scatter inside each innermost group, then at each level only
/// on the part each rank owns, the top level exchanging the smallest parts, then allgather
/// back down; every rank owns a part, none leads. Large vectors run pipelined in chunks
/// (opt.pipeline_bytes, collectives/pipeline.hpp). The combination order depends only on the
/// hierarchy and count, not on the chunks: results are identical run to run and on every rank.
template <transport T>
void allreduce(T& t, const hierarchy& h, const void* sendbuf, void* recvbuf, std::int64_t count,
               const typename T::reduction_type& red, const collective_options& opt = {}) {
    detail::check_hierarchy(t, h);
    const std::int64_t es = red.element_size();
    auto* work = static_cast<std::byte*>(recvbuf);
    if (count <= 0) return;
    const int chunks = t.size() == 1 ? 1 : detail::pipeline_chunks(t, count * es, opt);
    if (chunks == 1 && sendbuf != recvbuf) t.copy(work, sendbuf, count * es);
    if (t.size() == 1) return;
    const auto own = detail::free_ranges(h, count);
    if (chunks == 1) {
        detail::hierarchical_reduce_scatter(t, h, work, own, red, opt.flat);
        detail::hierarchical_allgather(t, h, work, es, own, opt.flat, opt);
        return;
    }
    // Each chunk packed into scratch memory straight from the input, reduced there, copied out.
    detail::pipelined(t, chunks, opt.pipeline_depth, [&](auto& tc, int c) {
        const auto pk = detail::pack_chunk(own, chunks, c);
        auto buf = tc.scratch(pk.total * es);
        detail::gather_chunk(tc, buf.data(), static_cast<const std::byte*>(sendbuf), pk, es, detail::every_owner);
        detail::hierarchical_reduce_scatter(tc, h, buf.data(), pk.local, red, opt.flat);
        detail::hierarchical_allgather(tc, h, buf.data(), es, pk.local, opt.flat, opt);
        detail::scatter_chunk(tc, work, buf.data(), pk, es, detail::every_owner);
    });
}

/// MPI form on a communicator's topology: like MPI_Allreduce on the communicator topo was
/// built for (sendbuf may be MPI_IN_PLACE), over topo.groups(opt.levels). Throws shunt::unsupported for
/// what it leaves to the library (see mpi_reduction; negative counts).
inline void allreduce(const topology& topo, const void* sendbuf, void* recvbuf, std::int64_t count, MPI_Datatype type,
                      MPI_Op op, const collective_options& opt = {}) {
    if (count < 0) throw unsupported("allreduce: negative count");
    mpi_reduction red(type, op);
    mpi_transport t(topo.comm(), opt);
    allreduce(t, topo.groups(opt.levels), sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, recvbuf, count, red, opt);
}

/// MPI_Allreduce as the preload library runs it (collectives/mpi_call.hpp's descriptor): the
/// descriptor of a call, the library's call, the checks that leave it to the library, the device
/// spans, shunt's schedule. Every collective shunt runs has such a form, mpi_<name> for
/// MPI_<Name>, with these members; the preload library's executor is written against them.
struct mpi_allreduce {
    static constexpr coll_op op = coll_op::allreduce;
    /// The descriptor of a call of MPI_Allreduce's arguments.
    static mpi_coll_args describe(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                                  MPI_Comm comm) {
        return {
            .sendbuf = sendbuf, .recvbuf = recvbuf, .recvcount = count, .recvtype = datatype, .op = op, .comm = comm};
    }
    static int library(const mpi_coll_args& a) {
        return PMPI_Allreduce(a.sendbuf, a.recvbuf, a.recvcount, a.recvtype, a.op, a.comm);
    }
    /// The library's nonblocking form of the call (MPI_Iallreduce).
    static int ilibrary(const mpi_coll_args& a, MPI_Request* request) {
        return PMPI_Iallreduce(a.sendbuf, a.recvbuf, a.recvcount, a.recvtype, a.op, a.comm, request);
    }
#if MPI_VERSION >= 4
    /// The library's persistent form (MPI_Allreduce_init) of the call.
    static int library_init(const mpi_coll_args& a, MPI_Info info, MPI_Request* request) {
        return PMPI_Allreduce_init(a.sendbuf, a.recvbuf, a.recvcount, a.recvtype, a.op, a.comm, info, request);
    }
#endif
    /// Before the settled-decision lookup: why the library runs the call at once; the lookup's key
    /// (-1: none) and whether the call may be measured (`measure_all`: SHUNT_COLL=measure).
    static pass_reason early(const mpi_coll_args& a, bool measure_all, mpi_coll_facts& f, std::int64_t& key) {
        if (a.recvcount == 0) return pass_reason::empty;
        f.live = measure_all || detail::exact_reduction(a.recvtype, a.op);
        key = mpi_key_bytes(a.recvcount, a.recvtype, false, a.comm);
        return pass_reason::none;
    }
    /// The remaining checks; fills f.bytes and what run() needs.
    static pass_reason check(const mpi_coll_args& a, type_source& types, mpi_coll_facts& f) {
        if (a.recvcount < 0 || a.recvbuf == nullptr || a.sendbuf == a.recvbuf) return pass_reason::bad_argument;
        if (const pass_reason why = detail::reduction_element(a.recvtype, a.op, types, f.es); why != pass_reason::none)
            return why;
        f.bytes = f.es * a.recvcount;
        return pass_reason::none;
    }
    /// The bytes each buffer's elements occupy, read and written.
    static void spans(const mpi_coll_args& a, const mpi_coll_facts&, mpi_coll_spans& out) {
        byte_span span;
        span.add(a.recvtype, a.recvcount);
        out.push_back({true, span, true, false});
        out.push_back({false, span, a.sendbuf == MPI_IN_PLACE, true});
    }
    /// shunt's schedule, on every rank of the call.
    static void run(const topology& topo, const mpi_coll_args& a, const mpi_coll_facts&,
                    const collective_options& opt) {
        allreduce(topo, a.sendbuf, a.recvbuf, a.recvcount, a.recvtype, a.op, opt);
    }
};

}  // namespace shunt
