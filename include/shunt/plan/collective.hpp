// shunt/plan/collective.hpp: the collective planner: library or hierarchical schedule per (operation, size class), from the cost model, refined by measuring both and agreed on by all ranks.
#pragma once

#include <shunt/model/model.hpp>
#include <shunt/topology/hierarchy.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace shunt {

/// The collectives shunt can run itself.
enum class coll_op : std::uint8_t {
    allreduce,
    reduce_scatter_block,
    reduce_scatter,
    allgather,
    allgatherv,
    bcast,
    reduce,
    alltoall,
    alltoallv,
};
inline constexpr std::array<std::string_view, 9> coll_op_names = {
    "allreduce", "reduce_scatter_block", "reduce_scatter", "allgather", "allgatherv", "bcast", "reduce", "alltoall",
    "alltoallv"};
inline constexpr std::string_view to_string(coll_op op) { return coll_op_names[static_cast<std::size_t>(op)]; }

/// Who runs a collective: the MPI library's own algorithm, or shunt's partitioned schedule
/// over the communicator's levels (a flat shunt algorithm when it has none).
enum class coll_method : std::uint8_t { library, hierarchical };
inline constexpr std::size_t coll_method_count = 2;
inline constexpr std::array<std::string_view, coll_method_count> coll_method_names = {"library", "hierarchical"};
inline constexpr std::string_view to_string(coll_method m) { return coll_method_names[static_cast<std::size_t>(m)]; }

/// What the model knows of a communicator's hierarchy: its size and, per level (innermost
/// first), the level's name and the size of its largest group. signature() names the model's
/// tables for this shape: coll.<op>.<method>.<signature>.
struct coll_shape {
    int ranks = 1;
    std::vector<std::string> level_names;
    std::vector<int> group_sizes;

    static coll_shape of(const hierarchy& h) {
        coll_shape s;
        s.ranks = h.size();
        for (int k = 0; k < h.levels(); ++k) {
            int most = 0;
            for (int g = 0; g < h.groups(k); ++g) most = std::max(most, static_cast<int>(h.members(k, g).size()));
            s.level_names.push_back(h.name(k));
            s.group_sizes.push_back(most);
        }
        return s;
    }
    /// The mask of every level (bit k for level k).
    std::uint32_t all_levels() const { return hierarchy::level_mask(level_names.size()); }
    /// "node" or "package+node": the levels of `mask`, innermost first; "flat" for none.
    std::string levels_text(std::uint32_t mask) const {
        std::string out;
        for (std::size_t k = 0; k < level_names.size(); ++k)
            if (k < 32 && ((mask >> k) & 1u)) out += (out.empty() ? "" : "+") + level_names[k];
        return out.empty() ? "flat" : out;
    }
    /// How shunt's schedule over `mask` is named: "over package+node", or "flat" for no level.
    std::string schedule_text(std::uint32_t mask) const {
        const std::string levels = levels_text(mask);
        return levels == "flat" ? levels : "over " + levels;
    }
    /// "p4.node2": the rank count, then each level's name and largest group.
    std::string signature() const {
        std::string out = "p";
        out += std::to_string(ranks);
        for (std::size_t k = 0; k < level_names.size(); ++k) {
            out += '.';
            out += level_names[k];
            out += std::to_string(group_sizes[k]);
        }
        return out;
    }
};

namespace table_names {
/// coll.<op>.<method>.<signature>, and for shunt's schedule over only some of the shape's
/// levels ".over-<levels>" after it (e.g. coll.allreduce.hierarchical.p8.package2.node4.over-node):
/// the same shape, a different schedule.
inline std::string collective(coll_op op, coll_method m, const coll_shape& s,
                              std::uint32_t levels = ~std::uint32_t{0}) {
    std::string name = "coll." + std::string(to_string(op)) + "." + std::string(to_string(m)) + "." + s.signature();
    const std::uint32_t all = s.all_levels();
    if (m == coll_method::hierarchical && (levels & all) != all) name += ".over-" + s.levels_text(levels);
    return name;
}
}  // namespace table_names

namespace detail {

/// Bytes a rank sends across the slowest link, per byte of the operation's vector, for a
/// bandwidth-optimal algorithm over q members: the reductions and gathers (q-1)/q, allreduce
/// and large broadcasts twice that, alltoall (q-1)/q of its send buffer.
inline double coll_volume(coll_op op, int q) {
    const double f = q > 1 ? static_cast<double>(q - 1) / q : 0;
    switch (op) {
        case coll_op::allreduce:
        case coll_op::bcast: return 2 * f;
        default: return f;
    }
}

/// Latency terms (messages in sequence) over q members.
inline double coll_steps(coll_op op, int q) {
    if (q <= 1) return 0;
    const double lg = std::ceil(std::log2(static_cast<double>(q)));
    switch (op) {
        case coll_op::allreduce: return 2 * lg;
        case coll_op::alltoall:
        case coll_op::alltoallv: return q - 1;
        default: return lg;
    }
}

/// The analytic level a group exchange at level k of a shape runs on: inside the innermost
/// groups the level those groups are named after (a node's members talk through shared
/// memory, a package's through its cache), between the groups of the outermost level the
/// network when that level is the node (or above), else the node.
inline const analytic_params::level& link_of(const analytic_params& p, const coll_shape& s, std::size_t k) {
    auto named = [&](std::string_view n) -> const analytic_params::level& {
        if (n == "package" || n == "numa" || n == "gpu") return p.package;
        if (n == "node") return p.node;
        return p.network;
    };
    if (k < s.level_names.size()) return named(s.level_names[k]);
    if (s.level_names.empty()) return p.node;  // one group of everything: one node, presumably
    const std::string_view top = s.level_names.back();
    return top == "package" || top == "numa" || top == "gpu" ? p.node : p.network;
}

}  // namespace detail

/// The analytic prediction of one collective: the library as a flat bandwidth-optimal
/// algorithm over the slowest link (all ranks of a group share its outer link), shunt's
/// schedule as one flat algorithm per kept level (bit k of `levels` for level k) on that
/// level's link, the data shrinking by each inner group's size on the way out; the top
/// exchange runs on the shape's outermost link whichever levels are kept. A prior only:
/// measurements replace it.
inline double analytic_collective(const analytic_params& p, coll_op op, coll_method m, const coll_shape& s,
                                  double bytes, std::uint32_t levels = ~std::uint32_t{0}) {
    if (s.ranks <= 1) return 0;
    if (m == coll_method::library) {
        const auto& slow = detail::link_of(p, s, s.level_names.size());
        const double sharing = s.group_sizes.empty() ? 1 : s.group_sizes.back();
        return detail::coll_steps(op, s.ranks) * slow.latency_s +
               detail::coll_volume(op, s.ranks) * bytes * sharing / slow.bytes_per_s;
    }
    double t = 0, data = bytes;
    int inner = 1;
    for (std::size_t k = 0; k <= s.group_sizes.size(); ++k) {
        if (k < s.group_sizes.size() && (k >= 32 || ((levels >> k) & 1u) == 0)) continue;
        const int q = k < s.group_sizes.size() ? std::max(1, s.group_sizes[k] / inner) : std::max(1, s.ranks / inner);
        const auto& link = detail::link_of(p, s, k);
        t += detail::coll_steps(op, q) * link.latency_s + detail::coll_volume(op, q) * data / link.bytes_per_s;
        if (op != coll_op::alltoall && op != coll_op::alltoallv && op != coll_op::bcast) data /= std::max(1, q);
        inner *= q;
    }
    return t;
}

/// One decision of the collective planner, for an operation and a size class (bytes rounded
/// down to a power of two).
struct coll_decision {
    coll_op op = coll_op::allreduce;
    int size_class = 0;  ///< bit width of the byte count (0 for none)
    std::int64_t bytes = 0;  ///< the byte count of the call that made the decision
    coll_method method = coll_method::library;
    std::uint32_t levels = ~std::uint32_t{0};  ///< the levels shunt's schedule runs over (bit k: level k)
    /// The model's prediction (seconds) of shunt's schedule over each candidate set of levels,
    /// agreed; the best is `levels` and predicted[hierarchical].
    std::vector<std::pair<std::uint32_t, double>> level_predictions;
    std::array<double, coll_method_count> predicted{};  ///< model (seconds), before measuring
    std::array<double, coll_method_count> measured{};  ///< agreed best measured time; NaN if not measured
    bool forced = false;
    bool live = true;  ///< measuring allowed (false: a floating-point reduction, decided from the model)
    /// Not live, from the analytic model, where the library's prediction is mostly latency: the
    /// library kept (the model knows neither the library's algorithm nor the rank placement).
    bool latency_bound = false;
    std::uint64_t taken = 0;
};

/// Chooses the method of each collective call on one communicator.
///
/// Every choice must be identical on every rank, or the ranks run different algorithms and
/// deadlock: the key (operation, size class, whether it may be measured) is the same on every
/// rank of a valid call, the calls on a communicator come in the same order on every rank, and
/// every number a choice rests on is first agreed on with `agree` (an element-wise maximum over
/// the ranks, e.g. MPI_Allreduce with MPI_MAX on a private communicator: a collective is as
/// slow as its slowest rank), what the ranks' models hold included, since ranks may hold
/// different model files (one per host). For a new key the planner asks the model; when not
/// every rank's model has a measurement for this shape and size it measures: the next
/// 2 x `trials` calls alternate between the methods (timed by the caller and passed to
/// record()), then the best time of each is agreed and the faster wins. shunt's schedule must
/// beat the library by `margin` (a fraction) to be chosen, so noise favours the library. Where
/// the library's analytic time is mostly latency (agreed, so alike on every rank) the calls are
/// too short for three timings: each method runs latency_trials times and must win by
/// latency_margin.
///
/// A call that must not be measured (`live` false: a floating-point reduction, whose result
/// depends on the algorithm) is decided from the agreed predictions alone, so that the same
/// program gets the same bits in every run: measuring would alternate the methods on the
/// application's data and settle on timing. Measured tables decide where every rank has them;
/// else the analytic model, trusted only where the library's predicted time is mostly data
/// volume (at least `bandwidth_share`): its latency terms assume the library's algorithm and
/// the ranks' placement, which it does not know, so where latency dominates the library stays.
///
/// How many levels: shunt's schedule may run over every level of the shape or over fewer
/// (a dropped level's groups merge into the next kept one; none at all is one flat
/// exchange). For a new key the model predicts every candidate set of levels (all subsets up
/// to four levels, else all and none), from measured tables when the full schedule has one
/// for this shape (then only sets with their own tables compete, measured against measured),
/// else from the analytic model; the agreed fastest set is the schedule that competes with
/// the library. Thread-safe; meant for one communicator (collectives on one communicator do
/// not run concurrently).
class collective_tuner {
public:
    using agree_fn = std::function<void(double* values, int n)>;
    /// Latency-bound calls (see model_facts): each method measured this many times at least,
    /// and shunt's schedule chosen only where it is this much faster.
    static constexpr int latency_trials = 12;
    static constexpr double latency_margin = 0.25;

    collective_tuner(coll_shape shape, int trials = 3, double margin = measured_win_margin)
        : shape_(std::move(shape)), trials_(std::max(0, trials)), margin_(margin), level_sets_(level_sets(shape_)) {}

    /// The candidate sets of levels for a shape (bit k: level k), every level first.
    static std::vector<std::uint32_t> level_sets(const coll_shape& s) {
        const std::uint32_t all = s.all_levels();
        if (s.level_names.size() > 4) return {all, 0};
        std::vector<std::uint32_t> sets;
        for (std::uint32_t m = all + 1; m-- > 0;) sets.push_back(m);
        return sets;
    }

    const coll_shape& shape() const { return shape_; }

    /// What to run now.
    struct pick {
        coll_method method = coll_method::library;
        std::uint32_t levels = ~std::uint32_t{0};  ///< for hierarchical: the levels to run over
        bool timed = false;  ///< measure the call and pass its time to record()
        bool fresh = false;  ///< a decision was made by this call (log it)
    };

    /// The method for a call of `op` moving `bytes` (the operation's whole vector). `forced`
    /// overrides the model (SHUNT_COLL); a forced choice needs no agreement. `live` false: decide
    /// from the model without measuring (see the class comment).
    pick choose(const cost_model& model, coll_op op, std::int64_t bytes, std::optional<coll_method> forced,
                const agree_fn& agree, bool live = true) {
        const key k{op, size_class(bytes), live};
        std::lock_guard lock(mutex_);
        auto [it, fresh] = entries_.try_emplace(k);
        entry& e = it->second;
        if (fresh) {
            e.d.op = op;
            e.d.size_class = k.size_class;
            e.d.bytes = bytes;
            e.d.live = live;
            e.d.measured.fill(std::numeric_limits<double>::quiet_NaN());
            std::vector<double> v = model_facts(model, op, static_cast<double>(bytes));
            if (!forced || level_sets_.size() > 1) agree(v.data(), static_cast<int>(v.size()));
            e.decided = decide_from(v, forced, live, e.d);
            e.latency = v[2 + 2 * level_sets_.size()] != 0;
        }
        pick p;
        p.levels = e.d.levels;
        if (e.decided) {
            settle(k, e.d.method, e.d.levels);
            ++e.d.taken;
            p.method = e.d.method;
            p.fresh = fresh;
            return p;
        }
        // Measuring: library, shunt, library, shunt, ...
        p.method = e.runs[0] <= e.runs[1] ? coll_method::library : coll_method::hierarchical;
        p.timed = true;
        return p;
    }

    /// What this rank's model has and predicts for `op` at `bytes`, in a vector of
    /// model_facts_length() to be agreed (element-wise maximum over the ranks) before any decision
    /// rests on it, so a table counts only where every rank has it: whether it lacks a measurement
    /// of both methods at this size, whether it lacks each set of levels' table (the full set's is
    /// the full schedule's), the library's prediction, each set's prediction, and whether the
    /// analytic library prediction is mostly latency (see the class comment).
    std::vector<double> model_facts(const cost_model& model, coll_op op, double b) const {
        const std::size_t n = level_sets_.size();
        std::vector<double> v(model_facts_length());
        v[0] = measured_by_model(model, op, b) ? 0 : 1;
        for (std::size_t i = 0; i < n; ++i) {
            v[1 + i] =
                model.find(table_names::collective(op, coll_method::hierarchical, shape_, level_sets_[i])) ? 0 : 1;
            v[2 + n + i] = predict(model, op, coll_method::hierarchical, b, level_sets_[i]);
        }
        v[1 + n] = predict(model, op, coll_method::library, b);
        const analytic_params& ap = model.params();
        const double lib_all = analytic_collective(ap, op, coll_method::library, shape_, b);
        const double lib_latency = analytic_collective(ap, op, coll_method::library, shape_, 0);
        v[2 + 2 * n] = lib_all > 0 && lib_latency > (1 - bandwidth_share) * lib_all ? 1 : 0;
        return v;
    }
    std::size_t model_facts_length() const { return 2 * level_sets_.size() + 3; }

    /// The decision from agreed model_facts(): the set of levels shunt's schedule would run over
    /// and the predictions into `d`; the method where the model (or `forced`) decides, returning
    /// true, or false where it must be measured (a `live` call without every rank's measurement,
    /// on a tuner that measures).
    bool decide_from(std::span<const double> v, std::optional<coll_method> forced, bool live, coll_decision& d) const {
        const std::size_t n = level_sets_.size();
        const bool from_model = !forced && (trials_ == 0 || !live || v[0] == 0);
        // Sets with a table everywhere compete among themselves (measured against measured)
        // when the full schedule has one everywhere, else every set on its prediction.
        const bool tables = v[1] == 0;  // level_sets_[0] is every level
        std::size_t best = n;
        d.level_predictions.clear();
        for (std::size_t i = 0; i < n; ++i) {
            if (tables && v[1 + i] != 0) continue;
            d.level_predictions.emplace_back(level_sets_[i], v[2 + n + i]);
            if (best == n || v[2 + n + i] < v[2 + n + best]) best = i;
        }
        d.levels = level_sets_[best];
        d.predicted = {v[1 + n], v[2 + n + best]};
        if (forced) {
            d.method = *forced;
            d.forced = true;
            return true;
        }
        if (!from_model) return false;
        d.latency_bound = !live && v[0] != 0 && v[2 + 2 * n] != 0;
        d.method = d.latency_bound ? coll_method::library : better(d.predicted);
        return true;
    }

    /// The time of a call choose() asked to measure. Returns true when this completed the
    /// measurements and made the decision (the caller logs it). Collective when it decides.
    bool record(coll_op op, std::int64_t bytes, coll_method m, double seconds, const agree_fn& agree) {
        std::lock_guard lock(mutex_);
        auto it = entries_.find(key{op, size_class(bytes), true});
        if (it == entries_.end() || it->second.decided) return false;
        entry& e = it->second;
        const auto i = static_cast<std::size_t>(m);
        ++e.runs[i];
        e.best[i] = std::min(e.best[i], seconds);
        // A latency-bound call takes a few microseconds: one preemption or cold cache outweighs
        // the difference between the methods, so it is measured longer and shunt must win clearly.
        const int need = e.latency ? std::max(trials_, latency_trials) : trials_;
        if (e.runs[0] < need || e.runs[1] < need) return false;
        std::array<double, coll_method_count> agreed = e.best;
        agree(agreed.data(), static_cast<int>(agreed.size()));
        e.d.measured = agreed;
        e.d.method = better(agreed, e.latency ? std::max(margin_, latency_margin) : margin_);
        if (e.latency) latency_measured_[slot(op, size_class(bytes), true)].store(1, std::memory_order_relaxed);
        e.decided = true;
        settle(key{op, size_class(bytes), true}, e.d.method, e.d.levels);
        return true;
    }

    /// The decision for (op, bytes, live) once it is made, without locking: the hot path of
    /// every later call is one atomic load (and count_settled(), one relaxed increment).
    std::optional<coll_method> settled(coll_op op, std::int64_t bytes, bool live = true) const noexcept {
        const std::uint8_t v = settled_[slot(op, size_class(bytes), live)].load(std::memory_order_acquire);
        if (v == 0) return std::nullopt;
        return static_cast<coll_method>(v - 1);
    }
    /// The levels of the settled() decision's schedule (read after settled() answered).
    std::uint32_t settled_levels(coll_op op, std::int64_t bytes, bool live = true) const noexcept {
        return settled_levels_[slot(op, size_class(bytes), live)].load(std::memory_order_relaxed);
    }
    /// True when the settled() decision of (op, bytes, live) was measured on latency-bound calls
    /// (read after settled() answered): what a blocking schedule gained there says nothing of a
    /// nonblocking one, which pays for its fiber.
    bool measured_latency_bound(coll_op op, std::int64_t bytes, bool live = true) const noexcept {
        return latency_measured_[slot(op, size_class(bytes), live)].load(std::memory_order_relaxed) != 0;
    }
    /// Counts a call that took its settled() decision without choose().
    void count_settled(coll_op op, std::int64_t bytes, bool live = true) noexcept {
        fast_taken_[slot(op, size_class(bytes), live)].fetch_add(1, std::memory_order_relaxed);
    }

    /// True when no call has been planned yet.
    bool empty() const {
        std::lock_guard lock(mutex_);
        return entries_.empty();
    }

    /// Calls f(const coll_decision&) for every decision made so far (measuring ones excluded).
    template <class F>
    void for_each(F&& f) const {
        std::lock_guard lock(mutex_);
        for (const auto& [k, e] : entries_) {
            if (!e.decided) continue;
            coll_decision d = e.d;
            d.taken += fast_taken_[slot(k.op, k.size_class, k.live)].load(std::memory_order_relaxed);
            f(d);
        }
    }

    /// The model's prediction for one method (shunt's over the levels of `levels`): its
    /// measured table for this shape when there is one, else the analytic model.
    double predict(const cost_model& model, coll_op op, coll_method m, double bytes,
                   std::uint32_t levels = ~std::uint32_t{0}) const {
        const std::string name = table_names::collective(op, m, shape_, levels);
        if (const time_table* t = model.find(name)) return t->predict(bytes);
        return analytic_collective(model.params(), op, m, shape_, bytes, levels);
    }

    /// The sets of levels that compete for `op`: those with a measured table when the full
    /// schedule has one (measured against measured), else every candidate (all analytic).
    std::vector<std::uint32_t> candidate_sets(const cost_model& model, coll_op op) const {
        if (model.find(table_names::collective(op, coll_method::hierarchical, shape_)) == nullptr) return level_sets_;
        std::vector<std::uint32_t> sets;
        for (const std::uint32_t set : level_sets_)
            if (model.find(table_names::collective(op, coll_method::hierarchical, shape_, set)) != nullptr)
                sets.push_back(set);
        return sets;
    }

    /// The share of the library's analytic time that data volume must make up for the analytic
    /// model alone to choose shunt's schedule over it.
    static constexpr double bandwidth_share = 0.9;

    static int size_class(std::int64_t bytes) {
        return bytes <= 0 ? 0 : static_cast<int>(std::bit_width(static_cast<std::uint64_t>(bytes)));
    }

private:
    struct key {
        coll_op op;
        int size_class;
        bool live;
        bool operator<(const key& o) const {
            return std::tuple(op, size_class, live) < std::tuple(o.op, o.size_class, o.live);
        }
    };
    struct entry {
        coll_decision d;
        bool decided = false;
        bool latency = false;  ///< the analytic library time is mostly latency: measured longer, stricter margin
        std::array<int, coll_method_count> runs{};
        std::array<double, coll_method_count> best{std::numeric_limits<double>::infinity(),
                                                   std::numeric_limits<double>::infinity()};
    };

    bool measured_by_model(const cost_model& model, coll_op op, double bytes) const {
        for (std::size_t m = 0; m < coll_method_count; ++m) {
            const time_table* t = model.find(table_names::collective(op, static_cast<coll_method>(m), shape_));
            if (t == nullptr || !t->covers(bytes)) return false;
        }
        return true;
    }
    static constexpr std::size_t size_classes = 65;
    static std::size_t slot(coll_op op, int size_class, bool live) {
        return (static_cast<std::size_t>(op) * size_classes + static_cast<std::size_t>(size_class)) * 2 +
               (live ? 1 : 0);
    }
    void settle(const key& k, coll_method m, std::uint32_t levels) {
        settled_levels_[slot(k.op, k.size_class, k.live)].store(levels, std::memory_order_relaxed);
        settled_[slot(k.op, k.size_class, k.live)].store(static_cast<std::uint8_t>(static_cast<int>(m) + 1),
                                                         std::memory_order_release);
    }

    coll_method better(const std::array<double, coll_method_count>& t) const { return better(t, margin_); }
    static coll_method better(const std::array<double, coll_method_count>& t, double margin) {
        const double lib = t[static_cast<std::size_t>(coll_method::library)];
        const double hier = t[static_cast<std::size_t>(coll_method::hierarchical)];
        return hier < lib * (1 - margin) ? coll_method::hierarchical : coll_method::library;
    }

    coll_shape shape_;
    int trials_;
    double margin_;
    std::vector<std::uint32_t> level_sets_;
    mutable std::mutex mutex_;
    std::map<key, entry> entries_;
    /// Per (op, size class, live): 0 while undecided, else the method + 1; and the calls that
    /// took it through settled().
    std::array<std::atomic<std::uint8_t>, coll_op_names.size() * size_classes * 2> settled_{};
    std::array<std::atomic<std::uint64_t>, coll_op_names.size() * size_classes * 2> fast_taken_{};
    std::array<std::atomic<std::uint32_t>, coll_op_names.size() * size_classes * 2> settled_levels_{};
    std::array<std::atomic<std::uint8_t>, coll_op_names.size() * size_classes * 2> latency_measured_{};
};

/// The decisions of one communicator's nonblocking and persistent collectives (MPI_Iallreduce,
/// MPI_Allreduce_init, ...).
///
/// Such a call must not block, so it cannot agree with the other ranks when it is made (they may
/// be inside other calls, waiting for this one), nor be measured (its time is mostly the
/// application's overlap); yet every rank must decide alike. So it takes, in this order: the
/// communicator's settled decision for the operation and size class (collective_tuner::settled,
/// made by blocking calls at the same point on every rank); else this plan's, which the model
/// made for every operation and size class once, when the communicator's collectives were set up
/// (a blocking point every rank takes part in): the facts of collective_tuner::model_facts at the
/// middle of each size class, agreed in one call, decided as for a call that may not be measured
/// (measured tables where every rank has them, else the analytic model where data volume
/// dominates, else the library). `forced` (SHUNT_COLL=shunt) takes shunt's schedule over the
/// plan's best levels. Immutable after construction: thread-safe.
class nonblocking_plan {
public:
    /// Size classes planned (bytes below 2^max_class); larger calls take the last class's decision.
    static constexpr int max_class = 42;

    /// Collective over the tuner's communicator: `agree` is called once, on every rank.
    nonblocking_plan(const collective_tuner& tuner, const cost_model& model, const collective_tuner::agree_fn& agree) {
        const std::size_t per = tuner.model_facts_length();
        std::vector<double> v;
        v.reserve(coll_op_names.size() * max_class * per);
        for (std::size_t op = 0; op < coll_op_names.size(); ++op)
            for (int c = 1; c <= max_class; ++c) {
                const auto f = tuner.model_facts(model, static_cast<coll_op>(op), middle(c));
                v.insert(v.end(), f.begin(), f.end());
            }
        agree(v.data(), static_cast<int>(v.size()));
        for (std::size_t op = 0; op < coll_op_names.size(); ++op)
            for (int c = 1; c <= max_class; ++c) {
                const std::size_t at = (op * max_class + static_cast<std::size_t>(c - 1)) * per;
                coll_decision d;
                tuner.decide_from(std::span<const double>(v).subspan(at, per), std::nullopt, false, d);
                plans_[op * max_class + static_cast<std::size_t>(c - 1)] = {d.method, d.levels};
            }
    }

    /// What a nonblocking call runs, and whether it came from a blocking call's settled decision.
    struct pick {
        coll_method method = coll_method::library;
        std::uint32_t levels = ~std::uint32_t{0};
        bool settled = false;
    };

    /// The decision for a nonblocking call of `op` moving `bytes` (see the class comment); never
    /// communicates. `live`: the key of the blocking calls' decisions (exact reductions).
    pick choose(const collective_tuner& tuner, coll_op op, std::int64_t bytes, bool live,
                std::optional<coll_method> forced) const noexcept {
        const entry& e =
            plans_[static_cast<std::size_t>(op) * max_class +
                   static_cast<std::size_t>(std::clamp(collective_tuner::size_class(bytes), 1, max_class) - 1)];
        if (forced) return {*forced, e.levels, false};
        if (const auto m = tuner.settled(op, bytes, live)) {
            // Shunt's blocking schedule measured faster on latency-bound calls: its nonblocking
            // form pays for a fiber and progress on top, so the plan's decision stands.
            if (*m != coll_method::hierarchical || !tuner.measured_latency_bound(op, bytes, live))
                return {*m, tuner.settled_levels(op, bytes, live), true};
        }
        return {e.method, e.levels, false};
    }

    /// The bytes a size class is planned at: the middle of [2^(c-1), 2^c).
    static double middle(int size_class) { return 0.75 * std::ldexp(1.0, size_class); }

private:
    struct entry {
        coll_method method = coll_method::library;
        std::uint32_t levels = ~std::uint32_t{0};
    };
    std::array<entry, coll_op_names.size() * max_class> plans_{};
};

/// The decision of MPI_Alltoallw or MPI_Neighbor_alltoallw on one communicator: shunt's fused
/// packing (every block packed in one pass, the bytes moved by the library's own call with byte
/// types, every block unpacked in one pass) or the library's own call.
///
/// Every rank must take the same path: one rank passing its typed blocks while another passes
/// bytes breaks MPI's rule of matching type signatures. What a rank knows alone (its datatypes
/// and buffers) differs between ranks, and the byte counts differ per rank and per peer, so
/// there is no size class to key on: one decision per communicator and operation, as for
/// MPI_Alltoallv. The first call agrees (the caller's element-wise maximum over the ranks) on
/// whether any rank has work for shunt's packing (a block with gaps, or a device buffer), any
/// rank a datatype shunt does not know, and any rank a device buffer. No work, or an unknown
/// type: the library. A device buffer: shunt, unmeasured (an MPI that is not CUDA-aware cannot
/// take it). Else the next calls run both paths on the same data, timed (one warm-up, then
/// `trials`); the best time of each is agreed (the slowest rank's) and shunt's path is kept only
/// when faster by `margin`. Calls on a communicator come in the same order on every rank, so
/// every rank measures the same calls. Not thread-safe beyond state(): collectives on one
/// communicator do not run concurrently.
class fused_tuner {
public:
    enum class state : std::uint8_t { undecided, measuring, library, shunt };
    static constexpr int trials = 3;  ///< calls timed on both paths before deciding, after one warm-up
    static constexpr double margin = measured_win_margin;  ///< how much faster shunt's path must be

    /// What a rank knows alone, to be agreed with an element-wise maximum: work, unknown, device.
    using facts = std::array<int, 3>;
    static facts local(bool gaps, bool unknown, bool device) {
        return {gaps || device ? 1 : 0, unknown ? 1 : 0, device ? 1 : 0};
    }

    state current() const noexcept { return state_.load(std::memory_order_acquire); }

    /// SHUNT_COLL=shunt: shunt's path without agreeing.
    void force_shunt() noexcept { state_.store(state::shunt, std::memory_order_release); }

    /// The first call's decision from the agreed facts; returns why (a literal) when decided,
    /// nullptr when measuring starts.
    const char* first(const facts& agreed) noexcept {
        const bool work = agreed[0] != 0, unknown = agreed[1] != 0, device = agreed[2] != 0;
        const state s = unknown || !work ? state::library : device ? state::shunt : state::measuring;
        state_.store(s, std::memory_order_release);
        if (s == state::measuring) return nullptr;
        return unknown  ? "a datatype shunt does not know on some rank"
               : device ? "device buffers on some rank"
                        : "contiguous host data on every rank";
    }

    /// While measuring: whether this call runs shunt's path first (the order alternates).
    bool shunt_first() const noexcept { return runs_ % 2 == 1; }

    /// One measuring call's times (library, shunt); true when the trials are complete and the
    /// caller should agree on best() and call decide().
    bool record(const double took[2]) noexcept {
        if (runs_++ > 0) {
            best_[0] = std::min(best_[0], took[0]);
            best_[1] = std::min(best_[1], took[1]);
        }
        return runs_ > trials;
    }
    const std::array<double, 2>& best() const noexcept { return best_; }

    /// The decision from the agreed best times (library, shunt).
    state decide(const double agreed[2]) noexcept {
        const state s = agreed[1] < agreed[0] * (1 - margin) ? state::shunt : state::library;
        state_.store(s, std::memory_order_release);
        return s;
    }

private:
    std::atomic<state> state_{state::undecided};
    int runs_ = 0;  ///< calls run on both paths, the warm-up included
    std::array<double, 2> best_{std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
};

}  // namespace shunt
