// shunt/plan/planner.hpp: the one planner the interposer and the header library both ask: for an
// operation it returns the chosen method and the predicted cost of every alternative, cached.
#pragma once

#include <shunt/datatype/type_info.hpp>
#include <shunt/model/model.hpp>

#include <array>
#include <atomic>
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <shared_mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace shunt {

/// The operations the planner decides for.
enum class plan_op : std::uint8_t { pack, unpack };

inline constexpr std::string_view to_string(plan_op op) { return op == plan_op::pack ? "pack" : "unpack"; }

/// One alternative and its predicted seconds.
struct plan_alternative {
    std::string_view method;
    double predicted_s = 0;
};

/// A decision: the alternatives considered with their predictions, the index of the chosen one,
/// whether a user override forced it, and (in for_each) how often it was taken.
struct plan_decision {
    plan_op op = plan_op::pack;
    std::int64_t bytes = 0;
    std::int64_t blocks = 0;
    std::array<plan_alternative, 4> alternatives{};
    std::uint8_t count = 0;
    std::uint8_t chosen = 0;
    bool forced = false;
    bool measuring = false;  ///< the planner is timing this key's calls (planner::pack)
    bool measured = false;   ///< chosen from measured_s, this key's own best times
    std::array<double, 2> measured_s{};  ///< best seconds of alternatives 0 and 1 when measured
    std::uint64_t taken = 0;

    std::string_view method() const { return alternatives[chosen].method; }
};

/// Overrides a user can impose (from the configuration; the planner never reads the environment).
struct plan_overrides {
    /// "auto", or a method name ("library", "host") that every pack decision must take.
    std::string_view pack = "auto";
};

/// Thread-safe, caching planner over a cost model. Decisions are cached per (op, bytes, blocks,
/// span): everything a pack prediction depends on, plus the bytes the typed side spans, so a
/// warm lookup is one hash probe under a shared lock. When the model's online corrections move
/// (its generation changes), cached decisions are recomputed on their next use.
///
/// Measuring a key (callers that pass a `measure_call`, as MPI_Pack and MPI_Unpack do): the
/// model knows block lengths, not where the blocks lie, and two layouts of the same blocks can
/// favour different packers (8-byte blocks 16 bytes apart pack faster by shunt's packer, the
/// same blocks 512 bytes apart ran as fast by Open MPI's here), so a new key whose predicted
/// time is measurable and affordable (between `measure_floor_s` and `measure_ceiling_s`) is
/// timed on its own calls, each call running one method (both write the same bytes). The first
/// two calls warm up, untimed: the model's choice, then the other method. The next
/// 2 x `measure_trials` are timed by the caller and passed to record(), in the order other,
/// choice, choice, other, and again. Consecutive calls pair up, and each pair gives the ratio of
/// shunt's time to the library's: the first calls of a layout run slower and speed up call by
/// call, or drop in a step (here from 1.0-1.6 ms to 0.7 ms for both packers between the third
/// and fourth pair, unpacking 16-byte blocks 512 bytes apart), and a ratio within a pair is
/// free of both where the best time of each method is not. Shunt's packer stays only where the
/// median ratio is below 1 - `measure_margin`, so noise favours the library. Where the first
/// pair shows the model's choice at least `measure_clear` times faster than the other method,
/// it stays at once: noise on those two timings could only confirm the choice the model had
/// already made. The verdict then holds for the key (model corrections recompute the
/// predictions, not the verdict).
class planner {
public:
    explicit planner(std::shared_ptr<const cost_model> model, plan_overrides o = {})
        : model_(std::move(model)), overrides_(o) {}

    static constexpr int measure_trials = 4;
    static constexpr double measure_margin = 0.03;
    static constexpr double measure_clear = 2.0;
    static constexpr double measure_floor_s = 1e-6;
    static constexpr double measure_ceiling_s = 10e-3;

    const cost_model& model() const { return *model_; }

    /// A pack key.
    struct pack_key {
        plan_op op = plan_op::pack;
        std::int64_t bytes = 0, blocks = 0, span = 0;
        bool operator==(const pack_key&) const = default;
    };
    static pack_key key_of(const type_info& t, std::int64_t count, bool unpack) {
        return {unpack ? plan_op::unpack : plan_op::pack, t.size * count, pack_blocks(t, count), pack_span(t, count)};
    }

    /// What a measuring key asks of one call: run alternative `method` and, when `timed`, pass
    /// its seconds to record(). `measuring` false: the decision is settled and may be cached.
    struct measure_call {
        bool measuring = false, timed = false;
        std::uint8_t method = 0;
        pack_key key;
    };

    /// The decision for (un)packing `count` elements of `t` on host memory; `is_new` tells the
    /// caller (for SHUNT_LOG=decide) that this key was decided for the first time.
    /// `taken`, when given, receives the decision's use counter (stable for the planner's life:
    /// entries are never erased), so that a caller caching the decision can count its uses.
    /// `measure`, when given, takes part in measuring the key (see the class comment).
    plan_decision pack(const type_info& t, std::int64_t count, bool unpack, bool* is_new = nullptr,
                       std::atomic<std::uint64_t>** taken = nullptr, measure_call* measure = nullptr) {
        const pack_key k = key_of(t, count, unpack);
        const std::uint64_t gen = model_->generation();
        if (measure) *measure = {};
        {
            std::shared_lock lock(mutex_);
            auto it = cache_.find(k);
            if (it != cache_.end() && it->second.generation == gen && !(measure && it->second.d.measuring)) {
                if (is_new) *is_new = false;
                it->second.taken->fetch_add(1, std::memory_order_relaxed);
                if (taken) *taken = it->second.taken.get();
                return it->second.d;
            }
        }
        std::unique_lock lock(mutex_);
        auto [it, inserted] = cache_.try_emplace(k);
        entry& e = it->second;
        if (inserted) e.taken = std::make_unique<std::atomic<std::uint64_t>>(0);
        if (inserted || e.generation != gen) {
            const plan_decision fresh = decide_pack(*model_, k.op, k.bytes, k.blocks, overrides_);
            const bool measuring = inserted ? worth_measuring(fresh) : e.d.measuring;
            const bool measured = e.d.measured;
            const std::array<double, 2> measured_s = e.d.measured_s;
            const std::uint8_t chosen = e.d.chosen;
            e.d = fresh;
            e.d.measuring = measuring;
            if (measured) e.d.measured = true, e.d.measured_s = measured_s, e.d.chosen = chosen;
            e.generation = gen;
        }
        e.taken->fetch_add(1, std::memory_order_relaxed);
        if (is_new) *is_new = inserted;
        if (taken) *taken = e.taken.get();
        if (measure && e.d.measuring) {
            measure->measuring = true;
            measure->key = k;
            const std::uint8_t other = e.d.chosen == 0 ? 1 : 0;
            const int n = e.issued - 2;  // calls before this one, less the two warm-ups
            if (e.issued < std::numeric_limits<int>::max()) ++e.issued;
            measure->timed = n >= 0;
            measure->method = n == -1 || n % 4 == 0 || n % 4 == 3 ? other : e.d.chosen;
        }
        return e.d;
    }

    /// The seconds a call pack() asked to time took. Returns true when this settled the key
    /// (the caller logs it, with decision()).
    bool record(const measure_call& m, double seconds) {
        if (!m.timed || m.method > 1 || !(seconds >= 0)) return false;
        std::unique_lock lock(mutex_);
        auto it = cache_.find(m.key);
        if (it == cache_.end() || !it->second.d.measuring) return false;
        entry& e = it->second;
        if (e.recorded >= e.times.size()) return false;
        e.times[e.recorded] = {seconds, m.method};
        ++e.recorded;
        // Consecutive calls pair up (1st and 2nd, 3rd and 4th, ...): a pair of different methods
        // gives one ratio, shunt's time over the library's, free of a slow trend and of a step
        // between pairs (here the first calls of a layout sometimes ran 1.5x slower, then both
        // methods dropped together).
        std::array<double, measure_trials> ratios{};
        std::size_t n = 0;
        for (std::size_t i = 0; i + 1 < e.recorded; i += 2) {
            const timed_run& a = e.times[i];
            const timed_run& b = e.times[i + 1];
            if (a.method == b.method || !(a.seconds > 0) || !(b.seconds > 0)) continue;
            ratios[n++] = a.method == 1 ? a.seconds / b.seconds : b.seconds / a.seconds;
        }
        const std::uint8_t model = e.d.chosen;
        // At once where the first pair shows the model's choice at least measure_clear times faster.
        const bool clear = n == 1 && e.recorded == 2 &&
                           (model == 1 ? ratios[0] * measure_clear <= 1 : ratios[0] >= measure_clear);
        if (!clear && e.recorded < e.times.size()) return false;
        std::array<std::vector<double>, 2> per;
        for (std::size_t i = 0; i < e.recorded; ++i) per[e.times[i].method].push_back(e.times[i].seconds);
        for (std::size_t k = 0; k < 2; ++k) e.d.measured_s[k] = per[k].empty() ? 0 : median_of(per[k]);
        // Shunt's packer where the median ratio beats the library by the margin (the medians of
        // each method's times where no pair had both).
        const double ratio = n > 0 ? median_of({ratios.begin(), ratios.begin() + static_cast<std::ptrdiff_t>(n)})
                             : e.d.measured_s[0] > 0 ? e.d.measured_s[1] / e.d.measured_s[0]
                                                     : 1;
        e.d.measuring = false;
        e.d.measured = true;
        e.d.chosen = e.d.measured_s[1] > 0 && ratio < 1 - measure_margin ? 1 : 0;
        return true;
    }

    /// The cached decision of a key (taken not filled in); a default decision when none.
    plan_decision decision(const pack_key& k) const {
        std::shared_lock lock(mutex_);
        auto it = cache_.find(k);
        return it == cache_.end() ? plan_decision{} : it->second.d;
    }

    /// Calls f(decision) for every cached decision, with `taken` filled in (for SHUNT_REPORT
    /// and shunt-info).
    void for_each(const std::function<void(const plan_decision&)>& f) const {
        std::shared_lock lock(mutex_);
        for (const auto& [k, e] : cache_) {
            plan_decision d = e.d;
            d.taken = e.taken->load(std::memory_order_relaxed);
            f(d);
        }
    }

    /// The uncached decision for moving `bytes` in `blocks` contiguous blocks: the library and
    /// shunt's host packer predicted by `m`, the cheaper chosen unless `o` forces a method.
    static plan_decision decide_pack(const cost_model& m, plan_op op, std::int64_t bytes, std::int64_t blocks,
                                     const plan_overrides& o) {
        plan_decision d;
        d.op = op;
        d.bytes = bytes;
        d.blocks = blocks;
        const bool unpack = op == plan_op::unpack;
        const double b = static_cast<double>(bytes);
        const double block_len = blocks > 0 ? b / static_cast<double>(blocks) : b;
        d.alternatives[0] = {"library", m.predict_pack(true, unpack, block_len, b)};
        d.alternatives[1] = {"host", m.predict_pack(false, unpack, block_len, b)};
        d.count = 2;
        d.chosen = d.alternatives[1].predicted_s <= d.alternatives[0].predicted_s ? 1 : 0;
        for (std::uint8_t i = 0; i < d.count; ++i)
            if (o.pack == d.alternatives[i].method) d.chosen = i, d.forced = true;
        return d;
    }

    /// Whether a new decision is worth measuring: not forced, and the predicted times measurable
    /// (the faster at least measure_floor_s) and affordable (the slower at most measure_ceiling_s).
    static bool worth_measuring(const plan_decision& d) {
        if (d.forced || d.count != 2) return false;
        const double lo = std::min(d.alternatives[0].predicted_s, d.alternatives[1].predicted_s);
        const double hi = std::max(d.alternatives[0].predicted_s, d.alternatives[1].predicted_s);
        return lo >= measure_floor_s && hi <= measure_ceiling_s;
    }

    /// Bytes the typed side of `count` elements of `t` spans (extent per element, the true
    /// extent for the last), for keying: wraps rather than overflows on absurd sizes.
    static std::int64_t pack_span(const type_info& t, std::int64_t count) {
        if (count <= 0) return 0;
        const std::uint64_t n = static_cast<std::uint64_t>(count - 1);
        return static_cast<std::int64_t>(n * static_cast<std::uint64_t>(t.extent) + static_cast<std::uint64_t>(t.true_extent));
    }

    /// Contiguous blocks moved when packing `count` elements of `t` (a dense type is one block).
    static std::int64_t pack_blocks(const type_info& t, std::int64_t count) {
        if (t.form.empty()) return 0;
        if (t.form.is_contiguous() && t.form.blocks[0].length == t.extent) return 1;
        std::int64_t b = static_cast<std::int64_t>(t.form.blocks.size()) * count;
        for (const auto& d : t.form.dims) b *= d.count;
        return b;
    }

private:
    struct key_hash {
        std::size_t operator()(const pack_key& k) const noexcept {
            std::uint64_t h = static_cast<std::uint64_t>(k.bytes) * 0x9E3779B97F4A7C15ull;
            h ^= static_cast<std::uint64_t>(k.blocks) + 0x7F4A7C159E3779B9ull + (h << 6) + (h >> 2);
            h ^= static_cast<std::uint64_t>(k.span) + 0x7F4A7C159E3779B9ull + (h << 6) + (h >> 2);
            return static_cast<std::size_t>(h ^ static_cast<std::uint64_t>(k.op));
        }
    };
    struct timed_run {
        double seconds = 0;
        std::uint8_t method = 0;
    };
    struct entry {
        plan_decision d;
        std::uint64_t generation = 0;
        std::unique_ptr<std::atomic<std::uint64_t>> taken;  // counted under the shared lock
        // Measuring (d.measuring): calls handed out, and the timed calls recorded, in order.
        int issued = 0;
        std::array<timed_run, 2 * measure_trials> times{};
        std::size_t recorded = 0;
    };
    static double median_of(std::vector<double> v) {
        std::sort(v.begin(), v.end());
        const std::size_t h = v.size() / 2;
        return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
    }

    std::shared_ptr<const cost_model> model_;
    plan_overrides overrides_;
    mutable std::shared_mutex mutex_;
    std::unordered_map<pack_key, entry, key_hash> cache_;
};

}  // namespace shunt
