// tests/gpu/gpu_alltoallw.cpp: MPI_Alltoallw and MPI_Neighbor_alltoallw of derived datatypes on device buffers, run
// under libshunt.so with SHUNT_PACK forcing each device method: what arrives in device memory must equal what
// PMPI_Alltoallw / PMPI_Neighbor_alltoallw (the library) deliver between host buffers. A plain MPI + CUDA
// program (not linked to shunt); exit 77 (skipped) without a CUDA device.
#include "gpu_mpi.hpp"

#include <cstdio>
#include <vector>

namespace {

using gpu_test::check_cuda;
using gpu_test::check_mpi;

int size_ = 1;

/// One block layout per peer over one buffer: type, count and byte displacement.
struct side {
    std::vector<MPI_Datatype> types;
    std::vector<int> counts, idispls;
    std::vector<MPI_Aint> adispls;
    std::size_t bytes = 0;
};

/// p blocks, block j of `types[(j + shift) % types.size()]` with `counts[j]` elements.
side layout(int p, const std::vector<MPI_Datatype>& types, const std::vector<int>& counts, int shift) {
    side s;
    std::size_t at = 64;
    for (int j = 0; j < p; ++j) {
        MPI_Datatype t = types[static_cast<std::size_t>(j + shift) % types.size()];
        MPI_Aint lb = 0, extent = 0, tlb = 0, textent = 0;
        MPI_Type_get_extent(t, &lb, &extent);
        MPI_Type_get_true_extent(t, &tlb, &textent);
        s.types.push_back(t);
        s.counts.push_back(counts[static_cast<std::size_t>(j)]);
        s.idispls.push_back(static_cast<int>(at));
        s.adispls.push_back(static_cast<MPI_Aint>(at));
        at += static_cast<std::size_t>(counts[static_cast<std::size_t>(j)] > 0
                                           ? (counts[static_cast<std::size_t>(j)] - 1) * extent + tlb + textent
                                           : 0) +
              40;
    }
    s.bytes = at + 64;
    return s;
}

/// gpu_test::compare over the byte spans of two layouts.
template <class Call, class Oracle>
void compare(const char* what, const side& s, const side& r, bool send_device, bool recv_device, bool in_place,
             Call call, Oracle oracle) {
    gpu_test::compare(what, s.bytes, r.bytes, send_device, recv_device, in_place, call, oracle);
}

}  // namespace

int main(int argc, char** argv) {
    if (!gpu_test::have_device("gpu_alltoallw")) return 77;
    size_ = gpu_test::start(argc, argv, "gpu_alltoallw");

    // Types of 48 doubles each (the signatures match whatever pair meets): a column block, a 3-D
    // subarray face, an indexed type with gaps, a resized vector, and a contiguous one.
    MPI_Datatype col, face, idx, wide, tmp, flat;
    check_mpi(MPI_Type_vector(12, 4, 10, MPI_DOUBLE, &col), "vector");
    const int sizes[3] = {8, 8, 8}, sub[3] = {6, 8, 1}, start[3] = {1, 0, 3};
    check_mpi(MPI_Type_create_subarray(3, sizes, sub, start, MPI_ORDER_C, MPI_DOUBLE, &face), "subarray");
    const int bl[3] = {20, 8, 20}, dp[3] = {0, 25, 40};
    check_mpi(MPI_Type_indexed(3, bl, dp, MPI_DOUBLE, &idx), "indexed");
    check_mpi(MPI_Type_vector(24, 2, 3, MPI_DOUBLE, &tmp), "vector");
    check_mpi(MPI_Type_create_resized(tmp, 0, 600 * 8, &wide), "resized");
    MPI_Type_free(&tmp);
    check_mpi(MPI_Type_contiguous(48, MPI_DOUBLE, &flat), "contiguous");
    for (MPI_Datatype* t : {&col, &face, &idx, &wide, &flat}) check_mpi(MPI_Type_commit(t), "commit");
    const std::vector<MPI_Datatype> pool = {col, face, idx, wide, flat};

    for (int big = 0; big < 2; ++big) {  // below and above one-shot's 64 KiB of packed bytes
        std::vector<int> counts(static_cast<std::size_t>(size_));
        for (int j = 0; j < size_; ++j)
            counts[static_cast<std::size_t>(j)] = big ? 200 : (j + gpu_test::rank) % 3;  // some 0
        // What i sends j is counts_i[j] = (i + j) % 3: symmetric, as MPI_IN_PLACE needs.
        const side s = layout(size_, pool, counts, gpu_test::rank);
        const side r = layout(size_, pool, counts, gpu_test::rank + 2);
        for (int way = 0; way < 4; ++way) {  // device to device, host to device, device to host, in place
            const bool sdev = way != 1, rdev = way != 2, in_place = way == 3;
            char what[96];
            std::snprintf(what, sizeof what, "MPI_Alltoallw %s, way %d", big ? "large" : "small", way);
            const side& snd = in_place ? r : s;
            compare(
                what, snd, r, sdev, rdev, in_place,
                [&](const void* sb, void* rb) {
                    check_mpi(MPI_Alltoallw(sb, snd.counts.data(), snd.idispls.data(), snd.types.data(), rb,
                                            r.counts.data(), r.idispls.data(), r.types.data(), MPI_COMM_WORLD),
                              "MPI_Alltoallw");
                },
                [&](const void* sb, void* rb) {
                    check_mpi(PMPI_Alltoallw(sb, snd.counts.data(), snd.idispls.data(), snd.types.data(), rb,
                                             r.counts.data(), r.idispls.data(), r.types.data(), MPI_COMM_WORLD),
                              "PMPI_Alltoallw");
                });
        }
    }

    for (int periodic = 0; periodic < 2; ++periodic) {  // a ring: MPI_PROC_NULL at the ends when not periodic
        MPI_Comm ring;
        const int dims[1] = {size_}, periods[1] = {periodic};
        check_mpi(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring), "MPI_Cart_create");
        const std::vector<int> counts = {3, 3};
        const side s = layout(2, pool, counts, 1), r = layout(2, pool, counts, 3);
        compare(
            periodic ? "MPI_Neighbor_alltoallw, periodic ring" : "MPI_Neighbor_alltoallw, open ring", s, r, true, true,
            false,
            [&](const void* sb, void* rb) {
                check_mpi(MPI_Neighbor_alltoallw(sb, s.counts.data(), s.adispls.data(), s.types.data(), rb,
                                                 r.counts.data(), r.adispls.data(), r.types.data(), ring),
                          "MPI_Neighbor_alltoallw");
            },
            [&](const void* sb, void* rb) {
                check_mpi(PMPI_Neighbor_alltoallw(sb, s.counts.data(), s.adispls.data(), s.types.data(), rb,
                                                  r.counts.data(), r.adispls.data(), r.types.data(), ring),
                          "PMPI_Neighbor_alltoallw");
            });
        MPI_Comm_free(&ring);
    }

    if (gpu_test::rank == 0)
        std::printf("gpu_alltoallw: %d calls, device equal to the library on host\n", gpu_test::checked);
    for (MPI_Datatype* t : {&col, &face, &idx, &wide, &flat}) MPI_Type_free(t);
    MPI_Finalize();
    return 0;
}
