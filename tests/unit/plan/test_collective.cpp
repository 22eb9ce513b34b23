// tests/unit/plan/test_collective.cpp: the collective planner: candidate sets of levels, the
// choice among them from the model, and floating-point reductions decided from the model alone.
#include <doctest/doctest.h>

#include <shunt/collectives/reduction.hpp>
#include <shunt/model/model.hpp>
#include <shunt/plan/collective.hpp>
#include <shunt/topology/hierarchy.hpp>

using namespace shunt;

namespace {

/// 8 ranks: packages of 2, nodes of 4.
hierarchy three_levels() {
    return hierarchy(8, {{0, 0, 1, 1, 2, 2, 3, 3}, {0, 0, 0, 0, 1, 1, 1, 1}}, {"package", "node"});
}

/// One rank's tuner calls agree with nobody.
const collective_tuner::agree_fn alone = [](double*, int) {};

}  // namespace

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

TEST_CASE("collective planner: latency-bound calls are measured longer and need a clear win") {
    const coll_shape s = coll_shape::of(three_levels());
    const cost_model analytic;
    // Records `n` timings of each method (library first, as choose() alternates) for `bytes`;
    // true when the last one decided.
    const auto measure = [&](collective_tuner& t, std::int64_t bytes, int n, double lib_s, double hier_s) {
        bool decided = false;
        for (int i = 0; i < 2 * n && !decided; ++i) {
            const auto p = t.choose(analytic, coll_op::allgather, bytes, std::nullopt, alone, true);
            REQUIRE(p.timed);
            decided = t.record(coll_op::allgather, bytes, p.method, p.method == coll_method::library ? lib_s : hier_s,
                               alone);
        }
        return decided;
    };
    SUBCASE("8 bytes: three timings of each are not enough, twelve are") {
        collective_tuner t(s, 3);
        CHECK_FALSE(measure(t, 8, 3, 1e-6, 0.5e-6));
        CHECK(measure(t, 8, collective_tuner::latency_trials - 3, 1e-6, 0.5e-6));
        CHECK(t.settled(coll_op::allgather, 8) == coll_method::hierarchical);  // twice as fast: a clear win
        CHECK(t.measured_latency_bound(coll_op::allgather, 8));
        CHECK_FALSE(t.measured_latency_bound(coll_op::allgather, 16 << 20));
    }
    SUBCASE("8 bytes: a win within the latency margin keeps the library") {
        collective_tuner t(s, 3);
        CHECK(measure(t, 8, collective_tuner::latency_trials, 1e-6, 0.8e-6));
        CHECK(t.settled(coll_op::allgather, 8) == coll_method::library);
    }
    SUBCASE("16 MiB (mostly volume): three timings and the usual margin") {
        collective_tuner t(s, 3);
        CHECK(measure(t, 16 << 20, 3, 1e-2, 0.95e-2));
        CHECK(t.settled(coll_op::allgather, 16 << 20) == coll_method::hierarchical);
    }
}
