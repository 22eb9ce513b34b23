// tests/mpi/probe.hpp: typed test buffers with guard bytes, and the byte-position probe: which
// buffer byte MPI_Pack puts at each position of the packed stream (the library as the oracle).
#pragma once

#include "random_types.hpp"

#include <shunt/datatype/layout.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace shunt_test {

/// Memory for `count` elements of a type, addressed relative to the element-0 origin the MPI
/// calls take: either owned (with guard bytes on both sides, so stray writes show), or the
/// memory an MPI_BOTTOM type's absolute addresses point into (origin = MPI_BOTTOM = address 0).
class typed_buffer {
public:
    /// Owned memory covering origin-relative bytes [lo, hi) plus `guard` bytes on each side.
    typed_buffer(std::int64_t lo, std::int64_t hi, std::int64_t guard = 64)
        : own_(static_cast<std::size_t>(hi - lo + 2 * guard)) {
        mem_ = own_.data();
        bytes_ = static_cast<std::int64_t>(own_.size());
        origin_ = address(mem_) + static_cast<std::uintptr_t>(guard - lo);
    }
    /// A view of a bottom type's memory.
    typed_buffer(std::byte* memory, std::int64_t bytes) : mem_(memory), bytes_(bytes), origin_(0) {}

    /// The buffer argument of MPI_Pack / pack_host: element 0's origin (MPI_BOTTOM for bottom).
    void* origin() const { return reinterpret_cast<void*>(origin_); }
    std::byte* data() const { return mem_; }
    std::int64_t bytes() const { return bytes_; }
    /// Index into data() of the byte at origin-relative position `pos`.
    std::int64_t index_of(std::int64_t pos) const {
        return static_cast<std::int64_t>(origin_ + static_cast<std::uintptr_t>(pos) - address(mem_));
    }
    /// True when origin-relative bytes [lo, hi) lie inside the memory.
    bool covers(std::int64_t lo, std::int64_t hi) const {
        return hi <= lo || (index_of(lo) >= 0 && index_of(hi - 1) < bytes_);
    }
    /// Fills the memory with a pattern from `seed`.
    void fill(std::uint64_t seed) {
        rng r(seed);
        for (std::int64_t i = 0; i < bytes_; i += 8) {
            const std::uint64_t v = r.next();
            std::memcpy(mem_ + i, &v, static_cast<std::size_t>(std::min<std::int64_t>(8, bytes_ - i)));
        }
    }
    std::vector<std::byte> snapshot() const { return {mem_, mem_ + bytes_}; }

private:
    static std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
    std::vector<std::byte> own_;
    std::byte* mem_ = nullptr;
    std::int64_t bytes_ = 0;
    std::uintptr_t origin_ = 0;
};

/// MPI_Pack of `count` elements from buf.origin() into `out` (`outsize` bytes); returns the bytes
/// written. MPICH 4.0.2 refuses MPI_Pack from MPI_BOTTOM ("Null pointer in parameter inbuf"), so
/// there a bottom buffer is packed by a send to self received as MPI_PACKED: the same bytes.
inline int mpi_pack(const typed_buffer& buf, MPI_Datatype t, int count, unsigned char* out, int outsize) {
    int position = 0;
#if defined(MPICH_VERSION)
    if (buf.origin() == MPI_BOTTOM) {
        MPI_Status st;
        SHUNT_TEST_MPI(PMPI_Sendrecv(buf.origin(), count, t, 0, 7, out, outsize, MPI_PACKED, 0, 7, MPI_COMM_SELF, &st));
        SHUNT_TEST_MPI(PMPI_Get_count(&st, MPI_PACKED, &position));
        return position;
    }
#endif
    SHUNT_TEST_MPI(PMPI_Pack(buf.origin(), count, t, out, outsize, &position, MPI_COMM_WORLD));
    return position;
}

/// MPI_Unpack of `insize` packed bytes into `count` elements at buf.origin() (see mpi_pack).
inline void mpi_unpack(const unsigned char* in, int insize, typed_buffer& buf, MPI_Datatype t, int count) {
#if defined(MPICH_VERSION)
    if (buf.origin() == MPI_BOTTOM) {
        SHUNT_TEST_MPI(PMPI_Sendrecv(in, insize, MPI_PACKED, 0, 7, buf.origin(), count, t, 0, 7, MPI_COMM_SELF,
                                     MPI_STATUS_IGNORE));
        return;
    }
#endif
    int position = 0;
    SHUNT_TEST_MPI(PMPI_Unpack(in, insize, &position, buf.origin(), count, t, MPI_COMM_WORLD));
}

/// Which bytes of the packed stream MPI writes at all. MPICH 4.0 copies MPI_LONG_DOUBLE as an
/// 80-bit value and leaves bytes 10-15 of each one unwritten (undefined padding), where shunt
/// copies all 16; those bytes are compared nowhere. Found by packing over 0x00 and over 0xff.
inline std::vector<bool> written_bytes(MPI_Datatype t, int count, typed_buffer& buf, std::int64_t total) {
    std::vector<unsigned char> zeros(static_cast<std::size_t>(total) + 1, 0x00), ones(zeros.size(), 0xff);
    buf.fill(0x5eed);
    mpi_pack(buf, t, count, zeros.data(), static_cast<int>(zeros.size()));
    mpi_pack(buf, t, count, ones.data(), static_cast<int>(ones.size()));
    std::vector<bool> written(static_cast<std::size_t>(total));
    for (std::size_t s = 0; s < written.size(); ++s) written[s] = zeros[s] != 0x00 || ones[s] != 0xff;
    return written;
}

/// The origin-relative buffer position of every byte MPI_Pack writes for `count` elements of
/// `t`: four packs of a buffer whose bytes hold byte k of their own index (memory < 4 GiB).
/// Positions of bytes MPI leaves unwritten are meaningless (see written_bytes).
inline std::vector<std::int64_t> probe_positions(MPI_Datatype t, int count, typed_buffer& buf, std::int64_t total) {
    std::vector<std::int64_t> pos(static_cast<std::size_t>(total), 0);
    std::vector<unsigned char> out(static_cast<std::size_t>(total) + 1);
    for (int k = 0; k < 4; ++k) {
        for (std::int64_t j = 0; j < buf.bytes(); ++j) buf.data()[j] = static_cast<std::byte>((j >> (8 * k)) & 0xff);
        mpi_pack(buf, t, count, out.data(), static_cast<int>(out.size()));
        for (std::size_t s = 0; s < pos.size(); ++s) pos[s] |= static_cast<std::int64_t>(out[s]) << (8 * k);
    }
    for (auto& p : pos) p -= buf.index_of(0);  // memory index -> origin-relative position
    return pos;
}

/// The same positions as decode's layout says: element i at i * extent, blocks in order.
inline std::vector<std::int64_t> layout_positions(const shunt::layout& form, std::int64_t extent, std::int64_t count) {
    std::vector<std::int64_t> pos;
    const auto flat = shunt::flatten(form);
    for (std::int64_t i = 0; i < count; ++i)
        for (const auto& b : flat)
            for (std::int64_t k = 0; k < b.length; ++k) pos.push_back(i * extent + b.offset + k);
    return pos;
}

/// True when no buffer byte appears twice (MPI forbids receiving into such a typemap).
inline bool distinct(std::vector<std::int64_t> pos) {
    std::sort(pos.begin(), pos.end());
    return std::adjacent_find(pos.begin(), pos.end()) == pos.end();
}

}  // namespace shunt_test
