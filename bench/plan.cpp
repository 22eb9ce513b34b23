// bench/plan.cpp: bench-plan, the per-call cost of shunt's decisions with a warm cache: the pack planner and the collective planner, against the goal of 100 ns.
#include "harness.hpp"

#include <shunt/model/model.hpp>
#include <shunt/plan/collective.hpp>
#include <shunt/plan/planner.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace shunt::bench;

/// A vector type of `blocks` blocks of `len` bytes, twice as far apart (what the pack tables use).
shunt::type_info vector_type(std::int64_t blocks, std::int64_t len) {
    shunt::type_info t;
    t.form.blocks = {{0, len}};
    if (blocks > 1) t.form.dims = {{blocks, 2 * len}};
    t.size = blocks * len;
    t.extent = (2 * blocks - 1) * len;
    t.true_extent = t.extent;
    return t;
}

// Keeps a result alive so the compiler cannot drop the call.
template <class T>
void keep(const T& v) {
    asm volatile("" : : "r,m"(v) : "memory");
}

}  // namespace

int main(int argc, char** argv) {
    cli line("bench-plan",
             "Times one decision of shunt's planners with a warm cache, as every intercepted call pays it:\n"
             "the pack planner (a hash lookup under a shared lock) for a few datatype shapes and counts, and\n"
             "the collective planner's settled path (an atomic load and a relaxed increment) and its locked\n"
             "path (choose). The goal is under 100 ns per decision. No MPI is involved.");
    options o = line.parse(argc, argv);
    if (!o.was_given("--trials")) o.trials = 15;
    if (o.list) {
        for (const char* n : {"pack/vector-b8-8K", "pack/vector-b512-1M", "pack/mixed-64-keys", "unpack/vector-b1-64K",
                              "coll/settled", "coll/choose"})
            if (o.selected(n)) std::printf("%s\n", n);
        return 0;
    }
    auto model = std::make_shared<shunt::cost_model>();
    shunt::planner planner(model);
    table out({{"decision", 22, "decision", true},
               {"ns/call", 8, "ns_per_call"},
               {"goal", 6, "goal_ns"},
               {"within", 6, "within_goal"}},
              o);
    out.note("bench-plan: best of up to " + std::to_string(o.trials) + " trials of about 1 ms each");
    struct item {
        std::string name;
        std::function<void()> call;
    };
    std::vector<shunt::type_info> mixed;
    for (int i = 0; i < 64; ++i) mixed.push_back(vector_type(16 + i * 3, 1 + (i % 9) * 7));
    std::size_t next = 0;
    const auto t8 = vector_type(1024, 8), t512 = vector_type(2048, 512), t1 = vector_type(65536, 1);
    shunt::coll_shape shape;
    shape.ranks = 4;
    shape.level_names = {"node"};
    shape.group_sizes = {2};
    shunt::collective_tuner tuner(shape, 0);  // decides from the model: no measuring
    const auto agree = [](double*, int) {};  // one process: nothing to agree with
    for (std::int64_t b = 8; b <= (std::int64_t{1} << 26); b *= 8)
        tuner.choose(*model, shunt::coll_op::allreduce, b, std::nullopt, agree);
    std::int64_t coll_bytes = 1 << 20;
    const std::vector<item> items = {
        {"pack/vector-b8-8K", [&] { keep(planner.pack(t8, 1, false).chosen); }},
        {"pack/vector-b512-1M", [&] { keep(planner.pack(t512, 1, false).chosen); }},
        {"unpack/vector-b1-64K", [&] { keep(planner.pack(t1, 1, true).chosen); }},
        {"pack/mixed-64-keys", [&] { keep(planner.pack(mixed[next++ & 63], 1, false).chosen); }},
        {"coll/settled",
         [&] {
             const auto m = tuner.settled(shunt::coll_op::allreduce, coll_bytes);
             tuner.count_settled(shunt::coll_op::allreduce, coll_bytes);
             keep(m);
         }},
        {"coll/choose",
         [&] { keep(tuner.choose(*model, shunt::coll_op::allreduce, coll_bytes, std::nullopt, agree).method); }},
    };
    for (const auto& it : items) {
        if (!o.selected(it.name)) continue;
        const std::vector<std::function<void()>> variants = {it.call};
        const auto t = measure(variants, o);
        const double ns = t[0].best_s * 1e9;
        out.row({text_cell(it.name), number_cell(ns, 1), number_cell(100, 0), text_cell(ns < 100 ? "yes" : "no")});
    }
    return 0;
}
