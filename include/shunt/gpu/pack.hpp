// shunt/gpu/pack.hpp: packing and unpacking device buffers with the CUDA kernels (strided,
// block-list, copy-engine for contiguous data) and the fused pack of many items in one launch.
// Implemented in libshunt_gpu; without CUDA at build time the same API reports no device support.
#pragma once

#include <shunt/errors.hpp>
#include <shunt/gpu/descriptor.hpp>
#include <shunt/gpu/index.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>

struct CUstream_st;  // cudaStream_t is CUstream_st*: no <cuda_runtime.h> in core headers

namespace shunt::gpu {

/// A CUDA stream (cudaStream_t); nullptr is the legacy default stream.
using stream_t = CUstream_st*;

/// A CUDA runtime call made by shunt failed; the message names the call, file:line and CUDA's
/// description. The sticky error state has been cleared.
class cuda_error : public error {
public:
    cuda_error(int code, const std::string& what) : error(what), code_(code) {}
    /// The cudaError_t value.
    int code() const noexcept { return code_; }

private:
    int code_;
};

/// True when this build has CUDA kernels (configured with CUDA found).
bool built_with_cuda() noexcept;

/// True when CUDA kernels can run in this process: built with CUDA, a driver loaded and at least
/// one device visible. Decided once, thread-safe, never throws, prints nothing.
bool device_available() noexcept;

/// A flat_form whose table lives in device memory of the current device: what the kernels read.
/// Build one per (type, count) and reuse it. Throws shunt::unsupported when there is no device
/// (or no CUDA in this build), cuda_error when the allocation fails. Not copyable. Keep it alive
/// while work queued with it may run (its destructor's cudaFree waits for the device anyway).
class device_form {
public:
    explicit device_form(const flat_form& f);
    ~device_form();
    device_form(device_form&& o) noexcept;
    device_form& operator=(device_form&& o) noexcept;
    device_form(const device_form&) = delete;
    device_form& operator=(const device_form&) = delete;

    /// The descriptor, `table` in device memory.
    const pack_desc& desc() const { return desc_; }
    /// True when the stream is one contiguous typed run: packed by one cudaMemcpyAsync.
    bool contiguous() const { return contiguous_; }
    /// The fast index path's dimensions (ndims < 0 where the descriptor has none).
    const fast_dims& fast() const { return fast_; }

private:
    pack_desc desc_{};
    void* table_ = nullptr;
    bool contiguous_ = false;
    fast_dims fast_{};
};

/// Packs stream bytes [first, first + max_bytes) of `f` from the typed buffer `typed` (device,
/// managed or mapped pinned memory; element 0's origin) into `out`, ordered on `stream`:
/// returns the bytes it will have written (as shunt::pack_host returns) once the stream reaches
/// that point; the caller synchronises. Thread-safe for distinct outputs. Throws
/// shunt::unsupported without device support, cuda_error when a launch fails.
std::int64_t pack(const device_form& f, const void* typed, void* out, stream_t stream, std::int64_t first = 0,
                  std::int64_t max_bytes = std::numeric_limits<std::int64_t>::max());

/// The inverse of pack: scatters packed bytes [first, first + max_bytes) from `in` into the
/// typed buffer, ordered on `stream`. Returns the bytes it will have read. The typemap must not
/// repeat a byte (MPI forbids receiving into such types).
std::int64_t unpack(const device_form& f, const void* in, void* typed, stream_t stream, std::int64_t first = 0,
                    std::int64_t max_bytes = std::numeric_limits<std::int64_t>::max());

/// Copies `bytes` between any two of device, managed and pinned host memory, ordered on
/// `stream` (cudaMemcpyAsync with the direction inferred). Throws shunt::unsupported without
/// device support, cuda_error on failure.
void copy(void* dst, const void* src, std::size_t bytes, stream_t stream);

/// Waits until all work queued on `stream` has finished. Throws shunt::unsupported without
/// device support, cuda_error when the stream reports an error.
void synchronize(stream_t stream);

namespace detail {

/// The kernels pack and unpack may launch, for the benchmarks and tests that compare them:
/// automatic (what pack and unpack choose), legacy (one word per thread with the table's index
/// math, the kernels before the fast path), and the fast path with 16, 32 or 64 bytes in flight
/// per thread (falling back to legacy where the descriptor has no fast path), and the staged
/// kernels of shunt/gpu/staged.hpp (falling back to automatic where they do not apply: words of 8
/// bytes or more, no fast path, typed offsets that do not grow with the stream position, a null
/// typed base).
enum class kernel_shape { automatic, legacy, fast16, fast32, fast64, staged };

/// pack with the kernel `shape` (same contract and errors).
std::int64_t pack_as(kernel_shape shape, const device_form& f, const void* typed, void* out, stream_t stream,
                     std::int64_t first = 0, std::int64_t max_bytes = std::numeric_limits<std::int64_t>::max());
/// unpack with the kernel `shape` (same contract and errors).
std::int64_t unpack_as(kernel_shape shape, const device_form& f, const void* in, void* typed, stream_t stream,
                       std::int64_t first = 0, std::int64_t max_bytes = std::numeric_limits<std::int64_t>::max());

}  // namespace detail

/// One item of a fused pack: the whole stream of `form` from `typed` into `out`.
struct device_input {
    const device_form* form = nullptr;
    const void* typed = nullptr;
    void* out = nullptr;
};

/// Packs every item in one kernel launch on `stream` (outputs may be parts of one buffer, or
/// separate buffers; they must not overlap). The item table is copied to device memory that is
/// freed in stream order. Same errors as pack.
void pack_fused(std::span<const device_input> items, stream_t stream);

/// One item of a fused unpack: the whole stream of `form` from `in` into `typed`.
struct device_output {
    const device_form* form = nullptr;
    const void* in = nullptr;
    void* typed = nullptr;
};

/// Unpacks every item in one kernel launch on `stream` (inputs may be parts of one buffer; the
/// typed outputs must not overlap, nor repeat a byte within one item). Same errors as unpack.
void unpack_fused(std::span<const device_output> items, stream_t stream);

}  // namespace shunt::gpu
