// tests/unit/model/test_device.cpp: device tables (copies, launch, pack kernels) and the choice of
// a device method (one-shot, staged, device) from them.
#include <doctest/doctest.h>

#include "approx.hpp"

#include <shunt/model/device.hpp>
#include <shunt/model/model.hpp>

#include <cmath>
#include <limits>

using namespace shunt;

TEST_CASE("device tables: analytic defaults for copies, the launch and the pack kernels") {
    const cost_model m;
    const analytic_params& p = m.params();
    const double mib = 1 << 20;
    CHECK(m.predict("launch", 1) == approx(p.launch_s));
    CHECK(m.predict("copy.d2h", mib) == approx(p.pcie_latency_s + mib / p.pcie_bytes_per_s));
    CHECK(m.predict("copy.h2d", mib) == approx(m.predict("copy.d2h", mib)));
    CHECK(m.predict("copy.d2d", mib) < m.predict("copy.d2h", mib));
    // Blocks of whole sectors: a launch and the bytes at the device's copy rate; shorter blocks
    // read whole sectors, so 1-byte blocks cost more per byte.
    CHECK(m.predict(table_names::device_pack(false, 64), mib) == approx(p.launch_s + mib / p.device_bytes_per_s));
    CHECK(m.predict(table_names::device_pack(false, 1), mib) > m.predict(table_names::device_pack(false, 64), mib));
    CHECK(m.predict(table_names::device_pack(false, 1), mib) ==
          approx(p.launch_s + 0.5 * (32 * mib + mib) / p.device_bytes_per_s));
    // Into mapped memory the stores cross PCIe.
    CHECK(m.predict(table_names::device_pack(true, 64), mib) == approx(p.launch_s + mib / p.mapped_bytes_per_s));
    CHECK(m.predict_device_pack(true, 64, mib) == approx(m.predict(table_names::device_pack(true, 64), mib)));
    CHECK(m.predict_device_pack(false, 48, mib) == approx(m.analytic_device_pack(false, 48, mib)));
    CHECK(table_names::device_pack(true, 16) == "pack.mapped.b16");
    CHECK(table_names::device_pack(false, 1024) == "pack.device.b1024");
    CHECK(table_names::is_host_pack("pack.shunt.b8"));
    CHECK(table_names::is_host_pack("unpack.library.b1"));
    CHECK_FALSE(table_names::is_host_pack("pack.device.b8"));
    CHECK_FALSE(table_names::is_host_pack("pack.mapped.b8"));
}

TEST_CASE("device pack tables: the nearest measured block length answers; host packing is not affected") {
    cost_model m;
    m.set(table_names::device_pack(true, 4), time_table({{1024, 1e-5, 0}, {1 << 20, 1e-3, 0}}));
    m.set(table_names::device_pack(true, 256), time_table({{1024, 2e-5, 0}, {1 << 20, 2e-4, 0}}));
    CHECK(m.nearest_block_len("pack.mapped.b", 10) == 4);
    CHECK(m.nearest_block_len("pack.mapped.b", 100) == 256);
    CHECK(m.nearest_block_len("pack.mapped.b", 32) == 4);  // equally far in log scale: the smaller
    CHECK(m.nearest_block_len("pack.device.b", 32) == 0);
    CHECK(m.predict_device_pack(true, 10, 1 << 20) == approx(1e-3));
    CHECK(m.predict_device_pack(true, 100, 1 << 20) == approx(2e-4));
    // No device table measured: the analytic model at the block length itself.
    CHECK(m.predict_device_pack(false, 100, 1 << 20) == approx(m.analytic_device_pack(false, 100, 1 << 20)));
    // A device table named pack.* is not a host packer's measurement.
    cost_model host_only;
    CHECK(m.predict_pack(false, false, 4, 1 << 20) == approx(host_only.predict_pack(false, false, 4, 1 << 20)));
    CHECK(m.predict_pack(true, true, 256, 1 << 20) == approx(host_only.predict_pack(true, true, 256, 1 << 20)));
    // Online refinement of a device pack table compares with that table.
    for (int i = 0; i < 5; ++i) m.observe(table_names::device_pack(true, 4), 1 << 20, 2e-3);
    CHECK(m.predict_device_pack(true, 4, 1 << 20) == approx(2e-3));
}

TEST_CASE("device method: the analytic defaults keep the fixed rule's 64 KiB switch") {
    const cost_model m;
    for (const double block : {1.0, 8.0, 64.0, 4096.0}) {
        CAPTURE(block);
        for (const double bytes : {256.0, 4096.0, 32768.0}) {
            const auto c = price_device_paths(m, block, bytes, false, false);
            CHECK(cheapest_device_path(c, device_path::one_shot, false) == device_path::one_shot);
            CHECK(cheapest_device_path(c, device_path::staged, false) == device_path::one_shot);
        }
        for (const double bytes : {262144.0, 4194304.0}) {
            const auto c = price_device_paths(m, block, bytes, true, false);
            CHECK(cheapest_device_path(c, device_path::one_shot, false) == device_path::staged);
        }
    }
    // Not CUDA-aware: the device path is neither priced nor taken.
    const auto c = price_device_paths(m, 8, 1 << 20, false, false);
    CHECK(std::isinf(c[device_path::device]));
    CHECK(c.level.empty());
}

TEST_CASE("device method: chosen from hand-set tables, ties to the fixed rule") {
    const double kib = 1024;
    // Kernel stores into mapped memory measured slow: staged wins even for 1 KiB, where the fixed
    // rule said one-shot.
    cost_model slow_mapped;
    slow_mapped.set(table_names::device_pack(true, 64), time_table({{256, 1e-3, 0}, {1 << 22, 1e-1, 0}}));
    auto c = price_device_paths(slow_mapped, 64, kib, false, false);
    CHECK(c[device_path::one_shot] > c[device_path::staged]);
    CHECK(cheapest_device_path(c, device_path::one_shot, false) == device_path::staged);
    // The average block length 50 uses the nearest measured table, b64.
    c = price_device_paths(slow_mapped, 50, kib, false, false);
    CHECK(cheapest_device_path(c, device_path::one_shot, false) == device_path::staged);

    // The copy back to the host measured slow, the mapped pack fast: one-shot wins at 1 MiB,
    // where the fixed rule said staged; receiving prices copy.h2d instead, which is not slow.
    cost_model slow_d2h;
    slow_d2h.set("copy.d2h", time_table({{256, 1e-3, 0}, {1 << 24, 1.0, 0}}));
    slow_d2h.set(table_names::device_pack(true, 64), time_table({{256, 6e-6, 0}, {1 << 22, 2e-4, 0}}));
    c = price_device_paths(slow_d2h, 64, kib * kib, false, false);
    CHECK(cheapest_device_path(c, device_path::staged, false) == device_path::one_shot);
    c = price_device_paths(slow_d2h, 64, kib * kib, true, false);
    CHECK(c[device_path::staged] ==
          approx(slow_d2h.predict_device_pack(false, 64, kib * kib) + slow_d2h.predict("copy.h2d", kib * kib)));

    // Equal predictions keep the fixed rule's choice.
    device_path_costs tie;
    tie.seconds = {2e-5, 2e-5, std::numeric_limits<double>::infinity()};
    CHECK(cheapest_device_path(tie, device_path::one_shot, false) == device_path::one_shot);
    CHECK(cheapest_device_path(tie, device_path::staged, false) == device_path::staged);
}

TEST_CASE("device method with a CUDA-aware MPI: the device path only where the library's device transfer is measured") {
    const double mib = 1 << 20;
    // Nothing measured: the device path stays first, however cheap staging is predicted.
    cost_model m;
    auto c = price_device_paths(m, 64, mib, false, true);
    CHECK(std::isinf(c[device_path::device]));
    CHECK(cheapest_device_path(c, device_path::device, true) == device_path::device);
    // The library's device-to-device transfer measured slow against its host one: staging wins.
    m.set(table_names::p2p("node", "dd"), time_table({{8, 1e-3, 0}, {1 << 22, 1.0, 0}}));
    m.set(table_names::p2p("node", "hh"), time_table({{8, 1e-6, 0}, {1 << 22, 1e-3, 0}}));
    c = price_device_paths(m, 64, mib, false, true);
    CHECK(c.level == "node");
    CHECK(c[device_path::device] == approx(m.predict_device_pack(false, 64, mib) + m.predict("p2p.node.dd", mib)));
    CHECK(c[device_path::staged] ==
          approx(m.predict_device_pack(false, 64, mib) + m.predict("copy.d2h", mib) + m.predict("p2p.node.hh", mib)));
    CHECK(cheapest_device_path(c, device_path::device, true) == device_path::staged);
    // Measured fast: the device path.
    m.set(table_names::p2p("node", "dd"), time_table({{8, 1e-6, 0}, {1 << 22, 1e-4, 0}}));
    c = price_device_paths(m, 64, mib, false, true);
    CHECK(cheapest_device_path(c, device_path::device, true) == device_path::device);
}
