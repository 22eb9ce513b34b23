// tests/gpu/gpu_p2p.cpp: device buffers with derived datatypes in point-to-point calls at 2 ranks, run
// under libshunt.so with SHUNT_PACK forcing each device method: what arrives in device memory must equal
// what the same calls deliver between host buffers. A plain MPI + CUDA program (not linked to shunt);
// exit 77 (skipped) without a CUDA device.
#include "gpu_mpi.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using gpu_test::check_cuda;
using gpu_test::check_mpi;
using gpu_test::fail;
using gpu_test::fill;

struct test_type {
    const char* name;
    MPI_Datatype type;
    int count;
};

/// Bytes a buffer of `count` x `type` spans from its lower bound (all types here have lb >= 0).
std::size_t span_of(MPI_Datatype t, int count) {
    MPI_Aint lb = 0, extent = 0, tlb = 0, textent = 0;
    MPI_Type_get_extent(t, &lb, &extent);
    MPI_Type_get_true_extent(t, &tlb, &textent);
    return static_cast<std::size_t>(tlb + textent + (count - 1) * extent);
}

/// One exchange 0 -> 1 by `way` (0 Send/Recv, 1 Isend/Irecv + Wait, 2 Sendrecv both ways, 3 two
/// persistent sends of the buffer started by one MPI_Startall, which shunt packs in one fused
/// launch, into two persistent receives) with host or device buffers; returns what rank 1 (and
/// rank 0 for Sendrecv) received, as host bytes.
std::vector<unsigned char> exchange(const test_type& t, int way, bool device) {
    const std::size_t n = span_of(t.type, t.count);
    std::vector<unsigned char> out(n), in(n);
    fill(out, 100u + static_cast<unsigned>(gpu_test::rank) + static_cast<unsigned>(way));
    fill(in, 7u);
    void* sbuf = out.data();
    void* rbuf = in.data();
    if (device) {
        check_cuda(cudaMalloc(&sbuf, n), "cudaMalloc");
        check_cuda(cudaMalloc(&rbuf, n), "cudaMalloc");
        check_cuda(cudaMemcpy(sbuf, out.data(), n, cudaMemcpyHostToDevice), "cudaMemcpy");
        check_cuda(cudaMemcpy(rbuf, in.data(), n, cudaMemcpyHostToDevice), "cudaMemcpy");
    }
    MPI_Status st;
    int got = -1;
    if (way == 3) {
        MPI_Request rq[2];
        void* second = nullptr;
        std::vector<unsigned char> copy(n);
        if (gpu_test::rank == 0) {
            for (int k = 0; k < 2; ++k)
                check_mpi(MPI_Send_init(sbuf, t.count, t.type, 1, 30 + k, MPI_COMM_WORLD, &rq[k]), "MPI_Send_init");
        } else {
            if (device) {
                check_cuda(cudaMalloc(&second, n), "cudaMalloc");
                check_cuda(cudaMemcpy(second, in.data(), n, cudaMemcpyHostToDevice), "cudaMemcpy");
            } else {
                copy = in;
                second = copy.data();
            }
            check_mpi(MPI_Recv_init(rbuf, t.count, t.type, 0, 30, MPI_COMM_WORLD, &rq[0]), "MPI_Recv_init");
            check_mpi(MPI_Recv_init(second, t.count, t.type, 0, 31, MPI_COMM_WORLD, &rq[1]), "MPI_Recv_init");
        }
        check_mpi(MPI_Startall(2, rq), "MPI_Startall");
        check_mpi(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE), "MPI_Waitall");
        for (auto& r : rq) check_mpi(MPI_Request_free(&r), "MPI_Request_free");
        if (gpu_test::rank == 1) {
            // Both receives hold the same message.
            std::vector<unsigned char> a(n), b(n);
            if (device) {
                check_cuda(cudaMemcpy(a.data(), rbuf, n, cudaMemcpyDeviceToHost), "cudaMemcpy");
                check_cuda(cudaMemcpy(b.data(), second, n, cudaMemcpyDeviceToHost), "cudaMemcpy");
                cudaFree(second);
            } else {
                a = in, b = copy;
            }
            if (a != b) fail("the two persistent receives of one MPI_Startall differ");
        }
    } else if (way == 0 || way == 1) {
        if (gpu_test::rank == 0) {
            if (way == 0) {
                check_mpi(MPI_Send(sbuf, t.count, t.type, 1, way, MPI_COMM_WORLD), "MPI_Send");
            } else {
                MPI_Request r;
                check_mpi(MPI_Isend(sbuf, t.count, t.type, 1, way, MPI_COMM_WORLD, &r), "MPI_Isend");
                check_mpi(MPI_Wait(&r, MPI_STATUS_IGNORE), "MPI_Wait");
            }
        } else {
            if (way == 0) {
                check_mpi(MPI_Recv(rbuf, t.count, t.type, 0, way, MPI_COMM_WORLD, &st), "MPI_Recv");
            } else {
                MPI_Request r;
                check_mpi(MPI_Irecv(rbuf, t.count, t.type, 0, way, MPI_COMM_WORLD, &r), "MPI_Irecv");
                check_mpi(MPI_Wait(&r, &st), "MPI_Wait");
            }
            check_mpi(MPI_Get_count(&st, t.type, &got), "MPI_Get_count");
            if (got != t.count) fail("MPI_Get_count with the original type");
        }
    } else {
        const int peer = 1 - gpu_test::rank;
        check_mpi(MPI_Sendrecv(sbuf, t.count, t.type, peer, way, rbuf, t.count, t.type, peer, way, MPI_COMM_WORLD, &st),
                  "MPI_Sendrecv");
    }
    if (device) {
        check_cuda(cudaMemcpy(in.data(), rbuf, n, cudaMemcpyDeviceToHost), "cudaMemcpy");
        cudaFree(sbuf);
        cudaFree(rbuf);
    }
    return in;
}

}  // namespace

int main(int argc, char** argv) {
    if (!gpu_test::have_device("gpu_p2p")) return 77;
    if (gpu_test::start(argc, argv, "gpu_p2p") != 2) fail("run at 2 ranks");

    // A 2-D column block of a row-major matrix, a 3-D subarray face (below ONE_SHOT's 64 KiB),
    // a large 3-D slab (STAGED), and an indexed type with gaps.
    MPI_Datatype col, face, slab, idx;
    check_mpi(MPI_Type_vector(256, 16, 100, MPI_DOUBLE, &col), "vector");
    const int sizes[3] = {48, 48, 48}, fsub[3] = {48, 48, 3}, start[3] = {0, 0, 2};
    check_mpi(MPI_Type_create_subarray(3, sizes, fsub, start, MPI_ORDER_C, MPI_DOUBLE, &face), "subarray");
    const int ssub[3] = {40, 30, 44};
    check_mpi(MPI_Type_create_subarray(3, sizes, ssub, start, MPI_ORDER_C, MPI_DOUBLE, &slab), "subarray");
    const int bl[3] = {3, 1, 5}, dp[3] = {0, 7, 11};
    check_mpi(MPI_Type_indexed(3, bl, dp, MPI_FLOAT, &idx), "indexed");
    for (MPI_Datatype* t : {&col, &face, &slab, &idx}) check_mpi(MPI_Type_commit(t), "commit");
    const test_type types[] = {
        {"2-D column", col, 1}, {"3-D face", face, 1}, {"3-D slab", slab, 1}, {"indexed", idx, 40}};

    int checked = 0;
    for (const auto& t : types)
        for (int way = 0; way < 4; ++way) {
            const auto host = exchange(t, way, false);
            const auto dev = exchange(t, way, true);
            if ((gpu_test::rank == 1 || way == 2) && std::memcmp(host.data(), dev.data(), host.size()) != 0) {
                std::fprintf(stderr, "gpu_p2p rank %d: %s way %d: device result differs from host\n", gpu_test::rank,
                             t.name, way);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            ++checked;
        }
    if (gpu_test::rank == 0) std::printf("gpu_p2p: %d exchanges, device equal to host\n", checked);
    for (MPI_Datatype* t : {&col, &face, &slab, &idx}) MPI_Type_free(t);
    MPI_Finalize();
    return 0;
}
