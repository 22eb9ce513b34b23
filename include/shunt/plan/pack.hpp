// shunt/plan/pack.hpp: the built-in rule that picks the library's or shunt's packer for a host
// MPI_Pack / MPI_Unpack, with the predicted time of each (the measured model replaces the constants).
#pragma once

#include <shunt/datatype/type_info.hpp>

#include <cstdint>

namespace shunt {

/// Who packs host memory.
enum class pack_method { library, host };

/// The planner's answer: the method and the predicted seconds of each alternative.
struct pack_decision {
    pack_method method = pack_method::library;
    double library_s = 0;
    double host_s = 0;
};

/// Constants of the built-in analytic pack model: time = call + blocks * per_block + bytes / bandwidth.
/// Per-block costs are those of a 1-byte-block vector measured on a 2-core x86-64 machine
/// (Open MPI 4.1 about 0.3 GB/s, MPICH 4.0 about 0.8 GB/s; shunt's strided loop about 1 ns);
/// the bandwidth term is the same memory system for both.
struct pack_model {
    double library_call_s = 150e-9;
    double library_block_s = 1.5e-9;
    double host_call_s = 40e-9;
    double host_block_s = 0.6e-9;
    double copy_bytes_per_s = 8e9;
};

/// Number of contiguous blocks moved when packing `count` elements of `t`.
inline double pack_block_count(const type_info& t, std::int64_t count) {
    double blocks = static_cast<double>(t.form.blocks.size()) * static_cast<double>(count);
    for (const auto& d : t.form.dims) blocks *= static_cast<double>(d.count);
    // Elements that tile (a dense type) move as one block.
    if (t.form.is_contiguous() && t.form.blocks[0].length == t.extent) blocks = 1;
    return blocks;
}

/// Picks the packer for `count` elements of `t` on host memory. Pure function of its arguments:
/// the caller caches it and applies any user override. Thread-safe.
inline pack_decision plan_pack(const type_info& t, std::int64_t count, const pack_model& m = {}) {
    const double blocks = pack_block_count(t, count);
    const double bytes = static_cast<double>(t.size) * static_cast<double>(count);
    pack_decision d;
    d.library_s = m.library_call_s + blocks * m.library_block_s + bytes / m.copy_bytes_per_s;
    d.host_s = m.host_call_s + blocks * m.host_block_s + bytes / m.copy_bytes_per_s;
    d.method = d.host_s <= d.library_s ? pack_method::host : pack_method::library;
    return d;
}

}  // namespace shunt
