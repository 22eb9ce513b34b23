// tests/gpu/gpu_compress_mpi.cpp: gradient sums of float device buffers through MPI_Allreduce under the
// preload (run_gpu_compress_mpi.py sets the consent and reads the decide log): a 64 MiB gradient and a
// one-float loss per step, every other step in place, checked against the sum of every rank's values
// computed here in double, and equal on every rank. A plain MPI + CUDA program (not linked to shunt);
// exit 77 (skipped) without a CUDA device.
//
//   gpu_compress_mpi STEPS BOUND [NAN_STEP]
//   gpu_compress_mpi probe       (exit 0 with a device, 77 without; no MPI)
//
// BOUND: the largest relative L2 error of a gradient sum (0 for exact: within float rounding of the
// double sum). NAN_STEP: at that step rank 1 puts a NaN at element 5; the sum must hold NaN there and
// stay within float rounding elsewhere (the call runs exact).
#include "gpu_mpi.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using gpu_test::check_cuda;
using gpu_test::check_mpi;
using gpu_test::fail;

/// Rank r's value of element i at step s: small multiples of 1/1024 (sums of them are exact in double).
float value(int r, int s, std::int64_t i) {
    const auto h = static_cast<std::uint64_t>(i) * 2654435761u + static_cast<std::uint64_t>(r) * 97u +
                   static_cast<std::uint64_t>(s) * 131u;
    return static_cast<float>(static_cast<std::int64_t>(h % 2001) - 1000) / 1024.0f;
}

/// A hash of the result's bits, to compare across ranks.
std::uint64_t hash_of(const std::vector<float>& v) {
    std::uint64_t h = 1469598103934665603ull;
    for (const float x : v) {
        std::uint32_t b = 0;
        std::memcpy(&b, &x, 4);
        h = (h ^ b) * 1099511628211ull;
    }
    return h;
}

}  // namespace

int main(int argc, char** argv) {
    if (!gpu_test::have_device("gpu_compress_mpi")) return 77;
    if (argc > 1 && std::strcmp(argv[1], "probe") == 0) return 0;
    const int size = gpu_test::start(argc, argv, "gpu_compress_mpi");
    if (argc < 3) fail("usage: gpu_compress_mpi STEPS BOUND [NAN_STEP]");
    const int steps = std::atoi(argv[1]);
    const double bound = std::atof(argv[2]);
    const int nan_step = argc > 3 ? std::atoi(argv[3]) : -1;
    const int me = gpu_test::rank;
    constexpr std::int64_t n = std::int64_t{1} << 24;  // 64 MiB of floats
    const auto bytes = static_cast<std::size_t>(n) * 4;
    float *in = nullptr, *out = nullptr, *loss = nullptr;
    check_cuda(cudaMalloc(&in, bytes), "cudaMalloc");
    check_cuda(cudaMalloc(&out, bytes), "cudaMalloc");
    check_cuda(cudaMalloc(&loss, 4), "cudaMalloc");
    std::vector<float> host(static_cast<std::size_t>(n)), got(static_cast<std::size_t>(n));
    std::vector<double> exact(static_cast<std::size_t>(n));
    double worst = 0;
    for (int s = 0; s < steps; ++s) {
        for (std::int64_t i = 0; i < n; ++i) {
            host[static_cast<std::size_t>(i)] = value(me, s, i);
            double sum = 0;
            for (int r = 0; r < size; ++r) sum += value(r, s, i);
            exact[static_cast<std::size_t>(i)] = sum;
        }
        const bool nan_here = s == nan_step;
        if (nan_here && me == 1) host[5] = std::nanf("");
        const bool in_place = s % 2 == 1;
        check_cuda(cudaMemcpy(in_place ? out : in, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
        check_mpi(
            MPI_Allreduce(in_place ? MPI_IN_PLACE : in, out, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Allreduce of the gradient");
        // The loss: one float, below any threshold (kept exact).
        const float mine = static_cast<float>(me + 1);
        check_cuda(cudaMemcpy(loss, &mine, 4, cudaMemcpyHostToDevice), "cudaMemcpy");
        check_mpi(MPI_Allreduce(MPI_IN_PLACE, loss, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                  "MPI_Allreduce of the loss");
        float total = 0;
        check_cuda(cudaMemcpy(&total, loss, 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
        if (total != static_cast<float>(size * (size + 1) / 2)) fail("the loss's sum is not exact");
        check_cuda(cudaMemcpy(got.data(), out, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");

        double diff = 0, norm = 0;
        for (std::int64_t i = 0; i < n; ++i) {
            const auto k = static_cast<std::size_t>(i);
            if (nan_here && i == 5) {
                if (!std::isnan(got[k])) fail("the NaN is not in the sum");
                continue;
            }
            const double d = static_cast<double>(got[k]) - exact[k];
            diff += d * d;
            norm += exact[k] * exact[k];
        }
        const double rel = std::sqrt(diff / norm);
        const double allowed = nan_here || bound == 0 ? 1e-6 : bound;
        if (!(rel <= allowed)) {
            char msg[160];
            std::snprintf(msg, sizeof msg, "step %d: relative error %.3g over %.3g", s, rel, allowed);
            fail(msg);
        }
        if (!nan_here) worst = std::max(worst, rel);
        // The same bits on every rank.
        const std::uint64_t h = hash_of(got);
        std::uint64_t lo = 0, hi = 0;
        check_mpi(MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce MIN");
        check_mpi(MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce MAX");
        if (lo != hi) fail("the ranks' sums differ");
    }
    if (me == 0)
        std::printf("gpu_compress_mpi: %d steps of %lld floats on %d ranks right, largest relative error %.3g\n", steps,
                    static_cast<long long>(n), size, worst);
    cudaFree(in);
    cudaFree(out);
    cudaFree(loss);
    MPI_Finalize();
    return 0;
}
