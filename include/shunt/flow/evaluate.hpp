// shunt/flow/evaluate.hpp: every strategy's maximum link load and completion time for the phases of a collective (what shunt-flows prints).
#pragma once

#include <shunt/flow/assign.hpp>
#include <shunt/flow/fabric.hpp>
#include <shunt/flow/fluid.hpp>
#include <shunt/flow/load.hpp>
#include <shunt/flow/pattern.hpp>
#include <shunt/flow/planner.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace shunt::flow {

/// The strategies compared: random ECMP (one hashed path per flow), ideal packet spraying
/// (fluid), k-split with random paths, the coordinated assignment without splitting, and the
/// coordinated assignment at the phase's minimal k.
enum class strategy { ecmp, spray, random_split, coordinated_1, coordinated };

inline const char* strategy_name(strategy s) {
    switch (s) {
        case strategy::ecmp: return "ecmp";
        case strategy::spray: return "spray";
        case strategy::random_split: return "random k-split";
        case strategy::coordinated_1: return "coordinated k=1";
        case strategy::coordinated: return "coordinated k-split";
    }
    return "?";
}

/// One strategy's figures, one value per seed (one value for the deterministic strategies).
struct strategy_result {
    strategy kind = strategy::ecmp;
    int k = 1;
    std::vector<double> load;  ///< maximum link load, seconds
    std::vector<double> time;  ///< fluid completion time, seconds (empty when not computed)
};

/// Mean and nearest-rank quantile of a set of values.
inline double mean_of(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}
inline double quantile_of(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const auto i = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
}

/// What is evaluated.
struct evaluate_options {
    int seeds = 20;  ///< random hashings for ecmp and random k-split
    std::uint64_t seed = 1;
    bool completion = true;  ///< run the max-min fluid model (else loads only)
    int random_k = 0;  ///< k of the random split; 0: the phase's minimal k (at least 2)
    plan_options plan;  ///< the minimal k's search
};

/// One phase's figures.
struct phase_report {
    std::string name;
    std::int64_t repeat = 1;
    std::size_t flows = 0, crossing = 0;  ///< flows, and those crossing the spines
    k_choice k;  ///< the minimal k
    std::vector<strategy_result> rows;
};

/// Evaluates every strategy on one phase.
inline phase_report evaluate_phase(const fabric& fab, const phase& ph, const evaluate_options& opt = {}) {
    phase_report rep;
    rep.name = ph.name;
    rep.repeat = ph.repeat;
    rep.flows = ph.flows.size();
    for (const flow& f : ph.flows) rep.crossing += crosses_spine(fab, f) ? 1 : 0;
    rep.k = minimal_k(fab, ph, opt.plan);
    const link_scope scope = opt.plan.scope;
    auto fixed = [&](strategy s, int k, const routing& r) {
        strategy_result x{s, k, {max_load(fab, link_loads(fab, ph, r), scope)}, {}};
        if (opt.completion) x.time.push_back(completion_time(fab, ph, r));
        return x;
    };
    auto hashed = [&](strategy s, int k) {
        strategy_result x{s, k, {}, {}};
        for (int i = 0; i < std::max(1, opt.seeds); ++i) {
            const routing r =
                route_random(fab, ph, k, opt.seed + static_cast<std::uint64_t>(i) * 0x9e3779b97f4a7c15ull);
            x.load.push_back(max_load(fab, link_loads(fab, ph, r), scope));
            if (opt.completion) x.time.push_back(completion_time(fab, ph, r));
        }
        return x;
    };
    rep.rows.push_back(hashed(strategy::ecmp, 1));
    strategy_result spray{strategy::spray, 0, {max_load(fab, spray_loads(fab, ph), scope)}, {}};
    if (opt.completion) spray.time.push_back(spray_completion_time(fab, ph));
    rep.rows.push_back(spray);
    const int rk = opt.random_k > 0 ? opt.random_k : std::max(2, rep.k.k);
    rep.rows.push_back(hashed(strategy::random_split, rk));
    rep.rows.push_back(fixed(strategy::coordinated_1, 1, route_coordinated(fab, ph, 1)));
    rep.rows.push_back(fixed(strategy::coordinated, rep.k.k, route_coordinated(fab, ph, rep.k.k)));
    return rep;
}

/// A whole collective: per strategy, the sum over its phases of repeat x figure, per seed.
inline std::vector<strategy_result> total_of(const std::vector<phase_report>& phases) {
    std::vector<strategy_result> out;
    for (const auto& p : phases) {
        if (out.empty()) {
            for (const auto& r : p.rows) {
                strategy_result z{r.kind, r.k, std::vector<double>(r.load.size(), 0.0),
                                  std::vector<double>(r.time.size(), 0.0)};
                out.push_back(z);
            }
        }
        for (std::size_t i = 0; i < p.rows.size() && i < out.size(); ++i) {
            const auto& r = p.rows[i];
            out[i].k = std::max(out[i].k, r.k);
            for (std::size_t s = 0; s < r.load.size() && s < out[i].load.size(); ++s)
                out[i].load[s] += static_cast<double>(p.repeat) * r.load[s];
            for (std::size_t s = 0; s < r.time.size() && s < out[i].time.size(); ++s)
                out[i].time[s] += static_cast<double>(p.repeat) * r.time[s];
        }
    }
    return out;
}

}  // namespace shunt::flow
