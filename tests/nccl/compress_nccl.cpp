// tests/nccl/compress_nccl.cpp: an NCCL training loop's float gradients summed with ncclAllReduce, each checked against the sum the program computes itself (run by run_compress_nccl.py, on the CPU double).
//
// Usage: compress-nccl exact|lossy [NAN_STEP]
//   exact  every ncclAllReduce result must equal the program's own sum bit for bit (no consent)
//   lossy  the consented float sums within the compressors' bound (relative L2 error under 5e-2),
//          every other call bit for bit, and every result equal on every rank
//   NAN_STEP: at that step rank 1 (or 0) puts a NaN into the largest gradient: that call's result
//          must be NaN exactly there and exact elsewhere (the guard sends it to NCCL unchanged).
// Each step: three gradients (one in place) and a loss of one float summed with ncclAllReduce; a
// gradient summed inside ncclGroupStart/End, one reduced with ncclMax and one of int32: calls that
// are never compressed. The values are multiples of 2^-16 below 2 in magnitude, so that every
// float sum of up to 64 ranks is exact in any order: the program's reference is exact, and "bit
// for bit" does not depend on NCCL's order of additions; FP16 (11 bits) cannot hold them exactly,
// so a compressed sum shows an error. MPI only bootstraps and compares.
// Prints one line "compress_nccl: ..." on rank 0; exits 1 on any violation.
#include <mpi.h>
#include <nccl.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int steps = 12;
constexpr int tensors = 3;
constexpr int sizes[tensors] = {1 << 20, 65536 + 17, 300000};

int world_rank = 0, world_size = 1;
int failures = 0;
double worst = 0;

/// A gradient-like value, a multiple of 2^-16 in (-2, 2): waves different per rank and step.
float value(int rank, int step, int t, int i) {
    const double x = static_cast<double>(i) * 0.001 + t;
    const double v = std::sin(x * (1 + rank) + step) + 0.3 * std::cos(7 * x + rank * 0.5) + 0.01 * (i % 13 - 6);
    return static_cast<float>(std::round(v * 65536) / 65536);
}

/// The sum over every rank of value(), computed here (exact: see the file's comment).
void reference(int step, int t, int n, std::vector<float>& want) {
    want.assign(static_cast<std::size_t>(n), 0.0f);
    for (int r = 0; r < world_size; ++r)
        for (int i = 0; i < n; ++i) want[static_cast<std::size_t>(i)] += value(r, step, t, i);
}

void nccl_ok(ncclResult_t r, const char* what) {
    if (r == ncclSuccess) return;
    std::fprintf(stderr, "compress_nccl rank %d: %s: %s\n", world_rank, what, ncclGetErrorString(r));
    MPI_Abort(MPI_COMM_WORLD, 1);
}

void check(const char* what, int step, const float* got, const std::vector<float>& want, bool exact, int nan_at) {
    double d = 0, w = 0;
    const int n = static_cast<int>(want.size());
    for (int i = 0; i < n; ++i) {
        if (i == nan_at) {
            if (!std::isnan(got[i])) {
                std::fprintf(stderr, "%s step %d: element %d should be NaN, is %g\n", what, step, i, got[i]);
                ++failures;
            }
            continue;
        }
        if (exact && std::memcmp(&got[i], &want[static_cast<std::size_t>(i)], 4) != 0) {
            std::fprintf(stderr, "%s step %d: element %d is %.9g, the sum %.9g\n", what, step, i, got[i],
                         want[static_cast<std::size_t>(i)]);
            ++failures;
            return;
        }
        const double e = static_cast<double>(got[i]) - want[static_cast<std::size_t>(i)];
        d += e * e;
        w += static_cast<double>(want[static_cast<std::size_t>(i)]) * want[static_cast<std::size_t>(i)];
    }
    const double rel = w > 0 ? std::sqrt(d / w) : std::sqrt(d);
    if (rel > worst) worst = rel;
    if (rel > 5e-2) {
        std::fprintf(stderr, "%s step %d: relative error %g\n", what, step, rel);
        ++failures;
    }
}

/// True when every rank holds the same bytes.
bool same_everywhere(const void* v, std::size_t bytes) {
    std::uint64_t h = 1469598103934665603ull;
    const auto* b = static_cast<const unsigned char*>(v);
    for (std::size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
    std::uint64_t lo = h, hi = h;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    const bool exact = argc > 1 && std::strcmp(argv[1], "exact") == 0;
    const int nan_step = argc > 2 ? std::atoi(argv[2]) : -1;
    const int nan_rank = world_size > 1 ? 1 : 0;

    ncclUniqueId id{};
    if (world_rank == 0) nccl_ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm = nullptr;
    nccl_ok(ncclCommInitRank(&comm, world_size, id, world_rank), "ncclCommInitRank");
    cudaStream_t stream = nullptr;  // the double's calls complete before they return

    std::vector<float> in[tensors], out[tensors], want;
    for (int t = 0; t < tensors; ++t) {
        in[t].resize(static_cast<std::size_t>(sizes[t]));
        out[t].resize(static_cast<std::size_t>(sizes[t]));
    }
    constexpr int other = 200000;  // the grouped, the max and the int32 calls
    std::vector<float> g(other), gmax(other);
    std::vector<std::int32_t> gi(other);
    bool identical = true;
    long long calls = 0;
    for (int step = 0; step < steps; ++step) {
        for (int t = 0; t < tensors; ++t) {
            const int n = sizes[t];
            for (int i = 0; i < n; ++i) in[t][static_cast<std::size_t>(i)] = value(world_rank, step, t, i);
            const int nan_at = step == nan_step && t == 0 ? n / 3 : -1;
            if (nan_at >= 0 && world_rank == nan_rank) in[t][static_cast<std::size_t>(nan_at)] = NAN;
            if (t == 1) {  // in place
                out[t] = in[t];
                nccl_ok(ncclAllReduce(out[t].data(), out[t].data(), n, ncclFloat32, ncclSum, comm, stream),
                        "ncclAllReduce in place");
            } else {
                nccl_ok(ncclAllReduce(in[t].data(), out[t].data(), n, ncclFloat32, ncclSum, comm, stream),
                        "ncclAllReduce");
            }
            ++calls;
            reference(step, t, n, want);
            check("ncclAllReduce", step, out[t].data(), want, exact || nan_at >= 0, nan_at);
            identical = identical && same_everywhere(out[t].data(), out[t].size() * 4);
        }
        // The loss: one float.
        float loss = static_cast<float>(world_rank) + 0.5f * static_cast<float>(step), total = 0;
        nccl_ok(ncclAllReduce(&loss, &total, 1, ncclFloat32, ncclSum, comm, stream), "ncclAllReduce of the loss");
        float total_want = 0;
        for (int r = 0; r < world_size; ++r) total_want += static_cast<float>(r) + 0.5f * static_cast<float>(step);
        if (total != total_want) {
            std::fprintf(stderr, "loss step %d: %g, the sum %g\n", step, total, total_want);
            ++failures;
        }
        // Never compressed: a grouped sum, a maximum, an int32 sum; each exact.
        for (int i = 0; i < other; ++i) {
            g[static_cast<std::size_t>(i)] = value(world_rank, step, 5, i);
            gi[static_cast<std::size_t>(i)] = (i % 1000 - 500) * (world_rank + 1) + step;
        }
        nccl_ok(ncclGroupStart(), "ncclGroupStart");
        nccl_ok(ncclAllReduce(g.data(), g.data(), other, ncclFloat32, ncclSum, comm, stream), "grouped ncclAllReduce");
        nccl_ok(ncclGroupEnd(), "ncclGroupEnd");
        reference(step, 5, other, want);
        check("grouped ncclAllReduce", step, g.data(), want, true, -1);
        for (int i = 0; i < other; ++i) g[static_cast<std::size_t>(i)] = value(world_rank, step, 6, i);
        nccl_ok(ncclAllReduce(g.data(), gmax.data(), other, ncclFloat32, ncclMax, comm, stream), "ncclAllReduce max");
        for (int i = 0; i < other; ++i) {
            float m = value(0, step, 6, i);
            for (int r = 1; r < world_size; ++r) m = std::fmax(m, value(r, step, 6, i));
            if (gmax[static_cast<std::size_t>(i)] != m) {
                std::fprintf(stderr, "ncclMax step %d: element %d is %g, the maximum %g\n", step, i,
                             gmax[static_cast<std::size_t>(i)], m);
                ++failures;
                break;
            }
        }
        nccl_ok(ncclAllReduce(gi.data(), gi.data(), other, ncclInt32, ncclSum, comm, stream), "ncclAllReduce int32");
        for (int i = 0; i < other; ++i) {
            std::int32_t s = 0;
            for (int r = 0; r < world_size; ++r) s += (i % 1000 - 500) * (r + 1) + step;
            if (gi[static_cast<std::size_t>(i)] != s) {
                std::fprintf(stderr, "int32 sum step %d: element %d is %d, the sum %d\n", step, i,
                             gi[static_cast<std::size_t>(i)], s);
                ++failures;
                break;
            }
        }
    }
    if (!identical) {
        std::fprintf(stderr, "results differ between ranks\n");
        ++failures;
    }
    nccl_ok(ncclCommDestroy(comm), "ncclCommDestroy");
    int any = 0;
    MPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (world_rank == 0)
        std::printf(
            "compress_nccl: %d ranks, %d steps, %lld gradient sums, %s, largest relative error %.3g, %d "
            "failures\n",
            world_size, steps, calls, exact ? "exact" : "lossy", worst, any);
    MPI_Finalize();
    return any != 0;
}
