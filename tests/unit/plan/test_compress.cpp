// tests/unit/plan/test_compress.cpp: the compression planner: the decision tree's options, their predicted costs against the analytic model worked by hand, the timeline, Espresso's greedy against brute force on up to 8 tensors, its decision time on 300, and the call-pattern detector.
#include <doctest/doctest.h>

#include <shunt/plan/call_pattern.hpp>
#include <shunt/plan/compress.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

// Sanitizer builds run several times slower: their timings are not the planner's.
#if defined(__SANITIZE_ADDRESS__)
#define SHUNT_TEST_INSTRUMENTED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SHUNT_TEST_INSTRUMENTED 1
#endif
#endif
#ifndef SHUNT_TEST_INSTRUMENTED
#define SHUNT_TEST_INSTRUMENTED 0
#endif

namespace {

using shunt::compress_option;
using shunt::compress_scheme;
namespace sc = shunt::compress;

shunt::compress_consent consent_of(std::initializer_list<sc::method> ms) {
    shunt::compress_consent c{true, 0};
    for (const sc::method m : ms) c.methods |= static_cast<std::uint8_t>(1u << static_cast<unsigned>(m));
    return c;
}
const shunt::compress_consent auto_consent{true, shunt::compress_auto_methods};

/// The best choice by trying every combination of options (the optimum of the same model).
double brute_force(const std::vector<shunt::compress_tensor>& t, bool overlap) {
    std::vector<std::uint16_t> c(t.size(), 0);
    double best = shunt::iteration_time(t, c, overlap);
    for (;;) {
        std::size_t i = 0;
        while (i < t.size() && ++c[i] == t[i].options.size()) c[i++] = 0;
        if (i == t.size()) break;
        best = std::min(best, shunt::iteration_time(t, c, overlap));
    }
    return best;
}

double combinations(const std::vector<shunt::compress_tensor>& t) {
    double n = 1;
    for (const auto& x : t) n *= static_cast<double>(x.options.size());
    return n;
}

}  // namespace

TEST_CASE("compress options: the decision tree by consent, shape and operation") {
    const auto two_nodes = shunt::compress_shape::nodes_of(4, 2);
    const auto one_node = shunt::compress_shape::nodes_of(4, 4);
    CHECK(two_nodes.hierarchical());
    CHECK_FALSE(one_node.hierarchical());
    CHECK_FALSE(shunt::compress_shape::nodes_of(6, 4).hierarchical());  // nodes of unequal size

    CHECK(shunt::compress_options(two_nodes, shunt::compress_op::allreduce, {}).size() == 1);
    CHECK(shunt::compress_options(shunt::compress_shape::nodes_of(1, 1), shunt::compress_op::allreduce, auto_consent)
              .size() == 1);

    const auto opts = shunt::compress_options(two_nodes, shunt::compress_op::allreduce, auto_consent);
    REQUIRE(opts.front().exact());
    std::set<int> codes;
    bool hier = false;
    for (std::size_t i = 1; i < opts.size(); ++i) {
        const compress_option& o = opts[i];
        CHECK_FALSE(o.exact());
        CHECK_FALSE(o.device);
        CHECK(shunt::allows(auto_consent, o.method));
        if (o.scheme == compress_scheme::allreduce) CHECK(sc::summable(o.method) != sc::sum_form::none);
        hier = hier || o.hierarchical;
        CHECK(compress_option::from_code(o.code()) == o);
        CHECK(codes.insert(o.code()).second);
    }
    CHECK(hier);
    // Two schemes each (fp16 and bf16: allreduce, allgather; int8: allgather, alltoall+allgather),
    // each flat and hierarchical.
    CHECK(opts.size() == 1 + 2 * (2 + 2 + 2));
    for (const compress_option& o : opts)
        if (o.scheme == compress_scheme::alltoall_allgather) CHECK(sc::summable(o.method) == sc::sum_form::none);
    for (const compress_option& o : shunt::compress_options(one_node, shunt::compress_op::allreduce, auto_consent))
        CHECK_FALSE(o.hierarchical);
    for (const compress_option& o :
         shunt::compress_options(two_nodes, shunt::compress_op::reduce_scatter, consent_of({sc::method::sign}))) {
        CHECK_FALSE(o.hierarchical);
        CHECK(o.scheme != compress_scheme::alltoall_allgather);
    }
    const auto both = shunt::compress_options(two_nodes, shunt::compress_op::allreduce, consent_of({sc::method::int8}),
                                              shunt::compress_places{true, true});
    CHECK(both.size() == 1 + 2 * 2 * 2);
    CHECK(compress_option::from_code(0).exact());
}

TEST_CASE("compress options: places without the hierarchical and alltoall schemes") {
    const auto two_nodes = shunt::compress_shape::nodes_of(4, 2);
    const shunt::compress_places flat{true, false, false, false};
    const auto opts = shunt::compress_options(two_nodes, shunt::compress_op::allreduce, auto_consent, flat);
    // fp16 and bf16: allreduce and allgather; int8: allgather; each flat, on the host.
    CHECK(opts.size() == 1 + 2 + 2 + 1);
    for (const compress_option& o : opts) {
        CHECK_FALSE(o.hierarchical);
        CHECK_FALSE(o.device);
        CHECK(o.scheme != compress_scheme::alltoall_allgather);
    }
    // Sign: its allgather of compressed parts alone (no alltoall+allgather).
    const auto sign =
        shunt::compress_options(two_nodes, shunt::compress_op::allreduce, consent_of({sc::method::sign}), flat);
    REQUIRE(sign.size() == 2);
    CHECK(sign[1].scheme == compress_scheme::allgather);
    // The costs and the threshold see the same options.
    const shunt::cost_model model;
    const auto costs =
        shunt::predict_options(model, two_nodes, shunt::compress_op::allreduce, 16 << 20, 4, auto_consent, flat);
    CHECK(costs.size() == opts.size());
    for (std::size_t i = 0; i < costs.size() && i < opts.size(); ++i) CHECK(costs[i].option == opts[i]);
    const std::int64_t t = shunt::compress_threshold(model, two_nodes, shunt::compress_op::allreduce, 4, auto_consent,
                                                     shunt::compress_places{true, false, false, false});
    CHECK(t >= shunt::compress_threshold(model, two_nodes, shunt::compress_op::allreduce, 4, auto_consent));
}

TEST_CASE("compress options: the MPI path's device place on staged device buffers") {
    const auto two_nodes = shunt::compress_shape::nodes_of(4, 2);
    shunt::compress_places staged;
    staged.device = staged.device_flat = staged.staged = true;
    const auto every = consent_of({sc::method::fp16, sc::method::int8, sc::method::int4, sc::method::top_k});
    const auto opts = shunt::compress_options(two_nodes, shunt::compress_op::allreduce, every, staged);
    // The device: flat allreduce (fp16) and allgather (fp16, int8) only; no method with feedback.
    std::set<std::pair<int, int>> device;
    for (const compress_option& o : opts) {
        if (!o.device) continue;
        CHECK_FALSE(o.hierarchical);
        CHECK(o.scheme != compress_scheme::alltoall_allgather);
        CHECK_FALSE(shunt::uses_feedback(o.method));
        device.insert({static_cast<int>(o.method), static_cast<int>(o.scheme)});
    }
    CHECK(device == std::set<std::pair<int, int>>{
                        {static_cast<int>(sc::method::fp16), static_cast<int>(compress_scheme::allreduce)},
                        {static_cast<int>(sc::method::fp16), static_cast<int>(compress_scheme::allgather)},
                        {static_cast<int>(sc::method::int8), static_cast<int>(compress_scheme::allgather)}});
    // The host keeps every option it has without the device place.
    const auto host_only = shunt::compress_options(two_nodes, shunt::compress_op::allreduce, every);
    CHECK(opts.size() == host_only.size() + device.size());
    // A reduce-scatter gets no device option.
    for (const compress_option& o :
         shunt::compress_options(two_nodes, shunt::compress_op::reduce_scatter, every, staged))
        CHECK_FALSE(o.device);

    // Staged prices: the copies of what each option hands the library, from the model's copy tables.
    const shunt::cost_model m;
    const std::int64_t n = 16 << 20;
    const double x = 4.0 * n;
    const auto costs = shunt::predict_options(m, two_nodes, shunt::compress_op::allreduce, n, 4, every, staged);
    REQUIRE(costs.size() == opts.size());
    for (const auto& c : costs) {
        const auto plain = shunt::predict_option(m, two_nodes, shunt::compress_op::allreduce, n, 4, c.option);
        if (!c.option.device) {
            CHECK(c.encode == plain.encode);
            CHECK(c.decode == plain.decode);
            CHECK(c.comm == doctest::Approx(plain.comm + m.predict("copy.d2h", x) + m.predict("copy.h2d", x)));
            continue;
        }
        const double cb = static_cast<double>(sc::compressed_bytes(sc::defaults(c.option.method), n)) + 4;
        const double back = c.option.scheme == compress_scheme::allgather ? 4 * cb : cb;
        CHECK(c.comm == plain.comm);
        CHECK(c.encode == doctest::Approx(plain.encode + m.predict("copy.d2h", cb)));
        CHECK(c.decode == doctest::Approx(plain.decode + m.predict("copy.h2d", back)));
    }
    // Nodes of one rank (every option flat): for 64 MiB of device buffers the device place wins
    // over exact and the host, since it copies the compressed form and not the tensor.
    const auto four_nodes = shunt::compress_shape::nodes_of(4, 1);
    auto best = [&](shunt::compress_places places) {
        const auto all = shunt::predict_options(m, four_nodes, shunt::compress_op::allreduce, 16 << 20, 4,
                                                consent_of({sc::method::int8}), places);
        std::size_t b = 0;
        for (std::size_t i = 1; i < all.size(); ++i)
            if (all[i].total() < all[b].total()) b = i;
        return all[b].option;
    };
    const compress_option on_device = best(staged);
    CHECK(on_device.device);
    CHECK(on_device.method == sc::method::int8);
    CHECK(on_device.scheme == compress_scheme::allgather);
}

TEST_CASE("compress costs: the hierarchical int8 allgather worked by hand from the analytic model") {
    const shunt::cost_model m;
    const shunt::analytic_params& p = m.params();
    const auto shape = shunt::compress_shape::nodes_of(4, 2);
    const std::int64_t n = std::int64_t{16} << 20;  // 64 MiB of floats
    const compress_option o{compress_scheme::allgather, sc::method::int8, false, true};
    const shunt::option_cost c = shunt::predict_option(m, shape, shunt::compress_op::allreduce, n, 4, o);
    // By hand: an exact reduce-scatter and allgather inside the node (2 ranks: one step each, half
    // the vector) on the node link; between the 2 nodes an allgather of the int8 form of each rank's
    // half (blocks of 256: a float scale each) plus the 4-byte flag, on the network that the node's
    // 2 rails share.
    const double x = 4.0 * n, half = x / 2;
    const double inside = 2 * (p.node.latency_s + 0.5 * x / p.node.bytes_per_s);
    const double form = half / 4 + 4 * std::ceil(half / 4 / 256) + 4;
    const double outer = p.network.latency_s + 0.5 * (2 * form) * 2 / p.network.bytes_per_s;
    CHECK(c.comm == doctest::Approx((inside + outer) * (1 + shunt::compress_margin)).epsilon(1e-9));
    // Encode: the int8 table at the analytic rate and a guard pass (int8 keeps no feedback).
    const double enc = p.compress_call_s + half / 5e9, dec = p.compress_call_s + half / 8e9;
    const double pass = half / p.memcpy_bytes_per_s;
    CHECK(c.encode == doctest::Approx((enc + pass) * (1 + shunt::compress_margin)).epsilon(1e-9));
    // int4 keeps feedback: its decode and two more passes on the encode side.
    const shunt::option_cost c4 = shunt::predict_option(m, shape, shunt::compress_op::allreduce, n, 4,
                                                        {compress_scheme::allgather, sc::method::int4, false, true});
    const double enc4 = p.compress_call_s + half / 4e9, dec4 = p.compress_call_s + half / 6e9;
    CHECK(c4.encode == doctest::Approx((enc4 + pass + dec4 + 2 * pass) * (1 + shunt::compress_margin)).epsilon(1e-9));
    CHECK(c.decode == doctest::Approx((2 * dec + pass) * (1 + shunt::compress_margin)).epsilon(1e-9));
    // Exact: the faster of the library (a flat allreduce of 4 ranks on the network, 2 ranks of each
    // node sharing its link) and shunt's schedule (the same exchanges inside the node, between
    // nodes an allreduce of each rank's half on the shared link), with no margin.
    const shunt::option_cost e = shunt::predict_option(m, shape, shunt::compress_op::allreduce, n, 4, {});
    const double library = 4 * p.network.latency_s + 2 * 0.75 * x * 2 / p.network.bytes_per_s;
    const double schedule = inside + 2 * p.network.latency_s + 2 * 0.5 * half * 2 / p.network.bytes_per_s;
    CHECK(e.comm == doctest::Approx(std::min(library, schedule)).epsilon(1e-9));
    CHECK(e.encode == 0);
    CHECK(e.decode == 0);
}

TEST_CASE("compress costs: where compression pays and where it does not") {
    const shunt::cost_model m;
    const auto two_nodes = shunt::compress_shape::nodes_of(4, 2);
    const auto one_node = shunt::compress_shape::nodes_of(4, 4);
    auto best = [&](const shunt::compress_shape& s, std::int64_t bytes, const shunt::compress_consent& c) {
        const auto costs = shunt::predict_options(m, s, shunt::compress_op::allreduce, bytes / 4, 4, c);
        std::size_t b = 0;
        for (std::size_t i = 1; i < costs.size(); ++i)
            if (costs[i].total() < costs[b].total()) b = i;
        return costs[b];
    };
    // 64 MiB across a 1 Gbit/s link: compressed, with the hierarchy; int8 moves less than fp16.
    const auto big = best(two_nodes, 64 << 20, auto_consent);
    CHECK_FALSE(big.option.exact());
    CHECK(big.option.hierarchical);
    CHECK(big.option.method == sc::method::int8);
    const auto fp16 = best(two_nodes, 64 << 20, consent_of({sc::method::fp16}));
    CHECK(fp16.option.method == sc::method::fp16);
    CHECK(big.comm < fp16.comm);
    // No link limit (one node), or a small tensor: exact.
    CHECK(best(one_node, 64 << 20, auto_consent).option.exact());
    CHECK(best(two_nodes, 1024, auto_consent).option.exact());
    // The threshold lies between.
    const std::int64_t t = shunt::compress_threshold(m, two_nodes, shunt::compress_op::allreduce, 4, auto_consent);
    CHECK(t > 4096);
    CHECK(t <= (64 << 20));
    CHECK(shunt::compress_threshold(m, one_node, shunt::compress_op::allreduce, 4, auto_consent) == std::int64_t{1}
                                                                                                        << 62);
    // Costs grow with the tensor.
    for (const auto& o : shunt::compress_options(two_nodes, shunt::compress_op::allreduce, auto_consent)) {
        const auto a = shunt::predict_option(m, two_nodes, shunt::compress_op::allreduce, 1 << 20, 4, o);
        const auto b = shunt::predict_option(m, two_nodes, shunt::compress_op::allreduce, 4 << 20, 4, o);
        CHECK(a.total() < b.total());
    }
}

TEST_CASE("compress options: half and bfloat16 data leave out the casts; int8 and random-k still pay") {
    const shunt::cost_model m;
    const auto two_nodes = shunt::compress_shape::nodes_of(4, 2);
    const shunt::compress_places flat{true, false, false, false};
    const auto casts = consent_of({sc::method::fp16, sc::method::bf16});
    for (const auto places : {shunt::compress_places{}, flat}) {
        // 2-byte elements: a cast sends what the data is already, so only exact is left.
        CHECK(shunt::compress_options(two_nodes, shunt::compress_op::allreduce, casts, places, 2).size() == 1);
        CHECK(shunt::compress_options(two_nodes, shunt::compress_op::reduce_scatter, casts, places, 2).size() == 1);
        CHECK(shunt::compress_options(two_nodes, shunt::compress_op::allreduce, casts, places, 4).size() > 1);
        CHECK(shunt::compress_threshold(m, two_nodes, shunt::compress_op::allreduce, 2, casts, places) ==
              std::int64_t{1} << 62);
        for (const auto& o : shunt::compress_options(two_nodes, shunt::compress_op::allreduce, auto_consent, places, 2))
            if (!o.exact()) CHECK(sc::summable(o.method) != sc::sum_form::f16);
    }
    // 32 MiB of halves (16 Mi elements) across the 1 Gbit/s link. The full tree: int8 (a byte an
    // element and a scale a block) pays, hierarchical. The NCCL path's flat schemes at 4 ranks:
    // int8's allgather receives 3 parts of about a byte an element, as much as the exact ring's 2 *
    // 3/4 * 2 bytes, and the model's allgather costs more per byte, so auto stays exact; so does int4.
    const std::int64_t n = std::int64_t{16} << 20;
    auto best = [&](const shunt::compress_consent& c, shunt::compress_places places) {
        const auto costs = shunt::predict_options(m, two_nodes, shunt::compress_op::allreduce, n, 2, c, places);
        std::size_t b = 0;
        for (std::size_t i = 1; i < costs.size(); ++i)
            if (costs[i].total() < costs[b].total()) b = i;
        return std::make_pair(costs[b], costs[0]);
    };
    const auto [tree, tree_exact] = best(auto_consent, {});
    CHECK(tree.option.method == sc::method::int8);
    CHECK(tree.option.hierarchical);
    CHECK_FALSE(tree.option.exact());
    CHECK(tree.comm < tree_exact.comm);
    CHECK(best(auto_consent, flat).first.option.exact());
    CHECK(best(consent_of({sc::method::int8, sc::method::int4}), flat).first.option.exact());
    // Random-k's one float in 100 pays there.
    const auto [rk, rk_exact] = best(consent_of({sc::method::random_k}), flat);
    CHECK(rk.option.method == sc::method::random_k);
    CHECK(rk.option.scheme == compress_scheme::allreduce);
    CHECK(rk.comm < rk_exact.comm);
    // The exact option of halves moves half the bytes of floats; a compressed one the same form
    // (plus the widening and narrowing passes).
    const compress_option int8{compress_scheme::allgather, sc::method::int8, false, false};
    const auto h = shunt::predict_option(m, two_nodes, shunt::compress_op::allreduce, n, 2, int8);
    const auto f = shunt::predict_option(m, two_nodes, shunt::compress_op::allreduce, n, 4, int8);
    CHECK(h.comm == doctest::Approx(f.comm));
    CHECK(h.encode > f.encode);
    CHECK(shunt::predict_option(m, two_nodes, shunt::compress_op::allreduce, n, 2, compress_option{}).comm <
          shunt::predict_option(m, two_nodes, shunt::compress_op::allreduce, n, 4, compress_option{}).comm);
    // The threshold of halves: a size exists where int8 pays.
    CHECK(shunt::compress_threshold(m, two_nodes, shunt::compress_op::allreduce, 2, auto_consent) <= (32 << 20));
}

TEST_CASE("compress timeline: blocking calls add up, stream-ordered calls overlap, worked by hand") {
    std::vector<shunt::compress_tensor> t(2);
    shunt::option_cost exact, host, device;
    exact.comm = 10;
    host.option = {compress_scheme::allgather, sc::method::int8, false, false};
    host.encode = 2, host.comm = 3, host.decode = 1;
    device.option = {compress_scheme::allgather, sc::method::int8, true, false};
    device.encode = 1, device.comm = 3, device.decode = 2;
    t[0] = {5, 100, {exact, host, device}};
    t[1] = {4, 100, {exact, host, device}};
    const std::vector<std::uint16_t> ee{0, 0}, hh{1, 1}, dd{2, 2}, he{1, 0};
    CHECK(shunt::iteration_time(t, ee, false) == 29);
    CHECK(shunt::iteration_time(t, hh, false) == 5 + 6 + 4 + 6);
    // Overlapped, all exact: compute 0-5, comm 5-15; compute 5-9, comm 15-25.
    CHECK(shunt::iteration_time(t, ee, true) == 25);
    // Host compression: enc 5-7, comm 7-10, dec 10-11; compute 5-9, enc 11-13 (the host was busy
    // until 11), comm 13-16, dec 16-17.
    CHECK(shunt::iteration_time(t, hh, true) == 17);
    // Device compression takes the device: enc 5-6, comm 6-9, dec adds 2 to the device (6-8 ->
    // compute of tensor 1 runs 8-12), enc 12-13, comm 13-16, dec 16-18.
    CHECK(shunt::iteration_time(t, dd, true) == 18);
    // Host then exact: tensor 0 done at 11 (comm 7-10, dec 10-11); compute 5-9, comm 10-20.
    CHECK(shunt::iteration_time(t, he, true) == 20);
}

TEST_CASE("compress greedy: within 5% of the brute-force optimum on up to 8 tensors") {
    const shunt::cost_model m;
    std::mt19937_64 rng(12345);
    std::uniform_real_distribution<double> u(0, 1);
    int cases = 0, exact_hits = 0;
    double worst = 1;
    for (int trial = 0; trial < 160; ++trial) {
        const bool overlap = trial % 2 == 1;
        const bool synthetic = trial % 3 == 2;
        const int n = 1 + trial % 8;
        const auto shape =
            trial % 4 < 2 ? shunt::compress_shape::nodes_of(4, 2) : shunt::compress_shape::nodes_of(8, 4);
        // Few enough options that every combination can be tried: at most about 2 million.
        const shunt::compress_consent consent = n <= 3   ? auto_consent
                                                : n <= 5 ? consent_of({sc::method::fp16, sc::method::int8})
                                                         : consent_of({sc::method::int8});
        const shunt::compress_places places{true, n <= 5};
        std::vector<shunt::compress_tensor> t(static_cast<std::size_t>(n));
        for (auto& x : t) {
            x.bytes = std::int64_t{4096} << static_cast<int>(u(rng) * 15);  // 4 KiB to 64 MiB
            x.gap = u(rng) * 0.02;
            x.options =
                shunt::predict_options(m, shape, shunt::compress_op::allreduce, x.bytes / 4, 4, consent, places);
            if (synthetic)  // arbitrary stage times on the same options: the greedy's hard cases
                for (auto& o : x.options)
                    if (!o.option.exact()) o.encode = u(rng) * 0.02, o.comm = u(rng) * 0.04, o.decode = u(rng) * 0.02;
        }
        if (combinations(t) > 2.5e6) continue;
        const shunt::compress_plan plan = shunt::plan_compression(t, overlap);
        CHECK(plan.planned_s == doctest::Approx(shunt::iteration_time(t, plan.choice, overlap)));
        CHECK(plan.planned_s <= plan.exact_s * (1 + 1e-12));
        const double opt = brute_force(t, overlap);
        CAPTURE(trial);
        CAPTURE(n);
        CAPTURE(overlap);
        CHECK(plan.planned_s >= opt * (1 - 1e-9));
        CHECK(plan.planned_s <= opt * 1.05);
        worst = std::max(worst, plan.planned_s / opt);
        exact_hits += plan.planned_s <= opt * (1 + 1e-9);
        ++cases;
    }
    MESSAGE("greedy against brute force: " << cases << " cases, " << exact_hits << " optimal, worst " << worst);
    CHECK(cases >= 140);
}

TEST_CASE("compress greedy: 300 tensors decided in under 10 ms") {
    const shunt::cost_model m;
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> u(0, 1);
    const auto shape = shunt::compress_shape::nodes_of(16, 4);
    std::vector<shunt::compress_tensor> t(300);
    for (auto& x : t) {
        x.bytes = std::int64_t{1024} << static_cast<int>(u(rng) * 16);
        x.gap = u(rng) * 0.001;
        x.options = shunt::predict_options(
            m, shape, shunt::compress_op::allreduce, x.bytes / 4, 4,
            consent_of({sc::method::fp16, sc::method::bf16, sc::method::int8, sc::method::int4, sc::method::sign}),
            shunt::compress_places{true, true});
    }
    double best = 1;
    for (int r = 0; r < 5; ++r) {
        const shunt::compress_plan overlapped = shunt::plan_compression(t, true);
        const shunt::compress_plan blocking = shunt::plan_compression(t, false);
        best = std::min(best, std::max(overlapped.decide_s, blocking.decide_s));
        CHECK(overlapped.planned_s < overlapped.exact_s);
    }
    MESSAGE("300 tensors: " << best * 1e3 << " ms");
#if SHUNT_TEST_INSTRUMENTED
    MESSAGE("sanitizer build: the time is the instrumentation's, not checked");
#else
    CHECK(best < 0.010);
#endif
}

TEST_CASE("call pattern: periods found, positions numbered, breaks unlock") {
    shunt::call_pattern p(16);
    // One call repeated: locked at its second call.
    auto s = p.next(7, 0);
    CHECK_FALSE(s.locked);
    s = p.next(7, 1);
    CHECK(s.locked);
    CHECK(s.fresh);
    CHECK_FALSE(s.confirmed);
    CHECK(p.period() == 1);
    CHECK(p.next(7, 2).confirmed);
    for (int i = 0; i < 5; ++i) {
        s = p.next(7, 3 + i);
        CHECK(s.locked);
        CHECK_FALSE(s.fresh);
        CHECK_FALSE(s.confirmed);
        CHECK(s.position == 0);
    }
    // A, A, B repeated: period 1 breaks at B, period 3 locks after two copies.
    shunt::call_pattern q(16);
    const std::uint64_t seq[] = {1, 1, 2};
    std::vector<shunt::call_pattern::step> steps;
    for (int k = 0; k < 12; ++k) steps.push_back(q.next(seq[k % 3], k));
    CHECK(steps[1].locked);  // 1, 1 looks like period 1
    CHECK_FALSE(steps[2].locked);
    CHECK(steps[1].fresh);
    CHECK_FALSE(steps[1].confirmed);
    CHECK(steps[5].fresh);
    CHECK(steps[8].confirmed);
    for (int k = 0; k < 12; ++k)
        if (k != 8) CHECK_FALSE(steps[static_cast<std::size_t>(k)].confirmed);
    CHECK(q.period() == 3);
    CHECK(steps[5].position == 2);
    for (int k = 6; k < 12; ++k) {
        CHECK(steps[static_cast<std::size_t>(k)].locked);
        CHECK(steps[static_cast<std::size_t>(k)].position == static_cast<std::size_t>((k - 6) % 3));
    }
    // Something new unlocks; the old pattern coming back locks again after two copies.
    CHECK_FALSE(q.next(9, 12).locked);
    int relocked = -1;
    for (int k = 0; k < 9 && relocked < 0; ++k)
        if (q.next(seq[k % 3], 13 + k).fresh && q.period() == 3) relocked = k;
    CHECK(relocked == 5);
    CHECK(q.period() == 3);
    // Longer than max_period: never locks.
    shunt::call_pattern r(4);
    bool any = false;
    for (int k = 0; k < 40; ++k) any = r.next(static_cast<std::uint64_t>(k % 5), k).locked || any;
    CHECK_FALSE(any);
}

TEST_CASE("call pattern: the gaps before each position of the last iteration") {
    shunt::call_pattern p(8);
    // Calls of period 2: each takes 1 s; 3 s of compute before position 0's call, 1 s before 1's.
    double t = 0;
    shunt::call_pattern::step s;
    const std::uint64_t sig[] = {5, 6};
    for (int k = 0; k < 6; ++k) {
        t += k % 2 == 0 ? 3 : 1;
        s = p.next(sig[k % 2], t);
        t += 1;
        p.ended(t);
    }
    REQUIRE(p.period() == 2);
    const std::vector<double> g = p.gaps();
    REQUIRE(g.size() == 2);
    // Locked at the 4th call (k = 3, signature 6): that is position 1, so signature 5 is position 0.
    CHECK(g[0] == doctest::Approx(3));
    CHECK(g[1] == doctest::Approx(1));
}
