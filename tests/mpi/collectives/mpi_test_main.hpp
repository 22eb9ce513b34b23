// tests/mpi/collectives/mpi_test_main.hpp: doctest main for MPI tests: MPI_Init, quiet non-root ranks, one exit code for all ranks.
#pragma once

#define DOCTEST_CONFIG_IMPLEMENT
#include <shunt/errors.hpp>  // before <mpi.h>: keeps the C++ bindings out

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

/// The virtual topologies the MPI tests run under, for `world` ranks: 2x2, 4x1, 1x4 style block
/// nodes, uneven 3+1, non-block placement, and several levels.
inline std::vector<std::string> test_specs(int world) {
    std::string alternate = "node=[", lonely = "node=[";
    for (int r = 0; r < world; ++r) {
        if (r) {
            alternate += ',';
            lonely += ',';
        }
        alternate += std::to_string(r % 2);
        lonely += std::to_string(r == 1 ? 1 : 0);  // rank 1 alone, the rest together
    }
    alternate += "]";
    lonely += "]";
    return {"",  // discovered (package, node)
            "node=2",  // 2 ranks per node
            "node=1",  // one rank per node
            "node=" + std::to_string(world),  // one node
            "node=3,1",  // uneven, block
            alternate,  // even, non-block
            lonely,  // uneven, non-block
            "node=2,1;switch=3",  // two uneven levels
            "package=1;node=2;switch=4"};
}

inline int run_mpi_doctest(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    doctest::Context ctx;
    ctx.applyCommandLine(argc, argv);
    if (rank != 0) ctx.setOption("minimal", true);  // other ranks print failures only
    int res = ctx.run();
    int worst = res;
    MPI_Allreduce(&res, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return worst;
}
