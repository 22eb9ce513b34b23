// tests/unit/layout_string.hpp: readable text of a shunt::layout for test messages (doctest finds the
// operator<< by ADL).
#pragma once

#include <shunt/datatype/layout.hpp>

#include <ostream>
#include <sstream>
#include <string>

namespace shunt {

/// Prints "dims[{count,stride}...] blocks[{offset,length}...]".
inline std::ostream& operator<<(std::ostream& os, const layout& l) {
    os << "dims[";
    for (std::size_t k = 0; k < l.dims.size(); ++k)
        os << (k ? "," : "") << '{' << l.dims[k].count << ',' << l.dims[k].stride << '}';
    os << "] blocks[";
    const std::size_t shown = l.blocks.size() < 16 ? l.blocks.size() : 16;
    for (std::size_t k = 0; k < shown; ++k)
        os << (k ? "," : "") << '{' << l.blocks[k].offset << ',' << l.blocks[k].length << '}';
    if (shown < l.blocks.size()) os << ",... (" << l.blocks.size() << " blocks)";
    return os << ']';
}

inline std::ostream& operator<<(std::ostream& os, const block& b) {
    return os << '{' << b.offset << ',' << b.length << '}';
}

}  // namespace shunt

namespace shunt_test {

inline std::string to_string(const shunt::layout& l) {
    std::ostringstream os;
    os << l;
    return os.str();
}

}  // namespace shunt_test
