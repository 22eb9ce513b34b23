// shunt/collectives/bcast.hpp: hierarchical broadcast (scatter inside the root's group, then allgather over the levels).
#pragma once

#include <shunt/collectives/mpi_call.hpp>
#include <shunt/collectives/mpi_transport.hpp>
#include <shunt/collectives/pipeline.hpp>
#include <shunt/collectives/schedule.hpp>
#include <shunt/collectives/transport.hpp>
#include <shunt/errors.hpp>
#include <shunt/topology/hierarchy.hpp>
#include <shunt/topology/topology.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace shunt {

/// Broadcast of `bytes` bytes at `buf` from rank `root` to every rank.
///
/// Contract across ranks: every rank of t's group calls it, in the same order relative to
/// other collectives on t, with the same root, bytes, hierarchy and options; blocking.
/// Schedule: up to opt.bcast_tree_bytes, binomial trees level by level (the root's
/// representatives cross each level once). Above, the root scatters the message over its
/// outermost group (e.g. its node), each part crosses the outer level once to its owner's
/// representatives, and every group allgathers the parts inward, so each rank and link
/// carries about one copy.
template <transport T>
void bcast(T& t, const hierarchy& h, void* buf, std::int64_t bytes, int root, const collective_options& opt = {}) {
    detail::check_hierarchy(t, h);
    if (bytes <= 0 || t.size() == 1) return;
    const int p = t.size(), me = t.rank();
    auto* data = static_cast<std::byte*>(buf);
    std::vector<detail::owned_range> own(static_cast<std::size_t>(p));
    std::vector<int> group;  // the ranks the root scatters to (none for trees)
    if (bytes <= opt.bcast_tree_bytes) {
        own[static_cast<std::size_t>(root)] = {0, bytes};
    } else {
        // The root's group at the outermost described level (the whole group without levels).
        const int k = h.levels() > 0 ? h.levels() - 1 : 0;
        const auto members = h.members(k, h.group_of(k, root));
        group.assign(members.begin(), members.end());
        const auto parts = static_cast<std::int64_t>(group.size());
        for (std::int64_t i = 0; i < parts; ++i)
            own[static_cast<std::size_t>(group[static_cast<std::size_t>(i)])] = detail::balanced_part(bytes, parts, i);
    }
    const bool in_group = std::find(group.begin(), group.end(), me) != group.end();
    const int chunks = detail::pipeline_chunks(t, bytes, opt);
    if (chunks == 1) {
        if (me == root) {
            std::vector<send_message> sends;
            for (int r : group)
                if (r != root)
                    sends.push_back(
                        {r, data + own[static_cast<std::size_t>(r)].offset, own[static_cast<std::size_t>(r)].count});
            t.exchange(sends, {});
        } else if (in_group && own[static_cast<std::size_t>(me)].count > 0) {
            t.recv(root, data + own[static_cast<std::size_t>(me)].offset, own[static_cast<std::size_t>(me)].count);
        }
        detail::hierarchical_allgather(t, h, data, 1, own, opt.flat, opt);
        return;
    }
    // Pipelined: each chunk's pieces gathered in scratch memory (the root's own piece copied in,
    // the group's received there), then copied out everywhere but at the root.
    detail::pipelined(t, chunks, opt.pipeline_depth, [&](auto& tc, int c) {
        const auto pk = detail::pack_chunk(own, chunks, c);
        auto piece = tc.scratch(pk.total);
        std::byte* const b = piece.data();
        const auto at = [&](int r) { return pk.local[static_cast<std::size_t>(r)]; };
        if (me == root) {
            std::vector<send_message> sends;
            for (int r : group)
                if (r != root) sends.push_back({r, data + pk.from[static_cast<std::size_t>(r)].offset, at(r).count});
            tc.exchange(sends, {});
            detail::gather_chunk(tc, b, data, pk, 1, [root](int r) { return r == root; });
        } else if (in_group && at(me).count > 0) {
            tc.recv(root, b + at(me).offset, at(me).count);
        }
        detail::hierarchical_allgather(tc, h, b, 1, pk.local, opt.flat, opt);
        if (me != root) detail::scatter_chunk(tc, data, b, pk, 1, detail::every_owner);
    });
}

/// MPI form on a communicator's topology: like MPI_Bcast. Throws shunt::unsupported for types
/// whose data is not dense, negative counts and roots out of range.
inline void bcast(const topology& topo, void* buf, std::int64_t count, MPI_Datatype type, int root,
                  const collective_options& opt = {}) {
    if (count < 0) throw unsupported("bcast: negative count");
    if (root < 0 || root >= topo.size()) throw unsupported("bcast: root out of range");
    const std::int64_t es = detail::dense_size(type);
    if (es <= 0) throw unsupported("bcast: datatype is not a dense element type");
    mpi_transport t(topo.comm(), opt);
    bcast(t, topo.groups(opt.levels), buf, count * es, root, opt);
}

/// MPI_Bcast as the preload library runs it (see mpi_allreduce and mpi_allgather); the buffer is
/// the descriptor's recvbuf, its count and datatype recvcount and recvtype.
struct mpi_bcast {
    static constexpr coll_op op = coll_op::bcast;
    static mpi_coll_args describe(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
        return {.recvbuf = buffer, .recvcount = count, .recvtype = datatype, .root = root, .comm = comm};
    }
    static int library(const mpi_coll_args& a) {
        return PMPI_Bcast(a.recvbuf, a.recvcount, a.recvtype, a.root, a.comm);
    }
    /// The library's nonblocking form of the call (MPI_Ibcast).
    static int ilibrary(const mpi_coll_args& a, MPI_Request* request) {
        return PMPI_Ibcast(a.recvbuf, a.recvcount, a.recvtype, a.root, a.comm, request);
    }
#if MPI_VERSION >= 4
    /// The library's persistent form (MPI_Bcast_init) of the call.
    static int library_init(const mpi_coll_args& a, MPI_Info info, MPI_Request* request) {
        return PMPI_Bcast_init(a.recvbuf, a.recvcount, a.recvtype, a.root, a.comm, info, request);
    }
#endif
    static pass_reason early(const mpi_coll_args& a, bool, mpi_coll_facts&, std::int64_t& key) {
        if (a.recvcount == 0) return pass_reason::empty;
        key = mpi_key_bytes(a.recvcount, a.recvtype, false, a.comm);
        return pass_reason::none;
    }
    static pass_reason check(const mpi_coll_args& a, type_source& types, mpi_coll_facts& f) {
        int inter = 0;
        if (a.recvcount < 0 || PMPI_Comm_test_inter(a.comm, &inter) != MPI_SUCCESS || inter ||
            PMPI_Comm_size(a.comm, &f.size) != MPI_SUCCESS || PMPI_Comm_rank(a.comm, &f.me) != MPI_SUCCESS ||
            a.root < 0 || a.root >= f.size)
            return pass_reason::bad_argument;
        f.rt = detail::facts_of(a.recvtype, types);
        if (!f.rt.ok || f.rt.size == 0 || detail::null_buffer(a.recvbuf, f.rt)) return pass_reason::bad_argument;
        f.bytes = a.recvcount * f.rt.size;
        return pass_reason::none;
    }
    static void spans(const mpi_coll_args& a, const mpi_coll_facts& f, mpi_coll_spans& out) {
        byte_span span;
        span.add(a.recvtype, a.recvcount);
        out.push_back({false, span, f.me == a.root, f.me != a.root});
    }
    static void run(const topology& topo, const mpi_coll_args& a, const mpi_coll_facts& f,
                    const collective_options& opt) {
        mpi_transport t(topo.comm(), opt);
        detail::byte_image image(a.recvbuf, a.recvcount, a.recvtype, f.rt);
        if (f.me == a.root) image.pack();
        bcast(t, topo.groups(opt.levels), image.data(), image.bytes(), a.root);
        if (f.me != a.root) image.unpack();
    }
};

}  // namespace shunt
