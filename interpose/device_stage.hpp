// interpose/device_stage.hpp: the device buffers of one collective call, staged through pinned host memory around shunt's host schedules (and around a library that is not CUDA-aware), and device scratch that grows.
#pragma once

#include <shunt/collectives/mpi_call.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/gpu/pack.hpp>

#include <mpi.h>

#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace shunt::detail {

/// The device buffers of one collective call, moved through host memory: shunt's schedules are
/// host code, and a library that is not CUDA-aware cannot take them either. The bytes a call
/// reads are copied from the device into pinned host memory before it runs, the bytes it writes
/// copied back after, and the shim's buffer pointers point at the host copies meanwhile (its
/// lambdas read them by reference). Where no device is in use nothing is classified. Which
/// method runs is decided alike on every rank before staging, so ranks whose buffers differ in
/// kind still run the same algorithm.
class device_stage {
public:
    /// `devices`: some buffer may be device memory; `library_takes_device`: the MPI is CUDA-aware.
    device_stage(bool devices, bool library_takes_device) : devices_(devices), aware_(library_takes_device) {}
    device_stage(const device_stage&) = delete;
    device_stage& operator=(const device_stage&) = delete;
    ~device_stage() { release(); }

    /// Registers the buffer `*slot` (the shim's own pointer variable), whose bytes `span` the
    /// call reads (`in`) and/or writes (`out`); a no-op unless it is device memory.
    template <class Ptr>
    void add(Ptr& slot, const byte_span& span, bool in, bool out) {
        if (!devices_ || span.empty() || slot == nullptr || slot == MPI_IN_PLACE) return;
        const auto* first = static_cast<const std::byte*>(slot) + span.lo;
        // Managed memory is host-accessible: only device memory needs the copies.
        if (gpu::classify(first) != gpu::memory_kind::device) return;
        entry e{.span = span, .in = in || (out && !span.whole), .out = out};
        if constexpr (std::is_const_v<std::remove_pointer_t<Ptr>>)
            e.cslot = &slot;
        else
            e.mslot = &slot;
        entries_.push_back(e);
    }
    /// True when buffers may be device memory (a device is in use): worth describing to add().
    bool enabled() const { return devices_; }

    /// Runs `f` (returning an MPI code) with every device buffer staged, except for the library
    /// (`library`) on a CUDA-aware MPI, which gets the device pointers as they are. Exceptions
    /// from the copies and from `f` propagate, with the shim's pointers restored.
    template <class F>
    int run(bool library, F&& f) {
        if (entries_.empty() || (library && aware_)) return f();
        struct restore {
            device_stage& s;
            ~restore() { s.release(); }
        } guard{*this};
        for (auto& e : entries_) {
            e.host = gpu::pool_acquire(gpu::pool_kind::pinned, static_cast<std::size_t>(e.span.hi - e.span.lo));
            e.device = e.cslot != nullptr ? const_cast<void*>(*e.cslot) : *e.mslot;
            if (e.in)
                gpu::copy(e.host.ptr, at(e.device, e.span.lo), static_cast<std::size_t>(e.span.hi - e.span.lo),
                          nullptr);
        }
        gpu::synchronize(nullptr);
        for (auto& e : entries_) point(e, at(e.host.ptr, -e.span.lo));
        const int rc = f();
        for (auto& e : entries_) point(e, e.device);
        if (rc == MPI_SUCCESS) {
            bool copied = false;
            for (const auto& e : entries_)
                if (e.out) {
                    gpu::copy(at(e.device, e.span.lo), e.host.ptr, static_cast<std::size_t>(e.span.hi - e.span.lo),
                              nullptr);
                    copied = true;
                }
            if (copied) gpu::synchronize(nullptr);
        }
        return rc;
    }

private:
    struct entry {
        byte_span span;
        bool in = false, out = false;
        const void** cslot = nullptr;
        void** mslot = nullptr;
        void* device = nullptr;  ///< the application's pointer while staged
        gpu::pool_block host{};
    };
    static void* at(void* p, std::int64_t offset) {
        return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(p) + static_cast<std::uintptr_t>(offset));
    }
    static void point(entry& e, void* p) {
        if (e.cslot != nullptr)
            *e.cslot = p;
        else
            *e.mslot = p;
    }
    /// Points the shim back at the device buffers and gives the host copies back.
    void release() noexcept {
        for (auto& e : entries_) {
            if (e.device != nullptr) point(e, e.device);
            gpu::pool_release(e.host);
            e.host = {};
        }
    }

    bool devices_, aware_;
    std::vector<entry> entries_;
};

/// A block of device scratch that grows to the largest size asked for.
struct device_buffer {
    gpu::pool_block b;
    void* get(std::size_t bytes, gpu::stream_t stream) {
        if (b.ptr != nullptr && b.bytes >= bytes) return b.ptr;
        if (b.ptr != nullptr) {
            // The pool may hand the block to other streams: the work queued on it ends first.
            gpu::synchronize(stream);
            gpu::pool_release(b);
            b = {};
        }
        b = gpu::pool_acquire(gpu::pool_kind::device, std::max<std::size_t>(bytes, 256));
        return b.ptr;
    }
    device_buffer() = default;
    device_buffer(device_buffer&& o) noexcept : b(std::exchange(o.b, {})) {}
    device_buffer& operator=(device_buffer&& o) noexcept {
        std::swap(b, o.b);
        return *this;
    }
    /// With its owner (whose work on the block is done or abandoned by then).
    ~device_buffer() {
        if (b.ptr != nullptr) gpu::pool_release(b);
    }
};

}  // namespace shunt::detail
