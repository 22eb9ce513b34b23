// shunt/flow/knobs.hpp: the environment settings that give each transport k lanes per peer (Open MPI's TCP component, UCX, NCCL), set before the library starts.
#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <vector>

namespace shunt::flow {

/// One environment variable to set before the library reads it. `replace`: set it even where
/// the user set it (the pinned mode's interfaces, which are the mechanism itself); otherwise a
/// value the user chose is kept.
struct env_setting {
    std::string name;
    std::string value;
    bool replace = false;
    bool operator==(const env_setting&) const = default;
};

namespace detail {

inline std::string join(std::span<const std::string> items) {
    std::string out;
    for (const auto& s : items) {
        if (!out.empty()) out += ',';
        out += s;
    }
    return out;
}

/// The weights every TCP module gets: any equal pair will do (ob1 compares them only with each
/// other); Open MPI's own default latency is 100 us.
inline constexpr int tcp_bandwidth_mbps = 10000;
inline constexpr int tcp_latency_us = 100;

}  // namespace detail

/// Open MPI with ob1 over the TCP BTL. ob1 cuts every message above the eager limit across the
/// BTL modules that reach the peer, in proportion to their bandwidth weights: the first
/// fragment on one of the lowest-latency ("eager") modules, then the rest either by the
/// receiver's RDMA pipeline (put, over at most pml_ob1_max_rdma_per_request modules, eager ones
/// only) or by the sender's pipelined sends (at most pml_ob1_max_send_per_range modules), in
/// byte ranges reassembled by ob1 with its own per-peer sequence numbers (MPI order, status
/// counts and wildcards are the library's). The TCP BTL makes btl_tcp_links modules per
/// interface, each its own connection to the peer (its own source port: a distinct 5-tuple),
/// but gives link i > 0 half the bandwidth and twice the latency of link 0, which keeps every
/// link but the first out of the eager set and so out of the RDMA pipeline: equal per-link
/// weights (btl_tcp_bandwidth_IF:i, btl_tcp_latency_IF:i) make the split even.
///
/// `hashed`: k links on each of `interfaces` (the interfaces the TCP BTL uses), spines left to
/// the switches' hashing of each connection. `pinned`: one module on each interface of
/// `interfaces` (the host's receive planes; the TCP BTL binds each connection to its module's
/// address, and a leaf routes by destination address, so a host's incoming data crosses its
/// own planes' spines). k = 1 hashed sets nothing.
inline std::vector<env_setting> openmpi_lane_settings(int k, bool pinned, std::span<const std::string> interfaces) {
    std::vector<env_setting> out;
    if (interfaces.empty() || (!pinned && k <= 1)) return out;
    const int links = pinned ? 1 : k;
    if (pinned) out.push_back({"OMPI_MCA_btl_tcp_if_include", detail::join(interfaces), true});
    if (links > 1) out.push_back({"OMPI_MCA_btl_tcp_links", std::to_string(links)});
    for (const auto& itf : interfaces)
        for (int i = 0; i < links; ++i) {
            const std::string at = itf + ":" + std::to_string(i);
            out.push_back({"OMPI_MCA_btl_tcp_bandwidth_" + at, std::to_string(detail::tcp_bandwidth_mbps)});
            out.push_back({"OMPI_MCA_btl_tcp_latency_" + at, std::to_string(detail::tcp_latency_us)});
        }
    const int modules = links * static_cast<int>(interfaces.size());
    if (modules > 4) {  // ob1's defaults for both are 4
        out.push_back({"OMPI_MCA_pml_ob1_max_rdma_per_request", std::to_string(modules)});
        out.push_back({"OMPI_MCA_pml_ob1_max_send_per_range", std::to_string(modules)});
    }
    return out;
}

/// UCX (MPICH's ch4:ucx; Open MPI's pml ucx). UCX cuts a rendezvous message across up to
/// UCX_MAX_RNDV_LANES lanes, one per transport resource. `pinned`: the plane interfaces as its
/// devices (UCX_NET_DEVICES; over TCP each device's connection is bound to its address).
/// `hashed`: UCX_IB_NUM_PATHS connections per InfiniBand/RoCE port (RoCE v2: each queue pair its
/// own UDP source port, hashed by the switches; InfiniBand: LID path bits); UCX's TCP transport
/// opens one connection per device, so over TCP a hashed split needs several devices. `rdma`:
/// the host has InfiniBand/RoCE devices; without them hashed sets nothing (UCX would warn that
/// UCX_IB_NUM_PATHS is unused, and its TCP lanes are the devices it already has).
inline std::vector<env_setting> ucx_lane_settings(int k, bool pinned, std::span<const std::string> interfaces,
                                                  bool rdma) {
    std::vector<env_setting> out;
    if (!pinned && (k <= 1 || !rdma)) return out;
    if (pinned && !interfaces.empty()) out.push_back({"UCX_NET_DEVICES", detail::join(interfaces), true});
    if (!pinned) out.push_back({"UCX_IB_NUM_PATHS", std::to_string(k)});
    out.push_back({"UCX_MAX_RNDV_LANES", std::to_string(std::max(k, 1))});
    return out;
}

/// NCCL over InfiniBand/RoCE: k queue pairs per connection with each message's data split
/// across them (NCCL_IB_QPS_PER_CONNECTION, NCCL_IB_SPLIT_DATA_ON_QPS). On RoCE v2 each queue
/// pair has its own UDP source port, so the switches hash the k sub-flows independently:
/// hashed lanes (NCCL has no setting that picks a queue pair's source port, so not pinned).
/// NCCL reads both when its first communicator is created in the process.
inline std::vector<env_setting> nccl_lane_settings(int k) {
    if (k <= 1) return {};
    return {{"NCCL_IB_QPS_PER_CONNECTION", std::to_string(k)}, {"NCCL_IB_SPLIT_DATA_ON_QPS", "1"}};
}

}  // namespace shunt::flow
