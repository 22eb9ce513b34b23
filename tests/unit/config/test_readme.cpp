// tests/unit/config/test_readme.cpp: README.md's configuration table lists every SHUNT_* variable of
// the registry exactly once, and no other.
#include <doctest/doctest.h>

#include <shunt/config.hpp>

#include <fstream>
#include <map>
#include <string>

namespace {

/// The variable of each README table row that starts with "| `SHUNT_", with how often it appears.
std::map<std::string, int> readme_variables(const char* path) {
    std::ifstream in(path);
    REQUIRE_MESSAGE(in.good(), "cannot read " << path);
    std::map<std::string, int> seen;
    const std::string row = "| `SHUNT_";
    for (std::string line; std::getline(in, line);) {
        if (line.rfind(row, 0) != 0) continue;
        const std::size_t end = line.find('`', 3);
        REQUIRE(end != std::string::npos);
        ++seen[line.substr(3, end - 3)];
    }
    return seen;
}

}  // namespace

TEST_CASE("README's configuration table matches the registry") {
    std::map<std::string, int> seen = readme_variables(SHUNT_README);
    for (const auto& v : shunt::config_variables) {
        const std::string name(v.name);
        CAPTURE(name);
        CHECK_MESSAGE(seen[name] == 1, "README.md's table must list " << name << " once");
        seen.erase(name);
    }
    for (const auto& entry : seen) {
        const std::string& name = entry.first;
        const int count = entry.second;  // named, not bound: clang 14's CAPTURE needs it
        CAPTURE(count);
        FAIL_CHECK("README.md lists " << name << ", which the registry does not declare");
    }
}
