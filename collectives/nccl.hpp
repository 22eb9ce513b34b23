// shunt/collectives/nccl.hpp: hierarchical collectives over NCCL: each a short sequence of NCCL's own collectives on a communicator's domain, node and rail communicators, stream-ordered (an NCCL-only header: it includes <nccl.h>).
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>

namespace shunt {

/// The NCCL functions a schedule calls: the preload library passes the real ones it resolved
/// (behind its own shims); header users take the linked library's with nccl_functions::linked().
struct nccl_functions {
    decltype(&ncclAllReduce) all_reduce = nullptr;
    decltype(&ncclReduceScatter) reduce_scatter = nullptr;
    decltype(&ncclAllGather) all_gather = nullptr;
    decltype(&ncclBroadcast) broadcast = nullptr;
    decltype(&ncclReduce) reduce = nullptr;
    decltype(&ncclGroupStart) group_start = nullptr;
    decltype(&ncclGroupEnd) group_end = nullptr;

    /// The functions of the NCCL library the program links.
    static nccl_functions linked() {
        return {&ncclAllReduce, &ncclReduceScatter, &ncclAllGather, &ncclBroadcast,
                &ncclReduce,    &ncclGroupStart,    &ncclGroupEnd};
    }
};

/// A communicator's two levels: its node communicator (the ranks of this rank's node, ordered by
/// rank) and its rail communicator (the ranks with this rank's local index on every node, ordered
/// by rank), every node holding `per_node` ranks. `block`: every rank's rank in the communicator
/// is node * per_node + local (block placement), which the schedules that place blocks by rank
/// need (reduce-scatter, allgather, broadcast, reduce); allreduce works with any placement.
/// Every rank of the communicator must hold the same per_node, nodes and block (agreed when the
/// levels are made).
struct nccl_levels {
    ncclComm_t node = nullptr, rail = nullptr;
    int per_node = 1;  ///< ranks per node (the node communicator's size)
    int local = 0;  ///< this rank's index in its node
    int nodes = 1;  ///< the rail communicator's size
    int node_index = 0;  ///< this rank's index in its rail
    bool block = false;
    /// The GPU-domain level inside the node (an NVLink clique, a PCIe switch or host bridge), null
    /// where the node is one domain: `domain` holds the ranks of this rank's domain (ordered by
    /// rank), `across` the ranks of this node with this rank's index in its domain (one per
    /// domain, ordered by rank). Every node holds `domains` domains of `per_domain` ranks, and
    /// every rank's index in its node is domain_index * per_domain + in_domain (agreed when the
    /// levels are made), so that a rail joins the ranks that own the same part in
    /// nccl_allreduce3.
    ncclComm_t domain = nullptr, across = nullptr;
    int per_domain = 1;  ///< ranks per domain (the domain communicator's size)
    int in_domain = 0;  ///< this rank's index in its domain
    int domains = 1;  ///< domains per node (the across communicator's size)
    int domain_index = 0;  ///< this rank's domain's index in its node (its index in `across`)

    /// True where the three-level schedules apply: a domain level of several domains of several ranks.
    bool has_domains() const { return domain != nullptr && across != nullptr && per_domain > 1 && domains > 1; }
};

/// The bytes of one element of `t` (0 for a type NCCL does not define).
inline std::size_t nccl_type_size(ncclDataType_t t) {
    switch (t) {
        case ncclInt8:
        case ncclUint8:
        case ncclFloat8e4m3:
        case ncclFloat8e5m2: return 1;
        case ncclFloat16:
        case ncclBfloat16: return 2;
        case ncclInt32:
        case ncclUint32:
        case ncclFloat32: return 4;
        case ncclInt64:
        case ncclUint64:
        case ncclFloat64: return 8;
        default: return 0;
    }
}

namespace detail {
inline const void* nccl_at(const void* p, std::size_t bytes) { return static_cast<const std::byte*>(p) + bytes; }
inline void* nccl_at(void* p, std::size_t bytes) { return static_cast<std::byte*>(p) + bytes; }
/// The first failure of a sequence of NCCL calls.
#define SHUNT_NCCL_TRY(call)                                              \
    do {                                                                  \
        if (const ncclResult_t r_ = (call); r_ != ncclSuccess) return r_; \
    } while (0)
}  // namespace detail

/// Allreduce of `count` elements over `comm` as reduce-scatter inside each node, allreduce of the
/// owned part across the nodes (the rail), allgather inside each node: each rank sends 1/per_node
/// of the vector across the nodes. In place when sendbuff == recvbuff; no scratch. The
/// count % per_node elements left over go through one allreduce on `comm`.
///
/// Contract across ranks: every rank of `comm` calls it with the same count, type, op and levels,
/// in the same order relative to other NCCL calls on comm and its levels, outside a group;
/// stream-ordered on `stream` (no host synchronisation), capturable into a CUDA graph. `op` is a
/// built-in operation, ncclAvg only on floating-point types (an average of averages of equal
/// groups is the average; integer division would round twice).
inline ncclResult_t nccl_allreduce(const nccl_functions& f, const nccl_levels& lv, ncclComm_t comm,
                                   const void* sendbuff, void* recvbuff, std::size_t count, ncclDataType_t type,
                                   ncclRedOp_t op, cudaStream_t stream) {
    const std::size_t es = nccl_type_size(type);
    const std::size_t L = static_cast<std::size_t>(lv.per_node);
    const std::size_t chunk = count / L, rest = count - L * chunk;
    if (chunk > 0) {
        void* mine = detail::nccl_at(recvbuff, static_cast<std::size_t>(lv.local) * chunk * es);
        SHUNT_NCCL_TRY(f.reduce_scatter(sendbuff, mine, chunk, type, op, lv.node, stream));
        SHUNT_NCCL_TRY(f.all_reduce(mine, mine, chunk, type, op, lv.rail, stream));
        SHUNT_NCCL_TRY(f.all_gather(mine, recvbuff, chunk, type, lv.node, stream));
    }
    if (rest > 0)
        SHUNT_NCCL_TRY(f.all_reduce(detail::nccl_at(sendbuff, L * chunk * es),
                                    detail::nccl_at(recvbuff, L * chunk * es), rest, type, op, comm, stream));
    return ncclSuccess;
}

/// Allreduce of `count` elements over `comm` in three levels: reduce-scatter inside each domain,
/// reduce-scatter of the owned part across the node's domains, allreduce of the part each rank
/// then owns (1/per_node of the vector) across the nodes (the rail; skipped on one node), then
/// allgather across the domains and allgather inside each domain. The slow links between domains
/// carry 1/per_domain of the vector per rank instead of all of it. In place when sendbuff ==
/// recvbuff; no scratch. The count % per_node elements left over go through one allreduce on
/// `comm`. Needs lv.has_domains(). Contract as nccl_allreduce.
inline ncclResult_t nccl_allreduce3(const nccl_functions& f, const nccl_levels& lv, ncclComm_t comm,
                                    const void* sendbuff, void* recvbuff, std::size_t count, ncclDataType_t type,
                                    ncclRedOp_t op, cudaStream_t stream) {
    const std::size_t es = nccl_type_size(type);
    const std::size_t P = static_cast<std::size_t>(lv.per_domain), D = static_cast<std::size_t>(lv.domains);
    const std::size_t chunk = count / (P * D), rest = count - P * D * chunk;
    if (chunk > 0) {
        // This rank's block of the domain's reduce-scatter (D chunks), then its chunk of that block.
        void* block = detail::nccl_at(recvbuff, static_cast<std::size_t>(lv.in_domain) * D * chunk * es);
        void* mine = detail::nccl_at(block, static_cast<std::size_t>(lv.domain_index) * chunk * es);
        SHUNT_NCCL_TRY(f.reduce_scatter(sendbuff, block, D * chunk, type, op, lv.domain, stream));
        SHUNT_NCCL_TRY(f.reduce_scatter(block, mine, chunk, type, op, lv.across, stream));
        if (lv.nodes > 1) SHUNT_NCCL_TRY(f.all_reduce(mine, mine, chunk, type, op, lv.rail, stream));
        SHUNT_NCCL_TRY(f.all_gather(mine, block, chunk, type, lv.across, stream));
        SHUNT_NCCL_TRY(f.all_gather(block, recvbuff, D * chunk, type, lv.domain, stream));
    }
    if (rest > 0)
        SHUNT_NCCL_TRY(f.all_reduce(detail::nccl_at(sendbuff, P * D * chunk * es),
                                    detail::nccl_at(recvbuff, P * D * chunk * es), rest, type, op, comm, stream));
    return ncclSuccess;
}

/// Reduce-scatter (`recvcount` elements to each rank, rank r's block r of the reduced vector):
/// inside each node, one reduce-scatter per node's slab (grouped) into `scratch`, then one
/// reduce-scatter across the nodes. Needs block placement and `scratch` of nodes * recvcount
/// elements in the communicator's memory. In place per NCCL (recvbuff == sendbuff + rank *
/// recvcount). Contract as nccl_allreduce.
inline ncclResult_t nccl_reduce_scatter(const nccl_functions& f, const nccl_levels& lv, const void* sendbuff,
                                        void* recvbuff, std::size_t recvcount, ncclDataType_t type, ncclRedOp_t op,
                                        void* scratch, cudaStream_t stream) {
    const std::size_t es = nccl_type_size(type);
    const std::size_t slab = static_cast<std::size_t>(lv.per_node) * recvcount * es;
    SHUNT_NCCL_TRY(f.group_start());
    ncclResult_t r = ncclSuccess;
    for (int n = 0; n < lv.nodes && r == ncclSuccess; ++n)
        r = f.reduce_scatter(detail::nccl_at(sendbuff, static_cast<std::size_t>(n) * slab),
                             detail::nccl_at(scratch, static_cast<std::size_t>(n) * recvcount * es), recvcount, type,
                             op, lv.node, stream);
    const ncclResult_t end = f.group_end();
    SHUNT_NCCL_TRY(r);
    SHUNT_NCCL_TRY(end);
    return f.reduce_scatter(scratch, recvbuff, recvcount, type, op, lv.rail, stream);
}

/// Allgather (`sendcount` elements from each rank, rank r's at block r): each rank's block
/// broadcast along its rail to the same place on every node (one broadcast per node, grouped),
/// then inside each node one in-place allgather per node's slab (grouped). Every block crosses
/// between two nodes once; no scratch. Needs block placement. In place per NCCL (sendbuff ==
/// recvbuff + rank * sendcount). Contract as nccl_allreduce.
inline ncclResult_t nccl_allgather(const nccl_functions& f, const nccl_levels& lv, const void* sendbuff, void* recvbuff,
                                   std::size_t sendcount, ncclDataType_t type, cudaStream_t stream) {
    const std::size_t es = nccl_type_size(type);
    const std::size_t L = static_cast<std::size_t>(lv.per_node);
    const auto block_of = [&](int n, int l) {
        return detail::nccl_at(recvbuff,
                               (static_cast<std::size_t>(n) * L + static_cast<std::size_t>(l)) * sendcount * es);
    };
    SHUNT_NCCL_TRY(f.group_start());
    ncclResult_t r = ncclSuccess;
    for (int n = 0; n < lv.nodes && r == ncclSuccess; ++n) {
        void* at = block_of(n, lv.local);
        r = f.broadcast(n == lv.node_index ? sendbuff : at, at, sendcount, type, n, lv.rail, stream);
    }
    ncclResult_t end = f.group_end();
    SHUNT_NCCL_TRY(r);
    SHUNT_NCCL_TRY(end);
    SHUNT_NCCL_TRY(f.group_start());
    for (int n = 0; n < lv.nodes && r == ncclSuccess; ++n)
        r = f.all_gather(block_of(n, lv.local), block_of(n, 0), sendcount, type, lv.node, stream);
    end = f.group_end();
    SHUNT_NCCL_TRY(r);
    return end;
}

/// Broadcast from `root`: along the root's rail to every node, then inside each node from the
/// rank at the root's local index. Needs block placement. In place when sendbuff == recvbuff.
/// Contract as nccl_allreduce.
inline ncclResult_t nccl_broadcast(const nccl_functions& f, const nccl_levels& lv, const void* sendbuff, void* recvbuff,
                                   std::size_t count, ncclDataType_t type, int root, cudaStream_t stream) {
    const int root_node = root / lv.per_node, root_local = root % lv.per_node;
    if (lv.local == root_local)
        SHUNT_NCCL_TRY(f.broadcast(sendbuff, recvbuff, count, type, root_node, lv.rail, stream));
    return f.broadcast(recvbuff, recvbuff, count, type, root_local, lv.node, stream);
}

/// Reduce to `root`: inside each node to the rank at the root's local index, then along that rail
/// to the root. The ranks at the root's local index on other nodes hold their node's partial
/// result in `scratch` (count elements; unused elsewhere). Needs block placement. In place at the
/// root when sendbuff == recvbuff. Contract as nccl_allreduce.
inline ncclResult_t nccl_reduce(const nccl_functions& f, const nccl_levels& lv, const void* sendbuff, void* recvbuff,
                                std::size_t count, ncclDataType_t type, ncclRedOp_t op, int root, void* scratch,
                                cudaStream_t stream) {
    const int root_node = root / lv.per_node, root_local = root % lv.per_node;
    const bool is_root = lv.node_index == root_node && lv.local == root_local;
    void* partial = is_root ? recvbuff : scratch;
    SHUNT_NCCL_TRY(f.reduce(sendbuff, partial, count, type, op, root_local, lv.node, stream));
    if (lv.local != root_local) return ncclSuccess;
    return f.reduce(partial, partial, count, type, op, root_node, lv.rail, stream);
}

#undef SHUNT_NCCL_TRY

}  // namespace shunt
