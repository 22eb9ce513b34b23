// src/gpu/pack.cu: the CUDA pack, unpack and fused-pack kernels with the index math of
// shunt/gpu/index.hpp (the fast path for 2-D and 3-D objects, one word per thread otherwise), and
// their stream-ordered launchers.
#include "check.hpp"

#include <shunt/gpu/index.hpp>
#include <shunt/gpu/pack.hpp>
#include <shunt/gpu/staged.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

namespace shunt::gpu {
namespace {

constexpr int block_threads = 256;
/// Beyond this many blocks (2^24 threads, one 16-byte word each: 256 MiB) the kernels stride. A
/// lower cap, each thread then moving several words, ran slower than one word per thread.
constexpr std::int64_t max_blocks = std::int64_t{1} << 16;

/// Strided (BlockList false: one block per innermost iteration) or block-list transfer of one
/// window, grid-stride over its words.
template <class Word, bool Pack, bool BlockList>
__global__ void __launch_bounds__(block_threads)
    transfer_kernel(const pack_desc d, const std::uintptr_t typed, std::byte* const packed, const window w) {
    const std::int64_t words = w.bytes / static_cast<std::int64_t>(sizeof(Word));
    const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < words; j += step)
        move_word<Word, Pack, BlockList>(d, typed, packed, w, j);
}

/// The fast path for one-block descriptors of at most fast_max_dims dimensions whose stream fits
/// 32 bits: the dimensions in parameters (registers), division by multiplication, and Unroll words
/// per thread in flight (all loads issued before the stores) so that small words keep enough bytes
/// in flight per SM. Word u of a thread is Unroll-th of the block's tile apart, so each load and
/// each store of a warp still covers consecutive stream words.
template <class Word, bool Pack, int Unroll>
__global__ void __launch_bounds__(block_threads)
    fast_kernel(const fast_dims f, const std::uintptr_t typed, std::byte* const packed, const window w) {
    constexpr std::int64_t size = sizeof(Word);
    const std::int64_t words = w.bytes / size;
    const std::int64_t tile = static_cast<std::int64_t>(blockDim.x) * Unroll;
    const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * tile;
    Word* const out = reinterpret_cast<Word*>(packed);
    for (std::int64_t j0 = static_cast<std::int64_t>(blockIdx.x) * tile + threadIdx.x; j0 < words; j0 += step) {
        Word v[Unroll];
#pragma unroll
        for (int u = 0; u < Unroll; ++u) {
            const std::int64_t j = j0 + static_cast<std::int64_t>(u) * blockDim.x;
            if (j < words) {
                if constexpr (Pack)
                    v[u] = *reinterpret_cast<const Word*>(
                        typed + static_cast<std::uintptr_t>(fast_offset(f, w.first + j * size)));
                else
                    v[u] = out[j];
            }
        }
#pragma unroll
        for (int u = 0; u < Unroll; ++u) {
            const std::int64_t j = j0 + static_cast<std::int64_t>(u) * blockDim.x;
            if (j < words) {
                if constexpr (Pack)
                    out[j] = v[u];
                else
                    *reinterpret_cast<Word*>(typed + static_cast<std::uintptr_t>(fast_offset(f, w.first + j * size))) =
                        v[u];
            }
        }
    }
}

/// Shared-memory words of a staged launch block.
constexpr std::int64_t stage_words = staged_capacity(block_threads);

/// The staged kernels (shunt/gpu/staged.hpp) for elements of Elem bytes: each launch block takes
/// tiles of the window in turn, stages one side of a tile in shared memory, then moves its
/// elements from there.
template <class Elem, bool Pack>
__global__ void __launch_bounds__(block_threads)
    staged_kernel(const staged_dims f, const std::uintptr_t typed, std::byte* const packed, const window w) {
    __shared__ word16 stage[stage_words];
    constexpr std::int64_t tile = std::int64_t{block_threads} * staged_bytes_per_thread;
    const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * tile;
    for (std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * tile; first < w.bytes; first += step) {
        const staged_tile s = plan_staged_tile<Pack>(f, typed, packed, w, first, tile, stage_words);
        load_staged_tile(s, stage, threadIdx.x, block_threads);
        __syncthreads();
        move_staged_tile<Elem, Pack>(f, s, stage, typed, packed, w, threadIdx.x, block_threads);
        __syncthreads();  // the next tile's loads overwrite the stage
    }
}

/// Fused pack: each launch block finds its item by binary search over the items' first blocks
/// (the same answer for the whole block, so no divergence), then strides over that item's words.
__device__ void fused_block(const fused_item* items, const std::int64_t* begin, std::int64_t nitems,
                            std::int64_t nblocks) {
    const std::int64_t b = blockIdx.x;
    const std::int64_t i = fused_item_of(begin, nitems, b);
    const fused_item& it = items[i];
    const std::int64_t end = i + 1 < nitems ? begin[i + 1] : nblocks;
    const std::int64_t local = b - it.block_begin, count = end - it.block_begin;
    switch (it.word) {
        case 16: return fused_thread<word16>(it, local, count, blockDim.x, threadIdx.x);
        case 8: return fused_thread<std::uint64_t>(it, local, count, blockDim.x, threadIdx.x);
        case 4: return fused_thread<std::uint32_t>(it, local, count, blockDim.x, threadIdx.x);
        case 2: return fused_thread<std::uint16_t>(it, local, count, blockDim.x, threadIdx.x);
        default: return fused_thread<std::uint8_t>(it, local, count, blockDim.x, threadIdx.x);
    }
}

/// Up to this many items travel in the kernel's parameters (4 KiB at most on every GPU), so a
/// small fused pack needs no copy before its launch.
constexpr std::size_t inline_items = 24;

struct fused_batch {
    fused_item items[inline_items];
    std::int64_t begin[inline_items];
};
static_assert(sizeof(fused_batch) + 16 <= 4000, "fused_batch must fit the kernel parameter space");

__global__ void __launch_bounds__(block_threads)
    fused_kernel_inline(const fused_batch batch, const std::int64_t nitems, const std::int64_t nblocks) {
    fused_block(batch.items, batch.begin, nitems, nblocks);
}

__global__ void __launch_bounds__(block_threads)
    fused_kernel(const fused_item* const items, const std::int64_t* const begin, const std::int64_t nitems,
                 const std::int64_t nblocks) {
    fused_block(items, begin, nitems, nblocks);
}

void require_device() {
    if (!device_available()) throw unsupported("no CUDA device available");
}

template <class Word, bool Pack>
void launch_words(const pack_desc& d, std::uintptr_t typed, std::byte* packed, window w, cudaStream_t s) {
    const std::int64_t words = w.bytes / static_cast<std::int64_t>(sizeof(Word));
    const auto grid = static_cast<unsigned>(std::min((words + block_threads - 1) / block_threads, max_blocks));
    if (d.nblocks > 1)
        transfer_kernel<Word, Pack, true><<<grid, block_threads, 0, s>>>(d, typed, packed, w);
    else
        transfer_kernel<Word, Pack, false><<<grid, block_threads, 0, s>>>(d, typed, packed, w);
    SHUNT_CUDA(cudaGetLastError());
}

template <class Word, bool Pack, int Unroll>
void launch_fast(const fast_dims& f, std::uintptr_t typed, std::byte* packed, window w, cudaStream_t s) {
    const std::int64_t words = w.bytes / static_cast<std::int64_t>(sizeof(Word));
    const std::int64_t tile = std::int64_t{block_threads} * Unroll;
    const auto grid = static_cast<unsigned>(std::min((words + tile - 1) / tile, max_blocks));
    fast_kernel<Word, Pack, Unroll><<<grid, block_threads, 0, s>>>(f, typed, packed, w);
    SHUNT_CUDA(cudaGetLastError());
}

template <class Elem, bool Pack>
void launch_staged(const staged_dims& f, std::uintptr_t typed, std::byte* packed, window w, cudaStream_t s) {
    constexpr std::int64_t tile = std::int64_t{block_threads} * staged_bytes_per_thread;
    const auto grid = static_cast<unsigned>(std::min((w.bytes + tile - 1) / tile, max_blocks));
    staged_kernel<Elem, Pack><<<grid, block_threads, 0, s>>>(f, typed, packed, w);
    SHUNT_CUDA(cudaGetLastError());
}

/// Bytes in flight per thread on the fast path (the automatic shape) for words of `word` bytes
/// and blocks of `block` bytes: the shape bench-gpu-pack measured fastest for that word and
/// block (1-byte words: 16; 2 and 4: 32; 8: 16; 16-byte words: 32 from 64-byte blocks when
/// packing, from 128 when unpacking, else 16).
constexpr int fast_bytes_for(int word, bool pack, std::int64_t block) {
    if (word == 16) return block >= (pack ? 64 : 128) ? 32 : 16;
    return word == 2 || word == 4 ? 32 : 16;
}

template <class Word, bool Pack>
void launch_fast_bytes(int bytes, const fast_dims& f, std::uintptr_t typed, std::byte* packed, window w,
                       cudaStream_t s) {
    constexpr int size = sizeof(Word);
    switch (bytes) {
        case 64: return launch_fast<Word, Pack, (64 / size)>(f, typed, packed, w, s);
        case 32: return launch_fast<Word, Pack, (32 / size)>(f, typed, packed, w, s);
        default: return launch_fast<Word, Pack, (16 / size)>(f, typed, packed, w, s);
    }
}

/// Launches the kernel `shape` (automatic: the fast path where the descriptor has one, else the
/// legacy kernels) for words of Word bytes.
template <class Word, bool Pack>
void launch(detail::kernel_shape shape, const device_form& f, std::uintptr_t typed, std::byte* packed, window w,
            cudaStream_t s) {
    using detail::kernel_shape;
    if constexpr (sizeof(Word) <= staged_chunk) {
        if (shape == kernel_shape::staged && typed != 0)  // MPI_BOTTOM: see shunt/gpu/staged.hpp
            if (const staged_dims d = make_staged_dims(f.fast()); d.fast.ndims >= 1)
                return launch_staged<Word, Pack>(d, typed, packed, w, s);
    }
    const bool fast = f.fast().ndims >= 0 && shape != kernel_shape::legacy;
    if (!fast) return launch_words<Word, Pack>(f.desc(), typed, packed, w, s);
    const int bytes = shape == kernel_shape::fast64   ? 64
                      : shape == kernel_shape::fast32 ? 32
                      : shape == kernel_shape::fast16
                          ? 16
                          : fast_bytes_for(static_cast<int>(sizeof(Word)), Pack, f.desc().block_bytes);
    launch_fast_bytes<Word, Pack>(bytes, f.fast(), typed, packed, w, s);
}

template <bool Pack>
std::int64_t transfer(detail::kernel_shape shape, const device_form& f, std::uintptr_t typed, std::byte* packed,
                      stream_t stream, std::int64_t first, std::int64_t max_bytes) {
    require_device();
    const pack_desc& d = f.desc();
    const window w = clamp_window(d, first, max_bytes);
    if (w.bytes == 0) return 0;
    const auto s = static_cast<cudaStream_t>(stream);
    if (f.contiguous()) {  // one run of typed bytes: the copy engine
        std::byte* t = reinterpret_cast<std::byte*>(typed + static_cast<std::uintptr_t>(d.single_offset + w.first));
        SHUNT_CUDA(cudaMemcpyAsync(Pack ? static_cast<void*>(packed) : t, Pack ? static_cast<const void*>(t) : packed,
                                   static_cast<std::size_t>(w.bytes), cudaMemcpyDefault, s));
        return w.bytes;
    }
    switch (word_size(d, typed, reinterpret_cast<std::uintptr_t>(packed), w)) {
        case 16: launch<word16, Pack>(shape, f, typed, packed, w, s); break;
        case 8: launch<std::uint64_t, Pack>(shape, f, typed, packed, w, s); break;
        case 4: launch<std::uint32_t, Pack>(shape, f, typed, packed, w, s); break;
        case 2: launch<std::uint16_t, Pack>(shape, f, typed, packed, w, s); break;
        default: launch<std::uint8_t, Pack>(shape, f, typed, packed, w, s); break;
    }
    return w.bytes;
}

}  // namespace

bool built_with_cuda() noexcept { return true; }

bool device_available() noexcept {
    static const bool available = [] {
        int n = 0;
        // Without a driver (static cudart finds no libcuda.so.1) or without devices this returns
        // an error; clear it and report no device.
        if (cudaGetDeviceCount(&n) != cudaSuccess) {
            (void)cudaGetLastError();
            return false;
        }
        return n > 0;
    }();
    return available;
}

device_form::device_form(const flat_form& f)
    : desc_(f.desc()), contiguous_(f.contiguous()), fast_(make_fast_dims(f.desc())) {
    require_device();
    const auto table = f.table();
    const std::size_t bytes = table.size_bytes();
    SHUNT_CUDA(cudaMalloc(&table_, bytes));
    // From pageable memory cudaMemcpy may return before its DMA lands, and nothing orders that DMA
    // (on the legacy stream) before kernels on a non-blocking stream: wait for it here.
    cudaError_t rc = cudaMemcpy(table_, table.data(), bytes, cudaMemcpyHostToDevice);
    if (rc == cudaSuccess) rc = cudaStreamSynchronize(cudaStreamLegacy);
    if (rc != cudaSuccess) {
        cudaFree(table_);
        detail::throw_cuda(rc, "cudaMemcpy(device_form table)", __FILE__, __LINE__);
    }
    desc_.table = static_cast<const std::int64_t*>(table_);
}

device_form::~device_form() {
    if (table_) (void)cudaFree(table_);  // nothing to report from a destructor; a failure leaks
}

device_form::device_form(device_form&& o) noexcept
    : desc_(o.desc_), table_(std::exchange(o.table_, nullptr)), contiguous_(o.contiguous_), fast_(o.fast_) {}

device_form& device_form::operator=(device_form&& o) noexcept {
    if (this != &o) {
        if (table_) (void)cudaFree(table_);
        desc_ = o.desc_;
        table_ = std::exchange(o.table_, nullptr);
        contiguous_ = o.contiguous_;
        fast_ = o.fast_;
    }
    return *this;
}

std::int64_t pack(const device_form& f, const void* typed, void* out, stream_t stream, std::int64_t first,
                  std::int64_t max_bytes) {
    return detail::pack_as(detail::kernel_shape::automatic, f, typed, out, stream, first, max_bytes);
}

std::int64_t unpack(const device_form& f, const void* in, void* typed, stream_t stream, std::int64_t first,
                    std::int64_t max_bytes) {
    return detail::unpack_as(detail::kernel_shape::automatic, f, in, typed, stream, first, max_bytes);
}

std::int64_t detail::pack_as(kernel_shape shape, const device_form& f, const void* typed, void* out, stream_t stream,
                             std::int64_t first, std::int64_t max_bytes) {
    return transfer<true>(shape, f, reinterpret_cast<std::uintptr_t>(typed), static_cast<std::byte*>(out), stream,
                          first, max_bytes);
}

std::int64_t detail::unpack_as(kernel_shape shape, const device_form& f, const void* in, void* typed, stream_t stream,
                               std::int64_t first, std::int64_t max_bytes) {
    return transfer<false>(shape, f, reinterpret_cast<std::uintptr_t>(typed),
                           const_cast<std::byte*>(static_cast<const std::byte*>(in)), stream, first, max_bytes);
}

void copy(void* dst, const void* src, std::size_t bytes, stream_t stream) {
    require_device();
    if (bytes == 0) return;
    SHUNT_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
}

void synchronize(stream_t stream) {
    require_device();
    SHUNT_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

namespace {

/// One fused launch over `items` on `stream`: their table in the kernel's parameters when small,
/// else in one stream-ordered allocation freed after the kernel.
void launch_fused(std::vector<fused_item>& items, stream_t stream) {
    const std::int64_t blocks = plan_fused(items, block_threads, max_blocks);
    if (items.empty()) return;
    if (blocks > std::numeric_limits<int>::max()) throw unsupported("fused launch of too many items");
    const auto s = static_cast<cudaStream_t>(stream);
    const auto nitems = static_cast<std::int64_t>(items.size());
    if (items.size() <= inline_items) {
        fused_batch batch{};
        for (std::size_t i = 0; i < items.size(); ++i) batch.items[i] = items[i], batch.begin[i] = items[i].block_begin;
        fused_kernel_inline<<<static_cast<unsigned>(blocks), block_threads, 0, s>>>(batch, nitems, blocks);
        SHUNT_CUDA(cudaGetLastError());
        return;
    }
    // More items: they and their first blocks go to one stream-ordered allocation freed after
    // the kernel.
    const std::size_t item_bytes = items.size() * sizeof(fused_item);
    std::vector<std::byte> host(item_bytes + items.size() * sizeof(std::int64_t));
    std::memcpy(host.data(), items.data(), item_bytes);
    for (std::size_t i = 0; i < items.size(); ++i)
        std::memcpy(host.data() + item_bytes + i * sizeof(std::int64_t), &items[i].block_begin, sizeof(std::int64_t));
    void* dev = nullptr;
    SHUNT_CUDA(cudaMallocAsync(&dev, host.size(), s));
    // Pageable source: cudaMemcpyAsync has read it before returning, so `host` may go (the copy
    // waits for the stream: the price of a large fused pack, once per launch).
    if (const cudaError_t rc = cudaMemcpyAsync(dev, host.data(), host.size(), cudaMemcpyHostToDevice, s);
        rc != cudaSuccess) {
        (void)cudaFreeAsync(dev, s);
        detail::throw_cuda(rc, "cudaMemcpyAsync(fused items)", __FILE__, __LINE__);
    }
    const auto* dev_items = static_cast<const fused_item*>(dev);
    const auto* dev_begin = reinterpret_cast<const std::int64_t*>(static_cast<std::byte*>(dev) + item_bytes);
    fused_kernel<<<static_cast<unsigned>(blocks), block_threads, 0, s>>>(dev_items, dev_begin, nitems, blocks);
    const cudaError_t launched = cudaGetLastError();
    (void)cudaFreeAsync(dev, s);
    if (launched != cudaSuccess) detail::throw_cuda(launched, "fused_kernel launch", __FILE__, __LINE__);
}

}  // namespace

void pack_fused(std::span<const device_input> in, stream_t stream) {
    require_device();
    std::vector<fused_item> items;
    items.reserve(in.size());
    for (const auto& x : in) items.push_back(whole_item(x.form->desc(), x.typed, x.out, true));
    launch_fused(items, stream);
}

void unpack_fused(std::span<const device_output> out, stream_t stream) {
    require_device();
    std::vector<fused_item> items;
    items.reserve(out.size());
    for (const auto& x : out) items.push_back(whole_item(x.form->desc(), x.typed, x.in, false));
    launch_fused(items, stream);
}

}  // namespace shunt::gpu
