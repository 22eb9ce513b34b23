// interpose/runtime.hpp: the preload library's runtime: state and lifecycle (configuration, model, type cache, counters, init/finalize) and the executors the shims reach through it.
#pragma once

#include <shunt/config.hpp>
#include <shunt/datatype/cache.hpp>
#include <shunt/datatype/type_info.hpp>
#include <shunt/model/model.hpp>
#include <shunt/plan/collective.hpp>
#include <shunt/plan/pass.hpp>
#include <shunt/plan/planner.hpp>

#include "collectives.hpp"
#include "compress.hpp"
#include "counters.hpp"
#include "device.hpp"
#include "fused.hpp"
#include "gate.hpp"
#include "mpi_calls.hpp"
#include "nbc.hpp"
#include "p2p.hpp"
#include "pack.hpp"
#include "type_memo.hpp"

#include <mpi.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace shunt::detail {

/// Calls made while another shim is active on the same thread go straight to the library.
class reentry_guard {
public:
    reentry_guard() noexcept : outermost_(!active_) { active_ = true; }
    ~reentry_guard() {
        if (outermost_) active_ = false;
    }
    reentry_guard(const reentry_guard&) = delete;
    reentry_guard& operator=(const reentry_guard&) = delete;
    bool outermost() const noexcept { return outermost_; }

private:
    static inline thread_local bool active_ = false;
    bool outermost_;
};

/// What the shims delegate to, built lazily once: the state and lifecycle every executor shares
/// (configuration, cost model, type cache, planner, counters, MPI's running state, device
/// support, the report's registries), and one executor per family of calls: MPI_Pack/MPI_Unpack
/// (pack.cpp), point-to-point (p2p.cpp), collectives (collectives.cpp), their nonblocking and
/// persistent schedules in flight (nbc.cpp), the fused alltoallw (fused.cpp). Every member is noexcept: shunt's failures are logged once and the call goes to
/// the library; the library's return code is returned unchanged. Thread-safe under
/// MPI_THREAD_MULTIPLE. Never destroyed: shims may run during static destruction, and requests
/// may complete during exit.
class nccl_executor;

class runtime {
public:
    /// The runtime, or nullptr when SHUNT_DISABLE is set (pure pass-through) or it could not be
    /// built.
    static runtime* instance() noexcept {
        static runtime* const rt = published(create());  // inline: every shim asks, so no call for it
        return rt;
    }
    /// The runtime once instance() has built it, else nullptr; never builds it: what a shim's
    /// unguarded fast path reads (fast_path.hpp), so that building it always runs under the guard.
    static runtime* built() noexcept { return fast_gate::line_.built.load(std::memory_order_acquire); }

private:
    static runtime* published(runtime* rt) noexcept {
        fast_gate::line_.built.store(rt, std::memory_order_release);
        return rt;
    }

public:
    // The entry points: one member per intercepted function (mpi_calls.hpp), each a few lines
    // that hand the call to its executor (defined in the executor's file).
#define SHUNT_ENTRY_(name, Name, params, args) int name params noexcept;
    SHUNT_MPI_CALLS(SHUNT_ENTRY_)
    SHUNT_MPI_LARGE_CALLS(SHUNT_ENTRY_)  // large_count.cpp
#undef SHUNT_ENTRY_

    // ---- for the executors ----
    const settings& cfg() const noexcept { return cfg_; }
    cost_model& model() noexcept { return *model_; }
    const cost_model& model() const noexcept { return *model_; }
    type_cache& types() noexcept { return types_; }
    type_memo& memo() noexcept { return memo_; }
    planner& pack_planner() noexcept { return planner_; }
    const planner& pack_planner() const noexcept { return planner_; }
    device_support& devices() noexcept { return devices_; }
    coll_executor& collectives() noexcept { return colls_; }
    compress_executor& compression() noexcept { return compress_; }
    /// The NCCL executor, made on the first NCCL call (nccl.cpp, where NCCL's header is found);
    /// nullptr without memory.
    nccl_executor* nccl() noexcept;
    nbc_executor& nbc() noexcept { return nbc_; }
    p2p_executor& p2p() noexcept { return p2p_; }

    /// True between MPI_Init (however MPI was started) and MPI_Finalize.
    bool running() noexcept {
        const state s = state_.load(std::memory_order_acquire);
        if (s != state::before) [[likely]]
            return s == state::running;
        return start_running();
    }
    /// True once MPI has started and not yet finalised, without starting shunt (a cheap load).
    bool running_now() const noexcept { return state_.load(std::memory_order_acquire) == state::running; }

    /// SHUNT_REPORT is on (the counts and use counts feed it alone).
    bool counting() const noexcept { return counting_; }
    // The counts feed SHUNT_REPORT alone: without a report nothing is counted (a load and a
    // branch on every call instead of finding the thread's block and two adds).
    [[gnu::always_inline]] void count(shim s) noexcept {
        if (counting_) stats_.add(counter_index::calls(s));
    }
    [[gnu::always_inline]] void count_pass(direction d, pass_reason why) noexcept {
        if (counting_) stats_.add(counter_index::passed(d, why));
    }
    /// count(s) and count_pass(d, why) at once (the passed-through fast paths).
    [[gnu::always_inline]] void count_passed(shim s, direction d, pass_reason why) noexcept {
        if (counting_) stats_.add(counter_index::calls(s), 1, counter_index::passed(d, why), 1);
    }
    void count_done(direction d, std::int64_t bytes) noexcept {
        if (counting_)
            stats_.add(counter_index::handled(d), 1, counter_index::bytes(d), static_cast<std::uint64_t>(bytes));
    }
    /// A call shunt handled, in the per-shim counts (collectives, point-to-point, completion).
    void count_handled(shim s) noexcept {
        if (counting_) stats_.add(counter_index::shim_handled(s));
    }
    /// A collective shunt ran: its bytes and its shim.
    void count_collective(shim s, std::int64_t bytes) noexcept {
        if (!counting_) return;
        stats_.add(counter_index::handled(direction::collective));
        stats_.add(counter_index::bytes(direction::collective), static_cast<std::uint64_t>(bytes));
        stats_.add(counter_index::collective_handled(s));
    }

    /// Logs an internal failure of shim `s` once; the caller then passes the call to the library.
    void internal_failure(shim s, const char* what) noexcept;
    /// Inside a catch block of a planner (MPI_Pack's, point-to-point's): what the exception in
    /// flight makes of the call. A size or type shunt refuses goes to the library quietly
    /// (too_large, logged at debug); anything else is an internal failure, reported once.
    pass_reason plan_failure(shim s) noexcept;

    /// Every communicator's collective planner, for the report (kept after the communicator is freed).
    void keep_tuner(std::shared_ptr<collective_tuner> t);
    /// What the report keeps of one MPI_Alltoallw / MPI_Neighbor_alltoallw decision on one
    /// communicator (kept after the communicator is freed).
    struct w_record {
        shim op = shim::alltoallw;
        int ranks = 0;
        bool to_shunt = false, forced = false;
        const char* why = "";  ///< a literal: why, when not measured
        double measured[2] = {-1, -1};  ///< library, shunt (seconds); negative: not measured
        std::atomic<std::uint64_t> taken{0};  ///< calls on the decided path
    };
    void keep_w_record(std::shared_ptr<w_record> r) noexcept;

private:
    enum class state : int { before, running, finalized };

    explicit runtime(const settings& cfg);

    /// A point-to-point entry point's full path (p2p.cpp): counts the call and hands it to the
    /// executor's `Member` as call {S, D, buf, count, type, peer} and `rest`.
    template <auto Member, shim S, direction D, class Buf, class... Rest>
    [[gnu::noinline]] int p2p_full(Buf buf, int count, MPI_Datatype type, int peer, Rest... rest) noexcept;
    /// running() before the runtime has seen MPI start: looks, and starts shunt if it has.
    bool start_running() noexcept;
    /// instance()'s one construction.
    static runtime* create() noexcept;
    /// Once MPI runs: logging's rank, the configuration's warnings and echo, device support.
    void started(int thread_level) noexcept;
    /// After every commit, dup and free of a datatype: the memo's answers and every kept call go stale.
    void types_changed() noexcept {
        memo_.changed();
        fast_gate::advance();
    }
    void log_type(MPI_Datatype type, const char* event) noexcept;
    void report() noexcept;
    std::string decisions_text(bool one_line) const;
    std::string fused_decisions_text(bool one_line) const;

    const settings& cfg_;
    std::string model_note_;  ///< why the model file was not used, said once at start
    std::shared_ptr<cost_model> model_;
    type_cache types_;
    type_memo memo_{types_};
    planner planner_;
    counters stats_;
    const bool counting_;  ///< SHUNT_REPORT is on: the shims count their calls
    std::atomic<state> state_{state::before};
    std::atomic<bool> started_{false};
    std::array<std::atomic<bool>, shim_count> failure_logged_{};
    device_support devices_;

    mutable std::mutex records_mutex_;  ///< guards the two registries below
    std::vector<std::shared_ptr<collective_tuner>> tuners_;
    std::vector<std::shared_ptr<w_record>> w_records_;

    // The executors (after the state they use).
    pack_executor pack_{*this};
    p2p_executor p2p_{*this};
    coll_executor colls_{*this};
    nbc_executor nbc_{*this};
    compress_executor compress_{*this};
    fused_executor fused_{*this};
    std::atomic<nccl_executor*> nccl_{nullptr};  ///< never deleted, as the runtime
};

}  // namespace shunt::detail
