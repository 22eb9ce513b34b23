// tests/unit/plan/test_nccl_tuner.cpp: the NCCL tuner's table logic against hand-computed cost tables: a measured
// cell that wins, one within the margin, missing tables, other shapes, sizes outside the tables, NCCL's own limits.
#include <doctest/doctest.h>

#include <shunt/model/model.hpp>
#include <shunt/plan/nccl_tuner.hpp>

#include <array>
#include <set>
#include <string>

using namespace shunt;

namespace {

constexpr int na = 7, np = 3;  // NCCL 2.28's cost table: 7 algorithms x 3 protocols
using cost_table = std::array<float, na * np>;

constexpr int cell(nccl_algo a, nccl_proto p) { return static_cast<int>(a) * np + static_cast<int>(p); }

/// NCCL's table for an allreduce on a machine without CollNet or NVLS: tree and ring, every
/// protocol, PAT off; ring/ll128 is NCCL's pick (9 us).
cost_table nccl_table() {
    cost_table t;
    t.fill(-1.0f);
    t[cell(nccl_algo::tree, nccl_proto::ll)] = 10;
    t[cell(nccl_algo::tree, nccl_proto::ll128)] = 12;
    t[cell(nccl_algo::tree, nccl_proto::simple)] = 20;
    t[cell(nccl_algo::ring, nccl_proto::ll)] = 11;
    t[cell(nccl_algo::ring, nccl_proto::ll128)] = 9;
    t[cell(nccl_algo::ring, nccl_proto::simple)] = 15;
    return t;
}

/// The cell NCCL runs from a table, written out plainly: the first of least time among
/// non-negative entries (NCCL 2.28 topoGetAlgoInfo).
int nccl_runs(const cost_table& t) {
    int best = -1;
    for (int i = 0; i < na * np; ++i)
        if (t[i] >= 0 && (best < 0 || t[i] < t[best])) best = i;
    return best;
}

/// A table of `us` microseconds at every size from 1 KiB to 1 MiB.
time_table flat_us(double us) { return time_table({{1024, us * 1e-6, 0}, {1 << 20, us * 1e-6, 0}}); }

const nccl_shape r8n2{8, 2};

std::string name(nccl_algo a, nccl_proto p, nccl_shape s = r8n2, nccl_coll c = nccl_coll::allreduce) {
    return table_names::nccl(c, a, p, s);
}

constexpr int allreduce = static_cast<int>(nccl_coll::allreduce);

}  // namespace

TEST_CASE("nccl tuner: table names, collectives and the shapes a model holds") {
    CHECK(table_names::nccl(nccl_coll::allreduce, nccl_algo::ring, nccl_proto::ll128, r8n2) ==
          "nccl.allreduce.ring.ll128.r8n2");
    CHECK(table_names::nccl(nccl_coll::reduce_scatter, nccl_algo::nvls_tree, nccl_proto::simple, {16, 1}) ==
          "nccl.reduce_scatter.nvls_tree.simple.r16n1");
    // The enumerators are NCCL's values: ncclFuncAllReduce 4, NCCL_ALGO_PAT 6, NCCL_PROTO_SIMPLE 2.
    CHECK(static_cast<int>(nccl_coll::allreduce) == 4);
    CHECK(static_cast<int>(nccl_coll::broadcast) == 0);
    CHECK(static_cast<int>(nccl_algo::pat) == 6);
    CHECK(static_cast<int>(nccl_algo::ring) == 1);
    CHECK(static_cast<int>(nccl_proto::simple) == 2);
    CHECK(parse_nccl_coll("bcast") == nccl_coll::broadcast);
    CHECK(parse_nccl_coll("reduce_scatter") == nccl_coll::reduce_scatter);
    CHECK(!parse_nccl_coll("alltoall"));
    cost_model m;
    m.set(name(nccl_algo::ring, nccl_proto::ll), flat_us(5));
    m.set(name(nccl_algo::tree, nccl_proto::ll, {4, 1}), flat_us(5));
    m.set(name(nccl_algo::tree, nccl_proto::ll, {4, 1}, nccl_coll::allgather), flat_us(5));
    m.set("nccl.allreduce.ring.ll.r4nX", flat_us(5));  // malformed shape: not listed
    CHECK(nccl_shapes_in(m, nccl_coll::allreduce) == std::set<nccl_shape>{{4, 1}, {8, 2}});
    CHECK(nccl_shapes_in(m, nccl_coll::allgather) == std::set<nccl_shape>{{4, 1}});
    CHECK(nccl_shapes_in(m, nccl_coll::reduce).empty());
}

TEST_CASE("nccl tuner: a measured cell that beats NCCL's pick wins, and only measured cells stay") {
    cost_model m;
    // NCCL's pick ring/ll128 measures 50 us; tree/ll interpolates to 40 us at 2 KiB (log-log
    // between 20 us at 1 KiB and 80 us at 4 KiB: sqrt(20 * 80)); tree/simple measures 60 us.
    m.set(name(nccl_algo::ring, nccl_proto::ll128), flat_us(50));
    m.set(name(nccl_algo::tree, nccl_proto::ll), time_table({{1024, 20e-6, 0}, {4096, 80e-6, 0}}));
    m.set(name(nccl_algo::tree, nccl_proto::simple), flat_us(60));
    const nccl_tuner tuner(m, r8n2);
    CHECK(tuner.tables() == 3);
    cost_table t = nccl_table();
    REQUIRE(nccl_runs(t) == cell(nccl_algo::ring, nccl_proto::ll128));
    const nccl_tuning d = tuner.tune(allreduce, 2048, 1, t.data(), na, np);
    CHECK(d.verdict == nccl_verdict::changed);
    CHECK(d.nccl_algo_index == 1);
    CHECK(d.nccl_proto_index == 1);
    CHECK(d.algo_index == 0);
    CHECK(d.proto_index == 0);
    cost_table expected;
    expected.fill(-1.0f);
    expected[cell(nccl_algo::tree, nccl_proto::ll)] = 40;
    expected[cell(nccl_algo::tree, nccl_proto::simple)] = 60;
    expected[cell(nccl_algo::ring, nccl_proto::ll128)] = 50;
    for (int i = 0; i < na * np; ++i) {
        CAPTURE(i);
        CHECK(t[i] == doctest::Approx(expected[i]).epsilon(1e-5));
    }
    CHECK(nccl_runs(t) == cell(nccl_algo::tree, nccl_proto::ll));
    // Every enabled cell is reported, with NCCL's estimate and, where measured, the table's time.
    CHECK(d.cell_count == 6);
    const std::string text = nccl_tuning_text(d, r8n2);
    CHECK(text.find("nccl allreduce of 2048 B (class 2 KiB), r8n2: tree/ll instead of NCCL's ring/ll128") == 0);
    CHECK(text.find("tree/ll 40/10") != std::string::npos);
    CHECK(text.find("ring/simple -/15") != std::string::npos);
}

TEST_CASE("nccl tuner: NCCL's pick stays unless the fastest measured cell beats it by the margin") {
    // 3% margin: against NCCL's 50 us, 48.4 us wins and 48.6 us does not (nor does a tie).
    for (const auto& c : {std::pair{48.4, nccl_verdict::changed}, std::pair{48.6, nccl_verdict::within_margin},
                          std::pair{50.0, nccl_verdict::nccl_agrees}}) {
        const double rival_us = c.first;  // named, not bound: lambdas in doctest's macros capture it
        const nccl_verdict verdict = c.second;
        CAPTURE(rival_us);
        cost_model m;
        m.set(name(nccl_algo::ring, nccl_proto::ll128), flat_us(50));
        m.set(name(nccl_algo::ring, nccl_proto::simple), flat_us(rival_us));
        cost_table t = nccl_table();
        const cost_table before = t;
        const nccl_tuning d = nccl_tuner(m, r8n2).tune(allreduce, 4096, 1, t.data(), na, np);
        CHECK(d.verdict == verdict);
        if (verdict == nccl_verdict::changed) {
            CHECK(nccl_runs(t) == cell(nccl_algo::ring, nccl_proto::simple));
        } else {
            CHECK(t == before);
            CHECK(d.algo_index == 1);
            CHECK(d.proto_index == 1);
        }
    }
    SUBCASE("NCCL's pick measured fastest: kept, the table untouched") {
        cost_model m;
        m.set(name(nccl_algo::ring, nccl_proto::ll128), flat_us(10));
        m.set(name(nccl_algo::tree, nccl_proto::ll), flat_us(30));
        cost_table t = nccl_table();
        const cost_table before = t;
        CHECK(nccl_tuner(m, r8n2).tune(allreduce, 4096, 1, t.data(), na, np).verdict == nccl_verdict::nccl_agrees);
        CHECK(t == before);
    }
    SUBCASE("NCCL's pick unmeasured: nothing to compare it with, the table untouched") {
        cost_model m;
        m.set(name(nccl_algo::tree, nccl_proto::ll), flat_us(1));
        cost_table t = nccl_table();
        const cost_table before = t;
        const nccl_tuning d = nccl_tuner(m, r8n2).tune(allreduce, 4096, 1, t.data(), na, np);
        CHECK(d.verdict == nccl_verdict::nccl_unmeasured);
        CHECK(t == before);
        CHECK(nccl_tuning_text(d, r8n2).find("NCCL's ring/ll128 kept (NCCL's pick unmeasured)") != std::string::npos);
    }
}

TEST_CASE("nccl tuner: without a matching table the cost table is untouched") {
    cost_model m;
    m.set(name(nccl_algo::ring, nccl_proto::ll128), flat_us(50));
    m.set(name(nccl_algo::tree, nccl_proto::ll), flat_us(5));
    const cost_table before = nccl_table();
    auto untouched = [&](const nccl_tuner& tuner, int coll, std::size_t bytes, int pipe_ops = 1) {
        cost_table t = before;
        const nccl_tuning d = tuner.tune(coll, bytes, pipe_ops, t.data(), na, np);
        CHECK(t == before);
        CHECK(d.algo_index == d.nccl_algo_index);
        CHECK(d.proto_index == d.nccl_proto_index);
        return d.verdict;
    };
    SUBCASE("no nccl tables at all") {
        const cost_model empty;
        const nccl_tuner tuner(empty, r8n2);
        CHECK(tuner.tables() == 0);
        CHECK(untouched(tuner, allreduce, 4096) == nccl_verdict::no_table);
    }
    SUBCASE("tables of another collective") {
        CHECK(untouched(nccl_tuner(m, r8n2), static_cast<int>(nccl_coll::allgather), 4096) == nccl_verdict::no_table);
    }
    SUBCASE("tables of other shapes: other rank or node counts") {
        for (const nccl_shape s : {nccl_shape{8, 1}, nccl_shape{4, 2}, nccl_shape{16, 2}}) {
            CAPTURE(s.text());
            const nccl_tuner tuner(m, s);
            CHECK(tuner.tables() == 0);
            CHECK(untouched(tuner, allreduce, 4096) == nccl_verdict::no_table);
        }
    }
    SUBCASE("sizes outside the measured 1 KiB .. 1 MiB") {
        const nccl_tuner tuner(m, r8n2);
        CHECK(untouched(tuner, allreduce, 1023) == nccl_verdict::no_table);
        CHECK(untouched(tuner, allreduce, (1 << 20) + 1) == nccl_verdict::no_table);
        CHECK(untouched(tuner, allreduce, std::size_t{1} << 40) == nccl_verdict::no_table);
        CHECK(untouched(tuner, allreduce, 0) == nccl_verdict::no_table);
        // The end points themselves are measured sizes.
        cost_table t = before;
        CHECK(tuner.tune(allreduce, 1024, 1, t.data(), na, np).verdict == nccl_verdict::changed);
        t = before;
        CHECK(tuner.tune(allreduce, 1 << 20, 1, t.data(), na, np).verdict == nccl_verdict::changed);
    }
    SUBCASE("several operations aggregated into one call") {
        CHECK(untouched(nccl_tuner(m, r8n2), allreduce, 4096, 2) == nccl_verdict::pipelined);
    }
    SUBCASE("functions that are not collectives the tables know (send/recv, alltoall) and bad tables") {
        const nccl_tuner tuner(m, r8n2);
        for (const int f : {-1, 5, 6, 8, 10, 11, 1000}) CHECK(untouched(tuner, f, 4096) == nccl_verdict::no_table);
        CHECK(tuner.tune(allreduce, 4096, 1, nullptr, na, np).verdict == nccl_verdict::no_table);
        cost_table t = before;
        CHECK(tuner.tune(allreduce, 4096, 1, t.data(), 0, np).verdict == nccl_verdict::no_table);
        CHECK(tuner.tune(allreduce, 4096, 1, t.data(), na, -3).verdict == nccl_verdict::no_table);
        CHECK(t == before);
        // Nothing enabled (a table NCCL would reject itself): nothing to pick.
        t.fill(-1.0f);
        const nccl_tuning d = tuner.tune(allreduce, 4096, 1, t.data(), na, np);
        CHECK(d.verdict == nccl_verdict::no_table);
        CHECK(d.nccl_algo_index == -1);
    }
}

TEST_CASE("nccl tuner: cells NCCL leaves out stay out, however fast their tables") {
    cost_model m;
    m.set(name(nccl_algo::ring, nccl_proto::ll128), flat_us(50));
    m.set(name(nccl_algo::nvls, nccl_proto::simple), flat_us(1));  // NVLS: not enabled by NCCL here
    m.set(name(nccl_algo::pat, nccl_proto::simple), flat_us(2));  // PAT: not enabled either
    m.set(name(nccl_algo::ring, nccl_proto::ll), flat_us(30));
    cost_table t = nccl_table();
    const nccl_tuning d = nccl_tuner(m, r8n2).tune(allreduce, 4096, 1, t.data(), na, np);
    CHECK(d.verdict == nccl_verdict::changed);
    CHECK(t[cell(nccl_algo::nvls, nccl_proto::simple)] == -1.0f);
    CHECK(t[cell(nccl_algo::pat, nccl_proto::simple)] == -1.0f);
    CHECK(nccl_runs(t) == cell(nccl_algo::ring, nccl_proto::ll));
}

TEST_CASE("nccl tuner: equal measured times go to the first cell, as NCCL breaks ties") {
    cost_model m;
    m.set(name(nccl_algo::ring, nccl_proto::ll128), flat_us(100));
    m.set(name(nccl_algo::tree, nccl_proto::simple), flat_us(40));  // cell 2
    m.set(name(nccl_algo::ring, nccl_proto::ll), flat_us(40));  // cell 3
    cost_table t = nccl_table();
    const nccl_tuning d = nccl_tuner(m, r8n2).tune(allreduce, 4096, 1, t.data(), na, np);
    CHECK(d.algo_index == static_cast<int>(nccl_algo::tree));
    CHECK(d.proto_index == static_cast<int>(nccl_proto::simple));
    CHECK(nccl_runs(t) == cell(nccl_algo::tree, nccl_proto::simple));
}

TEST_CASE("nccl tuner: a wider table from a later NCCL keeps its layout; unknown enabled cells are ignored") {
    // 8 algorithms x 3 protocols: the row stride is the table's, the 8th algorithm unknown to shunt.
    constexpr int wide = 8;
    std::array<float, wide * np> t;
    t.fill(-1.0f);
    t[1 * np + 1] = 9;  // ring/ll128, NCCL's pick
    t[1 * np + 2] = 15;  // ring/simple
    t[7 * np + 2] = 12;  // the unknown algorithm
    cost_model m;
    m.set(name(nccl_algo::ring, nccl_proto::ll128), flat_us(50));
    m.set(name(nccl_algo::ring, nccl_proto::simple), flat_us(20));
    const nccl_tuning d = nccl_tuner(m, r8n2).tune(allreduce, 4096, 1, t.data(), wide, np);
    CHECK(d.verdict == nccl_verdict::changed);
    CHECK(t[1 * np + 1] == 50.0f);
    CHECK(t[1 * np + 2] == 20.0f);
    CHECK(t[7 * np + 2] == -1.0f);
}

TEST_CASE("nccl tuner: size classes and byte counts in messages") {
    CHECK(nccl_size_class(0) == 0);
    CHECK(nccl_size_class(1) == 0);
    CHECK(nccl_size_class(2047) == 10);
    CHECK(nccl_size_class(2048) == 11);
    CHECK(nccl_bytes_text(1 << 20) == "1 MiB");
    CHECK(nccl_bytes_text(48 * 1024) == "48 KiB");
    CHECK(nccl_bytes_text(100) == "100 B");
    CHECK(nccl_cell_text(6, 2) == "pat/simple");
    CHECK(nccl_cell_text(-1, -1) == "none");
    CHECK(nccl_cell_text(7, 2) == "algorithm 7/protocol 2");
}

TEST_CASE("nccl tuner: the shape a tool explains, and its explanation") {
    cost_model m;
    m.set(name(nccl_algo::ring, nccl_proto::ll128), time_table({{1024, 20e-6, 0}, {4096, 80e-6, 0}}));
    m.set(name(nccl_algo::tree, nccl_proto::simple), flat_us(25));
    m.set(name(nccl_algo::ring, nccl_proto::ll, {4, 1}), flat_us(5));
    // Both given: that shape, tables or not; else the model's one fitting shape, if exactly one.
    CHECK(nccl_shape_for(m, nccl_coll::allreduce, 16, 4) == nccl_shape{16, 4});
    CHECK(!nccl_shape_for(m, nccl_coll::allreduce, 0, 0));
    CHECK(nccl_shape_for(m, nccl_coll::allreduce, 8, 0) == r8n2);
    CHECK(nccl_shape_for(m, nccl_coll::allreduce, 0, 1) == nccl_shape{4, 1});
    CHECK(!nccl_shape_for(m, nccl_coll::allreduce, 5, 0));
    CHECK(!nccl_shape_for(m, nccl_coll::broadcast, 0, 0));

    const nccl_tuner tuner(m, r8n2);
    const std::string at_2k = nccl_tuner_explain(tuner, nccl_coll::allreduce, 2048);
    CHECK(at_2k.find("tree/simple          measured       25.000 us") != std::string::npos);
    CHECK(at_2k.find("ring/ll128           measured       40.000 us") != std::string::npos);
    CHECK(at_2k.find("no table for the other 19 of NCCL's 21") != std::string::npos);
    CHECK(at_2k.find("fastest measured: tree/simple. Where NCCL's own pick is measured here and over 3% slower") !=
          std::string::npos);
    const std::string at_8k = nccl_tuner_explain(tuner, nccl_coll::allreduce, 8192);
    CHECK(at_8k.find("ring/ll128           outside its table's 1024 .. 4096 bytes") != std::string::npos);
    CHECK(nccl_tuner_explain(tuner, nccl_coll::allreduce, 100).find("nothing measured at this size") !=
          std::string::npos);
}
