// tests/gpu/gpu_mpi.hpp: what the plain MPI + CUDA test programs of the gpu suite share: failing with the
// rank named, checked CUDA and MPI calls, seeded buffer contents, buffers placed on the device or the host,
// and the comparison of a call on device buffers with the library's on host buffers.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace gpu_test {

/// The program's name and this process's rank, for messages (set after MPI_Init).
inline const char* program = "gpu test";
inline int rank = 0;

[[noreturn]] inline void fail(const char* what) {
    std::fprintf(stderr, "%s rank %d: %s\n", program, rank, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();
}

inline void check_cuda(cudaError_t rc, const char* what) {
    if (rc != cudaSuccess) fail(what);
}

inline void check_mpi(int rc, const char* what) {
    if (rc != MPI_SUCCESS) fail(what);
}

/// Fills `v` with bytes from a seeded xorshift generator.
inline void fill(std::vector<unsigned char>& v, unsigned seed) {
    std::uint32_t x = seed * 2654435761u + 1u;
    for (auto& b : v) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        b = static_cast<unsigned char>(x >> 9);
    }
}

/// A buffer on the device (or the host) holding `init`.
inline void* place(const std::vector<unsigned char>& init, bool device) {
    void* p = nullptr;
    if (device) {
        check_cuda(cudaMalloc(&p, init.size()), "cudaMalloc");
        check_cuda(cudaMemcpy(p, init.data(), init.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    } else {
        p = std::malloc(init.size());
        std::memcpy(p, init.data(), init.size());
    }
    return p;
}

/// The `n` bytes of a buffer from place(), which is freed.
inline std::vector<unsigned char> take(void* p, std::size_t n, bool device) {
    std::vector<unsigned char> out(n);
    if (device) {
        check_cuda(cudaMemcpy(out.data(), p, n, cudaMemcpyDeviceToHost), "cudaMemcpy");
        cudaFree(p);
    } else {
        std::memcpy(out.data(), p, n);
        std::free(p);
    }
    return out;
}

/// Calls counted by compare().
inline int checked = 0;

/// Runs `call(send, recv)` (through MPI_*, under the preload) on a send buffer of `send_bytes` and a
/// receive buffer of `recv_bytes`, each on the device or the host, and `oracle(send, recv)` (PMPI_*)
/// on host copies of the same contents, and requires the receive buffers to end equal, byte for byte
/// (bytes the call must not touch included). In place: the send buffer is MPI_IN_PLACE. From byte
/// `untouched_from` on (an in-place reduce-scatter's input past the rank's block) the receive
/// buffer may also hold what it held before the call (shunt's schedules leave it so), where the
/// library may have used it as scratch.
template <class Call, class Oracle>
void compare(const char* what, std::size_t send_bytes, std::size_t recv_bytes, bool send_device, bool recv_device,
             bool in_place, Call call, Oracle oracle, std::size_t untouched_from = SIZE_MAX) {
    std::vector<unsigned char> sinit(send_bytes), rinit(recv_bytes);
    fill(sinit, 11u + static_cast<unsigned>(rank));
    fill(rinit, 23u + static_cast<unsigned>(rank));
    void* sd = in_place ? nullptr : place(sinit, send_device);
    void* rd = place(rinit, recv_device);
    call(in_place ? MPI_IN_PLACE : sd, rd);
    const auto got = take(rd, recv_bytes, recv_device);
    if (sd != nullptr) take(sd, send_bytes, send_device);
    std::vector<unsigned char> shost = sinit, rhost = rinit;
    oracle(in_place ? MPI_IN_PLACE : static_cast<void*>(shost.data()), static_cast<void*>(rhost.data()));
    if (untouched_from < rhost.size() &&
        std::equal(got.begin() + static_cast<std::ptrdiff_t>(untouched_from), got.end(),
                   rinit.begin() + static_cast<std::ptrdiff_t>(untouched_from)))
        std::copy(rinit.begin() + static_cast<std::ptrdiff_t>(untouched_from), rinit.end(),
                  rhost.begin() + static_cast<std::ptrdiff_t>(untouched_from));
    const std::size_t n = got.size();
    if (const auto diff = std::mismatch(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(n), rhost.begin());
        diff.first != got.begin() + static_cast<std::ptrdiff_t>(n)) {
        const std::ptrdiff_t at = diff.first - got.begin();
        unsigned g = 0, want = 0, before = 0;  // the 4-byte word there: got, the library's, the initial
        const std::size_t w = static_cast<std::size_t>(at) / 4 * 4;
        if (w + 4 <= got.size()) {
            std::memcpy(&g, got.data() + w, 4);
            std::memcpy(&want, rhost.data() + w, 4);
            std::memcpy(&before, rinit.data() + w, 4);
        }
        std::fprintf(stderr,
                     "%s rank %d: %s: device result differs from the library's at byte %td of %zu (word there: got %u, "
                     "library %u, before the call %u)\n",
                     program, rank, what, at, n, g, want, before);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    ++checked;
}

/// True when a CUDA device is present (else the program prints why and exits 77, skipped).
inline bool have_device(const char* name) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("%s: no CUDA device: skipped\n", name);
        return false;
    }
    return true;
}

/// MPI_Init, then the program's name, this process's rank and its device (rank modulo the
/// devices there are) set; returns the number of ranks.
inline int start(int& argc, char**& argv, const char* name) {
    MPI_Init(&argc, &argv);
    program = name;
    int size = 0, devices = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    check_cuda(cudaSetDevice(rank % devices), "cudaSetDevice");
    return size;
}

}  // namespace gpu_test
