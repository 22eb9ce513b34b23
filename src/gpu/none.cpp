// src/gpu/none.cpp: libshunt_gpu built without CUDA: no device support, every pointer is host memory,
// and the pinned pool hands out ordinary host memory.
#include "pool.hpp"

#include <shunt/errors.hpp>
#include <shunt/gpu/launch.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/gpu/pack.hpp>

#include <new>

namespace shunt::gpu {
namespace {

[[noreturn]] void no_device() { throw unsupported("shunt was built without CUDA: no device support"); }

void* host_alloc(std::size_t n) { return ::operator new (n, std::align_val_t{256}); }
void host_free(void* p) noexcept { ::operator delete (p, std::align_val_t{256}); }
void* device_alloc(std::size_t) { no_device(); }

using pool_t = detail::block_pool<void* (*)(std::size_t), void (*)(void*) noexcept>;

pool_t& pool(pool_kind kind) {
    static auto* device = new pool_t(&device_alloc, &host_free);
    static auto* pinned = new pool_t(&host_alloc, &host_free);
    return kind == pool_kind::device ? *device : *pinned;
}

}  // namespace

bool built_with_cuda() noexcept { return false; }
bool device_available() noexcept { return false; }

device_form::device_form(const flat_form&) { no_device(); }
device_form::~device_form() = default;
device_form::device_form(device_form&& o) noexcept
    : desc_(o.desc_), table_(o.table_), contiguous_(o.contiguous_), fast_(o.fast_) {}
device_form& device_form::operator=(device_form&& o) noexcept {
    desc_ = o.desc_;
    table_ = o.table_;
    contiguous_ = o.contiguous_;
    fast_ = o.fast_;
    return *this;
}

std::int64_t pack(const device_form&, const void*, void*, stream_t, std::int64_t, std::int64_t) { no_device(); }
std::int64_t unpack(const device_form&, const void*, void*, stream_t, std::int64_t, std::int64_t) { no_device(); }
std::int64_t detail::pack_as(detail::kernel_shape, const device_form&, const void*, void*, stream_t, std::int64_t,
                             std::int64_t) {
    no_device();
}
std::int64_t detail::unpack_as(detail::kernel_shape, const device_form&, const void*, void*, stream_t, std::int64_t,
                               std::int64_t) {
    no_device();
}
void pack_fused(std::span<const device_input>, stream_t) { no_device(); }
void unpack_fused(std::span<const device_output>, stream_t) { no_device(); }
void copy(void*, const void*, std::size_t, stream_t) { no_device(); }
void synchronize(stream_t) { no_device(); }
void launch_empty(std::int64_t, stream_t) { no_device(); }

const char* to_string(memory_kind k) noexcept {
    switch (k) {
        case memory_kind::host: return "host";
        case memory_kind::pinned_host: return "pinned_host";
        case memory_kind::device: return "device";
        case memory_kind::managed: return "managed";
    }
    return "host";
}
memory_kind classify(const void*) noexcept { return memory_kind::host; }
void forget(const void*, std::size_t) noexcept {}
std::size_t classify_cache_size() noexcept { return 0; }
std::string current_device_pci_bus_id() noexcept { return {}; }
std::string current_device_name() noexcept { return "none"; }

pool_block pool_acquire(pool_kind kind, std::size_t bytes) { return pool(kind).acquire(kind, bytes); }
void pool_release(const pool_block& b) noexcept { pool(b.kind).release(b); }
void release_pools() noexcept {
    pool(pool_kind::device).clear();
    pool(pool_kind::pinned).clear();
}
pool_usage pool_bytes(pool_kind kind) noexcept { return pool(kind).usage(); }

}  // namespace shunt::gpu
