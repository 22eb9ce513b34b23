// interpose/counters.hpp: what the preload library counts (calls, bytes, pass-through reasons), per thread.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <mutex>
#include <new>

#include <pthread.h>

#include <shunt/plan/pass.hpp>

#include "mpi_calls.hpp"

namespace shunt::detail {

/// The intercepted MPI functions, in report order (mpi_calls.hpp).
enum class shim : std::uint8_t {
#define SHUNT_SHIM_ENUM_(name, Name, params, args) name,
    SHUNT_MPI_CALLS(SHUNT_SHIM_ENUM_)
#undef SHUNT_SHIM_ENUM_
};
inline constexpr const char* shim_names[] = {
#define SHUNT_SHIM_NAME_(name, Name, params, args) "MPI_" #Name,
    SHUNT_MPI_CALLS(SHUNT_SHIM_NAME_)
#undef SHUNT_SHIM_NAME_
};
inline constexpr std::size_t shim_count = std::size(shim_names);
/// The first and last collective shims.
inline constexpr shim first_collective = shim::allreduce, last_collective = shim::neighbor_alltoallw;
/// The first and last point-to-point shims (data movers, then completion calls from first_completion).
inline constexpr shim first_p2p = shim::send, first_completion = shim::wait, last_p2p = shim::request_get_status;
static_assert(static_cast<std::size_t>(last_p2p) + 1 == shim_count, "point-to-point calls come last");

/// What a data-moving call does: pack, unpack, a collective, a point-to-point send or receive.
enum class direction : std::uint8_t { pack, unpack, collective, send, recv };
inline constexpr std::size_t direction_count = 5;

/// Positions of the counters in one flat array (the layout the summary reduces over).
struct counter_index {
    static constexpr std::size_t calls(shim s) { return static_cast<std::size_t>(s); }
    static constexpr std::size_t handled(direction d) { return shim_count + static_cast<std::size_t>(d); }
    static constexpr std::size_t bytes(direction d) {
        return shim_count + direction_count + static_cast<std::size_t>(d);
    }
    static constexpr std::size_t passed(direction d, pass_reason why) {
        return shim_count + 2 * direction_count + static_cast<std::size_t>(d) * pass_reason_count +
               static_cast<std::size_t>(why);
    }
    /// Calls shunt handled, per shim from the first collective on: collectives shunt ran,
    /// point-to-point calls shunt packed or unpacked, completion calls that completed at least
    /// one of shunt's requests.
    static constexpr std::size_t shim_handled(shim s) {
        return shim_count + (2 + pass_reason_count) * direction_count + static_cast<std::size_t>(s) -
               static_cast<std::size_t>(first_collective);
    }
    static constexpr std::size_t collective_handled(shim s) { return shim_handled(s); }
    static constexpr std::size_t size = shim_count + (2 + pass_reason_count) * direction_count +
                                        static_cast<std::size_t>(last_p2p) -
                                        static_cast<std::size_t>(first_collective) + 1;
};
using counter_values = std::array<std::uint64_t, counter_index::size>;

/// Exact event counts, cheap from any number of threads: each thread adds to its own block with
/// a plain load and store (no locked instruction, no shared cache line); totals() sums all
/// blocks. A block outlives its thread and is handed to the next new thread, so counts are never
/// lost and memory stays bounded by the largest number of threads alive at once. Usable during
/// process exit (the thread's block is held through trivially destructible thread-local state;
/// the hand-back at thread exit is a pthread key destructor, which exit() does not run).
/// One instance per process: the runtime's, never destroyed.
class counters {
public:
    counters() noexcept { have_key_ = pthread_key_create(&key_, &release) == 0; }
    counters(const counters&) = delete;
    counters& operator=(const counters&) = delete;

    /// Inlined: on every intercepted call, where a call out of line would cost a repeated
    /// MPI_Pack a noticeable share of its instructions.
    [[gnu::always_inline]] void add(std::size_t index, std::uint64_t n = 1) noexcept { add_to(mine(), index, n); }
    /// add(first, n_first) and add(second, n_second), finding the thread's block once.
    [[gnu::always_inline]] void add(std::size_t first, std::uint64_t n_first, std::size_t second,
                                    std::uint64_t n_second) noexcept {
        block& b = mine();
        add_to(b, first, n_first);
        add_to(b, second, n_second);
    }

    /// The sum over all threads so far.
    counter_values totals() const noexcept {
        counter_values out{};
        const std::lock_guard lock(mutex_);
        for (const block* b = &shared_; b != nullptr; b = b->next)
            for (std::size_t i = 0; i < out.size(); ++i) out[i] += b->values[i].load(std::memory_order_relaxed);
        return out;
    }

private:
    struct block {
        std::array<std::atomic<std::uint64_t>, counter_index::size> values{};
        block* next = nullptr;
        counters* owner = nullptr;
        bool taken = false;
    };

    static inline thread_local block* mine_ = nullptr;

    /// Thread exit: the block goes back to the pool, its counts stay in the totals.
    static void release(void* p) noexcept {
        block* b = static_cast<block*>(p);
        const std::lock_guard lock(b->owner->mutex_);
        b->taken = false;
        mine_ = nullptr;
    }

    [[gnu::always_inline]] void add_to(block& b, std::size_t index, std::uint64_t n) noexcept {
        std::atomic<std::uint64_t>& c = b.values[index];
        if (&b == &shared_)  // no block of its own: shared, so add atomically
            c.fetch_add(n, std::memory_order_relaxed);
        else
            c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    }

    [[gnu::always_inline]] block& mine() noexcept {
        if (mine_ != nullptr) [[likely]]
            return *mine_;
        return first_use();
    }

    /// The thread's first count: takes a free block or makes one (kept out of line so that
    /// add() stays a few instructions).
    [[gnu::noinline]] block& first_use() noexcept {
        if (!have_key_) return shared_;
        try {
            const std::lock_guard lock(mutex_);
            block* b = shared_.next;
            while (b != nullptr && b->taken) b = b->next;
            if (b == nullptr) {
                b = new block;  // never deleted: its counts outlive the thread
                b->owner = this;
                b->next = shared_.next;
                shared_.next = b;
            }
            if (pthread_setspecific(key_, b) != 0) return shared_;
            b->taken = true;
            mine_ = b;
            return *b;
        } catch (...) {
            return shared_;
        }
    }

    mutable std::mutex mutex_;
    block shared_;  ///< head of the list; added to atomically by threads without a block
    pthread_key_t key_{};
    bool have_key_ = false;
};

}  // namespace shunt::detail
