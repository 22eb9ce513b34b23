// bench/gpu/shapes.hpp: the strided objects bench-gpu-pack times (2-D rows of B bytes 2B apart, 3-D
// planes of 16 such rows a plane apart) and the memory sectors they touch; the gpu tests pack the
// same objects.
#pragma once

#include <shunt/datatype/layout.hpp>

#include <algorithm>
#include <cstdint>
#include <string>

namespace shunt::bench {

/// Bytes of the 32-byte sectors an object's strided side touches, and of those among them that
/// its blocks cover only in part (base 256-byte aligned).
struct sector_counts {
    std::int64_t touched = 0;
    std::int64_t partial = 0;
};

/// One object: `planes` planes of `rows` blocks of `block` bytes, rows `pitch` bytes apart and
/// planes `plane` bytes apart (2-D: one plane).
struct shape {
    std::string family;
    std::int64_t block = 0, pitch = 0, rows = 0, planes = 1, plane = 0;
    std::int64_t payload() const { return block * rows * planes; }
    std::int64_t span() const { return (planes - 1) * plane + (rows - 1) * pitch + block; }
    shunt::layout form() const {
        shunt::layout l{{{planes, plane}, {rows, pitch}}, {{0, block}}};
        return shunt::simplify(l);
    }
    /// One pass over the blocks, in address order: each sector counted once, and as partial when
    /// its blocks cover fewer than its 32 bytes (an unpack's partial write, where memory is written
    /// in whole ECC-protected sectors, costs a read of the sector too).
    sector_counts sectors() const {
        sector_counts n;
        std::int64_t current = -1, covered = 0;
        auto close = [&] {
            if (current < 0) return;
            n.touched += 32;
            if (covered < 32) n.partial += 32;
        };
        for (std::int64_t k = 0; k < planes; ++k)
            for (std::int64_t r = 0; r < rows; ++r) {
                const std::int64_t lo = k * plane + r * pitch, hi = lo + block;
                for (std::int64_t sec = lo / 32; sec <= (hi - 1) / 32; ++sec) {
                    if (sec != current) {
                        close();
                        current = sec;
                        covered = 0;
                    }
                    covered += std::min(hi, (sec + 1) * 32) - std::max(lo, sec * 32);
                }
            }
        close();
        return n;
    }
};

/// The object of about `size` payload bytes: 2-D rows twice the block apart; 3-D planes of 16
/// rows, with a plane gap of one plane (the face of a padded cube).
inline shape make_shape(const std::string& family, std::int64_t block, std::int64_t size) {
    shape s;
    s.family = family;
    s.block = block;
    s.pitch = 2 * block;
    const std::int64_t blocks = std::max<std::int64_t>(1, size / block);
    if (family == "2d") {
        s.rows = blocks;
    } else {
        s.rows = 16;
        s.planes = std::max<std::int64_t>(1, blocks / 16);
        s.plane = 2 * 16 * s.pitch;
    }
    return s;
}

}  // namespace shunt::bench
