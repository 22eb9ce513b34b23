// interpose/per_thread.hpp: one heap object per thread, behind trivially destructible thread-local state.
#pragma once

#include <new>

#include <pthread.h>

namespace shunt::detail {

/// A T per thread, made on the thread's first get() and deleted at its exit by a pthread key
/// destructor. The thread-local part is one pointer with no constructor or destructor of its
/// own, so a get() after the first is a load and a test (no TLS wrapper call, nothing registered
/// with the C++ runtime, whose thread-exit order a preloaded library does not control); exit()
/// runs no key destructor, so the main thread's T stays valid through exit. One instance per T
/// in a process (the pointer is per T): the runtime's, never destroyed.
template <class T>
class per_thread {
public:
    per_thread() noexcept {
        have_key_ = pthread_key_create(&key_, [](void* p) noexcept {
                        delete static_cast<T*>(p);
                        mine_ = nullptr;
                    }) == 0;
    }
    per_thread(const per_thread&) = delete;
    per_thread& operator=(const per_thread&) = delete;

    /// This thread's T, or nullptr without memory (or without a key): the caller then does without.
    T* get() noexcept {
        if (mine_ != nullptr || !have_key_) [[likely]]
            return mine_;
        return first_use();
    }

private:
    [[gnu::noinline]] T* first_use() noexcept {
        T* t = new (std::nothrow) T;
        if (t == nullptr) return nullptr;
        if (pthread_setspecific(key_, t) != 0) {
            delete t;
            return nullptr;
        }
        return mine_ = t;
    }

    static inline thread_local T* mine_ = nullptr;
    pthread_key_t key_{};
    bool have_key_ = false;
};

}  // namespace shunt::detail
