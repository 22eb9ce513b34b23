// shunt/datatype/type_info.hpp: what shunt knows of one datatype: canonical layout and bounds.
#pragma once

#include <shunt/datatype/layout.hpp>

#include <cstdint>

namespace shunt {

/// A decoded datatype. Element i of a buffer of this type starts at base + i * extent; its bytes
/// are form's pack program. Bounds are MPI's (MPI_Type_get_extent_x, _true_extent_x, _size_x).
struct type_info {
    layout form;
    std::int64_t size = 0;
    std::int64_t lb = 0;
    std::int64_t extent = 0;
    std::int64_t true_lb = 0;
    std::int64_t true_extent = 0;

    /// True when `count` elements are one contiguous run of bytes, one memcpy: layout::is_dense
    /// without reading the block list (the one block of a contiguous form is `size` bytes long).
    bool dense(std::int64_t count) const { return form.is_contiguous() && (count == 1 || extent == size); }
};

}  // namespace shunt
