// bench/gpu/pingpong.cpp: bench-gpu-pingpong, round-trip latency between 2 ranks of a 2-D and a 3-D strided
// object in device memory, by each of shunt's device methods side by side (one-shot, staged, device) and
// through shunt's MPI_Send/MPI_Recv shims (the method SHUNT_PACK and the planner pick).
#include <shunt/config.hpp>
#include <shunt/datatype/layout.hpp>
#include <shunt/gpu/descriptor.hpp>
#include <shunt/gpu/pack.hpp>

#include <cuda_runtime.h>
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

int rank_ = 0;

[[noreturn]] void die(const std::string& what) {
    std::fprintf(stderr, "bench-gpu-pingpong rank %d: %s\n", rank_, what.c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::exit(1);
}
void need(cudaError_t rc, const char* call) {
    if (rc != cudaSuccess) die(std::string(call) + " failed: " + cudaGetErrorString(rc));
}
void need_mpi(int rc, const char* call) {
    if (rc != MPI_SUCCESS) die(std::string(call) + " failed");
}

/// `planes` planes of `rows` blocks of `block` bytes, rows 2 * block apart, planes two planes apart.
struct object {
    std::string name;
    std::int64_t block = 64, rows = 1, planes = 1;
    std::int64_t pitch() const { return 2 * block; }
    std::int64_t plane() const { return 2 * rows * pitch(); }
    std::int64_t payload() const { return block * rows * planes; }
    std::int64_t span() const { return (planes - 1) * plane() + (rows - 1) * pitch() + block; }
    shunt::layout form() const {
        return shunt::simplify(shunt::layout{{{planes, plane()}, {rows, pitch()}}, {{0, block}}});
    }
    MPI_Datatype mpi_type() const {
        MPI_Datatype row, t;
        need_mpi(
            MPI_Type_vector(static_cast<int>(rows), static_cast<int>(block), static_cast<int>(pitch()), MPI_BYTE, &row),
            "MPI_Type_vector");
        need_mpi(MPI_Type_create_hvector(static_cast<int>(planes), 1, plane(), row, &t), "MPI_Type_create_hvector");
        need_mpi(MPI_Type_commit(&t), "MPI_Type_commit");
        MPI_Type_free(&row);
        return t;
    }
};

object make(const std::string& family, std::int64_t payload) {
    object o;
    o.name = family + "/" + std::to_string(payload);
    const std::int64_t blocks = std::max<std::int64_t>(1, payload / o.block);
    if (family == "2d") {
        o.rows = blocks;
    } else {
        o.rows = 16;
        o.planes = std::max<std::int64_t>(1, blocks / 16);
    }
    return o;
}

/// Whether the MPI library takes device pointers: SHUNT_CUDA_AWARE when set, else the library's
/// own answer (Open MPI), as shunt's runtime decides it.
bool cuda_aware() {
    const shunt::config_snapshot& snap = shunt::config_state();
    for (std::size_t i = 0; i < shunt::config_variable_count; ++i)
        if (shunt::config_variables[i].name == "SHUNT_CUDA_AWARE" && snap.raw[i] && !snap.raw[i]->empty() &&
            !snap.rejected[i])
            return snap.values.cuda_aware;
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
    return MPIX_Query_cuda_support() == 1;
#else
    return false;
#endif
}

}  // namespace

int main(int argc, char** argv) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::fprintf(stderr, "bench-gpu-pingpong: no CUDA device: nothing to measure\n");
        return 77;
    }
    MPI_Init(&argc, &argv);
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) die("run with 2 ranks");
    int iters = 100, trials = 7;
    std::vector<std::int64_t> sizes = {4096, 65536, 1 << 20, 16 << 20};
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--quick") {
            sizes = {4096, 1 << 20};
            iters = 20;
            trials = 3;
        } else if (a == "--help") {
            if (rank_ == 0)
                std::printf(
                    "usage: mpirun -n 2 bench-gpu-pingpong [--quick]\n"
                    "Round-trip time (us, best of %d trials) of 2-D and 3-D device objects by one-shot (pack\n"
                    "into mapped pinned memory), staged (pack on the device, copy to pinned memory), device\n"
                    "(pack on the device, device pointer to MPI; CUDA-aware MPI only) and through shunt's\n"
                    "shims (MPI_Send/MPI_Recv; the method SHUNT_PACK picks). Exits 77 without a device.\n",
                    trials);
            MPI_Finalize();
            return 0;
        } else {
            die("unknown option " + a);
        }
    }
    need(cudaSetDevice(rank_ % devices), "cudaSetDevice");
    const bool aware = cuda_aware();
    const int peer = 1 - rank_;
    if (rank_ == 0)
        std::printf("%-14s %10s %12s %12s %12s %12s\n", "object", "payload", "one-shot us", "staged us",
                    aware ? "device us" : "device", "shunt us");
    for (const char* family : {"2d", "3d"})
        for (const std::int64_t bytes : sizes) {
            const object o = make(family, bytes);
            const std::int64_t payload = o.payload();
            const shunt::gpu::device_form form{shunt::gpu::flat_form(o.form(), o.span(), 1)};
            const MPI_Datatype type = o.mpi_type();
            void *typed = nullptr, *scratch = nullptr, *pinned = nullptr;
            need(cudaMalloc(&typed, static_cast<std::size_t>(o.span())), "cudaMalloc");
            need(cudaMalloc(&scratch, static_cast<std::size_t>(payload)), "cudaMalloc");
            need(cudaHostAlloc(&pinned, static_cast<std::size_t>(payload), cudaHostAllocMapped | cudaHostAllocPortable),
                 "cudaHostAlloc");
            need(cudaMemset(typed, rank_ + 1, static_cast<std::size_t>(o.span())), "cudaMemset");
            const int n = static_cast<int>(payload);
            auto sync = [] { need(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize"); };
            // One message each way by a method: pack and send, then receive and unpack (rank 0
            // sends first). Each method is the data path shunt's runtime takes for it.
            auto round_trip = [&](const std::function<void()>& send, const std::function<void()>& recv) {
                if (rank_ == 0) {
                    send();
                    recv();
                } else {
                    recv();
                    send();
                }
            };
            std::vector<std::pair<std::function<void()>, std::function<void()>>> methods = {
                {[&] {  // one-shot
                     shunt::gpu::pack(form, typed, pinned, nullptr);
                     sync();
                     need_mpi(PMPI_Send(pinned, n, MPI_BYTE, peer, 0, MPI_COMM_WORLD), "PMPI_Send");
                 },
                 [&] {
                     need_mpi(PMPI_Recv(pinned, n, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "PMPI_Recv");
                     shunt::gpu::unpack(form, pinned, typed, nullptr);
                     sync();
                 }},
                {[&] {  // staged
                     shunt::gpu::pack(form, typed, scratch, nullptr);
                     need(
                         cudaMemcpyAsync(pinned, scratch, static_cast<std::size_t>(n), cudaMemcpyDeviceToHost, nullptr),
                         "cudaMemcpyAsync");
                     sync();
                     need_mpi(PMPI_Send(pinned, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD), "PMPI_Send");
                 },
                 [&] {
                     need_mpi(PMPI_Recv(pinned, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "PMPI_Recv");
                     need(
                         cudaMemcpyAsync(scratch, pinned, static_cast<std::size_t>(n), cudaMemcpyHostToDevice, nullptr),
                         "cudaMemcpyAsync");
                     shunt::gpu::unpack(form, scratch, typed, nullptr);
                     sync();
                 }},
                {[&] {  // device: the packed device buffer handed to a CUDA-aware MPI
                     shunt::gpu::pack(form, typed, scratch, nullptr);
                     sync();
                     need_mpi(PMPI_Send(scratch, n, MPI_BYTE, peer, 2, MPI_COMM_WORLD), "PMPI_Send");
                 },
                 [&] {
                     need_mpi(PMPI_Recv(scratch, n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "PMPI_Recv");
                     shunt::gpu::unpack(form, scratch, typed, nullptr);
                     sync();
                 }},
                {[&] { need_mpi(MPI_Send(typed, 1, type, peer, 3, MPI_COMM_WORLD), "MPI_Send"); },  // shunt's shims
                 [&] { need_mpi(MPI_Recv(typed, 1, type, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv"); }},
            };
            std::vector<double> best(methods.size(), 1e30);
            for (int t = 0; t < trials; ++t)
                for (std::size_t m = 0; m < methods.size(); ++m) {
                    if (m == 2 && !aware) continue;
                    round_trip(methods[m].first, methods[m].second);  // warm-up
                    need_mpi(PMPI_Barrier(MPI_COMM_WORLD), "PMPI_Barrier");
                    const double t0 = MPI_Wtime();
                    for (int i = 0; i < iters; ++i) round_trip(methods[m].first, methods[m].second);
                    best[m] = std::min(best[m], (MPI_Wtime() - t0) / iters);
                }
            if (rank_ == 0) {
                char dev[16] = "n/a";
                if (aware) std::snprintf(dev, sizeof dev, "%.2f", best[2] * 1e6);
                std::printf("%-14s %10lld %12.2f %12.2f %12s %12.2f\n", o.name.c_str(), static_cast<long long>(payload),
                            best[0] * 1e6, best[1] * 1e6, dev, best[3] * 1e6);
                std::fflush(stdout);
            }
            MPI_Datatype t = type;
            MPI_Type_free(&t);
            cudaFree(typed);
            cudaFree(scratch);
            cudaFreeHost(pinned);
        }
    MPI_Finalize();
    return 0;
}
