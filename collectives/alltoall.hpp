// shunt/collectives/alltoall.hpp: node-aware alltoall (messages aggregated per group before they cross the outer level).
#pragma once

#include <shunt/collectives/mpi_call.hpp>
#include <shunt/collectives/mpi_transport.hpp>
#include <shunt/collectives/transport.hpp>
#include <shunt/errors.hpp>
#include <shunt/topology/hierarchy.hpp>
#include <shunt/topology/topology.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

namespace shunt {

namespace detail {

/// How the caller's group at level k of `h` aggregates an alltoall: its group, the group's
/// members and the caller's position in it, and which destinations each member collects.
struct aggregation {
    aggregation(const hierarchy& hier, int level, int me)
        : h(hier),
          k(level),
          my_group(hier.group_of(level, me)),
          mine(hier.members(level, my_group)),
          g(static_cast<int>(mine.size())),
          my_pos(hier.position(level, me)),
          dests(static_cast<std::size_t>(g)) {
        for (int y = 0; y < h.size(); ++y)
            dests[static_cast<std::size_t>(h.position(k, rep_in(my_group, y)))].push_back(y);
    }
    /// The member of `group` that forwards blocks for y into y's group (y itself inside it).
    int rep_in(int group, int y) const {
        if (h.group_of(k, y) == group) return y;
        auto m = h.members(k, group);
        return m[static_cast<std::size_t>(h.position(k, y)) % m.size()];
    }

    const hierarchy& h;
    int k, my_group;
    std::span<const int> mine;
    int g, my_pos;
    /// dests[z]: the ranks whose blocks member z of the caller's group collects, ascending.
    std::vector<std::vector<int>> dests;
};

}  // namespace detail

/// Alltoall of `bytes` bytes per pair: the block at sendbuf + j*bytes of rank i lands at
/// recvbuf + i*bytes of rank j.
///
/// Contract across ranks: every rank of t's group calls it, in the same order relative to
/// other collectives on t, with the same bytes, hierarchy and options; blocking. sendbuf ==
/// recvbuf means in place. Schedule, with G the groups of level opt.alltoall_level (default:
/// the outermost described level, e.g. nodes): each rank x hands its blocks for rank y outside
/// its group to y's representative in x's group (the member at y's position in y's group,
/// modulo the group size) and its blocks for its own group directly; then each representative
/// sends one aggregated message per destination, holding the blocks of its whole group. So a
/// rank sends about one message per other group across the outer level instead of one per
/// rank. Without levels, a flat pairwise exchange.
template <transport T>
void alltoall(T& t, const hierarchy& h, const void* sendbuf, void* recvbuf, std::int64_t bytes,
              const collective_options& opt = {}) {
    if (h.size() != t.size())
        throw std::invalid_argument("alltoall: the hierarchy does not match the transport's group size");
    if (bytes <= 0) return;
    const int p = t.size(), me = t.rank();
    auto* out = static_cast<std::byte*>(recvbuf);
    // In place: the input must survive until the blocks for other ranks have been sent.
    auto copy_in = t.scratch(sendbuf == recvbuf ? p * bytes : 0);
    const std::byte* in = static_cast<const std::byte*>(sendbuf);
    if (sendbuf == recvbuf) {
        t.copy(copy_in.data(), recvbuf, p * bytes);
        in = copy_in.data();
    }
    auto blk = [&](const std::byte* base, std::int64_t i) { return base + i * bytes; };
    auto oblk = [&](std::int64_t i) { return out + i * bytes; };

    const int k = opt.alltoall_level < 0 ? h.levels() - 1 : opt.alltoall_level;
    if (k < 0 || k >= h.levels()) {
        // Flat: every pair exchanges directly.
        std::vector<send_message> sends;
        std::vector<recv_message> recvs;
        for (int j = 0; j < p; ++j) {
            if (j == me) continue;
            sends.push_back({j, blk(in, j), bytes});
            recvs.push_back({j, oblk(j), bytes});
        }
        t.copy(oblk(me), blk(in, me), bytes);
        t.exchange(sends, recvs);
        return;
    }

    const detail::aggregation agg(h, k, me);
    const int my_group = agg.my_group, g = agg.g, my_pos = agg.my_pos;
    const auto mine = agg.mine;
    const auto& dests = agg.dests;
    auto rep_in = [&](int group, int y) { return agg.rep_in(group, y); };
    const auto& my_dests = dests[static_cast<std::size_t>(my_pos)];
    const auto nd = static_cast<std::int64_t>(my_dests.size());
    std::vector<int> outside;  // the destinations I forward to, outside my group
    for (int y : my_dests)
        if (y != me) outside.push_back(y);
    const auto n_out = static_cast<std::int64_t>(outside.size());

    // Phase 1, inside my group: to member z my blocks for dests[z]; from member z its blocks
    // for my dests, into inbox[z].
    auto pack = t.scratch(p * bytes);
    auto inbox = t.scratch(static_cast<std::int64_t>(g) * nd * bytes);
    std::vector<std::int64_t> first(static_cast<std::size_t>(g) + 1, 0);
    {
        std::int64_t pos = 0;
        for (int zi = 0; zi < g; ++zi) {
            first[static_cast<std::size_t>(zi)] = pos;
            for (int y : dests[static_cast<std::size_t>(zi)]) t.copy(pack.data() + (pos++) * bytes, blk(in, y), bytes);
        }
        first[static_cast<std::size_t>(g)] = pos;
    }
    {
        std::vector<send_message> sends;
        std::vector<recv_message> recvs;
        for (int zi = 0; zi < g; ++zi) {
            if (zi == my_pos) continue;
            sends.push_back({zi, pack.data() + first[static_cast<std::size_t>(zi)] * bytes,
                             static_cast<std::int64_t>(dests[static_cast<std::size_t>(zi)].size()) * bytes});
            recvs.push_back({zi, inbox.data() + zi * nd * bytes, nd * bytes});
        }
        t.copy(inbox.data() + my_pos * nd * bytes, pack.data() + first[static_cast<std::size_t>(my_pos)] * bytes,
               nd * bytes);
        group_view<T> grp(t, mine);
        grp.exchange(sends, recvs);
    }
    // Blocks for me go to recvbuf; blocks to forward are regrouped per destination:
    // stage[y][z] = block z -> outside[y], so each forwarded message is contiguous.
    auto stage = t.scratch(n_out * g * bytes);
    for (int zi = 0; zi < g; ++zi) {
        std::int64_t yo = 0;
        for (std::int64_t yi = 0; yi < nd; ++yi) {
            const std::byte* src = inbox.data() + (zi * nd + yi) * bytes;
            if (my_dests[static_cast<std::size_t>(yi)] == me)
                t.copy(oblk(mine[static_cast<std::size_t>(zi)]), src, bytes);
            else
                t.copy(stage.data() + (yo++ * g + zi) * bytes, src, bytes);
        }
    }

    // Phase 2, across groups: to each outside destination, my group's blocks for it; from each
    // other group, its blocks for me (straight into recvbuf when its ranks are consecutive).
    std::vector<send_message> sends;
    std::vector<recv_message> recvs;
    for (std::int64_t yo = 0; yo < n_out; ++yo)
        sends.push_back({outside[static_cast<std::size_t>(yo)], stage.data() + yo * g * bytes,
                         static_cast<std::int64_t>(g) * bytes});
    std::int64_t scattered = 0;
    for (int grp = 0; grp < h.groups(k); ++grp) {
        const auto m = h.members(k, grp);
        if (grp != my_group && m.back() - m.front() + 1 != static_cast<int>(m.size()))
            scattered += static_cast<std::int64_t>(m.size());
    }
    auto land = t.scratch(scattered * bytes);
    std::int64_t pos = 0;
    for (int grp = 0; grp < h.groups(k); ++grp) {
        if (grp == my_group) continue;
        const auto m = h.members(k, grp);
        const auto len = static_cast<std::int64_t>(m.size()) * bytes;
        if (m.back() - m.front() + 1 == static_cast<int>(m.size())) {
            recvs.push_back({rep_in(grp, me), oblk(m.front()), len});
        } else {
            recvs.push_back({rep_in(grp, me), land.data() + pos * bytes, len});
            pos += static_cast<std::int64_t>(m.size());
        }
    }
    t.exchange(sends, recvs);
    pos = 0;
    for (int grp = 0; grp < h.groups(k); ++grp) {
        const auto m = h.members(k, grp);
        if (grp == my_group || m.back() - m.front() + 1 == static_cast<int>(m.size())) continue;
        for (int z : m) t.copy(oblk(z), land.data() + (pos++) * bytes, bytes);
    }
}

/// MPI form on a communicator's topology: like MPI_Alltoall with sendtype/sendcount equal to
/// recvtype/recvcount (sendbuf may be MPI_IN_PLACE). Throws shunt::unsupported for types whose
/// data is not dense and negative counts.
inline void alltoall(const topology& topo, const void* sendbuf, void* recvbuf, std::int64_t count, MPI_Datatype type,
                     const collective_options& opt = {}) {
    if (count < 0) throw unsupported("alltoall: negative count");
    const std::int64_t es = detail::dense_size(type);
    if (es <= 0) throw unsupported("alltoall: datatype is not a dense element type");
    mpi_transport t(topo.comm(), opt);
    alltoall(t, topo.groups(opt.levels), sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, recvbuf, count * es, opt);
}

/// MPI_Alltoall as the preload library runs it (see mpi_allreduce and mpi_allgather).
struct mpi_alltoall {
    static constexpr coll_op op = coll_op::alltoall;
    static mpi_coll_args describe(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
        return mpi_block_args(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    }
    static int library(const mpi_coll_args& a) {
        return PMPI_Alltoall(a.sendbuf, a.sendcount, a.sendtype, a.recvbuf, a.recvcount, a.recvtype, a.comm);
    }
    /// The library's nonblocking form of the call (MPI_Ialltoall).
    static int ilibrary(const mpi_coll_args& a, MPI_Request* request) {
        return PMPI_Ialltoall(a.sendbuf, a.sendcount, a.sendtype, a.recvbuf, a.recvcount, a.recvtype, a.comm, request);
    }
#if MPI_VERSION >= 4
    /// The library's persistent form (MPI_Alltoall_init) of the call.
    static int library_init(const mpi_coll_args& a, MPI_Info info, MPI_Request* request) {
        return PMPI_Alltoall_init(a.sendbuf, a.sendcount, a.sendtype, a.recvbuf, a.recvcount, a.recvtype, a.comm, info,
                                  request);
    }
#endif
    static pass_reason early(const mpi_coll_args& a, bool, mpi_coll_facts&, std::int64_t& key) {
        if (a.recvcount == 0) return pass_reason::empty;
        key = mpi_key_bytes(a.recvcount, a.recvtype, true, a.comm);
        return pass_reason::none;
    }
    static pass_reason check(const mpi_coll_args& a, type_source& types, mpi_coll_facts& f) {
        int inter = 0;
        if (a.recvcount < 0 || detail::aliased(a.sendbuf, a.recvbuf) ||
            PMPI_Comm_test_inter(a.comm, &inter) != MPI_SUCCESS || inter ||
            PMPI_Comm_size(a.comm, &f.size) != MPI_SUCCESS)
            return pass_reason::bad_argument;
        return detail::block_types(a, types, f);
    }
    static void spans(const mpi_coll_args& a, const mpi_coll_facts& f, mpi_coll_spans& out) {
        const bool in_place = a.sendbuf == MPI_IN_PLACE;
        byte_span send, recv;
        if (!in_place) send.add(a.sendtype, std::int64_t{a.sendcount} * f.size);
        recv.add(a.recvtype, std::int64_t{a.recvcount} * f.size);
        out.push_back({true, send, true, false});
        out.push_back({false, recv, in_place, true});
    }
    static void run(const topology& topo, const mpi_coll_args& a, const mpi_coll_facts& f,
                    const collective_options& opt) {
        mpi_transport t(topo.comm(), opt);
        detail::byte_image out(a.recvbuf, std::int64_t{a.recvcount} * f.size, a.recvtype, f.rt);
        if (a.sendbuf == MPI_IN_PLACE) {
            out.pack();
            alltoall(t, topo.groups(opt.levels), out.data(), out.data(), f.block);
        } else {
            detail::byte_image in(const_cast<void*>(a.sendbuf), std::int64_t{a.sendcount} * f.size, a.sendtype, f.st);
            in.pack();
            alltoall(t, topo.groups(opt.levels), in.data(), out.data(), f.block);
        }
        out.unpack();
    }
};

}  // namespace shunt
