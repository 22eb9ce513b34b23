// tests/nccl/double_device.cpp: device and managed buffers in the NCCL double: built with CUDA (SHUNT_DOUBLE_CUDA),
// each run synchronises its operations' streams, copies their device data to host copies, runs on those and copies
// the results back; without CUDA, or where no device is found (no driver), every buffer is host memory, as before.
#include "double_internal.hpp"

#if SHUNT_DOUBLE_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#endif

namespace shunt::test_double {

#if SHUNT_DOUBLE_CUDA
namespace {

// Whether this process sees a CUDA device, asked once: without a driver (the static runtime finds no libcuda.so.1)
// or without a device every later call answers "host" at once.
bool cuda_devices() {
    static const bool present = [] {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess) {
            (void)cudaGetLastError();
            return false;
        }
        return n > 0;
    }();
    return present;
}

enum class where { host, pinned, device };

// Device and managed memory are staged; pinned (registered) host memory is used in place once its stream has
// drained; anything CUDA does not know, or an error, is plain host memory.
where locate(const void* p, int* dev) {
    if (p == nullptr) return where::host;
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return where::host;
    }
    *dev = a.device;
    switch (a.type) {
        case cudaMemoryTypeDevice:
        case cudaMemoryTypeManaged: return where::device;
        case cudaMemoryTypeHost: return where::pinned;
        default: return where::host;
    }
}

// The bytes an operation reads at sendbuff and writes at recvbuff on this rank (0: it does not touch the buffer;
// NCCL allows any pointer there, null included).
void extents(const op& o, size_t* send, size_t* recv) {
    const size_t b = o.count * type_size(o.type), all = b * size_t(o.c->nranks);
    const bool root = o.c->rank == o.root;
    *send = *recv = 0;
    switch (o.fn) {
        case func::allreduce: *send = b, *recv = b; break;
        case func::reduce: *send = b, *recv = root ? b : 0; break;
        case func::broadcast: *send = root ? b : 0, *recv = b; break;
        case func::reduce_scatter: *send = all, *recv = b; break;
        case func::allgather: *send = b, *recv = all; break;
        case func::alltoall: *send = all, *recv = all; break;
        case func::gather: *send = b, *recv = root ? all : 0; break;
        case func::scatter: *send = root ? all : 0, *recv = b; break;
        case func::send: *send = b; break;
        case func::recv: *recv = b; break;
        case func::split_exchange:
        case func::shrink_exchange: break;  // the double's own records, in host memory
    }
}

ncclResult_t cuda_failed(const char* call, const char* what, cudaError_t e) {
    (void)cudaGetLastError();
    return fail(ncclUnhandledCudaError, "%s: %s: %s", call, what, cudaGetErrorString(e));
}

// Makes `dev` the calling thread's device while the copies run (stream 0 means that device's legacy stream), and
// gives the caller its own device back.
struct device_guard {
    int saved = -1, current = -1;
    cudaError_t use(int dev) {
        if (saved < 0) {
            const cudaError_t e = cudaGetDevice(&saved);
            if (e != cudaSuccess) return e;
            current = saved;
        }
        if (dev < 0 || dev == current) return cudaSuccess;
        const cudaError_t e = cudaSetDevice(dev);
        if (e == cudaSuccess) current = dev;
        return e;
    }
    ~device_guard() {
        if (saved >= 0 && current != saved) (void)cudaSetDevice(saved);
    }
};

void add_stream(device_stage* s, cudaStream_t stream, int dev) {
    for (const auto& [st, d] : s->streams)
        if (st == stream && d == dev) return;
    s->streams.emplace_back(stream, dev);
}

ncclResult_t synchronize(const device_stage& s, device_guard& g, const char* call) {
    for (const auto& [stream, dev] : s.streams) {
        cudaError_t e = g.use(dev);
        if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
        if (e != cudaSuccess) return cuda_failed(call, "cudaStreamSynchronize", e);
    }
    return ncclSuccess;
}

}  // namespace

ncclResult_t stage_in(const std::vector<op*>& ops, const char* call, device_stage* s) {
    if (!cuda_devices()) return ncclSuccess;
    device_guard g;
    for (op* o : ops) {
        size_t sb = 0, rb = 0;
        extents(*o, &sb, &rb);
        int sdev = -1, rdev = -1, cdev = -1;
        const where sw = sb > 0 ? locate(o->sendbuff, &sdev) : where::host;
        const where rw = rb > 0 ? locate(o->recvbuff, &rdev) : where::host;
        const where cw = o->red.scalar_ptr != nullptr ? locate(o->red.scalar_ptr, &cdev) : where::host;
        if (sw == where::host && rw == where::host && cw == where::host) continue;
        const int dev = sw != where::host ? sdev : rw != where::host ? rdev : cdev;
        // NCCL's calls are ordered on their stream, the double's run on the host: what the stream holds ends first,
        // which a stream being captured into a graph cannot do.
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        cudaError_t e = g.use(dev);
        if (e == cudaSuccess) e = cudaStreamIsCapturing(o->stream, &capture);
        if (e != cudaSuccess) return cuda_failed(call, "cudaStreamIsCapturing", e);
        if (capture != cudaStreamCaptureStatusNone)
            return fail(ncclInvalidUsage, "%s: the NCCL double cannot run device buffers in a stream being captured",
                        call);
        add_stream(s, o->stream, dev);
        const auto* send = static_cast<const char*>(o->sendbuff);
        auto* recv = static_cast<char*>(o->recvbuff);
        // One host copy spans both buffers where they overlap (in place, or the in-place forms of allgather and
        // reduce-scatter), so that the run sees the same aliasing; the input is copied in, the output copied back.
        const bool both = sw == where::device && rw == where::device;
        const uintptr_t s0 = uintptr_t(send), r0 = uintptr_t(recv);
        if (both && s0 < r0 + rb && r0 < s0 + sb) {
            const uintptr_t lo = std::min(s0, r0), hi = std::max(s0 + sb, r0 + rb);
            device_stage::buffer& b = s->buffers.emplace_back();
            b.host.resize(hi - lo);
            b.device = recv, b.bytes = rb, b.offset = r0 - lo, b.stream = o->stream, b.dev = rdev;
            e = cudaMemcpyAsync(b.host.data() + (s0 - lo), send, sb, cudaMemcpyDefault, o->stream);
            if (e != cudaSuccess) return cuda_failed(call, "cudaMemcpyAsync of the input", e);
            o->sendbuff = b.host.data() + (s0 - lo);
            o->recvbuff = b.host.data() + (r0 - lo);
        } else {
            if (sw == where::device) {
                device_stage::buffer& b = s->buffers.emplace_back();
                b.host.resize(sb);
                b.stream = o->stream, b.dev = sdev;  // input only: nothing goes back
                e = g.use(sdev);
                if (e == cudaSuccess) e = cudaMemcpyAsync(b.host.data(), send, sb, cudaMemcpyDefault, o->stream);
                if (e != cudaSuccess) return cuda_failed(call, "cudaMemcpyAsync of the input", e);
                o->sendbuff = b.host.data();
            }
            if (rw == where::device) {  // written whole by the run: nothing to copy in
                device_stage::buffer& b = s->buffers.emplace_back();
                b.host.resize(rb);
                b.device = recv, b.bytes = rb, b.offset = 0, b.stream = o->stream, b.dev = rdev;
                o->recvbuff = b.host.data();
            }
        }
        if (cw == where::device) {  // a PreMulSum scalar in device memory, read when the operation runs
            device_stage::buffer& b = s->buffers.emplace_back();
            b.host.resize(type_size(o->type));
            b.stream = o->stream, b.dev = cdev;
            e = g.use(cdev);
            if (e == cudaSuccess)
                e = cudaMemcpyAsync(b.host.data(), o->red.scalar_ptr, b.host.size(), cudaMemcpyDefault, o->stream);
            if (e != cudaSuccess) return cuda_failed(call, "cudaMemcpyAsync of the scalar", e);
            o->red.scalar_ptr = b.host.data();
        }
    }
    return synchronize(*s, g, call);
}

ncclResult_t stage_out(device_stage& s, const char* call) {
    if (s.streams.empty()) return ncclSuccess;
    device_guard g;
    for (const device_stage::buffer& b : s.buffers) {
        if (b.device == nullptr || b.bytes == 0) continue;
        cudaError_t e = g.use(b.dev);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(b.device, b.host.data() + b.offset, b.bytes, cudaMemcpyDefault, b.stream);
        if (e != cudaSuccess) return cuda_failed(call, "cudaMemcpyAsync of the result", e);
    }
    // The copies from pageable memory may still be in flight when cudaMemcpyAsync returns: they end before the call
    // does, as a blocking NCCL call's results are there once its stream is synchronised.
    return synchronize(s, g, call);
}

#else

ncclResult_t stage_in(const std::vector<op*>&, const char*, device_stage*) { return ncclSuccess; }
ncclResult_t stage_out(device_stage&, const char*) { return ncclSuccess; }

#endif

}  // namespace shunt::test_double
