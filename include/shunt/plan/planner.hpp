// shunt/plan/planner.hpp: the one planner the interposer and the header library both ask: for an
// operation it returns the chosen method and the predicted cost of every alternative, cached.
#pragma once

#include <shunt/datatype/type_info.hpp>
#include <shunt/model/model.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <string_view>
#include <unordered_map>

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
    std::uint64_t taken = 0;

    std::string_view method() const { return alternatives[chosen].method; }
};

/// Overrides a user can impose (from the configuration; the planner never reads the environment).
struct plan_overrides {
    /// "auto", or a method name ("library", "host") that every pack decision must take.
    std::string_view pack = "auto";
};

/// Thread-safe, caching planner over a cost model. Decisions are cached per (op, bytes,
/// blocks): everything a pack prediction depends on, so a warm lookup is one hash probe under
/// a shared lock. When the model's online corrections move (its generation changes), cached
/// decisions are recomputed on their next use.
class planner {
public:
    explicit planner(std::shared_ptr<const cost_model> model, plan_overrides o = {})
        : model_(std::move(model)), overrides_(o) {}

    const cost_model& model() const { return *model_; }

    /// The decision for (un)packing `count` elements of `t` on host memory; `is_new` tells the
    /// caller (for SHUNT_LOG=decide) that this key was decided for the first time.
    /// `taken`, when given, receives the decision's use counter (stable for the planner's life:
    /// entries are never erased), so that a caller caching the decision can count its uses.
    plan_decision pack(const type_info& t, std::int64_t count, bool unpack, bool* is_new = nullptr,
                       std::atomic<std::uint64_t>** taken = nullptr) {
        const key k{unpack ? plan_op::unpack : plan_op::pack, t.size * count, pack_blocks(t, count)};
        const std::uint64_t gen = model_->generation();
        {
            std::shared_lock lock(mutex_);
            auto it = cache_.find(k);
            if (it != cache_.end() && it->second.generation == gen) {
                if (is_new) *is_new = false;
                it->second.taken->fetch_add(1, std::memory_order_relaxed);
                if (taken) *taken = it->second.taken.get();
                return it->second.d;
            }
        }
        const plan_decision d = decide_pack(*model_, k.op, k.bytes, k.blocks, overrides_);
        std::unique_lock lock(mutex_);
        auto [it, inserted] = cache_.try_emplace(k);
        if (inserted) it->second.taken = std::make_unique<std::atomic<std::uint64_t>>(0);
        it->second.d = d;
        it->second.generation = gen;
        it->second.taken->fetch_add(1, std::memory_order_relaxed);
        if (is_new) *is_new = inserted;
        if (taken) *taken = it->second.taken.get();
        return d;
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

    /// Contiguous blocks moved when packing `count` elements of `t` (a dense type is one block).
    static std::int64_t pack_blocks(const type_info& t, std::int64_t count) {
        if (t.form.empty()) return 0;
        if (t.form.is_contiguous() && t.form.blocks[0].length == t.extent) return 1;
        std::int64_t b = static_cast<std::int64_t>(t.form.blocks.size()) * count;
        for (const auto& d : t.form.dims) b *= d.count;
        return b;
    }

private:
    struct key {
        plan_op op;
        std::int64_t bytes, blocks;
        bool operator==(const key&) const = default;
    };
    struct key_hash {
        std::size_t operator()(const key& k) const noexcept {
            std::uint64_t h = static_cast<std::uint64_t>(k.bytes) * 0x9E3779B97F4A7C15ull;
            h ^= static_cast<std::uint64_t>(k.blocks) + 0x7F4A7C159E3779B9ull + (h << 6) + (h >> 2);
            return static_cast<std::size_t>(h ^ static_cast<std::uint64_t>(k.op));
        }
    };
    struct entry {
        plan_decision d;
        std::uint64_t generation = 0;
        std::unique_ptr<std::atomic<std::uint64_t>> taken;  // counted under the shared lock
    };

    std::shared_ptr<const cost_model> model_;
    plan_overrides overrides_;
    mutable std::shared_mutex mutex_;
    std::unordered_map<key, entry, key_hash> cache_;
};

}  // namespace shunt
