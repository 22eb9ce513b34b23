// shunt/plan/p2p.hpp: point-to-point decisions: whether shunt packs a host message itself, and how a device buffer's packed bytes reach the library.
#pragma once

#include <shunt/config.hpp>
#include <shunt/model/device.hpp>
#include <shunt/model/model.hpp>
#include <shunt/plan/planner.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace shunt {

/// Host messages: shunt's host packer plus one copy of the packed bytes (the library then moves
/// them contiguously) against the library's own packing inside the send. The model knows neither
/// the pool block, side table and completion work of a message shunt carries nor its second
/// trip through the cache, and no point-to-point observation corrects it: shunt packs only where
/// it is predicted at least twice as fast with `host_p2p_margin_s` to spare.
inline constexpr double host_p2p_margin_s = 2e-6;

/// The host rule's verdict, with the predictions it rests on (for SHUNT_LOG=decide).
struct host_p2p_choice {
    bool shunt = false;
    double library_s = 0;  ///< the library packing inside its send
    double shunt_s = 0;  ///< shunt's host packer and a copy
};

/// The host rule for a message whose pack decision (library against host packer) is `pd`.
inline host_p2p_choice choose_host_p2p(const cost_model& m, const plan_decision& pd) {
    host_p2p_choice c;
    c.library_s = pd.alternatives[0].predicted_s;
    c.shunt_s = pd.alternatives[1].predicted_s + m.predict("copy.memcpy", static_cast<double>(pd.bytes));
    c.shunt = 2 * c.shunt_s + host_p2p_margin_s < c.library_s;
    return c;
}

/// The fixed rule's switch from one-shot to staged.
inline constexpr std::int64_t one_shot_limit = 64 * 1024;

/// The rule that preceded the model, and what the model's choice keeps on a tie: handed to a
/// CUDA-aware MPI, else one-shot below one_shot_limit and staged above.
inline device_path fixed_device_path(bool cuda_aware, std::int64_t bytes) {
    return cuda_aware ? device_path::device : bytes < one_shot_limit ? device_path::one_shot : device_path::staged;
}

/// How device buffers' packed bytes reach the library, per (packed bytes, blocks, direction):
/// the cheapest path by the cost model (price_device_paths: one-shot, staged, or for a
/// CUDA-aware MPI the device, each priced at the measured block length nearest bytes / blocks),
/// the fixed rule on a tie; SHUNT_PACK=one-shot, staged or device forces one. Decided once per
/// key and model generation, so a warm call is one hash probe. Thread-safe.
class device_planner {
public:
    /// One decision, with what the caller logs when it is new.
    struct choice {
        device_path path = device_path::staged;
        bool is_new = false;  ///< decided (and priced) by this call
        bool fallback = false;  ///< SHUNT_PACK=device without a CUDA-aware MPI: the model's path instead
        std::int64_t blocks = 1;  ///< the blocks it was priced at (at least 1)
        device_path_costs costs;  ///< when is_new
        device_path fixed = device_path::staged;  ///< the fixed rule's path, when is_new
    };

    static constexpr std::size_t max_keys = 4096;  ///< past this, the cache starts again

    /// The path for `bytes` packed bytes in `blocks` contiguous blocks, sent or received.
    choice choose(const cost_model& model, pack_choice forced, bool cuda_aware, std::int64_t bytes,
                  std::int64_t blocks, bool receive) {
        choice c;
        const bool fixed_by_user = forced == pack_choice::one_shot || forced == pack_choice::staged ||
                                   (forced == pack_choice::device && cuda_aware);
        if (!fixed_by_user) {
            const key k{bytes, std::max<std::int64_t>(blocks, 1), receive};
            c.blocks = k.blocks;
            const std::uint64_t generation = model.generation();
            bool cached = false;
            {
                const std::lock_guard lock(mutex_);
                auto it = cache_.find(k);
                if (it != cache_.end() && it->second.generation == generation)
                    c.path = it->second.path, cached = true;
            }
            if (!cached) {
                const double b = static_cast<double>(bytes);
                c.costs = price_device_paths(model, b / static_cast<double>(k.blocks), b, receive, cuda_aware);
                c.fixed = fixed_device_path(cuda_aware, bytes);
                c.path = cheapest_device_path(c.costs, c.fixed, cuda_aware);
                const std::lock_guard lock(mutex_);
                if (cache_.size() >= max_keys) cache_.clear();
                auto [it, inserted] = cache_.try_emplace(k);
                c.is_new = inserted;
                it->second = {generation, c.path};
            }
        }
        switch (forced) {
            case pack_choice::one_shot: c.path = device_path::one_shot; break;
            case pack_choice::staged: c.path = device_path::staged; break;
            case pack_choice::device:
                if (cuda_aware)
                    c.path = device_path::device;
                else
                    c.fallback = true;
                break;
            default: break;
        }
        return c;
    }

private:
    struct key {
        std::int64_t bytes = 0, blocks = 0;
        bool receive = false;
        bool operator==(const key&) const = default;
    };
    struct key_hash {
        std::size_t operator()(const key& k) const noexcept {
            const auto h = static_cast<std::uint64_t>(k.bytes) * 0x9E3779B97F4A7C15ull ^
                           (static_cast<std::uint64_t>(k.blocks) + 0x7F4A7C159E3779B9ull) ^ (k.receive ? 1u : 0u);
            return static_cast<std::size_t>(h);
        }
    };
    struct entry {
        std::uint64_t generation = 0;
        device_path path = device_path::staged;
    };
    std::mutex mutex_;
    std::unordered_map<key, entry, key_hash> cache_;
};

}  // namespace shunt
