// src/gpu/pool.hpp: the size-class block pool behind shunt::gpu::pool_acquire, over any allocator
// (private to libshunt_gpu).
#pragma once

#include <shunt/gpu/memory.hpp>

#include <bit>
#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

namespace shunt::gpu::detail {

/// Blocks are powers of two from 256 bytes: a released block serves any later request of its
/// class, at the cost of at most half the block unused.
inline std::size_t size_class(std::size_t bytes) { return std::bit_ceil(bytes < 256 ? std::size_t{256} : bytes); }

/// Free lists per size class, one mutex. `Alloc` returns memory or throws; `Free` never throws.
/// After clear() the pool stops caching: released blocks are freed at once.
template <class Alloc, class Free>
class block_pool {
public:
    block_pool(Alloc alloc, Free free) : alloc_(alloc), free_(free) {}

    pool_block acquire(pool_kind kind, std::size_t bytes) {
        const std::size_t n = size_class(bytes);
        {
            std::lock_guard lock(m_);
            auto it = lists_.find(n);
            if (it != lists_.end() && !it->second.empty()) {
                void* p = it->second.back();
                it->second.pop_back();
                cached_ -= n;
                in_use_ += n;
                return {p, n, kind};
            }
        }
        void* p = alloc_(n);  // outside the lock: allocation may synchronise the device
        std::lock_guard lock(m_);
        in_use_ += n;
        return {p, n, kind};
    }

    void release(const pool_block& b) noexcept {
        if (!b.ptr) return;
        {
            std::lock_guard lock(m_);
            in_use_ -= b.bytes;
            if (!closed_) {
                try {
                    lists_[b.bytes].push_back(b.ptr);
                    cached_ += b.bytes;
                    return;
                } catch (...) {  // no memory for the list entry: free the block instead
                }
            }
        }
        free_(b.ptr);
    }

    void clear() noexcept {
        std::map<std::size_t, std::vector<void*>> lists;
        {
            std::lock_guard lock(m_);
            closed_ = true;
            lists.swap(lists_);
            cached_ = 0;
        }
        for (auto& [n, ptrs] : lists)
            for (void* p : ptrs) free_(p);
    }

    pool_usage usage() noexcept {
        std::lock_guard lock(m_);
        return {cached_, in_use_};
    }

private:
    Alloc alloc_;
    Free free_;
    std::mutex m_;
    std::map<std::size_t, std::vector<void*>> lists_;
    std::size_t cached_ = 0, in_use_ = 0;
    bool closed_ = false;
};

}  // namespace shunt::gpu::detail
