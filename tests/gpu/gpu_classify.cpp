// tests/gpu/gpu_classify.cpp: pointer classification of cudaMalloc, cudaMallocHost, cudaMallocManaged,
// registered and pageable memory, the range cache (interior pointers, free and reallocation at
// the same address) and the device pool, on a real device. Exits 77 (skipped) without one.
#include <shunt/gpu/memory.hpp>
#include <shunt/gpu/pack.hpp>

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
    if (!ok) {
        std::printf("FAIL: %s\n", what);
        ++failures;
    }
}

void need(cudaError_t rc, const char* call) {
    if (rc != cudaSuccess) {
        std::printf("FAIL: %s: %s\n", call, cudaGetErrorString(rc));
        std::exit(1);
    }
}

}  // namespace

int main() {
    using shunt::gpu::classify;
    using shunt::gpu::memory_kind;
    if (!shunt::gpu::device_available()) {
        std::printf("no CUDA device: skipped\n");
        return 77;
    }
    void *dev = nullptr, *pinned = nullptr, *managed = nullptr;
    need(cudaMalloc(&dev, 1 << 20), "cudaMalloc");
    need(cudaMallocHost(&pinned, 1 << 20), "cudaMallocHost");
    need(cudaMallocManaged(&managed, 1 << 20), "cudaMallocManaged");
    std::vector<char> pageable(1 << 20);
    char* dc = static_cast<char*>(dev);

    expect(classify(dev) == memory_kind::device, "cudaMalloc memory is device");
    expect(classify(dc + 4097) == memory_kind::device, "an interior pointer of cudaMalloc memory is device");
    expect(classify(dc + (1 << 20) - 1) == memory_kind::device, "the last byte of cudaMalloc memory is device");
    expect(classify(pinned) == memory_kind::pinned_host, "cudaMallocHost memory is pinned_host");
    expect(classify(managed) == memory_kind::managed, "cudaMallocManaged memory is managed");
    expect(classify(pageable.data()) == memory_kind::host, "pageable memory is host");
    const std::size_t cached = shunt::gpu::classify_cache_size();
    expect(cached == 3, "three allocation ranges cached");
    expect(classify(dc + 100) == memory_kind::device && shunt::gpu::classify_cache_size() == cached,
           "a cached range answers interior pointers without growing the cache");

    need(cudaHostRegister(pageable.data(), pageable.size(), cudaHostRegisterDefault), "cudaHostRegister");
    expect(classify(pageable.data() + 10) == memory_kind::pinned_host, "registered memory is pinned_host");
    need(cudaHostUnregister(pageable.data()), "cudaHostUnregister");
    expect(classify(pageable.data() + 10) == memory_kind::host, "unregistered again: host");

    // Free, then reallocate: the stale range must not answer for the new allocation.
    need(cudaFree(dev), "cudaFree");
    expect(classify(dev) == memory_kind::host, "freed device memory is no longer device");
    void* again = nullptr;
    need(cudaMallocManaged(&again, 1 << 20), "cudaMallocManaged (again)");
    expect(classify(again) == memory_kind::managed, "new managed allocation (maybe at the old address) is managed");
    void* dev2 = nullptr;
    need(cudaMalloc(&dev2, 1 << 20), "cudaMalloc (again)");
    expect(classify(dev2) == memory_kind::device, "new device allocation is device");
    need(cudaFree(dev2), "cudaFree");
    void* host_at = nullptr;
    need(cudaMallocHost(&host_at, 1 << 20), "cudaMallocHost (again)");
    expect(classify(host_at) == memory_kind::pinned_host, "new pinned allocation is pinned_host");
    expect(dev2 != host_at || classify(dev2) == memory_kind::pinned_host, "same address, new kind");

    // The pools.
    const auto d = shunt::gpu::pool_acquire(shunt::gpu::pool_kind::device, 5000);
    const auto p = shunt::gpu::pool_acquire(shunt::gpu::pool_kind::pinned, 5000);
    expect(classify(d.ptr) == memory_kind::device, "device pool memory is device");
    expect(classify(p.ptr) == memory_kind::pinned_host, "pinned pool memory is pinned_host");
    shunt::gpu::pool_release(d);
    shunt::gpu::pool_release(p);
    expect(shunt::gpu::pool_bytes(shunt::gpu::pool_kind::device).cached == 8192, "device block cached");
    shunt::gpu::release_pools();
    expect(shunt::gpu::pool_bytes(shunt::gpu::pool_kind::device).cached == 0, "device pool released");

    cudaFreeHost(host_at);
    cudaFree(again);
    cudaFreeHost(pinned);
    cudaFree(managed);
    std::printf("gpu_classify: %d failed\n", failures);
    return failures == 0 ? 0 : 1;
}
