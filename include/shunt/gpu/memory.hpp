// shunt/gpu/memory.hpp: what kind of memory a pointer is (host, pinned host, device, managed), and
// the pools of device scratch and pinned host memory. Implemented in libshunt_gpu.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace shunt::gpu {

/// Where the bytes behind a pointer live.
enum class memory_kind {
    host,  ///< ordinary (pageable) host memory, or anything CUDA does not know
    pinned_host,  ///< page-locked host memory (cudaMallocHost, cudaHostAlloc, cudaHostRegister)
    device,  ///< device memory (cudaMalloc, cudaMallocAsync, ...)
    managed,  ///< managed memory (cudaMallocManaged)
};

/// "host", "pinned_host", "device" or "managed".
const char* to_string(memory_kind k) noexcept;

/// Classifies `p`. Without CUDA in the build, without a driver or without a device: always host,
/// silently. Thread-safe; never throws.
///
/// CUDA allocations are cached per allocation range (the driver's range start and size), so a
/// pointer anywhere inside a known allocation is answered from the cache. Each answer from the
/// cache is confirmed by the allocation's buffer id (CU_POINTER_ATTRIBUTE_BUFFER_ID, unique per
/// allocation for the life of the process): when the application frees an allocation and gets a
/// new one at the same address, the ids differ, the stale range is dropped and the pointer is
/// classified afresh. Pageable host memory is not cached (it has no buffer id to confirm it).
memory_kind classify(const void* p) noexcept;

/// Drops cached ranges overlapping [p, p + bytes): for a caller that sees memory freed.
void forget(const void* p, std::size_t bytes) noexcept;

/// Number of allocation ranges in the classification cache (for tests and reports).
std::size_t classify_cache_size() noexcept;

/// The PCI bus id of the calling thread's current device (cudaGetDevice), as
/// cudaDeviceGetPCIBusId writes it ("0000:3B:00.0"); "" without CUDA in the build, without a
/// driver or without a device. Creates no context. Thread-safe; never throws. Where CUDA is
/// built in, libshunt_gpu installs it as the topology's GPU locator (shunt::set_gpu_locator).
std::string current_device_pci_bus_id() noexcept;

/// The name of the calling thread's current device ("NVIDIA H100 80GB HBM3"), the model file's
/// GPU identity; "none" without CUDA in the build, without a driver or without a device.
/// Creates no context. Thread-safe; never throws.
std::string current_device_name() noexcept;

/// The two memory pools.
enum class pool_kind {
    device,  ///< scratch in device memory of the current device
    pinned,  ///< page-locked, mapped, portable host memory (plain host memory without a device)
};

/// A block from a pool: at least the bytes asked for, 256-byte aligned.
struct pool_block {
    void* ptr = nullptr;
    std::size_t bytes = 0;
    pool_kind kind = pool_kind::device;
};

/// Takes a block of at least `bytes` from a pool (reusing a released block of the same size
/// class, or allocating one). Thread-safe. Throws shunt::unsupported for the device pool when
/// there is no device, shunt::gpu::cuda_error when CUDA cannot allocate. Without a device the
/// pinned pool hands out ordinary host memory, so host staging still works.
pool_block pool_acquire(pool_kind kind, std::size_t bytes);

/// Gives a block back to its pool for reuse (after release_pools: frees it). Thread-safe; the
/// caller must have finished every stream operation on it.
void pool_release(const pool_block& b) noexcept;

/// A pool block given back to its pool when this goes out of scope (an empty block: nothing).
struct scoped_block {
    pool_block b;
    explicit scoped_block(pool_block blk) : b(blk) {}
    ~scoped_block() { pool_release(b); }
    scoped_block(const scoped_block&) = delete;
    scoped_block& operator=(const scoped_block&) = delete;
};

/// Frees every cached block of both pools and frees blocks given back afterwards: what shunt
/// calls at shutdown (MPI_Finalize) so that no pool memory is left behind. Idempotent.
void release_pools() noexcept;

/// Bytes a pool holds: cached (free for reuse) and handed out.
struct pool_usage {
    std::size_t cached = 0;
    std::size_t in_use = 0;
};
pool_usage pool_bytes(pool_kind kind) noexcept;

}  // namespace shunt::gpu
