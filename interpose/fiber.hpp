// interpose/fiber.hpp: a function run on its own stack that can suspend itself and be resumed later, from any thread: how shunt's blocking schedules run as nonblocking collectives.
#pragma once

#include <cstddef>
#include <functional>

#include <ucontext.h>

namespace shunt::detail {

/// A body run on a stack of its own (mmap'd, with a guard page below it). resume() runs it until
/// it calls suspend() or returns; the next resume() continues after that suspend(). The body
/// must catch its exceptions (one that escapes ends the process, as from a thread) and must not
/// suspend while it holds a lock. Resumed by one thread at a time (the caller serialises), but
/// not necessarily the thread that resumed it last: the body must not keep the address of a
/// thread-local object across a suspend(). AddressSanitizer is told of every switch.
class fiber {
public:
    /// Stack bytes of every fiber (schedules keep their data on the heap).
    static constexpr std::size_t stack_bytes = 256 * 1024;

    /// Takes a stack (from a pool of freed ones, else mmap); throws std::bad_alloc without memory.
    explicit fiber(std::function<void()> body);
    ~fiber();
    fiber(const fiber&) = delete;
    fiber& operator=(const fiber&) = delete;

    /// Runs the body until it suspends (false) or has returned (true). Not from inside a fiber's
    /// body, and not after it has returned.
    bool resume() noexcept;
    /// From inside the body: back to the resume() that runs it.
    void suspend() noexcept;
    bool finished() const noexcept { return finished_; }

private:
    static void entry(unsigned lo, unsigned hi) noexcept;

    std::function<void()> body_;
    void* stack_ = nullptr;  ///< the mapping (guard page first)
    ucontext_t self_{}, caller_{};
    bool finished_ = false;
    bool running_ = false;
    // AddressSanitizer's view of the two stacks (unused without it).
    void* fake_stack_ = nullptr;
    const void* caller_bottom_ = nullptr;
    std::size_t caller_size_ = 0;
};

}  // namespace shunt::detail
