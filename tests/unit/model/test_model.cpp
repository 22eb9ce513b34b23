// tests/unit/model/test_model.cpp: the cost model: analytic defaults, pack predictions across block
// lengths, and online refinement.
#include <doctest/doctest.h>

#include "approx.hpp"

#include <shunt/model/model.hpp>

#include <string>

using namespace shunt;

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
