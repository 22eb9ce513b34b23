// tests/unit/plan/test_planner.cpp: the pack planner: measuring a layout on its first calls, the
// verdict and its second look, size classes, and the cap on cached layouts.
#include <doctest/doctest.h>

#include "approx.hpp"

#include <shunt/plan/planner.hpp>

#include <cstdint>
#include <memory>

using namespace shunt;

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
        REQUIRE(c.d.method() == (verdict == lib ? pack_method::library : pack_method::host));
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
    REQUIRE(c.d.method() == pack_method::host);
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
    CHECK(c.d.method() == pack_method::library);
    CHECK(c.d.measured);
    CHECK(c.d.measured_s[lib] == approx(90e-6));
    CHECK(c.d.measured_s[host] == approx(96.5e-6));  // the median of four: 99, 98, 95, 94 us
    CHECK(p.decision(planner::key_of(t, 1, false)).method() == pack_method::library);
    // A close verdict: the class runs it, still measuring, until the second look, which agrees.
    CHECK(c.m.measuring);
    CHECK_FALSE(c.m.timed);
    CHECK(c.m.method == lib);
    CHECK(second_look(p, t, lib, 90e-6, 97e-6, 1));
    c = pack_call(p, t);
    CHECK_FALSE(c.m.measuring);
    CHECK_FALSE(c.d.measuring);
    CHECK(c.d.method() == pack_method::library);
    CHECK(c.d.measured_s[host] == approx(97e-6));
    // The same blocks 16 bytes apart are another key: measured afresh, from the model's choice.
    planned dense = pack_call(p, rows_info(8192, 8, 16));
    CHECK(dense.m.measuring);
    CHECK(dense.d.method() == pack_method::host);
    // Unpacking is its own key too.
    planner::measure_call u;
    CHECK(p.pack(t, 1, true, nullptr, nullptr, &u).method() == pack_method::host);
    CHECK(u.measuring);
}

TEST_CASE("pack planner: the verdict favours the library within the margin and survives model corrections") {
    auto model = std::make_shared<cost_model>();
    planner p(model);
    const type_info t = rows_info(8192, 8, 64);
    warm_up(p, t);
    for (int i = 0; i < 2 * planner::measure_trials; ++i)  // shunt faster, not by the margin
        timed_call(p, t, 100e-6, 100e-6 * (1 - planner::measure_margin / 2));
    CHECK(p.decision(planner::key_of(t, 1, false)).method() == pack_method::library);
    CHECK(second_look(p, t, lib, 100e-6, 100e-6 * (1 - planner::measure_margin / 2)));
    CHECK(pack_call(p, t).d.method() == pack_method::library);
    // A model correction recomputes the predictions; the measured choice stays.
    const auto g = model->generation();
    for (int i = 0; i < 10; ++i) model->observe(table_names::pack(false, false, 8), 65536, 1e-7);
    REQUIRE(model->generation() != g);
    const planned c = pack_call(p, t);
    CHECK(c.d.method() == pack_method::library);
    CHECK(c.d.measured);
    CHECK_FALSE(c.m.measuring);
    // Beating it by more than the margin keeps shunt's packer.
    const type_info u = rows_info(8192, 8, 80);
    warm_up(p, u);
    for (int i = 0; i < 2 * planner::measure_trials; ++i)
        timed_call(p, u, 100e-6, 100e-6 * (1 - 2 * planner::measure_margin));
    CHECK(p.decision(planner::key_of(u, 1, false)).method() == pack_method::host);
    CHECK(second_look(p, u, host, 100e-6, 100e-6 * (1 - 2 * planner::measure_margin)));
    CHECK(pack_call(p, u).d.method() == pack_method::host);
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
    CHECK(p.decision(planner::key_of(t, 1, false)).method() == pack_method::library);
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
    CHECK(c.d.method() == pack_method::host);
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
        CHECK(c.d.method() == (host_s < 100e-6 ? pack_method::host : pack_method::library));
    }
}

TEST_CASE("pack planner: a clear win of the model's choice settles at once; noise against it does not") {
    planner p(std::make_shared<cost_model>());
    const type_info clear = rows_info(8192, 8, 32);
    warm_up(p, clear);
    CHECK_FALSE(timed_call(p, clear, 50e-6, 10e-6));  // the library
    CHECK(timed_call(p, clear, 50e-6, 10e-6));  // shunt, 5x faster: settled after one each
    CHECK(pack_call(p, clear).d.method() == pack_method::host);

    // The model's choice slow once (a preempted call, say): no early verdict against it.
    const type_info noisy = rows_info(8192, 8, 48);
    warm_up(p, noisy);
    CHECK_FALSE(timed_call(p, noisy, 20e-6, 100e-6));  // the library
    CHECK_FALSE(timed_call(p, noisy, 20e-6, 100e-6));  // shunt, preempted
    int settled = 0;
    for (int i = 2; i < 2 * planner::measure_trials; ++i)
        settled += timed_call(p, noisy, 20e-6, 15e-6) ? 1 : 0;  // not 2x: no early verdict either
    CHECK(settled == 1);
    CHECK(p.decision(planner::key_of(noisy, 1, false)).method() == pack_method::host);
    CHECK(p.decision(planner::key_of(noisy, 1, false)).measured_s[host] == approx(15e-6));
    // 0.75 is a close verdict: the second look (led by shunt's packer) confirms it.
    CHECK(second_look(p, noisy, host, 20e-6, 15e-6));
    const planned c = pack_call(p, noisy);
    CHECK_FALSE(c.m.measuring);
    CHECK(c.d.method() == pack_method::host);
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
    planner forced(std::make_shared<cost_model>(), plan_overrides{pack_method::library});
    CHECK_FALSE(pack_call(forced, rows_info(8192, 8, 512)).m.measuring);
    // A caller that does not measure (point-to-point) gets the model's choice and moves nothing on.
    const type_info t = rows_info(8192, 8, 512);
    for (int i = 0; i < 4; ++i) {
        const plan_decision d = p.pack(t, 1, false);
        CHECK(d.measuring);
        CHECK(d.method() == pack_method::host);
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
    CHECK(d.method() == pack_method::host);
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
    CHECK(p.decision(planner::key_of(b, 1, false)).method() == pack_method::library);  // the key that decided it
    CHECK_FALSE(p.decision(planner::key_of(a, 1, false)).measured);  // the other: on its next call
    // 4% is close: the second look (here on the smaller count alone) confirms it.
    REQUIRE(second_look(p, a, lib, 65536 * per_byte, 65536 * per_byte * 1.04));
    CHECK(p.decision(planner::key_of(b, 1, false)).measuring);  // settled on its next call
    c = pack_call(p, a);
    CHECK_FALSE(c.m.measuring);
    CHECK(c.d.measured);
    CHECK(c.d.method() == pack_method::library);
    CHECK(c.d.measured_s[lib] == approx(65536 * per_byte));
    CHECK(c.d.measured_s[host] == approx(65536 * per_byte * 1.04));
    // A count never seen before takes the verdict at once, its times scaled to its bytes.
    bool is_new = false;
    planner::measure_call m;
    const plan_decision d = p.pack(rows_info(8500, 8, 512), 1, false, &is_new, nullptr, &m);
    CHECK(is_new);
    CHECK_FALSE(m.measuring);
    CHECK(d.measured);
    CHECK(d.method() == pack_method::library);
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
    CHECK(d.method() == pack_method::host);
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
