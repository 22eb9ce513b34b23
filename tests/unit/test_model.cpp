// Unit tests of the cost model: tables, interpolation, extrapolation, robust statistics, the
// model file (round trip, corrupt, stale, foreign, atomic write) and online refinement.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <shunt/collectives/reduction.hpp>
#include <shunt/model/device.hpp>
#include <shunt/model/file.hpp>
#include <shunt/model/stats.hpp>
#include <shunt/plan/collective.hpp>
#include <shunt/plan/planner.hpp>
#include <shunt/topology/hierarchy.hpp>

#include <sys/stat.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>

using namespace shunt;

namespace {

/// doctest::Approx relative to the values alone: its default scale of 1 adds an absolute slack of
/// about 1e-5, which would let any two times in microseconds compare equal.
doctest::Approx approx(double value) { return doctest::Approx(value).scale(0); }

/// A scratch directory under $TMPDIR (else /tmp), removed with everything in it at scope end.
struct temp_dir {
    std::string path;
    temp_dir() {
        const char* base = std::getenv("TMPDIR");
        std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/shunt-model-test-XXXXXX";
        const char* d = ::mkdtemp(tmpl.data());
        REQUIRE(d != nullptr);
        path = d;
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
};

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST_CASE("time_table interpolates in log-log space between measured points") {
    const time_table t({{1024, 1e-6, 0}, {1 << 20, 1e-3, 0}});
    CHECK(t.predict(1024) == approx(1e-6));
    CHECK(t.predict(1 << 20) == approx(1e-3));
    // log-log midpoint of (2^10, 1e-6) and (2^20, 1e-3) is (2^15, 10^-4.5).
    CHECK(t.predict(32768) == approx(3.16227766e-5).epsilon(1e-6));
}

TEST_CASE("time_table extrapolation: latency floor below, last bandwidth above") {
    const time_table t({{1000, 2e-6, 0}, {2000, 3e-6, 0}});
    CHECK(t.predict(1) == approx(2e-6));
    CHECK(t.predict(4000) == approx(5e-6));  // slope 1e-9 s/B from the last segment
    const time_table flat({{1000, 5e-6, 0}, {2000, 4e-6, 0}});
    CHECK(flat.predict(1e6) == approx(4e-6));  // never below the last time
}

TEST_CASE("time_table: the last size of a table whose last slope overflows predicts its time (found by fuzz_model)") {
    // A loadable model file's times: finite, but their slope is infinite, and 0 x inf is NaN.
    const time_table t({{0.896, 1.4e219, 0}, {1.0, 1.7976931348623157e308, 1}});
    CHECK(t.predict(1.0) == 1.7976931348623157e308);
    CHECK(t.predict(2.0) == std::numeric_limits<double>::infinity());
}

TEST_CASE("time_table drops invalid points and keeps one point per size") {
    time_table t({{-1, 1, 0}, {0, 1, 0}, {100, -1, 0}, {100, 1e-6, 0}, {50, 5e-7, 0}});
    REQUIRE(t.points().size() == 2);
    CHECK(t.points()[0].size == 50);
    t.set({100, 2e-6, 0});
    CHECK(t.points().size() == 2);
    CHECK(t.predict(100) == approx(2e-6));
    CHECK(time_table().predict(10) == 0);
}

TEST_CASE("robust_summary rejects outliers and trims") {
    const auto e = robust_summary({1.0, 1.1, 0.9, 1.05, 50.0, 1.0, 0.95});
    CHECK(e.kept == 6);
    CHECK(e.value == approx(1.0).epsilon(0.05));
    CHECK(e.spread > 0);
    CHECK(robust_summary({}).kept == 0);
    CHECK(robust_summary({3.0}).value == 3.0);
    CHECK(median({4.0, 1.0, 3.0, 2.0}) == 2.5);
}

TEST_CASE("analytic defaults give sane orderings with no measurement") {
    const cost_model m;
    // Faster levels are cheaper, device ends add PCIe, library packing of tiny blocks costs more.
    CHECK(m.predict("p2p.package.hh", 1 << 20) < m.predict("p2p.node.hh", 1 << 20));
    CHECK(m.predict("p2p.node.hh", 1 << 20) < m.predict("p2p.network.hh", 1 << 20));
    CHECK(m.predict("p2p.node.hh", 1 << 20) < m.predict("p2p.node.dd", 1 << 20));
    CHECK(m.predict_pack(true, false, 1, 1 << 20) > m.predict_pack(false, false, 1, 1 << 20));
    CHECK(m.predict_pack(false, false, 1, 1 << 20) > m.predict_pack(false, false, 512, 1 << 20));
    CHECK_FALSE(m.measured("copy.memcpy"));
}

TEST_CASE("pack predictions interpolate across measured block lengths") {
    cost_model m;
    m.set(table_names::pack(false, false, 8), time_table({{1024, 1e-7, 0}, {1 << 20, 1e-4, 0}}));
    m.set(table_names::pack(false, false, 64), time_table({{1024, 5e-8, 0}, {1 << 20, 5e-5, 0}}));
    const double b8 = m.predict_pack(false, false, 8, 1 << 20), b64 = m.predict_pack(false, false, 64, 1 << 20);
    const double b16 = m.predict_pack(false, false, 16, 1 << 20);
    CHECK(b8 == approx(1e-4));
    CHECK(b64 == approx(5e-5));
    CHECK(b16 < b8);
    CHECK(b16 > b64);
    CHECK(m.predict_pack(false, false, 1, 1 << 20) > b8);  // below the measured lengths: scaled up
}

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

TEST_CASE("model file round trip, written atomically and readable by the user only") {
    const temp_dir scratch;
    const std::string path = scratch.path + "/sub/model.json";
    cost_model m;
    m.id = {"hostA", "none", "Open MPI v4.1.4"};
    m.set("copy.memcpy", time_table({{1024, 1e-7, 1e-9}, {1 << 20, 1e-4, 1e-6}}));
    save_model(m, path);
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    const auto r = load_model(path, &m.id);
    REQUIRE(r.model);
    CHECK(r.problem.empty());
    CHECK(r.model->tables() == m.tables());
    CHECK(r.model->id == m.id);
}

TEST_CASE("missing, corrupt, stale and foreign model files are diagnosed, never fatal") {
    const temp_dir scratch;
    const std::string& dir = scratch.path;
    const model_identity me{"hostA", "none", "mpi"};

    auto missing = load_model(dir + "/nope.json", &me);
    CHECK_FALSE(missing.model);
    CHECK(missing.missing);

    write_file(dir + "/garbage.json", "{not json");
    auto garbage = load_model(dir + "/garbage.json", &me);
    CHECK_FALSE(garbage.model);
    CHECK_FALSE(garbage.missing);
    CHECK(garbage.problem.find("corrupt") != std::string::npos);

    write_file(dir + "/other.json", "{\"hello\": 1}");
    CHECK(load_model(dir + "/other.json", &me).problem.find("not a shunt model") != std::string::npos);

    write_file(dir + "/stale.json", "{\"schema\":\"shunt-model\",\"version\":0,\"identity\":{},\"tables\":{}}");
    CHECK(load_model(dir + "/stale.json", &me).problem.find("stale") != std::string::npos);

    write_file(
        dir + "/badentry.json",
        "{\"schema\":\"shunt-model\",\"version\":1,\"identity\":{\"host\":\"hostA\",\"gpu\":\"none\",\"mpi\":\"mpi\"},"
        "\"tables\":{\"copy.memcpy\":[[1024,-5,0]]}}");
    CHECK(load_model(dir + "/badentry.json", &me).problem.find("out-of-range") != std::string::npos);

    cost_model foreign;
    foreign.id = {"hostB", "none", "mpi"};
    save_model(foreign, dir + "/foreign.json");
    const auto f = load_model(dir + "/foreign.json", &me);
    CHECK_FALSE(f.model);
    CHECK(f.problem.find("foreign") != std::string::npos);
    CHECK(load_model(dir + "/foreign.json", nullptr).model);  // validation without identity
}

TEST_CASE("default model path follows XDG, then HOME, one file per host and MPI") {
    const model_identity id{"node-7", "none", "Open MPI v4.1.4"};
    CHECK(model_file_name(id) == "model-node-7-Open_MPI_v4.1.4.json");
    CHECK(default_model_path("/x/cache", "/home/u", id) == "/x/cache/shunt/model-node-7-Open_MPI_v4.1.4.json");
    CHECK(default_model_path(nullptr, "/home/u", id) == "/home/u/.cache/shunt/model-node-7-Open_MPI_v4.1.4.json");
    CHECK(default_model_path("relative", "/home/u", id) == "/home/u/.cache/shunt/model-node-7-Open_MPI_v4.1.4.json");
    CHECK(default_model_path(nullptr, nullptr, id).empty());
    CHECK(model_file_name({"a/b", "none", ""}) == "model-a_b-unknown.json");
    const char* env[] = {"HOME=/h", "XDG_CACHE_HOMEX=/no", "XDG_CACHE_HOME=/c"};
    CHECK(resolve_model_path("", env, id) == "/c/shunt/model-node-7-Open_MPI_v4.1.4.json");
    CHECK(resolve_model_path("/explicit.json", env, id) == "/explicit.json");
    CHECK(environment_lookup(env, "HOM") == nullptr);
}

TEST_CASE("online refinement moves a wrong default toward observed times, bounded") {
    cost_model m;
    const double before = m.predict("copy.memcpy", 65536);
    const auto g0 = m.generation();
    for (int i = 0; i < 20; ++i) m.observe("copy.memcpy", 65536, before * 3);
    CHECK(m.predict("copy.memcpy", 65536) == approx(before * 3).epsilon(0.05));
    CHECK(m.generation() > g0);
    CHECK(m.predict("copy.memcpy", 64) == approx(m.analytic("copy.memcpy", 64)));  // other decade untouched
    for (int i = 0; i < 50; ++i) m.observe("copy.memcpy", 65536, before * 1000);
    CHECK(m.predict("copy.memcpy", 65536) <= before * 8 * 1.0001);
    m.observe("copy.memcpy", 65536, -1);  // ignored
    m.observe("copy.memcpy", 65536, 0.0 / 0.0);
    CHECK(std::isfinite(m.predict("copy.memcpy", 65536)));
}

TEST_CASE("online refinement: one outlier among steady observations does not move the correction") {
    cost_model m;
    const double before = m.predict("copy.memcpy", 1 << 20);
    for (int i = 0; i < 2; ++i) m.observe("copy.memcpy", 1 << 20, before * 2);
    CHECK(m.predict("copy.memcpy", 1 << 20) == approx(before));  // below the quorum: unchanged
    m.observe("copy.memcpy", 1 << 20, before * 2);
    CHECK(m.predict("copy.memcpy", 1 << 20) == approx(before * 2));
    const auto g = m.generation();
    m.observe("copy.memcpy", 1 << 20, before * 100);  // a preempted call
    CHECK(m.predict("copy.memcpy", 1 << 20) == approx(before * 2));
    CHECK(m.generation() == g);
    for (int i = 0; i < 7; ++i) m.observe("copy.memcpy", 1 << 20, before * 0.5);  // a real change wins
    CHECK(m.predict("copy.memcpy", 1 << 20) == approx(before * 0.5));
}

namespace {

/// 8 ranks: packages of 2, nodes of 4.
hierarchy three_levels() {
    return hierarchy(8, {{0, 0, 1, 1, 2, 2, 3, 3}, {0, 0, 0, 0, 1, 1, 1, 1}}, {"package", "node"});
}

/// One rank's tuner calls agree with nobody.
const collective_tuner::agree_fn alone = [](double*, int) {};

}  // namespace

TEST_CASE("keeping some levels merges the dropped level's groups into the next kept one") {
    const hierarchy h = three_levels();
    const hierarchy node_only = h.keep_levels(0b10);
    REQUIRE(node_only.levels() == 1);
    CHECK(node_only.name(0) == "node");
    CHECK(node_only.groups(0) == 2);
    CHECK(node_only.members(0, 1).size() == 4);
    const hierarchy package_only = h.keep_levels(0b01);
    REQUIRE(package_only.levels() == 1);
    CHECK(package_only.groups(0) == 4);
    CHECK(h.keep_levels(0).levels() == 0);
    CHECK(h.keep_levels(0b11).levels() == 2);
}

TEST_CASE("collective planner: the candidate sets of levels and their table names") {
    const coll_shape s = coll_shape::of(three_levels());
    CHECK(s.signature() == "p8.package2.node4");
    CHECK(collective_tuner::level_sets(s) == std::vector<std::uint32_t>{0b11, 0b10, 0b01, 0b00});
    CHECK(table_names::collective(coll_op::allreduce, coll_method::hierarchical, s) ==
          "coll.allreduce.hierarchical.p8.package2.node4");
    CHECK(table_names::collective(coll_op::allreduce, coll_method::hierarchical, s, 0b10) ==
          "coll.allreduce.hierarchical.p8.package2.node4.over-node");
    CHECK(table_names::collective(coll_op::allreduce, coll_method::hierarchical, s, 0) ==
          "coll.allreduce.hierarchical.p8.package2.node4.over-flat");
    CHECK(table_names::collective(coll_op::allreduce, coll_method::library, s, 0b10) ==
          "coll.allreduce.library.p8.package2.node4");
    CHECK(s.schedule_text(0b11) == "over package+node");
    CHECK(s.schedule_text(0) == "flat");
    // A flat shape has one candidate, itself.
    CHECK(collective_tuner::level_sets(coll_shape::of(hierarchy(4))) == std::vector<std::uint32_t>{0});
}

TEST_CASE("collective planner picks how many levels from the model") {
    const coll_shape s = coll_shape::of(three_levels());
    const double bytes = 1 << 20;
    SUBCASE("analytic model: every set competes and the full hierarchy wins on a slow network") {
        const cost_model m;
        collective_tuner tuner(s, 0);
        const auto p = tuner.choose(m, coll_op::allreduce, 1 << 20, std::nullopt, alone);
        CHECK(p.method == coll_method::hierarchical);
        CHECK(p.levels == 0b11);
        tuner.for_each([&](const coll_decision& d) { CHECK(d.level_predictions.size() == 4); });
    }
    SUBCASE("measured tables: only sets with a table compete, and the fastest one is run") {
        cost_model m;
        auto flat_table = [](double seconds) { return time_table({{1024, seconds, 0}, {1 << 24, seconds, 0}}); };
        m.set(table_names::collective(coll_op::allreduce, coll_method::library, s), flat_table(9e-3));
        m.set(table_names::collective(coll_op::allreduce, coll_method::hierarchical, s), flat_table(5e-3));
        m.set(table_names::collective(coll_op::allreduce, coll_method::hierarchical, s, 0b10), flat_table(3e-3));
        collective_tuner tuner(s, 3);
        CHECK(tuner.candidate_sets(m, coll_op::allreduce) == std::vector<std::uint32_t>{0b11, 0b10});
        const auto p = tuner.choose(m, coll_op::allreduce, 1 << 20, std::nullopt, alone);
        CHECK_FALSE(p.timed);  // decided from the tables, nothing to measure
        CHECK(p.method == coll_method::hierarchical);
        CHECK(p.levels == 0b10);
        // The library still wins where it is faster than the best set of levels.
        m.set(table_names::collective(coll_op::reduce, coll_method::library, s), flat_table(2e-3));
        m.set(table_names::collective(coll_op::reduce, coll_method::hierarchical, s), flat_table(5e-3));
        m.set(table_names::collective(coll_op::reduce, coll_method::hierarchical, s, 0), flat_table(2.5e-3));
        const auto r = tuner.choose(m, coll_op::reduce, 1 << 20, std::nullopt, alone);
        CHECK(r.method == coll_method::library);
        tuner.for_each([&](const coll_decision& d) {
            if (d.op == coll_op::reduce) CHECK(d.levels == 0);
        });
    }
    SUBCASE("the ranks agree: the slowest rank's prediction of each set decides") {
        const cost_model m;
        collective_tuner tuner(s, 3);
        // What is agreed: a "no measurement" flag, a "no table" flag per set, the library's
        // prediction and each set's (the full hierarchy's first). Another rank's model finds
        // the full hierarchy ten times slower than this one does.
        const collective_tuner::agree_fn other = [](double* v, int n) {
            REQUIRE(n == 11);
            v[6] *= 10;
        };
        const auto p = tuner.choose(m, coll_op::allgather, static_cast<std::int64_t>(bytes), std::nullopt, other);
        CHECK(p.timed);  // no tables: measured in the run, against the agreed best set
        CHECK(p.levels != 0b11);
    }
    SUBCASE("a table counts only where every rank has it (regression: a rank without the file hung the others)") {
        cost_model m;
        auto flat_table = [](double seconds) { return time_table({{1024, seconds, 0}, {1 << 24, seconds, 0}}); };
        m.set(table_names::collective(coll_op::allreduce, coll_method::library, s), flat_table(9e-3));
        m.set(table_names::collective(coll_op::allreduce, coll_method::hierarchical, s), flat_table(5e-3));
        collective_tuner with_tables(s, 3), without(s, 3);
        int calls = 0;
        // This rank has the tables; the other rank has none: every flag is raised by the other.
        const collective_tuner::agree_fn other_lacks = [&](double* v, int n) {
            REQUIRE(n == 11);
            ++calls;
            for (int i = 0; i <= 4; ++i) v[i] = 1;
        };
        const auto p = with_tables.choose(m, coll_op::allreduce, 1 << 20, std::nullopt, other_lacks);
        CHECK(p.timed);  // measured in the run, as the rank without tables does
        const auto q = without.choose(cost_model{}, coll_op::allreduce, 1 << 20, std::nullopt, other_lacks);
        CHECK(q.timed);
        CHECK(calls == 2);  // both agreed, with vectors of the same length
        with_tables.for_each([&](const coll_decision&) { FAIL("nothing is decided while measuring"); });
    }
}

TEST_CASE("floating-point reductions are decided from the model, never measured in the run") {
    const coll_shape s = coll_shape::of(three_levels());
    const cost_model analytic;
    collective_tuner tuner(s, 3);
    const auto exact = tuner.choose(analytic, coll_op::allreduce, 1 << 20, std::nullopt, alone, true);
    CHECK(exact.timed);  // integers: measured on the first calls
    const auto inexact = tuner.choose(analytic, coll_op::allreduce, 1 << 20, std::nullopt, alone, false);
    CHECK_FALSE(inexact.timed);
    CHECK(inexact.fresh);
    CHECK(inexact.method == coll_method::hierarchical);  // the analytic model's choice on a slow network
    // The two are kept apart: the inexact one is settled, the exact one still measuring.
    CHECK(tuner.settled(coll_op::allreduce, 1 << 20, false) == coll_method::hierarchical);
    CHECK_FALSE(tuner.settled(coll_op::allreduce, 1 << 20, true).has_value());
    CHECK_FALSE(tuner.choose(analytic, coll_op::allreduce, 1 << 20, std::nullopt, alone, false).timed);
    int decided = 0;
    tuner.for_each([&](const coll_decision& d) {
        ++decided;
        CHECK_FALSE(d.live);
        CHECK_FALSE(d.latency_bound);  // 1 MiB: mostly volume, the analytic model decides
    });
    CHECK(decided == 1);
    // Which reductions are exact.
    // Small: the analytic library time is mostly latency, which the model cannot judge: the library.
    const auto small = tuner.choose(analytic, coll_op::allreduce, 4096, std::nullopt, alone, false);
    CHECK(small.method == coll_method::library);
    tuner.for_each([&](const coll_decision& d) {
        if (d.bytes == 4096) CHECK(d.latency_bound);
    });
    CHECK(detail::exact_reduction(MPI_INT, MPI_SUM));
    CHECK(detail::exact_reduction(MPI_DOUBLE, MPI_MAX));
    CHECK(detail::exact_reduction(MPI_2INT, MPI_MINLOC));
    CHECK_FALSE(detail::exact_reduction(MPI_DOUBLE, MPI_SUM));
    CHECK_FALSE(detail::exact_reduction(MPI_FLOAT, MPI_PROD));
    CHECK_FALSE(detail::exact_reduction(MPI_C_DOUBLE_COMPLEX, MPI_SUM));
}

namespace {

/// `rows` blocks of `len` bytes, `stride` bytes apart (one element).
type_info rows_info(std::int64_t rows, std::int64_t len, std::int64_t stride) {
    type_info t;
    t.form.dims = {{rows, stride}};
    t.form.blocks = {{0, len}};
    t.size = rows * len;
    t.extent = t.true_extent = (rows - 1) * stride + len;
    return t;
}

/// One MPI_Pack through the planner as the runtime makes it: the decision, and what to run.
struct planned {
    plan_decision d;
    planner::measure_call m;
};
planned pack_call(planner& p, const type_info& t) {
    planned c;
    c.d = p.pack(t, 1, false, nullptr, nullptr, &c.m);
    return c;
}

constexpr std::uint8_t lib = 0, host = 1;

/// One call that takes `lib_s` or `host_s` seconds, whichever method it runs; the method (through
/// `ran`) and whether it settled the key.
bool timed_call(planner& p, const type_info& t, double lib_s, double host_s, std::uint8_t* ran = nullptr) {
    const planned c = pack_call(p, t);
    if (ran) *ran = c.m.method;
    return p.record(c.m, c.m.method == lib ? lib_s : host_s);
}

/// The two warm-up calls of a new key.
void warm_up(planner& p, const type_info& t) {
    for (int i = 0; i < 2; ++i) {
        const planned c = pack_call(p, t);
        REQUIRE(c.m.measuring);
        REQUIRE_FALSE(c.m.timed);
    }
}

/// The second look at a class whose first verdict (`verdict`) was close: recheck_after calls of
/// the verdict, untimed; two warm-ups, the verdict and then the other; then the timed calls in
/// the first look's order, led by the verdict, each taking `lib_s` or `host_s` (`made`: calls
/// since the verdict the test made itself). Returns whether the last call settled the class.
bool second_look(planner& p, const type_info& t, std::uint8_t verdict, double lib_s, double host_s, int made = 0) {
    const std::uint8_t other = verdict == lib ? host : lib;
    for (int i = made; i < planner::recheck_after + 2; ++i) {
        const planned c = pack_call(p, t);
        REQUIRE(c.m.measuring);
        REQUIRE_FALSE(c.m.timed);
        REQUIRE(c.m.method == (i == planner::recheck_after + 1 ? other : verdict));
        REQUIRE(c.d.measured);
        REQUIRE(c.d.method() == (verdict == lib ? "library" : "host"));
    }
    const std::uint8_t order[] = {other, verdict, verdict, other, other, verdict, verdict, other};
    bool settled = false;
    for (const std::uint8_t want : order) {
        REQUIRE_FALSE(settled);
        std::uint8_t ran = 9;
        settled = timed_call(p, t, lib_s, host_s, &ran);
        REQUIRE(ran == want);
    }
    return settled;
}

}  // namespace

TEST_CASE("pack planner: a new key is measured on its own calls, and a slower shunt packer goes to the library") {
    planner p(std::make_shared<cost_model>());
    const type_info t = rows_info(8192, 8, 512);  // 64 KiB; the analytic model picks shunt's packer
    planned c = pack_call(p, t);
    REQUIRE(c.d.method() == "host");
    CHECK(c.m.measuring);
    CHECK_FALSE(c.m.timed);  // the first warm-up: the model's choice, untimed
    CHECK(c.m.method == host);
    CHECK_FALSE(p.record(c.m, 1e-6));  // an untimed call records nothing
    c = pack_call(p, t);
    CHECK_FALSE(c.m.timed);  // the second: the other method
    CHECK(c.m.method == lib);
    // Then timed: other, choice, choice, other, again; the library 10% faster every time.
    const std::uint8_t order[] = {lib, host, host, lib, lib, host, host, lib};
    static_assert(std::size(order) == 2 * planner::measure_trials);
    for (std::size_t i = 0; i < std::size(order); ++i) {
        std::uint8_t ran = 9;
        CHECK(timed_call(p, t, 90e-6, 100e-6 - static_cast<double>(i) * 1e-6, &ran) == (i + 1 == std::size(order)));
        CHECK(ran == order[i]);
    }
    c = pack_call(p, t);
    CHECK(c.d.method() == "library");
    CHECK(c.d.measured);
    CHECK(c.d.measured_s[lib] == approx(90e-6));
    CHECK(c.d.measured_s[host] == approx(96.5e-6));  // the median of four: 99, 98, 95, 94 us
    CHECK(p.decision(planner::key_of(t, 1, false)).method() == "library");
    // A close verdict: the class runs it, still measuring, until the second look, which agrees.
    CHECK(c.m.measuring);
    CHECK_FALSE(c.m.timed);
    CHECK(c.m.method == lib);
    CHECK(second_look(p, t, lib, 90e-6, 97e-6, 1));
    c = pack_call(p, t);
    CHECK_FALSE(c.m.measuring);
    CHECK_FALSE(c.d.measuring);
    CHECK(c.d.method() == "library");
    CHECK(c.d.measured_s[host] == approx(97e-6));
    // The same blocks 16 bytes apart are another key: measured afresh, from the model's choice.
    planned dense = pack_call(p, rows_info(8192, 8, 16));
    CHECK(dense.m.measuring);
    CHECK(dense.d.method() == "host");
    // Unpacking is its own key too.
    planner::measure_call u;
    CHECK(p.pack(t, 1, true, nullptr, nullptr, &u).method() == "host");
    CHECK(u.measuring);
}

TEST_CASE("pack planner: the verdict favours the library within the margin and survives model corrections") {
    auto model = std::make_shared<cost_model>();
    planner p(model);
    const type_info t = rows_info(8192, 8, 64);
    warm_up(p, t);
    for (int i = 0; i < 2 * planner::measure_trials; ++i)  // shunt faster, not by the margin
        timed_call(p, t, 100e-6, 100e-6 * (1 - planner::measure_margin / 2));
    CHECK(p.decision(planner::key_of(t, 1, false)).method() == "library");
    CHECK(second_look(p, t, lib, 100e-6, 100e-6 * (1 - planner::measure_margin / 2)));
    CHECK(pack_call(p, t).d.method() == "library");
    // A model correction recomputes the predictions; the measured choice stays.
    const auto g = model->generation();
    for (int i = 0; i < 10; ++i) model->observe(table_names::pack(false, false, 8), 65536, 1e-7);
    REQUIRE(model->generation() != g);
    const planned c = pack_call(p, t);
    CHECK(c.d.method() == "library");
    CHECK(c.d.measured);
    CHECK_FALSE(c.m.measuring);
    // Beating it by more than the margin keeps shunt's packer.
    const type_info u = rows_info(8192, 8, 80);
    warm_up(p, u);
    for (int i = 0; i < 2 * planner::measure_trials; ++i)
        timed_call(p, u, 100e-6, 100e-6 * (1 - 2 * planner::measure_margin));
    CHECK(p.decision(planner::key_of(u, 1, false)).method() == "host");
    CHECK(second_look(p, u, host, 100e-6, 100e-6 * (1 - 2 * planner::measure_margin)));
    CHECK(pack_call(p, u).d.method() == "host");
}

TEST_CASE("pack planner: the second look settles a close first verdict, and only a close one") {
    planner p(std::make_shared<cost_model>());
    // The first calls had the library 20% faster (shunt's packer slowed, say, by cold pages);
    // later both run at their steady speed, shunt's packer 30% faster: the second look decides.
    const type_info t = rows_info(8192, 8, 512);
    warm_up(p, t);
    int verdicts = 0;
    for (int i = 0; i < 2 * planner::measure_trials; ++i) verdicts += timed_call(p, t, 100e-6, 120e-6) ? 1 : 0;
    CHECK(verdicts == 1);
    CHECK(p.decision(planner::key_of(t, 1, false)).method() == "library");
    CHECK(p.decision(planner::key_of(t, 1, false)).measuring);
    // A call timed in the first look that comes back late is not taken into the second.
    planner::measure_call late;
    late.measuring = late.timed = true;
    late.method = host;
    late.key = planner::key_of(t, 1, false);
    CHECK_FALSE(p.record(late, 1.0));
    CHECK(second_look(p, t, lib, 100e-6, 70e-6));
    planned c = pack_call(p, t);
    CHECK_FALSE(c.m.measuring);
    CHECK(c.d.method() == "host");
    CHECK(c.d.measured_s[lib] == approx(100e-6));  // the second look's times alone
    CHECK(c.d.measured_s[host] == approx(70e-6));
    for (int i = 0; i < 100; ++i) REQUIRE_FALSE(pack_call(p, t).m.measuring);  // settled for good
    CHECK_FALSE(p.record(late, 1.0));

    // A first verdict of 2x or more either way is final: no second look.
    for (const double host_s : {40e-6, 250e-6}) {
        const type_info wide = rows_info(8192, 8, host_s < 100e-6 ? 640 : 768);
        warm_up(p, wide);
        for (int i = 0; i < 2 * planner::measure_trials; ++i) timed_call(p, wide, 100e-6, host_s);
        c = pack_call(p, wide);
        CHECK_FALSE(c.m.measuring);
        CHECK(c.d.method() == (host_s < 100e-6 ? "host" : "library"));
    }
}

TEST_CASE("pack planner: a clear win of the model's choice settles at once; noise against it does not") {
    planner p(std::make_shared<cost_model>());
    const type_info clear = rows_info(8192, 8, 32);
    warm_up(p, clear);
    CHECK_FALSE(timed_call(p, clear, 50e-6, 10e-6));  // the library
    CHECK(timed_call(p, clear, 50e-6, 10e-6));  // shunt, 5x faster: settled after one each
    CHECK(pack_call(p, clear).d.method() == "host");

    // The model's choice slow once (a preempted call, say): no early verdict against it.
    const type_info noisy = rows_info(8192, 8, 48);
    warm_up(p, noisy);
    CHECK_FALSE(timed_call(p, noisy, 20e-6, 100e-6));  // the library
    CHECK_FALSE(timed_call(p, noisy, 20e-6, 100e-6));  // shunt, preempted
    int settled = 0;
    for (int i = 2; i < 2 * planner::measure_trials; ++i)
        settled += timed_call(p, noisy, 20e-6, 15e-6) ? 1 : 0;  // not 2x: no early verdict either
    CHECK(settled == 1);
    CHECK(p.decision(planner::key_of(noisy, 1, false)).method() == "host");
    CHECK(p.decision(planner::key_of(noisy, 1, false)).measured_s[host] == approx(15e-6));
    // 0.75 is a close verdict: the second look (led by shunt's packer) confirms it.
    CHECK(second_look(p, noisy, host, 20e-6, 15e-6));
    const planned c = pack_call(p, noisy);
    CHECK_FALSE(c.m.measuring);
    CHECK(c.d.method() == "host");
    CHECK(c.d.measured_s[host] == approx(15e-6));
}

TEST_CASE("pack planner: what is not measured") {
    planner p(std::make_shared<cost_model>());
    // Too quick to time (8 bytes), too costly to try twice (256 MiB of 1-byte blocks).
    for (const type_info& t : {rows_info(1, 8, 8), rows_info(std::int64_t{1} << 28, 1, 2)}) {
        const planned c = pack_call(p, t);
        CHECK_FALSE(c.m.measuring);
        CHECK_FALSE(c.d.measuring);
    }
    // A forced method is never measured.
    planner forced(std::make_shared<cost_model>(), plan_overrides{"library"});
    CHECK_FALSE(pack_call(forced, rows_info(8192, 8, 512)).m.measuring);
    // A caller that does not measure (point-to-point) gets the model's choice and moves nothing on.
    const type_info t = rows_info(8192, 8, 512);
    for (int i = 0; i < 4; ++i) {
        const plan_decision d = p.pack(t, 1, false);
        CHECK(d.measuring);
        CHECK(d.method() == "host");
    }
    const planned first = pack_call(p, t);
    CHECK(first.m.measuring);
    CHECK_FALSE(first.m.timed);  // still a warm-up
    planner::measure_call untimed;
    CHECK_FALSE(p.record(untimed, 1e-6));
}

TEST_CASE("pack planner: pairs of consecutive calls decide, so a step in the machine's speed does not") {
    // As measured unpacking 16-byte blocks 512 bytes apart: both packers ran 1.0-1.6 ms, then both
    // dropped to about 0.7 ms for the last pair, where the library happened to run first.
    planner p(std::make_shared<cost_model>());
    const type_info t = rows_info(65536, 16, 512);
    warm_up(p, t);
    const double lib_s[] = {1582e-6, 1302e-6, 1293e-6, 702e-6};
    const double host_s[] = {1058e-6, 1012e-6, 1017e-6, 726e-6};
    int li = 0, hi = 0;
    bool settled = false;
    for (int i = 0; i < 2 * planner::measure_trials; ++i) {
        const planned c = pack_call(p, t);
        REQUIRE(c.m.timed);
        settled = p.record(c.m, c.m.method == lib ? lib_s[li++] : host_s[hi++]);
    }
    REQUIRE(settled);
    const plan_decision d = pack_call(p, t).d;
    // The best times say the library (702 against 726 us); the pairs say shunt (ratios 0.67,
    // 0.78, 0.79, 1.03: median 0.78).
    CHECK(d.method() == "host");
    CHECK(d.measured_s[lib] == approx((1302e-6 + 1293e-6) / 2));
    CHECK(d.measured_s[host] == approx((1012e-6 + 1017e-6) / 2));
}

TEST_CASE("pack planner: the counts of one type are one class, measured once, per byte") {
    planner p(std::make_shared<cost_model>());
    // 8-byte blocks 512 bytes apart: 8192 rows (64 KiB) and 9000 rows (70 KiB) share a class
    // (bytes within a quarter octave, the same blocks and density); 16384 rows do not.
    const type_info a = rows_info(8192, 8, 512), b = rows_info(9000, 8, 512), far = rows_info(16384, 8, 512);
    CHECK(planner::class_of(planner::key_of(a, 1, false)) == planner::class_of(planner::key_of(b, 1, false)));
    CHECK_FALSE(planner::class_of(planner::key_of(a, 1, false)) == planner::class_of(planner::key_of(far, 1, false)));
    CHECK_FALSE(planner::class_of(planner::key_of(a, 1, false)) == planner::class_of(planner::key_of(a, 1, true)));
    // The class's calls alternate between the two counts; the warm-ups and order run across them.
    planned c = pack_call(p, a);
    CHECK((c.m.measuring && !c.m.timed && c.m.method == host));
    c = pack_call(p, b);
    CHECK((c.m.measuring && !c.m.timed && c.m.method == lib));
    // Every library call on the larger count, every shunt call on the smaller: per call shunt
    // looks 9% faster, per byte it is 4% slower, and per byte decides.
    const double per_byte = 1e-9;
    const std::uint8_t order[] = {lib, host, host, lib, lib, host, host, lib};
    bool settled = false;
    for (std::uint8_t want : order) {
        const type_info& t = want == lib ? b : a;
        c = pack_call(p, t);
        REQUIRE(c.m.timed);
        REQUIRE(c.m.method == want);
        settled = p.record(c.m, static_cast<double>(t.size) * per_byte * (want == lib ? 1.0 : 1.04));
    }
    REQUIRE(settled);
    CHECK(p.decision(planner::key_of(b, 1, false)).method() == "library");  // the key that decided it
    CHECK_FALSE(p.decision(planner::key_of(a, 1, false)).measured);  // the other: on its next call
    // 4% is close: the second look (here on the smaller count alone) confirms it.
    REQUIRE(second_look(p, a, lib, 65536 * per_byte, 65536 * per_byte * 1.04));
    CHECK(p.decision(planner::key_of(b, 1, false)).measuring);  // settled on its next call
    c = pack_call(p, a);
    CHECK_FALSE(c.m.measuring);
    CHECK(c.d.measured);
    CHECK(c.d.method() == "library");
    CHECK(c.d.measured_s[lib] == approx(65536 * per_byte));
    CHECK(c.d.measured_s[host] == approx(65536 * per_byte * 1.04));
    // A count never seen before takes the verdict at once, its times scaled to its bytes.
    bool is_new = false;
    planner::measure_call m;
    const plan_decision d = p.pack(rows_info(8500, 8, 512), 1, false, &is_new, nullptr, &m);
    CHECK(is_new);
    CHECK_FALSE(m.measuring);
    CHECK(d.measured);
    CHECK(d.method() == "library");
    CHECK(d.measured_s[lib] == approx(68000 * per_byte));
    // Another class is measured afresh.
    CHECK(pack_call(p, far).m.measuring);
}

TEST_CASE("pack planner: past max_keys, new keys are decided afresh, uncached and unmeasured") {
    planner p(std::make_shared<cost_model>());
    // Settle one class (1-byte blocks 2 apart, 4096-4800 bytes) for shunt's packer.
    const type_info first = rows_info(4096, 1, 2);
    warm_up(p, first);
    for (int i = 0; i < 2 * planner::measure_trials; ++i) timed_call(p, first, 100e-6, 10e-6);
    REQUIRE(p.decision(planner::key_of(first, 1, false)).measured);
    // Fill the cache with other keys (2-byte blocks of every count).
    std::size_t keys = 0;
    p.for_each([&](const plan_decision&) { ++keys; });
    for (std::int64_t n = 1; keys < planner::max_keys; ++n, ++keys) p.pack(rows_info(n, 2, 4), 1, false);
    CHECK(p.uncached() == 0);
    // A new key of the settled class: its verdict, not cached, not measured.
    bool is_new = true;
    std::atomic<std::uint64_t>* taken = nullptr;
    planner::measure_call m;
    plan_decision d = p.pack(rows_info(4500, 1, 2), 1, false, &is_new, &taken, &m);
    CHECK_FALSE(is_new);
    CHECK_FALSE(m.measuring);
    CHECK(d.measured);
    CHECK(d.method() == "host");
    CHECK(p.uncached() == 1);
    REQUIRE(taken != nullptr);
    CHECK(taken->load() == 1);
    // A new key of no class: the model's choice, never measured, however often it comes.
    for (int i = 0; i < 4; ++i) {
        d = p.pack(rows_info(8192, 8, 512), 1, false, nullptr, nullptr, &m);
        CHECK_FALSE(m.measuring);
        CHECK_FALSE(d.measuring);
        CHECK_FALSE(d.measured);
    }
    CHECK(p.uncached() == 5);
    keys = 0;
    p.for_each([&](const plan_decision&) { ++keys; });
    CHECK(keys == planner::max_keys);
    // Keys already cached still answer from the cache.
    CHECK_FALSE(p.pack(first, 1, false, &is_new).measuring);
    CHECK(p.uncached() == 5);
}
