// tests/unit/plan/test_nccl.cpp: decide_nccl's choice among NCCL, two and three levels against hand-made tables, and the GPU domain SHUNT_TOPOLOGY gives a rank (domain_of_rank).
#include <doctest/doctest.h>

#include <shunt/model/model.hpp>
#include <shunt/plan/nccl.hpp>
#include <shunt/topology/node_of.hpp>

#include <string>
#include <vector>

using namespace shunt;

namespace {

const nccl_shape shape{8, 2};

/// A table of `ns_per_byte` from 1 MiB to 256 MiB.
time_table linear(double ns_per_byte) {
    std::vector<table_point> pts;
    for (double s = 1 << 20; s <= double(1 << 28); s *= 16) pts.push_back({s, ns_per_byte * 1e-9 * s, 0});
    return time_table(pts);
}

cost_model tables(double lib, double hier, double hier3) {
    cost_model m;
    if (lib > 0) m.set(table_names::nccl(nccl_op::allreduce, nccl_method::library, shape), linear(lib));
    if (hier > 0) m.set(table_names::nccl(nccl_op::allreduce, nccl_method::hierarchical, shape), linear(hier));
    if (hier3 > 0) m.set(table_names::nccl(nccl_op::allreduce, nccl_method::hierarchical3, shape), linear(hier3));
    return m;
}

}  // namespace

TEST_CASE("decide_nccl: the fastest measured schedule the levels allow, by the margin") {
    const std::int64_t b = 16 << 20;
    const nccl_depths both{true, true}, two_only{true, false}, three_only{false, true};
    // Three levels fastest: taken where the levels allow them, else two.
    CHECK(decide_nccl(tables(4, 2, 1), nccl_choice::automatic, nccl_op::allreduce, b, shape, both).method ==
          nccl_method::hierarchical3);
    CHECK(decide_nccl(tables(4, 2, 1), nccl_choice::automatic, nccl_op::allreduce, b, shape, two_only).method ==
          nccl_method::hierarchical);
    // Two levels fastest: three are not taken just because they exist.
    CHECK(decide_nccl(tables(4, 1, 2), nccl_choice::automatic, nccl_op::allreduce, b, shape, both).method ==
          nccl_method::hierarchical);
    // One node of two domains: only three levels apply.
    CHECK(decide_nccl(tables(4, 1, 2), nccl_choice::automatic, nccl_op::allreduce, b, shape, three_only).method ==
          nccl_method::hierarchical3);
    // Within the margin of NCCL: NCCL keeps it.
    const double close = 4 * (1 - measured_win_margin / 2);
    CHECK(decide_nccl(tables(4, 0, close), nccl_choice::automatic, nccl_op::allreduce, b, shape, both).method ==
          nccl_method::library);
    // Without NCCL's table, or below nccl_min_bytes, or outside the tables: NCCL.
    CHECK(decide_nccl(tables(0, 2, 1), nccl_choice::automatic, nccl_op::allreduce, b, shape, both).method ==
          nccl_method::library);
    CHECK(decide_nccl(tables(4, 2, 1), nccl_choice::automatic, nccl_op::allreduce, nccl_min_bytes / 2, shape, both)
              .method == nccl_method::library);
    CHECK(decide_nccl(tables(4, 2, 1), nccl_choice::automatic, nccl_op::allreduce, std::int64_t{1} << 30, shape, both)
              .method == nccl_method::library);
    // Predictions of each table.
    const nccl_decision d = decide_nccl(tables(4, 2, 1), nccl_choice::automatic, nccl_op::allreduce, b, shape, both);
    CHECK(d.library_s == doctest::Approx(4e-9 * b));
    CHECK(d.hierarchical_s == doctest::Approx(2e-9 * b));
    CHECK(d.hierarchical3_s == doctest::Approx(1e-9 * b));
}

TEST_CASE("decide_nccl: SHUNT_NCCL forces the deepest schedule that applies, or NCCL") {
    const cost_model none;
    const std::int64_t b = 1024;
    CHECK(decide_nccl(none, nccl_choice::shunt, nccl_op::allreduce, b, shape, {true, true}).method ==
          nccl_method::hierarchical3);
    CHECK(decide_nccl(none, nccl_choice::shunt, nccl_op::allreduce, b, shape, {true, false}).method ==
          nccl_method::hierarchical);
    CHECK(decide_nccl(none, nccl_choice::shunt, nccl_op::allreduce, b, shape, {false, true}).method ==
          nccl_method::hierarchical3);
    CHECK(decide_nccl(none, nccl_choice::shunt, nccl_op::allreduce, b, shape, {false, false}).method ==
          nccl_method::library);
    // Three levels are an allreduce schedule only.
    CHECK(decide_nccl(none, nccl_choice::shunt, nccl_op::reduce_scatter, b, shape, {true, true}).method ==
          nccl_method::hierarchical);
    CHECK(decide_nccl(none, nccl_choice::shunt, nccl_op::allgather, b, shape, {false, true}).method ==
          nccl_method::library);
    CHECK(decide_nccl(none, nccl_choice::library, nccl_op::allreduce, b, shape, {true, true}).method ==
          nccl_method::library);
    CHECK(table_names::nccl(nccl_op::allreduce, nccl_method::hierarchical3, shape) ==
          "nccl.allreduce.hierarchical3.r8n2");
}

TEST_CASE("domain_of_rank: the level just inside SHUNT_TOPOLOGY's node level") {
    // 8 ranks: nodes of 4, domains of 2: ranks 0-1, 2-3, 4-5, 6-7.
    std::vector<std::int64_t> got;
    for (int r = 0; r < 8; ++r) {
        const auto [src, label] = domain_of_rank("domain=2;node=4", r, 8);
        CHECK(src == domain_source::described);
        got.push_back(label);
    }
    CHECK(got == std::vector<std::int64_t>{0, 0, 1, 1, 2, 2, 3, 3});
    // Labels, keyed by the rank in the communicator.
    const int ranks = 4;
    for (int r = 0; r < ranks; ++r) {
        const auto [src, label] = domain_of_rank("nvl=[5,7,5,7];node=4", r, ranks);
        CHECK(src == domain_source::described);
        CHECK(label == (r % 2 == 0 ? 5 : 7));
    }
    // Labels that do not cover the communicator: no domain.
    CHECK(domain_of_rank("nvl=[0,1];node=4", 0, 4).second == -1);
    // No level inside the node, an `auto` one, no node level or no description: discovered.
    CHECK(domain_of_rank("node=2", 0, 4).first == domain_source::discovered);
    CHECK(domain_of_rank("gpu=auto;node=2", 0, 4).first == domain_source::discovered);
    CHECK(domain_of_rank("package=2", 0, 4).first == domain_source::discovered);
    CHECK(domain_of_rank("", 0, 4).first == domain_source::discovered);
    // A level outside the node is no domain.
    CHECK(domain_of_rank("node=2;switch=4", 0, 4).first == domain_source::discovered);
    CHECK_THROWS(domain_of_rank("domain=;node=2", 0, 4));
}

TEST_CASE("domain_block_size: equal blocks of one label each, two or more per node") {
    using v = std::vector<std::int64_t>;
    CHECK(domain_block_size(v{0, 0, 0, 0}, v{3, 3, 5, 5}) == 2);
    CHECK(domain_block_size(v{0, 0, 0, 0, 1, 1, 1, 1}, v{0, 0, 1, 1, 0, 0, 1, 1}) == 2);
    CHECK(domain_block_size(v{0, 0, 0, 0, 0, 0}, v{1, 1, 1, 2, 2, 2}) == 3);
    // Nodes interleaved in rank order: each node's ranks in rank order still form blocks.
    CHECK(domain_block_size(v{0, 1, 0, 1, 0, 1, 0, 1}, v{0, 4, 0, 4, 1, 5, 1, 5}) == 2);
    CHECK(domain_block_size(v{0, 0, 0, 0}, v{3, 5, 3, 5}) == 0);  // interleaved domains
    CHECK(domain_block_size(v{0, 0, 0, 0}, v{3, 3, 3, 3}) == 0);  // one domain
    CHECK(domain_block_size(v{0, 0, 0, 0}, v{1, 2, 3, 4}) == 0);  // single-rank domains
    CHECK(domain_block_size(v{0, 0, 0, 0, 0}, v{1, 1, 1, 2, 2}) == 0);  // unequal
    CHECK(domain_block_size(v{0, 0, 0, 0, 0, 0}, v{1, 1, 2, 2, 1, 1}) == 0);  // a label twice
    CHECK(domain_block_size(v{0, 0, 0, 0, 1, 1, 1, 1}, v{0, 0, 1, 1, 0, 0, 0, 0}) == 0);  // nodes differ
    CHECK(domain_block_size(v{0, 0, 0, 0}, v{0, 0, -1, -1}) == 0);  // a rank without a domain
    CHECK(domain_block_size(v{0, 0}, v{0}) == 0);
}
