// interpose/gate.hpp: the fast paths' gate: one word a kept call compares with the word it was kept under.
#pragma once

#include <atomic>
#include <cstdint>

namespace shunt::detail {

class runtime;

/// The gate's cache line: the runtime's address (runtime::built()) and the word.
struct alignas(64) fast_gate_line {
    std::atomic<runtime*> built{nullptr};
    std::atomic<std::uint64_t> word{1};  ///< fast_gate::not_running
};

/// What every kept-call check reads first (fast_path.hpp, p2p_kept.hpp, coll_kept.hpp): one word
/// whose low byte holds what stops the shims' fast paths and whose other bytes are an epoch that
/// advances whenever a kept call may have gone stale (a datatype committed, duplicated or freed,
/// a communicator's context deleted). A kept call records the word it was kept under (kept())
/// and repeats while the word is the same: one load, from the cache line that also holds the
/// runtime's address (runtime::built()), instead of one load per condition spread over the
/// runtime. Process-wide (one runtime).
class fast_gate {
public:
    enum blocker : std::uint64_t {
        not_running = 1,  ///< MPI not yet started by the runtime, or finalized
        device = 2,       ///< a device is in use: every buffer must be classified
        requests = 4,     ///< requests of shunt's are alive: the point-to-point shims step aside
        counting = 8,     ///< SHUNT_REPORT: every call is counted
    };
    /// The blockers an executor's own check of a kept call ignores (it counts, and it progresses
    /// shunt's requests itself); the shims' fast paths stop at all of them.
    static constexpr std::uint64_t executor_ignores = requests | counting;
    static_assert(not_running == 1, "fast_gate_line starts blocked");
    /// What kept() returns while a blocker is set: no word takes this value (the blockers use
    /// four bits of the low byte).
    static constexpr std::uint64_t stale = ~std::uint64_t{0};

    /// The word now.
    [[gnu::always_inline]] static std::uint64_t now() noexcept { return line_.word.load(std::memory_order_acquire); }
    /// What a kept call records, read before the lookups it keeps: the word without the blockers
    /// executors ignore, or a value no word takes while a blocker that stops every check is set.
    static std::uint64_t kept() noexcept {
        const std::uint64_t w = for_executor();
        return (w & blocker_bits) != 0 ? stale : w;
    }
    /// The word as an executor's check compares it with a kept call's.
    [[gnu::always_inline]] static std::uint64_t for_executor() noexcept { return now() & ~executor_ignores; }
    /// Whether none of `blockers` is set now.
    [[gnu::always_inline]] static bool none_of(std::uint64_t blockers) noexcept { return (now() & blockers) == 0; }
    /// Whether word `w` has no blocker set.
    [[gnu::always_inline]] static constexpr bool clear(std::uint64_t w) noexcept { return (w & blocker_bits) == 0; }
    /// The word as the collective shims compare it: shunt's point-to-point requests are no
    /// concern of a collective's; every other blocker (counting included) stops them.
    [[gnu::always_inline]] static std::uint64_t for_collective_shims() noexcept { return now() & ~requests; }

    static void block(blocker b) noexcept { line_.word.fetch_or(b, std::memory_order_acq_rel); }
    static void unblock(blocker b) noexcept {
        line_.word.fetch_and(~static_cast<std::uint64_t>(b), std::memory_order_acq_rel);
    }
    /// Every kept call goes stale.
    static void advance() noexcept { line_.word.fetch_add(epoch_unit, std::memory_order_acq_rel); }

private:
    friend class runtime;  // publishes itself here (runtime::built())
    static constexpr std::uint64_t blocker_bits = 0xff, epoch_unit = 0x100;
    static inline fast_gate_line line_;
};

}  // namespace shunt::detail
