// tests/unit/plan/test_nonblocking.cpp: the plan of nonblocking and persistent collectives: one agreement when a communicator is set up, the model's decision per size class, the blocking calls' settled decisions first.
#include <doctest/doctest.h>

#include <shunt/model/model.hpp>
#include <shunt/plan/collective.hpp>
#include <shunt/topology/hierarchy.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

using namespace shunt;

namespace {

/// 8 ranks: packages of 2, nodes of 4.
hierarchy three_levels() {
    return hierarchy(8, {{0, 0, 1, 1, 2, 2, 3, 3}, {0, 0, 0, 0, 1, 1, 1, 1}}, {"package", "node"});
}

time_table flat_table(double seconds) { return time_table({{1, seconds, 0}, {std::ldexp(1.0, 45), seconds, 0}}); }

/// Tables that make shunt's schedule over `fastest` win every size of allreduce and alltoall,
/// and the library win every size of bcast.
cost_model crafted(const coll_shape& s, std::uint32_t fastest) {
    cost_model m;
    for (coll_op op : {coll_op::allreduce, coll_op::alltoall}) {
        m.set(table_names::collective(op, coll_method::library, s), flat_table(9e-3));
        m.set(table_names::collective(op, coll_method::hierarchical, s), flat_table(5e-3));
        m.set(table_names::collective(op, coll_method::hierarchical, s, fastest), flat_table(2e-3));
    }
    m.set(table_names::collective(coll_op::bcast, coll_method::library, s), flat_table(1e-3));
    m.set(table_names::collective(coll_op::bcast, coll_method::hierarchical, s), flat_table(4e-3));
    return m;
}

}  // namespace

TEST_CASE("nonblocking plan: one agreement of every operation and size class, decided from the model") {
    const coll_shape s = coll_shape::of(three_levels());
    const cost_model m = crafted(s, 0b10);
    const collective_tuner tuner(s, 3);
    int calls = 0, length = 0;
    const nonblocking_plan plan(tuner, m, [&](double*, int n) {
        ++calls;
        length = n;
    });
    CHECK(calls == 1);
    CHECK(length == static_cast<int>(coll_op_names.size() * nonblocking_plan::max_class * (2 * 4 + 3)));
    for (std::int64_t bytes : {std::int64_t{1}, std::int64_t{4096}, std::int64_t{1} << 30}) {
        CAPTURE(bytes);
        const auto a = plan.choose(tuner, coll_op::allreduce, bytes, true, std::nullopt);
        CHECK(a.method == coll_method::hierarchical);
        CHECK(a.levels == 0b10);  // the measured fastest set, not every level
        CHECK_FALSE(a.settled);
        CHECK(plan.choose(tuner, coll_op::alltoall, bytes, true, std::nullopt).method == coll_method::hierarchical);
        CHECK(plan.choose(tuner, coll_op::bcast, bytes, true, std::nullopt).method == coll_method::library);
    }
    // Past the planned classes, and no bytes at all: the nearest class's decision.
    CHECK(plan.choose(tuner, coll_op::allreduce, std::int64_t{1} << 50, true, std::nullopt).levels == 0b10);
    CHECK(plan.choose(tuner, coll_op::allreduce, 0, true, std::nullopt).method == coll_method::hierarchical);
}

TEST_CASE("nonblocking plan: a table counts only where every rank has it") {
    const coll_shape s = coll_shape::of(three_levels());
    const cost_model m = crafted(s, 0b10);
    const collective_tuner tuner(s, 3);
    // Another rank has no table at all: the agreement (an element-wise maximum) with its facts,
    // in the plan's order (operations, then size classes), leaves the analytic model to decide,
    // and it keeps the library where latency dominates (small messages).
    const cost_model none;
    const nonblocking_plan plan(tuner, m, [&](double* v, int len) {
        std::size_t at = 0;
        for (std::size_t op = 0; op < coll_op_names.size(); ++op)
            for (int c = 1; c <= nonblocking_plan::max_class; ++c)
                for (double x : tuner.model_facts(none, static_cast<coll_op>(op), nonblocking_plan::middle(c))) {
                    v[at] = std::max(v[at], x);
                    ++at;
                }
        CHECK(at == static_cast<std::size_t>(len));
    });
    CHECK(plan.choose(tuner, coll_op::allreduce, 64, true, std::nullopt).method == coll_method::library);
    const auto big = plan.choose(tuner, coll_op::allreduce, std::int64_t{1} << 28, true, std::nullopt);
    CHECK(big.method == coll_method::hierarchical);
    CHECK(big.levels == 0b11);  // the analytic model's best: every level, on a slow network
}

TEST_CASE("nonblocking plan: the blocking calls' settled decision comes first; SHUNT_COLL=shunt forces") {
    const coll_shape s = coll_shape::of(three_levels());
    collective_tuner tuner(s, 0);  // decides from the model, at once
    const nonblocking_plan plan(tuner, crafted(s, 0b10), [](double*, int) {});
    // Blocking calls on a model where the library wins settle the library for this size class.
    cost_model slow;
    slow.set(table_names::collective(coll_op::allreduce, coll_method::library, s), flat_table(1e-3));
    slow.set(table_names::collective(coll_op::allreduce, coll_method::hierarchical, s), flat_table(8e-3));
    const auto blocking = tuner.choose(
        slow, coll_op::allreduce, 5000, std::nullopt, [](double*, int) {}, true);
    REQUIRE(blocking.method == coll_method::library);
    const auto same_class = plan.choose(tuner, coll_op::allreduce, 6000, true, std::nullopt);
    CHECK(same_class.method == coll_method::library);
    CHECK(same_class.settled);
    // Another size class, and the same class for a key the blocking calls did not decide (a
    // floating-point reduction is keyed apart): the plan.
    CHECK(plan.choose(tuner, coll_op::allreduce, 1 << 20, true, std::nullopt).method == coll_method::hierarchical);
    CHECK(plan.choose(tuner, coll_op::allreduce, 6000, false, std::nullopt).method == coll_method::hierarchical);
    // Forced: shunt's schedule over the plan's levels, settled decisions or not.
    const auto forced = plan.choose(tuner, coll_op::allreduce, 6000, true, coll_method::hierarchical);
    CHECK(forced.method == coll_method::hierarchical);
    CHECK(forced.levels == 0b10);
    CHECK(plan.choose(tuner, coll_op::bcast, 1 << 20, true, coll_method::hierarchical).method ==
          coll_method::hierarchical);
}

TEST_CASE("nonblocking plan: a latency-bound blocking win of shunt's does not carry over") {
    const coll_shape s = coll_shape::of(three_levels());
    const cost_model analytic;  // no tables: the blocking calls measure
    collective_tuner tuner(s, 3);
    // The plan from tables where the library wins alltoall at every size.
    cost_model lib_wins;
    lib_wins.set(table_names::collective(coll_op::alltoall, coll_method::library, s), flat_table(1e-6));
    lib_wins.set(table_names::collective(coll_op::alltoall, coll_method::hierarchical, s), flat_table(4e-6));
    const nonblocking_plan plan(tuner, lib_wins, [](double*, int) {});
    REQUIRE(plan.choose(tuner, coll_op::alltoall, 8, true, std::nullopt).method == coll_method::library);
    // Blocking calls of 8 bytes (latency-bound) measure shunt's schedule twice as fast ...
    bool decided = false;
    for (int i = 0; i < 2 * collective_tuner::latency_trials && !decided; ++i) {
        const auto p = tuner.choose(analytic, coll_op::alltoall, 8, std::nullopt, [](double*, int) {}, true);
        REQUIRE(p.timed);
        decided = tuner.record(coll_op::alltoall, 8, p.method, p.method == coll_method::library ? 2e-6 : 1e-6,
                               [](double*, int) {});
    }
    REQUIRE(decided);
    REQUIRE(tuner.settled(coll_op::alltoall, 8) == coll_method::hierarchical);
    // ... and the nonblocking call keeps the plan's library.
    const auto p = plan.choose(tuner, coll_op::alltoall, 8, true, std::nullopt);
    CHECK(p.method == coll_method::library);
    CHECK_FALSE(p.settled);
}
