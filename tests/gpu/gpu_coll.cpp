// tests/gpu/gpu_coll.cpp: every collective shunt interposes (MPI_Allreduce, Reduce, Reduce_scatter_block,
// Reduce_scatter, Allgather, Allgatherv, Bcast, Alltoall, Alltoallv) on device buffers, with datatypes with
// gaps and in place, run under libshunt.so: what ends in device memory must equal what the library
// (PMPI_*) leaves in host buffers of the same contents. A plain MPI + CUDA program (not linked to shunt);
// exit 77 (skipped) without a CUDA device.
#include "gpu_mpi.hpp"

#include <cstdio>
#include <numeric>
#include <vector>

namespace {

using gpu_test::check_cuda;
using gpu_test::check_mpi;
using gpu_test::compare;

constexpr std::size_t word = sizeof(unsigned);

}  // namespace

int main(int argc, char** argv) {
    if (!gpu_test::have_device("gpu_coll")) return 77;
    const int size = gpu_test::start(argc, argv, "gpu_coll");
    const int me = gpu_test::rank;
    const MPI_Comm comm = MPI_COMM_WORLD;
    const auto n_ranks = static_cast<std::size_t>(size);

    for (const int n : {100, 65536}) {  // two size classes: small and 256 KiB per rank
        const auto un = static_cast<std::size_t>(n);
        // n unsigned ints every other word: a type with gaps whose elements tile (extent 2n words).
        MPI_Datatype every_other, gapped;
        check_mpi(MPI_Type_vector(n, 1, 2, MPI_UNSIGNED, &every_other), "MPI_Type_vector");
        check_mpi(MPI_Type_create_resized(every_other, 0, static_cast<MPI_Aint>(2 * un * word), &gapped), "resized");
        check_mpi(MPI_Type_commit(&gapped), "MPI_Type_commit");
        MPI_Type_free(&every_other);

        // Uneven parts: rank r's share is n + r elements.
        std::vector<int> parts(n_ranks), displs(n_ranks);
        for (int r = 0; r < size; ++r) parts[static_cast<std::size_t>(r)] = n + r;
        const std::size_t total = static_cast<std::size_t>(std::accumulate(parts.begin(), parts.end(), 0));
        // Alltoallv: what i sends j is n + (i + j) % 3 elements (symmetric, as in place needs), with gaps.
        std::vector<int> vcounts(n_ranks), vdispls(n_ranks);
        int at = 0;
        for (int j = 0; j < size; ++j) {
            vcounts[static_cast<std::size_t>(j)] = n + (me + j) % 3;
            vdispls[static_cast<std::size_t>(j)] = at;
            at += vcounts[static_cast<std::size_t>(j)] + 4;
            displs[static_cast<std::size_t>(j)] = static_cast<int>(j * (un + n_ranks + 8));
        }
        const std::size_t v_bytes = static_cast<std::size_t>(at) * word;
        const std::size_t gv_bytes = n_ranks * (un + n_ranks + 8) * word;

        for (int way = 0; way < 4; ++way) {  // device to device, host to device, device to host, in place
            const bool sdev = way != 1, rdev = way != 2, in_place = way == 3;
#if defined(MPICH_VERSION)
            // MPICH 4.0.2 itself (host buffers, no shunt) crashes in the large in-place calls of
            // this sequence (MPI_Reduce at root 1 from 4096 elements, for one): in place, small only.
            if (in_place && n > 100) continue;
#endif
            char what[128];
            const auto name = [&](const char* op) {
                std::snprintf(what, sizeof what, "%s of %d elements, way %d", op, n, way);
                return what;
            };
            compare(
                name("MPI_Allreduce"), un * word, un * word, sdev, rdev, in_place,
                [&](const void* s, void* r) {
                    check_mpi(MPI_Allreduce(s, r, n, MPI_UNSIGNED, MPI_SUM, comm), "MPI_Allreduce");
                },
                [&](const void* s, void* r) {
                    check_mpi(PMPI_Allreduce(s, r, n, MPI_UNSIGNED, MPI_SUM, comm), "PMPI_Allreduce");
                });
            // In place only at the root; the other ranks send from a buffer of their own.
            const int root = 1 % size;
            compare(
                name("MPI_Reduce"), un * word, un * word, sdev, rdev, in_place && me == root,
                [&](const void* s, void* r) {
                    check_mpi(MPI_Reduce(s, r, n, MPI_UNSIGNED, MPI_MAX, root, comm), "MPI_Reduce");
                },
                [&](const void* s, void* r) {
                    check_mpi(PMPI_Reduce(s, r, n, MPI_UNSIGNED, MPI_MAX, root, comm), "PMPI_Reduce");
                });
            compare(
                name("MPI_Reduce_scatter_block"), n_ranks * un * word, (in_place ? n_ranks : 1) * un * word, sdev, rdev,
                in_place,
                [&](const void* s, void* r) {
                    check_mpi(MPI_Reduce_scatter_block(s, r, n, MPI_UNSIGNED, MPI_SUM, comm),
                              "MPI_Reduce_scatter_block");
                },
                [&](const void* s, void* r) {
                    check_mpi(PMPI_Reduce_scatter_block(s, r, n, MPI_UNSIGNED, MPI_SUM, comm),
                              "PMPI_Reduce_scatter_block");
                },
                un * word);  // in place, the input past the block may stay as it was
            compare(
                name("MPI_Reduce_scatter"), total * word,
                (in_place ? total : static_cast<std::size_t>(parts[static_cast<std::size_t>(me)])) * word, sdev, rdev,
                in_place,
                [&](const void* s, void* r) {
                    check_mpi(MPI_Reduce_scatter(s, r, parts.data(), MPI_UNSIGNED, MPI_BXOR, comm),
                              "MPI_Reduce_scatter");
                },
                [&](const void* s, void* r) {
                    check_mpi(PMPI_Reduce_scatter(s, r, parts.data(), MPI_UNSIGNED, MPI_BXOR, comm),
                              "PMPI_Reduce_scatter");
                },
                static_cast<std::size_t>(parts[static_cast<std::size_t>(me)]) * word);
            // n contiguous words from each rank into the gapped layout (the gaps must stay as they were).
            compare(
                name("MPI_Allgather"), un * word, n_ranks * 2 * un * word, sdev, rdev, in_place,
                [&](const void* s, void* r) {
                    check_mpi(MPI_Allgather(s, n, MPI_UNSIGNED, r, 1, gapped, comm), "MPI_Allgather");
                },
                [&](const void* s, void* r) {
                    check_mpi(PMPI_Allgather(s, n, MPI_UNSIGNED, r, 1, gapped, comm), "PMPI_Allgather");
                });
            compare(
                name("MPI_Allgatherv"), static_cast<std::size_t>(parts[static_cast<std::size_t>(me)]) * word, gv_bytes,
                sdev, rdev, in_place,
                [&](const void* s, void* r) {
                    check_mpi(MPI_Allgatherv(s, parts[static_cast<std::size_t>(me)], MPI_UNSIGNED, r, parts.data(),
                                             displs.data(), MPI_UNSIGNED, comm),
                              "MPI_Allgatherv");
                },
                [&](const void* s, void* r) {
                    check_mpi(PMPI_Allgatherv(s, parts[static_cast<std::size_t>(me)], MPI_UNSIGNED, r, parts.data(),
                                              displs.data(), MPI_UNSIGNED, comm),
                              "PMPI_Allgatherv");
                });
            compare(
                name("MPI_Alltoall"), n_ranks * un * word, n_ranks * un * word, sdev, rdev, in_place,
                [&](const void* s, void* r) {
                    check_mpi(MPI_Alltoall(s, n, MPI_UNSIGNED, r, n, MPI_UNSIGNED, comm), "MPI_Alltoall");
                },
                [&](const void* s, void* r) {
                    check_mpi(PMPI_Alltoall(s, n, MPI_UNSIGNED, r, n, MPI_UNSIGNED, comm), "PMPI_Alltoall");
                });
            compare(
                name("MPI_Alltoallv"), v_bytes, v_bytes, sdev, rdev, in_place,
                [&](const void* s, void* r) {
                    check_mpi(MPI_Alltoallv(s, vcounts.data(), vdispls.data(), MPI_UNSIGNED, r, vcounts.data(),
                                            vdispls.data(), MPI_UNSIGNED, comm),
                              "MPI_Alltoallv");
                },
                [&](const void* s, void* r) {
                    check_mpi(PMPI_Alltoallv(s, vcounts.data(), vdispls.data(), MPI_UNSIGNED, r, vcounts.data(),
                                             vdispls.data(), MPI_UNSIGNED, comm),
                              "PMPI_Alltoallv");
                });
            // One buffer: the root's goes out, the others' come in (two gapped elements).
            if (way == 0 || way == 2)
                compare(
                    name("MPI_Bcast"), 0, 2 * 2 * un * word, false, rdev, true,
                    [&](const void*, void* b) { check_mpi(MPI_Bcast(b, 2, gapped, 0, comm), "MPI_Bcast"); },
                    [&](const void*, void* b) { check_mpi(PMPI_Bcast(b, 2, gapped, 0, comm), "PMPI_Bcast"); });
        }
        MPI_Type_free(&gapped);
    }
    if (me == 0)
        std::printf("gpu_coll: %d calls at %d ranks, device equal to the library on host\n", gpu_test::checked, size);
    MPI_Finalize();
    return 0;
}
