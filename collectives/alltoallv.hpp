// shunt/collectives/alltoallv.hpp: node-aware alltoallv (per-pair sizes; messages aggregated per group before they cross the outer level).
#pragma once

#include <shunt/collectives/alltoall.hpp>
#include <shunt/collectives/mpi_call.hpp>
#include <shunt/collectives/mpi_transport.hpp>
#include <shunt/collectives/transport.hpp>
#include <shunt/errors.hpp>
#include <shunt/topology/hierarchy.hpp>
#include <shunt/topology/topology.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <stdexcept>
#include <vector>

namespace shunt {

/// Alltoallv of raw bytes: rank i's block for rank j is send_bytes[j] bytes at sendbuf +
/// send_offsets[j]; it lands at recvbuf + recv_offsets[i] of rank j, which expects
/// recv_bytes[i] bytes from i (equal to i's send_bytes[j]: the caller guarantees it, as MPI does).
///
/// Contract across ranks: every rank of t's group calls it, in the same order relative to other
/// collectives on t, with the same hierarchy and options; blocking. Send and receive blocks must
/// not overlap each other (the MPI form copies the input first for MPI_IN_PLACE). Schedule: as
/// shunt::alltoall, at level opt.alltoall_level (default the outermost described level): each
/// rank hands its blocks for ranks outside its group to their representative in its group,
/// after telling it their sizes, and the representatives send one aggregated message per
/// destination across the level; blocks inside the group go directly. A receiver knows every
/// aggregated message's size from its own receive counts. Without levels, a flat pairwise
/// exchange.
template <transport T>
void alltoallv(T& t, const hierarchy& h, const void* sendbuf, std::span<const std::int64_t> send_bytes,
               std::span<const std::int64_t> send_offsets, void* recvbuf, std::span<const std::int64_t> recv_bytes,
               std::span<const std::int64_t> recv_offsets, const collective_options& opt = {}) {
    const int p = t.size(), me = t.rank();
    if (h.size() != p)
        throw std::invalid_argument("alltoallv: the hierarchy does not match the transport's group size");
    const auto up = static_cast<std::size_t>(p);
    if (send_bytes.size() < up || send_offsets.size() < up || recv_bytes.size() < up || recv_offsets.size() < up)
        throw std::invalid_argument("alltoallv: counts and offsets need one entry per rank");
    const auto* in = static_cast<const std::byte*>(sendbuf);
    auto* out = static_cast<std::byte*>(recvbuf);
    auto sblk = [&](int j) { return in + send_offsets[static_cast<std::size_t>(j)]; };
    auto rblk = [&](int i) { return out + recv_offsets[static_cast<std::size_t>(i)]; };
    auto sn = [&](int j) { return send_bytes[static_cast<std::size_t>(j)]; };
    auto rn = [&](int i) { return recv_bytes[static_cast<std::size_t>(i)]; };

    const int k = opt.alltoall_level < 0 ? h.levels() - 1 : opt.alltoall_level;
    if (k < 0 || k >= h.levels()) {
        std::vector<send_message> sends;
        std::vector<recv_message> recvs;
        for (int j = 0; j < p; ++j) {
            if (j == me) continue;
            if (sn(j) > 0) sends.push_back({j, sblk(j), sn(j)});
            if (rn(j) > 0) recvs.push_back({j, rblk(j), rn(j)});
        }
        if (sn(me) > 0) t.copy(rblk(me), sblk(me), sn(me));
        t.exchange(sends, recvs);
        return;
    }

    const detail::aggregation agg(h, k, me);
    const int my_group = agg.my_group, g = agg.g, my_pos = agg.my_pos;
    const auto mine = agg.mine;
    const auto& dests = agg.dests;
    auto rep_in = [&](int group, int y) { return agg.rep_in(group, y); };
    const auto& my_dests = dests[static_cast<std::size_t>(my_pos)];
    const std::size_t nd = my_dests.size();
    group_view<T> grp(t, mine);

    // Phase 0, inside my group: to member z the sizes of my blocks for dests[z]; from member z
    // the sizes of its blocks for my dests (sizes[z][d]).
    std::vector<std::int64_t> my_sizes(up);
    std::vector<std::int64_t> first(static_cast<std::size_t>(g) + 1, 0);  // start of dests[z] in my_sizes
    {
        std::size_t pos = 0;
        for (int zi = 0; zi < g; ++zi) {
            first[static_cast<std::size_t>(zi)] = static_cast<std::int64_t>(pos);
            for (int y : dests[static_cast<std::size_t>(zi)]) my_sizes[pos++] = sn(y);
        }
        first[static_cast<std::size_t>(g)] = static_cast<std::int64_t>(pos);
    }
    std::vector<std::int64_t> sizes(static_cast<std::size_t>(g) * nd);
    {
        std::vector<send_message> sends;
        std::vector<recv_message> recvs;
        for (int zi = 0; zi < g; ++zi) {
            const auto zs = static_cast<std::size_t>(zi);
            if (zi == my_pos) {
                std::copy_n(my_sizes.begin() + first[zs], nd, sizes.begin() + static_cast<std::ptrdiff_t>(zs * nd));
                continue;
            }
            const auto count = static_cast<std::int64_t>(dests[zs].size());
            if (count > 0)
                sends.push_back(
                    {zi, my_sizes.data() + first[zs], count * static_cast<std::int64_t>(sizeof(std::int64_t))});
            if (nd > 0)
                recvs.push_back({zi, sizes.data() + zs * nd, static_cast<std::int64_t>(nd * sizeof(std::int64_t))});
        }
        grp.exchange(sends, recvs);
    }

    // Phase 1, inside my group: to member z my blocks for dests[z], packed in order; from
    // member z its blocks for my dests, into inbox (member-major, then my dests' order).
    std::int64_t pack_total = 0;
    for (int y = 0; y < p; ++y) pack_total += sn(y);
    auto pack = t.scratch(pack_total);
    std::vector<std::int64_t> pack_at(static_cast<std::size_t>(g) + 1, 0);
    {
        std::int64_t pos = 0;
        for (int zi = 0; zi < g; ++zi) {
            pack_at[static_cast<std::size_t>(zi)] = pos;
            for (int y : dests[static_cast<std::size_t>(zi)]) {
                if (sn(y) > 0) t.copy(pack.data() + pos, sblk(y), sn(y));
                pos += sn(y);
            }
        }
        pack_at[static_cast<std::size_t>(g)] = pos;
    }
    std::vector<std::int64_t> inbox_at(static_cast<std::size_t>(g) * nd + 1, 0);  // block (z, d) offset
    for (std::size_t i = 0; i < static_cast<std::size_t>(g) * nd; ++i) inbox_at[i + 1] = inbox_at[i] + sizes[i];
    auto inbox = t.scratch(inbox_at.back());
    {
        std::vector<send_message> sends;
        std::vector<recv_message> recvs;
        for (int zi = 0; zi < g; ++zi) {
            const auto zs = static_cast<std::size_t>(zi);
            const std::int64_t sbytes = pack_at[zs + 1] - pack_at[zs];
            const std::int64_t rbytes = inbox_at[(zs + 1) * nd] - inbox_at[zs * nd];
            if (zi == my_pos) {
                if (sbytes > 0) t.copy(inbox.data() + inbox_at[zs * nd], pack.data() + pack_at[zs], sbytes);
                continue;
            }
            if (sbytes > 0) sends.push_back({zi, pack.data() + pack_at[zs], sbytes});
            if (rbytes > 0) recvs.push_back({zi, inbox.data() + inbox_at[zs * nd], rbytes});
        }
        grp.exchange(sends, recvs);
    }

    // Blocks for me go to recvbuf; blocks to forward are regrouped per destination (member
    // order inside each), so that each forwarded message is contiguous.
    std::vector<int> outside;
    std::vector<std::size_t> outside_d;  // index into my_dests
    for (std::size_t d = 0; d < nd; ++d)
        if (my_dests[d] != me) outside.push_back(my_dests[d]), outside_d.push_back(d);
    std::vector<std::int64_t> stage_at(outside.size() + 1, 0);
    for (std::size_t o = 0; o < outside.size(); ++o) {
        std::int64_t total = 0;
        for (std::size_t zs = 0; zs < static_cast<std::size_t>(g); ++zs) total += sizes[zs * nd + outside_d[o]];
        stage_at[o + 1] = stage_at[o] + total;
    }
    auto stage = t.scratch(stage_at.back());
    for (std::size_t d = 0; d < nd; ++d) {
        if (my_dests[d] == me) {
            for (std::size_t zs = 0; zs < static_cast<std::size_t>(g); ++zs)
                if (const std::int64_t b = sizes[zs * nd + d]; b > 0)
                    t.copy(rblk(mine[zs]), inbox.data() + inbox_at[zs * nd + d], b);
        }
    }
    for (std::size_t o = 0; o < outside.size(); ++o) {
        std::int64_t pos = stage_at[o];
        for (std::size_t zs = 0; zs < static_cast<std::size_t>(g); ++zs) {
            const std::int64_t b = sizes[zs * nd + outside_d[o]];
            if (b > 0) t.copy(stage.data() + pos, inbox.data() + inbox_at[zs * nd + outside_d[o]], b);
            pos += b;
        }
    }

    // Phase 2, across groups: to each outside destination, my group's blocks for it; from the
    // representative of each other group, that group's blocks for me, whose sizes my receive
    // counts give.
    std::vector<send_message> sends;
    std::vector<recv_message> recvs;
    for (std::size_t o = 0; o < outside.size(); ++o)
        if (stage_at[o + 1] > stage_at[o])
            sends.push_back({outside[o], stage.data() + stage_at[o], stage_at[o + 1] - stage_at[o]});
    std::vector<std::int64_t> land_at(static_cast<std::size_t>(h.groups(k)) + 1, 0);
    for (int gr = 0; gr < h.groups(k); ++gr) {
        std::int64_t total = 0;
        if (gr != my_group)
            for (int x : h.members(k, gr)) total += rn(x);
        land_at[static_cast<std::size_t>(gr) + 1] = land_at[static_cast<std::size_t>(gr)] + total;
    }
    auto land = t.scratch(land_at.back());
    for (int gr = 0; gr < h.groups(k); ++gr) {
        const auto gs = static_cast<std::size_t>(gr);
        if (gr != my_group && land_at[gs + 1] > land_at[gs])
            recvs.push_back({rep_in(gr, me), land.data() + land_at[gs], land_at[gs + 1] - land_at[gs]});
    }
    t.exchange(sends, recvs);
    for (int gr = 0; gr < h.groups(k); ++gr) {
        if (gr == my_group) continue;
        std::int64_t pos = land_at[static_cast<std::size_t>(gr)];
        for (int x : h.members(k, gr)) {
            if (rn(x) > 0) t.copy(rblk(x), land.data() + pos, rn(x));
            pos += rn(x);
        }
    }
}

/// MPI form on a communicator's topology, like MPI_Alltoallv with one dense element type on both
/// sides (counts and displacements in elements of `type`; sendbuf may be MPI_IN_PLACE, when the
/// data to send are in recvbuf under recvcounts and rdispls). Throws shunt::unsupported for types
/// whose data is not dense and for negative counts or displacements.
inline void alltoallv(const topology& topo, const void* sendbuf, const int sendcounts[], const int sdispls[],
                      void* recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype type,
                      const collective_options& opt = {}) {
    const std::int64_t es = detail::dense_size(type);
    if (es <= 0) throw unsupported("alltoallv: datatype is not a dense element type");
    const auto p = static_cast<std::size_t>(topo.size());
    const bool in_place = sendbuf == MPI_IN_PLACE;
    std::vector<std::int64_t> sb(p), so(p), rb(p), ro(p);
    std::int64_t span = 0;
    for (std::size_t i = 0; i < p; ++i) {
        const int sc = in_place ? recvcounts[i] : sendcounts[i], sd = in_place ? rdispls[i] : sdispls[i];
        if (sc < 0 || sd < 0 || recvcounts[i] < 0 || rdispls[i] < 0)
            throw unsupported("alltoallv: negative count or displacement");
        sb[i] = sc * es, so[i] = sd * es, rb[i] = recvcounts[i] * es, ro[i] = rdispls[i] * es;
        span = std::max(span, ro[i] + rb[i]);
    }
    mpi_transport t(topo.comm(), opt);
    if (in_place) {  // the input must survive while blocks arrive
        auto copy = t.scratch(span);
        t.copy(copy.data(), recvbuf, span);
        alltoallv(t, topo.groups(opt.levels), copy.data(), sb, so, recvbuf, rb, ro, opt);
    } else {
        alltoallv(t, topo.groups(opt.levels), sendbuf, sb, so, recvbuf, rb, ro, opt);
    }
}

/// MPI_Alltoallv as the preload library runs it (see mpi_allreduce and mpi_allgather). One
/// planner decision per communicator (key 0): every rank must take the same path, and the sizes
/// differ per rank. Every check that passes to the library is one an MPI-correct program answers
/// alike on all ranks.
struct mpi_alltoallv {
    static constexpr coll_op op = coll_op::alltoallv;
    static mpi_coll_args describe(const void* sendbuf, const int sendcounts[], const int sdispls[],
                                  MPI_Datatype sendtype, void* recvbuf, const int recvcounts[], const int rdispls[],
                                  MPI_Datatype recvtype, MPI_Comm comm) {
        return {.sendbuf = sendbuf,
                .recvbuf = recvbuf,
                .sendcounts = sendcounts,
                .sdispls = sdispls,
                .recvcounts = recvcounts,
                .rdispls = rdispls,
                .sendtype = sendtype,
                .recvtype = recvtype,
                .comm = comm};
    }
    static int library(const mpi_coll_args& a) {
        return PMPI_Alltoallv(a.sendbuf, a.sendcounts, a.sdispls, a.sendtype, a.recvbuf, a.recvcounts, a.rdispls,
                              a.recvtype, a.comm);
    }
    /// The library's nonblocking form of the call (MPI_Ialltoallv).
    static int ilibrary(const mpi_coll_args& a, MPI_Request* request) {
        return PMPI_Ialltoallv(a.sendbuf, a.sendcounts, a.sdispls, a.sendtype, a.recvbuf, a.recvcounts, a.rdispls,
                               a.recvtype, a.comm, request);
    }
#if MPI_VERSION >= 4
    /// The library's persistent form (MPI_Alltoallv_init) of the call.
    static int library_init(const mpi_coll_args& a, MPI_Info info, MPI_Request* request) {
        return PMPI_Alltoallv_init(a.sendbuf, a.sendcounts, a.sdispls, a.sendtype, a.recvbuf, a.recvcounts, a.rdispls,
                                   a.recvtype, a.comm, info, request);
    }
#endif
    static pass_reason early(const mpi_coll_args&, bool, mpi_coll_facts&, std::int64_t& key) {
        key = 0;
        return pass_reason::none;
    }
    static pass_reason check(const mpi_coll_args& a, type_source& types, mpi_coll_facts& f) {
        const bool in_place = a.sendbuf == MPI_IN_PLACE;
        int inter = 0;
        if (a.recvcounts == nullptr || a.rdispls == nullptr ||
            (!in_place && (a.sendcounts == nullptr || a.sdispls == nullptr)) ||
            PMPI_Comm_test_inter(a.comm, &inter) != MPI_SUCCESS || inter ||
            PMPI_Comm_size(a.comm, &f.size) != MPI_SUCCESS)
            return pass_reason::bad_argument;
        if (!detail::two_types(a, types, f)) return pass_reason::bad_argument;
        for (int j = 0; j < f.size; ++j)
            if (a.recvcounts[j] < 0 || (!in_place && a.sendcounts[j] < 0)) return pass_reason::bad_argument;
        f.bytes = 0;
        return pass_reason::none;
    }
    static void spans(const mpi_coll_args& a, const mpi_coll_facts& f, mpi_coll_spans& out) {
        const bool in_place = a.sendbuf == MPI_IN_PLACE;
        byte_span send, recv;
        for (int j = 0; j < f.size; ++j) {
            if (!in_place) send.add(a.sendtype, a.sendcounts[j], std::int64_t{a.sdispls[j]} * f.st.extent);
            recv.add(a.recvtype, a.recvcounts[j], std::int64_t{a.rdispls[j]} * f.rt.extent);
        }
        out.push_back({true, send, true, false});
        out.push_back({false, recv, in_place, true});
    }
    static void run(const topology& topo, const mpi_coll_args& a, const mpi_coll_facts& f,
                    const collective_options& opt) {
        const bool in_place = a.sendbuf == MPI_IN_PLACE;
        mpi_transport t(topo.comm(), opt);
        // In place: the data to send are in recvbuf under the receive counts, copied out first.
        detail::block_images in(in_place ? a.recvbuf : const_cast<void*>(a.sendbuf),
                                in_place ? a.recvcounts : a.sendcounts, in_place ? a.rdispls : a.sdispls,
                                in_place ? a.recvtype : a.sendtype, f.st, f.size, true, in_place);
        detail::block_images out(a.recvbuf, a.recvcounts, a.rdispls, a.recvtype, f.rt, f.size, false, false);
        alltoallv(t, topo.groups(opt.levels), in.base(), in.bytes(), in.offsets(), out.base(), out.bytes(),
                  out.offsets());
        out.scatter(f.size);
    }
};

}  // namespace shunt
