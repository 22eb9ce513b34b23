// shunt/plan/nccl.hpp: NCCL decisions: which calls shunt's hierarchical schedules may take, and per call NCCL's own algorithm or shunt's schedule, from measured nccl.* tables.
#pragma once

#include <shunt/config.hpp>
#include <shunt/model/model.hpp>
#include <shunt/plan/nccl_tuner.hpp>

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace shunt {

/// The NCCL collectives shunt can run as hierarchical schedules (collectives/nccl.hpp).
enum class nccl_op : std::uint8_t { allreduce, reduce_scatter, allgather, broadcast, reduce };
inline constexpr std::array<std::string_view, 5> nccl_op_names = {"allreduce", "reduce_scatter", "allgather",
                                                                  "broadcast", "reduce"};
inline constexpr std::string_view to_string(nccl_op op) { return nccl_op_names[static_cast<std::size_t>(op)]; }

/// Who runs an NCCL collective: NCCL itself, shunt's schedule over the communicator's node and
/// rail communicators (reduce-scatter inside the nodes, the operation across them, allgather
/// inside the nodes), or, for allreduce where the nodes hold several GPU domains, shunt's
/// three-level schedule over domain, node and rail (see collectives/nccl.hpp).
enum class nccl_method : std::uint8_t { library, hierarchical, hierarchical3 };
inline constexpr std::array<std::string_view, 3> nccl_method_names = {"library", "hierarchical", "hierarchical3"};
inline constexpr std::string_view to_string(nccl_method m) { return nccl_method_names[static_cast<std::size_t>(m)]; }

/// Which of shunt's schedules a communicator's levels allow for an operation: the two-level one
/// where there are several nodes of several ranks, the three-level one (allreduce only) where the
/// nodes hold several domains of several ranks.
struct nccl_depths {
    bool two = true, three = false;
};

namespace table_names {
/// nccl.<op>.<library|hierarchical|hierarchical3>.r<R>n<N> (the shape named as the tuner's tables name it):
/// seconds for the operation's bytes (the reduced vector of allreduce, reduce and broadcast; the
/// whole send buffer of reduce-scatter; the whole receive buffer of allgather) on R ranks in N
/// nodes of equal size, measured where GPUs exist.
inline std::string nccl(nccl_op op, nccl_method m, const nccl_shape& s) {
    return "nccl." + std::string(to_string(op)) + "." + std::string(to_string(m)) + "." + s.text();
}
/// True for the tables of NCCL decisions (nccl_digest covers them).
inline bool is_nccl(std::string_view name) { return name.starts_with("nccl."); }
}  // namespace table_names

/// Calls below this many bytes stay with NCCL whatever the model says: latency-bound, and NCCL's
/// own small-message protocols are what they need. Also the size from which a communicator's
/// first call sets up its levels (a constant: every rank must set up at the same call).
inline constexpr std::int64_t nccl_min_bytes = std::int64_t{1} << 20;

/// A digest of the model's NCCL tables (names and points), 0 when it has none: ranks agree on it
/// before any decision rests on the model, since each host may load a different model file.
inline std::uint64_t nccl_digest(const cost_model& m) {
    std::uint64_t h = 0;
    const auto mix = [&h](std::uint64_t v) { h = (h ^ v) * 0x100000001B3ull + 0x9E3779B97F4A7C15ull; };
    for (const auto& [name, table] : m.tables()) {
        if (!table_names::is_nccl(name)) continue;
        for (const char c : name) mix(static_cast<unsigned char>(c));
        for (const auto& p : table.points()) {
            mix(std::bit_cast<std::uint64_t>(p.size));
            mix(std::bit_cast<std::uint64_t>(p.time));
        }
    }
    return h;
}

/// One NCCL decision with the predictions it rests on (NaN where a table is missing).
struct nccl_decision {
    nccl_method method = nccl_method::library;
    bool forced = false;  ///< SHUNT_NCCL=shunt or library
    double library_s = 0, hierarchical_s = 0, hierarchical3_s = 0;
    /// The prediction for `m`.
    double seconds(nccl_method m) const {
        return m == nccl_method::library        ? library_s
               : m == nccl_method::hierarchical ? hierarchical_s
                                                : hierarchical3_s;
    }
};

/// The method for `op` moving `bytes` on a communicator of shape `s` whose levels allow `depths`:
/// SHUNT_NCCL=library forces NCCL, shunt forces the deepest schedule that applies; auto takes
/// the fastest of shunt's applicable schedules only where the model has measured tables of it
/// and of NCCL for this shape covering the size and it is faster than NCCL by
/// measured_win_margin. Without tables NCCL keeps every call: its rings and trees are
/// topology-aware already, and the analytic model describes MPI libraries, not them. Pure: the
/// same on every rank whose model agrees.
inline nccl_decision decide_nccl(const cost_model& m, nccl_choice choice, nccl_op op, std::int64_t bytes,
                                 const nccl_shape& s, nccl_depths depths = {}) {
    nccl_decision d;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double b = static_cast<double>(bytes);
    if (op != nccl_op::allreduce) depths.three = false;
    const auto table = [&](nccl_method k) { return m.find(table_names::nccl(op, k, s)); };
    const time_table* lib = table(nccl_method::library);
    const time_table* hier = depths.two ? table(nccl_method::hierarchical) : nullptr;
    const time_table* hier3 = depths.three ? table(nccl_method::hierarchical3) : nullptr;
    d.library_s = lib != nullptr ? lib->predict(b) : nan;
    d.hierarchical_s = hier != nullptr ? hier->predict(b) : nan;
    d.hierarchical3_s = hier3 != nullptr ? hier3->predict(b) : nan;
    if (choice != nccl_choice::automatic) {
        d.forced = true;
        d.method = choice == nccl_choice::library ? nccl_method::library
                   : depths.three                 ? nccl_method::hierarchical3
                   : depths.two                   ? nccl_method::hierarchical
                                                  : nccl_method::library;
        return d;
    }
    if (bytes < nccl_min_bytes || lib == nullptr || !lib->covers(b)) return d;
    double best = d.library_s * (1 - measured_win_margin);
    for (const auto& [k, t] :
         {std::pair{nccl_method::hierarchical, hier}, std::pair{nccl_method::hierarchical3, hier3}})
        if (t != nullptr && t->covers(b) && d.seconds(k) < best) {
            best = d.seconds(k);
            d.method = k;
        }
    return d;
}

}  // namespace shunt
