// interpose/type_memo.hpp: a per-thread memo in front of the type cache, so a warm MPI_Pack takes no lock.
#pragma once

#include <shunt/datatype/cache.hpp>
#include <shunt/datatype/type_info.hpp>

#include "per_thread.hpp"

#include <mpi.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>

namespace shunt::detail {

/// Answers type_cache::find(handle) from a small per-thread table, valid while no datatype was
/// committed, duplicated or freed anywhere since the answer was memoised: every such event calls
/// changed(), which advances a generation the memo compares. A hit costs no lock and no
/// reference count; the memo's own reference keeps the answer alive until replaced. The table
/// is the thread's per_thread object.
/// Memoising "unknown" answers too spares the library query find() makes for an unknown handle.
/// One instance per process: the runtime's, never destroyed.
class type_memo {
public:
    explicit type_memo(const type_cache& cache) noexcept : cache_(cache) {}
    type_memo(const type_memo&) = delete;
    type_memo& operator=(const type_memo&) = delete;

    /// Call after every on_commit / on_dup / on_free of the cache (any thread).
    void changed() noexcept { generation_.fetch_add(1, std::memory_order_acq_rel); }
    /// Changes with every commit, dup and free: a key for caches of what a type decodes to.
    std::uint64_t generation() const noexcept { return generation_.load(std::memory_order_acquire); }

    /// type_cache::find(t), as a pointer valid until this thread's next find(). nullptr also when
    /// this thread has no table (out of memory): the caller then leaves the call to the library.
    /// May throw what type_cache::find throws (nothing is memoised then).
    const type_info* find(MPI_Datatype t) {
        const entry* e = lookup(t);
        return e != nullptr ? e->info.get() : nullptr;
    }

    /// find(t) as a shared reference that keeps the answer alive after the type is freed (for
    /// requests that complete later). One atomic increment, no lock on a hit.
    std::shared_ptr<const type_info> find_shared(MPI_Datatype t) {
        const entry* e = lookup(t);
        return e != nullptr ? e->info : nullptr;
    }

private:
    struct entry {
        MPI_Datatype handle{};
        std::uint64_t generation = ~std::uint64_t{0};  // never current: starts empty
        std::shared_ptr<const type_info> info;
    };
    struct table {
        std::array<entry, 16> entries;
    };

    const entry* lookup(MPI_Datatype t) {
        const std::uint64_t gen = generation_.load(std::memory_order_acquire);
        table* tab = tables_.get();
        if (tab == nullptr) return nullptr;
        entry& e = tab->entries[slot_of(t)];
        if (e.generation != gen || e.handle != t) {
            e.info = cache_.find(t);
            e.handle = t;
            e.generation = gen;
        }
        return &e;
    }

    static std::size_t slot_of(MPI_Datatype t) noexcept {
        std::uint64_t h = 0;
        std::memcpy(&h, &t, sizeof t < sizeof h ? sizeof t : sizeof h);
        return static_cast<std::size_t>((h * 0x9E3779B97F4A7C15ull) >> 60);  // 16 slots
    }

    const type_cache& cache_;
    std::atomic<std::uint64_t> generation_{0};
    per_thread<table> tables_;
};

}  // namespace shunt::detail
