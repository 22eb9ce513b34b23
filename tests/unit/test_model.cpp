// Unit tests of the cost model: tables, interpolation, extrapolation, robust statistics, the
// model file (round trip, corrupt, stale, foreign, atomic write) and online refinement.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <shunt/collectives/reduction.hpp>
#include <shunt/model/file.hpp>
#include <shunt/model/stats.hpp>
#include <shunt/plan/collective.hpp>
#include <shunt/topology/hierarchy.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/stat.h>

using namespace shunt;

namespace {

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

void write_file(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
}

}  // namespace

TEST_CASE("time_table interpolates in log-log space between measured points") {
    const time_table t({{1024, 1e-6, 0}, {1 << 20, 1e-3, 0}});
    CHECK(t.predict(1024) == doctest::Approx(1e-6));
    CHECK(t.predict(1 << 20) == doctest::Approx(1e-3));
    // log-log midpoint of (2^10, 1e-6) and (2^20, 1e-3) is (2^15, 10^-4.5).
    CHECK(t.predict(32768) == doctest::Approx(3.16227766e-5).epsilon(1e-6));
}

TEST_CASE("time_table extrapolation: latency floor below, last bandwidth above") {
    const time_table t({{1000, 2e-6, 0}, {2000, 3e-6, 0}});
    CHECK(t.predict(1) == doctest::Approx(2e-6));
    CHECK(t.predict(4000) == doctest::Approx(5e-6));  // slope 1e-9 s/B from the last segment
    const time_table flat({{1000, 5e-6, 0}, {2000, 4e-6, 0}});
    CHECK(flat.predict(1e6) == doctest::Approx(4e-6));  // never below the last time
}

TEST_CASE("time_table drops invalid points and keeps one point per size") {
    time_table t({{-1, 1, 0}, {0, 1, 0}, {100, -1, 0}, {100, 1e-6, 0}, {50, 5e-7, 0}});
    REQUIRE(t.points().size() == 2);
    CHECK(t.points()[0].size == 50);
    t.set({100, 2e-6, 0});
    CHECK(t.points().size() == 2);
    CHECK(t.predict(100) == doctest::Approx(2e-6));
    CHECK(time_table().predict(10) == 0);
}

TEST_CASE("robust_summary rejects outliers and trims") {
    const auto e = robust_summary({1.0, 1.1, 0.9, 1.05, 50.0, 1.0, 0.95});
    CHECK(e.kept == 6);
    CHECK(e.value == doctest::Approx(1.0).epsilon(0.05));
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
    CHECK(b8 == doctest::Approx(1e-4));
    CHECK(b64 == doctest::Approx(5e-5));
    CHECK(b16 < b8);
    CHECK(b16 > b64);
    CHECK(m.predict_pack(false, false, 1, 1 << 20) > b8);  // below the measured lengths: scaled up
}

TEST_CASE("model file round trip, written atomically and readable by the user only") {
    const temp_dir scratch;
    const std::string path = scratch.path + "/sub/model.json";
    cost_model m;
    m.id = {"hostA", "none", "Open MPI v4.1.4"};
    m.set("copy.memcpy", time_table({{1024, 1e-7, 1e-9}, {1 << 20, 1e-4, 1e-6}}));
    save_model(m, path);
    struct stat st{};
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

    write_file(dir + "/badentry.json",
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
    CHECK(m.predict("copy.memcpy", 65536) == doctest::Approx(before * 3).epsilon(0.05));
    CHECK(m.generation() > g0);
    CHECK(m.predict("copy.memcpy", 64) == doctest::Approx(m.analytic("copy.memcpy", 64)));  // other decade untouched
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
    CHECK(m.predict("copy.memcpy", 1 << 20) == doctest::Approx(before));  // below the quorum: unchanged
    m.observe("copy.memcpy", 1 << 20, before * 2);
    CHECK(m.predict("copy.memcpy", 1 << 20) == doctest::Approx(before * 2));
    const auto g = m.generation();
    m.observe("copy.memcpy", 1 << 20, before * 100);  // a preempted call
    CHECK(m.predict("copy.memcpy", 1 << 20) == doctest::Approx(before * 2));
    CHECK(m.generation() == g);
    for (int i = 0; i < 7; ++i) m.observe("copy.memcpy", 1 << 20, before * 0.5);  // a real change wins
    CHECK(m.predict("copy.memcpy", 1 << 20) == doctest::Approx(before * 0.5));
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
