// src/compress/none.cpp: libshunt_compress_gpu built without CUDA: every device compressor reports
// that there is no device support.
#include <shunt/compress/gpu.hpp>
#include <shunt/errors.hpp>

namespace shunt::compress::gpu {
namespace {

[[noreturn]] void no_device() { throw unsupported("shunt was built without CUDA: no device compressors"); }

}  // namespace

void compress(const params&, const float*, std::int64_t, void*, void*, stream_t, std::uint64_t) { no_device(); }
void decompress(const params&, const void*, std::int64_t, float*, stream_t, std::uint64_t) { no_device(); }
void decompress_accumulate(const params&, const void*, std::int64_t, float*, stream_t, std::uint64_t) { no_device(); }
void combine(sum_form, const void*, void*, std::int64_t, stream_t) { no_device(); }
void feedback_apply(const float*, const float*, float*, std::int64_t, stream_t) { no_device(); }
void feedback_update(const float*, const float*, float*, std::int64_t, stream_t) { no_device(); }

}  // namespace shunt::compress::gpu
