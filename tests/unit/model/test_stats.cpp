// tests/unit/model/test_stats.cpp: robust statistics of timing samples (outliers, trimming, median).
#include <doctest/doctest.h>

#include "approx.hpp"

#include <shunt/model/stats.hpp>

using namespace shunt;

TEST_CASE("robust_summary rejects outliers and trims") {
    const auto e = robust_summary({1.0, 1.1, 0.9, 1.05, 50.0, 1.0, 0.95});
    CHECK(e.kept == 6);
    CHECK(e.value == approx(1.0).epsilon(0.05));
    CHECK(e.spread > 0);
    CHECK(robust_summary({}).kept == 0);
    CHECK(robust_summary({3.0}).value == 3.0);
    CHECK(median({4.0, 1.0, 3.0, 2.0}) == 2.5);
}
