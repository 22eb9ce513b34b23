// interpose/fiber.cpp: fibers over ucontext, with pooled guarded stacks and AddressSanitizer's fiber annotations.
#include "fiber.hpp"

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SHUNT_FIBER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define SHUNT_FIBER_ASAN 1
#endif

#ifdef SHUNT_FIBER_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace shunt::detail {
namespace {

std::size_t page_bytes() {
    static const std::size_t page = [] {
        const long p = sysconf(_SC_PAGESIZE);
        return p > 0 ? static_cast<std::size_t>(p) : std::size_t{4096};
    }();
    return page;
}

/// Freed stacks, kept for the next fibers (a nonblocking collective per call would otherwise
/// map and unmap one each time).
struct stack_pool {
    std::mutex mutex;
    std::vector<void*> free;
    static constexpr std::size_t keep = 16;
};
stack_pool& pool() {
    static auto* p = new stack_pool;  // never destroyed: fibers may end during exit
    return *p;
}

std::size_t mapping_bytes() { return fiber::stack_bytes + page_bytes(); }

void* take_stack() {
    {
        const std::lock_guard lock(pool().mutex);
        if (!pool().free.empty()) {
            void* s = pool().free.back();
            pool().free.pop_back();
            return s;
        }
    }
    void* m = mmap(nullptr, mapping_bytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    if (mprotect(m, page_bytes(), PROT_NONE) != 0) {  // an overflow faults instead of corrupting the heap
        munmap(m, mapping_bytes());
        throw std::bad_alloc();
    }
    return m;
}

void give_stack(void* s) {
    {
        const std::lock_guard lock(pool().mutex);
        if (pool().free.size() < stack_pool::keep) {
            pool().free.push_back(s);
            return;
        }
    }
    munmap(s, mapping_bytes());
}

void* stack_bottom(void* mapping) { return static_cast<char*>(mapping) + page_bytes(); }

// AddressSanitizer must know which stack runs, or it reports the switches as overflows.
void start_switch([[maybe_unused]] void** fake_save, [[maybe_unused]] const void* bottom,
                  [[maybe_unused]] std::size_t size) {
#ifdef SHUNT_FIBER_ASAN
    __sanitizer_start_switch_fiber(fake_save, bottom, size);
#endif
}
void finish_switch([[maybe_unused]] void* fake_save, [[maybe_unused]] const void** bottom_old,
                   [[maybe_unused]] std::size_t* size_old) {
#ifdef SHUNT_FIBER_ASAN
    __sanitizer_finish_switch_fiber(fake_save, bottom_old, size_old);
#endif
}

}  // namespace

fiber::fiber(std::function<void()> body) : body_(std::move(body)), stack_(take_stack()) {
    if (getcontext(&self_) != 0) {
        give_stack(stack_);
        throw std::bad_alloc();
    }
    self_.uc_stack.ss_sp = stack_bottom(stack_);
    self_.uc_stack.ss_size = stack_bytes;
    self_.uc_link = nullptr;  // entry() never returns: it switches back itself
    const auto p = reinterpret_cast<std::uintptr_t>(this);
    makecontext(&self_, reinterpret_cast<void (*)()>(&fiber::entry), 2, static_cast<unsigned>(p & 0xffffffffu),
                static_cast<unsigned>(p >> 32));
}

fiber::~fiber() {
    // A fiber destroyed while suspended leaves its body's frames unwound: only at exit, where
    // nothing of them is needed any more.
    if (stack_ != nullptr) give_stack(stack_);
}

void fiber::entry(unsigned lo, unsigned hi) noexcept {
    auto* f = reinterpret_cast<fiber*>(static_cast<std::uintptr_t>(lo) | (static_cast<std::uintptr_t>(hi) << 32));
    finish_switch(nullptr, &f->caller_bottom_, &f->caller_size_);
    f->body_();  // noexcept: an escaping exception terminates, as the class says
    f->finished_ = true;
    f->body_ = nullptr;  // what the body captured goes now, on its own stack
    // The last switch: a null save tells AddressSanitizer this stack's fake frames are done.
    start_switch(nullptr, f->caller_bottom_, f->caller_size_);
    swapcontext(&f->self_, &f->caller_);
    std::abort();  // never resumed again
}

bool fiber::resume() noexcept {
    if (finished_ || running_) return finished_;
    running_ = true;
    void* save = nullptr;
    start_switch(&save, stack_bottom(stack_), stack_bytes);
    swapcontext(&caller_, &self_);
    finish_switch(save, nullptr, nullptr);
    running_ = false;
    return finished_;
}

void fiber::suspend() noexcept {
    start_switch(&fake_stack_, caller_bottom_, caller_size_);
    swapcontext(&self_, &caller_);
    finish_switch(fake_stack_, &caller_bottom_, &caller_size_);
}

}  // namespace shunt::detail
