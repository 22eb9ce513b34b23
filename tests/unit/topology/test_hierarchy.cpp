// tests/unit/topology/test_hierarchy.cpp: a hierarchy of levels, and keeping some of its levels.
#include <doctest/doctest.h>

#include <shunt/topology/hierarchy.hpp>

using namespace shunt;

namespace {

/// 8 ranks: packages of 2, nodes of 4.
hierarchy three_levels() {
    return hierarchy(8, {{0, 0, 1, 1, 2, 2, 3, 3}, {0, 0, 0, 0, 1, 1, 1, 1}}, {"package", "node"});
}

}  // namespace

TEST_CASE("keeping some levels merges the dropped level's groups into the next kept one") {
    const hierarchy h = three_levels();
    const hierarchy node_only = h.keep_levels(0b10);
    REQUIRE(node_only.levels() == 1);
    CHECK(node_only.name(0) == "node");
    CHECK(node_only.groups(0) == 2);
    CHECK(node_only.members(0, 1).size() == 4);
    const hierarchy package_only = h.keep_levels(0b01);
    REQUIRE(package_only.levels() == 1);
    CHECK(package_only.groups(0) == 4);
    CHECK(h.keep_levels(0).levels() == 0);
    CHECK(h.keep_levels(0b11).levels() == 2);
}
