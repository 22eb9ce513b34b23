// tests/unit/flow/test_knobs.cpp: the environment settings that give Open MPI's TCP component, UCX and NCCL k lanes per peer.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <shunt/flow/knobs.hpp>

#include <map>
#include <string>
#include <vector>

using namespace shunt::flow;

namespace {

std::map<std::string, std::string> as_map(const std::vector<env_setting>& v) {
    std::map<std::string, std::string> m;
    for (const auto& e : v) {
        CHECK_MESSAGE(m.count(e.name) == 0, e.name << " set twice");
        m[e.name] = e.value;
    }
    return m;
}

}  // namespace

TEST_CASE("Open MPI hashed: k links per interface, every link weighted as the first") {
    const std::vector<std::string> ifs{"eth0"};
    CHECK(openmpi_lane_settings(1, false, ifs).empty());  // one lane: nothing to change
    CHECK(openmpi_lane_settings(3, false, {}).empty());  // no interface known: nothing
    const auto v = openmpi_lane_settings(3, false, ifs);
    auto m = as_map(v);
    CHECK(m["OMPI_MCA_btl_tcp_links"] == "3");
    for (int i = 0; i < 3; ++i) {
        // Equal to each other, whatever the values: link i > 0 otherwise gets half the bandwidth
        // and twice the latency of link 0.
        CHECK(m["OMPI_MCA_btl_tcp_bandwidth_eth0:" + std::to_string(i)] == m["OMPI_MCA_btl_tcp_bandwidth_eth0:0"]);
        CHECK(m["OMPI_MCA_btl_tcp_latency_eth0:" + std::to_string(i)] == m["OMPI_MCA_btl_tcp_latency_eth0:0"]);
    }
    CHECK(m.count("OMPI_MCA_btl_tcp_bandwidth_eth0:3") == 0);
    CHECK(m.count("OMPI_MCA_btl_tcp_if_include") == 0);  // hashed leaves the interfaces alone
    CHECK(m.count("OMPI_MCA_pml_ob1_max_rdma_per_request") == 0);  // 3 modules: within ob1's 4
    for (const auto& e : v) CHECK_FALSE(e.replace);  // the user's own values win
    // Five links on two interfaces: ten modules, beyond ob1's default of four per message.
    m = as_map(openmpi_lane_settings(5, false, std::vector<std::string>{"eth0", "eth1"}));
    CHECK(m["OMPI_MCA_pml_ob1_max_rdma_per_request"] == "10");
    CHECK(m["OMPI_MCA_pml_ob1_max_send_per_range"] == "10");
    CHECK(m.count("OMPI_MCA_btl_tcp_latency_eth1:4") == 1);
}

TEST_CASE("Open MPI pinned: the planes as the only interfaces, one link each, weighted alike") {
    const std::vector<std::string> planes{"pl2", "pl3"};
    const auto v = openmpi_lane_settings(2, true, planes);
    const auto m = as_map(v);
    CHECK(m.at("OMPI_MCA_btl_tcp_if_include") == "pl2,pl3");
    CHECK(m.count("OMPI_MCA_btl_tcp_links") == 0);
    CHECK(m.at("OMPI_MCA_btl_tcp_bandwidth_pl2:0") == m.at("OMPI_MCA_btl_tcp_bandwidth_pl3:0"));
    CHECK(m.at("OMPI_MCA_btl_tcp_latency_pl2:0") == m.at("OMPI_MCA_btl_tcp_latency_pl3:0"));
    for (const auto& e : v) CHECK(e.replace == (e.name == "OMPI_MCA_btl_tcp_if_include"));
    // One plane (k = 1) still replaces the interfaces: the plane is the path.
    CHECK(as_map(openmpi_lane_settings(1, true, std::vector<std::string>{"pl1"})).at("OMPI_MCA_btl_tcp_if_include") ==
          "pl1");
}

TEST_CASE("UCX and NCCL") {
    for (const bool rdma : {false, true}) {
        auto m = as_map(ucx_lane_settings(2, true, std::vector<std::string>{"pl1", "pl2"}, rdma));
        CHECK(m.at("UCX_NET_DEVICES") == "pl1,pl2");
        CHECK(m.at("UCX_MAX_RNDV_LANES") == "2");
        CHECK(m.count("UCX_IB_NUM_PATHS") == 0);
    }
    auto m = as_map(ucx_lane_settings(4, false, {}, true));
    CHECK(m.at("UCX_IB_NUM_PATHS") == "4");
    CHECK(m.at("UCX_MAX_RNDV_LANES") == "4");
    CHECK(ucx_lane_settings(1, false, {}, true).empty());
    CHECK(ucx_lane_settings(4, false, {}, false).empty());  // TCP only: nothing UCX would use
    CHECK(nccl_lane_settings(1).empty());
    m = as_map(nccl_lane_settings(4));
    CHECK(m.at("NCCL_IB_QPS_PER_CONNECTION") == "4");
    CHECK(m.at("NCCL_IB_SPLIT_DATA_ON_QPS") == "1");
}
