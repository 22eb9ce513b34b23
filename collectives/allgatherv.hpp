// shunt/collectives/allgatherv.hpp: hierarchical allgather with a size per rank (MPI_Allgatherv).
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
#include <cstring>
#include <span>
#include <stdexcept>
#include <vector>

namespace shunt {

/// Allgather of bytes[i] bytes from rank i, laid out in rank order without gaps in `buf`
/// (rank i's at sum(bytes[0..i))).
///
/// Contract across ranks: every rank of t's group calls it, in the same order relative to
/// other collectives on t, with the same sizes, hierarchy and options; blocking. On entry
/// the caller's own part of `buf` is filled in; on return every part is. Schedule: the
/// mirror of reduce_scatter (each part crosses the outer levels once, to one representative
/// per group, then spreads inward level by level); empty parts cost nothing.
template <transport T>
void allgatherv(T& t, const hierarchy& h, void* buf, std::span<const std::int64_t> bytes,
                const collective_options& opt = {}) {
    detail::check_hierarchy(t, h);
    const int p = t.size();
    if (bytes.size() != static_cast<std::size_t>(p)) throw std::invalid_argument("allgatherv: one size per rank");
    std::vector<detail::owned_range> own(static_cast<std::size_t>(p));
    std::int64_t n = 0;
    for (int r = 0; r < p; ++r) {
        own[static_cast<std::size_t>(r)] = {n, bytes[static_cast<std::size_t>(r)]};
        n += bytes[static_cast<std::size_t>(r)];
    }
    if (n <= 0 || p == 1) return;
    detail::hierarchical_allgather(t, h, static_cast<std::byte*>(buf), 1, own, opt.flat, opt);
}

/// MPI_Allgatherv as the preload library runs it (see mpi_allreduce and mpi_allgather). No
/// settled-decision lookup before the checks: the key needs every rank's count.
struct mpi_allgatherv {
    static constexpr coll_op op = coll_op::allgatherv;
    static mpi_coll_args describe(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                  const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm) {
        return {.sendbuf = sendbuf,
                .recvbuf = recvbuf,
                .sendcount = sendcount,
                .recvcounts = recvcounts,
                .rdispls = displs,
                .sendtype = sendtype,
                .recvtype = recvtype,
                .comm = comm};
    }
    static int library(const mpi_coll_args& a) {
        return PMPI_Allgatherv(a.sendbuf, a.sendcount, a.sendtype, a.recvbuf, a.recvcounts, a.rdispls, a.recvtype,
                               a.comm);
    }
    /// The library's nonblocking form of the call (MPI_Iallgatherv).
    static int ilibrary(const mpi_coll_args& a, MPI_Request* request) {
        return PMPI_Iallgatherv(a.sendbuf, a.sendcount, a.sendtype, a.recvbuf, a.recvcounts, a.rdispls, a.recvtype,
                                a.comm, request);
    }
#if MPI_VERSION >= 4
    /// The library's persistent form (MPI_Allgatherv_init) of the call.
    static int library_init(const mpi_coll_args& a, MPI_Info info, MPI_Request* request) {
        return PMPI_Allgatherv_init(a.sendbuf, a.sendcount, a.sendtype, a.recvbuf, a.recvcounts, a.rdispls, a.recvtype,
                                    a.comm, info, request);
    }
#endif
    static pass_reason early(const mpi_coll_args&, bool, mpi_coll_facts&, std::int64_t& key) {
        key = -1;
        return pass_reason::none;
    }
    static pass_reason check(const mpi_coll_args& a, type_source& types, mpi_coll_facts& f) {
        const bool in_place = a.sendbuf == MPI_IN_PLACE;
        int inter = 0;
        if (a.recvcounts == nullptr || a.rdispls == nullptr || detail::aliased(a.sendbuf, a.recvbuf) ||
            PMPI_Comm_test_inter(a.comm, &inter) != MPI_SUCCESS || inter ||
            PMPI_Comm_size(a.comm, &f.size) != MPI_SUCCESS || PMPI_Comm_rank(a.comm, &f.me) != MPI_SUCCESS)
            return pass_reason::bad_argument;
        if (!detail::two_types(a, types, f) || f.rt.size == 0 || detail::null_buffer(a.recvbuf, f.rt))
            return pass_reason::bad_argument;
        f.parts.assign(static_cast<std::size_t>(f.size), 0);
        std::int64_t total = 0;
        f.packed_order = f.rt.dense;  // the parts already lie in rank order without gaps in recvbuf
        for (int r = 0; r < f.size; ++r) {
            if (a.recvcounts[r] < 0) return pass_reason::bad_argument;
            if (a.rdispls[r] * f.rt.size != total) f.packed_order = false;
            f.parts[static_cast<std::size_t>(r)] = a.recvcounts[r] * f.rt.size;
            total += f.parts[static_cast<std::size_t>(r)];
        }
        if (total == 0) return pass_reason::empty;
        if (!in_place && (a.sendcount < 0 || a.sendcount * f.st.size != f.parts[static_cast<std::size_t>(f.me)]))
            return pass_reason::bad_argument;
        f.bytes = total;
        return pass_reason::none;
    }
    static void spans(const mpi_coll_args& a, const mpi_coll_facts& f, mpi_coll_spans& out) {
        const bool in_place = a.sendbuf == MPI_IN_PLACE;
        byte_span send, recv;
        if (!in_place) send.add(a.sendtype, a.sendcount);
        for (int r = 0; r < f.size; ++r)
            recv.add(a.recvtype, a.recvcounts[r], std::int64_t{a.rdispls[r]} * f.rt.extent);
        out.push_back({true, send, true, false});
        out.push_back({false, recv, in_place, true});
    }
    static void run(const topology& topo, const mpi_coll_args& a, const mpi_coll_facts& f,
                    const collective_options& opt) {
        const bool in_place = a.sendbuf == MPI_IN_PLACE;
        mpi_transport t(topo.comm(), opt);
        host_buffer staging(f.packed_order ? 0 : f.bytes);
        std::byte* work = f.packed_order ? static_cast<std::byte*>(a.recvbuf) : staging.data();
        std::int64_t offset = 0;
        for (int r = 0; r < f.me; ++r) offset += f.parts[static_cast<std::size_t>(r)];
        const std::int64_t mine = f.parts[static_cast<std::size_t>(f.me)];
        auto typed = [&](int r) { return static_cast<char*>(a.recvbuf) + std::int64_t{a.rdispls[r]} * f.rt.extent; };
        if (in_place) {
            if (!f.packed_order) {
                detail::byte_image own(typed(f.me), a.recvcounts[f.me], a.recvtype, f.rt);
                own.pack();
                std::memcpy(work + offset, own.data(), static_cast<std::size_t>(mine));
            }
        } else {
            detail::byte_image send(const_cast<void*>(a.sendbuf), a.sendcount, a.sendtype, f.st);
            send.pack();
            std::memcpy(work + offset, send.data(), static_cast<std::size_t>(mine));
        }
        allgatherv(t, topo.groups(opt.levels), work, f.parts);
        if (f.packed_order) return;
        offset = 0;
        for (int r = 0; r < f.size; ++r) {
            const std::int64_t n = f.parts[static_cast<std::size_t>(r)];
            if (n > 0 && !(in_place && r == f.me)) {
                detail::byte_image part(typed(r), a.recvcounts[r], a.recvtype, f.rt);
                std::memcpy(part.data(), work + offset, static_cast<std::size_t>(n));
                part.unpack();
            }
            offset += n;
        }
    }
};

}  // namespace shunt
