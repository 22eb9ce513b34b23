/* tests/interpose/flow_env.c: prints, from rank 0 after MPI_Init, the transport variables flow splitting may set (run_flow_ucx.sh reads them). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        const char* names[] = {"UCX_NET_DEVICES", "UCX_MAX_RNDV_LANES", "UCX_IB_NUM_PATHS"};
        for (int i = 0; i < 3; ++i) {
            const char* v = getenv(names[i]);
            printf("%s=%s\n", names[i], v != NULL ? v : "(unset)");
        }
    }
    MPI_Finalize();
    return 0;
}
