// shunt/collectives/allgather.hpp: hierarchical allgather (top level first on the smallest parts, then down the levels).
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
#include <cstring>
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
    std::vector<detail::owned_range> own(static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r) own[static_cast<std::size_t>(r)] = {r * bytes, bytes};
    const int chunks = detail::pipeline_chunks(t, p * bytes, opt);
    if (chunks == 1) {
        t.copy(out + me * bytes, sendbuf, bytes);  // nothing to do in place
        detail::hierarchical_allgather(t, h, out, 1, own, opt.flat, opt);
        return;
    }
    // Pipelined: this rank's piece of each chunk packed into scratch memory, gathered there,
    // every piece copied out.
    const auto* in = static_cast<const std::byte*>(sendbuf) - me * bytes;  // as if the input were in place
    detail::pipelined(t, chunks, opt.pipeline_depth, [&](auto& tc, int c) {
        const auto pk = detail::pack_chunk(own, chunks, c);
        auto buf = tc.scratch(pk.total);
        detail::gather_chunk(tc, buf.data(), in, pk, 1, [me](int r) { return r == me; });
        detail::hierarchical_allgather(tc, h, buf.data(), 1, pk.local, opt.flat, opt);
        detail::scatter_chunk(tc, out, buf.data(), pk, 1, detail::every_owner);
    });
}

/// MPI form on a communicator's topology: like MPI_Allgather with sendtype/sendcount equal to
/// recvtype/recvcount (sendbuf may be MPI_IN_PLACE). Throws shunt::unsupported for types whose
/// data is not dense and negative counts.
inline void allgather(const topology& topo, const void* sendbuf, void* recvbuf, std::int64_t count, MPI_Datatype type,
                      const collective_options& opt = {}) {
    if (count < 0) throw unsupported("allgather: negative count");
    const std::int64_t es = detail::dense_size(type);
    if (es <= 0) throw unsupported("allgather: datatype is not a dense element type");
    mpi_transport t(topo.comm(), opt);
    const void* mine =
        sendbuf == MPI_IN_PLACE ? static_cast<const std::byte*>(recvbuf) + topo.rank() * count * es : sendbuf;
    allgather(t, topo.groups(opt.levels), mine, recvbuf, count * es, opt);
}

/// MPI_Allgather as the preload library runs it (see mpi_allreduce for the members): the send and
/// receive datatypes may differ, and differ between ranks, as MPI allows; what is not dense is
/// packed into a contiguous image (shunt's host packer, or the library's for a type shunt does not
/// know) and unpacked after.
struct mpi_allgather {
    static constexpr coll_op op = coll_op::allgather;
    static mpi_coll_args describe(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
        return mpi_block_args(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    }
    static int library(const mpi_coll_args& a) {
        return PMPI_Allgather(a.sendbuf, a.sendcount, a.sendtype, a.recvbuf, a.recvcount, a.recvtype, a.comm);
    }
    /// The library's nonblocking form of the call (MPI_Iallgather).
    static int ilibrary(const mpi_coll_args& a, MPI_Request* request) {
        return PMPI_Iallgather(a.sendbuf, a.sendcount, a.sendtype, a.recvbuf, a.recvcount, a.recvtype, a.comm, request);
    }
#if MPI_VERSION >= 4
    /// The library's persistent form (MPI_Allgather_init) of the call.
    static int library_init(const mpi_coll_args& a, MPI_Info info, MPI_Request* request) {
        return PMPI_Allgather_init(a.sendbuf, a.sendcount, a.sendtype, a.recvbuf, a.recvcount, a.recvtype, a.comm, info,
                                   request);
    }
#endif
    static pass_reason early(const mpi_coll_args& a, bool, mpi_coll_facts&, std::int64_t& key) {
        if (a.recvcount == 0) return pass_reason::empty;
        key = mpi_key_bytes(a.recvcount, a.recvtype, true, a.comm);
        return pass_reason::none;
    }
    static pass_reason check(const mpi_coll_args& a, type_source& types, mpi_coll_facts& f) {
        if (a.recvcount < 0 || detail::aliased(a.sendbuf, a.recvbuf) ||
            PMPI_Comm_size(a.comm, &f.size) != MPI_SUCCESS || PMPI_Comm_rank(a.comm, &f.me) != MPI_SUCCESS)
            return pass_reason::bad_argument;
        return detail::block_types(a, types, f);
    }
    static void spans(const mpi_coll_args& a, const mpi_coll_facts& f, mpi_coll_spans& out) {
        const bool in_place = a.sendbuf == MPI_IN_PLACE;
        byte_span send, recv;
        if (!in_place) send.add(a.sendtype, a.sendcount);  // ignored, maybe invalid, in place
        recv.add(a.recvtype, std::int64_t{a.recvcount} * f.size);
        out.push_back({true, send, true, false});
        out.push_back({false, recv, in_place, true});
    }
    static void run(const topology& topo, const mpi_coll_args& a, const mpi_coll_facts& f,
                    const collective_options& opt) {
        mpi_transport t(topo.comm(), opt);
        detail::byte_image all(a.recvbuf, std::int64_t{a.recvcount} * f.size, a.recvtype, f.rt);
        std::byte* mine = all.data() + f.me * f.block;
        if (a.sendbuf == MPI_IN_PLACE) {
            if (all.staged()) {
                detail::byte_image own(static_cast<char*>(a.recvbuf) + f.me * a.recvcount * f.rt.extent, a.recvcount,
                                       a.recvtype, f.rt);
                own.pack();
                std::memcpy(mine, own.data(), static_cast<std::size_t>(f.block));
            }
        } else {
            detail::byte_image send(const_cast<void*>(a.sendbuf), a.sendcount, a.sendtype, f.st);
            send.pack();
            std::memcpy(mine, send.data(), static_cast<std::size_t>(f.block));
        }
        allgather(t, topo.groups(opt.levels), mine, all.data(), f.block);
        all.unpack();
    }
};

}  // namespace shunt
