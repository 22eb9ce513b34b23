// src/gpu/memory.cu: pointer classification through the CUDA driver (cached per allocation range,
// confirmed by buffer id) and the device-scratch and pinned-host pools.
#include "check.hpp"
#include "pool.hpp"

#include <shunt/errors.hpp>
#include <shunt/gpu/memory.hpp>
#include <shunt/gpu/pack.hpp>
#include <shunt/topology/gpu.hpp>

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>

namespace shunt::gpu {
namespace {

using get_attributes_fn = CUresult (*)(unsigned, CUpointer_attribute*, void**, CUdeviceptr);

/// The driver call classification needs, found once through the runtime (libshunt_gpu
/// links cudart statically and never links libcuda, so it loads on machines without a driver).
struct driver {
    get_attributes_fn attributes = nullptr;
};

const driver& driver_calls() {
    static const driver d = [] {
        driver out;
        if (!device_available()) return out;
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found{};
        if (cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &fn, 12000, cudaEnableDefault, &found) ==
                cudaSuccess &&
            found == cudaDriverEntryPointSuccess)
            out.attributes = reinterpret_cast<get_attributes_fn>(fn);
        (void)cudaGetLastError();
        if (!out.attributes) out = {};
        return out;
    }();
    return d;
}

struct range {
    std::uintptr_t end;
    std::uint64_t buffer_id;
    memory_kind kind;
};

/// Known CUDA allocations by start address.
struct range_cache {
    std::shared_mutex m;
    std::map<std::uintptr_t, range> ranges;
};

range_cache& cache() {
    static auto* c = new range_cache;  // never destroyed: classify may run during static destruction
    return *c;
}

}  // namespace

const char* to_string(memory_kind k) noexcept {
    switch (k) {
        case memory_kind::host: return "host";
        case memory_kind::pinned_host: return "pinned_host";
        case memory_kind::device: return "device";
        case memory_kind::managed: return "managed";
    }
    return "host";
}

memory_kind classify(const void* p) noexcept {
    const driver& drv = driver_calls();
    if (!drv.attributes || !p) return memory_kind::host;
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    range_cache& c = cache();
    try {
        {
            std::shared_lock lock(c.m);
            auto it = c.ranges.upper_bound(addr);
            if (it != c.ranges.begin() && addr < std::prev(it)->second.end) {
                const range r = std::prev(it)->second;
                lock.unlock();
                // cuPointerGetAttributes answers a freed or unknown pointer with success and a zero
                // id; the single-attribute query fails there with CUDA_ERROR_INVALID_VALUE, an API
                // error that compute-sanitizer reports in the application's run.
                unsigned long long id = 0;
                CUpointer_attribute what = CU_POINTER_ATTRIBUTE_BUFFER_ID;
                void* into = &id;
                if (drv.attributes(1, &what, &into, static_cast<CUdeviceptr>(addr)) == CUDA_SUCCESS && id != 0 &&
                    id == r.buffer_id)
                    return r.kind;
                // Freed (the query fails) or replaced (another id): the range is stale.
                forget(p, 1);
            }
        }
        unsigned memtype = 0;
        int managed = 0;
        CUdeviceptr start = 0;
        std::size_t size = 0;
        unsigned long long id = 0;
        CUpointer_attribute what[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                      CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                      CU_POINTER_ATTRIBUTE_BUFFER_ID};
        void* into[] = {&memtype, &managed, &start, &size, &id};
        // Unknown (pageable) pointers succeed with every attribute left zero.
        if (drv.attributes(5, what, into, static_cast<CUdeviceptr>(addr)) != CUDA_SUCCESS) return memory_kind::host;
        memory_kind kind;
        if (managed)
            kind = memory_kind::managed;
        else if (memtype == CU_MEMORYTYPE_DEVICE)
            kind = memory_kind::device;
        else if (memtype == CU_MEMORYTYPE_HOST)
            kind = memory_kind::pinned_host;
        else
            return memory_kind::host;
        std::unique_lock lock(c.m);
        // Drop whatever the new range overlaps: those allocations are gone.
        const auto lo = static_cast<std::uintptr_t>(start), hi = lo + (size ? size : 1);
        auto it = c.ranges.upper_bound(lo);
        if (it != c.ranges.begin() && std::prev(it)->second.end > lo) --it;
        while (it != c.ranges.end() && it->first < hi) it = c.ranges.erase(it);
        c.ranges.emplace(lo, range{hi, id, kind});
        return kind;
    } catch (...) {  // no memory for the cache: the answer is still right, just not cached
        return memory_kind::host;
    }
}

void forget(const void* p, std::size_t bytes) noexcept {
    const auto lo = reinterpret_cast<std::uintptr_t>(p), hi = lo + (bytes ? bytes : 1);
    range_cache& c = cache();
    std::unique_lock lock(c.m);
    auto it = c.ranges.upper_bound(lo);
    if (it != c.ranges.begin() && std::prev(it)->second.end > lo) --it;
    while (it != c.ranges.end() && it->first < hi) it = c.ranges.erase(it);
}

std::size_t classify_cache_size() noexcept {
    range_cache& c = cache();
    std::shared_lock lock(c.m);
    return c.ranges.size();
}

std::string current_device_pci_bus_id() noexcept {
    if (!device_available()) return {};
    int dev = 0;
    char id[32] = {0};  // "dddd:bb:dd.f" needs 13 with its NUL; CUDA asks for at least 13
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetPCIBusId(id, static_cast<int>(sizeof id), dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return {};
    }
    try {
        return std::string(id);
    } catch (...) {
        return {};
    }
}

std::string current_device_name() noexcept {
    try {
        int dev = 0;
        cudaDeviceProp prop{};
        if (!device_available() || cudaGetDevice(&dev) != cudaSuccess ||
            cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
            (void)cudaGetLastError();
            return "none";
        }
        prop.name[sizeof prop.name - 1] = '\0';
        return prop.name[0] != '\0' ? std::string(prop.name) : std::string("none");
    } catch (...) {
        return "none";
    }
}

namespace {
// The topology header library cannot call CUDA: wherever this object is linked (the preload
// library, the tools, the gpu tests), it tells topology discovery where the process's GPU is.
[[maybe_unused]] const bool gpu_locator_installed = (set_gpu_locator(&current_device_pci_bus_id), true);
}  // namespace

namespace {

void* device_alloc(std::size_t n) {
    if (!device_available()) throw unsupported("no CUDA device available for device scratch");
    void* p = nullptr;
    SHUNT_CUDA(cudaMalloc(&p, n));
    return p;
}
void device_free(void* p) noexcept { (void)cudaFree(p); }

void* pinned_alloc(std::size_t n) {
    if (!device_available()) {  // host staging still works: plain memory
        void* p = ::operator new (n, std::align_val_t{256});
        return p;
    }
    void* p = nullptr;
    SHUNT_CUDA(cudaHostAlloc(&p, n, cudaHostAllocMapped | cudaHostAllocPortable));
    return p;
}
void pinned_free(void* p) noexcept {
    if (!device_available())
        ::operator delete (p, std::align_val_t{256});
    else
        (void)cudaFreeHost(p);
}

using pool_t = detail::block_pool<void* (*)(std::size_t), void (*)(void*) noexcept>;

pool_t& pool(pool_kind kind) {
    // Never destroyed: release_pools() frees the memory at shutdown, while CUDA is still up.
    static auto* device = new pool_t(&device_alloc, &device_free);
    static auto* pinned = new pool_t(&pinned_alloc, &pinned_free);
    return kind == pool_kind::device ? *device : *pinned;
}

}  // namespace

pool_block pool_acquire(pool_kind kind, std::size_t bytes) { return pool(kind).acquire(kind, bytes); }

void pool_release(const pool_block& b) noexcept { pool(b.kind).release(b); }

void release_pools() noexcept {
    pool(pool_kind::device).clear();
    pool(pool_kind::pinned).clear();
}

pool_usage pool_bytes(pool_kind kind) noexcept { return pool(kind).usage(); }

}  // namespace shunt::gpu
