// tests/unit/model/test_table.cpp: time_table: interpolation, extrapolation, invalid points.
#include <doctest/doctest.h>

#include "approx.hpp"

#include <shunt/model/table.hpp>

#include <limits>

using namespace shunt;

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
