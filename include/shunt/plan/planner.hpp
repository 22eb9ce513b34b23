// shunt/plan/planner.hpp: the one planner the interposer and the header library both ask: for an
// operation it returns the chosen method and the predicted cost of every alternative, cached.
#pragma once

#include <shunt/config.hpp>
#include <shunt/datatype/type_info.hpp>
#include <shunt/model/model.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace shunt {

/// The operations the planner decides for.
enum class plan_op : std::uint8_t { pack, unpack };

inline constexpr std::string_view to_string(plan_op op) { return op == plan_op::pack ? "pack" : "unpack"; }

/// Who packs host memory: the MPI library's own packer, or shunt's host packer.
enum class pack_method : std::uint8_t { library, host };

inline constexpr std::string_view to_string(pack_method m) { return m == pack_method::host ? "host" : "library"; }

/// One alternative and its predicted seconds.
struct plan_alternative {
    pack_method method = pack_method::library;
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
    bool measuring = false;  ///< the planner is timing calls of this key's class (planner::pack)
    bool measured = false;  ///< chosen from its class's measured times
    std::array<double, 2> measured_s{};  ///< alternatives 0 and 1 when measured: the class's median
        ///< seconds per byte, times these bytes
    std::uint64_t taken = 0;

    pack_method method() const { return alternatives[chosen].method; }
};

/// Overrides a user can impose (from the configuration; the planner never reads the environment).
struct plan_overrides {
    /// The method every pack decision must take; none: the model (and measurements) decide.
    std::optional<pack_method> pack;
};

/// SHUNT_PACK's choice as the planner's override: `library` and `host` force that method; the
/// others (auto, model and the device methods) leave host decisions to the model.
inline plan_overrides overrides_of(pack_choice c) {
    if (c == pack_choice::library) return {pack_method::library};
    if (c == pack_choice::host) return {pack_method::host};
    return {};
}

/// Thread-safe, caching planner over a cost model. Decisions are cached per (op, bytes, blocks,
/// span): everything a pack prediction depends on, plus the bytes the typed side spans, so a
/// warm lookup is one hash probe under a shared lock. When the model's online corrections move
/// (its generation changes), cached decisions are recomputed on their next use. At most
/// `max_keys` keys are cached; beyond that a new key is decided afresh on every call (from the
/// model and its class's verdict, never measured), so a program that builds millions of
/// layouts does not grow the planner without bound.
///
/// Measuring (callers that pass a `measure_call`, as MPI_Pack and MPI_Unpack do): the model
/// knows block lengths, not where the blocks lie, and two layouts of the same blocks can favour
/// different packers (short blocks close together favour shunt's packer more than the same
/// blocks far apart). So layouts are measured on their own
/// calls, each call running one method (both write the same bytes), by class: the same
/// operation and (rounded) block length, the span over the bytes within 1/8 of an octave, and
/// the bytes within a quarter of an octave. One class serves every count of a type, so
/// a program whose counts change call by call measures each class once, not each count.
/// A class starts measuring on its first key whose predicted time is measurable and affordable
/// (between `measure_floor_s` and `measure_ceiling_s`). The class's first two calls warm up,
/// untimed: the model's choice, then the other method. The next 2 x `measure_trials` are timed
/// by the caller and passed to record(), in the order other, choice, choice, other, and again.
/// Consecutive calls pair up, and each pair gives the ratio of shunt's time per byte to the
/// library's: the first calls of a layout run slower and speed up call by call, or drop in a
/// step for both packers together, and a ratio within a pair is free of both where the best
/// time of each method is not. Shunt's packer stays only where the median ratio is
/// below 1 - `measure_margin`, so noise favours the library. Where the first pair shows the
/// model's choice at least `measure_clear` times faster than the other method, it stays at
/// once: noise on those two timings could only confirm the choice the model had already made.
/// The verdict then holds for every key of the class, those decided before it included (model
/// corrections recompute the predictions, not the verdict).
///
/// A second look: a layout's first calls are not always its steady state (a large unpack's
/// first timed calls can run slower for both packers than its later calls, and the first look
/// then chooses either from run to run). So a first verdict whose median ratio is within
/// `measure_clear` either way holds only until the class has run `recheck_after` more calls of
/// it; then the class is measured again the same way (two warm-ups, then the timed calls, now
/// starting from the first verdict), and that second look alone settles the class. A first look
/// that settled at once, or with a win of `measure_clear` or more, is final: a second look
/// there would mostly run the much slower method four more times.
class planner {
public:
    explicit planner(std::shared_ptr<const cost_model> model, plan_overrides o = {})
        : model_(std::move(model)), overrides_(o) {}

    static constexpr int measure_trials = 4;
    static constexpr double measure_margin = measured_win_margin;
    static constexpr double measure_clear = 2.0;
    static constexpr int recheck_after =
        2 * measure_trials;  ///< calls between a close first verdict and the second look
    static constexpr double measure_floor_s = 1e-6;
    static constexpr double measure_ceiling_s = 10e-3;
    static constexpr std::size_t max_keys = std::size_t{1} << 16;  ///< about 300 bytes each
    static constexpr std::size_t max_classes = std::size_t{1} << 12;  ///< beyond: not measured

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
        std::uint8_t look = 0;  ///< the first (0) or second (1) look of the key's class
        pack_key key;
    };

    /// The class a key is measured in (see the class comment).
    struct class_key {
        plan_op op = plan_op::pack;
        std::int64_t block = 0;
        int density = 0, size = 0;
        bool operator==(const class_key&) const = default;
    };
    static class_key class_of(const pack_key& k) {
        class_key c;
        c.op = k.op;
        c.block = k.blocks > 0 ? std::llround(static_cast<double>(k.bytes) / static_cast<double>(k.blocks)) : k.bytes;
        if (k.bytes > 0 && k.span > k.bytes)
            c.density =
                static_cast<int>(std::floor(std::log2(static_cast<double>(k.span) / static_cast<double>(k.bytes)) * 8));
        if (k.bytes > 0) c.size = static_cast<int>(std::floor(std::log2(static_cast<double>(k.bytes)) * 4));
        return c;
    }

    /// The decision for (un)packing `count` elements of `t` on host memory; `is_new` tells the
    /// caller (for SHUNT_LOG=decide) that this key was decided for the first time.
    /// `taken`, when given, receives the decision's use counter (stable for the planner's life:
    /// entries are never erased; past max_keys, the counter of uncached calls), so that a caller
    /// caching the decision can count its uses.
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
        auto it = cache_.find(k);
        const bool inserted = it == cache_.end();
        if (inserted && cache_.size() >= max_keys) {  // full: decided afresh, not measured
            plan_decision d = decide_pack(*model_, k.op, k.bytes, k.blocks, overrides_);
            if (const layout_class* c = class_for(k, d, false)) adopt(d, *c, k.bytes);
            d.measuring = false;
            uncached_.fetch_add(1, std::memory_order_relaxed);
            if (is_new) *is_new = false;
            if (taken) *taken = &uncached_;
            return d;
        }
        if (inserted) it = cache_.try_emplace(k).first;
        entry& e = it->second;
        if (inserted) {
            e.taken = std::make_unique<std::atomic<std::uint64_t>>(0);
            e.d = decide_pack(*model_, k.op, k.bytes, k.blocks, overrides_);
            e.generation = gen;
            e.cls = class_for(k, e.d, true);
        } else if (e.generation != gen) {
            e.d = decide_pack(*model_, k.op, k.bytes, k.blocks, overrides_);
            e.generation = gen;
        }
        if (e.cls) adopt(e.d, *e.cls, k.bytes);
        e.taken->fetch_add(1, std::memory_order_relaxed);
        if (is_new) *is_new = inserted;
        if (taken) *taken = e.taken.get();
        if (measure && e.d.measuring) {
            layout_class& c = *e.cls;
            measure->measuring = true;
            measure->key = k;
            measure->look = c.look();
            const std::uint8_t other = c.lead == 0 ? 1 : 0;
            // The look's calls before this one, less the two warm-ups (below -2: waiting for the
            // second look, running the first verdict untimed).
            const int n = c.issued - 2;
            if (c.issued < std::numeric_limits<int>::max()) ++c.issued;
            measure->timed = n >= 0;
            measure->method = n == -1 || (n >= 0 && (n % 4 == 0 || n % 4 == 3)) ? other : c.lead;
        }
        return e.d;
    }

    /// The seconds a call pack() asked to time took. Returns true when this settled the key
    /// (the caller logs it, with decision()).
    bool record(const measure_call& m, double seconds) {
        if (!m.timed || m.method > 1 || !(seconds >= 0) || m.key.bytes <= 0) return false;
        std::unique_lock lock(mutex_);
        auto it = cache_.find(m.key);
        if (it == cache_.end() || it->second.cls == nullptr || it->second.cls->settled) return false;
        layout_class& c = *it->second.cls;
        if (m.look != c.look()) return false;  // handed out in the first look, back after its verdict
        if (c.recorded >= c.times.size()) return false;
        c.times[c.recorded] = {seconds / static_cast<double>(m.key.bytes), m.method};
        ++c.recorded;
        // Consecutive calls pair up (1st and 2nd, 3rd and 4th, ...): a pair of different methods
        // gives one ratio, shunt's time per byte over the library's, free of a slow trend and of
        // a step between pairs (a layout's first calls running slower, then both methods
        // dropping together).
        std::array<double, measure_trials> ratios{};
        std::size_t n = 0;
        for (std::size_t i = 0; i + 1 < c.recorded; i += 2) {
            const timed_run& a = c.times[i];
            const timed_run& b = c.times[i + 1];
            if (a.method == b.method || !(a.seconds > 0) || !(b.seconds > 0)) continue;
            ratios[n++] = a.method == 1 ? a.seconds / b.seconds : b.seconds / a.seconds;
        }
        const std::uint8_t lead = c.lead;
        // At once where the first pair shows the look's lead (the model's choice, then the first
        // verdict) at least measure_clear times faster.
        const bool clear =
            n == 1 && c.recorded == 2 && (lead == 1 ? ratios[0] * measure_clear <= 1 : ratios[0] >= measure_clear);
        if (!clear && c.recorded < c.times.size()) return false;
        std::array<std::vector<double>, 2> per;
        for (std::size_t i = 0; i < c.recorded; ++i) per[c.times[i].method].push_back(c.times[i].seconds);
        for (std::size_t k = 0; k < 2; ++k) c.per_byte_s[k] = per[k].empty() ? 0 : median_of(per[k]);
        // Shunt's packer where the median ratio beats the library by the margin (the medians of
        // each method's times where no pair had both).
        const double ratio = n > 0 ? median_of({ratios.begin(), ratios.begin() + static_cast<std::ptrdiff_t>(n)})
                             : c.per_byte_s[0] > 0 ? c.per_byte_s[1] / c.per_byte_s[0]
                                                   : 1;
        c.chosen = c.per_byte_s[1] > 0 && ratio < 1 - measure_margin ? 1 : 0;
        // Final after the second look, after a clear first pair, or after a wide first verdict;
        // else the second look comes recheck_after calls on, led by this verdict.
        c.settled = c.measured || clear || !(ratio * measure_clear > 1 && ratio < measure_clear);
        c.measured = true;
        if (!c.settled) {
            c.lead = c.chosen;
            c.issued = -recheck_after;
            c.recorded = 0;
        }
        adopt(it->second.d, c, m.key.bytes);  // the others of the class on their next call
        return true;
    }

    /// Calls decided afresh because the cache was full (see max_keys).
    std::uint64_t uncached() const { return uncached_.load(std::memory_order_relaxed); }

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
        d.alternatives[0] = {pack_method::library, m.predict_pack(true, unpack, block_len, b)};
        d.alternatives[1] = {pack_method::host, m.predict_pack(false, unpack, block_len, b)};
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
        return static_cast<std::int64_t>(n * static_cast<std::uint64_t>(t.extent) +
                                         static_cast<std::uint64_t>(t.true_extent));
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
    /// The hash of a key's three numbers and its operation: the first scaled, the others folded
    /// in by the boost hash_combine step.
    static std::size_t hash_of(std::uint64_t a, std::uint64_t b, std::uint64_t c, plan_op op) {
        const auto mix = [](std::uint64_t h, std::uint64_t v) {
            return h ^ (v + 0x7F4A7C159E3779B9ull + (h << 6) + (h >> 2));
        };
        return static_cast<std::size_t>(mix(mix(a * 0x9E3779B97F4A7C15ull, b), c) ^ static_cast<std::uint64_t>(op));
    }
    struct key_hash {
        std::size_t operator()(const pack_key& k) const noexcept {
            return hash_of(static_cast<std::uint64_t>(k.bytes), static_cast<std::uint64_t>(k.blocks),
                           static_cast<std::uint64_t>(k.span), k.op);
        }
    };
    struct timed_run {
        double seconds = 0;
        std::uint8_t method = 0;
    };
    struct class_hash {
        std::size_t operator()(const class_key& k) const noexcept {
            return hash_of(static_cast<std::uint64_t>(k.block), static_cast<std::uint32_t>(k.density),
                           static_cast<std::uint32_t>(k.size), k.op);
        }
    };
    /// A class of layouts measured together: the look's lead method, calls handed out in the
    /// look, its timed calls recorded in order (seconds per byte), and the verdict.
    struct layout_class {
        std::uint8_t lead = 0;  // the first look's: the model's choice for the key that started
            // the class; the second look's: the first verdict
        int issued = 0;  // negative while waiting for the second look
        std::array<timed_run, 2 * measure_trials> times{};
        std::size_t recorded = 0;
        bool measured = false;  // a verdict holds (the first look's, or the final one)
        bool settled = false;  // the final verdict: nothing more is measured
        std::uint8_t chosen = 0;
        std::array<double, 2> per_byte_s{};  // each method's median seconds per byte
        /// The look under way until settled: the first (0) before any verdict, then the second (1).
        std::uint8_t look() const { return measured ? 1 : 0; }
    };
    struct entry {
        plan_decision d;
        std::uint64_t generation = 0;
        std::unique_ptr<std::atomic<std::uint64_t>> taken;  // counted under the shared lock
        layout_class* cls = nullptr;  // stable: classes are never erased
    };
    /// The class of key `k` decided as `d` (never for a forced decision): an existing one, or,
    /// where `create` and the key is worth measuring, a new one started from `d`'s choice; null
    /// when none. Called under the unique lock.
    layout_class* class_for(const pack_key& k, const plan_decision& d, bool create) {
        if (d.forced) return nullptr;
        const class_key ck = class_of(k);
        auto c = classes_.find(ck);
        if (c == classes_.end() && create && worth_measuring(d) && classes_.size() < max_classes) {
            c = classes_.try_emplace(ck).first;
            c->second.lead = d.chosen;
        }
        return c == classes_.end() ? nullptr : &c->second;
    }
    /// A decision of a key of class `c`, `bytes` long: measuring until the class is settled (and
    /// so cached by no caller), the verdict once it has one, with each method's measured time
    /// scaled to these bytes.
    static void adopt(plan_decision& d, const layout_class& c, std::int64_t bytes) {
        d.measuring = !c.settled;
        if (!c.measured) return;
        d.measured = true;
        d.chosen = c.chosen;
        for (std::size_t k = 0; k < 2; ++k) d.measured_s[k] = c.per_byte_s[k] * static_cast<double>(bytes);
    }
    static double median_of(std::vector<double> v) {
        std::sort(v.begin(), v.end());
        const std::size_t h = v.size() / 2;
        return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
    }

    std::shared_ptr<const cost_model> model_;
    plan_overrides overrides_;
    mutable std::shared_mutex mutex_;
    std::unordered_map<pack_key, entry, key_hash> cache_;
    std::unordered_map<class_key, layout_class, class_hash> classes_;
    std::atomic<std::uint64_t> uncached_{0};
};

}  // namespace shunt
