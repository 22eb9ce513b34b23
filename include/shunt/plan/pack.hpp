// shunt/plan/pack.hpp: which packer handles a host MPI_Pack / MPI_Unpack, from the cost model,
// with the predicted time of each alternative.
#pragma once

#include <shunt/datatype/type_info.hpp>
#include <shunt/model/model.hpp>
#include <shunt/plan/planner.hpp>

#include <cstdint>

namespace shunt {

/// Who packs host memory.
enum class pack_method { library, host };

/// The answer: the method and the predicted seconds of each alternative.
struct pack_decision {
    pack_method method = pack_method::library;
    double library_s = 0;
    double host_s = 0;
};

/// Picks the packer for `count` elements of `t` on host memory from model `m` (the built-in
/// analytic model by default). Pure and thread-safe; the runtime's cached path is
/// shunt::planner::pack, which applies user overrides.
inline pack_decision plan_pack(const type_info& t, std::int64_t count, const cost_model& m = cost_model{},
                               bool unpack = false) {
    const double bytes = static_cast<double>(t.size) * static_cast<double>(count);
    const std::int64_t blocks = planner::pack_blocks(t, count);
    const double block_len = blocks > 0 ? bytes / static_cast<double>(blocks) : bytes;
    pack_decision d;
    d.library_s = m.predict_pack(true, unpack, block_len, bytes);
    d.host_s = m.predict_pack(false, unpack, block_len, bytes);
    d.method = d.host_s <= d.library_s ? pack_method::host : pack_method::library;
    return d;
}

}  // namespace shunt
