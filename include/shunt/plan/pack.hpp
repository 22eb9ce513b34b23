// shunt/plan/pack.hpp: which packer handles a host MPI_Pack / MPI_Unpack, from the cost model,
// with the predicted time of each alternative.
#pragma once

#include <shunt/datatype/type_info.hpp>
#include <shunt/model/model.hpp>
#include <shunt/plan/planner.hpp>

#include <cstdint>

namespace shunt {

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
    const plan_decision p = planner::decide_pack(m, unpack ? plan_op::unpack : plan_op::pack, t.size * count,
                                                 planner::pack_blocks(t, count), {});
    pack_decision d;
    d.library_s = p.alternatives[0].predicted_s;
    d.host_s = p.alternatives[1].predicted_s;
    d.method = p.method();
    return d;
}

}  // namespace shunt
